"""Transactions and their emission as Debezium records (envelope, headers, LSNs, snapshot markers)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from lakehouse.declaration import (
    Pipeline,
    Source,
)
from lakehouse.verify.truth import read_truth, read_truth_frames, write_truth_files  # noqa: F401 (the simulator's truth API)
from testkit.debezium_format import (
    UNAVAILABLE_VALUE,
    EnvelopeCodec,
    default_partition,
    source_info,
)
from testkit.simulator.database import _Database
from testkit.simulator.records import KafkaRecord, Row
from testkit.simulator.workload import Workload

# =========================================================================== transactions and emission


@dataclass
class _Change:
    """One row change of a transaction, before Debezium's encoding."""

    source: Source
    op: str  # c, u, d
    old: Row | None  # for the create half of a primary-key change: the row under its old key
    new: Row | None
    headers: tuple[tuple[str, bytes], ...] = ()
    shares_lsn: bool = False  # the create half of a primary-key update: same WAL record as the delete


@dataclass
class _Tx:
    commit_us: int
    changes: list[_Change] = field(default_factory=list)


@dataclass
class _Item:
    """A record on the production timeline (time in simulated microseconds, seq breaks ties)."""

    record: KafkaRecord
    time_us: int
    seq: int
    phase: str  # snapshot | stream | resnapshot
    run: int = 0  # which run of the connector produced it (a restart starts a new one)


