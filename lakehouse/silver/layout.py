"""Silver's tables and their layouts: current, history, truncates, TOAST values, late changes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakehouse.comments import apply_comments, commented, silver_comments
from lakehouse.declaration import Pipeline, Source
from lakehouse.deltasql import DELETION_VECTORS_WHEN_LARGE, add_columns_sql, create_table
from lakehouse.errors import CdcEnrichError
from lakehouse.silver.plan import COMPACTED_BEFORE_PROPERTY, Truncate
from lakehouse.spark import table_exists
from lakehouse.sqltext import quote
from lakehouse.silver.store import kind_view_sql
from lakehouse.tables import (
    CURRENT_KIND,
    HISTORY_KIND,
    KIND_COLUMN,
    SEQUENCE_TYPE,
    key_struct,
    late_changes_table,
    silver_current_table,
    silver_history_table,
    silver_store_schema,
    silver_store_table,
)

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


# --------------------------------------------------------------------------- tables


def ensure_silver_tables(spark: SparkSession, pipeline: Pipeline, source: Source, deletion_vectors: bool = True) -> None:
    """Create the silver schema, the source's store (`lakehouse.silver.store`) with its current,
    history and `<source>_live` views, and the shared truncates and late-change tables
    (idempotent; a column the source gained is added, and the views show it). The TOAST table is
    made by the first batch that records a placeholder (`ensure_toast_table`): most sources never do.

    The store has Change Data Feed on (gold streams its current rows; an as-of view its history
    rows) and is partitioned by `_kind`, so a read of one kind skips the other's files. Deletion
    vectors by default once it is large (`DELETION_VECTORS_WHEN_LARGE`): a MERGE then marks the
    changed rows instead of rewriting whole files (see bench_silver); `deletion_vectors=False`
    never turns them on.
    """
    schema = ".".join(p for p in (pipeline.tables.catalog, pipeline.tables.silver_schema) if p)
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    current, history, store = (silver_current_table(pipeline, source), silver_history_table(pipeline, source),
                               silver_store_table(pipeline, source))
    _refuse_two_tables(spark, current, history, store)
    current_comment, current_columns = silver_comments(source, history=False)
    history_comment, history_columns = silver_comments(source, history=True)
    truncates_created = _create(spark, truncates_table(pipeline), truncates_schema(), {})
    _create(spark, late_changes_table(pipeline), late_changes_schema(), {})
    ensure_store(spark, pipeline, source, lambda: _nothing_recorded(spark, pipeline, source, truncates_created), deletion_vectors)
    spark.sql(kind_view_sql(current, store, source, CURRENT_KIND, current_comment, current_columns))
    spark.sql(kind_view_sql(history, store, source, HISTORY_KIND, history_comment, history_columns))
    columns = ", ".join(quote(c) for c in source.column_names)
    spark.sql(f"CREATE OR REPLACE VIEW {live_view(pipeline, source)} AS SELECT {columns} FROM {current} WHERE NOT _deleted")


def ensure_store(
    spark: SparkSession, pipeline: Pipeline, source: Source, facts: Callable[[], Mapping[str, str]], deletion_vectors: bool = True
) -> None:
    """Create the source's store (change feed on, partitioned by kind, deletion vectors once large
    unless `deletion_vectors` is False, with comments) and its `facts()` as properties; an existing
    one gains the columns the source gained and its comments where they changed."""
    store = silver_store_table(pipeline, source)
    dv = DELETION_VECTORS_WHEN_LARGE if deletion_vectors else {"delta.enableDeletionVectors": "false"}
    comment = (f"Silver store of source {source.name!r}: its history and current rows in one Delta table ({KIND_COLUMN} "
               f"says which); query the views {silver_current_table(pipeline, source)} and {silver_history_table(pipeline, source)}.")
    columns = {**silver_comments(source, history=True)[1], **silver_comments(source, history=False)[1],
               KIND_COLUMN: "history: a version of a row; current: a key's latest row"}
    if not _create(spark, store, commented(silver_store_schema(source), columns),
                   lambda: {"delta.enableChangeDataFeed": "true", **dv, **facts()}, comment, partitioned_by=(KIND_COLUMN,)):
        apply_comments(spark, store, comment, columns)  # an existing table: only what changed


def is_earlier_layout(spark: SparkSession, name: str) -> bool:
    """Whether `name` (a source's current or history name) is a table of the earlier layout, two
    Delta tables per source, where the store layout has a view."""
    return spark.catalog.tableExists(name) and spark.catalog.getTable(name).tableType != "VIEW"


def _refuse_two_tables(spark: SparkSession, current: str, history: str, store: str) -> None:
    """Stop before anything is written when `current` or `history` is a table of the earlier
    layout: the views of the store would hide its rows."""
    for name in (current, history):
        if is_earlier_layout(spark, name):
            raise CdcEnrichError(
                f"{name} is a table of the earlier silver layout (two tables per source); silver now keeps a "
                f"source's rows in {store} with views under the old names. Stop the pipeline's streams and run "
                "`cdc-enrich migrate-silver` to move them (lakehouse.silver.migrate), or write to a new silver "
                "schema (tables.silver_schema) and replay bronze into it"
            )


def ensure_toast_table(spark: SparkSession, pipeline: Pipeline, source: Source) -> None:
    """Create the source's TOAST table if it does not exist yet (its stream is its only writer)."""
    _create(spark, toast_table(pipeline, source), toast_schema(source), {})


def toast_rows(spark: SparkSession, pipeline: Pipeline, source: Source) -> DataFrame | None:
    """The source's TOAST table, or None before its first placeholder made it."""
    name = toast_table(pipeline, source)
    return spark.table(name) if table_exists(spark, name) else None


def toast_recorded(spark: SparkSession, pipeline: Pipeline, source: Source) -> bool:
    """Whether the source's TOAST table holds a row (read: one Spark job when the table exists)."""
    rows = toast_rows(spark, pipeline, source)
    return rows is not None and rows.limit(1).count() > 0


def _create(
    spark: SparkSession,
    name: str,
    schema: StructType,
    properties: Mapping[str, str] | Callable[[], Mapping[str, str]],
    comment: str | None = None,
    partitioned_by: tuple[str, ...] = (),
) -> bool:
    """Create the table (True), or add the columns a source gained since (a column added upstream;
    bronze adds it too; False). Existing rows read null for it. A changed type is an error.
    `properties` may be a function, called only when the table is created."""
    if not spark.catalog.tableExists(name):
        create_table(spark, name, schema, properties=properties() if callable(properties) else properties,
                     partitioned_by=partitioned_by, comment=comment)
        return True
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
        spark.sql(add_columns_sql(name, missing))
    return False


def read_truncates(spark: SparkSession, pipeline: Pipeline, source: Source) -> list[Truncate]:
    rows = (
        spark.table(truncates_table(pipeline))
        .filter(F.col("source") == source.name)
        .select("sequence", "source_ts")
        .distinct()
        .collect()
    )
    return sorted((r["sequence"], r["source_ts"]) for r in rows)


# Facts a source's stream records on its store (a table property) before it writes the
# first row that makes them true, so that a stream starting later knows them without reading a
# table: its first batch paid 1-5 s reading `silver._truncates` and probing the TOAST table
# (2026-12-05, the suite's silver specs). "false" is set only when the store is created
# (`_nothing_recorded`).
TRUNCATES_RECORDED_PROPERTY = "cdc_enrich.history.truncatesRecorded"
TOAST_RECORDED_PROPERTY = "cdc_enrich.history.toastRecorded"


def _nothing_recorded(spark: SparkSession, pipeline: Pipeline, source: Source, truncates_created: bool) -> dict[str, str]:
    """The facts a new store starts with: "false" for the TOAST table where there is none
    or it holds no row, and for the truncates table where it was created with it or holds no row
    of the source (a store dropped and made again, beside tables that kept their rows,
    starts with the facts unknown)."""
    facts = {}
    if not toast_recorded(spark, pipeline, source):
        facts[TOAST_RECORDED_PROPERTY] = "false"
    if truncates_created or not read_truncates(spark, pipeline, source):
        facts[TRUNCATES_RECORDED_PROPERTY] = "false"
    return facts


@dataclass(frozen=True)
class HistoryFacts:
    """What the source's store says of itself, from one `SHOW TBLPROPERTIES`.

    `truncates` / `toast`: False when `silver._truncates` / the TOAST table holds no row of the
    source; None when not known (a table made before these properties, or a row recorded:
    read the table)."""

    compacted_before: datetime | None = None  # the history compaction horizon (source time)
    truncates: bool | None = None
    toast: bool | None = None


def history_facts(spark: SparkSession, pipeline: Pipeline, source: Source) -> HistoryFacts:
    """The source's `HistoryFacts` (the snapshot it reads is the one the batch reads next)."""
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {silver_store_table(pipeline, source)}").collect()}
    millis = props.get(COMPACTED_BEFORE_PROPERTY)
    compacted = None
    if millis is not None and str(millis).lstrip("-").isdigit():
        compacted = datetime.fromtimestamp(int(millis) / 1000)  # naive local, as PySpark returns timestamps

    def fact(prop: str) -> bool | None:
        return False if props.get(prop) == "false" else None

    return HistoryFacts(compacted, fact(TRUNCATES_RECORDED_PROPERTY), fact(TOAST_RECORDED_PROPERTY))


def recorded_truncates(spark: SparkSession, pipeline: Pipeline, source: Source, facts: HistoryFacts) -> list[Truncate]:
    """The source's recorded truncates: none when its store says so, else read."""
    return [] if facts.truncates is False else read_truncates(spark, pipeline, source)


def record_fact(spark: SparkSession, pipeline: Pipeline, source: Source, prop: str) -> None:
    """Say on the store that rows of `prop`'s kind may exist, before writing the first:
    a crash between the two leaves a fact that costs one read, never one that hides a row."""
    spark.sql(f"ALTER TABLE {silver_store_table(pipeline, source)} SET TBLPROPERTIES ('{prop}' = 'true')")


def compacted_before(spark: SparkSession, pipeline: Pipeline, source: Source) -> datetime | None:
    """The history compaction horizon (source time), None when never compacted."""
    return history_facts(spark, pipeline, source).compacted_before
