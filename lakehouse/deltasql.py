"""Delta operations as SQL text: the one way the engine creates tables, merges and reads commits.

SQL rather than delta-spark's `DeltaTable` builders because the same statement runs on a
classic session and under Spark Connect (Databricks serverless, Standard access mode clusters,
Databricks Connect); the `DeltaTable` client needs Delta's Connect plugin on the server, which
a plain Spark Connect server does not have. A MERGE's source is a DataFrame passed to
`spark.sql` as a parameter (`sql_with_frames`), so nothing is registered by name.

    >>> merge(updates, "main.gold.orders", on="t.`id` = s.`id`",
    ...       clauses=[matched_delete("NOT s._present"), matched_update({"name": "s.name"}),
    ...                not_matched_insert({"id": "s.id", "name": "s.name"})])
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Mapping, Sequence

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from lakehouse.sqltext import quote, string_literal

MATCHED_DELETE = "WHEN MATCHED{cond} THEN DELETE"
MATCHED_UPDATE = "WHEN MATCHED{cond} THEN UPDATE SET {assignments}"
NOT_MATCHED_INSERT = "WHEN NOT MATCHED{cond} THEN INSERT ({columns}) VALUES ({values})"


@dataclass(frozen=True)
class When:
    """One WHEN clause of a MERGE: its template, an optional condition, column -> SQL value."""

    template: str
    condition: str | None = None
    values: Mapping[str, str] | None = None

    def render(self) -> str:
        cond = f" AND ({self.condition})" if self.condition else ""
        values = dict(self.values or {})
        return self.template.format(
            cond=cond,
            assignments=", ".join(f"t.{quote(c)} = {v}" for c, v in values.items()),
            columns=", ".join(quote(c) for c in values),
            values=", ".join(values.values()),
        )


def matched_delete(condition: str | None = None) -> When:
    return When(MATCHED_DELETE, condition)


def matched_update(values: Mapping[str, str], condition: str | None = None) -> When:
    return When(MATCHED_UPDATE, condition, values)


def not_matched_insert(values: Mapping[str, str], condition: str | None = None) -> When:
    return When(NOT_MATCHED_INSERT, condition, values)


def source_values(columns: Sequence[str]) -> dict[str, str]:
    """column -> `s.<column>`: set every column from the source's column of the same name."""
    return {c: f"s.{quote(c)}" for c in columns}


def merge_sql(target: str, on: str, clauses: Sequence[When], source: str = "source") -> str:
    """The MERGE statement: `target` as `t`, the relation named `source` as `s`."""
    if not clauses:
        raise ValueError("a MERGE needs at least one WHEN clause")
    body = "\n".join(c.render() for c in clauses)
    return f"MERGE INTO {target} AS t\nUSING {source} AS s\nON {on}\n{body}"


def merge(source: DataFrame, target: str, on: str, clauses: Sequence[When]) -> dict[str, int]:
    """Run a MERGE of `source` into `target` in the source's own session (a foreachBatch's
    session under Spark Connect); Delta's counts: inserted, updated, deleted (all 0 when Delta
    skipped it: its txn appId/version, `tables.delta_txn`, was applied already)."""
    statement = sql_with_frames(source.sparkSession, lambda names: merge_sql(target, on, clauses, names["s"]), {"s": source})
    rows = statement.collect()
    row = rows[0].asDict() if rows else {}
    return {
        "inserted": int(row.get("num_inserted_rows") or 0),
        "updated": int(row.get("num_updated_rows") or 0),
        "deleted": int(row.get("num_deleted_rows") or 0),
    }


def sql_with_frames(spark: SparkSession, render: Callable[[Mapping[str, str]], str], frames: Mapping[str, DataFrame]) -> DataFrame:
    """The statement `render(names)` writes, naming each of `frames` by the name it is given,
    run with the frames as parameters of `spark.sql`: no temp view to drop, so the result stays
    valid however late it is read (a Connect client's plan is analysed when it runs). Braces of
    the text itself are escaped for the parameter formatter."""
    markers = {key: f"__cdc_enrich_frame_{i}__" for i, key in enumerate(frames)}
    text = render(markers).replace("{", "{{").replace("}", "}}")
    params: dict[str, DataFrame] = {}
    for i, key in enumerate(frames):
        text = text.replace(markers[key], "{frame_%d}" % i)
        params[f"frame_{i}"] = frames[key]
    return spark.sql(text, **params)


