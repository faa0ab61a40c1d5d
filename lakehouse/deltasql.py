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
import time
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, Sequence

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from lakehouse.spark import application_id
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


#: Delta's switch between marking the rows a MERGE replaces in deletion vectors (the default on
#: a table that enables them) and rewriting the files they sit in.
PERSISTENT_DELETION_VECTORS = "spark.databricks.delta.merge.deletionVectors.persistent"
#: A table this small has its touched files rewritten by a MERGE: deletion vectors cost a MERGE
#: a fixed ~0.4 s (another pass over the touched files, DV files written), more than copying a
#: small table's rows. Measured (2 cores, a two-row MERGE into a table of 100k-row files, ~12 MB
#: each, medians of five): 10k rows 1.04 s rewriting against 1.46 s with DVs, 100k rows 1.59 s
#: against 1.76 s, 300k rows 1.58 s against 1.61 s, 1M rows 1.67 s against 1.54 s.
REWRITE_BELOW_BYTES = 16 * 1024 * 1024


def rewrites_touched_files(table_bytes: int | None) -> bool:
    """Whether a MERGE into a table of `table_bytes` (its live files; None: unknown) rewrites the
    files it touches rather than writing deletion vectors: at worst it copies the whole table,
    which below `REWRITE_BELOW_BYTES` costs less than the deletion vectors' own pass.

    >>> rewrites_touched_files(40_000), rewrites_touched_files(2_000_000_000), rewrites_touched_files(None)
    (True, False, False)
    """
    return table_bytes is not None and table_bytes <= REWRITE_BELOW_BYTES


