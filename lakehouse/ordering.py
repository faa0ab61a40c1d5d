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

`RULES` is the one registry of these rules: for each, the Debezium `value.source` fields it
reads, its Python value (`lakehouse.bronze.debezium`, the specification), its Spark SQL
column (`lakehouse.bronze.fast_sql`), and what the JVM decoder
(`lakehouse/jvm/cdcenrich/DebeziumDecoder.java`, method `sequence`) must match. Both fast
passes compute the Python value within a range and leave every other record to Python;
tests/integration/test_ordering.py holds the three together.

Importable without Spark: the SQL builders import pyspark when called.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping

from lakehouse.errors import CdcEnrichError, OrderingError

if TYPE_CHECKING:
    from pyspark.sql import Column as SqlColumn

MAX_SEQUENCE = 10**38 - 1
_BINLOG_NUMBER = re.compile(r"(\d+)$")
_D38 = "decimal(38,0)"
_PRINTABLE_ASCII = r"^[ -~]*$"

# (fields, op, partition, offset) -> the sequence; `fields`: the rule's source fields, non-null.
PythonValue = Callable[[Mapping[str, Any], str, int, int], Decimal]
# The same over Spark columns -> (sequence, the fast pass may use it: Python agrees exactly).
SqlValue = Callable[[Mapping[str, "SqlColumn"], "SqlColumn", "SqlColumn", "SqlColumn"], "tuple[SqlColumn, SqlColumn]"]


# --------------------------------------------------------------------------- the values


def postgres_sequence(lsn: int, op: str) -> Decimal:
    position = 0 if op == "d" else 1
    return _checked(lsn * 10 + position)


def postgres_lsn(sequence: Decimal | int) -> int:
    """The LSN a postgres sequence was made from (`postgres_sequence`'s inverse; the position
    among changes sharing that LSN is dropped). A sequence below `postgres_sequence(lsn, op)`
    for every op belongs to an earlier LSN."""
    return int(sequence) // 10


def mysql_sequence(binlog_file: str, pos: int, row: int) -> Decimal:
    match = _BINLOG_NUMBER.search(binlog_file or "")
    if not match:
        raise OrderingError(f"binlog file name {binlog_file!r} does not end in a number")
    return _checked(int(match.group(1)) * 10**20 + pos * 10**6 + row)


def ts_ms_sequence(ts_ms: int, partition: int, offset: int) -> Decimal:
    return _checked(ts_ms * 10**24 + partition * 10**18 + offset)


def _checked(value: int) -> Decimal:
    if value < 0 or value > MAX_SEQUENCE:
        raise OrderingError(f"sequence {value} does not fit decimal(38,0)")
    return Decimal(value)


# --------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class OrderingRule:
    """One ordering rule in its three implementations, so they are declared (and tested) together."""

    name: str
    fields: tuple[str, ...]  # Debezium `value.source` fields it needs, in the order they are checked
    python: PythonValue  # the specification; raises ValueError when the fields give no valid sequence
    sql: SqlValue  # the SQL twin, exact where its second column is true
    jvm: str  # what DebeziumDecoder.sequence computes, and when it defers to Python
    # Every record of one snapshot gets one sequence, so silver can find a snapshot's rows in
    # bronze and reconcile a completed snapshot (lakehouse.silver.snapshots).
    snapshot_shares_sequence: bool = False


def _postgres_python(fields: Mapping[str, Any], op: str, partition: int, offset: int) -> Decimal:
    """Kafka coordinates unused: a re-delivered change keeps its sequence."""
    return postgres_sequence(fields["lsn"], op)


def _mysql_python(fields: Mapping[str, Any], op: str, partition: int, offset: int) -> Decimal:
    """The binlog coordinates alone order a MySQL change."""
    return mysql_sequence(fields["file"], fields["pos"], fields["row"])


def _ts_ms_python(fields: Mapping[str, Any], op: str, partition: int, offset: int) -> Decimal:
    """No log position: the Kafka coordinates break ties between equal timestamps."""
    return ts_ms_sequence(fields["ts_ms"], partition, offset)


