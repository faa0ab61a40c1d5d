"""Silver's batch: the side effects (MERGEs, appends) of one planned micro-batch, and its report."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, fields
from datetime import datetime
from decimal import Decimal
from typing import Any, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, StringType, StructField, StructType, TimestampType

from lakehouse.declaration import Pipeline, Source
from lakehouse.deltasql import num_files
from lakehouse.execution import checkpoint_observing, session_settings, small_work_settings
from lakehouse.frames import local_frame
from lakehouse.silver.holding import hold_changes
from lakehouse.silver.layout import (
    TOAST_RECORDED_PROPERTY,
    TRUNCATES_RECORDED_PROPERTY,
    HistoryFacts,
    ensure_toast_table,
    history_facts,
    record_fact,
    recorded_truncates,
    toast_recorded,
    toast_schema,
    toast_table,
    truncates_table,
)
from lakehouse.silver.plan import (
    BROADCAST_KEYS_LIMIT,
    LISTED_KEYS_LIMIT,
    Truncate,
    _bounded_keys,
    empty_string_array,
    _keys,
    batch_summary,
    build_timeline,
    changes_from_bronze,
    classify_changes,
    dedupe_changes,
    key_bounds_condition,
    keys_in,
    late_records,
    plan_current,
    plan_history,
)
from lakehouse.silver.snapshots import (
    SnapshotEnd,
    ends_to_reconcile,
    reconciles_snapshots,
    reconciliation_deletes,
    snapshot_ends,
    snapshot_keys,
    versions,
)
from lakehouse.silver.store import kind_rows, merge_store, store_frame
from lakehouse.spark import table_exists, write_time
from lakehouse.tables import (
    CURRENT_KIND,
    HISTORY_KIND,
    SEQUENCE_TYPE,
    bronze_table,
    delta_txn,
    late_changes_table,
    silver_current_table,
    silver_store_table,
)

log = logging.getLogger('lakehouse.silver')


# --------------------------------------------------------------------------- report


@dataclass
class SilverStats:
    """What a batch (or a run, summed) did for one source."""

    batches: int = 0
    changes_read: int = 0  # bronze rows read
    tombstones: int = 0  # ignored: the delete before them carries the change
    truncates: int = 0
    skipped: int = 0  # rows without key or sequence (bronze should have quarantined them)
    current_upserted: int = 0
    history_written: int = 0  # versions inserted or updated (a neighbour's valid_to)
    history_removed: int = 0  # derived truncate versions a late delete made moot
    out_of_order: int = 0
    duplicates: int = 0
    late: int = 0
    snapshot_deletes: int = 0  # keys a completed snapshot no longer held (lakehouse.silver.snapshots)
    held: int = 0  # changes a quarantine rule kept out of silver (lakehouse.silver.held)
    released: int = 0  # held changes let through again (their rule was fixed or removed)

    def add(self, other: "SilverStats") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def describe(self) -> str:
        return ", ".join(f"{f.name.replace('_', ' ')} {getattr(self, f.name)}" for f in fields(self))


@dataclass
class SilverReport:
    """Per source, the sum of its batches' stats."""

    sources: dict[str, SilverStats] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, source: str, stats: SilverStats) -> None:
        with self._lock:
            self.sources.setdefault(source, SilverStats()).add(stats)

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {name: {f.name: getattr(s, f.name) for f in fields(s)} for name, s in self.sources.items()}

    def render(self) -> str:
        """One line per source, for the CLI and job logs."""
        return "\n".join(f"silver {name}: {stats.describe()}" for name, stats in sorted(self.sources.items())) or "silver: no sources"


# --------------------------------------------------------------------------- the batch (side effects)


