"""Verify the lake against the database itself: the database is the truth.

`verify_against_postgres` first brings the pipeline up to date with the database (see
"Caught up" below), then compares, in both directions and with a row-hash checksum:
- every gold view with the same join run INSIDE PostgreSQL (SQL generated from the View
  declaration: its inner/left/outer joins through the foreign keys, its selected columns);
- every silver current table (live rows) with its source table.

Caught up: a sound criterion, in three steps
--------------------------------------------
1. Database -> Kafka. Let T = pg_current_wal_lsn() when verification starts (the workload is
   over). Debezium confirms an LSN to its replication slot only after Kafka Connect has
   committed the offsets of the records up to it, i.e. after the broker acknowledged them; the
   walsender streams transactions in commit order. So once the slot's `confirmed_flush_lsn`
   has passed T, every change committed before T is in Kafka (`wait_for_lsn`). (The connector's heartbeat action query,
   see `devstack.connect`, keeps the confirmed LSN moving past WAL that no captured table
   wrote, e.g. commit records and other tables' changes.)
   Why not "max `_source_lsn` in bronze >= pg_current_wal_lsn()": the current WAL position is
   past the last captured change (commit records, checkpoints, other tables), so that test
   never passes; and a maximum over all topics says nothing about a topic lagging behind.
2. Kafka -> bronze. After step 1, the end offsets of the pipeline's topics are final. Bronze
   (plus quarantine) records every record's topic, partition and offset; it has caught up when,
   for every partition, its greatest offset is the end offset - 1. (The Connect standalone
   worker's producer is not transactional, so there are no control records at the end of a
   partition.)
3. Bronze -> silver -> gold. Each runs with availableNow after bronze caught up, which by
   definition processes every bronze/silver commit that existed when it started.
The drain runs bronze, silver and gold in rounds until step 2 holds (normally one round).

The comparison assumes a quiet database: no writes to captured tables during verification.
"""

from __future__ import annotations

import hashlib
import re
import struct
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from lakehouse.declaration import Column, Pipeline, Source, View
from lakehouse.entry import resolve_bootstrap
from lakehouse.kafka import KafkaConnection, as_connection, kafka_connection
from lakehouse.errors import CdcEnrichError, VerificationError
from lakehouse.sqltext import COMMIT_TIME, POSTGRES, quote_qualified, render_view

_EPOCH = datetime(1970, 1, 1)
EXAMPLES = 5  # differences shown per category in a report

Key = tuple[Any, ...]


# --------------------------------------------------------------------------- report


@dataclass
class TableDiff:
    """One relation compared with PostgreSQL: rows missing from the lake, extra in it, or different."""

    name: str
    key_columns: tuple[str, ...]
    pg_rows: int = 0
    lake_rows: int = 0
    missing: list[Key] = field(default_factory=list)  # in PostgreSQL, not in the lake
    extra: list[Key] = field(default_factory=list)  # in the lake, not in PostgreSQL
    different: list[tuple[Key, dict[str, tuple[Any, Any]]]] = field(default_factory=list)
    duplicate_keys: list[Key] = field(default_factory=list)  # the lake holds one key twice
    pg_checksum: str = ""
    lake_checksum: str = ""

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.different or self.duplicate_keys) and self.pg_checksum == self.lake_checksum

    def render(self) -> str:
        verdict = "OK" if self.ok else "DIFFERENT"
        lines = [
            f"{self.name}: {verdict} (postgres {self.pg_rows} rows, lake {self.lake_rows}; "
            f"checksum postgres {self.pg_checksum} lake {self.lake_checksum})"
        ]
        keys = ",".join(self.key_columns)
        for label, items in (("missing from the lake", self.missing), ("extra in the lake", self.extra), ("duplicate keys in the lake", self.duplicate_keys)):
            if items:
                shown = "; ".join(str(k) for k in items[:EXAMPLES])
                lines.append(f"  {len(items)} {label} ({keys}): {shown}{' ...' if len(items) > EXAMPLES else ''}")
        if self.different:
            lines.append(f"  {len(self.different)} rows differ ({keys}):")
            for key, cols in self.different[:EXAMPLES]:
                detail = ", ".join(f"{c}: postgres {_short(p)} lake {_short(l)}" for c, (p, l) in cols.items())
                lines.append(f"    {key}: {detail}")
        return "\n".join(lines)


