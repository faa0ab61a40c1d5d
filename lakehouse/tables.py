"""The layout of every table the service keeps: the contract between bronze, silver and gold.

Each layer's columns are fixed here, derived from a source's declaration, so the stages can
be built, tested and evolved independently. Metadata columns start with an underscore so
they never clash with a source's own columns.

Writes: `delta_txn` tags every stage's Delta writes so that a replayed micro-batch is skipped.

Sequence: one comparable `decimal(38,0)` per change, built from the source's rule
(see `lakehouse.ordering`). Per key, the greatest sequence is current; equal means duplicate.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Iterator

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
    _parse_datatype_string,
)

from lakehouse.declaration import Pipeline, Source
from lakehouse.deltasql import session_setting

SEQUENCE_TYPE = DecimalType(38, 0)


@functools.lru_cache(maxsize=None)
def spark_type(type_name: str) -> DataType:
    """The Spark type of a declared column type (`bigint`, `decimal(10,2)`, ...). Remembered:
    PySpark parses a type name in the JVM (a round trip each; ~50 per silver batch)."""
    return _parse_datatype_string(type_name)


def row_struct(source: Source) -> StructType:
    """A typed row of the source: every declared column, nullable (Debezium may omit any)."""
    return StructType([StructField(c.name, spark_type(c.type), True) for c in source.columns])


def key_struct(source: Source) -> StructType:
    return StructType([StructField(k, spark_type(source.column(k).type), True) for k in source.primary_key])


def bronze_schema(source: Source) -> StructType:
    """bronze.<source>: append-only, one row per Kafka record that parsed and validated.

    `_op` is Debezium's op (`r`, `c`, `u`, `d`, `t`), or `tombstone` for the null-valued
    record that follows a delete (kept as a delete marker; it carries no sequence of its own).
    `_key` is the parsed Kafka key; `_before`/`_after` the typed row images.
    """
    return StructType(
        [
            StructField("_topic", StringType(), False),
            StructField("_partition", IntegerType(), False),
            StructField("_offset", LongType(), False),
            StructField("_kafka_ts", TimestampType(), True),
            StructField("_raw_key", BinaryType(), True),
            StructField("_raw_value", BinaryType(), True),
            StructField("_op", StringType(), False),
            StructField("_key", key_struct(source), True),
            StructField("_before", row_struct(source), True),
            StructField("_after", row_struct(source), True),
            StructField("_source_ts_ms", LongType(), True),
            StructField("_source_lsn", LongType(), True),
            StructField("_source_tx_id", LongType(), True),
            StructField("_source_snapshot", StringType(), True),
            StructField("_source_file", StringType(), True),
            StructField("_source_pos", LongType(), True),
            StructField("_source_row", IntegerType(), True),
            StructField("_event_ts_ms", LongType(), True),
            StructField("_unavailable_columns", StringType(), True),  # comma list of TOAST placeholders
            StructField("_sequence", SEQUENCE_TYPE, True),
            StructField("_ingested_at", TimestampType(), False),
            StructField("_old_key", key_struct(source), True),  # header __debezium.oldkey: a primary-key change's create
        ]
    )


def quarantine_schema() -> StructType:
    """bronze._quarantine: every Kafka record that could not be parsed or validated."""
    return StructType(
        [
            StructField("source", StringType(), True),
            StructField("topic", StringType(), False),
            StructField("partition", IntegerType(), False),
            StructField("offset", LongType(), False),
            StructField("kafka_ts", TimestampType(), True),
            StructField("raw_key", BinaryType(), True),
            StructField("raw_value", BinaryType(), True),
            StructField("reason", StringType(), False),
            StructField("quarantined_at", TimestampType(), False),
        ]
    )


def silver_current_schema(source: Source) -> StructType:
    """silver.<source>: one row per primary key ever seen, the latest by sequence.

    A deleted key keeps a row with `_deleted = true` (payload columns null) so that a late
    older change can never resurrect it: the cost is one small row per deleted key, with no
    retention window to tune. Readers select `WHERE NOT _deleted` (the `<source>_live` view).
    """
    return StructType(
        [StructField(c.name, spark_type(c.type), True) for c in source.columns]
        + [
            StructField("_row_hash", StringType(), True),
            StructField("_sequence", SEQUENCE_TYPE, False),
            StructField("_source_ts", TimestampType(), True),
            StructField("_op", StringType(), False),
            StructField("_deleted", BooleanType(), False),
            StructField("_updated_at", TimestampType(), False),
        ]
    )


def silver_history_schema(source: Source) -> StructType:
    """silver.<source>_history: every version per key, [valid_from, valid_to) in source time.

    A delete is a version with `_deleted = true`; it closes the previous interval. The last
    version of a key has `_valid_to` null. `_valid_to_sequence` is the next version's sequence.
    """
    return StructType(
        [StructField(c.name, spark_type(c.type), True) for c in source.columns]
        + [
            StructField("_row_hash", StringType(), True),
            StructField("_sequence", SEQUENCE_TYPE, False),
            StructField("_op", StringType(), False),
            StructField("_deleted", BooleanType(), False),
            StructField("_valid_from", TimestampType(), True),
            StructField("_valid_to", TimestampType(), True),
            StructField("_valid_to_sequence", SEQUENCE_TYPE, True),
            StructField("_recorded_at", TimestampType(), False),
        ]
    )


#: The store's column that says what a row is (`silver_store_schema`), and its two values: a
#: version of a row (history) and a key's latest row (current).
KIND_COLUMN = "_kind"
HISTORY_KIND = "history"
CURRENT_KIND = "current"


def silver_store_schema(source: Source) -> StructType:
    """silver.<source>_store: a source's history and current rows in one Delta table, so that a
    batch reads one table version and writes both kinds in one commit (one MERGE; two tables
    cost a small batch 25-31 % more, docs/performance.md, "Silver").

    `_kind` (the partition column) says which a row is: `history` rows carry
    `silver_history_schema`'s columns, `current` rows `silver_current_schema`'s; the other
    kind's columns are null, so a column is NOT NULL only where both kinds say so (the views
    show `_updated_at` and `_recorded_at` as nullable; neither is null in its own kind). Readers
    use the views `silver_current_table` and `silver_history_table`; Delta's own reads (change
    feed, time travel) go to the store with a `_kind` filter.
    """
    history, current = silver_history_schema(source), silver_current_schema(source)
    required = {f.name for f in history.fields if not f.nullable} & {f.name for f in current.fields if not f.nullable}
    fields, seen = [StructField(KIND_COLUMN, StringType(), False)], {KIND_COLUMN}
    for f in [*history.fields, *current.fields]:
        if f.name not in seen:
            seen.add(f.name)
            fields.append(StructField(f.name, f.dataType, f.name not in required, f.metadata))
    return StructType(fields)


def bronze_table(pipeline: Pipeline, source: Source) -> str:
    return pipeline.tables.qualified("bronze", source.name)


def quarantine_table(pipeline: Pipeline) -> str:
    return pipeline.tables.qualified("bronze", "_quarantine")


def silver_current_table(pipeline: Pipeline, source: Source) -> str:
    """silver.<source>: the view of the store's current rows (`silver_current_schema`)."""
    return pipeline.tables.qualified("silver", source.name)