def plan_batch(
    timeline: DataFrame,
    changes: DataFrame,
    existing: DataFrame,
    existing_current: DataFrame,
    truncate_floor: Truncate | None,
    grace_days: int,
    compacted_before: datetime | None,
    source: Source,
) -> DataFrame:
    """Everything one batch writes, as one frame to materialize once before any write.

    `_target`: `history` and `current` (the MERGE sources, with `_action`), `toast` (versions
    whose placeholder columns are not recorded yet), `change` (each new change classified:
    duplicate, out of order, late). Materializing it pins the pre-batch state it came from.
    """
    keys = _keys(source)
    recorded = existing.filter(F.size("_unavailable") > 0).select(*keys, "_sequence")
    parts = [
        plan_history(timeline, existing, source).withColumn("_target", F.lit("history")),
        plan_current(timeline, existing_current, source).withColumn("_target", F.lit("current")),
        timeline.filter(F.size("_unavailable") > 0)
        .select(*keys, "_sequence", "_unavailable")
        .join(recorded, [*keys, "_sequence"], "left_anti")
        .withColumn("_target", F.lit("toast")),
        classify_changes(changes, existing, existing_current, truncate_floor, grace_days, compacted_before, source)
        .withColumn("_target", F.lit("change")),
    ]
    plan = parts[0]
    for part in parts[1:]:
        plan = plan.unionByName(part, allowMissingColumns=True)
    return plan


@dataclass
class StreamState:
    """What one stream knows between batches, being the only writer of these tables: the
    source's truncates, whether any TOAST placeholder was ever recorded, and whether its store
    holds a row. Saves reads per batch; `None` fields are learnt in the first batch that needs
    them (`learn`; the store's rows by `apply_batch`, for a large batch or a snapshot's end)."""

    truncates: list[Truncate] | None = None
    has_toast: bool | None = None
    store_has_rows: bool | None = None

    def learn(self, spark: SparkSession, pipeline: Pipeline, source: Source, facts: HistoryFacts) -> None:
        """Fill in what is not known yet, from the history table's `facts` where they tell
        (a fresh source: no truncate, no TOAST placeholder), else from the truncates table."""
        if self.truncates is None:
            self.truncates = recorded_truncates(spark, pipeline, source, facts)
        if self.has_toast is None and facts.toast is False:
            self.has_toast = False


def apply_batch(
    batch_df: DataFrame, batch_id: int, pipeline: Pipeline, source: Source, app_id: str, state: StreamState | None = None
) -> SilverStats:
    """Apply one micro-batch of bronze rows to the source's silver tables.

    Safe to call again with the same `batch_id` (a replay): every write carries
    (`app_id`:table, `batch_id`) as Delta txn, and planning from the tables' state makes the
    replay a no-op anyway. Work is proportional to the keys in the batch (a truncate touches
    every key alive at it). Spark jobs: the batch's changes, deduplicated, materialized by the
    job that sums the batch up (one read of bronze), then the touched keys'
    stored history and current rows, the timeline and the plan (counted as it is materialized)
    each once (a small batch collects its touched keys first, `apply_changes`), then the
    writes. A few changes into small tables run with the settings for a few rows
    (`lakehouse.execution`).
    """
    spark = batch_df.sparkSession
    state = state if state is not None else StreamState()
    clock = BatchClock(f"silver {source.name} batch {batch_id}")
    stats = SilverStats(batches=1)
    # the batch's changes, deduplicated, materialized by the job that sums the batch up: bronze
    # is read once, and no job of its own reads the change rows again to drop the copies
    deduped, observed = checkpoint_observing(batch_df, [batch_summary(batch_df, source).alias("s")],
                                             lambda bronze: dedupe_changes(changes_from_bronze(bronze, source), source))
    summary = observed["s"]
    clock.lap("summary")
    stats.changes_read, stats.tombstones, stats.truncates, stats.skipped = (
        summary["changes_read"], summary["tombstones"], summary["truncates"], summary["skipped"]
    )
    usable = summary["usable_changes"]  # change rows, copies of one change each counted
    batch_truncates: list[Truncate] = sorted({(t["_sequence"], t["_source_ts"]) for t in summary["truncate_events"]})
    ends = snapshot_ends(summary["snapshot_ends"]) if reconciles_snapshots(source) else []
    if state.store_has_rows is None and (ends or usable > LISTED_KEYS_LIMIT):  # a source's first load reads no store
        state.store_has_rows = num_files(spark, silver_store_table(pipeline, source)) > 0
    if ends:
        ends = ends_to_reconcile(ends, summary["first_sequence"], state.store_has_rows is not False)
    if usable == 0 and not batch_truncates:
        return stats

    # a snapshot's end reads the bronze table, which is never small
    small = {} if ends else small_work_settings(spark, stats.changes_read, [silver_store_table(pipeline, source)])
    with session_settings(spark, small):
        facts = history_facts(spark, pipeline, source)
        state.learn(spark, pipeline, source, facts)
        known_truncates = list(state.truncates or [])
        stats.duplicates = len(set(batch_truncates) & set(known_truncates))
        horizon = facts.compacted_before
        clock.lap("watermarks")

        moves = summary["moves_with_placeholders"] > 0
        changes = deduped if moves else deduped.drop("_old_key")
        if ends:
            deletes = _reconcile_snapshots(batch_df, pipeline, source, changes, ends)
            stats.snapshot_deletes = deletes.count()
            if stats.snapshot_deletes:
                changes = changes.unionByName(deletes, allowMissingColumns=True).localCheckpoint(eager=True)
        if source.quarantine_rules:  # after the snapshot's reconciliation: a held snapshot row still holds its key
            changes, stats.held = hold_changes(pipeline, source, changes, f"{app_id}:held", batch_id)
        clock.lap("changes")
        if batch_truncates or moves or stats.snapshot_deletes:
            bounds: dict[str, tuple[Any, Any]] = {}  # the keys read reach beyond the batch's own
        else:
            bounds = {k: (summary[f"lo_{k}"], summary[f"hi_{k}"]) for k in _bounded_keys(source)}
        # the change rows bound the distinct changes from above
        broadcast = not batch_truncates and usable + stats.snapshot_deletes <= BROADCAST_KEYS_LIMIT
        listed = not batch_truncates and usable + stats.snapshot_deletes <= LISTED_KEYS_LIMIT
        planned = apply_changes(
            changes, pipeline, source, app_id, batch_id, state, stats, clock,
            batch_truncates=batch_truncates, known_truncates=known_truncates, horizon=horizon, moves=moves,
            bounds=bounds, broadcast=broadcast, listed=listed, placeholders=summary["placeholders"] > 0,
        )
    # copies of one change in the batch: its change rows less its distinct changes (those planned,
    # and those a quarantine rule held back; a completed snapshot's deletes are not the batch's rows)
    stats.duplicates += usable - (planned + stats.held - stats.snapshot_deletes)
    return stats


