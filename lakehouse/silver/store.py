"""Where a source's silver rows live: one Delta table per source, the store, holding both kinds.

A batch reads the touched keys' history and current rows in one scan and writes both kinds in
one commit, where two tables cost two reads of freshly committed versions and two MERGEs (a
small batch 25-31 % more, docs/performance.md, "Silver"); history and
current also move together, in one Delta version. Analysts and the engine's plain reads use
the views `silver.<source>` and `silver.<source>_history` over the store
(`lakehouse.silver.layout`); what only a Delta table answers (its change feed, time travel,
properties, MERGE) goes to the store with a `_kind` filter, through this module.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakehouse.declaration import Pipeline, Source
from lakehouse.deltasql import matched_delete, matched_update, merge, not_matched_insert, source_values
from lakehouse.silver.plan import key_bounds_sql, replaces_current
from lakehouse.spark import write_time
from lakehouse.sqltext import quote, string_literal
from lakehouse.tables import (
    CURRENT_KIND,
    HISTORY_KIND,
    KIND_COLUMN,
    silver_current_schema,
    silver_history_schema,
    silver_store_schema,
    silver_store_table,
)

def kind_schema(source: Source, kind: str) -> StructType:
    """The columns a row of `kind` carries (`silver_history_schema` or `silver_current_schema`)."""
    if kind == HISTORY_KIND:
        return silver_history_schema(source)
    if kind == CURRENT_KIND:
        return silver_current_schema(source)
    raise ValueError(f"unknown silver row kind {kind!r}; expected {HISTORY_KIND!r} or {CURRENT_KIND!r}")


def kind_rows(store: DataFrame, source: Source, kind: str) -> DataFrame:
    """The store's rows of `kind`, in that kind's columns (a history or current table's shape)."""
    return store.filter(F.col(KIND_COLUMN) == kind).select(*kind_schema(source, kind).fieldNames())


def kind_view_sql(view: str, store: str, source: Source, kind: str, comment: str, columns: dict[str, str]) -> str:
    """`CREATE OR REPLACE VIEW` of the store's `kind` rows under `view`, with the table comment and
    column comments analysts see on a table."""
    names = kind_schema(source, kind).fieldNames()
    listed = ", ".join(
        quote(n) + (f" COMMENT {string_literal(columns[n])}" if columns.get(n) else "") for n in names
    )
    selected = ", ".join(quote(n) for n in names)
    return (f"CREATE OR REPLACE VIEW {view} ({listed}) COMMENT {string_literal(comment)} AS "
            f"SELECT {selected} FROM {store} WHERE {KIND_COLUMN} = {string_literal(kind)}")


def history_of(spark: SparkSession, pipeline: Pipeline, source: Source) -> DataFrame:
    """The source's history rows, read from the store (the view's rows, one Delta table)."""
    return kind_rows(spark.table(silver_store_table(pipeline, source)), source, HISTORY_KIND)


def _stamped(planned: DataFrame) -> DataFrame:
    """Planned history and current rows (`_target` says which) with their kind, stamped now:
    `_recorded_at` on history rows, `_updated_at` on current rows."""
    now = write_time()
    is_history = F.col("_target") == HISTORY_KIND
    return (
        planned.withColumn(KIND_COLUMN, F.col("_target"))
        .withColumn("_recorded_at", F.when(is_history, now))
        .withColumn("_updated_at", F.when(~is_history, now))
    )


def store_frame(planned: DataFrame, source: Source) -> DataFrame:
    """Planned history and current rows in the store's columns, stamped (`_stamped`): what an
    append writes."""
    framed = _stamped(planned)
    return framed.select(*[F.col(f.name).cast(f.dataType) if f.name in framed.columns else F.lit(None).cast(f.dataType).alias(f.name)
                           for f in silver_store_schema(source).fields])


def _history_sequence(side: str) -> str:
    """SQL: the sequence of `side`'s row when it is a history row, null on a current row."""
    return f"IF({side}.{KIND_COLUMN} = '{HISTORY_KIND}', {side}._sequence, NULL)"


def merge_store(name: str, planned: DataFrame, source: Source, bounds: dict[str, tuple[Any, Any]]) -> dict[str, int]:
    """One MERGE of a batch's planned history and current rows (`_target`, `_action`) into the
    store `name`: a history row matches its key and sequence (deleted, updated or inserted by its
    action); a current row matches its key and replaces the stored one only when newer
    (`replaces_current`); a deleted key never seen is not inserted.

    The sequence is an equality of one expression per side (null on current rows, which match
    by key alone), so Spark joins on kind, key and sequence instead of pairing each history row
    with every stored version of its key and filtering after."""
    keys = [*source.primary_key]
    on = " AND ".join(
        [key_bounds_sql("t", bounds), f"t.{KIND_COLUMN} = s.{KIND_COLUMN}"]
        + [f"t.{quote(k)} = s.{quote(k)}" for k in keys]
        + [f"{_history_sequence('t')} <=> {_history_sequence('s')}"]
    )
    history = f"s.{KIND_COLUMN} = '{HISTORY_KIND}'"
    current = f"s.{KIND_COLUMN} = '{CURRENT_KIND}'"
    history_values = {**source_values(silver_history_schema(source).fieldNames()), KIND_COLUMN: f"s.{KIND_COLUMN}"}
    current_values = {**source_values(silver_current_schema(source).fieldNames()), KIND_COLUMN: f"s.{KIND_COLUMN}"}
    replaces = replaces_current("s._sequence", "s._row_hash", "s._deleted", "t._sequence", "t._row_hash", "t._deleted")
    return merge(_stamped(planned), name, on, [
        matched_delete(f"{history} AND s._action = 'delete'"),
        matched_update(history_values, f"{history} AND s._action != 'delete'"),
        matched_update(current_values, f"{current} AND {replaces}"),
        not_matched_insert(history_values, f"{history} AND s._action != 'delete'"),
        not_matched_insert(current_values, f"{current} AND NOT s._deleted"),
    ])
