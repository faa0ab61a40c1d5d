"""Silver's pure planning: bronze rows -> ordered changes -> timeline -> history and current plans."""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal
from typing import Any, Sequence

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    IntegralType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakehouse.deltasql import sql_literal
from lakehouse.execution import SMALL_WORK_SETTINGS, checkpoint_observing, is_small_frame, session_settings
from lakehouse.frames import local_frame
from lakehouse.sqltext import quote
from lakehouse.declaration import Source
from lakehouse.spark import write_time
from lakehouse.tables import (
    SEQUENCE_TYPE,
    key_struct,
    silver_current_schema,
    silver_history_schema,
)

COMPACTED_BEFORE_PROPERTY = "cdc_enrich.history.compactedBeforeMs"
CHANGE_OPS = ("r", "c", "u", "d")
TRUNCATE_OP = "t"
TOMBSTONE_OP = "tombstone"
SNAPSHOT_END_MARKERS = ("last_in_data_collection", "last")  # `source.snapshot` of a table's last snapshot record
BROADCAST_KEYS_LIMIT = 200_000  # a batch's keys are broadcast to the table scans up to this many
LISTED_KEYS_LIMIT = 1_000  # up to this many touched keys are listed in the scans' filter instead
log = logging.getLogger(__name__)

Truncate = tuple[Decimal, datetime | None]  # (sequence, source time)


# --------------------------------------------------------------------------- pure planning: changes


def empty_string_array() -> Column:
    """An empty array<string> (a version with no TOAST placeholders)."""
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
        else empty_string_array()
    )
    unavailable = F.when(op == "d", empty_string_array()).otherwise(unavailable)
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
    """One aggregation over a batch: counts, the truncate events, the snapshot ends
    (`lakehouse.silver.snapshots`) and the min/max of each boundable key column (for file
    skipping), the least sequence of a change (`first_sequence`), and the changes that may carry
    a TOAST placeholder (`placeholders`, counted from bronze's list of them, whatever its
    columns). `usable_changes` counts the change rows with a key and a sequence, each copy of a
    change apart: an exact distinct count here is a second aggregation (0.6-1.1 s of a warm
    100k-row batch's summary, 2026-12-06), and the distinct changes are counted for free once
    deduplicated (`apply_changes`)."""
    op = F.col("_op")
    key_cols = [F.coalesce(F.col(f"_key.{k}"), F.col(f"_after.{k}"), F.col(f"_before.{k}")) for k in source.primary_key]
    keyed = F.lit(True)
    for k in key_cols:
        keyed = keyed & k.isNotNull()
    usable_change = op.isin(*CHANGE_OPS) & F.col("_sequence").isNotNull() & keyed
    usable_truncate = (op == TRUNCATE_OP) & F.col("_sequence").isNotNull()
    ends_snapshot = usable_change & (op == "r") & F.col("_source_snapshot").isin(*SNAPSHOT_END_MARKERS)
    carries_placeholder = usable_change & (op != "d") & (F.length(F.coalesce(F.col("_unavailable_columns"), F.lit(""))) > 0)
    moved = carries_placeholder & _old_key_column(bronze, source).isNotNull()
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
        F.count(F.when(usable_change, 1)).alias("usable_changes"),
        F.min(F.when(usable_change, F.col("_sequence"))).alias("first_sequence"),
        F.count(F.when(moved, 1)).alias("moves_with_placeholders"),
        F.count(F.when(carries_placeholder, 1)).alias("placeholders"),
        F.collect_list(F.when(usable_truncate, F.struct(F.col("_sequence"), ts.alias("_source_ts")))).alias("truncate_events"),
        F.collect_set(F.when(ends_snapshot, F.struct(F.col("_sequence"), ts.alias("_source_ts")))).alias("snapshot_ends"),
        *bounds,
    )


# --------------------------------------------------------------------------- pure planning: timeline


def _version_columns(source: Source) -> list[str]:
    return [*source.primary_key, *source.value_columns, "_sequence", "_source_ts", "_op", "_deleted", "_unavailable"]


def _truncates_frame(spark: SparkSession, truncates: Sequence[Truncate]) -> DataFrame:
    schema = StructType([StructField("_t_sequence", SEQUENCE_TYPE, False), StructField("_t_ts", TimestampType(), True)])
    return local_frame(spark, [(Decimal(s), ts) for s, ts in truncates], schema)