def apply_changes(
    changes: DataFrame,
    pipeline: Pipeline,
    source: Source,
    app_id: str,
    batch_id: int,
    state: StreamState,
    stats: SilverStats,
    clock: BatchClock,
    batch_truncates: Sequence[Truncate] = (),
    known_truncates: Sequence[Truncate] = (),
    horizon: datetime | None = None,
    moves: bool = False,
    bounds: dict[str, tuple[Any, Any]] | None = None,
    broadcast: bool = False,
    listed: bool = False,
    placeholders: bool = True,
) -> int:
    """Apply keyed changes (`changes_from_bronze`'s shape, deduplicated) to the source's silver
    tables: a bronze batch's (`apply_batch`) or changes released from quarantine
    (`lakehouse.silver.held`); returns how many changes it planned (one per row of `changes`).
    Every write carries (`app_id`:table, `batch_id`) as Delta txn.

    `bounds` (key column -> (lo, hi) covering every key read) lets Delta skip files; `{}` or
    None reads by the touched keys alone. `moves`: some change carries `_old_key`;
    `placeholders`: some change may carry a TOAST placeholder (False skips their resolution
    where the store has recorded none either). The touched keys reach the table scans as a
    broadcast semi join (`broadcast`), or, in a batch of at most `LISTED_KEYS_LIMIT` keys
    (`listed`), collected and listed in the scans' filter (`keys_in`): measured on a two-change
    batch, 105 Spark stages instead of 125."""
    spark = changes.sparkSession
    keys = _keys(source)
    bounds = bounds or {}
    store_name = silver_store_table(pipeline, source)
    all_truncates = sorted(set(known_truncates) | set(batch_truncates))
    new_truncates = [t for t in batch_truncates if t not in set(known_truncates)]
    store = spark.table(store_name)
    history = kind_rows(store, source, HISTORY_KIND)
    touched = changes.select(*keys)
    if moves:
        # A primary-key change with placeholders reads its old key's history too (for the
        # values it carries over), so the batch's key bounds no longer cover what is read.
        old_keys = changes.filter(F.col("_old_key").isNotNull()).select(*[F.col(f"_old_key.{k}").alias(k) for k in keys])
        touched = touched.unionByName(old_keys)
    for t_seq, _ in batch_truncates:  # a truncate touches every key alive at it: the whole table is in play
        seq = F.lit(t_seq).cast(SEQUENCE_TYPE)
        alive = (
            (F.col("_sequence") < seq)
            & ~F.col("_deleted")
            & (F.col("_valid_to_sequence").isNull() | (F.col("_valid_to_sequence") > seq))
        )
        touched = touched.unionByName(history.filter(alive).select(*keys))
    touched = touched.distinct()
    if broadcast:
        touched = F.broadcast(touched)
    # an empty store is not read (Spark's analyzer fails on `inherit_moved_values`' join of a
    # checkpoint back to a timeline that came from an empty relation: a batch with key changes reads it)
    reads_store = state.store_has_rows is not False or moves
    in_range = key_bounds_condition(None, bounds)
    if listed and reads_store:
        in_range = in_range & keys_in(touched.collect(), source)

    def of_touched(table: DataFrame) -> DataFrame:
        """The table's rows of the touched keys (within the batch's key bounds)."""
        return table.filter(in_range) if listed else table.filter(in_range).join(touched, keys, "left_semi")

    if reads_store:
        # both kinds of row of the touched keys in one scan of the store: the plan's reads
        stored = of_touched(store).localCheckpoint(eager=True)
    else:  # no rows, no job, and the plan's joins with them fold away
        stored = local_frame(spark, [], store.schema)
    existing = kind_rows(stored, source, HISTORY_KIND)
    if state.has_toast is None:
        state.has_toast = toast_recorded(spark, pipeline, source)
    if state.has_toast:
        toast = of_touched(spark.table(toast_table(pipeline, source)))
        existing = existing.join(toast.select(*keys, "_sequence", "_unavailable"), [*keys, "_sequence"], "left")
        unavailable = F.coalesce(F.col("_unavailable"), empty_string_array())
    else:
        unavailable = empty_string_array()
    existing = existing.withColumn("_unavailable", unavailable)
    if state.has_toast:  # the TOAST table's rows joined in: computed once
        existing = existing.localCheckpoint(eager=True)
    existing_current = kind_rows(stored, source, CURRENT_KIND)
    clock.lap("read")
    timeline = build_timeline(existing, changes, all_truncates, source, placeholders or bool(state.has_toast)).localCheckpoint(eager=True)
    clock.lap("timeline")
    floor = max(known_truncates) if known_truncates else None
    target, action = F.col("_target"), F.col("_action")
    plan, c = checkpoint_observing(plan_batch(
        timeline, changes, existing, existing_current, floor, pipeline.options.late_grace_days, horizon, source
    ), [
        F.count(F.when((target == "history") & (action != "delete"), 1)).alias("history_written"),
        F.count(F.when((target == "history") & (action == "delete"), 1)).alias("history_removed"),
        F.count(F.when((target == "history") & (action != "insert"), 1)).alias("history_rewrites"),
        F.count(F.when(target == "current", 1)).alias("current_upserted"),
        F.count(F.when((target == "current") & (action != "insert"), 1)).alias("current_rewrites"),
        F.count(F.when(target == "toast", 1)).alias("toast"),
        F.count(F.when((target == "change") & F.col("_duplicate"), 1)).alias("duplicates"),
        F.count(F.when((target == "change") & F.col("_out_of_order"), 1)).alias("out_of_order"),
        F.count(F.when((target == "change") & F.col("_late_reason").isNotNull(), 1)).alias("late"),
        F.count(F.when(target == "change", 1)).alias("changes"),
    ])  # counted by the job that materializes the plan
    stats.history_written, stats.history_removed = c["history_written"], c["history_removed"]
    stats.current_upserted, stats.out_of_order, stats.late = c["current_upserted"], c["out_of_order"], c["late"]
    stats.duplicates += c["duplicates"]
    clock.lap("plan")

    # Writes, each tagged with its own txn appId. The facts the plan derives from (truncates,
    # TOAST placeholders) go first, so a crash between writes replans the same result.
    if new_truncates and not known_truncates:  # the source's first: said before it is written
        record_fact(spark, pipeline, source, TRUNCATES_RECORDED_PROPERTY)
    _record_truncates(spark, pipeline, source, new_truncates, app_id, batch_id)
    state.truncates = all_truncates
    if c["toast"]:
        if not state.has_toast:  # the source's first placeholders: said before they are written
            record_fact(spark, pipeline, source, TOAST_RECORDED_PROPERTY)
            ensure_toast_table(spark, pipeline, source)
        placeholders = plan.filter(target == "toast").select(*[f.name for f in toast_schema(source).fields])
        _append(placeholders, toast_table(pipeline, source), f"{app_id}:toast", batch_id)
        state.has_toast = True
    if stats.history_written or stats.history_removed or stats.current_upserted:
        _write_planned(plan.filter(target.isin(HISTORY_KIND, CURRENT_KIND)), store_name, source, f"{app_id}:store", batch_id,
                       c["history_rewrites"] == 0 and c["current_rewrites"] == 0, bounds)
        state.store_has_rows = True
        clock.lap("write")
    if stats.late:
        _append(late_records(plan.filter(target == "change"), source), late_changes_table(pipeline), f"{app_id}:late", batch_id)
    clock.done()
    return int(c["changes"])