def delete_matching(rows: DataFrame, target: str, keys: Sequence[str]) -> int:
    """Delete from `target` the rows equal to `rows` on `keys` (a MERGE, so `rows` may be a
    DataFrame of any origin); how many."""
    on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
    return merge(rows.select(*keys), target, on, [matched_delete()])["deleted"]


def create_table(
    spark: SparkSession,
    name: str,
    schema: StructType,
    *,
    properties: Mapping[str, str] | None = None,
    cluster_by: Sequence[str] = (),
    comment: str | None = None,
) -> None:
    """`CREATE TABLE IF NOT EXISTS` a Delta table of `schema` (NOT NULL and column comments
    kept), clustered by `cluster_by` (liquid clustering) when given."""
    spark.sql(create_table_sql(name, schema, properties=properties, cluster_by=cluster_by, comment=comment))


def create_table_sql(
    name: str,
    schema: StructType,
    *,
    properties: Mapping[str, str] | None = None,
    cluster_by: Sequence[str] = (),
    comment: str | None = None,
) -> str:
    columns = ",\n  ".join(column_ddl(f) for f in schema.fields)
    text = f"CREATE TABLE IF NOT EXISTS {name} (\n  {columns}\n) USING DELTA"
    if cluster_by:
        text += f"\nCLUSTER BY ({', '.join(quote(c) for c in cluster_by)})"
    if comment:
        text += f"\nCOMMENT {string_literal(comment)}"
    if properties:
        text += "\nTBLPROPERTIES (" + ", ".join(f"{string_literal(k)} = {string_literal(v)}" for k, v in properties.items()) + ")"
    return text


def column_ddl(field: StructField, separator: str = " ") -> str:
    """One column's DDL: quoted name, type, NOT NULL, COMMENT (from the field's metadata); a
    struct's field is written the same way with `: ` between name and type."""
    text = f"{quote(field.name)}{separator}{type_ddl(field.dataType)}"
    if not field.nullable:
        text += " NOT NULL"
    if field.metadata.get("comment"):
        text += f" COMMENT {string_literal(field.metadata['comment'])}"
    return text


def type_ddl(data_type: DataType) -> str:
    """A type in DDL, nested field names quoted (Spark's `simpleString` leaves them bare)."""
    if isinstance(data_type, StructType):
        return f"STRUCT<{', '.join(column_ddl(f, ': ') for f in data_type.fields)}>"
    if isinstance(data_type, ArrayType):
        return f"ARRAY<{type_ddl(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"MAP<{type_ddl(data_type.keyType)}, {type_ddl(data_type.valueType)}>"
    return data_type.simpleString()


def last_commit(spark: SparkSession, name: str) -> Row:
    """The table's latest commit (`DESCRIBE HISTORY`): version, operation, operationMetrics..."""
    return spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()


def sql_literal(value: Any) -> str:
    """A Python value as a Spark SQL literal of the same type (keys in data-skipping predicates)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"{value}L" if not -(2**31) <= value < 2**31 else str(value)
    if isinstance(value, float):
        return f"{value!r}D"
    if isinstance(value, Decimal):
        return f"{format(value, 'f')}BD"
    if isinstance(value, str):
        return string_literal(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:  # PySpark's convention: a naive datetime is local time
            value = value.astimezone()
        return f"TIMESTAMP {string_literal(value.astimezone(dt.timezone.utc).strftime('%Y-%m-%d %H:%M:%S.%f') + 'Z')}"
    if isinstance(value, dt.date):
        return f"DATE {string_literal(value.isoformat())}"
    raise TypeError(f"no SQL literal for {type(value).__name__} value {value!r}")
