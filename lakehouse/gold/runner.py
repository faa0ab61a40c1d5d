"""Gold's streams: one query per view over silver's change feeds, each batch maintained incrementally."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import ForeignKey, Pipeline, Source
from lakehouse.deltasql import deletion_vectors_if_grown, num_files
from lakehouse.gold import as_of, windowed
from lakehouse.gold.applied import APPLIED, collected_moves
from lakehouse.gold.clock import PhaseClock
from lakehouse.gold.feeds import Feed, feed_fields, silver_feed
from lakehouse.gold.feeds import change_stream as feeds_change_stream
from lakehouse.gold.feeds import decode_changes
from lakehouse.gold.analyst import analyst_view, ensure_analyst_view
from lakehouse.gold.cost import (
    RefreshDecision,
    RefreshEstimate,
    choose_refresh,
    counting_keys_may_pick_recompute,
    forced_refresh,
    recompute_whatever_the_keys,
)
from lakehouse.gold.delta import (
    append_tagged,
    fill_subscriptions,
    forget_table_rows,
    ensure_gold_table,
    record_subscriptions,
    subscriptions_maintained,
    ensure_subscription_table,
    live_rows,
    merge_into_gold,
    merge_subscriptions,
    takes_differing_rows,
    recent_table_rows,
    table_rows,
)
from lakehouse.gold.frames import (
    affected_base_keys,
    current_subscriptions,
    differing_rows,
    gold_merge_source,
    join_view,
    recompute_differences,
    subscription_updates,
)
from lakehouse.gold.layout import MAX_POINTS, KeyRange, clustered, count_and_ranges, key_ranges, range_predicate
from lakehouse.gold.plan import (
    BROADCAST_ROW_LIMIT,
    KEY_COLLECT_LIMIT,
    LITERAL_KEY_LIMIT,
    ViewPlan,
    view_plan,
)
from lakehouse.gold.recompute import full_recompute
from lakehouse.errors import UnknownNameError
from lakehouse.frames import local_frame
from lakehouse.execution import checkpoint_observing, session_settings, small_work_settings
from lakehouse.checkpoints import query_id
from lakehouse.metrics import recording_metrics
from lakehouse.outcomes import Mailbox, Outcome, PostOffice
from lakehouse.paths import Location, checkpoint_dir
from lakehouse.streaming import AVAILABLE_NOW, Stream, StreamSpec, check_trigger, run_streams
from lakehouse.spark import application_id, tables_exist
from lakehouse.tables import (
    CURRENT_KIND,
    gold_table,
    silver_current_schema,
    silver_current_table,
    subscription_table,
)

# --------------------------------------------------------------------------- the streaming runner

log = logging.getLogger("lakehouse.gold")
SPANS_KEPT = 200  # a view's run keeps its latest phases' spans: a continuous run's would grow without end


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
    kept_beyond_retention: int = 0  # as-of views: events a correction older than history's retention left as they were
    late_events: int = 0  # windowed views: events that arrived after their window closed (recorded, not joined)
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase, summed
    spans: list[tuple[str, float, float]] = field(default_factory=list)  # the latest phases' wall-clock spans (`PhaseClock`)
    paths: dict[str, int] = field(default_factory=dict)  # batches per refresh path (build, incremental, recompute)
    last_reason: str | None = None  # why the last batch took its path
    skipped: str | None = None

    def line(self) -> str:
        if self.skipped:
            return f"{self.view}: skipped ({self.skipped})"
        return (
            f"{self.view}: {self.batches} batch(es), {self.changes_read} change(s) read, "
            f"{self.affected_keys} key(s) recomputed, +{self.inserted} ~{self.updated} -{self.deleted} "
            f"gold rows, {self.subscriptions_written} subscription or index row(s) written, {self.seconds:.1f}s"
            + (f"; paths: {', '.join(f'{p} {n}' for p, n in self.paths.items())}" if self.paths else "")
            + (f"; {self.kept_beyond_retention} event(s) kept as they were: the correction is older than history's retention"
               if self.kept_beyond_retention else "")
            + (f"; {self.late_events} late event(s) recorded in _late_changes, not joined" if self.late_events else "")
        )


@dataclass
class GoldReport:
    views: dict[str, ViewRun] = field(default_factory=dict)

    def render(self) -> str:
        return "\n".join(["gold:"] + [f"  {run.line()}" for run in self.views.values()])


def _change_columns(plan: ViewPlan, source: Source) -> tuple[str, ...]:
    """The columns of a source's change rows this view needs: keys, its fks, and metadata."""
    fk_cols: list[str] = []
    for left, fk in plan.relations:
        if left.name == source.name:
            fk_cols += list(fk.columns)
    return tuple(dict.fromkeys(source.primary_key + tuple(fk_cols))) + ("_row_hash", "_sequence", "_deleted")