class _Emitter:
    """Turns committed changes into Debezium records: LSNs, txIds, source blocks, images, tombstones."""

    def __init__(self, pipeline: Pipeline, workload: Workload, rng: random.Random, schemas_enabled: bool, partitions: int) -> None:
        self.pipeline = pipeline
        self.rng = rng
        self.partitions = partitions
        self.db_name = workload.database
        self.names = {s.name: schema_and_table(pipeline, s) for s in pipeline.sources.values()}
        self.codecs = {
            s.name: EnvelopeCodec(s, f"{pipeline.kafka.topic_prefix}.{'.'.join(self.names[s.name])}", schemas_enabled)
            for s in pipeline.sources.values()
        }
        self.toast = {s.name: workload.hints(s).toast if s.replica_identity == "default" else () for s in pipeline.sources.values()}
        self.items: list[_Item] = []
        #: The database's version log, independent of what reaches Kafka (an outage loses
        #: records, not versions): (source, key, row or None for a delete, LSN, commit µs).
        self.versions: list[tuple[str, tuple[Any, ...], Row | None, int, int]] = []
        self.appended = 0  # items ever appended (their `seq`; an outage removes items)
        self.wal = 24_000_000 + rng.randrange(0, 8_000_000, 8)
        self.tx_id = 700 + rng.randrange(300)
        self.last_commit_end: int | None = None
        self.last_lsn = 0
        self.last_proc_us = 0  # the connector handles one event at a time: processing time never goes back
        self.ops: dict[str, dict[str, int]] = {s: {"r": 0, "c": 0, "u": 0, "d": 0, "tombstone": 0} for s in pipeline.sources}
        self.snapshot_lsn = 0
        self.snapshot_tx_id = 0

    # ---------------------------------------------------------------- snapshot

    def snapshot(self, db: _Database, start_us: int, phase: str = "snapshot") -> int:
        """All rows at one LSN in one transaction; returns the end time. `phase`: `snapshot`
        (the initial one, whose LSN the stats report) or `resnapshot` (after an outage).

        As Debezium 3.6.3 does it (seen against PostgreSQL 15): tables in `table.include.list`
        order (the pipeline's source order), and one `source.ts_ms` (the snapshot's start) on
        every snapshot record of every table.
        """
        self.tx_id += 1
        lsn, tx_id = self.wal, self.tx_id
        if phase == "snapshot":
            self.snapshot_lsn, self.snapshot_tx_id = lsn, tx_id
        tables = list(self.pipeline.sources.values())
        clock = start_us
        for t_index, src in enumerate(tables):
            rows = list(db.tables[src.name].rows.values())
            table_ts = start_us
            for r_index, row in enumerate(rows):
                clock += self.rng.randrange(20, 400)
                marker = _snapshot_marker(t_index == 0, t_index == len(tables) - 1, r_index == 0, r_index == len(rows) - 1)
                info = self._info(src, table_ts, marker, lsn, None, tx_id)
                self._add(src, "r", None, row, (), info, clock, phase)
                if phase == "snapshot":  # the rows as the capture first finds them, at the snapshot's time
                    self.versions.append((src.name, tuple(row[k] for k in src.primary_key), dict(row), lsn, table_ts))
            clock += self.rng.randrange(2_000, 30_000)
        self.wal += self.rng.randrange(200, 4_000, 8)
        self.last_proc_us = clock
        return clock

    # ---------------------------------------------------------------- streaming

    def commit(self, tx: _Tx) -> None:
        """Assign WAL positions in change order, then encode every change (plus tombstones)."""
        self.tx_id += self.rng.choice((1, 1, 1, 2, 3))
        self.wal += self.rng.choice((0, 0, 0, self.rng.randrange(8, 4_000, 8)))  # other sessions' WAL
        proc_us = max(tx.commit_us + self.rng.randrange(2_000, 150_000), self.last_proc_us + 50)
        lsn = self.wal
        for change in tx.changes:
            if not change.shares_lsn:
                lsn = self.wal
                self.wal += self.rng.randrange(48, 640, 8)
            proc_us += self.rng.randrange(10, 300)
            self._emit(change, lsn, tx.commit_us, proc_us)
            self.last_lsn, self.last_proc_us = lsn, proc_us
        self.last_commit_end = self.wal + 32  # the COMMIT record, then the next free position
        self.wal = self.last_commit_end

    def _emit(self, change: _Change, lsn: int, commit_us: int, proc_us: int) -> None:
        src = change.source
        before, after = self._images(change)
        row = change.old if change.op == "d" else change.new
        assert row is not None
        self.versions.append((src.name, tuple(row[k] for k in src.primary_key), None if change.op == "d" else dict(row), lsn, commit_us))
        info = self._info(src, commit_us, "false", lsn, self.last_commit_end, self.tx_id)
        self._add(src, change.op, before, after, change.headers, info, proc_us, "stream", change.old if change.op == "d" else change.new)

    def _images(self, change: _Change) -> tuple[Row | None, Row | None]:
        """`before`/`after` as the replica identity and TOAST storage make them."""
        src = change.source
        full = src.replica_identity == "full"
        if change.op == "c" and change.old is None:
            return None, change.new
        if change.op == "d":
            assert change.old is not None
            return (change.old if full else {k: change.old[k] for k in src.primary_key}), None
        assert change.old is not None and change.new is not None
        # PostgreSQL logs an unchanged out-of-line (TOASTed) value of the new tuple by
        # reference, so Debezium sends the placeholder: on updates, and (seen with Debezium
        # 3.6.3) on the create half of a primary-key change too.
        after = dict(change.new)
        for column in self.toast[src.name]:
            if after[column] == change.old[column]:
                after[column] = UNAVAILABLE_VALUE
        if change.op == "c":
            return None, after
        return (change.old if full else None), after

    def _info(self, src: Source, commit_us: int, marker: str, lsn: int, last_commit: int | None, tx_id: int) -> dict[str, Any]:
        schema, table = self.names[src.name]
        return source_info(
            server=self.pipeline.kafka.topic_prefix, db=self.db_name, schema=schema, table=table,
            commit_us=commit_us, snapshot=marker, lsn=lsn, last_commit_lsn=last_commit, tx_id=tx_id,
        )

    def _add(self, src: Source, op: str, before: Row | None, after: Row | None, headers: tuple[tuple[str, bytes], ...],
             info: dict[str, Any], proc_us: int, phase: str, key_row: Row | None = None) -> None:
        codec = self.codecs[src.name]
        key = codec.key(key_row if key_row is not None else after or before or {})
        value = codec.value(op, before, after, info, proc_us, proc_us * 1000 + self.rng.randrange(1000))
        partition = default_partition(key, self.partitions) if self.partitions > 1 else 0
        self._append(KafkaRecord(src.topic, key, value, headers, partition), proc_us, phase)
        self.ops[src.name][op] += 1
        if op == "d":  # the tombstone copies the delete's key and headers
            self._append(KafkaRecord(src.topic, key, None, headers, partition), proc_us, phase)
            self.ops[src.name]["tombstone"] += 1

    def _append(self, record: KafkaRecord, time_us: int, phase: str) -> None:
        self.items.append(_Item(record, time_us, self.appended, phase))
        self.appended += 1


def schema_and_table(pipeline: Pipeline, source: Source) -> tuple[str, str]:
    """The PostgreSQL schema and table behind a topic `<prefix>.<schema>.<table>`."""
    prefix = pipeline.kafka.topic_prefix + "."
    rest = source.topic[len(prefix):] if source.topic.startswith(prefix) else ""
    if rest.count(".") == 1:
        schema, table = rest.split(".")
        return schema, table
    return pipeline.kafka.source_schema, source.name


def _snapshot_marker(first_table: bool, last_table: bool, first_row: bool, last_row: bool) -> str:
    """Debezium's `source.snapshot` for a snapshot record (RelationalSnapshotChangeEventSource)."""
    if last_row and last_table:
        return "last"
    if first_row and first_table:
        return "first"
    if last_row:
        return "last_in_data_collection"
    if first_row:
        return "first_in_data_collection"
    return "true"


