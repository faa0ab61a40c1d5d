"""Reading silver back: as-of queries, late changes, and history compaction."""

from __future__ import annotations

from datetime import datetime, timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    TimestampType,
)

from lakehouse.declaration import Pipeline, Source
from lakehouse.deltasql import delete_matching
from lakehouse.silver.layout import compacted_before, toast_rows, toast_table
from lakehouse.silver.plan import COMPACTED_BEFORE_PROPERTY, history_as_of
from lakehouse.silver.store import history_of
from lakehouse.tables import (
    HISTORY_KIND,
    KIND_COLUMN,
    late_changes_table,
    silver_history_table,
    silver_store_table,
)

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
    dropped. The horizon is kept as a property of the source's store so later changes older than it
    are recorded in `_late_changes` (reason `beyond_retention`) instead of vanishing.
    """
    src = pipeline.source(source) if isinstance(source, str) else source
    days = retention_days if retention_days is not None else pipeline.options.history_retention_days
    now = now or datetime.now()  # naive local, PySpark's convention for timestamp literals
    cutoff = now - timedelta(days=days)
    name = silver_store_table(pipeline, src)
    expired = F.col("_valid_to").isNotNull() & (F.col("_valid_to") < F.lit(cutoff).cast(TimestampType()))
    keys = [*src.primary_key, "_sequence"]
    doomed = history_of(spark, pipeline, src).filter(expired).select(*keys).localCheckpoint(eager=True)
    count = doomed.count()
    if count:
        delete_matching(doomed.withColumn(KIND_COLUMN, F.lit(HISTORY_KIND)), name, [*keys, KIND_COLUMN])
        toast = toast_rows(spark, pipeline, src)
        if toast is not None:  # the versions' placeholders go with them
            kept = history_of(spark, pipeline, src).select(*keys)
            delete_matching(toast.join(kept, keys, "left_anti"), toast_table(pipeline, src), keys)
    previous = compacted_before(spark, pipeline, src)
    horizon = max(cutoff, previous) if previous else cutoff
    millis = int(horizon.timestamp() * 1000)
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('{COMPACTED_BEFORE_PROPERTY}' = '{millis}')")
    return count


def late_changes(spark: SparkSession, pipeline: Pipeline, source: str | None = None) -> DataFrame:
    """The recorded late changes, optionally for one source."""
    df = spark.table(late_changes_table(pipeline))
    return df.filter(F.col("source") == source) if source else df