def current_feeds(pipeline: Pipeline, plan: ViewPlan) -> list[Feed]:
    """A current-state view reads the change feed of every silver current table it joins."""
    return [
        silver_feed(pipeline, s, CURRENT_KIND, feed_fields(silver_current_schema(s), _change_columns(plan, s)))
        for s in plan.sources
    ]


def change_stream(
    spark: SparkSession, pipeline: Pipeline, plan: ViewPlan, max_files_per_trigger: int | None = None
) -> DataFrame:
    """The view's input stream: its kind's feeds (`feeds.change_stream`)."""
    return feeds_change_stream(spark, view_kind(plan).feeds(pipeline, plan), max_files_per_trigger)


class _ViewMaintainer:
    """foreachBatch body of one view's query: subscriptions, affected keys, recompute, MERGE (a
    few changes over small tables with the settings for a few rows, `lakehouse.execution`).
    Picklable (declarations, a path, a mailbox) for Spark Connect, where it runs in a worker."""

    def __init__(self, pipeline: Pipeline, plan: ViewPlan, checkpoint: Location, mailbox: Mailbox) -> None:
        self.pipeline = pipeline
        self.plan = plan
        self.checkpoint = checkpoint
        self.mailbox = mailbox
        self.query_id: str | None = None
        self.run_a_batch = False  # after one batch, gold is known filled (or the MERGE path fills it)

    @property
    def query_name(self) -> str:
        """The streaming query's name (metrics rows and the Spark UI carry it)."""
        return f"gold_{self.pipeline.name}_{self.plan.view.name}"

    def app_id(self, session: SparkSession, target: str) -> str:
        """The commit tags' app id: the query's own id, kept in its checkpoint."""
        if self.query_id is None:
            self.query_id = query_id(self.checkpoint, session)
        return f"cdc-enrich/{self.pipeline.name}/gold_{self.plan.view.name}/{self.query_id}/{target}"

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        started, started_wall = time.monotonic(), time.time()
        session = batch_df.sparkSession
        kind = view_kind(self.plan)
        feeds = kind.feeds(self.pipeline, self.plan)
        # kept, then split by source; its rows per source counted by the job that keeps it (no shuffle)
        batch, observed = checkpoint_observing(batch_df, [
            F.count(F.when(F.col("_source") == F.lit(name), 1)).alias(name) for name in dict.fromkeys(f.source for f in feeds)
        ])
        counts = {name: int(n) for name, n in observed.items() if n}
        if not counts:
            return
        read_seconds, read_span = time.monotonic() - started, ("read", started_wall, time.time())
        changes = sum(counts.values())
        read = [feed.table for feed in feeds] + [gold_table(self.pipeline, self.plan.view.name)]
        with session_settings(session, small_work_settings(session, changes, read)):
            stats = kind.process(
                session,
                self.pipeline,
                self.plan,
                decode_changes(feeds, batch, list(counts)),
                app_id=lambda target: self.app_id(session, target),
                version=batch_id,
                gold_may_be_empty=not self.run_a_batch,
                change_rows=counts,
            )
        self.run_a_batch = True
        seconds = time.monotonic() - started
        line = (
            f"gold {self.plan.view.name} batch {batch_id}: {changes} change(s), "
            f"{stats['affected_keys']} key(s), +{stats['inserted']} ~{stats['updated']} -{stats['deleted']} ({seconds:.1f}s)"
            + (f"; {stats['path']}: {stats['reason']}" if "path" in stats else "")
        )
        stats = {**stats, "changes": changes, "seconds": seconds, "phases": {"read": read_seconds, **stats["phases"]},
                 "spans": [read_span, *stats.get("spans", [])]}
        if log.isEnabledFor(logging.DEBUG):  # the phases' line is built only when it is written
            log.debug("%s: %s", line, ", ".join(f"{phase} {s:.2f}s" for phase, s in stats["phases"].items()))
        written = stats["inserted"] + stats["updated"] + stats["deleted"]
        self.mailbox.send(session, Outcome(self.query_name, batch_id, self.plan.view.name, stats, line, changes, written))


