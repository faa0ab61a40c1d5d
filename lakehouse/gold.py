"""Gold views: foreign-key joins kept equal to the SQL join of silver, incrementally (KIP-213 on Delta).

How a view is maintained, and why each piece exists
---------------------------------------------------
One streaming query per view reads the Change Data Feed of every silver current table the view
touches (startingVersion 0, one checkpoint per view). Each micro-batch, inside foreachBatch:

1. **Subscriptions** (`silver._sub_<left>__<fk>`, one per (left source, foreign key) relation,
   KIP-213's subscription store): one row per left key: (fk columns, left pk columns,
   `_left_hash`, `_sequence` of the version that set this subscription). A foreign-key change
   moves the row to the new fk (KIP-213's DELETE_KEY_NO_PROPAGATE to the old fk + subscribe to
   the new); a delete or a null fk removes it (a null fk subscribes to nothing); only a newer
   `_sequence` wins, so a replay or a lagging second view can never take a subscription back in
   time. An update that keeps the fk writes nothing here (most changes: a status, a rename). A
   subscription exists whether or not the referenced parent exists, so a parent that arrives
   later finds its children. Tables are `CLUSTER BY` fk, and lookups of a few parents use a
   literal `IN`: "who subscribes to these parents" is KIP-213's prefix scan, pruned by file
   statistics. Every view that follows a relation maintains it from its own stream, so the
   subscriptions a view walks are never older than the changes that view has processed.
2. **Affected base keys**: the base table's changed keys directly; for any other alias, its
   changed keys are walked back through the subscription tables hop by hop (a customer change
   finds orders through `_sub_orders__customer`, then order items through
   `_sub_order_items__order`); a primary-key join maps keys 1:1. Keys are gathered per alias
   from the leaves towards the base, so each relation is looked up once per batch (changed
   orders and the orders of changed customers share one scan of `_sub_order_items__order`).
3. **Recompute** the view's join for exactly those keys from silver current (live rows): the same
   left-deep join the SQL oracle runs, restricted to a few base keys.
4. **MERGE into gold**: insert new rows, update a row only when its content (`_row_hash`) or its
   lineage hashes differ, delete a row only when its key is affected, present in gold, and no
   longer in the join. The MERGE source carries explicit delete markers for affected keys that
   left the join (never `NOT MATCHED BY SOURCE`), so a delete of an absent row cannot happen and
   the gold change feed carries only real changes. When the gold table holds no file yet (a new
   view, a rebuild), steps 2-4 are one append of the whole view instead: there is nothing to
   diff against, and the first batch carries every source row anyway.

Why recomputing from current silver (instead of shipping values through the subscription store
as KIP-213 does) converges for any arrival order: a change committed to silver is delivered by
the change feed after it is visible, and the keys whose result depends on it are recomputed then
(through subscriptions that are at least as new as the link, or, when the link's own change is
not yet processed, when that change is). Each recompute reads a state at least as new as every
change processed so far, so the last recompute of a key reads its final state.

The hash check (seed 000, "Joiner Propagation of Stale Data")
-------------------------------------------------------------
KIP-213 sends the hash of the left value with each subscription and, when the right side's
answer comes back, drops it if the left row's current hash differs: a result computed from a
left row that has since changed must never overwrite a newer one. Here every gold row records,
for each alias it was built from, `_<alias>_hash` (hash of the columns of that row the view
reads: key, selected columns, join columns) and `_<alias>_seq` (the silver `_sequence` of that
version), null where a left join found nothing, plus `_row_hash` over the output columns. The
gold MERGE applies an update or delete only when the incoming base sequence is not older than
the stored one: the Delta equivalent of "validate the hash against the current LHS value". With
one query per view reading monotone silver state this guard never fires in a healthy run; it
protects against a second writer (a backfill, a restarted job on another cluster, a replay of
an old batch) ever regressing a row. The guard covers the base alias only: a right alias's
sequence belongs to whichever parent the fk points at, and two different parents' sequences do
not order each other.

A change to a source column the view does not read, or a re-delivered version with a newer
sequence but the same content, produces the same `_row_hash` and lineage hashes: gold is not
rewritten (its `_<alias>_seq` then records the version the content was built from, which may be
older than silver's current `_sequence`; `verify` compares hashes, and only flags a recorded
sequence newer than silver's).

Exactly-once effect: every write in a batch sets Delta's `txnAppId`/`txnVersion` (app id =
pipeline, view, the query's persistent id and the target table; version = batch id), so a batch
replayed after a crash skips writes that already committed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from lakehouse.config import ForeignKey, Join, Pipeline, Source, View
from lakehouse.paths import checkpoint_dir
from lakehouse.tables import SEQUENCE_TYPE, delta_txn, gold_table, silver_current_table, spark_type, subscription_table

#: Up to this many affected keys, MERGE and lookups also get a literal `IN (...)` on the first key
#: column: Delta prunes files by statistics only for literal predicates, not for joins.
LITERAL_KEY_LIMIT = 1000
#: Up to this many rows, a MERGE's source is broadcast: the join then streams the target's files
#: past it instead of shuffling every target row (measured: a 4k-row gold MERGE into 1M rows
#: 5.1-6.5 s as a shuffle join, 3.5-4.2 s broadcast).
BROADCAST_ROW_LIMIT = 200_000
ROW_HASH = "_row_hash"
JOIN_TYPES = {"inner": "inner", "left": "left", "outer": "full"}


# --------------------------------------------------------------------------- the view's plan (pure)


@dataclass(frozen=True)
class AliasPlan:
    """One alias of a view: where it joins, and which of its columns the view reads."""

    index: int
    alias: str
    source: Source
    join: Join | None  # None for the base
    parent: int | None
    used: tuple[str, ...]  # key + selected + outgoing join columns, in declared order

    def col(self, column: str) -> str:
        """The internal (collision-free) name of one of this alias's columns inside a join."""
        return f"_a{self.index}_{column}"

    @property
    def hash_col(self) -> str:
        return f"_a{self.index}__hash"

    @property
    def seq_col(self) -> str:
        return f"_a{self.index}__seq"

    @property
    def gold_hash(self) -> str:
        return f"_{self.alias}_hash"

    @property
    def gold_seq(self) -> str:
        return f"_{self.alias}_seq"


