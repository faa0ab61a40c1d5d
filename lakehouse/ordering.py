"""One comparable number per change, from the source's declared ordering rule (seed 001).

Per key the greatest sequence is the current version; an equal sequence is a duplicate (a
re-delivered event), a smaller one is out of order. Values fit `decimal(38,0)`.

- postgres: the change's LSN, then its position among events sharing that LSN (a primary-key
  update emits the old key's delete and the new key's create at one LSN: delete first).
  Kafka coordinates are deliberately not used: a re-delivered event has new offsets but is
  the same change.
- mysql: binlog file number, position, row within the event.
- ts_ms: source ts_ms, then Kafka partition and offset (the weakest rule: sources without a
  log position; a re-delivery counts as a newer change).
"""

from __future__ import annotations

import re
from decimal import Decimal

MAX_SEQUENCE = 10**38 - 1
_BINLOG_NUMBER = re.compile(r"(\d+)$")


def postgres_sequence(lsn: int, op: str) -> Decimal:
    position = 0 if op == "d" else 1
    return _checked(lsn * 10 + position)


def mysql_sequence(binlog_file: str, pos: int, row: int) -> Decimal:
    match = _BINLOG_NUMBER.search(binlog_file or "")
    if not match:
        raise ValueError(f"binlog file name {binlog_file!r} does not end in a number")
    return _checked(int(match.group(1)) * 10**20 + pos * 10**6 + row)


def ts_ms_sequence(ts_ms: int, partition: int, offset: int) -> Decimal:
    return _checked(ts_ms * 10**24 + partition * 10**18 + offset)


def _checked(value: int) -> Decimal:
    if value < 0 or value > MAX_SEQUENCE:
        raise ValueError(f"sequence {value} does not fit decimal(38,0)")
    return Decimal(value)
