"""Table and column comments for analysts: the pipeline file's descriptions, and what the
service's own columns mean, on every silver and gold table (`DESCRIBE TABLE`, Unity Catalog's
explorer and the data dictionary (`lakehouse.dictionary`) all show them).

A table is created with its comments (`commented`); when a stage opens an existing one, only
the comments that differ are set, so a description edited in the file reaches the table on the
next run.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.types import StructField, StructType

from lakehouse.declaration import Pipeline, Source, View
from lakehouse.sqltext import quote, string_literal

#: The service's own silver columns (current and history).
SILVER_COLUMNS = {
    "_row_hash": "hash of the row's declared columns (a change that hashes the same is no change)",
    "_sequence": "the change's position in the source's commit order (LSN, binlog position or ts_ms, by the source's ordering rule)",
    "_source_ts": "when the source database committed this version",
    "_op": "the Debezium operation of this version: r (snapshot), c, u, d, t (truncate)",
    "_deleted": "true when the row is deleted in the source (kept as a marker so that older changes cannot resurrect it)",
    "_updated_at": "when the service wrote this row",
    "_valid_from": "source commit time from which this version was the row's state",
    "_valid_to": "source commit time of the next version (null: still current)",
    "_valid_to_sequence": "the next version's _sequence (null: still current)",
    "_recorded_at": "when the service recorded this version",
}
ROW_HASH_GOLD = "hash of the row's selected columns (a rebuild that hashes the same rewrites nothing)"
#: Gold's freshness columns (also shown by the analyst views).
GOLD_FRESHNESS = {
    "_source_ts": "latest source commit time among the row versions this row was built from (what it reflects)",
    "_updated_at": "when the service last wrote this row (a rebuild with the same content does not rewrite it)",
}


def silver_comments(source: Source, history: bool) -> tuple[str, dict[str, str]]:
    """(table comment, column -> comment) of a source's silver current or history table."""
    what = "every version of each row, valid_from/valid_to in source time" if history else "the latest state of each row (deletes kept as _deleted markers)"
    table = f"{source.description + ' ' if source.description else ''}Silver {'history' if history else 'current'} of source {source.name!r}: {what}. Key: {', '.join(source.primary_key)}."
    columns = {c.name: c.description for c in source.columns if c.description}
    return table, columns | SILVER_COLUMNS  # apply_comments skips the columns a table lacks


def gold_comments(pipeline: Pipeline, view: View, lineage: dict[str, tuple[str, str]]) -> tuple[str, dict[str, str]]:
    """(table comment, column -> comment) of a view's gold table; `lineage`: alias -> (hash
    column, sequence column)."""
    joins = ", ".join(f"{j.type} join {j.table} as {j.alias}" for j in view.joins) or "no joins"
    kept = (f"each join looked up {view.lookup_time} in silver history; kept equal to that temporal join by cdc-enrich"
            if view.temporal else
            "pairs of events within the window, an unmatched event's row once its window and grace closed; "
            "late events are recorded, not joined; kept by cdc-enrich" if view.windowed else
            "kept equal to that SQL join of silver current by cdc-enrich")
    table = f"{view.description + ' ' if view.description else ''}Gold view {view.name!r}: {view.base} with {joins}; {kept}."
    columns: dict[str, str] = {}
    for col in view.columns:
        source = pipeline.source(view.table_of(col.alias))
        declared = source.column(col.column).description
        where = f"{col.alias}.{col.column}" + (f" ({source.name}.{col.column})" if col.alias != source.name else "")
        columns[col.name] = col.description or declared or where
    for alias, (hash_column, seq_column) in lineage.items():
        columns[hash_column] = f"lineage: hash of the {alias} version this row was built from"
        columns[seq_column] = f"lineage: _sequence of the {alias} version this row was built from"
    columns["_row_hash"] = ROW_HASH_GOLD
    return table, columns | GOLD_FRESHNESS


def commented(schema: StructType, columns: dict[str, str]) -> StructType:
    """`schema` with its columns' comments in their metadata: a table created from it has them
    without a commit per column."""
    return StructType([
        StructField(f.name, f.dataType, f.nullable, {**f.metadata, "comment": columns[f.name]} if f.name in columns else f.metadata)
        for f in schema.fields
    ])


def apply_comments(spark: SparkSession, table: str, comment: str, columns: dict[str, str]) -> int:
    """Set the table's and its columns' comments where they differ; how many statements ran."""
    ran = 0
    if (spark.catalog.getTable(table).description or "") != comment:
        spark.sql(f"COMMENT ON TABLE {table} IS {string_literal(comment)}")
        ran += 1
    # the comments a Delta table keeps in its schema's field metadata, read without the catalog's
    # column listing (ensure_silver_tables for seven sources on existing tables: 4.18 s -> 2.66 s)
    existing = {f.name: f.metadata.get("comment") or "" for f in spark.table(table).schema.fields}
    for column, text in columns.items():
        if column in existing and existing[column] != text:
            spark.sql(f"ALTER TABLE {table} ALTER COLUMN {quote(column)} COMMENT {string_literal(text)}")
            ran += 1
    return ran