@dataclass(frozen=True)
class ViewPlan:
    """Everything about a view that gold needs, derived once from the declaration."""

    view: View
    aliases: tuple[AliasPlan, ...]
    key_columns: tuple[str, ...]  # gold's key: the output columns selecting the base primary key
    relations: tuple[tuple[Source, ForeignKey], ...]  # subscription relations this view follows
    sources: tuple[Source, ...]  # distinct silver tables the view reads, in alias order

    @property
    def base(self) -> AliasPlan:
        return self.aliases[0]

    def alias(self, name: str) -> AliasPlan:
        for plan in self.aliases:
            if plan.alias == name:
                return plan
        raise KeyError(f"view {self.view.name!r} has no alias {name!r}")

    @property
    def lineage_columns(self) -> tuple[str, ...]:
        return tuple(c for a in self.aliases for c in (a.gold_hash, a.gold_seq))

    @property
    def output_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.view.columns)

    @property
    def gold_columns(self) -> tuple[str, ...]:
        return self.output_columns + self.lineage_columns + (ROW_HASH,)

    def gold_schema(self) -> StructType:
        fields = [
            StructField(c.name, spark_type(self.alias(c.alias).source.column(c.column).type), True)
            for c in self.view.columns
        ]
        for a in self.aliases:
            fields.append(StructField(a.gold_hash, StringType(), True))
            fields.append(StructField(a.gold_seq, SEQUENCE_TYPE, True))
        fields.append(StructField(ROW_HASH, StringType(), True))
        return StructType(fields)

    @property
    def has_outer(self) -> bool:
        return any(a.join is not None and a.join.type == "outer" for a in self.aliases)


def view_plan(pipeline: Pipeline, view: View | str) -> ViewPlan:
    """Derive the aliases, gold key and subscription relations of a view."""
    view = pipeline.views[view] if isinstance(view, str) else view
    index = {a: i for i, a in enumerate(view.aliases)}
    outgoing: dict[str, set[str]] = {a: set() for a in view.aliases}
    for join in view.joins:
        if join.foreign_key is not None:
            parent_source = pipeline.source(view.table_of(join.parent_alias))
            outgoing[join.parent_alias].update(parent_source.foreign_key(join.foreign_key).columns)
    aliases: list[AliasPlan] = []
    for i, alias in enumerate(view.aliases):
        source = pipeline.source(view.table_of(alias))
        join = None if i == 0 else view.joins[i - 1]
        wanted = set(source.primary_key) | outgoing[alias] | {c.column for c in view.columns if c.alias == alias}
        used = tuple(c for c in source.column_names if c in wanted)
        aliases.append(AliasPlan(i, alias, source, join, None if join is None else index[join.parent_alias], used))
    base = aliases[0]
    key_columns = []
    for pk in base.source.primary_key:
        out = next(c.name for c in view.columns if c.alias == base.alias and c.column == pk)
        key_columns.append(out)
    relations: list[tuple[Source, ForeignKey]] = []
    for a in aliases[1:]:
        if a.join is not None and a.join.foreign_key is not None:
            parent = aliases[a.parent].source
            rel = (parent, parent.foreign_key(a.join.foreign_key))
            if all((p.name, f.name) != (rel[0].name, rel[1].name) for p, f in relations):
                relations.append(rel)
    sources: list[Source] = []
    for a in aliases:
        if all(s.name != a.source.name for s in sources):
            sources.append(a.source)
    plan = ViewPlan(view, tuple(aliases), tuple(key_columns), tuple(relations), tuple(sources))
    clash = set(plan.output_columns) & (set(plan.lineage_columns) | {ROW_HASH, "_present", "_guard_seq"})
    if clash:
        raise ValueError(f"view {view.name!r}: output column(s) {sorted(clash)} clash with gold's metadata columns; rename them")
    return plan


def subscription_columns(source: Source, fk: ForeignKey) -> tuple[str, ...]:
    """fk columns then the left primary key (a column in both is kept once)."""
    return tuple(dict.fromkeys(fk.columns + source.primary_key))


def subscription_schema(source: Source, fk: ForeignKey) -> StructType:
    return StructType(
        [StructField(c, spark_type(source.column(c).type), True) for c in subscription_columns(source, fk)]
        + [StructField("_left_hash", StringType(), True), StructField("_sequence", SEQUENCE_TYPE, False)]
    )


# --------------------------------------------------------------------------- small pure DataFrame functions


def content_hash(columns: Sequence[Column]) -> Column:
    """A stable 128-bit hash of values (not names), as 32 hex characters.

    Two seeded xxhash64 over (is-null, value) pairs of the typed values: no string forms, no
    JSON, so hashing costs little next to the join (sha256 of a JSON array, the earlier form,
    took 64 characters per hash and most of gold's bytes). The null flag keeps (null, "x")
    apart from ("x", null), which xxhash64 alone (it skips nulls) would not. The hash does not
    depend on internal column names, so renaming internals does not rewrite every gold row.
    """
    parts: list[Column] = []
    for column in columns:
        parts += [column.isNull(), column]
    halves = [F.lpad(F.hex(F.xxhash64(F.lit(seed), *parts)), 16, "0") for seed in _HASH_SEEDS]
    return F.concat(*halves)


