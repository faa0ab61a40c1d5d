"""As-of (temporal) views: each event joined with the versions valid at its time (seed 001,
KIP-914's timestamped lookups; Flink's `FOR SYSTEM_TIME AS OF`).

A view whose base is an `events` source (`View.temporal`) joins every event with, for each
joined alias, the version of the referenced row valid at the event's time in silver *history*
(`_valid_from <= t < _valid_to`, not a deletion; `lakehouse.sqltext.valid_at` is the oracle's
statement of it). Chains are as-of too: payment -> order as of t -> customer as of t. The time
is the event's source commit time, or a declared timestamp column (`as_of: paid_at`). Inner
drops an event with no valid version; left keeps it with nulls.

How a batch stays small, for any arrival order:
- **Input**: the change feed of the events' silver current table (an event inserted, updated,
  deleted: re-enriched) and the change feeds of the joined sources' *history* tables (a version
  inserted, or its interval moved by a late neighbour): `as_of_feeds`.
- **The index** (`silver._asof_<view>`, clustered by (`_alias`, `_key`)): per event and joined
  alias, the key it looked up and its time `_at`, whether or not a version was found (so a
  version that arrives later finds the events that waited for it). A changed history row of key
  k valid over [from, to) affects exactly the events whose entry for an alias of that source is
  k with `_at` in [from, to) (its pre-image covers the old interval): `affected_events`. A change
  further up a chain is found through that alias's own entry, whose key did not move.
- **Recompute** the lookup chain for the affected events from silver history (`lookup_chain`),
  MERGE their gold rows with gold's guarded MERGE (only real changes reach gold's change feed),
  then MERGE their index entries.
- **Retention**: an event older than the joined sources' history compaction horizon keeps the
  enrichment it has when a dimension version changes under it (the versions it was built from
  may be gone); such corrections are counted (`kept_beyond_retention`), never applied half-way.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from lakehouse.declaration import Pipeline, Source, View
from lakehouse.deltasql import (
    DELETION_VECTORS_WHEN_LARGE, create_table, matched_delete, matched_update, merge, not_matched_insert, num_files, source_values,
)
from lakehouse.frames import local_frame
from lakehouse.gold import expression_join
from lakehouse.gold.delta import append_tagged, ensure_gold_table, insert_new_rows, merge_into_gold, table_rows
from lakehouse.gold.clock import PhaseClock
from lakehouse.gold.feeds import Feed, feed_fields, silver_feed
from lakehouse.gold.frames import alias_frame, gold_merge_source, union_all, view_rows
from lakehouse.gold.layout import KeyRange, clustered, count_and_ranges, range_predicate
from lakehouse.gold.plan import BROADCAST_ROW_LIMIT, KEY_COLLECT_LIMIT, LITERAL_KEY_LIMIT, AliasPlan, ViewPlan
from lakehouse.spark import write_time
from lakehouse.sqltext import quote, time_column
from lakehouse.tables import (
    CURRENT_KIND,
    HISTORY_KIND,
    delta_txn,
    gold_table,
    late_changes_table,
    silver_current_schema,
    silver_current_table,
    silver_history_schema,
    silver_history_table,
    spark_type,
)

AT = "_at"  # an event's time in the chain and the index
KEY = "_key"  # a looked-up key as JSON (`key_json`)
ALIAS = "_alias"
HISTORY_FEED_COLUMNS = ("_valid_from", "_valid_to")


# --------------------------------------------------------------------------- tables


def index_table(pipeline: Pipeline, view: View | str) -> str:
    """silver._asof_<view>: per event and joined alias, the key it looked up, and its time."""
    name = view if isinstance(view, str) else view.name
    return pipeline.tables.qualified("silver", f"_asof_{name}")


def index_schema(plan: ViewPlan) -> StructType:
    base = plan.base.source
    return StructType(
        [StructField(k, spark_type(base.column(k).type), False) for k in base.primary_key]
        + [StructField(ALIAS, StringType(), False), StructField(KEY, StringType(), False), StructField(AT, TimestampType(), True)]
    )


def prepare_as_of(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> None:
    """The index and gold tables when missing (the joined sources' history rows are read from
    their stores' change feeds, which are always on)."""
    create_table(spark, index_table(pipeline, plan.view), index_schema(plan),
                 properties=DELETION_VECTORS_WHEN_LARGE, cluster_by=(ALIAS, KEY))
    ensure_gold_table(spark, pipeline, plan)


def prepared_tables(pipeline: Pipeline, plan: ViewPlan) -> list[str]:
    """What `prepare_as_of` creates: the index and gold."""
    return [index_table(pipeline, plan.view), gold_table(pipeline, plan.view.name)]


def joined_sources(plan: ViewPlan) -> list[Source]:
    """The distinct sources of the view's joined aliases (read as of a time, from history)."""
    out: list[Source] = []
    for alias in plan.aliases[1:]:
        if all(s.name != alias.source.name for s in out):
            out.append(alias.source)
    return out


def as_of_feeds(pipeline: Pipeline, plan: ViewPlan) -> list[Feed]:
    """The change feeds of the events' current rows and of each joined source's history rows."""
    base = plan.base.source
    feeds = [silver_feed(pipeline, base, CURRENT_KIND, feed_fields(silver_current_schema(base), (*base.primary_key, "_sequence", "_deleted")))]
    for source in joined_sources(plan):
        if source.name == base.name:
            continue
        feeds.append(silver_feed(pipeline, source, HISTORY_KIND,
                                 feed_fields(silver_history_schema(source), (*source.primary_key, *HISTORY_FEED_COLUMNS))))
    return feeds


# --------------------------------------------------------------------------- pure DataFrame functions


def key_json(columns: Sequence[Column], names: Sequence[str]) -> Column:
    """A looked-up key as one comparable string (null when any part is null: nothing is looked up)."""
    present = F.lit(True)
    for c in columns:
        present = present & c.isNotNull()
    return F.when(present, F.to_json(F.struct(*[c.alias(n) for c, n in zip(columns, names)])))


def _typed_key(source: Source, columns: Sequence[Column]) -> list[Column]:
    return [c.cast(spark_type(source.column(pk).type)) for c, pk in zip(columns, source.primary_key)]


def lookup_key(plan: ViewPlan, alias: AliasPlan) -> Column:
    """The key `alias` looks up, from its parent's columns inside the chain (`key_json`)."""
    assert alias.join is not None and alias.parent is not None
    parent = plan.aliases[alias.parent]
    if alias.join.kind == "expression":
        parts = [expression_join.key_expression(alias.join, parent.col)]
    else:
        fk = parent.source.foreign_key(alias.join.foreign_key)
        parts = [F.col(parent.col(c)) for c in fk.columns]
    return key_json(_typed_key(alias.source, parts), alias.source.primary_key)


def row_key(source: Source) -> Column:
    """A source row's own key, in `lookup_key`'s form."""
    return key_json(_typed_key(source, [F.col(k) for k in source.primary_key]), source.primary_key)


def event_time(plan: ViewPlan) -> Column:
    """The time an event's joins are looked up at, over the base alias's internal columns."""
    column = plan.view.as_of
    return F.col(plan.base.col(column)) if column else F.col(plan.base.ts_col)


def _from(alias: AliasPlan) -> str:
    return f"_a{alias.index}__from"


def _to(alias: AliasPlan) -> str:
    return f"_a{alias.index}__to"


def _key_col(alias: AliasPlan) -> str:
    return f"_a{alias.index}__key"


def version_frame(alias: AliasPlan, history: DataFrame) -> DataFrame:
    """An alias's history versions that are not deletions, as `alias_frame` columns plus the
    interval and the row's key: `_source_ts` is the version's `_valid_from`."""
    versions = history.where(~F.col("_deleted"))
    return alias_frame(
        alias, versions.withColumn("_source_ts", F.col("_valid_from")),
        F.col("_valid_from").alias(_from(alias)), F.col("_valid_to").alias(_to(alias)),
        row_key(alias.source).alias(_key_col(alias)),
    )


def lookup_chain(
    plan: ViewPlan,
    events: DataFrame,
    history: Callable[[AliasPlan, DataFrame], DataFrame],
    checkpoint_hops: bool = False,
) -> DataFrame:
    """Per event: its base alias columns, `_at`, and per joined alias the key looked up
    (`_k<i>`, null when none: a null fk, or no parent version) and the version valid at `_at`
    (its alias columns; null when none). Left joins all along: the index needs every lookup,
    matched or not; `as_of_rows` applies the inner joins.

    `events`: the events' live rows (source columns, `_sequence`, `_source_ts`). `history(alias,
    keys)`: the alias source's history rows (history layout) for at least the keys in `keys`
    (one column `_key`, `row_key` form). Should intervals overlap (a source clock that went
    back), the version with the greatest sequence wins, as in `silver.plan.history_as_of`.
    `checkpoint_hops`: the chain is materialized before each hop, so `history` may read the
    wanted keys (a few events' batch) without computing the chain so far twice.
    """
    base = plan.base
    chain = alias_frame(base, events)
    chain = chain.withColumn(AT, event_time(plan))
    for alias in plan.aliases[1:]:
        chain = chain.withColumn(f"_k{alias.index}", lookup_key(plan, alias))
        if checkpoint_hops:
            chain = chain.localCheckpoint(eager=True)
        wanted = chain.select(F.col(f"_k{alias.index}").alias(KEY)).where(F.col(KEY).isNotNull()).distinct()
        versions = version_frame(alias, history(alias, wanted))
        at = F.col(AT)
        valid = (F.col(_from(alias)) <= at) & (F.col(_to(alias)).isNull() | (at < F.col(_to(alias))))
        chain = chain.join(versions, (F.col(f"_k{alias.index}") == F.col(_key_col(alias))) & valid, "left")
    if len(plan.aliases) > 1:
        event_key = [base.col(k) for k in base.source.primary_key]
        order = [F.col(a.seq_col).desc_nulls_last() for a in plan.aliases[1:]]
        w = Window.partitionBy(*event_key).orderBy(*order)
        chain = chain.withColumn("_rank", F.row_number().over(w)).where("_rank = 1").drop("_rank")
    return chain


def as_of_rows(plan: ViewPlan, chain: DataFrame) -> DataFrame:
    """Gold's rows from `lookup_chain`: an inner join's event with no valid version is dropped."""
    for alias in plan.aliases[1:]:
        assert alias.join is not None
        if alias.join.type == "inner":
            chain = chain.where(F.col(alias.seq_col).isNotNull())
    return view_rows(plan, chain)


def index_entries(plan: ViewPlan, chain: DataFrame) -> DataFrame:
    """The index rows of the events in `chain`: one per joined alias that looked a key up."""
    base = plan.base
    return union_all([
        chain.select(
            *[F.col(base.col(k)).alias(k) for k in base.source.primary_key],
            F.lit(alias.alias).alias(ALIAS),
            F.col(f"_k{alias.index}").alias(KEY),
            F.col(AT),
        ).where(F.col(KEY).isNotNull())
        for alias in plan.aliases[1:]
    ])


def index_updates(plan: ViewPlan, events: DataFrame, entries: DataFrame) -> DataFrame:
    """The index MERGE's source for the affected `events` (base primary key columns): every
    (event, joined alias) pair with its new entry, or `_key` null where the event looks nothing
    up any more (its entry, if any, is deleted)."""
    base = plan.base.source
    aliases = local_frame(events.sparkSession, [(a.alias,) for a in plan.aliases[1:]], StructType([StructField(ALIAS, StringType())]))
    pairs = events.select(*base.primary_key).distinct().crossJoin(F.broadcast(aliases))
    return pairs.join(entries, [*base.primary_key, ALIAS], "left")


def index_changes(plan: ViewPlan, updates: DataFrame, stored: DataFrame) -> DataFrame:
    """The rows of `index_updates` that change the index, given its `stored` rows for the same
    events: most batches re-enrich events whose lookups did not move (a dimension value changed,
    not a foreign key), and then there is nothing to write."""
    keys = [*plan.base.source.primary_key, ALIAS]
    old = stored.select(*keys, F.col(KEY).alias("_stored_key"), F.col(AT).alias("_stored_at"))
    same = F.col(KEY).eqNullSafe(F.col("_stored_key")) & (F.col(KEY).isNull() | F.col(AT).eqNullSafe(F.col("_stored_at")))
    return updates.join(old, keys, "left").where(~same).select(*updates.columns)


def changed_spans(rows: DataFrame, source: Source) -> DataFrame:
    """A joined source's history change rows as (`_key`, `_from`, `_to`): an event whose lookup of
    that key falls in [from, to) may see another version now. An inserted version and a moved
    interval's pre- and post-image count; a row physically deleted does not: compaction's
    (`maintain`) must not re-enrich old events, and silver's own (a deletion version a late
    change made moot) moves its neighbour's interval, whose update rows cover it."""
    return rows.where(F.col("_change_type") != "delete").select(
        row_key(source).alias(KEY), F.col("_valid_from").alias("_from"), F.col("_valid_to").alias("_to")
    )


def affected_events(
    plan: ViewPlan,
    base_keys: DataFrame | None,
    spans: Mapping[str, DataFrame],
    index: DataFrame,
    horizon: datetime | None = None,
) -> tuple[DataFrame | None, DataFrame | None]:
    """(the events to re-enrich: base primary key columns, distinct; the events a span found
    whose time is before the history `horizon`: left as they are, for the count), None when none.

    `base_keys`: the batch's changed events. `spans[source]`: `changed_spans` of each joined
    source in the batch. `index`: the view's index table (narrowed by the caller if it can).
    """
    base = plan.base.source
    found: list[DataFrame] = []
    for source_name, span in spans.items():
        aliases = [a.alias for a in plan.aliases[1:] if a.source.name == source_name]
        if not aliases:
            continue
        s = F.broadcast(span.where(F.col(KEY).isNotNull()).withColumnRenamed(KEY, "_span_key"))
        at = F.col(AT)
        hit = (F.col(KEY) == F.col("_span_key")) & (at >= F.col("_from")) & (F.col("_to").isNull() | (at < F.col("_to")))
        found.append(index.where(F.col(ALIAS).isin(aliases)).join(s, hit, "left_semi").select(*base.primary_key, AT))
    old: DataFrame | None = None
    via_spans: DataFrame | None = None
    if found:
        via_spans = union_all(found)
        if horizon is not None:
            before = F.col(AT) < F.lit(horizon).cast(TimestampType())
            old = via_spans.where(before).select(*base.primary_key).distinct()
            via_spans = via_spans.where(~before)
        via_spans = via_spans.select(*base.primary_key)
    parts = [p.select(*base.primary_key) for p in (base_keys, via_spans) if p is not None]
    return (union_all(parts).distinct() if parts else None), old


# --------------------------------------------------------------------------- reading silver


#: Key types whose values come back from `key_json` exactly as JSON numbers or strings.
_LITERAL_KEY_TYPES = ("bigint", "int", "smallint", "string")


def history_reader(session: SparkSession, pipeline: Pipeline) -> Callable[[AliasPlan, DataFrame], DataFrame]:
    """`lookup_chain`'s history for a batch: the alias source's history rows whose key is wanted.
    Up to `LITERAL_KEY_LIMIT` keys of a one-column key become a literal `IN` (Delta skips the
    files whose statistics exclude them; measured on the 100k-event bench lake, the same script,
    two warm runs each: a two-hop chain for 100 events 2.6-3.8 s this way, 3.8-5.7 s as a
    broadcast semi-join of the key column's JSON);
    more, a compound key or another key type, a broadcast semi-join."""

    def read(alias: AliasPlan, wanted: DataFrame) -> DataFrame:
        history = session.read.table(silver_history_table(pipeline, alias.source))
        (first, *rest) = alias.source.primary_key
        if not rest and alias.source.column(first).type in _LITERAL_KEY_TYPES:
            found = wanted.limit(LITERAL_KEY_LIMIT + 1).collect()
            if len(found) <= LITERAL_KEY_LIMIT:
                values = sorted({json.loads(r[KEY])[first] for r in found}, key=str)
                return F.broadcast(history.where(F.col(first).isin(values)))
        return history.join(F.broadcast(wanted), row_key(alias.source) == wanted[KEY], "left_semi")

    return read


def all_history(session: SparkSession, pipeline: Pipeline) -> Callable[[AliasPlan, DataFrame], DataFrame]:
    """`lookup_chain`'s history for a whole-view build: every row."""
    return lambda alias, _wanted: session.read.table(silver_history_table(pipeline, alias.source))


def events_of(
    session: SparkSession, pipeline: Pipeline, plan: ViewPlan, keys: DataFrame | None = None, ranges: Sequence[KeyRange] | None = None
) -> DataFrame:
    """The events' silver current rows (live and deleted), all or those with `keys` (within the
    key `ranges` covering them, when given: Delta then skips the other files)."""
    base = plan.base.source
    current = session.read.table(silver_current_table(pipeline, base))
    if ranges is not None:
        current = current.where(range_predicate(base.primary_key[0], ranges))
    return current if keys is None else current.join(keys, list(base.primary_key), "left_semi")


def as_of_view(session: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> DataFrame:
    """The whole view from silver: every live event as of its time (the build and the baseline)."""
    events = events_of(session, pipeline, plan).where(~F.col("_deleted"))
    return as_of_rows(plan, lookup_chain(plan, events, all_history(session, pipeline)))


def history_horizon(session: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> datetime | None:
    """The latest history compaction horizon among the joined sources (None: never compacted)."""
    from lakehouse.silver.layout import compacted_before

    found = [compacted_before(session, pipeline, s) for s in joined_sources(plan)]
    return max((h for h in found if h is not None), default=None)


# --------------------------------------------------------------------------- one batch


def process_as_of(
    session: SparkSession,
    pipeline: Pipeline,
    plan: ViewPlan,
    changes: Mapping[str, DataFrame],
    app_id: Callable[[str], str] | None = None,
    version: int | None = None,
    gold_may_be_empty: bool = True,
    change_rows: Mapping[str, int] | None = None,  # noqa: ARG001 - the kinds' shared signature (`runner.process_changes`)
) -> dict[str, Any]:
    """Maintain one as-of view for one batch of change rows (per source, flat columns; the
    events' current feed and the joined sources' history feeds): gold, then the index. Every
    write carries (app id, `version`) as its Delta txn, so a replayed batch writes nothing twice."""
    clock = PhaseClock()
    stats: dict[str, Any] = {"affected_keys": 0, "inserted": 0, "updated": 0, "deleted": 0, "subscriptions_written": 0,
                             "kept_beyond_retention": 0, "phases": clock.phases, "spans": clock.spans}
    target = gold_table(pipeline, plan.view.name)
    index = index_table(pipeline, plan.view)
    tag = (lambda table: app_id(table)) if app_id else (lambda table: None)
    if gold_may_be_empty and num_files(session, target) == 0:
        stats.update(_build(session, pipeline, plan, tag, version))
        clock.lap("build")
        return stats
    base = plan.base.source
    base_keys = changes[base.name].select(*base.primary_key) if base.name in changes else None
    spans = {name: changed_spans(rows, pipeline.source(name)) for name, rows in changes.items() if name != base.name}
    index_rows = session.read.table(index)
    keys_found = [r[0] for r in _union_keys(spans).limit(LITERAL_KEY_LIMIT + 1).collect()] if spans else []
    if spans and len(keys_found) <= LITERAL_KEY_LIMIT:  # a few keys: a literal IN lets Delta skip the index's files
        index_rows = index_rows.where(F.col(KEY).isin(sorted(keys_found)))
    horizon = history_horizon(session, pipeline, plan) if spans else None
    keys, old = affected_events(plan, base_keys, spans, index_rows, horizon)
    if old is not None and horizon is not None:
        stats["kept_beyond_retention"] = _record_kept(session, pipeline, plan, old, horizon, tag, version)
    if keys is None:
        return stats
    keys = keys.localCheckpoint(eager=True)
    count, ranges = count_and_ranges(keys, base.primary_key[0], KEY_COLLECT_LIMIT)
    stats["affected_keys"] = count
    clock.lap("keys")
    if count == 0:
        return stats
    joinable = F.broadcast(keys) if count <= BROADCAST_ROW_LIMIT else keys  # one row per affected event
    only_new = not spans and _only_new_events(changes[base.name])
    current = events_of(session, pipeline, plan, joinable, ranges)
    if not only_new:  # read once: the chain, then the delete markers of the MERGE source
        current = current.localCheckpoint(eager=True)
    chain = lookup_chain(plan, current.where(~F.col("_deleted")), history_reader(session, pipeline), checkpoint_hops=True)
    chain = chain.localCheckpoint(eager=True)
    if only_new:
        # Events new to silver: inserts into gold and the index, nothing to update or delete;
        # skipping the ones a first build already wrote (`insert_new_rows`).
        rows = as_of_rows(plan, chain).localCheckpoint(eager=True)
        clock.lap("recompute")
        stats.update(path="incremental", reason=f"{count} new event(s): inserted")
        stats["inserted"] = insert_new_rows(rows, target, plan.key_columns, ranges, tag(target), version)
        clock.lap("merge")
        entries = index_entries(plan, chain)
        stats["subscriptions_written"] = insert_new_rows(
            entries, index, [*base.primary_key, ALIAS], ranges, tag(index), version
        )
        clock.lap("index")
        return stats
    source = gold_merge_source(plan, keys, as_of_rows(plan, chain), current).localCheckpoint(eager=True)
    clock.lap("recompute")
    stats.update(path="incremental", reason=f"{count} event(s) to re-enrich")
    stats.update(merge_into_gold(session, target, plan, F.broadcast(source) if count <= BROADCAST_ROW_LIMIT else source,
                                 ranges, tag(target), version))
    clock.lap("merge")
    stored = session.read.table(index).join(joinable, list(base.primary_key), "left_semi")
    moved = index_changes(plan, index_updates(plan, keys, index_entries(plan, chain)), stored).localCheckpoint(eager=True)
    stats["subscriptions_written"] = _merge_index(plan, index, moved, tag(index), version) if not moved.isEmpty() else 0
    clock.lap("index")
    return stats


def _only_new_events(rows: DataFrame) -> bool:
    """Whether the events' change rows are all inserts into silver current: keys it never held
    (a deleted event keeps its marker there, so a re-created one arrives as an update)."""
    return rows.where(F.col("_change_type") != "insert").limit(1).count() == 0


def _record_kept(
    session: SparkSession, pipeline: Pipeline, plan: ViewPlan, old: DataFrame, horizon: datetime,
    tag: Callable[[str], str | None], version: int | None,
) -> int:
    """Record in `silver._late_changes` (reason `as_of_beyond_retention`) each event a dimension
    correction would re-enrich but whose time is older than the history horizon: it keeps the
    enrichment it has. Returns how many."""
    base = plan.base.source
    events = events_of(session, pipeline, plan, old).where(~F.col("_deleted"))
    at = F.col(time_column(plan.view))
    rows = events.select(
        F.lit(base.name).alias("source"),
        F.to_json(F.struct(*base.primary_key)).alias("key"),
        F.col("_sequence").alias("sequence"),
        F.lit("as_of").alias("op"),
        at.alias("source_ts"),
        (F.lit(int(horizon.timestamp() * 1000)) - F.unix_millis(at)).alias("late_by_ms"),
        F.lit(KEPT_REASON).alias("reason"),
        write_time().alias("recorded_at"),
    ).localCheckpoint(eager=False)  # filled by the count
    count = rows.count()
    if count:
        table = late_changes_table(pipeline)
        with delta_txn(session, tag(table), version):
            rows.write.format("delta").mode("append").saveAsTable(table)
    return count


#: `_late_changes.reason` of an event kept as it was: a correction older than the history retention.
KEPT_REASON = "as_of_beyond_retention"


def _union_keys(spans: Mapping[str, DataFrame]) -> DataFrame:
    return union_all([s.select(KEY) for s in spans.values()]).where(F.col(KEY).isNotNull()).distinct()


def _build(session: SparkSession, pipeline: Pipeline, plan: ViewPlan, tag: Callable[[str], str | None], version: int | None) -> dict[str, Any]:
    """An empty gold table: the whole view appended, and the whole index written anew."""
    target, index = gold_table(pipeline, plan.view.name), index_table(pipeline, plan.view)
    events = events_of(session, pipeline, plan).where(~F.col("_deleted"))
    chain = lookup_chain(plan, events, all_history(session, pipeline)).localCheckpoint(eager=True)
    (rows,) = table_rows(session, [silver_current_table(pipeline, plan.base.source)])
    inserted = append_tagged(clustered(as_of_rows(plan, chain), plan.key_columns, rows), target, tag(target), version)
    entries = index_entries(plan, chain)
    with delta_txn(session, tag(index), version):  # in (alias, key) ranges: a lookup of a few keys reads few files
        clustered(entries, (ALIAS, KEY), rows * max(1, len(plan.aliases) - 1)).write.format("delta").mode("overwrite").saveAsTable(index)
    return {"affected_keys": inserted, "inserted": inserted, "path": "build", "reason": "gold held no file: the whole view appended"}


def _merge_index(plan: ViewPlan, index: str, updates: DataFrame, app_id: str | None, version: int | None) -> int:
    """Apply `index_updates`: rows written (inserted, updated or deleted)."""
    keys = [*plan.base.source.primary_key, ALIAS]
    on = " AND ".join(f"t.{quote(c)} = s.{quote(c)}" for c in keys)
    values = source_values([f.name for f in index_schema(plan).fields])
    clauses = [
        matched_delete(f"s.{KEY} IS NULL"),
        matched_update(values, f"s.{KEY} IS NOT NULL AND NOT (t.{KEY} <=> s.{KEY} AND t.{AT} <=> s.{AT})"),
        not_matched_insert(values, f"s.{KEY} IS NOT NULL"),
    ]
    with delta_txn(updates.sparkSession, app_id, version):
        metrics = merge(updates, index, on, clauses)
    return metrics["inserted"] + metrics["updated"] + metrics["deleted"]
