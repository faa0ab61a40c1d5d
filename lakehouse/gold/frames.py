"""Gold's pure DataFrame functions: hashes, subscription updates, affected keys, the join, the MERGE source."""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakehouse.declaration import ForeignKey, Source
from lakehouse.frames import local_frame
from lakehouse.gold import expression_join
from lakehouse.gold.layout import key_ranges_of, range_predicate
from lakehouse.gold.plan import (
    JOIN_TYPES,
    ROW_HASH,
    SOURCE_TS,
    UPDATED_AT,
    AliasPlan,
    ViewPlan,
    subscription_columns,
)
from lakehouse.spark import write_time

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
#: A gold MERGE source's column saying whether gold holds the row's key: the rows gold holds are
#: MERGEd, the others appended (`delta.merge_into_gold`). A recompute's differences know it.
IN_GOLD = "_in_gold"


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
    return _subscription_rows(latest, F.col("_gone"), source, fk)


def current_subscriptions(current: DataFrame, source: Source, fk: ForeignKey) -> DataFrame:
    """Every left key's subscription as silver current holds it, in `subscription_updates`' shape:
    what a view that stopped writing its moves (its batches recomputed) MERGEs to catch the
    table up. A deleted key or a null fk removes its subscription; a newer one is never undone
    (the MERGE compares `_sequence`), so it is safe beside another view's writes."""
    return _subscription_rows(current, F.col("_deleted"), source, fk)


