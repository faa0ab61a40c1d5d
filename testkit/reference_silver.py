"""A reference silver maintainer for tests: applies plain changes to silver current rows (in the
source's store, `lakehouse.silver.store`), no history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StructField, StructType

from lakehouse.declaration import Pipeline, Source
from lakehouse.frames import local_frame
from lakehouse.tables import (
    CURRENT_KIND,
    KIND_COLUMN,
    SEQUENCE_TYPE,
    row_struct,
    silver_store_table,
)

# --------------------------------------------------------------------------- reference silver maintainer


@dataclass(frozen=True)
class Change:
    """One source change: the new row image (None for a delete) at a source sequence."""

    row: Mapping[str, Any] | None
    sequence: int
    key: Mapping[str, Any] | None = None  # required for a delete; taken from `row` otherwise

    def key_of(self, source: Source) -> dict[str, Any]:
        image = self.key if self.key is not None else self.row
        assert image is not None, "a delete needs its key"
        return {k: image[k] for k in source.primary_key}


def changes_schema(source: Source) -> StructType:
    return StructType(
        list(row_struct(source).fields)
        + [StructField("_sequence", SEQUENCE_TYPE, False), StructField("_delete", BooleanType(), False)]
    )


def changes_frame(spark: SparkSession, source: Source, changes: Sequence[Change]) -> DataFrame:
    """Changes as a DataFrame typed per `row_struct(source)` plus `_sequence` and `_delete`."""
    from decimal import Decimal

    rows = []
    for change in changes:
        image = dict(change.row) if change.row is not None else change.key_of(source)
        values = [image.get(c) for c in source.column_names]
        rows.append(tuple(values) + (Decimal(change.sequence), change.row is None))
    return local_frame(spark, rows, changes_schema(source))


def create_silver_current(spark: SparkSession, pipeline: Pipeline, source: Source) -> str:
    """Create the source's silver tables as silver does (if missing); the store's name."""
    from lakehouse.silver.layout import ensure_silver_tables

    name = silver_store_table(pipeline, source)
    if not spark.catalog.tableExists(name):
        ensure_silver_tables(spark, pipeline, source)
    return name


def append_silver_rows(rows: DataFrame, pipeline: Pipeline, source: Source, kind: str = CURRENT_KIND) -> None:
    """Append `rows` (a current or history table's columns, per `kind`) to the source's store in
    one commit, as a bench or test loads silver without going through its stream."""
    rows.withColumn(KIND_COLUMN, F.lit(kind)).write.format("delta").mode("append").saveAsTable(silver_store_table(pipeline, source))


def silver_rows(spark: SparkSession, source: Source, changes: DataFrame | Sequence[Change]) -> DataFrame:
    """`changes` as silver current rows (`silver_current_schema`'s columns): the newest per key,
    a delete as the key with `_deleted = true` and a null payload."""
    df = changes if isinstance(changes, DataFrame) else changes_frame(spark, source, changes)
    pk = list(source.primary_key)
    newest = Window.partitionBy(*pk).orderBy(F.col("_sequence").desc())
    df = df.withColumn("_rank", F.row_number().over(newest)).where("_rank = 1").drop("_rank")
    payload = [c for c in source.column_names if c not in pk]
    deleted = F.col("_delete")
    return df.select(
        *[F.col(c) for c in pk],
        *[F.when(deleted, F.lit(None)).otherwise(F.col(c)).alias(c) for c in payload],
        F.when(deleted, F.lit(None)).otherwise(
            F.sha2(F.to_json(F.array(*[F.col(c).cast("string") for c in source.column_names])), 256)
        ).alias("_row_hash"),
        F.col("_sequence"),
        F.current_timestamp().alias("_source_ts"),
        F.when(deleted, F.lit("d")).otherwise(F.lit("u")).alias("_op"),
        deleted.alias("_deleted"),
        F.current_timestamp().alias("_updated_at"),
    )


def apply_silver_changes(
    spark: SparkSession,
    pipeline: Pipeline,
    source: Source,
    changes: DataFrame | Sequence[Change],
    physical_delete: bool = False,
) -> None:
    """Latest by sequence wins: one MERGE; a duplicate or older change rewrites nothing.

    A delete keeps the key with `_deleted = true` and a null payload (silver's contract), or,
    with `physical_delete`, removes the row (so gold's defensive handling of CDF `delete` rows
    can be exercised).
    """
    from delta.tables import DeltaTable

    df = silver_rows(spark, source, changes)
    table = create_silver_current(spark, pipeline, source)
    pk = list(source.primary_key)
    on = " AND ".join([f"t.{KIND_COLUMN} = '{CURRENT_KIND}'"] + [f"t.`{c}` = s.`{c}`" for c in pk])
    values = {c: f"s.`{c}`" for c in df.columns} | {KIND_COLUMN: f"'{CURRENT_KIND}'"}
    merge = DeltaTable.forName(spark, table).alias("t").merge(df.alias("s"), on)
    if physical_delete:
        merge = merge.whenMatchedDelete(condition="s._deleted AND s._sequence > t._sequence")
        merge = merge.whenMatchedUpdate(condition="s._sequence > t._sequence", set=values)
        merge = merge.whenNotMatchedInsert(condition="NOT s._deleted", values=values)
    else:
        merge = merge.whenMatchedUpdate(condition="s._sequence > t._sequence", set=values)
        merge = merge.whenNotMatchedInsert(values=values)
    merge.execute()