_HASH_SEEDS = ("cdc-enrich/a", "cdc-enrich/b")
HASH_LENGTH = 16 * len(_HASH_SEEDS)


def latest_changes(changes: DataFrame, key: Sequence[str]) -> DataFrame:
    """The newest change per key of one source's change-feed rows (pre-images dropped).

    Silver commits per key in sequence order, so the latest commit carries the newest state;
    `_sequence` breaks ties inside one commit. A real CDF `delete` row (a physical delete)
    is kept and marked `_gone`, like a `_deleted` row.
    """
    rows = changes.where(F.col("_change_type") != "update_preimage")
    order = Window.partitionBy(*key).orderBy(F.col("_commit_version").desc(), F.col("_sequence").desc())
    return (
        rows.withColumn("_rank", F.row_number().over(order))
        .where("_rank = 1")
        .drop("_rank")
        .withColumn("_gone", (F.col("_change_type") == "delete") | F.coalesce(F.col("_deleted"), F.lit(False)))
    )


def subscription_updates(changes: DataFrame, source: Source, fk: ForeignKey) -> DataFrame:
    """What one batch of left-table changes does to the (source, fk) subscription table.

    One row per left key whose subscription may have moved: its subscription columns,
    `_left_hash`, `_sequence`, and `_remove` when the key no longer subscribes to anything
    (deleted, or a null fk column). A key whose changes in the batch are only updates with both
    images present, the same fk throughout and no delete is left out: its subscription cannot
    have moved, so a batch of such changes (a status update, a rename) writes nothing here.
    """
    key = list(source.primary_key)
    per_key = Window.partitionBy(*key)
    fk_value = F.to_json(F.array(*[F.col(c).cast("string") for c in fk.columns]))
    kind = F.col("_change_type")
    structural = kind.isin("insert", "delete") | F.coalesce(F.col("_deleted"), F.lit(False))
    moved = (
        F.max(structural.cast("int")).over(per_key).cast("boolean")
        | (F.size(F.collect_set(fk_value).over(per_key)) > 1)
        | (F.max((kind == "update_preimage").cast("int")).over(per_key)
           != F.max((kind == "update_postimage").cast("int")).over(per_key))
    )
    latest = latest_changes(changes.withColumn("_moved", moved), source.primary_key).where("_moved")
    null_fk = F.lit(False)
    for c in fk.columns:
        null_fk = null_fk | F.col(c).isNull()
    return latest.select(
        *[F.col(c) for c in subscription_columns(source, fk)],
        F.col("_row_hash").alias("_left_hash"),
        F.col("_sequence"),
        (F.col("_gone") | null_fk).alias("_remove"),
    )


def walk_back(
    keys: DataFrame,
    parent: Source,
    fk: ForeignKey,
    target: Source,
    subscriptions: DataFrame,
    prune_limit: int | None = None,
) -> DataFrame:
    """Keys of `parent` rows subscribed (through `fk`) to the given `target` keys: one hop back.

    With `prune_limit`, up to that many distinct target keys are collected first: none means no
    lookup at all, and a few become a literal `IN` on the first fk column, which is what lets
    Delta skip the files of a subscription table clustered by fk (KIP-213's prefix scan).
    """
    renamed = keys.select(*[F.col(k).alias(f"_k{i}") for i, k in enumerate(target.primary_key)]).distinct()
    if prune_limit is not None:
        rows = renamed.limit(prune_limit + 1).collect()
        if len(rows) <= prune_limit:
            session = keys.sparkSession
            if not rows:
                return session.createDataFrame([], StructType([subscriptions.schema[c] for c in parent.primary_key]))
            renamed = session.createDataFrame(rows, renamed.schema)
            subscriptions = subscriptions.where(F.col(fk.columns[0]).isin(sorted({r[0] for r in rows if r[0] is not None})))
    cond = None
    for i, c in enumerate(fk.columns):
        term = subscriptions[c] == renamed[f"_k{i}"]
        cond = term if cond is None else cond & term
    return subscriptions.join(F.broadcast(renamed), cond, "inner").select(*parent.primary_key)


def affected_base_keys(
    plan: ViewPlan,
    changed: Mapping[str, DataFrame],
    subscriptions: Callable[[Source, ForeignKey], DataFrame],
    prune_limit: int | None = None,
) -> DataFrame | None:
    """The base keys whose join result may have changed, given changed keys per source.

    `changed[source]` holds that source's primary key columns; `subscriptions(left, fk)` reads a
    subscription table. Keys are gathered per alias from the leaves towards the base (a joined
    alias always comes after its parent), so each relation is looked up once per batch however
    many changed aliases lie beyond it: a changed customer and a changed order reach order items
    through one scan of `_sub_order_items__order`. A primary-key join maps keys 1:1. Returns base
    primary key columns (distinct), or None when nothing this view reads changed. `prune_limit`:
    see `walk_back`.
    """
    gathered: dict[int, list[DataFrame]] = {}
    for alias in plan.aliases:
        keys = changed.get(alias.source.name)
        if keys is not None:
            gathered.setdefault(alias.index, []).append(keys.select(*alias.source.primary_key))
    for alias in reversed(plan.aliases[1:]):
        parts = gathered.pop(alias.index, None)
        if not parts:
            continue
        assert alias.join is not None and alias.parent is not None and alias.parent < alias.index
        parent = plan.aliases[alias.parent]
        keys = _union(parts)
        if alias.join.foreign_key is None:
            keys = keys.select(*[F.col(c).alias(p) for c, p in zip(alias.source.primary_key, parent.source.primary_key)])
        else:
            fk = parent.source.foreign_key(alias.join.foreign_key)
            keys = walk_back(keys, parent.source, fk, alias.source, subscriptions(parent.source, fk), prune_limit)
        gathered.setdefault(parent.index, []).append(keys)
    if not gathered.get(0):
        return None
    return _union(gathered[0]).distinct()