class RecentReads:
    """Facts read about tables (their size, their rows) reused for `seconds` per Spark
    application: for estimates that steer how to do a thing (a MERGE's strategy, gold's cost
    model), never what it does, so a slightly stale value costs time at worst, not a result.

    >>> sizes = RecentReads(60.0)
    >>> sizes.get("app", ["t"], lambda names: [len(names)]), sizes.get("app", ["t"], lambda names: [99])
    ([1], [1])
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._values: dict[tuple[str, str], tuple[float, Any]] = {}

    def get(self, app: str, names: Sequence[str], read: Callable[[list[str]], Sequence[Any]]) -> list[Any]:
        """The values for `names`; the ones not read within `seconds` are read (all at once)."""
        now = time.monotonic()
        stale = [n for n in dict.fromkeys(names) if now - self._values.get((app, n), (float("-inf"), None))[0] > self.seconds]
        if stale:
            for name, value in zip(stale, read(stale), strict=True):
                self._values[(app, name)] = (now, value)
        return [self._values[(app, n)][1] for n in names]

    def forget(self, app: str, name: str) -> None:
        """Read `name` again next time (the caller just changed what was read)."""
        self._values.pop((app, name), None)


#: Deletion vectors once a table is large. A table with Delta's deletion-vector feature pays for
#: it in every scan and MERGE even when it holds no vector (measured, 2 cores, a tiny table just
#: appended to: the physical plan of a filtered read 0.43 s against 0.003 s without the feature,
#: a two-row MERGE 2.30 s against 2.02 s, medians of 20), and below `REWRITE_BELOW_BYTES` a MERGE rewrites
#: files instead of writing vectors anyway. So the engine's tables are created without the
#: feature and marked `DELETION_VECTORS_WHEN_LARGE`; the first MERGE that finds one past the
#: threshold turns the feature on (`enables_deletion_vectors`). Delta cannot drop the feature
#: again without truncating history, so a table keeps it once it has it.
DELETION_VECTORS_PROPERTY = "cdc_enrich.deletionVectors"
DELETION_VECTORS_WHEN_LARGE: Mapping[str, str] = MappingProxyType(
    {"delta.enableDeletionVectors": "false", DELETION_VECTORS_PROPERTY: "whenLarge"}
)


@dataclass(frozen=True)
class TableFacts:
    """What a MERGE's strategy reads about its target: the live files' size (None: unknown),
    whether deletion vectors are on, and whether the table asks for them once large."""

    size_bytes: int | None
    deletion_vectors: bool = False
    vectors_when_large: bool = False

    @classmethod
    def of(cls, size_bytes: Any, properties: Mapping[str, str] | None) -> "TableFacts":
        """From `DESCRIBE DETAIL`'s `sizeInBytes` and `properties`.

        >>> TableFacts.of(10, {"delta.enableDeletionVectors": "true"}).deletion_vectors
        True
        >>> TableFacts.of(None, DELETION_VECTORS_WHEN_LARGE)
        TableFacts(size_bytes=None, deletion_vectors=False, vectors_when_large=True)
        """
        props = {k.lower(): str(v).lower() for k, v in (properties or {}).items()}
        return cls(
            None if size_bytes is None else int(size_bytes),
            props.get("delta.enabledeletionvectors", "false") == "true",
            props.get(DELETION_VECTORS_PROPERTY.lower(), "") == "whenlarge",
        )


def enables_deletion_vectors(facts: TableFacts) -> bool:
    """Whether a MERGE into this table turns deletion vectors on first: it asks for them once
    large, has none yet, and its known size is past `REWRITE_BELOW_BYTES`.

    >>> large = REWRITE_BELOW_BYTES + 1
    >>> enables_deletion_vectors(TableFacts(large, vectors_when_large=True))
    True
    >>> [enables_deletion_vectors(f) for f in (TableFacts(large), TableFacts(1, vectors_when_large=True),
    ...  TableFacts(None, vectors_when_large=True), TableFacts(large, True, True))]
    [False, False, False, False]
    """
    return facts.vectors_when_large and not facts.deletion_vectors and facts.size_bytes is not None and not rewrites_touched_files(facts.size_bytes)


#: Table facts for MERGE strategies: a read (`DESCRIBE DETAIL`) costs ~0.15 s on a local
#: session, and a table seldom crosses `REWRITE_BELOW_BYTES` within a minute.
_FACTS = RecentReads(60.0)
#: A MERGE into a table known small that inserts this many rows has its facts read again next
#: time: the first fill of a subscription table (1M rows at the bench's scale) otherwise left
#: the next MERGEs within the minute copying its touched files (685k rows copied for 217
#: moves in one bench batch, 2026-12-01) instead of marking rows in deletion vectors.
GROWN_ROWS = 10_000


def num_files(spark: SparkSession, table: str) -> int:
    """How many data files a Delta table holds now (its log, no scan; never cached: callers
    decide what to read from it)."""
    return int(spark.sql(f"DESCRIBE DETAIL {table}").first()["numFiles"])


def table_facts(spark: SparkSession, name: str) -> TableFacts:
    """A Delta table's `TableFacts` (`DESCRIBE DETAIL`, from the log: no scan), read at most
    once a minute per Spark application (`RecentReads`)."""

    def read(names: list[str]) -> list[TableFacts]:
        rows = [spark.sql(f"DESCRIBE DETAIL {n}").select("sizeInBytes", "properties").first() for n in names]
        return [TableFacts(None) if r is None else TableFacts.of(r["sizeInBytes"], r["properties"]) for r in rows]

    return _FACTS.get(application_id(spark), [name], read)[0]


#: Markers of Delta's commit conflicts (a concurrent writer won; retrying an idempotent write is safe):
#: their error classes, and the package that holds only Delta's concurrency exceptions.
COMMIT_CONFLICTS = ("DELTA_CONCURRENT_", "io.delta.exceptions.")


def is_commit_conflict(exc: BaseException) -> bool:
    """Whether `exc` is a Delta commit conflict, however it reached Python: delta-spark converts
    them only after `delta.exceptions.captured` is imported, a classic session otherwise raises a
    bare Py4JJavaError, Spark Connect its own error; all three carry the error class."""
    return any(marker in str(exc) for marker in COMMIT_CONFLICTS)


def turn_on_deletion_vectors(spark: SparkSession, name: str) -> None:
    """Turn Delta's deletion vectors on for `name` (a metadata commit); a concurrent writer's
    commit winning leaves it to the next MERGE. Delta applies a session's txn tag to data writes
    only, so a MERGE's tag is still its own after this commit (tests/integration/test_merge_strategy.py)."""
    try:
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    except Exception as exc:  # noqa: BLE001 - only a lost race is expected here
        if not is_commit_conflict(exc):
            raise
    finally:
        _FACTS.forget(application_id(spark), name)