class BatchClock:
    """Phase timings of a batch, logged at DEBUG (where a slow batch spends its time)."""

    def __init__(self, label: str) -> None:
        self.label, self.start, self.last, self.laps = label, time.perf_counter(), time.perf_counter(), []

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps.append(f"{name} {now - self.last:.2f}s")
        self.last = now

    def done(self) -> None:
        log.debug("%s: %s; total %.2fs", self.label, ", ".join(self.laps), time.perf_counter() - self.start)


def _reconcile_snapshots(
    batch_df: DataFrame, pipeline: Pipeline, source: Source, changes: DataFrame, ends: Sequence[SnapshotEnd]
) -> DataFrame:
    """The deletes the batch's completed snapshots imply, oldest snapshot first (each sees the
    deletes of the ones before it): `lakehouse.silver.snapshots`. A snapshot spans batches, so
    its records are read from the bronze table, and from the batch itself (the same rows in a
    stream; a direct call may hand rows that are in no table)."""
    spark = batch_df.sparkSession
    name = bronze_table(pipeline, source)
    bronze = spark.table(name).unionByName(batch_df, allowMissingColumns=True) if table_exists(spark, name) else batch_df
    current = spark.table(silver_current_table(pipeline, source))
    known = versions(current, source).unionByName(versions(changes, source))
    deletes: DataFrame | None = None
    for end in ends:
        prior = known if deletes is None else known.unionByName(versions(deletes, source))
        in_snapshot = snapshot_keys(changes_from_bronze(bronze, source), end[0], source)
        found = reconciliation_deletes(prior, in_snapshot, end, source).localCheckpoint(eager=True)
        deletes = found if deletes is None else deletes.unionByName(found)
    assert deletes is not None
    return deletes