def silver_history_table(pipeline: Pipeline, source: Source) -> str:
    """silver.<source>_history: the view of the store's versions (`silver_history_schema`)."""
    return pipeline.tables.qualified("silver", f"{source.name}_history")


def silver_store_table(pipeline: Pipeline, source: Source) -> str:
    """silver.<source>_store: the Delta table that holds both (`silver_store_schema`)."""
    return pipeline.tables.qualified("silver", f"{source.name}_store")


def held_changes_table(pipeline: Pipeline, source: Source) -> str:
    """silver._held_<source>: changes a quarantine rule kept out of silver (`lakehouse.silver.held`)."""
    return pipeline.tables.qualified("silver", f"_held_{source.name}")


def held_changes_schema(source: Source) -> StructType:
    """A held change as silver would have applied it (key, values, `_sequence`, `_source_ts`,
    `_op`, `_deleted`, `_unavailable`, `_old_key`), the rule that held it and why, when, and
    when it was let through (null while held)."""
    return StructType(
        [StructField(c.name, spark_type(c.type), True) for c in source.columns]
        + [
            StructField("_sequence", SEQUENCE_TYPE, False),
            StructField("_source_ts", TimestampType(), True),
            StructField("_op", StringType(), True),
            StructField("_deleted", BooleanType(), True),
            StructField("_unavailable", ArrayType(StringType()), True),
            StructField("_old_key", key_struct(source), True),
            StructField("_rule", StringType(), False),
            StructField("_reason", StringType(), False),
            StructField("_batch_id", LongType(), True),
            StructField("_held_at", TimestampType(), False),
            StructField("_released_at", TimestampType(), True),
        ]
    )


def late_changes_table(pipeline: Pipeline) -> str:
    """silver._late_changes: changes that arrived later than the declared grace (counted, kept)."""
    return pipeline.tables.qualified("silver", "_late_changes")


def subscription_table(pipeline: Pipeline, source: Source, foreign_key: str) -> str:
    return pipeline.tables.qualified("silver", f"_sub_{source.name}__{foreign_key}")


def gold_table(pipeline: Pipeline, view_name: str) -> str:
    return pipeline.tables.qualified("gold", view_name)


def quality_results_table(pipeline: Pipeline) -> str:
    return pipeline.tables.qualified("quality", "expectation_results")


TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
MERGE_MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"


@contextmanager
def delta_txn(spark: SparkSession, app_id: str | None, version: int | None) -> Iterator[None]:
    """Tag the Delta writes inside with (appId, version): a replay with the same pair is skipped
    (untagged when either is None, as in tests that call a stage's function directly).

    Also tells MERGE not to copy its source first: every MERGE source of silver and gold is
    computed once (`localCheckpoint`) and deterministic, so the copy would be one more job.
    """
    tagged = app_id is not None and version is not None
    if tagged:
        spark.conf.set(TXN_APP_ID, str(app_id))
        spark.conf.set(TXN_VERSION, str(version))
    try:
        with session_setting(spark, MERGE_MATERIALIZE_SOURCE, "none"):
            yield
    finally:
        if tagged:
            spark.conf.unset(TXN_APP_ID)
            spark.conf.unset(TXN_VERSION)