@contextmanager
def session_setting(spark: SparkSession, key: str, value: str | None) -> Iterator[None]:
    """`key` set to `value` for the statements inside, then as it was before; nothing changes
    when `value` is None or the session refuses the setting (Databricks serverless accepts only
    a listed few): for hints that make a statement cheaper, never change what it does."""
    applied, before = False, None
    if value is not None:
        try:
            before = spark.conf.get(key, None)
            spark.conf.set(key, value)
            applied = True
        except Exception:  # noqa: BLE001 - a refused hint: run the statement as the session would
            pass
    try:
        yield
    finally:
        if applied and before is None:
            spark.conf.unset(key)
        elif applied:
            spark.conf.set(key, before)


def merge(source: DataFrame, target: str, on: str, clauses: Sequence[When]) -> dict[str, int]:
    """Run a MERGE of `source` into `target` in the source's own session (a foreachBatch's
    session under Spark Connect); Delta's counts: inserted, updated, deleted (all 0 when Delta
    skipped it: its txn appId/version, `tables.delta_txn`, was applied already). A small target
    has its touched files rewritten instead of marked in deletion vectors (`rewrites_touched_files`);
    a large one created `DELETION_VECTORS_WHEN_LARGE` gets them turned on first."""
    spark = source.sparkSession
    facts = table_facts(spark, target)
    if enables_deletion_vectors(facts):
        turn_on_deletion_vectors(spark, target)
    rewrite = rewrites_touched_files(facts.size_bytes)
    with session_setting(spark, PERSISTENT_DELETION_VECTORS, "false" if rewrite else None):
        # `spark.sql` runs a command when it is called (the setting must be in place by then)
        rows = sql_with_frames(spark, lambda names: merge_sql(target, on, clauses, names["s"]), {"s": source}).collect()
    row = rows[0].asDict() if rows else {}
    counts = {
        "inserted": int(row.get("num_inserted_rows") or 0),
        "updated": int(row.get("num_updated_rows") or 0),
        "deleted": int(row.get("num_deleted_rows") or 0),
    }
    if rewrite:
        deletion_vectors_if_grown(spark, target, counts["inserted"])
    return counts


def deletion_vectors_if_grown(spark: SparkSession, name: str, inserted: int) -> None:
    """After a write of `inserted` rows into `name` while it was known small: from `GROWN_ROWS`
    rows on (a first fill, a large insert), read its facts again and turn its deletion vectors on
    now, when it asks for them once large, so the batch that grew it pays that commit, not the
    next MERGE (the 1M-row gold bench's first incremental batch turned them on for three tables,
    2026-12-02). A smaller write reads nothing."""
    if inserted < GROWN_ROWS:
        return
    _FACTS.forget(application_id(spark), name)
    if enables_deletion_vectors(table_facts(spark, name)):
        turn_on_deletion_vectors(spark, name)


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
    partitioned_by: Sequence[str] = (),
    comment: str | None = None,
) -> None:
    """`CREATE TABLE IF NOT EXISTS` a Delta table of `schema` (NOT NULL and column comments
    kept), clustered by `cluster_by` (liquid clustering) or partitioned by `partitioned_by` when given."""
    spark.sql(create_table_sql(name, schema, properties=properties, cluster_by=cluster_by, partitioned_by=partitioned_by,
                               comment=comment))


def create_table_sql(
    name: str,
    schema: StructType,
    *,
    properties: Mapping[str, str] | None = None,
    cluster_by: Sequence[str] = (),
    partitioned_by: Sequence[str] = (),
    comment: str | None = None,
) -> str:
    if cluster_by and partitioned_by:
        raise ValueError(f"table {name}: a Delta table is clustered or partitioned, not both")
    columns = ",\n  ".join(column_ddl(f) for f in schema.fields)
    text = f"CREATE TABLE IF NOT EXISTS {name} (\n  {columns}\n) USING DELTA"
    if partitioned_by:
        text += f"\nPARTITIONED BY ({', '.join(quote(c) for c in partitioned_by)})"
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


def add_columns_sql(name: str, fields: Sequence[StructField]) -> str:
    """`ALTER TABLE ... ADD COLUMNS` for the columns a table made earlier lacks: each nullable
    (the rows already there read null for it), its name quoted and its comment kept."""
    columns = ", ".join(column_ddl(StructField(f.name, f.dataType, True, f.metadata)) for f in fields)
    return f"ALTER TABLE {name} ADD COLUMNS ({columns})"


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