@dataclass
class CatchUp:
    """How the pipeline was brought up to date: the LSN target, the slot, the rounds run."""

    target_lsn: str = ""
    confirmed_lsn: str = ""
    connector_wait_s: float = 0.0
    drain_s: float = 0.0
    rounds: int = 0
    end_offsets: dict[str, int] = field(default_factory=dict)
    stage_s: dict[str, float] = field(default_factory=dict)  # seconds per stage over all rounds

    def render(self) -> str:
        total = sum(self.end_offsets.values())
        stages = ", ".join(f"{k} {v:.1f}s" for k, v in self.stage_s.items())
        return (
            f"caught up: database LSN {self.target_lsn} confirmed by the connector's slot at {self.confirmed_lsn} "
            f"after {self.connector_wait_s:.1f}s; bronze/silver/gold drained in {self.rounds} round(s), "
            f"{self.drain_s:.1f}s ({stages}); {total} Kafka records in the pipeline's topics"
        )


@dataclass
class PostgresVerifyReport:
    """The verdict of `verify_against_postgres`: `ok` and `render()`."""

    catch_up: CatchUp
    silver: list[TableDiff] = field(default_factory=list)
    gold: list[TableDiff] = field(default_factory=list)
    seconds: float = 0.0
    not_compared: list[str] = field(default_factory=list)  # views PostgreSQL cannot state, and why

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.silver + self.gold)

    def render(self) -> str:
        lines = [f"verify against PostgreSQL: {'OK' if self.ok else 'DIFFERENCES FOUND'} ({self.seconds:.1f}s)", self.catch_up.render()]
        lines += [d.render() for d in self.gold]
        lines += self.not_compared
        lines += [d.render() for d in self.silver]
        return "\n".join(lines)


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 12] + f"...({len(text)} chars)"


# --------------------------------------------------------------------------- SQL inside PostgreSQL


def _q(*names: str) -> str:
    """A (qualified) PostgreSQL identifier: `lakehouse.sqltext`'s quoting in its PostgreSQL dialect."""
    return quote_qualified(*names, dialect=POSTGRES)


def postgres_view_sql(pipeline: Pipeline, view: View | str) -> str:
    """The view as one PostgreSQL statement over the source tables: the same left-deep joins as
    `lakehouse.verify.oracle.oracle_sql`, both written by `lakehouse.sqltext.render_view`."""
    view = pipeline.view(view)
    schema = pipeline.kafka.source_schema
    relations = {name: _q(schema, name) for name in {view.table_of(a) for a in view.aliases}}
    return render_view(pipeline, view, relations, POSTGRES)


# --------------------------------------------------------------------------- as-of views: a history kept by triggers


def as_of_sources(pipeline: Pipeline) -> list[Source]:
    """The sources some as-of view reads (its events and every joined table): each needs a history."""
    names = {view.table_of(alias) for view in pipeline.views.values() if view.temporal for alias in view.aliases}
    return [s for s in pipeline.sources.values() if s.name in names]


def history_table(pipeline: Pipeline, source: Source) -> str:
    """`<schema>.<source>__history`: every version of the table's rows, written by a trigger."""
    return _q(pipeline.kafka.source_schema, f"{source.name}__history")