def derive_truncate_versions(real: DataFrame, truncates: Sequence[Truncate], source: Source) -> DataFrame:
    """The delete version a truncate makes for each key alive just before it.

    A key is alive just before truncate T when its last version before T is a non-deleted
    real version and no earlier truncate after that version already deleted it: so for each
    live version only the first truncate before the key's next real version counts.
    """
    keys = _keys(source)
    spark = real.sparkSession
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
        empty_string_array().alias("_unavailable"),
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

    A mover whose own key's previous version is live is no mover: a create cannot follow a
    live version of its key in a consistent stream, so that version was read after the create
    (a snapshot taken while changes commit reads past its LSN, and the changes after that LSN
    are streamed again). It resolves from that version like an update, not from the old key,
    whose last version silver holds may predate the move.

    Only the versions of the movers' keys and their old keys take part (`_moving_keys`): the
    passes read those alone, with the settings for a few rows when they are few
    (`lakehouse.execution`), and every other version passes through as it came.
    """
    keys = _keys(source)
    involved = _moving_keys(versions, source)
    # materialized once for every pass, and counted by the job that does it
    moving, seen = checkpoint_observing(versions.join(involved, keys, "left_semi"), [F.count(F.lit(1)).alias("rows")])
    still = versions.join(involved, keys, "left_anti")
    small = SMALL_WORK_SETTINGS if is_small_frame(seen["rows"]) else {}
    with session_settings(versions.sparkSession, small):
        moved = _inherit_passes(moving, source)
    log.debug("%s: %d versions of moved and donor keys, settings for a few rows: %s", source.name, seen["rows"], bool(small))
    return still.unionByName(moved)


def _moving_keys(versions: DataFrame, source: Source) -> DataFrame:
    """The keys whose versions a move can change or give values to: each version carrying an
    `_old_key` names its own key and that old key (materialized: versions are split by it twice)."""
    keys = _keys(source)
    movers = versions.filter(F.col("_old_key").isNotNull())
    return (
        movers.select(*keys)
        .unionByName(movers.select(*[F.col(f"_old_key.{k}").alias(k) for k in keys]))
        .distinct()
        .localCheckpoint(eager=True)
    )


def _inherit_passes(versions: DataFrame, source: Source) -> DataFrame:
    """`inherit_moved_values` pass by pass over `versions`, which hold every version of each
    key they hold (the movers' and their old keys': the windows and joins below are per key)."""
    keys = _keys(source)
    values = list(source.value_columns)
    cols = versions.columns
    by_sequence = Window.partitionBy(*keys).orderBy("_sequence")
    previous_live = F.coalesce(F.lag(~F.col("_deleted")).over(by_sequence), F.lit(False))
    versions = versions.withColumn("_old_key", F.when(previous_live, F.lit(None)).otherwise(F.col("_old_key")))
    upto = by_sequence.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    for passes in range(1, 65):  # each pass resolves at least one more link of every chain
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
        picked, found_any = checkpoint_observing(
            movers.join(donors, match & (F.col("_donor_sequence") < F.col("_sequence")))
            .groupBy(*keys, "_sequence")
            .agg(F.max_by("_donor", "_donor_sequence").alias("_donor"))
            .filter(~F.col("_donor._waiting")),
            [F.count(F.lit(1)).alias("rows")],
        )
        log.debug("%s: key-change pass %d gave %d movers their values", source.name, passes, found_any["rows"])
        if not found_any["rows"]:
            break
        joined = versions.join(picked, [*keys, "_sequence"], "left")
        found = F.col("_donor").isNotNull()
        replaced = {
            c: F.when(found & F.array_contains(F.col("_unavailable"), c), F.col(f"_donor.{c}")).otherwise(F.col(c)) for c in values
        }
        replaced["_unavailable"] = F.when(found, empty_string_array()).otherwise(F.col("_unavailable"))
        replaced["_old_key"] = F.when(~found, F.col("_old_key"))
        versions = joined.select(*[replaced.get(c, F.col(c)).alias(c) for c in cols]).localCheckpoint(eager=True)
    return versions


def build_timeline(
    existing: DataFrame, changes: DataFrame, truncates: Sequence[Truncate], source: Source, placeholders: bool = True
) -> DataFrame:
    """The full recomputed history of the keys in `existing` and `changes`.

    `existing`: stored history rows of the touched keys (history layout + `_unavailable`).
    `changes`: deduplicated new changes (`dedupe_changes`). A change whose (key, sequence) is
    already stored is a duplicate and ignored. Stored derived truncate versions are recomputed
    from the real versions, except one with no real version before it (history compacted):
    nothing can contradict it, so it is kept. With no truncate (the source's, all of them) there
    is no derived version, stored or new: a truncate is recorded before any version it derives.
    `placeholders`: whether a version may carry a TOAST placeholder (False: none in `existing`
    nor in `changes`, and their resolution is skipped).
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
    versions = real.unionByName(_truncate_versions(stored, real, truncates, source), allowMissingColumns=True) if truncates else real
    if moves:
        versions = inherit_moved_values(versions, source).drop("_old_key")
    if placeholders:
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


def _truncate_versions(stored: DataFrame, real: DataFrame, truncates: Sequence[Truncate], source: Source) -> DataFrame:
    """The derived truncate versions of a timeline (`build_timeline`): those the truncates make
    of the `real` versions, and the `stored` ones with no real version before them."""
    keys = _keys(source)
    derived = derive_truncate_versions(real, truncates, source)
    first_real = real.groupBy(*keys).agg(F.min("_sequence").alias("_first_real"))
    pinned = (
        stored.filter(F.col("_op") == TRUNCATE_OP)
        .join(first_real, keys, "left")
        .filter(F.col("_first_real").isNull() | (F.col("_sequence") < F.col("_first_real")))
        .select(*stored.columns)
    )
    derived_all = pinned.unionByName(derived).dropDuplicates([*keys, "_sequence"])
    return derived_all.join(real.select(*keys, "_sequence"), [*keys, "_sequence"], "left_anti")


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
    incoming_seq: str, incoming_hash: str, incoming_deleted: str,
    current_seq: str, current_hash: str, current_deleted: str,
) -> str:
    """The only condition under which a current row is replaced: a newer version, or the same
    version with a different content (a TOAST value corrected); never an identical rewrite and
    never a marker by another marker. SQL text over the six columns' expressions: silver's
    MERGE condition and `plan_current`'s filter alike."""
    newer = f"({incoming_seq} > {current_seq} OR ({incoming_seq} = {current_seq} AND NOT ({incoming_hash} <=> {current_hash})))"
    return f"({newer} AND NOT ({incoming_deleted} AND {current_deleted}))"


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
    update = F.col("_cur_exists").isNotNull() & F.expr(
        replaces_current("_sequence", "_row_hash", "_deleted", "_cur_sequence", "_cur_hash", "_cur_deleted")
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


def key_bounds_sql(alias: str | None, bounds: dict[str, tuple[Any, Any]]) -> str:
    """`min <= key <= max` per key column: lets Delta skip files whose stats are outside.

    MERGE and the history read stay proportional to the batch when keys are clustered (new
    keys land in new files); with random keys it degrades to the full scan MERGE does anyway.
    """
    terms = [
        f"{alias + '.' if alias else ''}{quote(k)} BETWEEN {sql_literal(lo)} AND {sql_literal(hi)}"
        for k, (lo, hi) in bounds.items()
    ]
    return " AND ".join(terms) or "TRUE"


def keys_in(keys: Sequence[Any], source: Source) -> Column:
    """The rows whose primary key is one of `keys` (tuples or Rows of the key's values in key
    order; a one-column key's plain values too): a small batch's touched keys as a filter on the
    table scans, instead of a semi join whose broadcast costs two Spark jobs per scan. A
    one-column key is a plain `IN` on the column, which Delta also uses to skip files; a compound
    key compares structs."""
    struct = key_struct(source)
    if len(source.primary_key) == 1:
        k = source.primary_key[0]
        return F.col(k).isin([F.lit(v[0] if isinstance(v, tuple) else v).cast(struct[k].dataType) for v in keys])
    pairs = [F.struct(*[F.lit(v).cast(struct[k].dataType).alias(k) for k, v in zip(source.primary_key, values)]) for values in keys]
    return F.struct(*[F.col(k) for k in source.primary_key]).isin(pairs)


def key_bounds_condition(alias: str | None, bounds: dict[str, tuple[Any, Any]]) -> Column:
    """`key_bounds_sql` as a DataFrame filter."""
    return F.expr(key_bounds_sql(alias, bounds))


def _bounded_keys(source: Source) -> list[str]:
    """Key columns whose min/max bound the batch (integral and string types)."""
    struct = key_struct(source)
    return [k for k in source.primary_key if isinstance(struct[k].dataType, (IntegralType, StringType))]