def _count_batch(run: ViewRun, outcome: Outcome, progress: Callable[[str], None] | None) -> None:
    """A batch's outcome into its view's run (and the progress line)."""
    stats = outcome.stats
    run.batches += 1
    run.changes_read += stats["changes"]
    run.affected_keys += stats["affected_keys"]
    run.inserted += stats["inserted"]
    run.updated += stats["updated"]
    run.deleted += stats["deleted"]
    run.subscriptions_written += stats["subscriptions_written"]
    run.kept_beyond_retention += stats.get("kept_beyond_retention", 0)
    run.late_events += stats.get("late", 0)
    if "path" in stats:
        run.paths[stats["path"]] = run.paths.get(stats["path"], 0) + 1
        run.last_reason = stats["reason"]
    run.seconds += stats["seconds"]
    for phase, seconds in stats["phases"].items():
        run.phases[phase] = run.phases.get(phase, 0.0) + seconds
    run.spans = [*run.spans, *(tuple(span) for span in stats.get("spans", []))][-SPANS_KEPT:]
    if progress:
        progress(outcome.line)


def process_changes(
    session: SparkSession,
    pipeline: Pipeline,
    plan: ViewPlan,
    changes: Mapping[str, DataFrame],
    app_id: Callable[[str], str] | None = None,
    version: int | None = None,
    gold_may_be_empty: bool = True,
    change_rows: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Maintain one view for one batch of silver change rows (per source, flat columns).

    Callable without a stream: tests hand it change rows directly. `stats["phases"]` holds
    seconds per phase (subscriptions, cost, keys, recompute, merge) for progress lines and the
    benchmark. The cost model's early decision first, then subscriptions, so a right change in
    the same batch already finds the left rows that moved to it; a batch recomputed whatever
    its keys (`options.gold_refresh: recompute`, or a view small enough for the incremental
    path's fixed cost to decide) walks no subscription and writes none: the next batch that
    walks them catches them up from silver current first (`_maintain_subscriptions`).
    `gold_may_be_empty=False` skips the emptiness check (a metadata query) that picks the
    whole-view append over the MERGE: the stream passes it once its first batch has run, since
    the MERGE path is right on any table, only slower to fill one. `change_rows` (rows per
    source in the batch, which the stream counts anyway) bounds each source's changed keys from
    above, so a small batch skips counting them for the cost model.
    """
    clock = PhaseClock()
    target = gold_table(pipeline, plan.view.name)
    building = gold_may_be_empty and num_files(session, target) == 0
    early, sizes = _recompute_whatever_the_keys(session, pipeline, plan, target)
    clock.lap("cost")
    written = 0
    if plan.relations:
        if early is None:
            written = _maintain_subscriptions(session, pipeline, plan, target, changes, app_id, version, gold_may_be_empty, change_rows)
        elif subscriptions_maintained(session, target):
            record_subscriptions(session, target, maintained=False)  # this batch's moves are not written
    clock.lap("subscriptions")
    stats = _refresh_gold(session, pipeline, plan, target, changes, app_id, version, building, change_rows, early, sizes, clock)
    stats["subscriptions_written"] = written
    return stats


def _recompute_whatever_the_keys(
    session: SparkSession, pipeline: Pipeline, plan: ViewPlan, target: str
) -> tuple[RefreshDecision | None, tuple[int, int] | None]:
    """(the batch's recompute when no key count could change it, else None; the tables' sizes
    when the cost model will weigh the batch): `options.gold_refresh` pinned to a path, or a view
    small enough for the incremental path's fixed cost to decide (`cost.recompute_whatever_the_keys`)."""
    forced = forced_refresh(pipeline.options.gold_refresh)
    if forced is not None:
        return (forced if forced.path == "recompute" else None), None
    sizes = _sizes(session, pipeline, plan, target)
    return recompute_whatever_the_keys(*sizes, pipeline.options.gold_incremental_overhead_rows), sizes


def _maintain_subscriptions(
    session: SparkSession,
    pipeline: Pipeline,
    plan: ViewPlan,
    target: str,
    changes: Mapping[str, DataFrame],
    app_id: Callable[[str], str] | None,
    version: int | None,
    tables_may_be_empty: bool = True,
    change_rows: Mapping[str, int] | None = None,
) -> int:
    """MERGE this batch's subscription moves into every relation the view follows; rows written.

    When the view's earlier batches did not write theirs (gold's `SUBSCRIPTIONS_PROPERTY` is not
    `maintained`), every relation is caught up instead (`catch_up_subscriptions`): silver
    current's subscriptions hold this batch's moves and every one before. An empty
    subscription table (`tables_may_be_empty`: not yet known filled) is appended to; a table
    this process already wrote every one of the moves to is left alone (`gold.applied`).
    `change_rows` (rows per source) bounds a source's moves, so a large batch is not collected."""
    caught_up = catch_up_subscriptions(session, pipeline, plan, app_id, version, target)
    if caught_up is not None:
        return caught_up
    written = 0
    for left, fk in plan.relations:
        if left.name not in changes:
            continue
        updates = subscription_updates(changes[left.name], left, fk)  # computed once by `_apply_moves`
        written += _apply_moves(session, subscription_table(pipeline, left, fk.name), updates, left, fk,
                                (change_rows or {}).get(left.name), app_id, version, tables_may_be_empty)
    return written


def catch_up_subscriptions(
    session: SparkSession,
    pipeline: Pipeline,
    plan: ViewPlan,
    app_id: Callable[[str], str] | None = None,
    version: int | None = None,
    target: str | None = None,
) -> int | None:
    """When gold's `SUBSCRIPTIONS_PROPERTY` says the view's earlier batches did not write their
    subscription moves, MERGE silver current's subscriptions (`frames.current_subscriptions`)
    into every relation the view follows and set it to `maintained`; rows written, or None when
    nothing was behind (or the view follows no relation). What a batch does before it walks
    them. `target`: the view's gold table, when the caller has its name."""
    target = target or gold_table(pipeline, plan.view.name)
    if not plan.relations or subscriptions_maintained(session, target):
        return None
    written = 0
    for left, fk in plan.relations:
        current = silver_current_table(pipeline, left)
        updates = current_subscriptions(session.read.table(current), left, fk)
        written += _apply_moves(session, subscription_table(pipeline, left, fk.name), updates, left, fk,
                                recent_table_rows(session, [current])[0], app_id, version, True)
    record_subscriptions(session, target, maintained=True)
    return written


def _apply_moves(
    session: SparkSession,
    table: str,
    updates: DataFrame,
    left: Source,
    fk: ForeignKey,
    bound: int | None,
    app_id: Callable[[str], str] | None,
    version: int | None,
    table_may_be_empty: bool,
) -> int:
    """One relation's `updates` into its subscription table, unless this process wrote them all
    already; rows written. `updates` is computed once: a small batch's moves are collected (one
    Spark job, `collected_moves`) and handed to the MERGE from the driver, a large one's are
    checkpointed (the MERGE reads its source twice). `bound` (about the updates' rows: a stale
    count costs a collect of the first few at worst) keeps a large batch from being collected."""
    moves = collected_moves(updates, bound)  # a small batch's count and key ranges too
    if moves is not None:
        key = updates.columns.index(left.primary_key[0])
        rows, ranges = len(moves), key_ranges((m[key] for m in moves), max_points=MAX_POINTS)
        updates = local_frame(session, moves, updates.schema)
    else:
        updates = updates.localCheckpoint(eager=True)
        rows, ranges = count_and_ranges(updates, left.primary_key[0], KEY_COLLECT_LIMIT)
    if rows == 0:
        return 0
    app = application_id(session)
    with APPLIED.writing(app, table):  # another view's write of this table in this process first
        if moves is not None and not APPLIED.missing(app, table, moves):
            return 0  # every move is in the table already: the MERGE would change nothing
        written = _write_subscriptions(session, table, updates, left, fk, rows, ranges, app_id, version, table_may_be_empty)
        if moves is not None:
            APPLIED.record(app, table, moves)
    return written


def _write_subscriptions(
    session: SparkSession,
    table: str,
    updates: DataFrame,
    left: Source,
    fk: ForeignKey,
    rows: int,
    ranges: Sequence[KeyRange] | None,
    app_id: Callable[[str], str] | None,
    version: int | None,
    table_may_be_empty: bool,
) -> int:
    """One batch's subscription moves into `table`: a first fill when it holds no file, else a MERGE; rows written."""
    txn = app_id(table) if app_id else None
    if table_may_be_empty and num_files(session, table) == 0:
        # a first fill, in fk ranges: "who subscribes to these parents" then reads few files
        return fill_subscriptions(session, table, updates, left, fk, rows, txn, version)
    if rows <= BROADCAST_ROW_LIMIT:
        updates = F.broadcast(updates)
    metrics = merge_subscriptions(session, table, updates, left, fk, txn, version, ranges)
    return metrics["inserted"] + metrics["updated"] + metrics["deleted"]


def _refresh_gold(
    session: SparkSession,
    pipeline: Pipeline,
    plan: ViewPlan,
    target: str,
    changes: Mapping[str, DataFrame],
    app_id: Callable[[str], str] | None,
    version: int | None,
    building: bool,
    change_rows: Mapping[str, int] | None,
    early: RefreshDecision | None,
    sizes: tuple[int, int] | None,
    clock: PhaseClock,
) -> dict[str, Any]:
    """Bring gold up to date with one batch: the whole view appended when `building` (gold holds
    no file), else by the affected keys, or by a recompute diffed against gold when the cost
    model (`lakehouse.gold.cost`) finds that cheaper (`early`: it found so before any key was
    counted; `sizes`: the tables' sizes it weighs, None when `options.gold_refresh` pins the path)."""
    stats: dict[str, Any] = {"affected_keys": 0, "inserted": 0, "updated": 0, "deleted": 0, "phases": clock.phases, "spans": clock.spans}
    txn = app_id(target) if app_id else None
    if building:
        # Nothing to diff against (a first run, a rebuild): the whole view, appended, is gold.
        inserted = append_to_empty_gold(session, pipeline, plan, txn, version)
        forget_table_rows(session, target)  # the model counted it empty
        stats.update(affected_keys=inserted, inserted=inserted, path="build", reason="gold held no file: the whole view appended")
        clock.lap("build")
        return stats
    if early is not None:
        return _by_recompute(session, pipeline, plan, target, txn, version, early, stats, clock)
    overhead = pipeline.options.gold_incremental_overhead_rows
    base = plan.base.source
    rows_bound = (change_rows or {}).get(base.name)  # the batch's base change rows: a bound from above on its keys
    if sizes is not None and base.name in changes and counting_keys_may_pick_recompute(rows_bound, *sizes, overhead):
        # the batch's own base keys: a lower bound on the affected keys
        changed_base = changes[base.name].select(*base.primary_key).distinct().count()
        lower = choose_refresh(RefreshEstimate(changed_base, *sizes, overhead), keys_are_a_lower_bound=True)
        clock.lap("cost")
        if lower.path == "recompute":
            return _by_recompute(session, pipeline, plan, target, txn, version, lower, stats, clock)
    changed = {name: rows.select(*pipeline.source(name).primary_key) for name, rows in changes.items()}
    keys = affected_base_keys(
        plan,
        changed,
        lambda left, fk: session.read.table(subscription_table(pipeline, left, fk.name)),
        prune_limit=LITERAL_KEY_LIMIT,
        live=lambda source: live_rows(session, pipeline, source),
    )
    if keys is None:
        return stats
    keys = keys.localCheckpoint(eager=False)  # kept by the first read: the count, the ranges, the recompute
    count, ranges = count_and_ranges(keys, base.primary_key[0], KEY_COLLECT_LIMIT)
    stats["affected_keys"] = count
    clock.lap("keys")
    if count == 0:
        return stats
    # no sizes: `options.gold_refresh` pins the path (`_recompute_whatever_the_keys`)
    decision = forced_refresh(pipeline.options.gold_refresh) if sizes is None else choose_refresh(RefreshEstimate(count, *sizes, overhead))
    if decision.path == "recompute":
        return _by_recompute(session, pipeline, plan, target, txn, version, decision, stats, clock)
    stats.update(path="incremental", reason=decision.reason)
    few = count <= BROADCAST_ROW_LIMIT  # one source row per affected key
    source = _keys_merge_source(session, pipeline, plan, target, keys, ranges, few)
    if few:
        source = F.broadcast(source)
    clock.lap("recompute")
    stats.update(merge_into_gold(session, target, plan, source, ranges, txn, version))
    clock.lap("merge")
    return stats


def _keys_merge_source(
    session: SparkSession,
    pipeline: Pipeline,
    plan: ViewPlan,
    target: str,
    keys: DataFrame,
    ranges: Sequence[KeyRange],
    few_keys: bool,
) -> DataFrame:
    """The incremental path's MERGE source: the view recomputed for the affected keys (their
    base rows read through the key ranges, so Delta skips the other files, once; the parents
    they name, `frames.narrowed_sources`), computed once; for
    a gold table large enough for deletion vectors, less the rows it holds unchanged
    (`frames.differing_rows`, on gold's key and hash columns), which `delta.merge_into_gold`
    then writes without comparing hashes. A small table's MERGE compares the hashes itself.
    `few_keys`: at most a broadcast's worth of keys."""
    base = plan.base.source
    base_current = session.read.table(silver_current_table(pipeline, base))
    keyed = F.broadcast(keys) if few_keys else keys
    # read once: the join, its parents' value lists and the delete markers all use these rows
    base_current = (
        base_current.where(range_predicate(base.primary_key[0], ranges))
        .join(keyed, list(base.primary_key), "left_semi")
        .localCheckpoint(eager=True)
    )
    live = {s.name: live_rows(session, pipeline, s) for s in plan.sources}
    result = join_view(plan, live, keys, base_live=base_current.where(~F.col("_deleted")), few_keys=few_keys)
    source = gold_merge_source(plan, keys, result, base_current)
    if takes_differing_rows(session, target):
        gold_keys = keys.select(*[F.col(p).alias(k) for p, k in zip(base.primary_key, plan.key_columns)])
        stored = session.read.table(target).where(range_predicate(plan.key_columns[0], ranges))
        source = differing_rows(plan, source, stored.join(F.broadcast(gold_keys), list(plan.key_columns), "left_semi"))
    # computed once: the writes read it more than once (find touched files, then write)
    return source.localCheckpoint(eager=True)


def _sizes(session: SparkSession, pipeline: Pipeline, plan: ViewPlan, target: str) -> tuple[int, int]:
    """(gold rows, base rows) for the cost model (`cost.RefreshEstimate`: the parent tables weigh
    the same on both paths, so they are not counted); counts this application read within the
    last minute are reused (`recent_table_rows`)."""
    gold_rows, base_rows = recent_table_rows(session, [target, silver_current_table(pipeline, plan.base.source)])
    return gold_rows, base_rows


def _by_recompute(
    session: SparkSession,
    pipeline: Pipeline,
    plan: ViewPlan,
    target: str,
    txn: str | None,
    version: int | None,
    decision: RefreshDecision,
    stats: dict[str, Any],
    clock: PhaseClock,
) -> dict[str, Any]:
    """The whole view from silver current, diffed against gold, only the differences MERGEd:
    the same rows and the same change feed as the incremental path would give."""
    stats.update(path="recompute", reason=decision.reason)
    view_rows = full_recompute(session, pipeline, plan)
    source = recompute_differences(plan, view_rows, session.read.table(target)).localCheckpoint(eager=True)
    count, ranges = count_and_ranges(source, plan.key_columns[0], KEY_COLLECT_LIMIT)
    stats["affected_keys"] = count
    clock.lap("recompute")
    if count == 0:
        return stats
    if count <= BROADCAST_ROW_LIMIT:
        source = F.broadcast(source)
    stats.update(merge_into_gold(session, target, plan, source, ranges, txn, version))
    clock.lap("merge")
    return stats


def append_to_empty_gold(
    session: SparkSession, pipeline: Pipeline, plan: ViewPlan, app_id: str | None = None, version: int | None = None
) -> int:
    """Write the whole view into its empty gold table as one append; returns the rows written.

    What a MERGE of every key would write, at the cost of a plain recompute: the first batch of
    a new view carries every source row, and walking them all through the subscriptions into a
    MERGE is the slow way to fill a table (the 1M-row bench's first batch: 54 s that way, 33-37 s
    now, most of it the subscription tables' own first MERGEs). The rows are written in key
    ranges, a file each (`layout.clustered`), so a later batch's MERGE touches only the files
    of the keys it changes. Its change feed holds one insert
    per row, as the MERGE's would. Only the view's own stream writes its gold table, so nothing
    else can fill it between the emptiness check and this append; a replayed batch is skipped
    by its transaction tag.
    """
    target = gold_table(pipeline, plan.view.name)
    (rows,) = table_rows(session, [silver_current_table(pipeline, plan.base.source)])  # about one gold row each
    written = append_tagged(clustered(full_recompute(session, pipeline, plan), plan.key_columns, rows), target, app_id, version)
    deletion_vectors_if_grown(session, target, written)  # it was empty: known small
    return written


def _missing_silver(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> list[str]:
    """The silver tables the view's feeds read that do not exist yet (an as-of view's: history too)."""
    return [feed.table for feed in view_kind(plan).feeds(pipeline, plan) if not spark.catalog.tableExists(feed.table)]


#: Views this process has prepared, per Spark application and declaration: a later run of the
#: same view only looks its tables up (one `SHOW TABLES` per schema) instead of preparing it again
#: (measured 0.9-2.2 s per drain of a two-view pipeline: schema statements, table checks, the
#: analyst view's DDL).
_PREPARED: set[tuple[str, str, str]] = set()


def prepare_view(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> None:
    """Create the view's tables when missing (its kind's: subscription or index tables, gold),
    and its analyst view; once per process and declaration while those tables all exist."""
    key = (application_id(spark), repr(pipeline.tables), repr(plan))
    tables = [*view_kind(plan).tables(pipeline, plan), analyst_view(pipeline, plan.view.name)]
    if key in _PREPARED and tables_exist(spark, tables):
        return
    for schema in (pipeline.tables.qualified("silver", "x"), pipeline.tables.qualified("gold", "x")):
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema.rsplit('.', 1)[0]}")
    view_kind(plan).prepare(spark, pipeline, plan)
    ensure_analyst_view(spark, pipeline, plan)
    if tables_exist(spark, tables):  # an as-of view's joined history may not exist yet: prepare again then
        _PREPARED.add(key)


def _prepare_current_state(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> None:
    for left, fk in plan.relations:
        ensure_subscription_table(spark, pipeline, left, fk)
    ensure_gold_table(spark, pipeline, plan)


def _current_state_prepared_tables(pipeline: Pipeline, plan: ViewPlan) -> list[str]:
    return [gold_table(pipeline, plan.view.name)] + [subscription_table(pipeline, left, fk.name) for left, fk in plan.relations]


@dataclass(frozen=True)
class ViewKind:
    """How a kind of view is maintained: the change feeds it reads, its batch, its tables."""

    feeds: Callable[[Pipeline, ViewPlan], list[Feed]]
    process: Callable[..., dict[str, Any]]  # `process_changes`' signature
    prepare: Callable[[SparkSession, Pipeline, ViewPlan], None]
    tables: Callable[[Pipeline, ViewPlan], list[str]]  # what `prepare` creates or alters


CURRENT_STATE = ViewKind(current_feeds, process_changes, _prepare_current_state, _current_state_prepared_tables)
AS_OF = ViewKind(as_of.as_of_feeds, as_of.process_as_of, as_of.prepare_as_of, as_of.prepared_tables)
WINDOWED = ViewKind(windowed.windowed_feeds, windowed.process_windowed, windowed.prepare_windowed, windowed.prepared_tables)


def view_kind(plan: ViewPlan) -> ViewKind:
    """The one place a view's kind picks its machinery: a windowed view (two events sources
    within a time bound, `lakehouse.gold.windowed`), an as-of view (its base is an events
    source, `lakehouse.gold.as_of`) or a current-state view (foreign-key joins, this module)."""
    if plan.view.windowed:
        return WINDOWED
    return AS_OF if plan.view.temporal else CURRENT_STATE


def view_stream(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    view: str,
    run: ViewRun,
    progress: Callable[[str], None] | None = None,
    *,
    prepare: bool = False,
    max_files_per_trigger: int | None = None,
    plan: ViewPlan | None = None,
) -> StreamSpec:
    """The view's query for the shared runner (silver's change feeds -> `_ViewMaintainer`);
    `prepare` creates its tables just before it starts; `plan`: the view's, when the caller has it."""
    plan = plan or view_plan(pipeline, view)
    post = PostOffice(spark, pipeline, lambda outcome: _count_batch(run, outcome, progress))
    checkpoint = checkpoint_dir(lake, pipeline.name, f"gold_{view}")
    maintainer = _ViewMaintainer(pipeline, plan, checkpoint, post.mailbox)
    return StreamSpec(
        name=f"gold {view}",
        query_name=maintainer.query_name,
        checkpoint=checkpoint,
        build=lambda: change_stream(spark, pipeline, plan, max_files_per_trigger).writeStream.foreachBatch(maintainer),
        prepare=(lambda: prepare_view(spark, pipeline, plan)) if prepare else (lambda: None),
        processing_time=pipeline.options.interval("gold"),
        collect=post.collect,
        reads=tuple(feed.table for feed in view_kind(plan).feeds(pipeline, plan)),
        writes=(),  # no query reads gold
    )


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
    spec = view_stream(spark, pipeline, lake, view, run or ViewRun(view), progress)
    stream = Stream(spec, trigger, pipeline.options.processing_time)
    stream.start()
    return stream.query


def run_gold(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    views: Sequence[str] | None = None,
    trigger: str = "available_now",
    progress: Callable[[str], None] | None = None,
    *,
    timeout_s: float | None = None,
    max_files_per_trigger: int | None = None,
) -> GoldReport:
    """Bring every (or the named) gold view up to date with silver.

    `available_now` drains what silver holds now, view by view (views may share subscription
    tables), and returns. `processing_time` runs every view's query together until `timeout_s`
    (None: until stopped); a failing one stops the others and raises.

    Example::

        lake, pipeline = Path(".lake"), load_pipeline("schemas/shop/pipeline.yml")
        spark = get_spark(lake)                                     # lakehouse.spark
        ensure_schemas(spark, pipeline)
        report = run_gold(spark, pipeline, lake)                    # every view, drained
        run_gold(spark, pipeline, lake, views=["orders_enriched"], trigger="processing_time", timeout_s=600)
        print(report.render())                                      # per view: batches, path taken, rows
    """
    check_trigger(trigger)
    if trigger == AVAILABLE_NOW:
        # one view after another: views may share subscription tables
        report = GoldReport()
        with recording_metrics(spark, pipeline) as metrics:  # one recording for the views' runs
            for name in _view_names(pipeline, views):
                specs, one = gold_streams(spark, pipeline, lake, [name], progress, max_files_per_trigger=max_files_per_trigger)
                report.views.update(one.views)
                if specs:
                    run_streams(specs, trigger, pipeline.options.processing_time, say=progress, metrics=metrics)
        return report
    specs, report = gold_streams(spark, pipeline, lake, views, progress, max_files_per_trigger=max_files_per_trigger)
    if specs:
        with recording_metrics(spark, pipeline) as metrics:
            run_streams(specs, trigger, pipeline.options.processing_time, timeout_s=timeout_s, say=progress, metrics=metrics)
    return report


def _view_names(pipeline: Pipeline, views: Sequence[str] | None) -> list[str]:
    """The named views (all when None); an unknown name is an UnknownNameError."""
    names = list(views) if views else list(pipeline.views)
    unknown = [v for v in names if v not in pipeline.views]
    if unknown:
        raise UnknownNameError(f"pipeline {pipeline.name!r} has no view(s) {unknown}; declared: {', '.join(pipeline.views)}")
    return names


def gold_streams(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    views: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
    *,
    wait_for_silver: bool = False,
    max_files_per_trigger: int | None = None,
) -> tuple[list[StreamSpec], GoldReport]:
    """Gold's queries (one per view, at gold's interval) and the report their batches fill.

    A view whose silver tables do not exist yet is skipped and says so, unless
    `wait_for_silver` (a continuous run, where silver's queries create them before gold's start).
    """
    report = GoldReport()
    specs = []
    for name in _view_names(pipeline, views):
        run = report.views.setdefault(name, ViewRun(name))
        plan = view_plan(pipeline, name)
        if not wait_for_silver and _skipped(spark, pipeline, plan, run, progress):
            continue
        specs.append(view_stream(spark, pipeline, lake, name, run, progress, prepare=True, max_files_per_trigger=max_files_per_trigger,
                                 plan=plan))
    return specs, report


def _skipped(
    spark: SparkSession, pipeline: Pipeline, plan: ViewPlan, run: ViewRun, progress: Callable[[str], None] | None
) -> bool:
    """Whether the view waits for silver (a source table not created yet); says so in its run."""
    name = plan.view.name
    missing = _missing_silver(spark, pipeline, plan)
    if not missing:
        return False
    run.skipped = f"silver table(s) not created yet: {', '.join(missing)}; run the silver stage first"
    if progress:
        progress(f"gold {name}: {run.skipped}")
    return True
