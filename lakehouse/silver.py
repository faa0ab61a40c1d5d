"""Versioned silver tables: current state per key plus full per-key history (seed 001, KIP-914).

A streaming job reads `bronze.<source>` and, per micro-batch, MERGEs into two tables whose
layout is fixed by `lakehouse.tables`:

- `silver.<source>` (current): one row per primary key silver has seen live, the latest
  version by `_sequence` (a deleted key as a `_deleted` marker). Change Data Feed is enabled;
  gold streams it.
- `silver.<source>_history`: every version per key with `[_valid_from, _valid_to)` in source
  time and `_valid_to_sequence`, the next version's sequence.

How a batch is applied (all decisions are pure DataFrame functions below, side effects at the
edges in `apply_batch`):

1. `changes_from_bronze` turns bronze rows into changes (key, payload, sequence, source time,
   op, TOAST placeholders). Tombstones (`_op='tombstone'`) are ignored: Debezium always emits
   the delete event before its tombstone, the delete carries the sequence, and a tombstone has
   none of its own. `dedupe_changes` keeps one change per (key, sequence): several changes to
   one key in one batch are ordered by sequence, never by arrival order.
2. The existing history of the keys touched by the batch (and only those; a truncate touches
   every key alive at its sequence) is read, and `build_timeline` recomputes those keys'
   timelines: the stored versions plus the new ones, plus a derived delete version (`_op='t'`)
   at every truncate for a key alive just before it; TOAST placeholders resolved from the
   previous version by sequence; `_valid_to` from the next version. Because the timeline is a
   function of the *set* of changes, the result is the same for any arrival order or batching.
3. `plan_history` diffs the recomputed timeline against what is stored (insert, update of a
   neighbour's `_valid_to`, removal of a derived truncate version a late delete made moot);
   `plan_current` takes each key's last version and keeps it only if it is newer than the
   stored current row (or the same version with a different hash: a TOAST value corrected by a
   late predecessor). An out-of-order change (older than the key's current version) therefore
   only lands in history, and a duplicate (same key and sequence) changes nothing anywhere.

Semantics downstream readers rely on:

- **Deletes in the change feed: a delete is an UPDATE to `_deleted = true`** (CDF
  `update_preimage` = the live row, `update_postimage` = the marker: key columns, payload
  null, the delete's sequence). Silver never issues a CDF `delete`, and never an insert or
  update whose both sides are deleted: current's feed is exactly insert (a key appears),
  update live->live, live->marker (deleted), marker->live (re-created). A key created and
  deleted before silver saw it live gets no row at all. A deleted key's marker stays forever
  (one small row per deleted key, no retention window to tune), and an older update arriving
  later, however late, never resurrects it: it is placed in history (which is read for every
  touched key) behind the delete. Analysts query `<source>_live`.
- **Truncates** (`_op='t'`, no key): every current row alive with a smaller sequence becomes a
  marker at the truncate's sequence (`_op='t'`), history gets a delete version per key alive
  at that point. Truncates are recorded in `silver._truncates`; a key's timeline always
  includes them, so a change older than a truncate arriving later goes to history (followed by
  the truncate's delete version) and never resurrects the key in current.
- **No-op rewrites never reach the change feed**: the MERGE into current updates only when the
  incoming sequence is greater, or equal with a different row hash, and never a marker by a
  marker; out-of-order and duplicate changes produce no CDF rows.
- **TOAST**: a column listed in `_unavailable_columns` keeps the key's previous version's value
  (by sequence), in current and history. Which columns were placeholders is remembered in the
  small side table `silver._toast_<source>` (only versions that had placeholders), so a late
  predecessor re-resolves them; that is the one case where an out-of-order change can update
  the current row (same version, corrected value).
  A primary-key change's create (Debezium sends the placeholder there too, with the old key in
  the `__debezium.oldkey` header, bronze `_old_key`) takes the value from the old key's last
  live version instead (`inherit_moved_values`); once taken it is stored as a plain value, so
  a predecessor of the *old* key arriving after the move is not carried over again.
- **Late changes**: a change older than its key's current version by more than
  `options.late_grace_days` (source time) is applied as usual (history only) and recorded in
  `silver._late_changes` with reason `late`; one older than the history compaction horizon
  (`compact_history`) is still placed and recorded with reason `beyond_retention`.
- **Exactly-once**: every write of a batch carries Delta's `txnAppId`/`txnVersion` (appId per
  stream checkpoint and target table, version = batch id): a replayed batch writes nothing
  twice. Independently, planning from the tables' state makes a replay a no-op for current and
  history.

Tables besides the two of `lakehouse.tables`: `silver._truncates` (source, sequence, source
time), `silver._toast_<source>` (key, sequence, placeholder columns; one row per version that
had placeholders), `silver._late_changes` (`late_changes_schema`), the `<source>_live` view,
and a history table property holding the compaction horizon.

Cost per batch: the stored history and current rows of the batch's keys are read (a broadcast
semi-join, plus min/max key predicates so Delta skips files when keys are clustered), and
the MERGEs join on the key (and sequence) with the same predicates. Only changed rows are
written; with deletion vectors (on by default) an update marks the old row instead of
rewriting its file. A truncate is the exception: it touches every key alive at it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Sequence

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    IntegralType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakehouse.config import Pipeline, Source
from lakehouse.errors import CdcEnrichError
from lakehouse.paths import checkpoint_dir
from lakehouse.spark import write_time
from lakehouse.tables import (
    SEQUENCE_TYPE,
    delta_txn,
    bronze_table,
    key_struct,
    late_changes_table,
    silver_current_table,
    silver_history_table,
    silver_history_schema,
    silver_current_schema,
)

COMPACTED_BEFORE_PROPERTY = "cdc_enrich.history.compactedBeforeMs"
CHANGE_OPS = ("r", "c", "u", "d")
TRUNCATE_OP = "t"
TOMBSTONE_OP = "tombstone"
APP_ID_FILE = "_silver_app_id"
BROADCAST_KEYS_LIMIT = 200_000  # a batch's keys are broadcast to the table scans up to this many
log = logging.getLogger(__name__)

Truncate = tuple[Decimal, datetime | None]  # (sequence, source time)


# --------------------------------------------------------------------------- names and layouts


def truncates_table(pipeline: Pipeline) -> str:
    """silver._truncates: every truncate applied, per source (the table's truncate watermarks)."""
    return pipeline.tables.qualified("silver", "_truncates")


def toast_table(pipeline: Pipeline, source: Source) -> str:
    """silver._toast_<source>: which columns of a history version were TOAST placeholders."""
    return pipeline.tables.qualified("silver", f"_toast_{source.name}")


def live_view(pipeline: Pipeline, source: Source) -> str:
    """silver.<source>_live: the current rows that are not deleted, source columns only."""
    return pipeline.tables.qualified("silver", f"{source.name}_live")


def late_changes_schema() -> StructType:
    """silver._late_changes: one row per change that arrived later than the grace (or retention)."""
    return StructType(
        [
            StructField("source", StringType(), False),
            StructField("key", StringType(), False),  # the primary key as JSON
            StructField("sequence", SEQUENCE_TYPE, False),
            StructField("op", StringType(), False),
            StructField("source_ts", TimestampType(), True),
            StructField("late_by_ms", LongType(), True),  # behind the key's current version, source time
            StructField("reason", StringType(), False),  # late | beyond_retention
            StructField("recorded_at", TimestampType(), False),
        ]
    )


def truncates_schema() -> StructType:
    return StructType(
        [
            StructField("source", StringType(), False),
            StructField("sequence", SEQUENCE_TYPE, False),
            StructField("source_ts", TimestampType(), True),
            StructField("recorded_at", TimestampType(), False),
        ]
    )


def toast_schema(source: Source) -> StructType:
    return StructType(
        list(key_struct(source).fields)
        + [
            StructField("_sequence", SEQUENCE_TYPE, False),
            StructField("_unavailable", ArrayType(StringType(), True), False),
        ]
    )


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


# --------------------------------------------------------------------------- pure planning: changes


def _empty_string_array() -> Column:
    return F.array().cast(ArrayType(StringType()))


def _keys(source: Source) -> list[str]:
    return list(source.primary_key)


def changes_from_bronze(bronze: DataFrame, source: Source) -> DataFrame:
    """Bronze rows -> keyed changes (r/c/u/d with a key and a sequence).

    Tombstones and truncates are left out (see the module docstring); rows with no sequence
    or no key are left out too (counted as skipped by `batch_summary`). A TOAST placeholder
    column becomes null here and is listed in `_unavailable`, so `build_timeline` takes the
    previous version's value. Kafka coordinates are kept only to break ties deterministically
    between copies of one change. `_old_key` (bronze's `__debezium.oldkey` header) is kept
    only where it matters: on a primary-key change's create that carries placeholders.
    """
    value_cols = list(source.value_columns)
    op = F.col("_op")
    unavailable = (
        F.array_sort(
            F.array_intersect(
                F.transform(F.split(F.coalesce(F.col("_unavailable_columns"), F.lit("")), ","), F.trim),
                F.array(*[F.lit(c) for c in value_cols]).cast(ArrayType(StringType())),
            )
        )
        if value_cols
        else _empty_string_array()
    )
    unavailable = F.when(op == "d", _empty_string_array()).otherwise(unavailable)
    key_exprs = [
        F.coalesce(F.col(f"_key.{k}"), F.col(f"_after.{k}"), F.col(f"_before.{k}")).alias(k) for k in source.primary_key
    ]
    out = (
        bronze.filter(op.isin(*CHANGE_OPS) & F.col("_sequence").isNotNull())
        .withColumn("_unavailable", unavailable)
        .select(
            *key_exprs,
            *[
                F.when(op == "d", F.lit(None))
                .when(F.array_contains(F.col("_unavailable"), c), F.lit(None))
                .otherwise(F.col(f"_after.{c}"))
                .cast(source.column(c).type)
                .alias(c)
                for c in value_cols
            ],
            F.col("_sequence"),
            F.timestamp_millis(F.coalesce(F.col("_source_ts_ms"), F.col("_event_ts_ms"))).alias("_source_ts"),
            op.alias("_op"),
            (op == "d").alias("_deleted"),
            F.col("_unavailable"),
            F.when((op != "d") & (F.size("_unavailable") > 0), _old_key_column(bronze, source)).alias("_old_key"),
            F.col("_partition"),
            F.col("_offset"),
        )
    )
    for k in source.primary_key:
        out = out.filter(F.col(k).isNotNull())
    return out


def _old_key_column(bronze: DataFrame, source: Source) -> Column:
    """Bronze's `_old_key` (absent in tables written before it existed: null)."""
    return F.col("_old_key") if "_old_key" in bronze.columns else F.lit(None).cast(key_struct(source))


def dedupe_changes(changes: DataFrame, source: Source) -> DataFrame:
    """One change per (key, sequence): the same change delivered twice is applied once.

    Copies of one change are identical; should they differ, the lowest Kafka coordinate wins
    so the choice never depends on arrival order within the batch.
    """
    w = Window.partitionBy(*_keys(source), "_sequence").orderBy("_partition", "_offset")
    return changes.withColumn("_rank", F.row_number().over(w)).filter("_rank = 1").drop("_rank", "_partition", "_offset")


def truncates_from_bronze(bronze: DataFrame) -> DataFrame:
    """The truncate events of a batch: (sequence, source time)."""
    return bronze.filter((F.col("_op") == TRUNCATE_OP) & F.col("_sequence").isNotNull()).select(
        F.col("_sequence"),
        F.timestamp_millis(F.coalesce(F.col("_source_ts_ms"), F.col("_event_ts_ms"))).alias("_source_ts"),
    )


def batch_summary(bronze: DataFrame, source: Source) -> Column:
    """One aggregation over a batch: counts, the truncate events, the number of distinct
    (key, sequence) changes and the min/max of each boundable key column (for file skipping)."""
    op = F.col("_op")
    key_cols = [F.coalesce(F.col(f"_key.{k}"), F.col(f"_after.{k}"), F.col(f"_before.{k}")) for k in source.primary_key]
    keyed = F.lit(True)
    for k in key_cols:
        keyed = keyed & k.isNotNull()
    usable_change = op.isin(*CHANGE_OPS) & F.col("_sequence").isNotNull() & keyed
    usable_truncate = (op == TRUNCATE_OP) & F.col("_sequence").isNotNull()
    moved = usable_change & (op != "d") & F.col("_unavailable_columns").isNotNull() & _old_key_column(bronze, source).isNotNull()
    ts = F.timestamp_millis(F.coalesce(F.col("_source_ts_ms"), F.col("_event_ts_ms")))
    bounds = []
    for k, expr in zip(source.primary_key, key_cols):
        if k in _bounded_keys(source):
            bounds += [F.min(F.when(usable_change, expr)).alias(f"lo_{k}"), F.max(F.when(usable_change, expr)).alias(f"hi_{k}")]
    return F.struct(
        F.count(F.lit(1)).alias("changes_read"),
        F.count(F.when(op == TOMBSTONE_OP, 1)).alias("tombstones"),
        F.count(F.when(usable_truncate, 1)).alias("truncates"),
        F.count(F.when(~(op == TOMBSTONE_OP) & ~usable_change & ~usable_truncate, 1)).alias("skipped"),
        F.count_distinct(F.when(usable_change, F.struct(*key_cols, F.col("_sequence")))).alias("distinct_changes"),
        F.count(F.when(moved, 1)).alias("moves_with_placeholders"),
        F.collect_list(F.when(usable_truncate, F.struct(F.col("_sequence"), ts.alias("_source_ts")))).alias("truncate_events"),
        *bounds,
    )


# --------------------------------------------------------------------------- pure planning: timeline


def _version_columns(source: Source) -> list[str]:
    return [*source.primary_key, *source.value_columns, "_sequence", "_source_ts", "_op", "_deleted", "_unavailable"]


def _truncates_frame(spark: SparkSession, truncates: Sequence[Truncate]) -> DataFrame:
    schema = StructType([StructField("_t_sequence", SEQUENCE_TYPE, False), StructField("_t_ts", TimestampType(), True)])
    return spark.createDataFrame([(Decimal(s), ts) for s, ts in truncates], schema)


def derive_truncate_versions(real: DataFrame, truncates: Sequence[Truncate], source: Source) -> DataFrame:
    """The delete version a truncate makes for each key alive just before it.

    A key is alive just before truncate T when its last version before T is a non-deleted
    real version and no earlier truncate after that version already deleted it: so for each
    live version only the first truncate before the key's next real version counts.
    """
    keys = _keys(source)
    spark = real.sparkSession
    if not truncates:
        columns = _version_columns(source) + (["_stored"] if "_stored" in real.columns else [])
        return spark.createDataFrame([], real.select(*columns).schema)
    w = Window.partitionBy(*keys).orderBy("_sequence")
    live = (
        real.withColumn("_next_sequence", F.lead("_sequence").over(w))
        .filter(~F.col("_deleted"))
        .select(*keys, "_sequence", "_next_sequence")
    )
    t = F.broadcast(_truncates_frame(spark, truncates))
    hits = live.join(
        t,
        (F.col("_t_sequence") > F.col("_sequence"))
        & (F.col("_next_sequence").isNull() | (F.col("_t_sequence") < F.col("_next_sequence"))),
    )
    first = hits.groupBy(*keys, "_sequence").agg(F.min(F.struct("_t_sequence", "_t_ts")).alias("_t"))
    return first.select(
        *keys,
        *[F.lit(None).cast(source.column(c).type).alias(c) for c in source.value_columns],
        F.col("_t._t_sequence").alias("_sequence"),
        F.col("_t._t_ts").alias("_source_ts"),
        F.lit(TRUNCATE_OP).alias("_op"),
        F.lit(True).alias("_deleted"),
        _empty_string_array().alias("_unavailable"),
        *([F.lit(False).alias("_stored")] if "_stored" in real.columns else []),
    )


def row_hash(source: Source) -> Column:
    """The hash gold records for "built from this row": every source column, null when deleted."""
    return F.when(~F.col("_deleted"), F.sha2(F.to_json(F.struct(*source.column_names)), 256))


def resolve_placeholders(versions: DataFrame, source: Source) -> DataFrame:
    """A TOAST placeholder column takes the value of the key's previous version by sequence.

    The value comes from the last earlier version that carried it (chains of placeholders
    resolve through), or from the key's earliest stored version, whose value was resolved when
    it was written (its own predecessor may have been compacted away). With neither, a new
    version keeps null: Debezium never sent the value and silver never saw it.
    `_stored` marks versions read from history (absent: none are).
    """
    keys = _keys(source)
    stored = F.col("_stored") if "_stored" in versions.columns else F.lit(False)
    order = Window.partitionBy(*keys).orderBy("_sequence")
    w = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    first = F.row_number().over(order) == 1
    resolved = []
    for c in source.value_columns:
        placeholder = F.array_contains(F.col("_unavailable"), c)
        anchor = ~placeholder | (first & stored)
        previous = F.last(F.when(anchor, F.struct(F.col(c).alias("v"))), ignorenulls=True).over(w)
        resolved.append(F.when(placeholder, F.coalesce(previous, F.struct(F.col(c).alias("v")))["v"]).otherwise(F.col(c)).alias(c))
    others = [c for c in versions.columns if c not in source.value_columns]
    return versions.select(*others, *resolved).select(*versions.columns)


def inherit_moved_values(versions: DataFrame, source: Source) -> DataFrame:
    """A primary-key change's create takes its placeholder columns from the old key.

    Debezium turns `UPDATE .. SET id = ..` into a delete of the old key and a create of the
    new one at one LSN; a TOASTed column the update left alone comes as the placeholder on
    the create, whose `__debezium.oldkey` header (`_old_key`) names where the row came from.
    Such a version (a *mover*) takes those columns from the old key's last live version
    before it, as resolved by `resolve_placeholders`, and keeps no placeholder: its values
    are then as real as any. A donor whose value may still come from a pending mover (a chain
    of key changes, with or without updates in between) waits: chains resolve pass by pass.
    A mover whose old key is not in `versions` (never seen) stays a plain placeholder.
    Deleted versions and the rest pass through unchanged.
    """
    keys = _keys(source)
    values = list(source.value_columns)
    cols = versions.columns
    upto = Window.partitionBy(*keys).orderBy("_sequence").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    for _ in range(64):  # each pass resolves at least one more link of every chain
        pending = F.col("_old_key").isNotNull() & (F.size("_unavailable") > 0)
        complete = ~pending & (F.size("_unavailable") == 0)
        # A version whose values may still come from a pending mover of its own key (the mover
        # itself, or placeholder versions after it with no complete version in between) is no
        # donor yet: it waits for a later pass.
        last_pending = F.max(F.when(pending, F.col("_sequence"))).over(upto)
        last_complete = F.max(F.when(complete, F.col("_sequence"))).over(upto)
        waiting = last_pending.isNotNull() & (last_complete.isNull() | (last_complete < last_pending))
        resolved = resolve_placeholders(versions.withColumn("_waiting", waiting).drop("_old_key"), source)
        donors = resolved.filter(~F.col("_deleted")).select(
            *[F.col(k).alias(f"_donor_{k}") for k in keys],
            F.col("_sequence").alias("_donor_sequence"),
            F.struct("_waiting", *values).alias("_donor"),
        )
        movers = versions.filter(pending).select(*keys, "_sequence", "_old_key")
        match = F.lit(True)
        for k in keys:
            match = match & (F.col(f"_old_key.{k}") == F.col(f"_donor_{k}"))
        picked = (
            movers.join(donors, match & (F.col("_donor_sequence") < F.col("_sequence")))
            .groupBy(*keys, "_sequence")
            .agg(F.max_by("_donor", "_donor_sequence").alias("_donor"))
            .filter(~F.col("_donor._waiting"))
        ).localCheckpoint(eager=True)
        if picked.isEmpty():
            break
        joined = versions.join(picked, [*keys, "_sequence"], "left")
        found = F.col("_donor").isNotNull()
        replaced = {
            c: F.when(found & F.array_contains(F.col("_unavailable"), c), F.col(f"_donor.{c}")).otherwise(F.col(c)) for c in values
        }
        replaced["_unavailable"] = F.when(found, _empty_string_array()).otherwise(F.col("_unavailable"))
        replaced["_old_key"] = F.when(~found, F.col("_old_key"))
        versions = joined.select(*[replaced.get(c, F.col(c)).alias(c) for c in cols]).localCheckpoint(eager=True)
    return versions


def build_timeline(existing: DataFrame, changes: DataFrame, truncates: Sequence[Truncate], source: Source) -> DataFrame:
    """The full recomputed history of the keys in `existing` and `changes`.

    `existing`: stored history rows of the touched keys (history layout + `_unavailable`).
    `changes`: deduplicated new changes (`dedupe_changes`). A change whose (key, sequence) is
    already stored is a duplicate and ignored. Stored derived truncate versions are recomputed
    from the real versions, except one with no real version before it (history compacted):
    nothing can contradict it, so it is kept.
    Returns the history layout (without `_recorded_at`) plus `_unavailable`.
    """
    keys = _keys(source)
    cols = _version_columns(source)
    cols = [*cols, "_stored"]
    stored = existing.withColumnRenamed("_valid_from", "_source_ts").withColumn("_stored", F.lit(True)).select(*cols)
    moves = "_old_key" in changes.columns
    stored_real = stored.filter(F.col("_op") != TRUNCATE_OP)
    new = (
        changes.join(existing.select(*keys, "_sequence"), [*keys, "_sequence"], "left_anti")
        .withColumn("_stored", F.lit(False))
        .select(*cols, *(["_old_key"] if moves else []))
    )
    if moves:
        stored_real = stored_real.withColumn("_old_key", F.lit(None).cast(key_struct(source)))
    real = stored_real.unionByName(new)
    derived = derive_truncate_versions(real, truncates, source)
    first_real = real.groupBy(*keys).agg(F.min("_sequence").alias("_first_real"))
    pinned = (
        stored.filter(F.col("_op") == TRUNCATE_OP)
        .join(first_real, keys, "left")
        .filter(F.col("_first_real").isNull() | (F.col("_sequence") < F.col("_first_real")))
        .select(*cols)
    )
    derived_all = pinned.unionByName(derived).dropDuplicates([*keys, "_sequence"])
    derived_all = derived_all.join(real.select(*keys, "_sequence"), [*keys, "_sequence"], "left_anti")
    versions = real.unionByName(derived_all, allowMissingColumns=True)
    if moves:
        versions = inherit_moved_values(versions, source).drop("_old_key")
    versions = resolve_placeholders(versions, source)
    w = Window.partitionBy(*keys).orderBy("_sequence")
    return versions.select(
        *source.column_names,
        row_hash(source).alias("_row_hash"),
        "_sequence",
        "_op",
        "_deleted",
        F.col("_source_ts").alias("_valid_from"),
        F.lead("_source_ts").over(w).alias("_valid_to"),
        F.lead("_sequence").over(w).alias("_valid_to_sequence"),
        "_unavailable",
    )


_HISTORY_COMPARED = ("_row_hash", "_op", "_deleted", "_valid_from", "_valid_to", "_valid_to_sequence")


def plan_history(timeline: DataFrame, existing: DataFrame, source: Source) -> DataFrame:
    """What to write to history: rows of the timeline that differ from the stored ones.

    `_action`: `insert` (a new version), `update` (a stored version whose neighbours moved, or
    a TOAST value corrected), `delete` (a stored derived truncate version no longer valid).
    Unchanged stored versions are not rewritten.
    """
    keys = _keys(source)
    old = existing.select(
        *keys, "_sequence", *[F.col(c).alias(f"_old{c}") for c in _HISTORY_COMPARED], F.lit(True).alias("_old_exists")
    )
    joined = timeline.withColumn("_new_exists", F.lit(True)).join(old, [*keys, "_sequence"], "full")
    changed = F.lit(False)
    for c in _HISTORY_COMPARED:
        changed = changed | ~F.col(c).eqNullSafe(F.col(f"_old{c}"))
    action = (
        F.when(F.col("_new_exists").isNull(), F.lit("delete"))
        .when(F.col("_old_exists").isNull(), F.lit("insert"))
        .when(changed, F.lit("update"))
    )
    history_cols = [f.name for f in silver_history_schema(source).fields if f.name != "_recorded_at"]
    return joined.withColumn("_action", action).filter(F.col("_action").isNotNull()).select(*history_cols, "_unavailable", "_action")


def replaces_current(
    incoming_seq: Column, incoming_hash: Column, incoming_deleted: Column,
    current_seq: Column, current_hash: Column, current_deleted: Column,
) -> Column:
    """The only condition under which a current row is replaced: a newer version, or the same
    version with a different content (a TOAST value corrected); never an identical rewrite and
    never a marker by another marker."""
    newer = (incoming_seq > current_seq) | ((incoming_seq == current_seq) & ~incoming_hash.eqNullSafe(current_hash))
    return newer & ~(incoming_deleted & current_deleted)


def plan_current(timeline: DataFrame, existing_current: DataFrame, source: Source) -> DataFrame:
    """Current rows to upsert: each touched key's last version, when it beats the stored row.

    The change feed of current carries only what a reader of the live table sees change:
    a row appears (insert of a live version), changes (update to a newer version, or the same
    version with a corrected TOAST value), disappears (update to a `_deleted` marker) or comes
    back (update of a marker to a live version). So a key whose last version is deleted gets
    no row if it never had one (deleted in the batch that created it, or only ever seen below
    a truncate), and a marker is never rewritten into another marker (a truncate or late delete
    behind an existing marker). History, not the marker, is what stops an older change from
    resurrecting a key: the timeline always includes every stored version and truncate.
    `_action` is `insert` or `update`.
    """
    keys = _keys(source)
    last = timeline.filter(F.col("_valid_to_sequence").isNull())
    cur = existing_current.select(
        *keys,
        F.col("_sequence").alias("_cur_sequence"),
        F.col("_row_hash").alias("_cur_hash"),
        F.col("_deleted").alias("_cur_deleted"),
        F.lit(True).alias("_cur_exists"),
    )
    joined = last.join(cur, keys, "left")
    insert = F.col("_cur_exists").isNull() & ~F.col("_deleted")
    update = F.col("_cur_exists").isNotNull() & replaces_current(
        F.col("_sequence"), F.col("_row_hash"), F.col("_deleted"),
        F.col("_cur_sequence"), F.col("_cur_hash"), F.col("_cur_deleted"),
    )
    current_cols = [f.name for f in silver_current_schema(source).fields if f.name != "_updated_at"]
    return (
        joined.withColumn("_action", F.when(insert, "insert").when(update, "update"))
        .filter(F.col("_action").isNotNull())
        .withColumn("_source_ts", F.col("_valid_from"))
        .select(*current_cols, "_action")
    )


def classify_changes(
    changes: DataFrame,
    existing: DataFrame,
    existing_current: DataFrame,
    truncate_floor: Truncate | None,
    grace_days: int,
    compacted_before: datetime | None,
    source: Source,
) -> DataFrame:
    """Per new change: duplicate, out of order, and how late (for stats and `_late_changes`).

    Relative to the state before the batch: a change at a stored (key, sequence) is a
    duplicate; one below the key's current sequence or the table's last truncate is out of
    order; its lateness is the source-time distance to that version (or truncate).
    """
    keys = _keys(source)
    stored = existing.select(*keys, "_sequence").withColumn("_in_history", F.lit(True))
    cur = existing_current.select(*keys, F.col("_sequence").alias("_cur_sequence"), F.col("_source_ts").alias("_cur_ts"))
    df = changes.join(stored, [*keys, "_sequence"], "left").join(cur, keys, "left")
    if truncate_floor is not None:
        t_seq, t_ts = F.lit(truncate_floor[0]).cast(SEQUENCE_TYPE), F.lit(truncate_floor[1]).cast(TimestampType())
        use_cur = F.col("_cur_sequence").isNotNull() & (F.col("_cur_sequence") >= t_seq)
        floor_seq = F.when(use_cur, F.col("_cur_sequence")).otherwise(t_seq)
        floor_ts = F.when(use_cur, F.col("_cur_ts")).otherwise(t_ts)
    else:
        floor_seq, floor_ts = F.col("_cur_sequence"), F.col("_cur_ts")
    duplicate = F.col("_in_history").isNotNull() | F.col("_sequence").eqNullSafe(F.col("_cur_sequence"))
    out_of_order = ~duplicate & floor_seq.isNotNull() & (F.col("_sequence") < floor_seq)
    late_by = F.when(out_of_order, F.unix_millis(floor_ts) - F.unix_millis(F.col("_source_ts")))
    beyond = F.lit(False)
    if compacted_before is not None:
        beyond = out_of_order & (F.col("_source_ts") < F.lit(compacted_before).cast(TimestampType()))
    late_reason = F.when(beyond, "beyond_retention").when(out_of_order & (late_by > grace_days * 86_400_000), "late")
    return df.select(
        *keys,
        "_sequence",
        "_source_ts",
        "_op",
        duplicate.alias("_duplicate"),
        out_of_order.alias("_out_of_order"),
        late_by.alias("_late_by_ms"),
        late_reason.alias("_late_reason"),
    )


def late_records(classified: DataFrame, source: Source) -> DataFrame:
    """The `_late_changes` rows for the classified changes that were late."""
    return classified.filter(F.col("_late_reason").isNotNull()).select(
        F.lit(source.name).alias("source"),
        F.to_json(F.struct(*source.primary_key)).alias("key"),
        F.col("_sequence").alias("sequence"),
        F.col("_op").alias("op"),
        F.col("_source_ts").alias("source_ts"),
        F.col("_late_by_ms").alias("late_by_ms"),
        F.col("_late_reason").alias("reason"),
        write_time().alias("recorded_at"),
    )


def history_as_of(history: DataFrame, ts: datetime | str, source: Source) -> DataFrame:
    """Per key, the version valid at source time `ts`, without deleted keys.

    Valid means `_valid_from <= ts < _valid_to` (a null bound is open). Should source clocks
    make two intervals overlap, the version with the greater sequence wins.
    """
    t = F.lit(ts).cast(TimestampType())
    valid = history.filter(
        (F.col("_valid_from").isNull() | (F.col("_valid_from") <= t)) & (F.col("_valid_to").isNull() | (F.col("_valid_to") > t))
    )
    w = Window.partitionBy(*_keys(source)).orderBy(F.col("_sequence").desc())
    return (
        valid.withColumn("_rank", F.row_number().over(w))
        .filter((F.col("_rank") == 1) & ~F.col("_deleted"))
        .drop("_rank")
    )


def key_bounds_condition(alias: str | None, bounds: dict[str, tuple[Any, Any]]) -> Column:
    """`min <= key <= max` per key column: lets Delta skip files whose stats are outside.

    MERGE and the history read stay proportional to the batch when keys are clustered (new
    keys land in new files); with random keys it degrades to the full scan MERGE does anyway.
    """
    cond = F.lit(True)
    for k, (lo, hi) in bounds.items():
        c = F.col(f"{alias}.{k}" if alias else k)
        cond = cond & c.between(F.lit(lo), F.lit(hi))
    return cond


# --------------------------------------------------------------------------- tables


def ensure_silver_tables(spark: SparkSession, pipeline: Pipeline, source: Source, deletion_vectors: bool = True) -> None:
    """Create the silver schema, the source's current/history/TOAST tables, the shared
    truncates and late-change tables and the `<source>_live` view (idempotent).

    Current has Change Data Feed on (gold streams it). Deletion vectors are on by default: a
    MERGE then marks the changed rows instead of rewriting whole files (see bench_silver).
    """
    schema = ".".join(p for p in (pipeline.tables.catalog, pipeline.tables.silver_schema) if p)
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    dv = "true" if deletion_vectors else "false"
    _create(spark, silver_current_table(pipeline, source), silver_current_schema(source),
            {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": dv})
    _create(spark, silver_history_table(pipeline, source), silver_history_schema(source), {"delta.enableDeletionVectors": dv})
    _create(spark, toast_table(pipeline, source), toast_schema(source), {})
    _create(spark, truncates_table(pipeline), truncates_schema(), {})
    _create(spark, late_changes_table(pipeline), late_changes_schema(), {})
    columns = ", ".join(f"`{c}`" for c in source.column_names)
    spark.sql(
        f"CREATE OR REPLACE VIEW {live_view(pipeline, source)} AS "
        f"SELECT {columns} FROM {silver_current_table(pipeline, source)} WHERE NOT _deleted"
    )


def _create(spark: SparkSession, name: str, schema: StructType, properties: dict[str, str]) -> None:
    """Create the table, or add the columns a source gained since (a column added upstream;
    bronze adds it too). Existing rows read null for it. A changed type is an error."""
    if not spark.catalog.tableExists(name):
        builder = DeltaTable.createIfNotExists(spark).tableName(name).addColumns(schema)
        for k, v in properties.items():
            builder = builder.property(k, v)
        builder.execute()
        return
    existing = {f.name: f.dataType for f in spark.table(name).schema.fields}
    conflicts = [f"{f.name}: {existing[f.name].simpleString()} -> {f.dataType.simpleString()}"
                 for f in schema.fields if f.name in existing and existing[f.name] != f.dataType]
    if conflicts:
        raise CdcEnrichError(
            f"table {name} has a different layout than the pipeline declares ({'; '.join(conflicts)}); "
            "write to a new silver schema (tables.silver_schema) and replay bronze, or migrate it by hand"
        )
    missing = [f for f in schema.fields if f.name not in existing]
    if missing:
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({columns})")


def read_truncates(spark: SparkSession, pipeline: Pipeline, source: Source) -> list[Truncate]:
    rows = (
        spark.table(truncates_table(pipeline))
        .filter(F.col("source") == source.name)
        .select("sequence", "source_ts")
        .distinct()
        .collect()
    )
    return sorted((r["sequence"], r["source_ts"]) for r in rows)


def compacted_before(spark: SparkSession, pipeline: Pipeline, source: Source) -> datetime | None:
    """The history compaction horizon (source time), None when never compacted."""
    rows = spark.sql(f"SHOW TBLPROPERTIES {silver_history_table(pipeline, source)} ('{COMPACTED_BEFORE_PROPERTY}')").collect()
    value = rows[0]["value"] if rows else None
    if value is None or not str(value).lstrip("-").isdigit():
        return None
    return datetime.fromtimestamp(int(value) / 1000)  # naive local, as PySpark returns timestamps


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
    source's truncates and whether any TOAST placeholder was ever recorded. Saves two reads
    per batch; `None` fields are read from the tables (a direct call, or the first batch)."""

    truncates: list[Truncate] | None = None
    has_toast: bool | None = None


def apply_batch(
    batch_df: DataFrame, batch_id: int, pipeline: Pipeline, source: Source, app_id: str, state: StreamState | None = None
) -> SilverStats:
    """Apply one micro-batch of bronze rows to the source's silver tables.

    Safe to call again with the same `batch_id` (a replay): every write carries
    (`app_id`:table, `batch_id`) as Delta txn, and planning from the tables' state makes the
    replay a no-op anyway. Work is proportional to the keys in the batch (a truncate touches
    every key alive at it). Spark jobs: one aggregation over the batch, then the changes, the
    touched keys' stored history, the timeline and the plan are each materialized once, one
    count, then the writes.
    """
    spark = batch_df.sparkSession
    keys = _keys(source)
    state = state if state is not None else StreamState()
    clock = _Clock(f"silver {source.name} batch {batch_id}")
    stats = SilverStats(batches=1)
    summary = batch_df.select(batch_summary(batch_df, source).alias("s")).first()["s"]
    clock.lap("summary")
    stats.changes_read, stats.tombstones, stats.truncates, stats.skipped = (
        summary["changes_read"], summary["tombstones"], summary["truncates"], summary["skipped"]
    )
    n_changes = summary["distinct_changes"]
    stats.duplicates = (stats.changes_read - stats.tombstones - stats.truncates - stats.skipped) - n_changes
    batch_truncates: list[Truncate] = sorted({(t["_sequence"], t["_source_ts"]) for t in summary["truncate_events"]})
    if n_changes == 0 and not batch_truncates:
        return stats

    current_name = silver_current_table(pipeline, source)
    history_name = silver_history_table(pipeline, source)
    if state.truncates is None:
        state.truncates = read_truncates(spark, pipeline, source)
    if state.has_toast is None:
        state.has_toast = spark.table(toast_table(pipeline, source)).limit(1).count() > 0
    known_truncates = list(state.truncates)
    all_truncates = sorted(set(known_truncates) | set(batch_truncates))
    new_truncates = [t for t in batch_truncates if t not in set(known_truncates)]
    stats.duplicates += len(batch_truncates) - len(new_truncates)
    horizon = compacted_before(spark, pipeline, source)
    clock.lap("watermarks")

    moves = summary["moves_with_placeholders"] > 0
    changes = dedupe_changes(changes_from_bronze(batch_df, source), source)
    changes = (changes if moves else changes.drop("_old_key")).localCheckpoint(eager=True)
    history = spark.table(history_name)
    touched = changes.select(*keys)
    if moves:
        # A primary-key change with placeholders reads its old key's history too (for the
        # values it carries over), so the batch's key bounds no longer cover what is read.
        old_keys = changes.filter(F.col("_old_key").isNotNull()).select(*[F.col(f"_old_key.{k}").alias(k) for k in keys])
        touched = touched.unionByName(old_keys)
    if batch_truncates:
        # A truncate touches every key alive at it: no key bounds, the whole table is in play.
        bounds: dict[str, tuple[Any, Any]] = {}
        for t_seq, _ in batch_truncates:
            seq = F.lit(t_seq).cast(SEQUENCE_TYPE)
            alive = (
                (F.col("_sequence") < seq)
                & ~F.col("_deleted")
                & (F.col("_valid_to_sequence").isNull() | (F.col("_valid_to_sequence") > seq))
            )
            touched = touched.unionByName(history.filter(alive).select(*keys))
    elif moves:
        bounds = {}
    else:
        bounds = {k: (summary[f"lo_{k}"], summary[f"hi_{k}"]) for k in _bounded_keys(source)}
    touched = touched.distinct()
    if not batch_truncates and n_changes <= BROADCAST_KEYS_LIMIT:
        touched = F.broadcast(touched)
    in_range = key_bounds_condition(None, bounds)
    existing = history.filter(in_range).join(touched, keys, "left_semi")
    if state.has_toast:
        toast = spark.table(toast_table(pipeline, source)).filter(in_range).join(touched, keys, "left_semi")
        existing = existing.join(toast.select(*keys, "_sequence", "_unavailable"), [*keys, "_sequence"], "left")
        unavailable = F.coalesce(F.col("_unavailable"), _empty_string_array())
    else:
        unavailable = _empty_string_array()
    existing = existing.withColumn("_unavailable", unavailable).localCheckpoint(eager=True)
    existing_current = spark.table(current_name).filter(in_range).join(touched, keys, "left_semi")
    clock.lap("read")
    timeline = build_timeline(existing, changes, all_truncates, source).localCheckpoint(eager=True)
    clock.lap("timeline")
    floor = max(known_truncates) if known_truncates else None
    plan = plan_batch(
        timeline, changes, existing, existing_current, floor, pipeline.options.late_grace_days, horizon, source
    ).localCheckpoint(eager=True)
    clock.lap("plan")

    target, action = F.col("_target"), F.col("_action")
    c = plan.groupBy().agg(
        F.count(F.when((target == "history") & (action != "delete"), 1)).alias("history_written"),
        F.count(F.when((target == "history") & (action == "delete"), 1)).alias("history_removed"),
        F.count(F.when(target == "current", 1)).alias("current_upserted"),
        F.count(F.when(target == "toast", 1)).alias("toast"),
        F.count(F.when((target == "change") & F.col("_duplicate"), 1)).alias("duplicates"),
        F.count(F.when((target == "change") & F.col("_out_of_order"), 1)).alias("out_of_order"),
        F.count(F.when((target == "change") & F.col("_late_reason").isNotNull(), 1)).alias("late"),
    ).first()
    stats.history_written, stats.history_removed = c["history_written"], c["history_removed"]
    stats.current_upserted, stats.out_of_order, stats.late = c["current_upserted"], c["out_of_order"], c["late"]
    stats.duplicates += c["duplicates"]
    clock.lap("count")

    # Writes, each tagged with its own txn appId. The facts the plan derives from (truncates,
    # TOAST placeholders) go first, so a crash between writes replans the same result.
    _record_truncates(spark, pipeline, source, new_truncates, app_id, batch_id)
    state.truncates = all_truncates
    if c["toast"]:
        toast_rows = plan.filter(target == "toast").select(*[f.name for f in toast_schema(source).fields])
        _append(toast_rows, toast_table(pipeline, source), f"{app_id}:toast", batch_id)
        state.has_toast = True
    if stats.history_written or stats.history_removed:
        with delta_txn(spark, f"{app_id}:history", batch_id):
            _merge_history(spark, history_name, plan.filter(target == "history"), source, bounds)
        clock.lap("merge history")
    if stats.current_upserted:
        with delta_txn(spark, f"{app_id}:current", batch_id):
            _merge_current(spark, current_name, plan.filter(target == "current"), source, bounds)
        clock.lap("merge current")
    if stats.late:
        _append(late_records(plan.filter(target == "change"), source), late_changes_table(pipeline), f"{app_id}:late", batch_id)
    clock.done()
    return stats


class _Clock:
    """Phase timings of a batch, logged at DEBUG (where a slow batch spends its time)."""

    def __init__(self, label: str) -> None:
        self.label, self.start, self.last, self.laps = label, time.perf_counter(), time.perf_counter(), []

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps.append(f"{name} {now - self.last:.2f}s")
        self.last = now

    def done(self) -> None:
        log.debug("%s: %s; total %.2fs", self.label, ", ".join(self.laps), time.perf_counter() - self.start)


def _bounded_keys(source: Source) -> list[str]:
    """Key columns whose min/max bound the batch (integral and string types)."""
    struct = key_struct(source)
    return [k for k in source.primary_key if isinstance(struct[k].dataType, (IntegralType, StringType))]


def _append(df: DataFrame, table: str, app_id: str, version: int) -> None:
    df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", version).saveAsTable(table)


def _record_truncates(
    spark: SparkSession, pipeline: Pipeline, source: Source, truncates: Sequence[Truncate], app_id: str, batch_id: int
) -> None:
    if not truncates:
        return
    rows = [(source.name, Decimal(s), ts) for s, ts in truncates]
    df = spark.createDataFrame(rows, "source string, sequence decimal(38,0), source_ts timestamp").withColumn(
        "recorded_at", write_time()
    )
    _append(df, truncates_table(pipeline), f"{app_id}:truncates", batch_id)


def _merge_history(spark: SparkSession, name: str, plan: DataFrame, source: Source, bounds: dict[str, tuple[Any, Any]]) -> None:
    cond = key_bounds_condition("t", bounds)
    for k in [*source.primary_key, "_sequence"]:
        cond = cond & (F.col(f"t.{k}") == F.col(f"s.{k}"))
    cols = [f.name for f in silver_history_schema(source).fields if f.name != "_recorded_at"]
    values = {c: F.col(f"s.{c}") for c in cols} | {"_recorded_at": write_time()}
    (
        DeltaTable.forName(spark, name).alias("t")
        .merge(plan.alias("s"), cond)
        .whenMatchedDelete(condition=F.col("s._action") == "delete")
        .whenMatchedUpdate(condition=F.col("s._action") != "delete", set=values)
        .whenNotMatchedInsert(condition=F.col("s._action") != "delete", values=values)
        .execute()
    )


def _merge_current(spark: SparkSession, name: str, plan: DataFrame, source: Source, bounds: dict[str, tuple[Any, Any]]) -> None:
    cond = key_bounds_condition("t", bounds)
    for k in source.primary_key:
        cond = cond & (F.col(f"t.{k}") == F.col(f"s.{k}"))
    cols = [f.name for f in silver_current_schema(source).fields if f.name != "_updated_at"]
    values = {c: F.col(f"s.{c}") for c in cols} | {"_updated_at": write_time()}
    replaces = replaces_current(
        F.col("s._sequence"), F.col("s._row_hash"), F.col("s._deleted"),
        F.col("t._sequence"), F.col("t._row_hash"), F.col("t._deleted"),
    )
    (
        DeltaTable.forName(spark, name).alias("t")
        .merge(plan.alias("s"), cond)
        .whenMatchedUpdate(condition=replaces, set=values)
        .whenNotMatchedInsert(condition=~F.col("s._deleted"), values=values)
        .execute()
    )


# --------------------------------------------------------------------------- runner


def stream_app_id(checkpoint: Path) -> str:
    """The txn appId of one stream: a uuid kept inside its checkpoint.

    Delta skips a write whose (appId, version) is not above the last recorded; batch ids
    restart at 0 with a new checkpoint, so the appId must change with the checkpoint, or a
    reset stream would silently write nothing.
    """
    checkpoint.mkdir(parents=True, exist_ok=True)
    marker = checkpoint / APP_ID_FILE
    if not marker.exists():
        marker.write_text(f"silver-{uuid.uuid4()}\n")
    return marker.read_text().strip()


def silver_checkpoint(pipeline: Pipeline, source: Source, lake: Path) -> Path:
    """One checkpoint per target table (catalog and schema included, so variants never share)."""
    return checkpoint_dir(lake, pipeline.name, f"silver__{silver_current_table(pipeline, source)}")


def run_silver(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    sources: list[str] | None = None,
    trigger: str = "available_now",
    progress: Callable[[str], None] | None = None,
) -> SilverReport:
    """Stream each source's bronze table into its silver tables (one query per source).

    `trigger`: `available_now` (drain what is there, then return) or `processing_time`
    (`options.processing_time`; runs until stopped). `progress(message)` gets one line per
    batch.
    """
    names = sources or list(pipeline.sources)
    report = SilverReport()
    queries = []
    try:
        for name in names:
            source = pipeline.source(name)
            bronze = bronze_table(pipeline, source)
            if not spark.catalog.tableExists(bronze):
                raise CdcEnrichError(f"bronze table {bronze} does not exist: run the bronze job for {name!r} first")
            ensure_silver_tables(spark, pipeline, source)
            checkpoint = silver_checkpoint(pipeline, source, lake)
            app_id = stream_app_id(checkpoint)
            report.sources.setdefault(name, SilverStats())
            state = StreamState()

            def on_batch(
                batch_df: DataFrame, batch_id: int, source: Source = source, app_id: str = app_id, state: StreamState = state
            ) -> None:
                stats = apply_batch(batch_df, batch_id, pipeline, source, app_id, state)
                report.add(source.name, stats)
                if progress is not None:
                    progress(f"silver {source.name} batch {batch_id}: {stats.describe()}")

            writer = (
                spark.readStream.format("delta").table(bronze)
                .writeStream.foreachBatch(on_batch)
                .option("checkpointLocation", str(checkpoint))
                .queryName(f"silver_{pipeline.tables.silver_schema}_{name}")
            )
            if trigger == "available_now":
                writer = writer.trigger(availableNow=True)
            elif trigger == "processing_time":
                writer = writer.trigger(processingTime=pipeline.options.processing_time)
            else:
                raise ValueError(f"trigger must be available_now or processing_time, got {trigger!r}")
            queries.append(writer.start())
        for query in queries:
            query.awaitTermination()
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
    return report


# --------------------------------------------------------------------------- reads and maintenance


def as_of(spark: SparkSession, pipeline: Pipeline, source: str | Source, ts: datetime | str) -> DataFrame:
    """The rows of `source` as of source time `ts`: per key the version valid then, deleted
    keys excluded (history layout). Delta's VERSION/TIMESTAMP AS OF answer "as the lake
    was"; this answers "as the source database was"."""
    src = pipeline.source(source) if isinstance(source, str) else source
    return history_as_of(spark.table(silver_history_table(pipeline, src)), ts, src)


def compact_history(
    spark: SparkSession,
    pipeline: Pipeline,
    source: str | Source,
    retention_days: int | None = None,
    now: datetime | None = None,
) -> int:
    """Drop history versions whose `_valid_to` is older than the retention; return how many.

    The current version of a key (`_valid_to` null), including a delete marker, is never
    dropped. The horizon is kept as a history table property so later changes older than it
    are recorded in `_late_changes` (reason `beyond_retention`) instead of vanishing.
    """
    src = pipeline.source(source) if isinstance(source, str) else source
    days = retention_days if retention_days is not None else pipeline.options.history_retention_days
    now = now or datetime.now()  # naive local, PySpark's convention for timestamp literals
    cutoff = now - timedelta(days=days)
    name = silver_history_table(pipeline, src)
    expired = F.col("_valid_to").isNotNull() & (F.col("_valid_to") < F.lit(cutoff).cast(TimestampType()))
    count = spark.table(name).filter(expired).count()
    if count:
        DeltaTable.forName(spark, name).delete(expired)
        keys = [*src.primary_key, "_sequence"]
        orphans = spark.table(toast_table(pipeline, src)).join(spark.table(name).select(*keys), keys, "left_anti")
        cond = F.lit(True)
        for k in keys:
            cond = cond & (F.col(f"t.{k}") == F.col(f"s.{k}"))
        DeltaTable.forName(spark, toast_table(pipeline, src)).alias("t").merge(orphans.alias("s"), cond).whenMatchedDelete().execute()
    previous = compacted_before(spark, pipeline, src)
    horizon = max(cutoff, previous) if previous else cutoff
    millis = int(horizon.timestamp() * 1000)
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('{COMPACTED_BEFORE_PROPERTY}' = '{millis}')")
    return count


def late_changes(spark: SparkSession, pipeline: Pipeline, source: str | None = None) -> DataFrame:
    """The recorded late changes, optionally for one source."""
    df = spark.table(late_changes_table(pipeline))
    return df.filter(F.col("source") == source) if source else df