def _append(df: DataFrame, table: str, app_id: str, version: int) -> None:
    df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", version).saveAsTable(table)


# a truncate as `_record_truncates` hands it over (`recorded_at` is stamped on the frame)
TRUNCATES_ROW = StructType(
    [StructField("source", StringType()), StructField("sequence", DecimalType(38, 0)), StructField("source_ts", TimestampType())]
)


def _record_truncates(
    spark: SparkSession, pipeline: Pipeline, source: Source, truncates: Sequence[Truncate], app_id: str, batch_id: int
) -> None:
    if not truncates:
        return
    rows = [(source.name, Decimal(s), ts) for s, ts in truncates]
    df = local_frame(spark, rows, TRUNCATES_ROW).withColumn("recorded_at", write_time())
    _append(df, truncates_table(pipeline), f"{app_id}:truncates", batch_id)


def _write_planned(
    rows: DataFrame, store: str, source: Source, app_id: str, version: int, all_inserts: bool,
    bounds: dict[str, tuple[Any, Any]],
) -> None:
    """Write a batch's planned history and current rows into the source's `store` in one commit
    under the txn tag (`app_id`, `version`): appended, stamped now, when they are `all_inserts`;
    else one MERGE (`lakehouse.silver.store.merge_store`).

    The plan calls a row an insert only when its key (history: key and sequence) is in none of
    the stored rows it read, and the stream is the store's only writer, so an append writes what
    the MERGE would, with the same `insert` rows in the change feed, without joining the batch
    against the table; a replay skips it by the same tag.
    """
    if all_inserts:
        _append(store_frame(rows, source), store, app_id, version)
        return
    with delta_txn(rows.sparkSession, app_id, version):
        merge_store(store, rows, source, bounds)