def history_statements(pipeline: Pipeline) -> list[str]:
    """The DDL that keeps, inside the database, a history of each table an as-of view reads, so
    that `verify --against postgres` can run the temporal join there: a table of the source's
    columns plus the writing transaction's id (`_xid`: its commit time, with
    `track_commit_timestamp = on`, is the version's start), `_deleted` and an ordinal, filled by
    an AFTER row trigger (a delete, and the old key of a key change, as a deletion version, as
    Debezium emits them). Idempotent; run it before the rows to keep history of are written."""
    out = []
    for source in as_of_sources(pipeline):
        table, history = _q(pipeline.kafka.source_schema, source.name), history_table(pipeline, source)
        function = _q(pipeline.kafka.source_schema, f"cdc_enrich_history__{source.name}")
        cols = ", ".join(_q(c) for c in source.column_names)
        keys = ", ".join(_q(c) for c in source.primary_key)
        new = ", ".join(f"NEW.{_q(c)}" for c in source.column_names)
        old_key = ", ".join(f"OLD.{_q(c)}" for c in source.primary_key)
        moved = " OR ".join(f"OLD.{_q(c)} IS DISTINCT FROM NEW.{_q(c)}" for c in source.primary_key)
        out += [
            f"CREATE TABLE IF NOT EXISTS {history} AS SELECT {cols}, 0::bigint AS _xid, false AS _deleted FROM {table} WITH NO DATA",
            f"ALTER TABLE {history} ADD COLUMN IF NOT EXISTS _ord bigserial",
            f"""CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND ({moved})) THEN
    INSERT INTO {history} ({keys}, _xid, _deleted) VALUES ({old_key}, txid_current(), true);
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO {history} ({cols}, _xid, _deleted) VALUES ({new}, txid_current(), false);
  END IF;
  RETURN NULL;
END $$""",
            f"DROP TRIGGER IF EXISTS cdc_enrich_history ON {table}",
            f"CREATE TRIGGER cdc_enrich_history AFTER INSERT OR UPDATE OR DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION {function}()",
        ]
    return out


def history_relation(pipeline: Pipeline, source: Source, capture_start: datetime | None) -> str:
    """A subquery of `source`'s versions as silver history states them: each valid from its
    transaction's commit time (ms, as Debezium's `ts_ms`) to the next version's; a version
    committed before the capture began (the connector's snapshot) is seen from the snapshot's
    time, as the snapshot delivers it."""
    start = "'-infinity'::timestamptz" if capture_start is None else f"'{capture_start.isoformat()}'::timestamptz"
    cols = ", ".join(_q(c) for c in source.column_names)
    keys = ", ".join(_q(c) for c in source.primary_key)
    committed = "date_trunc('milliseconds', pg_xact_commit_timestamp((_xid % 4294967296)::text::xid))"
    return (f"(SELECT {cols}, _deleted, _valid_from, LEAD(_valid_from) OVER (PARTITION BY {keys} ORDER BY _ord) AS _valid_to "
            f"FROM (SELECT {cols}, _deleted, _ord, GREATEST({committed}, {start}) AS _valid_from "
            f"FROM {history_table(pipeline, source)}) AS versions)")


def postgres_as_of_sql(pipeline: Pipeline, view: View | str, capture_start: datetime | None) -> str:
    """An as-of view as one PostgreSQL statement over the trigger-kept histories: the events'
    live versions with their commit time, each join as of it (`lakehouse.sqltext.render_view`)."""
    view = pipeline.view(view)
    relations = {}
    for name in {view.table_of(a) for a in view.aliases}:
        source = pipeline.source(name)
        history = history_relation(pipeline, source, capture_start)
        if name == view.base:
            cols = ", ".join(_q(c) for c in source.column_names)
            history = f"(SELECT {cols}, _valid_from AS {_q(COMMIT_TIME)} FROM {history} AS h WHERE _valid_to IS NULL AND NOT _deleted)"
        relations[name] = history
    return render_view(pipeline, view, relations, POSTGRES)


def snapshot_times(spark: Any, pipeline: Pipeline) -> list[datetime]:
    """The distinct `ts_ms` of the snapshot records (`op: r`) bronze holds of the as-of sources:
    one per snapshot the connector took."""
    from pyspark.sql import functions as F

    from lakehouse.tables import bronze_table

    times: set[int] = set()
    for source in as_of_sources(pipeline):
        rows = spark.table(bronze_table(pipeline, source)).where(F.col("_op") == "r").select("_source_ts_ms").distinct().collect()
        times |= {int(r[0]) for r in rows if r[0] is not None}
    return [datetime.fromtimestamp(0, tz=timezone.utc) + timedelta(milliseconds=t) for t in sorted(times)]