def _union(parts: Sequence[DataFrame]) -> DataFrame:
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def _alias_frame(alias: AliasPlan, live: DataFrame) -> DataFrame:
    return live.select(
        *[F.col(c).alias(alias.col(c)) for c in alias.used],
        content_hash([F.col(c) for c in alias.used]).alias(alias.hash_col),
        F.col("_sequence").alias(alias.seq_col),
    )


def join_view(
    plan: ViewPlan,
    live: Mapping[str, DataFrame],
    base_keys: DataFrame | None = None,
    base_live: DataFrame | None = None,
) -> DataFrame:
    """The view's rows (gold columns) from live source rows, optionally for some base keys only.

    `live[source]` holds the source's columns, `_sequence` (and anything else, ignored);
    `base_keys` holds base primary key columns. The join is left-deep in declared order, as the
    SQL oracle writes it: inner/left foreign-key joins, inner/left/outer primary-key joins (an
    outer join's key is the coalesce of both sides, as in a KTable-KTable outer join).
    `base_live` replaces `live[base]` for the base alias only (already narrowed to the keys).
    """
    base = plan.base
    frames: list[DataFrame] = []
    for alias in plan.aliases:
        df = base_live if (alias.index == 0 and base_live is not None) else live[alias.source.name]
        restrict = alias.index == 0 or (alias.join is not None and alias.join.foreign_key is None)
        if base_keys is not None and restrict:
            keys = base_keys.select(
                *[F.col(b).alias(a) for b, a in zip(base.source.primary_key, alias.source.primary_key)]
            )
            df = df.join(keys, list(alias.source.primary_key), "left_semi")
        frames.append(_alias_frame(alias, df))
    joined = frames[0]
    key_exprs: list[Column] = [F.col(base.col(k)) for k in base.source.primary_key]
    for alias, frame in zip(plan.aliases[1:], frames[1:]):
        join = alias.join
        assert join is not None and alias.parent is not None
        if join.foreign_key is not None:
            parent = plan.aliases[alias.parent]
            fk = parent.source.foreign_key(join.foreign_key)
            pairs = [(F.col(parent.col(f)), F.col(alias.col(p))) for f, p in zip(fk.columns, alias.source.primary_key)]
        else:
            pairs = [(k, F.col(alias.col(p))) for k, p in zip(key_exprs, alias.source.primary_key)]
        cond = pairs[0][0] == pairs[0][1]
        for left, right in pairs[1:]:
            cond = cond & (left == right)
        joined = joined.join(frame, cond, JOIN_TYPES[join.type])
        if join.type == "outer":
            key_exprs = [F.coalesce(k, F.col(alias.col(p))) for k, p in zip(key_exprs, alias.source.primary_key)]
    outputs: list[Column] = []
    for c in plan.view.columns:
        alias = plan.alias(c.alias)
        if alias.index == 0 and c.column in base.source.primary_key:
            outputs.append(key_exprs[base.source.primary_key.index(c.column)].alias(c.name))
        else:
            outputs.append(F.col(alias.col(c.column)).alias(c.name))
    lineage: list[Column] = []
    for alias in plan.aliases:
        lineage += [F.col(alias.hash_col).alias(alias.gold_hash), F.col(alias.seq_col).alias(alias.gold_seq)]
    return joined.select(*outputs, *lineage).withColumn(
        ROW_HASH, content_hash([F.col(c) for c in plan.output_columns])
    )


def gold_merge_source(plan: ViewPlan, keys: DataFrame, result: DataFrame, base_current: DataFrame) -> DataFrame:
    """The MERGE source: one row per affected key, either its new row or a delete marker.

    `keys` are affected base keys (base pk names), `result` is `join_view` for them, and
    `base_current` is the base table's silver current rows (live and deleted) so a marker carries
    the sequence of the version that removed the key (the hash check's guard for deletes).
    """
    base = plan.base
    renamed_keys = keys.select(*[F.col(p).alias(k) for p, k in zip(base.source.primary_key, plan.key_columns)])
    seqs = base_current.select(
        *[F.col(p).alias(k) for p, k in zip(base.source.primary_key, plan.key_columns)],
        F.col("_sequence").alias("_marker_seq"),
    )
    out = renamed_keys.join(result, list(plan.key_columns), "left").join(seqs, list(plan.key_columns), "left")
    return out.select(
        *[F.col(c) for c in plan.gold_columns],
        F.col(ROW_HASH).isNotNull().alias("_present"),
        F.coalesce(F.col(base.gold_seq), F.col("_marker_seq")).alias("_guard_seq"),
    )


# --------------------------------------------------------------------------- Delta edges


def _q(name: str) -> str:
    return f"`{name}`"


def _metrics(result: DataFrame) -> dict[str, int]:
    rows = result.collect()
    if not rows:  # skipped by txnAppId/txnVersion: already applied
        return {"inserted": 0, "updated": 0, "deleted": 0}
    row = rows[0].asDict()
    return {
        "inserted": int(row.get("num_inserted_rows") or 0),
        "updated": int(row.get("num_updated_rows") or 0),
        "deleted": int(row.get("num_deleted_rows") or 0),
    }


