"""The simulator's public records (KafkaRecord, Simulation) and its constants."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from lakehouse.verify.truth import read_truth, read_truth_frames, write_truth_files  # noqa: F401 (the simulator's truth API)

Row = dict[str, Any]
Key = tuple[Any, ...]

WORKLOAD_FILE = "workload.yml"
TRUTH_FORMAT = 1
START = datetime(2026, 1, 5, 9, 0, 0, tzinfo=timezone.utc)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_OPS = ("insert", "update", "delete")
_INT_RANGES = {"smallint": 32_767, "int": 2_147_483_647, "bigint": 9_223_372_036_854_775_807}


# =========================================================================== public records


@dataclass(frozen=True)
class KafkaRecord:
    """One record as the connector hands it to Kafka (value None = tombstone)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int = 0


@dataclass
class Simulation:
    """What a run produced.

    records: in production order (global, across topics; per topic the order Kafka keeps).
    truth: source name -> final rows, sorted by primary key. Values are int, str, bool, float,
      Decimal (at the declared scale), date, and timezone-aware UTC datetimes, or None.
    stats: counts per source and op, chaos applied, LSNs and times (JSON-serialisable).
    history: source name -> every version the database committed, with `_valid_from`, `_valid_to`
      (the next version's commit time; None: still valid) and `_deleted`, at Debezium's `ts_ms`
      precision (the snapshot's rows at the snapshot's time): the truth of an as-of view.
    """

    records: list[KafkaRecord]
    truth: dict[str, list[dict[str, Any]]]
    stats: dict[str, Any]
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