def _as_of_not_comparable(spark: Any, pipeline: Pipeline, dsn: str) -> str | datetime | None:
    """Why the as-of views cannot be compared in the database (a reason), or the capture's start
    (the snapshot's time; None: no snapshot) to compare them with."""
    missing = [history_table(pipeline, s) for s in as_of_sources(pipeline)
               if _pg_fetch(dsn, f"SELECT to_regclass('{history_table(pipeline, s)}')")[0][0] is None]
    if missing:
        return f"an as-of view: the database keeps no history of {', '.join(missing)} (create it with `history_statements`)"
    if not _pg_fetch(dsn, "SELECT current_setting('track_commit_timestamp') = 'on'")[0][0]:
        return "an as-of view: the database does not record commit times (`track_commit_timestamp = on`)"
    snapshots = snapshot_times(spark, pipeline)
    if len(snapshots) > 1:
        return (f"an as-of view: the connector took {len(snapshots)} snapshots, so versions committed while it was "
                "away reached the lake at a snapshot's time, not at their commit time")
    return snapshots[0] if snapshots else None


def view_key_columns(pipeline: Pipeline, view: View) -> tuple[str, ...]:
    """The output columns selecting the base table's primary key: gold's key."""
    return pipeline.view_key(view)


def view_column_types(pipeline: Pipeline, view: View) -> list[Column]:
    """Each output column with the declared type of the source column it selects."""
    return [Column(c.name, pipeline.source(view.table_of(c.alias)).column(c.column).type) for c in view.columns]


# --------------------------------------------------------------------------- canonical values


def canonical(column: Column, value: Any) -> Any:
    """One comparable value per declared type, from either side (psycopg or Spark).

    Timestamps arrive as epoch microseconds from Spark (`unix_micros`, so the Python process's
    time zone plays no part) and as naive datetimes from PostgreSQL (`timestamp` is UTC wall
    time for Debezium); decimals are fixed to the declared scale; `float` (real) to 32 bits.
    """
    if value is None:
        return None
    if column.decimal_scale is not None:
        return Decimal(value).quantize(Decimal(1).scaleb(-column.decimal_scale))
    if column.type == "timestamp":
        if isinstance(value, datetime):
            moment = value if value.tzinfo is None else value.astimezone(timezone.utc).replace(tzinfo=None)
            return (moment - _EPOCH) // timedelta(microseconds=1)
        return int(value)
    if column.type == "float":
        return struct.unpack("f", struct.pack("f", float(value)))[0]
    if column.type == "double":
        return float(value)
    if column.type == "date" and isinstance(value, datetime):
        return value.date()
    return value


def _digest(row: tuple[Any, ...]) -> int:
    return int.from_bytes(hashlib.sha256(repr(row).encode("utf-8")).digest()[:8], "big")


def checksum(rows: Iterable[tuple[Any, ...]]) -> str:
    """Order-independent: the sum of 64-bit row hashes (mod 2^64) and the row count."""
    total, count = 0, 0
    for row in rows:
        total = (total + _digest(row)) & 0xFFFFFFFFFFFFFFFF
        count += 1
    return f"{count}:{total:016x}"


