"""Gold's Delta edges: tables, subscription and gold MERGEs, live rows."""

from __future__ import annotations

import time
from typing import Callable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakehouse.comments import apply_comments, commented, gold_comments
from lakehouse.declaration import ForeignKey, Pipeline, Source
from lakehouse.errors import TableLayoutError
from lakehouse.gold.applied import APPLIED
from lakehouse.gold.frames import HASH_LENGTH, IN_GOLD
from lakehouse.deltasql import (
    DELETION_VECTORS_WHEN_LARGE,
    RecentReads,
    create_table,
    is_commit_conflict,
    last_commit,
    matched_delete,
    matched_update,
    merge,
    not_matched_insert,
    rewrites_touched_files,
    source_values,
    table_facts,
)
from lakehouse.gold.layout import KeyRange, clustered, range_predicate_sql
from lakehouse.gold.plan import (
    FRESHNESS_COLUMNS,
    ROW_HASH,
    ViewPlan,
    subscription_columns,
    subscription_schema,
)
from lakehouse.spark import application_id
from lakehouse.sqltext import quote, string_literal
from lakehouse.tables import (
    delta_txn,
    gold_table,
    silver_current_table,
    subscription_table,
)

# --------------------------------------------------------------------------- Delta edges


def _create_table(spark: SparkSession, name: str, schema: StructType, cluster_by: Sequence[str], cdf: bool, comment: str | None = None) -> None:
    """Create a Delta table if missing: clustered, with deletion vectors once large (a MERGE that
    changes a few rows of a large file marks them instead of rewriting the file), CDF when asked."""
    properties = DELETION_VECTORS_WHEN_LARGE | ({"delta.enableChangeDataFeed": "true"} if cdf else {})
    create_table(spark, name, schema, properties=properties, cluster_by=cluster_by, comment=comment)


def ensure_subscription_table(spark: SparkSession, pipeline: Pipeline, source: Source, fk: ForeignKey) -> str:
    """Create `silver._sub_<source>__<fk>` if missing, clustered by the fk columns for lookups."""
    name = subscription_table(pipeline, source, fk.name)
    if not spark.catalog.tableExists(name):
        APPLIED.forget(name)  # created now: it holds none of the moves remembered under its name
        _create_table(spark, name, subscription_schema(source, fk), fk.columns, cdf=False)
    return name


