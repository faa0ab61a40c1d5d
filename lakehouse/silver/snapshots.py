"""Snapshot reconciliation: a completed snapshot deletes the keys it no longer holds.

A Debezium connector restarted from an offset written while its snapshot ran (a crash right
after the snapshot, before Kafka Connect flushed a streaming offset; lost or reset offsets)
takes a new snapshot: an `r` record for every row that exists, all at one newer position, and
nothing at all for the rows deleted while it was down. Applying the `r` records as upserts
leaves those rows alive in silver and gold forever. A careful consumer treats a completed
snapshot of a table as that table's whole state at the snapshot's position: every key alive
just before it and absent from it was deleted.

So, per source whose ordering rule gives every record of a snapshot one sequence S
(`lakehouse.ordering.OrderingRule.snapshot_shares_sequence`): when a batch holds the record
that ends a table's snapshot (`source.snapshot` = `last_in_data_collection` or `last`: `plan.SNAPSHOT_END_MARKERS`, counted by
`batch_summary`), the
snapshot's keys are read from bronze (every `r` record at S), and each key alive just before S
(silver current, or the batch's own earlier changes) that is not among them gets a delete at
S - 1 (for PostgreSQL: the delete position of the snapshot's LSN, before its reads). The
deletes are ordinary changes from then on: history, current, change feed, gold.

A replayed old snapshot (same S) deletes nothing: every key alive just before S is in it.
Not covered: a table whose snapshot is empty (no record ends it), a topic with several
partitions whose snapshot records reach bronze after its end record, and ordering rules whose
snapshot records have distinct sequences (ts_ms; MySQL's rule is not verified against a real
connector, so it is off).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from lakehouse.declaration import Source
from lakehouse.ordering import rule
from lakehouse.silver.plan import empty_string_array
from lakehouse.tables import SEQUENCE_TYPE, key_struct

SnapshotEnd = tuple[Decimal, Any]  # (the snapshot's sequence, its source time)


def reconciles_snapshots(source: Source) -> bool:
    """Whether this source's ordering rule lets silver reconcile a completed snapshot."""
    return rule(source.sequence).snapshot_shares_sequence


def snapshot_keys(changes: DataFrame, sequence: Decimal, source: Source) -> DataFrame:
    """The keys of the snapshot at `sequence`: every `r` change at it (`changes_from_bronze`
    over bronze, which the snapshot may span)."""
    rows = changes.filter((F.col("_op") == "r") & (F.col("_sequence") == F.lit(sequence).cast(SEQUENCE_TYPE)))
    return rows.select(*source.primary_key).distinct()


def reconciliation_deletes(
    alive_before: DataFrame, in_snapshot: DataFrame, end: SnapshotEnd, source: Source
) -> DataFrame:
    """Delete changes (the layout of `changes_from_bronze` without `_old_key`) for the keys
    alive just before the snapshot and absent from it.

    `alive_before`: versions (key columns, `_sequence`, `_deleted`) known for the keys, e.g.
    silver current plus the batch's own changes; only those before the snapshot count, and per
    key the latest of them decides. `in_snapshot`: the snapshot's keys (`snapshot_keys`).
    """
    keys = list(source.primary_key)
    sequence, source_ts = end
    at = F.lit(sequence).cast(SEQUENCE_TYPE)
    latest = Window.partitionBy(*keys).orderBy(F.col("_sequence").desc(), F.col("_deleted").asc())
    alive = (
        alive_before.filter(F.col("_sequence") < at)
        .withColumn("_rank", F.row_number().over(latest))
        .filter((F.col("_rank") == 1) & ~F.col("_deleted"))
        .select(*keys)
        .join(in_snapshot, keys, "left_anti")
    )
    struct = key_struct(source)
    return alive.select(
        *[F.col(k).cast(struct[k].dataType).alias(k) for k in keys],
        *[F.lit(None).cast(source.column(c).type).alias(c) for c in source.value_columns],
        (at - F.lit(1)).cast(SEQUENCE_TYPE).alias("_sequence"),
        F.lit(source_ts).cast("timestamp").alias("_source_ts"),
        F.lit("d").alias("_op"),
        F.lit(True).alias("_deleted"),
        empty_string_array().alias("_unavailable"),
    )


def versions(frame: DataFrame, source: Source) -> DataFrame:
    """(key columns, `_sequence`, `_deleted`) of a frame of changes or of silver current."""
    return frame.select(*source.primary_key, "_sequence", "_deleted")


def ends_to_reconcile(ends: Sequence[SnapshotEnd], first_sequence: Decimal | None, store_has_rows: bool) -> list[SnapshotEnd]:
    """The snapshot ends a batch must reconcile: those with a key that may be alive just before
    them. With no row in the store, only the batch's own changes before a snapshot can be
    (`first_sequence`: the least sequence among them), so a source's first snapshot into an
    empty silver, its initial load, deletes nothing and reads no bronze.

    >>> ends = [(Decimal(10), None), (Decimal(20), None)]
    >>> ends_to_reconcile(ends, Decimal(10), store_has_rows=False)  # the batch starts with the first snapshot
    [(Decimal('20'), None)]
    >>> ends_to_reconcile(ends, Decimal(5), store_has_rows=False) == ends  # a change before it
    True
    >>> ends_to_reconcile(ends, Decimal(30), store_has_rows=True) == ends
    True
    """
    if store_has_rows:
        return list(ends)
    return [end for end in ends if first_sequence is not None and first_sequence < end[0]]


def snapshot_ends(summary_ends: Sequence[Any]) -> list[SnapshotEnd]:
    """The distinct snapshot ends of a batch summary, oldest first."""
    return sorted({(e["_sequence"], e["_source_ts"]) for e in summary_ends})