def _create_table(spark: SparkSession, name: str, schema: StructType, cluster_by: Sequence[str], cdf: bool) -> None:
    """Create a Delta table if missing: clustered, with deletion vectors (a MERGE that changes a
    few rows of a large file marks them instead of rewriting the file), CDF when asked."""
    from delta.tables import DeltaTable

    builder = (
        DeltaTable.createIfNotExists(spark)
        .tableName(name)
        .addColumns(schema)
        .property("delta.enableDeletionVectors", "true")
    )
    if cluster_by:
        builder = builder.clusterBy(*cluster_by)
    if cdf:
        builder = builder.property("delta.enableChangeDataFeed", "true")
    builder.execute()


def ensure_subscription_table(spark: SparkSession, pipeline: Pipeline, source: Source, fk: ForeignKey) -> str:
    """Create `silver._sub_<source>__<fk>` if missing, clustered by the fk columns for lookups."""
    name = subscription_table(pipeline, source, fk.name)
    _create_table(spark, name, subscription_schema(source, fk), fk.columns, cdf=False)
    return name


def ensure_gold_table(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> str:
    """Create gold.<view> if missing (CDF on, clustered by key); refuse a table of another shape."""
    name = gold_table(pipeline, plan.view.name)
    if spark.catalog.tableExists(name):
        have = [f.name for f in spark.table(name).schema.fields]
        if have != list(plan.gold_columns):
            raise ValueError(
                f"{name} has columns {have} but view {plan.view.name!r} now declares {list(plan.gold_columns)}; "
                f"drop the table and its checkpoint (gold_{plan.view.name}) to rebuild it"
            )
        # one row says it: a table is built by one version and a mixed one is refused here
        old = [r for r in spark.table(name).select(ROW_HASH).limit(1).collect() if r[0] is not None and len(r[0]) != HASH_LENGTH]
        if old:
            raise ValueError(
                f"{name} holds rows hashed by an earlier version of cdc-enrich ({len(old[0][0])}-character "
                f"hashes, now {HASH_LENGTH}): every row would be rewritten once and `verify` would report them "
                f"stale; drop the table and its checkpoint (gold_{plan.view.name}) to rebuild it"
            )
        return name
    _create_table(spark, name, plan.gold_schema(), plan.key_columns, cdf=True)
    return name


def _key_prefilter(alias: str, column: str, values: Sequence[Any] | None) -> Column | None:
    if values is None:
        return None
    return F.col(f"{alias}.{_q(column)}").isin(list(values))


def merge_subscriptions(
    session: SparkSession,
    table: str,
    updates: DataFrame,
    source: Source,
    fk: ForeignKey,
    app_id: str | None = None,
    version: int | None = None,
) -> dict[str, int]:
    """Apply `subscription_updates` to a subscription table: newer sequence only."""
    from delta.tables import DeltaTable

    cols = subscription_columns(source, fk)
    on = " AND ".join(f"t.{_q(c)} = s.{_q(c)}" for c in source.primary_key)
    values = {c: f"s.{_q(c)}" for c in cols + ("_left_hash", "_sequence")}
    merge = (
        DeltaTable.forName(session, table)
        .alias("t")
        .merge(updates.alias("s"), on)
        .whenMatchedDelete(condition="s._remove AND t._sequence <= s._sequence")
        .whenMatchedUpdate(condition="NOT s._remove AND s._sequence > t._sequence", set=values)
        .whenNotMatchedInsert(condition="NOT s._remove", values=values)
    )
    with delta_txn(session, app_id, version):
        return _retry_on_conflict(lambda: _metrics(merge.execute()))


def merge_into_gold(
    session: SparkSession,
    table: str,
    plan: ViewPlan,
    source: DataFrame,
    key_values: Sequence[Any] | None = None,
    app_id: str | None = None,
    version: int | None = None,
) -> dict[str, int]:
    """MERGE `gold_merge_source` rows into gold: only real changes, never from an older base version.

    Update when `_row_hash` or a lineage hash differs; delete a present row whose key left the
    join; insert a new row. Update and delete require the incoming base sequence not to be older
    than the stored one (the hash check). `key_values` (the affected keys' first key column, when
    few) adds a literal predicate so Delta prunes gold files by statistics.
    """
    from delta.tables import DeltaTable

    on = F.expr(" AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in plan.key_columns))
    prefilter = _key_prefilter("t", plan.key_columns[0], key_values)
    if prefilter is not None:
        on = on & prefilter
    base_seq = f"t.{_q(plan.base.gold_seq)}"
    guard = f"(s._guard_seq IS NULL OR {base_seq} IS NULL OR s._guard_seq >= {base_seq})"
    hashes = [ROW_HASH] + [a.gold_hash for a in plan.aliases]
    changed = " OR ".join(f"NOT (t.{_q(h)} <=> s.{_q(h)})" for h in hashes)
    values = {c: f"s.{_q(c)}" for c in plan.gold_columns}
    merge = (
        DeltaTable.forName(session, table)
        .alias("t")
        .merge(source.alias("s"), on)
        .whenMatchedDelete(condition=f"NOT s._present AND {guard}")
        .whenMatchedUpdate(condition=f"s._present AND {guard} AND ({changed})", set=values)
        .whenNotMatchedInsert(condition="s._present", values=values)
    )
    with delta_txn(session, app_id, version):
        return _metrics(merge.execute())


def _retry_on_conflict(action: Callable[[], dict[str, int]], attempts: int = 5) -> dict[str, int]:
    """Two views may write one subscription table at once; the write is idempotent, so retry."""
    from delta.exceptions import DeltaConcurrentModificationException

    for attempt in range(attempts):
        try:
            return action()
        except DeltaConcurrentModificationException:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def live_rows(session: SparkSession, pipeline: Pipeline, source: Source) -> DataFrame:
    """silver current without deleted keys: what a SQL join sees."""
    return session.read.table(silver_current_table(pipeline, source)).where(~F.col("_deleted"))


def _collect_small(df: DataFrame, limit: int = LITERAL_KEY_LIMIT) -> tuple[int, list[Any] | None]:
    """Count keys; when few, also return their first column's distinct values for literal pruning."""
    rows = df.limit(limit + 1).collect()
    if len(rows) <= limit:
        return len(rows), sorted({r[0] for r in rows if r[0] is not None})
    return df.count(), None


# --------------------------------------------------------------------------- the streaming runner


@dataclass
class ViewRun:
    """What one view's run did (summed over its micro-batches)."""

    view: str
    batches: int = 0
    changes_read: int = 0
    affected_keys: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    subscriptions_written: int = 0
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase, summed
    skipped: str | None = None

    def line(self) -> str:
        if self.skipped:
            return f"{self.view}: skipped ({self.skipped})"
        return (
            f"{self.view}: {self.batches} batch(es), {self.changes_read} change(s) read, "
            f"{self.affected_keys} key(s) recomputed, +{self.inserted} ~{self.updated} -{self.deleted} "
            f"gold rows, {self.subscriptions_written} subscription row(s) written, {self.seconds:.1f}s"
        )


@dataclass
class GoldReport:
    views: dict[str, ViewRun] = field(default_factory=dict)

    def render(self) -> str:
        return "\n".join(["gold:"] + [f"  {run.line()}" for run in self.views.values()])


def _struct_of(source: Source, columns: Sequence[str]) -> StructType:
    silver = {f.name: f for f in _silver_fields(source)}
    return StructType([StructField(c, silver[c].dataType, True) for c in columns])


def _silver_fields(source: Source) -> list[StructField]:
    from lakehouse.tables import silver_current_schema

    return list(silver_current_schema(source).fields)


def _change_columns(plan: ViewPlan, source: Source) -> tuple[str, ...]:
    """The columns of a source's change rows this view needs: keys, its fks, and metadata."""
    fk_cols: list[str] = []
    for left, fk in plan.relations:
        if left.name == source.name:
            fk_cols += list(fk.columns)
    return tuple(dict.fromkeys(source.primary_key + tuple(fk_cols))) + ("_row_hash", "_sequence", "_deleted")


def change_stream(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> DataFrame:
    """One stream: the union of the change feeds of every silver table the view reads, tagged.

    Each source's rows sit in their own struct column (`_s<i>`, null for other sources), so the
    union keeps exact types without serialising to JSON.
    """
    structs = [_struct_of(s, _change_columns(plan, s)) for s in plan.sources]
    union: DataFrame | None = None
    for i, source in enumerate(plan.sources):
        stream = (
            spark.readStream.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", 0)
            .table(silver_current_table(pipeline, source))
        )
        cols = [
            F.lit(source.name).alias("_source"),
            F.col("_change_type"),
            F.col("_commit_version").cast("long").alias("_commit_version"),
        ]
        for j, struct in enumerate(structs):
            if j == i:
                cols.append(F.struct(*[F.col(c) for c in struct.fieldNames()]).alias(f"_s{j}"))
            else:
                cols.append(F.lit(None).cast(struct).alias(f"_s{j}"))
        part = stream.select(*cols)
        union = part if union is None else union.unionByName(part)
    assert union is not None
    return union


def decode_changes(plan: ViewPlan, batch: DataFrame, present: Sequence[str]) -> dict[str, DataFrame]:
    """Per source present in the batch: its change rows as flat columns."""
    out: dict[str, DataFrame] = {}
    for i, source in enumerate(plan.sources):
        if source.name in present:
            out[source.name] = batch.where(F.col("_source") == source.name).select(
                "_change_type", "_commit_version", f"_s{i}.*"
            )
    return out


class _ViewMaintainer:
    """foreachBatch body of one view's query: subscriptions, affected keys, recompute, MERGE."""

    def __init__(self, pipeline: Pipeline, plan: ViewPlan, run: ViewRun, progress: Callable[[str], None] | None) -> None:
        self.pipeline = pipeline
        self.plan = plan
        self.run = run
        self.progress = progress
        self.query_id: str | None = None
        self.ready = threading.Event()
        self.run_a_batch = False  # after one batch, gold is known filled (or the MERGE path fills it)

    def app_id(self, target: str) -> str:
        return f"cdc-enrich/{self.pipeline.name}/gold_{self.plan.view.name}/{self.query_id}/{target}"

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        self.ready.wait(120)
        started = time.monotonic()
        session = batch_df.sparkSession
        batch = batch_df.persist()
        try:
            counts = {r["_source"]: r["count"] for r in batch.groupBy("_source").count().collect()}
            if not counts:
                return
            read_seconds = time.monotonic() - started
            stats = process_changes(
                session,
                self.pipeline,
                self.plan,
                decode_changes(self.plan, batch, list(counts)),
                app_id=self.app_id,
                version=batch_id,
                gold_may_be_empty=not self.run_a_batch,
            )
            self.run_a_batch = True
        finally:
            batch.unpersist()
        run = self.run
        run.batches += 1
        run.changes_read += sum(counts.values())
        run.affected_keys += stats["affected_keys"]
        run.inserted += stats["inserted"]
        run.updated += stats["updated"]
        run.deleted += stats["deleted"]
        run.subscriptions_written += stats["subscriptions_written"]
        run.seconds += time.monotonic() - started
        for phase, seconds in {"read": read_seconds, **stats["phases"]}.items():
            run.phases[phase] = run.phases.get(phase, 0.0) + seconds
        if self.progress:
            self.progress(
                f"gold {self.plan.view.name} batch {batch_id}: {sum(counts.values())} change(s), "
                f"{stats['affected_keys']} key(s), +{stats['inserted']} ~{stats['updated']} -{stats['deleted']} "
                f"({time.monotonic() - started:.1f}s)"
            )


def process_changes(
    session: SparkSession,
    pipeline: Pipeline,
    plan: ViewPlan,
    changes: Mapping[str, DataFrame],
    app_id: Callable[[str], str] | None = None,
    version: int | None = None,
    gold_may_be_empty: bool = True,
) -> dict[str, Any]:
    """Maintain one view for one batch of silver change rows (per source, flat columns).

    Callable without a stream: tests hand it change rows directly. `stats["phases"]` holds
    seconds per phase (subscriptions, keys, recompute, merge) for progress lines and the
    benchmark. Subscriptions first, so a right change in the same batch already finds the
    left rows that moved to it. `gold_may_be_empty=False` skips the emptiness check (a
    metadata query) that picks the whole-view append over the MERGE: the stream passes it once
    its first batch has run, since the MERGE path is right on any table, only slower to fill one.
    """
    written, sub_seconds = _maintain_subscriptions(session, pipeline, plan, changes, app_id, version)
    stats = _refresh_gold(session, pipeline, plan, changes, app_id, version, gold_may_be_empty)
    stats["subscriptions_written"] = written
    stats["phases"]["subscriptions"] = sub_seconds
    return stats


def _maintain_subscriptions(
    session: SparkSession,
    pipeline: Pipeline,
    plan: ViewPlan,
    changes: Mapping[str, DataFrame],
    app_id: Callable[[str], str] | None,
    version: int | None,
) -> tuple[int, float]:
    """MERGE this batch's subscription moves into every relation the view follows: (rows, seconds)."""
    started = time.monotonic()
    written = 0
    for left, fk in plan.relations:
        if left.name not in changes:
            continue
        table = subscription_table(pipeline, left, fk.name)
        # computed once (MERGE then reads it twice without copying it first)
        updates = subscription_updates(changes[left.name], left, fk).localCheckpoint(eager=True)
        rows = updates.count()
        if rows == 0:
            continue
        if rows <= BROADCAST_ROW_LIMIT:
            updates = F.broadcast(updates)
        metrics = merge_subscriptions(session, table, updates, left, fk, app_id(table) if app_id else None, version)
        written += metrics["inserted"] + metrics["updated"] + metrics["deleted"]
    return written, time.monotonic() - started


def _refresh_gold(
    session: SparkSession,
    pipeline: Pipeline,
    plan: ViewPlan,
    changes: Mapping[str, DataFrame],
    app_id: Callable[[str], str] | None,
    version: int | None,
    gold_may_be_empty: bool,
) -> dict[str, Any]:
    """Affected base keys, their rows recomputed from silver current, MERGEd into gold."""
    phases: dict[str, float] = {}
    clock = time.monotonic()

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.monotonic()
        phases[phase] = phases.get(phase, 0.0) + now - clock
        clock = now

    stats: dict[str, Any] = {"affected_keys": 0, "inserted": 0, "updated": 0, "deleted": 0, "phases": phases}
    target = gold_table(pipeline, plan.view.name)
    if gold_may_be_empty and num_files(session, target) == 0:
        # Nothing to diff against (a first run, a rebuild): the whole view, appended, is gold.
        inserted = append_to_empty_gold(session, pipeline, plan, app_id(target) if app_id else None, version)
        stats.update(affected_keys=inserted, inserted=inserted)
        lap("build")
        return stats
    changed = {name: rows.select(*pipeline.source(name).primary_key) for name, rows in changes.items()}
    keys = affected_base_keys(
        plan,
        changed,
        lambda left, fk: session.read.table(subscription_table(pipeline, left, fk.name)),
        prune_limit=LITERAL_KEY_LIMIT,
    )
    if keys is None:
        return stats
    keys = keys.persist()
    try:
        count, first_values = _collect_small(keys)
        stats["affected_keys"] = count
        lap("keys")
        if count == 0:
            return stats
        base = plan.base.source
        base_current = session.read.table(silver_current_table(pipeline, base)).join(
            keys, list(base.primary_key), "left_semi"
        )
        if first_values is not None:
            base_current = base_current.where(F.col(base.primary_key[0]).isin(first_values))
        live = {s.name: live_rows(session, pipeline, s) for s in plan.sources}
        result = join_view(plan, live, keys, base_live=base_current.where(~F.col("_deleted")))
        # computed once: MERGE reads its source twice (find touched files, then write)
        source = gold_merge_source(plan, keys, result, base_current).localCheckpoint(eager=True)
        if count <= BROADCAST_ROW_LIMIT:  # one source row per affected key
            source = F.broadcast(source)
        lap("recompute")
        stats.update(
            merge_into_gold(session, target, plan, source, first_values, app_id(target) if app_id else None, version)
        )
        lap("merge")
    finally:
        keys.unpersist()
    return stats


def num_files(spark: SparkSession, table: str) -> int:
    """How many data files a Delta table holds (metadata only, no scan)."""
    return int(spark.sql(f"DESCRIBE DETAIL {table}").first()["numFiles"])


def append_to_empty_gold(
    session: SparkSession, pipeline: Pipeline, plan: ViewPlan, app_id: str | None = None, version: int | None = None
) -> int:
    """Write the whole view into its empty gold table as one append; returns the rows written.

    What a MERGE of every key would write, at the cost of a plain recompute: the first batch of
    a new view carries every source row, and walking them all through the subscriptions into a
    MERGE is the slow way to fill a table (the 1M-row bench's first batch: 54 s that way, 33-37 s
    now, most of it the subscription tables' own first MERGEs). Its change feed holds one insert
    per row, as the MERGE's would. Only the view's own stream writes its gold table, so nothing
    else can fill it between the emptiness check and this append; a replayed batch is skipped
    by its transaction tag.
    """
    from delta.tables import DeltaTable

    target = gold_table(pipeline, plan.view.name)
    table = DeltaTable.forName(session, target)
    before = table.history(1).first()["version"]
    with delta_txn(session, app_id, version):
        full_recompute(session, pipeline, plan.view.name).write.format("delta").mode("append").saveAsTable(target)
    last = table.history(1).first()
    if last["version"] == before:  # skipped: this batch's append had already committed
        return 0
    return int(last["operationMetrics"].get("numOutputRows", 0))


def _missing_silver(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> list[str]:
    return [
        silver_current_table(pipeline, s)
        for s in plan.sources
        if not spark.catalog.tableExists(silver_current_table(pipeline, s))
    ]


def prepare_view(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> None:
    """Create the view's subscription tables and gold table when missing."""
    for schema in (pipeline.tables.qualified("silver", "x"), pipeline.tables.qualified("gold", "x")):
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema.rsplit('.', 1)[0]}")
    for left, fk in plan.relations:
        ensure_subscription_table(spark, pipeline, left, fk)
    ensure_gold_table(spark, pipeline, plan)


def start_view(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    view: str,
    trigger: str = "available_now",
    run: ViewRun | None = None,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """Start the view's streaming query (tables must exist); returns the StreamingQuery."""
    plan = view_plan(pipeline, view)
    run = run or ViewRun(view)
    maintainer = _ViewMaintainer(pipeline, plan, run, progress)
    writer = (
        change_stream(spark, pipeline, plan)
        .writeStream.queryName(f"gold_{pipeline.name}_{view}")
        .option("checkpointLocation", str(checkpoint_dir(lake, pipeline.name, f"gold_{view}")))
        .foreachBatch(maintainer)
    )
    if trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    elif trigger == "processing_time":
        writer = writer.trigger(processingTime=pipeline.options.processing_time)
    else:
        raise ValueError(f"unknown trigger {trigger!r}; expected available_now or processing_time")
    query = writer.start()
    maintainer.query_id = str(query.id)
    maintainer.ready.set()
    return query


def run_gold(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    views: Sequence[str] | None = None,
    trigger: str = "available_now",
    progress: Callable[[str], None] | None = None,
) -> GoldReport:
    """Bring every (or the named) gold view up to date with silver.

    `available_now` drains what silver holds now, view by view, and returns. `processing_time`
    starts every view's query and blocks until one stops (an error is raised from it).
    """
    names = list(views) if views else list(pipeline.views)
    unknown = [v for v in names if v not in pipeline.views]
    if unknown:
        raise KeyError(f"pipeline {pipeline.name!r} has no view(s) {unknown}; declared: {', '.join(pipeline.views)}")
    report = GoldReport()
    queries = []
    for name in names:
        plan = view_plan(pipeline, name)
        run = report.views.setdefault(name, ViewRun(name))
        missing = _missing_silver(spark, pipeline, plan)
        if missing:
            run.skipped = f"silver table(s) not created yet: {', '.join(missing)}; run the silver stage first"
            if progress:
                progress(f"gold {name}: {run.skipped}")
            continue
        prepare_view(spark, pipeline, plan)
        query = start_view(spark, pipeline, lake, name, trigger=trigger, run=run, progress=progress)
        if trigger == "available_now":
            query.awaitTermination()
            if query.exception() is not None:  # pragma: no cover - awaitTermination raises first
                raise RuntimeError(f"gold {name} failed: {query.exception()}")
        else:
            queries.append(query)
    if queries:
        spark.streams.awaitAnyTermination()
        for query in queries:
            query.stop()
    return report


# --------------------------------------------------------------------------- full recompute (baseline, rebuild)


def full_recompute(spark: SparkSession, pipeline: Pipeline, view: str) -> DataFrame:
    """The whole view from silver current: the batch join an incremental run must equal."""
    plan = view_plan(pipeline, view)
    live = {s.name: live_rows(spark, pipeline, s) for s in plan.sources}
    return join_view(plan, live)


def subscription_sizes(spark: SparkSession, pipeline: Pipeline) -> dict[str, dict[str, int]]:
    """Rows, files and bytes of every subscription table that exists."""
    from lakehouse.config import iter_foreign_key_relations

    out: dict[str, dict[str, int]] = {}
    for left, fk in iter_foreign_key_relations(pipeline):
        name = subscription_table(pipeline, left, fk.name)
        if not spark.catalog.tableExists(name):
            continue
        detail = spark.sql(f"DESCRIBE DETAIL {name}").collect()[0]
        out[name] = {
            "rows": spark.table(name).count(),
            "files": int(detail["numFiles"]),
            "bytes": int(detail["sizeInBytes"]),
        }
    return out