def ensure_gold_table(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> str:
    """Create gold.<view> if missing (CDF on, clustered by key); refuse a table of another shape."""
    name = gold_table(pipeline, plan.view.name)
    comment, columns = gold_comments(pipeline, plan.view, plan.lineage)
    if spark.catalog.tableExists(name):
        have = [f.name for f in spark.table(name).schema.fields]
        if have == list(plan.gold_columns[: -len(FRESHNESS_COLUMNS)]):  # made before gold had them
            added = ", ".join(f"{quote(c)} TIMESTAMP COMMENT {string_literal(columns[c])}" for c in FRESHNESS_COLUMNS)
            spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({added})")
            have = list(plan.gold_columns)
        if have != list(plan.gold_columns):
            raise TableLayoutError(
                f"{name} has columns {have} but view {plan.view.name!r} now declares {list(plan.gold_columns)}; "
                f"drop the table and its checkpoint (gold_{plan.view.name}) to rebuild it"
            )
        # one row says it: a table is built by one version and a mixed one is refused here
        old = [r for r in spark.table(name).select(ROW_HASH).limit(1).collect() if r[0] is not None and len(r[0]) != HASH_LENGTH]
        if old:
            raise TableLayoutError(
                f"{name} holds rows hashed by an earlier version of cdc-enrich ({len(old[0][0])}-character "
                f"hashes, now {HASH_LENGTH}): every row would be rewritten once and `verify` would report them "
                f"stale; drop the table and its checkpoint (gold_{plan.view.name}) to rebuild it"
            )
        apply_comments(spark, name, comment, columns)  # only what changed since it was made
        return name
    _create_table(spark, name, commented(plan.gold_schema(), columns), plan.key_columns, cdf=True, comment=comment)
    return name


def _target_matches(key: Sequence[str], key_ranges: Sequence[KeyRange] | None = None) -> str:
    """A MERGE's condition: target `t` and source `s` equal on `key`; with `key_ranges` (covering
    the source's first key column) also a literal predicate on the target, so Delta skips its
    files by their statistics."""
    on = " AND ".join(f"t.{quote(c)} = s.{quote(c)}" for c in key)
    if key_ranges is not None:
        on = f"{on} AND ({range_predicate_sql(f't.{quote(key[0])}', key_ranges)})"
    return on


def merge_subscriptions(
    session: SparkSession,
    table: str,
    updates: DataFrame,
    source: Source,
    fk: ForeignKey,
    app_id: str | None = None,
    version: int | None = None,
    key_ranges: Sequence[KeyRange] | None = None,
) -> dict[str, int]:
    """Apply `subscription_updates` to a subscription table: newer sequence only. `key_ranges`
    (covering the updates' first key column) lets Delta skip files by statistics: a table
    whose fk leads its key (order items by order) then reads only the files of those keys."""
    on = _target_matches(source.primary_key, key_ranges)
    values = source_values(subscription_columns(source, fk) + ("_left_hash", "_sequence"))
    clauses = [
        matched_delete("s._remove AND t._sequence <= s._sequence"),
        matched_update(values, "NOT s._remove AND s._sequence > t._sequence"),
        not_matched_insert(values, "NOT s._remove"),
    ]
    with delta_txn(session, app_id, version):
        return _retry_on_conflict(lambda: merge(updates, table, on, clauses))


def fill_subscriptions(
    session: SparkSession,
    table: str,
    updates: DataFrame,
    source: Source,
    fk: ForeignKey,
    rows: int,
    app_id: str | None = None,
    version: int | None = None,
) -> int:
    """Fill an empty subscription table with `subscription_updates`, laid out in fk ranges;
    returns the rows written.

    An insert-only MERGE of a clustered source: against an empty table Delta writes the source
    as it is partitioned (so each file holds a narrow fk range), and unlike a blind append it
    conflicts with another view filling the same table at the same moment: this batch is then
    applied by `merge_subscriptions` (newer sequence wins) over what the other one wrote.
    """
    cols = subscription_columns(source, fk) + ("_left_hash", "_sequence")
    subscribed = clustered(updates.where(~F.col("_remove")).select(*cols), fk.columns, rows)
    insert = [not_matched_insert(source_values(cols))]
    try:
        with delta_txn(session, app_id, version):
            return merge(subscribed, table, _target_matches(source.primary_key), insert)["inserted"]
    except Exception as exc:  # noqa: BLE001 - only a commit conflict is handled
        if not is_commit_conflict(exc):
            raise
        metrics = merge_subscriptions(session, table, updates, source, fk, app_id, version)
        return metrics["inserted"] + metrics["updated"] + metrics["deleted"]


#: A gold table's property saying whether its view wrote the subscription moves of every batch
#: it processed since it last caught its subscription tables up (`runner.process_changes`):
#: `maintained`, else (absent, `behind`) the next batch that walks them catches them up first.
SUBSCRIPTIONS_PROPERTY = "cdc_enrich.subscriptions"


def subscriptions_maintained(spark: SparkSession, gold: str) -> bool:
    """Whether the view of `gold` kept its subscription tables up to its own changes (the
    property above; a table without it, made before it or just now, is not known to have)."""
    row = spark.sql(f"SHOW TBLPROPERTIES {gold} ({string_literal(SUBSCRIPTIONS_PROPERTY)})").first()
    return row is not None and row["value"] == "maintained"


def record_subscriptions(spark: SparkSession, gold: str, maintained: bool) -> None:
    """Set the property above (a commit of its own on gold, no data changed: its change feed is untouched)."""
    value = "maintained" if maintained else "behind"
    spark.sql(f"ALTER TABLE {gold} SET TBLPROPERTIES ({string_literal(SUBSCRIPTIONS_PROPERTY)} = {string_literal(value)})")


def append_tagged(rows: DataFrame, table: str, app_id: str | None = None, version: int | None = None) -> int:
    """Append `rows` to `table` under the batch's txn tag (`tables.delta_txn`); the rows written,
    from the commit's metrics (0 when the tag was applied already and Delta skipped the append)."""
    session = rows.sparkSession
    before = last_commit(session, table)["version"]
    with delta_txn(session, app_id, version):
        rows.write.format("delta").mode("append").saveAsTable(table)
    last = last_commit(session, table)
    return 0 if last["version"] == before else int(last["operationMetrics"].get("numOutputRows", 0))


def insert_new_rows(
    rows: DataFrame,
    table: str,
    key: Sequence[str],
    key_ranges: Sequence[KeyRange] | None = None,
    app_id: str | None = None,
    version: int | None = None,
) -> int:
    """Insert the `rows` whose `key` `table` does not hold yet; the rows inserted.

    What an append of rows new to the source writes, except a row the table already holds:
    a view's first build reads silver as it is then, possibly past the end of its batch in the
    change feed, so a later batch can carry events the build wrote. An insert-only MERGE (Delta
    reads only the target files `key_ranges` may hold, then appends).
    """
    with delta_txn(rows.sparkSession, app_id, version):
        return merge(rows, table, _target_matches(key, key_ranges), [not_matched_insert(source_values(rows.columns))])["inserted"]


def merge_into_gold(
    session: SparkSession,
    table: str,
    plan: ViewPlan,
    source: DataFrame,
    key_ranges: Sequence[KeyRange] | None = None,
    app_id: str | None = None,
    version: int | None = None,
) -> dict[str, int]:
    """Write `gold_merge_source` rows into gold in one MERGE, one commit: only real changes,
    never from an older base version. A reader or a change-feed consumer never sees half a batch.

    Update when `_row_hash` or a lineage hash differs; delete a present row whose key left the
    join; insert a new row. Update and delete require the incoming base sequence not to be older
    than the stored one (the hash check). `key_ranges` (covering the source's first key column)
    adds a literal predicate so Delta prunes gold files by their statistics.

    A source that holds only rows that differ from gold (`IN_GOLD`: `frames.differing_rows`,
    `frames.recompute_differences`) into a large table (`takes_differing_rows`) needs no hash comparison
    in its update clause: Delta then finds the touched files on gold's key and sequence columns
    alone. (Its new keys once went to a second commit, an append, to spare the MERGE's outer join
    the shuffle of the touched files; measured at 1M rows, OLTP 0.1 %: one commit costs the batch
    ~1 s more, docs/performance.md "Gold".)
    """
    differing = IN_GOLD in source.columns and takes_differing_rows(session, table)
    with delta_txn(session, app_id, version):
        return merge(source, table, _target_matches(plan.key_columns, key_ranges), _gold_clauses(plan, differing))


def takes_differing_rows(session: SparkSession, table: str) -> bool:
    """Whether `table` is MERGEd only the rows that differ from it (`frames.differing_rows`,
    diffed on its key and hash columns first): it is large enough for deletion vectors (a small
    one's touched files are rewritten whatever the join, so its MERGE compares the hashes itself)."""
    return not rewrites_touched_files(table_facts(session, table).size_bytes)


def _gold_clauses(plan: ViewPlan, differing: bool = False) -> list:
    """The guarded WHEN clauses of a gold MERGE (`merge_into_gold`). `differing`: the source
    holds only rows that differ from gold, so an update needs no hash comparison (which would
    have Delta read gold's hash columns to find the files it touches)."""
    base_seq = f"t.{quote(plan.base.gold_seq)}"
    guard = f"(s._guard_seq IS NULL OR {base_seq} IS NULL OR s._guard_seq >= {base_seq})"
    hashes = [ROW_HASH] + [a.gold_hash for a in plan.aliases]
    update = f"s._present AND {guard}"
    if not differing:
        update += " AND (" + " OR ".join(f"NOT (t.{quote(h)} <=> s.{quote(h)})" for h in hashes) + ")"
    values = source_values(plan.gold_columns)
    return [matched_delete(f"NOT s._present AND {guard}"), matched_update(values, update), not_matched_insert(values, "s._present")]


def table_rows(session: SparkSession, tables: Sequence[str]) -> list[int]:
    """Rows of each Delta table, in one query answered from the logs' statistics (no scan)."""
    row = session.sql("SELECT " + ", ".join(f"(SELECT count(*) FROM {t})" for t in tables)).first()
    return [int(v) for v in row]


#: Row counts for gold's cost model, reused for a minute: the counts cost a batch 17 Spark jobs
#: and 1.4 s on the 1M-row bench (0.4 s on the suite's tiny tables), and the model compares
#: orders of magnitude, which a minute of changes does not move.
_RECENT_ROWS = RecentReads(60.0)


def recent_table_rows(session: SparkSession, tables: Sequence[str]) -> list[int]:
    """`table_rows`, each count reused when this application read it within the last minute."""
    return _RECENT_ROWS.get(application_id(session), tables, lambda stale: table_rows(session, stale))


def forget_table_rows(session: SparkSession, table: str) -> None:
    """Count `table` again at the next `recent_table_rows` (this batch just filled it)."""
    _RECENT_ROWS.forget(application_id(session), table)


def _retry_on_conflict(action: Callable[[], dict[str, int]], attempts: int = 5) -> dict[str, int]:
    """Two views may write one subscription table at once; the write is idempotent, so retry."""
    for attempt in range(attempts):
        try:
            return action()
        except Exception as exc:  # noqa: BLE001 - only a commit conflict is retried
            if not is_commit_conflict(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def live_rows(session: SparkSession, pipeline: Pipeline, source: Source) -> DataFrame:
    """silver current without deleted keys: what a SQL join sees."""
    return session.read.table(silver_current_table(pipeline, source)).where(~F.col("_deleted"))
