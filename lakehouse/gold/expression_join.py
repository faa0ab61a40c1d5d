"""Gold's side of a key-expression join on a global table (KIP-99: a replicated table joined on
any expression, no repartitioning, no subscription): `key: upper(payments.method)` matches the
global table's one-column primary key to an expression of one earlier alias.

- **Join**: the global table's live rows are broadcast and matched with the expression evaluated
  on the parent alias's columns (`condition`).
- **Changes**: a change to the parent alias flows as any change of it. A change to a global row
  re-joins the rows that map to it: the parent's live rows whose expression equals a changed
  global key (`parent_keys_of`, one scan of the parent's silver current table with the changed
  keys broadcast), whose keys then walk back to the base like a change of the parent.
"""

from __future__ import annotations

from typing import Callable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from lakehouse.declaration import Join, Pipeline, Source, View
from lakehouse.declaration.expressions import column_references, rewrite_references
from lakehouse.declaration.located import field_error
from lakehouse.frames import local_frame
from lakehouse.sqltext import quote
from lakehouse.tables import spark_type


def parent_columns(join: Join) -> set[str]:
    """The parent alias's columns the key expression reads."""
    assert join.key is not None
    return {column for _, column in column_references(join.key)}


def key_expression(join: Join, column_name: Callable[[str], str]) -> Column:
    """The key expression with `alias.column` replaced by `column_name(column)` (quoted)."""
    assert join.key is not None
    return F.expr(rewrite_references(join.key, lambda _alias, column: quote(column_name(column))))


def condition(join: Join, parent_col: Callable[[str], str], target_key: Column) -> Column:
    """The join condition inside gold's join: the expression over the parent's internal columns
    equals the global table's key (a null expression matches nothing)."""
    return key_expression(join, parent_col) == target_key


def parent_keys_of(join: Join, parent: Source, global_source: Source, changed: DataFrame, parent_live: DataFrame) -> DataFrame:
    """Primary keys of the parent's live rows whose key expression equals a changed global key."""
    (pk,) = global_source.primary_key
    keys = F.broadcast(changed.select(F.col(pk).alias("_global_key")).distinct())
    mapped = parent_live.select(*parent.primary_key, key_expression(join, lambda c: c).alias("_global_key"))
    return mapped.join(keys, "_global_key", "left_semi").select(*parent.primary_key)


def check_key_types(spark: SparkSession, pipeline: Pipeline, view: View) -> None:
    """Every key expression of `view` is valid Spark SQL over its alias's columns and has the type
    of the global table's key; else a PipelineConfigError with file, line and field (run when a
    gold job prepares the view, before any query starts: the loader has no Spark analyzer)."""
    for i, join in enumerate(view.joins):
        if join.kind != "expression":
            continue
        parent = pipeline.source(view.table_of(join.parent_alias))
        target = pipeline.source(join.table)
        (pk,) = target.primary_key
        empty = local_frame(spark, [], StructType([StructField(c.name, spark_type(c.type), True) for c in parent.columns]))
        where = f"views.{view.name}.joins[{i}].key"
        try:
            got = empty.select(key_expression(join, lambda c: c).alias("k")).schema["k"].dataType
        except Exception as exc:  # noqa: BLE001 - Spark's parse and analysis errors, reported as the file's
            first = str(exc).strip().splitlines()[0]
            raise field_error(pipeline.path, where, f"not a valid Spark SQL expression over the columns of {join.parent_alias}: {first}") from None
        want = spark_type(target.column(pk).type)
        if got != want:
            raise field_error(pipeline.path, where, f"the expression is {got.simpleString()} but {target.name}.{pk} is "
                                                    f"{want.simpleString()}: cast it, e.g. cast(... AS {want.simpleString()})")