def compare_rows(
    name: str,
    columns: Sequence[Column],
    key_columns: Sequence[str],
    pg_rows: Sequence[tuple[Any, ...]],
    lake_rows: Sequence[tuple[Any, ...]],
) -> TableDiff:
    """Both directions by key, then column by column, plus both sides' checksums."""
    names = [c.name for c in columns]
    key_at = [names.index(k) for k in key_columns]

    def canon(rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return [tuple(canonical(c, v) for c, v in zip(columns, row)) for row in rows]

    pg, lake = canon(pg_rows), canon(lake_rows)
    diff = TableDiff(name, tuple(key_columns), len(pg), len(lake), pg_checksum=checksum(pg), lake_checksum=checksum(lake))
    pg_by_key = {tuple(r[i] for i in key_at): r for r in pg}
    lake_by_key: dict[Key, tuple[Any, ...]] = {}
    for row in lake:
        key = tuple(row[i] for i in key_at)
        if key in lake_by_key:
            diff.duplicate_keys.append(key)
        lake_by_key[key] = row
    diff.missing = sorted((k for k in pg_by_key if k not in lake_by_key), key=repr)
    diff.extra = sorted((k for k in lake_by_key if k not in pg_by_key), key=repr)
    for key in sorted((k for k in pg_by_key if k in lake_by_key), key=repr):
        a, b = pg_by_key[key], lake_by_key[key]
        if a != b:
            diff.different.append((key, {n: (x, y) for n, x, y in zip(names, a, b) if x != y}))
    return diff


# --------------------------------------------------------------------------- reading both sides


def _pg_fetch(dsn: str, statement: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=10) as conn:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute("SET LOCAL TIME ZONE 'UTC'")  # a `timestamp` column is UTC, as Debezium reads it
            return [tuple(r) for r in conn.execute(statement).fetchall()]


def _spark_select(df: Any, columns: Sequence[Column]) -> list[tuple[Any, ...]]:
    """Rows of `df` in column order; timestamps as epoch micros (no Python time zone involved)."""
    from pyspark.sql import functions as F

    exprs = [F.unix_micros(F.col(c.name)).alias(c.name) if c.type == "timestamp" else F.col(c.name) for c in columns]
    return [tuple(r) for r in df.select(*exprs).collect()]


def compare_source(spark: Any, pipeline: Pipeline, source: Source, dsn: str) -> TableDiff:
    """silver.<source> live rows against the PostgreSQL table."""
    from lakehouse.tables import silver_current_table

    cols = ", ".join(_q(c) for c in source.column_names)
    pg_rows = _pg_fetch(dsn, f"SELECT {cols} FROM {_q(pipeline.kafka.source_schema, source.name)}")
    table = silver_current_table(pipeline, source)
    lake_rows = _spark_select(spark.table(table).where("NOT _deleted"), source.columns) if spark.catalog.tableExists(table) else []
    return compare_rows(f"silver {source.name}", source.columns, source.primary_key, pg_rows, lake_rows)


def compare_view(spark: Any, pipeline: Pipeline, view: View, dsn: str, statement: str | None = None) -> TableDiff:
    """gold.<view> against the view's join run inside PostgreSQL (`statement`: another
    statement of it, e.g. an as-of view's over the histories)."""
    from lakehouse.tables import gold_table

    columns = view_column_types(pipeline, view)
    pg_rows = _pg_fetch(dsn, statement or postgres_view_sql(pipeline, view))
    table = gold_table(pipeline, view.name)
    lake_rows = _spark_select(spark.table(table), columns) if spark.catalog.tableExists(table) else []
    return compare_rows(f"gold {view.name}", columns, view_key_columns(pipeline, view), pg_rows, lake_rows)


# --------------------------------------------------------------------------- catching up


def current_lsn(dsn: str) -> tuple[str, int]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        text, number = conn.execute("SELECT pg_current_wal_lsn()::text, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()
    return str(text), int(number)


def replication_name(pipeline: Pipeline) -> str:
    """The connector's slot and publication name: [a-z0-9_], at most 63 characters (PostgreSQL's limit)."""
    return ("cdc_enrich_" + re.sub(r"[^a-z0-9_]", "_", pipeline.name.lower()))[:63]


def replication_slot(pg_dsn: str, pipeline: Pipeline) -> dict[str, Any] | None:
    """The connector's slot as PostgreSQL sees it: active, confirmed_flush_lsn, restart_lsn (None: no slot yet)."""
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute(
            "SELECT active, confirmed_flush_lsn::text, restart_lsn::text, "
            "pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint "
            "FROM pg_replication_slots WHERE slot_name = %s",
            (replication_name(pipeline),),
        ).fetchone()
    if row is None:
        return None
    return {"active": row[0], "confirmed_flush_lsn": row[1], "restart_lsn": row[2], "confirmed_flush": row[3]}


def wait_for_lsn(pg_dsn: str, pipeline: Pipeline, target: int, timeout_s: float) -> str:
    """Until the connector's slot has confirmed an LSN beyond `target`; returns that LSN.

    Debezium confirms an LSN to the slot only from its streaming phase, after Kafka Connect
    committed the offsets of the records up to it (the broker acknowledged them), and the
    walsender streams transactions in commit order: so a confirmed LSN beyond `target` means
    every change committed before `target` is in Kafka. Strictly beyond: while the initial
    snapshot runs the slot sits at its creation point, which may equal `target`; the heartbeat
    action query writes WAL every HEARTBEAT_MS, so a streaming connector always moves past it.
    """
    deadline = time.monotonic() + timeout_s
    slot: dict[str, Any] | None = None
    while True:
        slot = replication_slot(pg_dsn, pipeline)
        if slot is not None and slot["confirmed_flush"] is not None and slot["confirmed_flush"] > target:
            return str(slot["confirmed_flush_lsn"])
        if time.monotonic() > deadline:
            state = "no slot yet" if slot is None else f"confirmed {slot['confirmed_flush_lsn']}, active {slot['active']}"
            raise VerificationError(
                f"the Debezium connector did not confirm LSN {lsn_text(target)} within {timeout_s:g}s "
                f"(slot {replication_name(pipeline)}: {state}): is it running and streaming? see connect_status"
            )
        time.sleep(0.5)


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def wait_for_connector(dsn: str, pipeline: Pipeline, target: int, timeout_s: float) -> str:
    """Step 1: until the connector's slot confirmed an LSN beyond `target`; the confirmed LSN."""
    return wait_for_lsn(dsn, pipeline, target, timeout_s)


def kafka_end_offsets(kafka: str | KafkaConnection, topics: Sequence[str]) -> dict[tuple[str, int], int]:
    """Log end offset of every partition of `topics` (`kafka`: servers, or a secured connection)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(as_connection(kafka).client_config(**{"group.id": "cdc-enrich-verify-postgres", "enable.auto.commit": False}))
    try:
        metadata = consumer.list_topics(timeout=30)
        ends: dict[tuple[str, int], int] = {}
        for topic in topics:
            if topic not in metadata.topics:
                continue
            for partition in metadata.topics[topic].partitions:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
                ends[(topic, partition)] = high
        return ends
    finally:
        consumer.close()


def bronze_positions(spark: Any, pipeline: Pipeline) -> dict[tuple[str, int], int]:
    """Greatest Kafka offset per topic partition that bronze or its quarantine holds."""
    from lakehouse.tables import bronze_table, quarantine_table

    positions: dict[tuple[str, int], int] = {}

    def take(rows: Iterable[Any]) -> None:
        for topic, partition, offset in rows:
            key = (topic, int(partition))
            positions[key] = max(positions.get(key, -1), int(offset))

    for source in pipeline.sources.values():
        table = bronze_table(pipeline, source)
        if spark.catalog.tableExists(table):
            take(spark.table(table).groupBy("_topic", "_partition").agg({"_offset": "max"}).collect())
    quarantine = quarantine_table(pipeline)
    if spark.catalog.tableExists(quarantine):
        take(spark.table(quarantine).groupBy("topic", "partition").agg({"offset": "max"}).collect())
    return positions


def stage_functions() -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """run_bronze, run_silver, run_gold; a clear error when a stage is not built yet."""
    found = []
    for module, name in (("lakehouse.bronze", "run_bronze"), ("lakehouse.silver", "run_silver"), ("lakehouse.gold", "run_gold")):
        try:
            found.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError) as exc:
            raise CdcEnrichError(f"{module}.{name} is not available ({exc}): the pipeline cannot be drained") from None
    return found[0], found[1], found[2]


def drain(
    spark: Any,
    pipeline: Pipeline,
    lake: Path,
    bootstrap: str,
    dsn: str,
    timeout_s: float,
    progress: Callable[[str], None] | None = None,
) -> CatchUp:
    """Bring bronze, silver and gold up to date with the database (steps 1-3 of the module docstring)."""
    from lakehouse.spark import ensure_schemas

    run_bronze, run_silver, run_gold = stage_functions()
    say = progress or (lambda _message: None)
    started = time.monotonic()
    deadline = started + timeout_s
    catch_up = CatchUp()
    catch_up.target_lsn, target = current_lsn(dsn)
    catch_up.confirmed_lsn = wait_for_connector(dsn, pipeline, target, timeout_s)
    catch_up.connector_wait_s = time.monotonic() - started
    say(f"connector confirmed {catch_up.confirmed_lsn} >= {catch_up.target_lsn} after {catch_up.connector_wait_s:.1f}s")
    ensure_schemas(spark, pipeline)
    drained = time.monotonic()
    while True:
        catch_up.rounds += 1
        ends = kafka_end_offsets(kafka_connection(bootstrap, pipeline.kafka.options), pipeline.topics)
        for stage, run in (
            ("bronze", lambda: run_bronze(spark, pipeline, lake, bootstrap, trigger="available_now")),
            ("silver", lambda: run_silver(spark, pipeline, lake, trigger="available_now")),
            ("gold", lambda: run_gold(spark, pipeline, lake, trigger="available_now")),
        ):
            t = time.monotonic()
            run()
            catch_up.stage_s[stage] = catch_up.stage_s.get(stage, 0.0) + time.monotonic() - t
        positions = bronze_positions(spark, pipeline)
        behind = {tp: (positions.get(tp, -1) + 1, end) for tp, end in ends.items() if positions.get(tp, -1) + 1 < end}
        say(f"drain round {catch_up.rounds}: {sum(ends.values())} records in Kafka, {len(behind)} partition(s) behind")
        if not behind:
            break
        if time.monotonic() > deadline:
            detail = ", ".join(f"{t}[{p}] at {have}/{end}" for (t, p), (have, end) in sorted(behind.items()))
            raise VerificationError(f"bronze did not catch up with Kafka within {timeout_s:g}s: {detail}")
    catch_up.drain_s = time.monotonic() - drained
    catch_up.end_offsets = {f"{t}[{p}]": end for (t, p), end in sorted(ends.items())}
    return catch_up


# --------------------------------------------------------------------------- entry point


def compare_with_postgres(spark: Any, pipeline: Pipeline, dsn: str, catch_up: CatchUp | None = None) -> PostgresVerifyReport:
    """Only the comparison (no draining): every gold view and every silver current table."""
    started = time.monotonic()
    report = PostgresVerifyReport(catch_up or CatchUp())
    report.gold = [compare_view(spark, pipeline, view, dsn) for view in pipeline.views.values()
                   if not view.temporal and not view.windowed]
    as_of = [view for view in pipeline.views.values() if view.temporal]
    why_not = _as_of_not_comparable(spark, pipeline, dsn) if as_of else None
    if isinstance(why_not, str):
        report.not_compared = [f"gold {view.name}: not compared ({why_not}; `verify` checks it against silver history)" for view in as_of]
    else:
        report.gold += [compare_view(spark, pipeline, view, dsn, postgres_as_of_sql(pipeline, view, why_not)) for view in as_of]
    report.not_compared += [
        f"gold {view.name}: not compared (a windowed view: which events were late depends on arrival order, which "
        "the database does not know; `verify` checks it against the events gold accepted)"
        for view in pipeline.views.values() if view.windowed
    ]
    report.silver = [compare_source(spark, pipeline, source, dsn) for source in pipeline.sources.values()]
    report.seconds = time.monotonic() - started
    return report


def verify_against_postgres(
    spark: Any,
    pipeline: Pipeline,
    dsn: str,
    lake: Path,
    timeout_s: float = 600,
    bootstrap: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> PostgresVerifyReport:
    """Drain the pipeline until it has caught up with the database, then compare gold and silver
    with PostgreSQL. `bootstrap` (None: the entry layer's precedence, `lakehouse.entry.resolve_bootstrap`)."""
    started = time.monotonic()
    catch_up = drain(spark, pipeline, Path(lake), resolve_bootstrap(bootstrap, pipeline, Path(lake)).servers, dsn, timeout_s, progress)
    report = compare_with_postgres(spark, pipeline, dsn, catch_up)
    report.seconds = time.monotonic() - started
    return report