def _true(condition: SqlColumn) -> SqlColumn:
    """SQL three-valued logic -> two: NULL counts as false."""
    from pyspark.sql import functions as F

    return F.coalesce(condition, F.lit(False))


def _postgres_sql(fields: Mapping[str, SqlColumn], op: SqlColumn, partition: SqlColumn, offset: SqlColumn) -> tuple[SqlColumn, SqlColumn]:
    """Exact for every non-negative bigint LSN (a negative one is Python's to reject)."""
    from pyspark.sql import functions as F

    lsn = fields["lsn"]
    position = F.when(op == F.lit("d"), F.lit(0)).otherwise(F.lit(1))
    return lsn.cast(_D38) * F.lit(10) + position, _true(lsn >= 0)


def _mysql_sql(fields: Mapping[str, SqlColumn], op: SqlColumn, partition: SqlColumn, offset: SqlColumn) -> tuple[SqlColumn, SqlColumn]:
    """Exact for an ASCII file name ending in at most 17 digits, pos < 10^14 and row < 10^6."""
    from pyspark.sql import functions as F

    file, pos, row = fields["file"], fields["pos"], fields["row"]
    number = F.regexp_extract(file, r"([0-9]+)$", 1)
    ok = (
        _true(file.rlike(_PRINTABLE_ASCII) & file.rlike(r"[0-9]$"))
        & _true(F.length(number).between(1, 17))
        & _true(pos.between(0, 10**14 - 1))
        & _true(row.between(0, 10**6 - 1))
    )
    # try_cast: a name without trailing digits gives '', which cast would fail the query on (ANSI)
    value = number.try_cast(_D38) * F.lit(Decimal(10**20)).cast("decimal(21,0)") + pos.cast(_D38) * F.lit(10**6) + row.cast(_D38)
    return value, ok


def _ts_ms_sql(fields: Mapping[str, SqlColumn], op: SqlColumn, partition: SqlColumn, offset: SqlColumn) -> tuple[SqlColumn, SqlColumn]:
    """Exact for 0 <= ts_ms < 10^13, partition < 10^6 and a non-negative offset."""
    from pyspark.sql import functions as F

    ts_ms = fields["ts_ms"]
    value = (
        ts_ms.cast(_D38) * F.lit(Decimal(10**24)).cast("decimal(25,0)")
        + partition.cast(_D38) * F.lit(Decimal(10**18)).cast("decimal(19,0)")
        + offset.cast(_D38)
    )
    return value, _true(ts_ms.between(0, 10**13 - 1) & (partition < 10**6) & (offset >= 0))


RULES: Mapping[str, OrderingRule] = MappingProxyType({
    r.name: r
    for r in (
        OrderingRule(
            "postgres", ("lsn",), _postgres_python, _postgres_sql,
            jvm="lsn * 10 + (0 for op 'd', else 1) when lsn >= 0; otherwise not fast",
            snapshot_shares_sequence=True,  # Debezium stamps every snapshot record with its xlogStart
        ),
        OrderingRule(
            "mysql", ("file", "pos", "row"), _mysql_python, _mysql_sql,
            jvm="file number * 10^20 + pos * 10^6 + row when the file name is printable ASCII ending "
                "in 1..17 digits, 0 <= pos < 10^14 and 0 <= row < 10^6; otherwise not fast",
        ),
        OrderingRule(
            "ts_ms", ("ts_ms",), _ts_ms_python, _ts_ms_sql,
            jvm="ts_ms * 10^24 + partition * 10^18 + offset when 0 <= ts_ms < 10^13, "
                "0 <= partition < 10^6 and offset >= 0; otherwise not fast",
        ),
    )
})


def rule(name: str) -> OrderingRule:
    """The declared rule `name`; the pipeline loader only lets declared names through."""
    try:
        return RULES[name]
    except KeyError:
        raise CdcEnrichError(f"unknown ordering rule {name!r} (expected one of {', '.join(RULES)})") from None