def _subscription_rows(rows: DataFrame, gone: Column, source: Source, fk: ForeignKey) -> DataFrame:
    """A subscription table's columns, `_left_hash`, `_sequence`, and `_remove` (gone, or a null fk)."""
    null_fk = F.lit(False)
    for c in fk.columns:
        null_fk = null_fk | F.col(c).isNull()
    return rows.select(
        *[F.col(c) for c in subscription_columns(source, fk)],
        F.col("_row_hash").alias("_left_hash"),
        F.col("_sequence"),
        (gone | null_fk).alias("_remove"),
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
    Delta skip the files of a subscription table clustered by fk (KIP-213's prefix scan); more
    become a few fk ranges (`layout.key_ranges_of`) over the keys checkpointed once, so the hops
    before this one are not looked up again for each use (at 10M fact rows the customers'
    subscriptions were read four times for one hop, 2026-12-06).
    """
    renamed = keys.select(*[F.col(k).alias(f"_k{i}") for i, k in enumerate(target.primary_key)]).distinct()
    if prune_limit is not None:
        rows = renamed.limit(prune_limit + 1).collect()
        if len(rows) <= prune_limit:
            session = keys.sparkSession
            if not rows:
                return local_frame(session, [], StructType([subscriptions.schema[c] for c in parent.primary_key]))
            renamed = local_frame(session, rows, renamed.schema)
            subscriptions = subscriptions.where(F.col(fk.columns[0]).isin(sorted({r[0] for r in rows if r[0] is not None})))
        else:  # many: the fk ranges they fall in (a table clustered by fk keeps them in few files),
            # computed once: the ranges' two jobs and the join would each walk the earlier hops again
            renamed = renamed.localCheckpoint(eager=True)
            subscriptions = subscriptions.where(range_predicate(fk.columns[0], key_ranges_of(renamed, "_k0")))
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
    live: Callable[[Source], DataFrame] | None = None,
) -> DataFrame | None:
    """The base keys whose join result may have changed, given changed keys per source.

    `changed[source]` holds that source's primary key columns; `subscriptions(left, fk)` reads a
    subscription table. Keys are gathered per alias from the leaves towards the base (a joined
    alias always comes after its parent), so each relation is looked up once per batch however
    many changed aliases lie beyond it: a changed customer and a changed order reach order items
    through one scan of `_sub_order_items__order`. A primary-key join maps keys 1:1; a changed
    global row maps to the parent rows whose key expression equals its key (`live(source)` reads
    a source's live rows; `lakehouse.gold.expression_join`). Returns base primary key columns
    (distinct), or None when nothing this view reads changed. `prune_limit`: see `walk_back`.
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
        keys = union_all(parts)
        if alias.join.is_primary_key_join:
            keys = keys.select(*[F.col(c).alias(p) for c, p in zip(alias.source.primary_key, parent.source.primary_key)])
        elif alias.join.kind == "expression":
            assert live is not None, "a key-expression join maps global keys through its parent's live rows"
            keys = expression_join.parent_keys_of(alias.join, parent.source, alias.source, keys, live(parent.source))
        else:
            fk = parent.source.foreign_key(alias.join.foreign_key)
            keys = walk_back(keys, parent.source, fk, alias.source, subscriptions(parent.source, fk), prune_limit)
        gathered.setdefault(parent.index, []).append(keys)
    if not gathered.get(0):
        return None
    return union_all(gathered[0]).distinct()


def union_all(parts: Sequence[DataFrame]) -> DataFrame:
    """The frames' rows together (by column name)."""
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def alias_frame(alias: AliasPlan, rows: DataFrame, *extra: Column) -> DataFrame:
    """One alias's rows inside a join: its used columns under internal names, their hash, the
    version's `_sequence` and `_source_ts` (and `extra` columns as they are)."""
    return rows.select(
        *[F.col(c).alias(alias.col(c)) for c in alias.used],
        content_hash([F.col(c) for c in alias.used]).alias(alias.hash_col),
        F.col("_sequence").alias(alias.seq_col),
        F.col("_source_ts").alias(alias.ts_col),
        *extra,
    )


def join_view(
    plan: ViewPlan,
    live: Mapping[str, DataFrame],
    base_keys: DataFrame | None = None,
    base_live: DataFrame | None = None,
    few_keys: bool = False,
) -> DataFrame:
    """The view's rows (gold columns) from live source rows, optionally for some base keys only.

    `live[source]` holds the source's columns, `_sequence`, `_source_ts` (and anything else, ignored);
    `base_keys` holds base primary key columns. The join is left-deep in declared order, as the
    SQL oracle writes it: inner/left foreign-key joins, inner/left/outer primary-key joins (an
    outer join's key is the coalesce of both sides, as in a KTable-KTable outer join).
    `base_live` replaces `live[base]` for the base alias only (already narrowed to the keys).
    With `base_keys`, every alias is read for those keys alone (`narrowed_sources`); `few_keys`
    (at most a broadcast's worth of them) broadcasts the narrowed sides instead of shuffling them.
    """
    base = plan.base
    sources = narrowed_sources(plan, live, base_keys, base_live, few_keys) if base_keys is not None else [
        live[alias.source.name] for alias in plan.aliases
    ]
    frames = [alias_frame(alias, df) for alias, df in zip(plan.aliases, sources)]
    joined = frames[0]
    key_exprs: list[Column] = [F.col(base.col(k)) for k in base.source.primary_key]
    for alias, frame in zip(plan.aliases[1:], frames[1:]):
        join = alias.join
        assert join is not None and alias.parent is not None
        parent = plan.aliases[alias.parent]
        if join.kind == "expression":  # a small global table: broadcast, matched on the parent's expression
            (pk,) = alias.source.primary_key
            cond = expression_join.condition(join, parent.col, F.col(alias.col(pk)))
            frame = F.broadcast(frame)
        else:
            if join.is_foreign_key_join:
                fk = parent.source.foreign_key(join.foreign_key)
                pairs = [(F.col(parent.col(f)), F.col(alias.col(p))) for f, p in zip(fk.columns, alias.source.primary_key)]
            else:
                pairs = [(k, F.col(alias.col(p))) for k, p in zip(key_exprs, alias.source.primary_key)]
            cond = pairs[0][0] == pairs[0][1]
            for left, right in pairs[1:]:
                cond = cond & (left == right)
            if few_keys and base_keys is not None and not join.is_outer:
                frame = F.broadcast(frame)  # at most one row per affected base row (`narrowed_sources`)
        joined = joined.join(frame, cond, JOIN_TYPES[join.type])
        if join.is_outer:
            key_exprs = [F.coalesce(k, F.col(alias.col(p))) for k, p in zip(key_exprs, alias.source.primary_key)]
    return view_rows(plan, joined, key_exprs)


def narrowed_sources(
    plan: ViewPlan,
    live: Mapping[str, DataFrame],
    base_keys: DataFrame,
    base_live: DataFrame | None = None,
    few_keys: bool = False,
) -> list[DataFrame]:
    """Each alias's live rows that the view's rows of `base_keys` can join, in alias order.

    The base alias and primary-key joins: the rows of those keys. A foreign-key join: the
    parent rows that the (narrowed) referring alias's fk values name, so a batch of a few
    thousand keys joins a few thousand parent rows instead of shuffling every parent (1M
    products at the 10M bench) for a join that keeps only the matching ones; an inner or left
    join gives the same rows either way, as only the named parents can match. A global table
    (an expression join) is read whole: it is small and broadcast. `few_keys` broadcasts the
    value lists of the semi joins."""
    base = plan.base
    out: list[DataFrame] = []
    for alias in plan.aliases:
        if alias.index == 0 and base_live is not None:
            out.append(base_live)  # narrowed by the caller
            continue
        df = live[alias.source.name]
        join = alias.join
        if alias.index == 0 or (join is not None and join.is_primary_key_join):
            wanted = base_keys.select(*[F.col(b).alias(a) for b, a in zip(base.source.primary_key, alias.source.primary_key)])
        elif join is not None and join.is_foreign_key_join and alias.parent is not None:
            parent = plan.aliases[alias.parent]
            fk = parent.source.foreign_key(join.foreign_key)
            wanted = out[alias.parent].select(
                *[F.col(f).alias(p) for f, p in zip(fk.columns, alias.source.primary_key)]
            ).distinct()
        else:
            out.append(df)
            continue
        out.append(df.join(F.broadcast(wanted) if few_keys else wanted, list(alias.source.primary_key), "left_semi"))
    return out


def view_rows(plan: ViewPlan, joined: DataFrame, key_exprs: Sequence[Column] | None = None) -> DataFrame:
    """Gold's columns from a joined frame of alias frames (`alias_frame`): the outputs, each
    alias's lineage, the row hash and the freshness columns. `key_exprs`: the base key's
    expressions (coalesced after an outer join; default the base alias's own columns)."""
    base = plan.base
    if key_exprs is None:
        key_exprs = [F.col(base.col(k)) for k in base.source.primary_key]
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
    times = [F.col(a.ts_col) for a in plan.aliases]
    return joined.select(*outputs, *lineage, *times).select(
        *plan.output_columns,
        *plan.lineage_columns,
        content_hash([F.col(c) for c in plan.output_columns]).alias(ROW_HASH),
        (F.greatest(*times) if len(times) > 1 else times[0]).alias(SOURCE_TS),  # greatest skips nulls
        write_time().alias(UPDATED_AT),  # not current_timestamp(): that recompiles each batch's plan (lakehouse.spark)
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


def differing_rows(plan: ViewPlan, merge_source: DataFrame, stored: DataFrame) -> DataFrame:
    """The rows of `gold_merge_source` that would change gold, with `IN_GOLD`: a new row for a
    key gold lacks, a delete marker for a key it holds, an update whose `_row_hash` or a lineage
    hash differs from the stored row's. `stored` is gold (only its key and hash columns are read;
    the caller narrows it to the source's keys). The guard (`_guard_seq`) is left to the MERGE.

    What the MERGE would have found anyway, found on gold's narrow columns instead: an affected
    key whose row did not change no longer makes the MERGE touch its file, and the MERGE needs
    no hash comparison of its own (`delta.merge_into_gold`).
    """
    hashes = [ROW_HASH] + [a.gold_hash for a in plan.aliases]
    keys = list(plan.key_columns)
    held = stored.select(*keys, *[F.col(h).alias(f"_gold_{h}") for h in hashes], F.lit(True).alias(IN_GOLD))
    joined = merge_source.join(held, keys, "left").withColumn(IN_GOLD, F.coalesce(F.col(IN_GOLD), F.lit(False)))
    present, in_gold = F.col("_present"), F.col(IN_GOLD)
    differs = F.lit(False)
    for h in hashes:
        differs = differs | ~F.col(h).eqNullSafe(F.col(f"_gold_{h}"))
    return joined.where((present & ~in_gold) | (in_gold & (~present | differs))).select(*merge_source.columns, IN_GOLD)


def recompute_differences(plan: ViewPlan, view_rows: DataFrame, gold: DataFrame) -> DataFrame:
    """The MERGE source of a recompute: what `gold_merge_source` would hold had every key been
    affected, less the rows gold already holds unchanged.

    `view_rows` is `join_view` over every live row, `gold` the gold table (only its key and
    hash columns are read). One full outer join on the key: a view row new to gold or differing
    in `_row_hash` or a lineage hash is kept; a gold key no longer in the view becomes a delete
    marker. The view is read from silver's current state, the newest there is, so a marker needs
    no sequence for the hash check (`_guard_seq` null). `IN_GOLD` says whether gold holds the key.
    """
    hashes = [ROW_HASH] + [a.gold_hash for a in plan.aliases]
    keys = list(plan.key_columns)
    stored = gold.select(*[F.col(k).alias(f"_gold_{k}") for k in keys], *[F.col(h).alias(f"_gold_{h}") for h in hashes])
    on = None
    for k in keys:
        term = view_rows[k] == stored[f"_gold_{k}"]
        on = term if on is None else on & term
    joined = view_rows.join(stored, on, "full_outer")
    present = F.col(ROW_HASH).isNotNull()
    in_gold = F.col(f"_gold_{ROW_HASH}").isNotNull()
    differs = ~present | ~in_gold
    for h in hashes:
        differs = differs | ~F.col(h).eqNullSafe(F.col(f"_gold_{h}"))
    return joined.where(differs).select(
        *[F.coalesce(F.col(k), F.col(f"_gold_{k}")).alias(k) if k in keys else F.col(k) for k in plan.gold_columns],
        present.alias("_present"),
        F.when(present, F.col(plan.base.gold_seq)).alias("_guard_seq"),
        in_gold.alias(IN_GOLD),
    )
