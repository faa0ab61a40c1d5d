"""Windowed views: two events sources paired within a time bound (seed 002, KIP-77's
KStream-KStream join; Flink's interval join).

A windowed view's one join pairs a base event `l` with a joined event `r` of the same key when
`l.t - before <= r.t <= l.t + after` (both inclusive; `lakehouse.sqltext.render_view` states it
as SQL for the oracle). Inner writes the pairs; left also writes `(l, null)` for a base event
without a pair, outer also `(null, r)` for a joined one.

Time and lateness, the rule of the whole module:
- **Stream time** T is the latest event time among the events the view has accepted; the
  **watermark** is `T - grace`. Both are kept per batch in the view's clock table, so a replayed
  batch reads the watermark its first attempt read.
- An event that first arrives with a time below the watermark (or with no time) is **late**: it
  is recorded (`silver._late_changes`, reason `window_closed`, and flagged in the view's event
  state) and joins nothing. An on-time event pairs with every accepted partner, at once.
- An unmatched event's row (left, outer) is written once its window has closed: its time plus its
  span (`after` for a base event, `before` for a joined one) is below the watermark. No accepted
  event can pair with it after that: a partner would need a time below the watermark, so it would
  be late. There is no null row written early and retracted when the match comes.
- An update or delete of an accepted event (the source was not append-only after all) is applied:
  its pairs are recomputed at its new key and time; a late event stays out.

State: per side an event table (`silver._window_<view>__<alias>`, clustered by join key: the
window store of KIP-77, holding what gold needs of each event, so a batch never reads silver),
the clock (`silver._window_<view>__clock`), and gold keyed by the pair (`_pair`). A batch
recomputes the rows of the join keys it touched (changed events' old and new keys, and the keys
of events whose window closed) and MERGEs only the rows that differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType, TimestampType

from lakehouse.comments import commented, gold_comments
from lakehouse.declaration import Pipeline, Source
from lakehouse.deltasql import DELETION_VECTORS_WHEN_LARGE, create_table, matched_delete, matched_update, merge, not_matched_insert, source_values
from lakehouse.frames import local_frame
from lakehouse.gold.clock import PhaseClock
from lakehouse.gold.feeds import Feed, feed_fields, silver_feed
from lakehouse.gold.frames import content_hash, latest_changes, union_all
from lakehouse.gold.plan import FRESHNESS_COLUMNS, LITERAL_KEY_LIMIT, ROW_HASH, SOURCE_TS, UPDATED_AT, AliasPlan, ViewPlan
from lakehouse.silver.layout import late_changes_schema
from lakehouse.spark import write_time
from lakehouse.sqltext import COMMIT_TIME, quote, string_literal, window_times
from lakehouse.tables import (
    CURRENT_KIND,
    SEQUENCE_TYPE,
    delta_txn,
    gold_table,
    late_changes_table,
    silver_current_schema,
    spark_type,
)

KEY = "_key"  # the join key as JSON; an event with a null key part gets a key of its own (it pairs with nothing)
AT = "_at"  # the event's time
LATE = "_late"  # arrived below the watermark: recorded, joins nothing
PAIR = "_pair"  # gold's key: both events' primary keys as JSON (a missing side left out)
WINDOW_KEY = "_window_key"  # gold's join key: which rows a changed key recomputes
STREAM_TIME = "stream_time"
LATE_REASON = "window_closed"  # `_late_changes.reason` of an event that arrived after its window closed


# --------------------------------------------------------------------------- the two sides (pure)


@dataclass(frozen=True)
class Side:
    """One events source of a windowed view: its alias, join key columns, time and span."""

    alias: AliasPlan
    name: str  # "base" | "joined"
    on: tuple[str, ...]  # join key columns, in the window's order
    time: str  # a timestamp column, or COMMIT_TIME
    span_us: int  # how far after this event's time a partner may lie (base: after; joined: before)
    emits_unmatched: bool  # an unmatched event of this side is a row (left/outer base, outer joined)

    @property
    def source(self) -> Source:
        return self.alias.source

    @property
    def columns(self) -> tuple[str, ...]:
        """The source columns the event state keeps: key, join key, time, selected columns."""
        wanted = set(self.alias.used) | set(self.on) | ({self.time} if self.time != COMMIT_TIME else set())
        return tuple(c for c in self.source.column_names if c in wanted)


def sides(plan: ViewPlan) -> tuple[Side, Side]:
    """(base side, joined side) of a windowed view."""
    join = plan.view.joins[0]
    window = join.window
    assert window is not None, f"view {plan.view.name!r} is not windowed"
    base_time, joined_time = window_times(plan.view)
    return (
        Side(plan.aliases[0], "base", tuple(b for _, b in window.on), base_time, _micros(window.after), join.type in ("left", "outer")),
        Side(plan.aliases[1], "joined", tuple(j for j, _ in window.on), joined_time, _micros(window.before), join.type == "outer"),
    )


def _micros(span: timedelta) -> int:
    return span // timedelta(microseconds=1)


def grace_us(plan: ViewPlan) -> int:
    window = plan.view.joins[0].window
    assert window is not None
    return _micros(window.grace)


# --------------------------------------------------------------------------- tables


def event_table(pipeline: Pipeline, plan: ViewPlan, side: Side) -> str:
    """silver._window_<view>__<alias>: the side's accepted and late events (KIP-77's window store)."""
    return pipeline.tables.qualified("silver", f"_window_{plan.view.name}__{side.alias.alias}")


def clock_table(pipeline: Pipeline, plan: ViewPlan) -> str:
    """silver._window_<view>__clock: the view's stream time after each batch."""
    return pipeline.tables.qualified("silver", f"_window_{plan.view.name}__clock")


def event_schema(side: Side) -> StructType:
    return StructType(
        [StructField(c, spark_type(side.source.column(c).type), True) for c in side.columns]
        + [StructField(KEY, StringType(), False), StructField(AT, TimestampType(), True), StructField(LATE, BooleanType(), False),
           StructField("_sequence", SEQUENCE_TYPE, False), StructField(SOURCE_TS, TimestampType(), True)]
    )


def clock_schema() -> StructType:
    return StructType([StructField("batch", LongType(), False), StructField(STREAM_TIME, TimestampType(), False)])


def gold_columns(plan: ViewPlan) -> tuple[str, ...]:
    return plan.output_columns + (PAIR, WINDOW_KEY, ROW_HASH) + FRESHNESS_COLUMNS


def gold_schema(plan: ViewPlan) -> StructType:
    fields = [StructField(c.name, spark_type(plan.alias(c.alias).source.column(c.column).type), True) for c in plan.view.columns]
    fields += [StructField(PAIR, StringType(), False), StructField(WINDOW_KEY, StringType(), False), StructField(ROW_HASH, StringType(), True)]
    return StructType(fields + [StructField(c, TimestampType(), True) for c in FRESHNESS_COLUMNS])


def prepare_windowed(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> None:
    """The event tables, the clock, gold and `_late_changes` when missing."""
    for side in sides(plan):
        create_table(spark, event_table(pipeline, plan, side), event_schema(side),
                     properties=DELETION_VECTORS_WHEN_LARGE, cluster_by=(KEY,))
    create_table(spark, clock_table(pipeline, plan), clock_schema())
    create_table(spark, late_changes_table(pipeline), late_changes_schema())
    comment, columns = gold_comments(pipeline, plan.view, {})
    columns = columns | {PAIR: "the pair's events: both primary keys as JSON (an unmatched row holds one)",
                         WINDOW_KEY: "the join key both events share, as JSON"}
    create_table(spark, gold_table(pipeline, plan.view.name), commented(gold_schema(plan), columns),
                 properties=DELETION_VECTORS_WHEN_LARGE | {"delta.enableChangeDataFeed": "true"},
                 cluster_by=(WINDOW_KEY,), comment=comment)


def prepared_tables(pipeline: Pipeline, plan: ViewPlan) -> list[str]:
    """What `prepare_windowed` creates."""
    return [*(event_table(pipeline, plan, s) for s in sides(plan)), clock_table(pipeline, plan),
            late_changes_table(pipeline), gold_table(pipeline, plan.view.name)]


def windowed_feeds(pipeline: Pipeline, plan: ViewPlan) -> list[Feed]:
    """Both events sources' silver current change feeds (an event inserted, updated, deleted)."""
    return [
        silver_feed(pipeline, side.source, CURRENT_KIND,
                    feed_fields(silver_current_schema(side.source), tuple(dict.fromkeys((*side.columns, "_sequence", "_deleted", SOURCE_TS)))))
        for side in sides(plan)
    ]


# --------------------------------------------------------------------------- pure DataFrame functions


def join_key(side: Side) -> Column:
    """The event's join key as JSON; with a null part, a key of its own (`~<side><pk>`): it pairs
    with nothing, and its unmatched row still has a group to be recomputed in."""
    parts = [F.col(c) for c in side.on]
    present = F.lit(True)
    for part in parts:
        present = present & part.isNotNull()
    shared = F.when(present, F.to_json(F.struct(*[p.alias(f"k{i}") for i, p in enumerate(parts)])))
    own = F.concat(F.lit(f"~{side.name}"), F.to_json(F.struct(*side.source.primary_key)))
    return F.coalesce(shared, own)


def judged_events(side: Side, changes: DataFrame, stored: DataFrame, mark: int | None) -> DataFrame:
    """The batch's newest change per event, as event-state rows, judged: `_late` when its first
    arrival is below the watermark or has no time (an event already stored keeps its judgement);
    `_gone` when deleted; `_old_key` its stored key; `_first` when new to the state."""
    pk = list(side.source.primary_key)
    latest = latest_changes(changes, pk)
    at = F.col(side.time)
    rows = latest.select(*side.columns, join_key(side).alias(KEY), at.alias(AT), "_sequence", SOURCE_TS, "_gone")
    old = stored.select(*pk, F.col(KEY).alias("_old_key"), F.col(LATE).alias("_was_late"))
    arriving_late = F.col(AT).isNull() | F.coalesce(F.unix_micros(F.col(AT)) < F.lit(mark).cast("long"), F.lit(False))
    return rows.join(old, pk, "left").select(
        *side.columns, KEY, AT, F.coalesce(F.col("_was_late"), arriving_late).alias(LATE), "_sequence", SOURCE_TS,
        "_gone", "_old_key", F.col("_was_late").isNull().alias("_first"),
    )


def event_state(side: Side, stored: DataFrame, judged: DataFrame) -> DataFrame:
    """The side's events after the batch: stored ones it did not change, and its changed ones."""
    pk = list(side.source.primary_key)
    kept = stored.join(judged.select(*pk), pk, "left_anti")
    return kept.unionByName(judged.where(~F.col("_gone")).select(*[f.name for f in event_schema(side).fields]))


def touched_keys(judged: DataFrame) -> DataFrame:
    """Join keys a batch's changes touch: each changed event's old and new key."""
    return (judged.where(~F.col("_gone")).select(F.col(KEY))
            .unionByName(judged.where(F.col("_old_key").isNotNull()).select(F.col("_old_key").alias(KEY))))


def window_closed(side: Side, at_us: Column, mark: int) -> Column:
    """Whether an event's window has closed below the watermark `mark`: its time (µs) plus its span."""
    return at_us + F.lit(side.span_us) < F.lit(mark)


def closing_keys(side: Side, state: DataFrame, before_us: int | None, after_us: int | None) -> DataFrame:
    """Join keys of this side's accepted events whose window closed in this batch (the watermark
    moved from `before_us` to `after_us`): their unmatched rows are due."""
    if not side.emits_unmatched or after_us is None or (before_us is not None and after_us <= before_us):
        return state.limit(0).select(KEY)
    at = F.unix_micros(F.col(AT))
    closes = ~F.col(LATE) & window_closed(side, at, after_us)
    if before_us is not None:
        closes = closes & ~window_closed(side, at, before_us)
    return state.where(closes).select(KEY)


def _prefixed(side: Side, events: DataFrame) -> DataFrame:
    a = side.alias
    return events.where(~F.col(LATE)).select(
        *[F.col(c).alias(a.col(c)) for c in side.columns],
        F.col(KEY).alias(a.col(KEY)), F.unix_micros(F.col(AT)).alias(a.col(AT)), F.col(SOURCE_TS).alias(a.col(SOURCE_TS)),
    )


def window_rows(plan: ViewPlan, base_events: DataFrame, joined_events: DataFrame, watermark: int | None) -> DataFrame:
    """The view's rows over the given accepted events (event-state rows of each side): the pairs
    within the window, and, by the join type, the unmatched events whose window closed below
    `watermark` (µs; None: none has). Gold columns, `_updated_at` now."""
    left, right = sides(plan)
    window = plan.view.joins[0].window
    assert window is not None
    lp, rp = _prefixed(left, base_events), _prefixed(right, joined_events)
    lt, rt = F.col(left.alias.col(AT)), F.col(right.alias.col(AT))
    cond = ((F.col(left.alias.col(KEY)) == F.col(right.alias.col(KEY)))
            & (rt >= lt - F.lit(_micros(window.before))) & (rt <= lt + F.lit(_micros(window.after))))
    pairs = lp.join(rp, cond, "inner")
    parts = [pairs]
    for side, frame in ((left, lp), (right, rp)):
        if side.emits_unmatched and watermark is not None:
            pk = [side.alias.col(c) for c in side.source.primary_key]
            unmatched = frame.join(pairs.select(*pk), pk, "left_anti")
            parts.append(unmatched.where(window_closed(side, F.col(side.alias.col(AT)), watermark)))
    rows = parts[0]
    for part in parts[1:]:
        rows = rows.unionByName(part, allowMissingColumns=True)
    values = [F.col(plan.alias(c.alias).col(c.column)) for c in plan.view.columns]
    outputs = [v.alias(c.name) for v, c in zip(values, plan.view.columns)]
    pair = F.to_json(F.struct(*[F.col(s.alias.col(k)).alias(f"{s.alias.alias}.{k}") for s in (left, right) for k in s.source.primary_key]))
    return rows.select(
        *outputs,
        pair.alias(PAIR),
        F.coalesce(F.col(left.alias.col(KEY)), F.col(right.alias.col(KEY))).alias(WINDOW_KEY),
        content_hash(values).alias(ROW_HASH),
        F.greatest(F.col(left.alias.col(SOURCE_TS)), F.col(right.alias.col(SOURCE_TS))).alias(SOURCE_TS),
        write_time().alias(UPDATED_AT),
    )


def gold_differences(plan: ViewPlan, rows: DataFrame, stored: DataFrame) -> DataFrame:
    """The MERGE source: `rows` new to gold or differing by `_row_hash`, and delete markers for
    the gold rows of the same join keys that are no longer rows (`_present` false)."""
    have = stored.select(F.col(PAIR).alias("_g_pair"), F.col(ROW_HASH).alias("_g_hash"), F.col(WINDOW_KEY).alias("_g_key"))
    joined = rows.join(have, rows[PAIR] == have["_g_pair"], "full_outer")
    present = F.col(PAIR).isNotNull()
    differs = ~present | F.col("_g_pair").isNull() | ~F.col(ROW_HASH).eqNullSafe(F.col("_g_hash"))
    return joined.where(differs).select(
        *[F.coalesce(F.col(PAIR), F.col("_g_pair")).alias(PAIR) if c == PAIR
          else F.coalesce(F.col(WINDOW_KEY), F.col("_g_key")).alias(WINDOW_KEY) if c == WINDOW_KEY else F.col(c)
          for c in gold_columns(plan)],
        present.alias("_present"),
    )


# --------------------------------------------------------------------------- a batch


def stream_time_before(session: SparkSession, pipeline: Pipeline, plan: ViewPlan, version: int | None) -> int | None:
    """The view's stream time (µs) before batch `version`: the latest recorded by an earlier
    batch (a replayed batch reads what its first attempt read); None before any event."""
    clock = session.read.table(clock_table(pipeline, plan))
    if version is not None:
        clock = clock.where(F.col("batch") < F.lit(version))
    value = clock.agg(F.max(F.unix_micros(F.col(STREAM_TIME)))).first()[0]
    return None if value is None else int(value)


def watermark_us(plan: ViewPlan, stream_time_us: int | None) -> int | None:
    """The watermark: stream time less the grace (None before any event)."""
    return None if stream_time_us is None else stream_time_us - grace_us(plan)


def _key_filter(frame: DataFrame, keys: DataFrame, literal: Sequence[str] | None, column: str = KEY) -> DataFrame:
    """Rows of `frame` whose `column` is one of `keys` (with a literal IN for file pruning when few)."""
    if literal is not None:
        frame = frame.where(F.col(column).isin(list(literal)))
    return frame.join(keys.withColumnRenamed(KEY, column), column, "left_semi")


def process_windowed(
    session: SparkSession,
    pipeline: Pipeline,
    plan: ViewPlan,
    changes: Mapping[str, DataFrame],
    app_id: Callable[[str], str] | None = None,
    version: int | None = None,
    gold_may_be_empty: bool = True,  # noqa: ARG001 - the kinds' shared signature; an empty gold needs no build path here
    change_rows: Mapping[str, int] | None = None,  # noqa: ARG001 - the kinds' shared signature (`runner.process_changes`)
) -> dict[str, Any]:
    """Maintain a windowed view for one batch of its events' silver change rows (per source).

    Judge the changed events against the watermark before the batch, advance stream time, find
    the touched join keys (changed events, windows that closed), recompute their rows from the
    event state and MERGE the differences into gold; then write the event state, the late
    events' records and the clock. Every write carries the batch's txn tag, and everything is
    computed before the first write, so a replay writes what the first attempt would have.
    """
    clock = PhaseClock()
    tag = (lambda table: app_id(table)) if app_id else (lambda table: None)
    stats: dict[str, Any] = {"affected_keys": 0, "inserted": 0, "updated": 0, "deleted": 0, "subscriptions_written": 0,
                             "late": 0, "phases": clock.phases, "spans": clock.spans}
    t_before = stream_time_before(session, pipeline, plan, version)
    mark_before = watermark_us(plan, t_before)
    judged: dict[str, DataFrame] = {}
    t_after = t_before
    for side in sides(plan):
        if side.source.name not in changes:
            continue
        stored = session.read.table(event_table(pipeline, plan, side))
        j = judged_events(side, changes[side.source.name], stored, mark_before).localCheckpoint(eager=True)
        row = j.agg(F.max(F.when(~F.col(LATE) & ~F.col("_gone"), F.unix_micros(F.col(AT)))),
                    F.sum(F.when(F.col("_first") & F.col(LATE) & ~F.col("_gone"), 1).otherwise(0))).first()
        judged[side.name] = j
        stats["late"] += int(row[1] or 0)
        if row[0] is not None:
            t_after = int(row[0]) if t_after is None else max(t_after, int(row[0]))
    clock.lap("judge")
    mark_after = watermark_us(plan, t_after)
    states = {side.name: (event_state(side, session.read.table(event_table(pipeline, plan, side)), judged[side.name])
                          if side.name in judged else session.read.table(event_table(pipeline, plan, side)))
              for side in sides(plan)}
    keys = union_all([touched_keys(j) for j in judged.values()]
                     + [closing_keys(side, states[side.name], mark_before, mark_after) for side in sides(plan)]).distinct()
    keys = keys.localCheckpoint(eager=True)
    few = [r[KEY] for r in keys.limit(LITERAL_KEY_LIMIT + 1).collect()]  # one job when few (the usual batch)
    literal = few if len(few) <= LITERAL_KEY_LIMIT else None
    count = len(few) if literal is not None else keys.count()
    stats["affected_keys"] = count
    clock.lap("keys")
    target = gold_table(pipeline, plan.view.name)
    if count:
        rows = window_rows(plan, _key_filter(states["base"], keys, literal), _key_filter(states["joined"], keys, literal), mark_after)
        stored_gold = _key_filter(session.read.table(target), keys, literal, WINDOW_KEY)
        source = gold_differences(plan, rows, stored_gold).localCheckpoint(eager=True)
        clock.lap("recompute")
        stats.update(path="incremental", reason=f"{count} join key(s) to re-pair")
        if not source.isEmpty():
            stats.update(_merge_gold(source, target, literal, tag(target), version))
        clock.lap("merge")
    for side in sides(plan):
        if side.name in judged:
            stats["subscriptions_written"] += _merge_events(side, judged[side.name], event_table(pipeline, plan, side),
                                                            tag(event_table(pipeline, plan, side)), version)
    if stats["late"]:
        _record_late(session, pipeline, [(side, judged[side.name]) for side in sides(plan) if side.name in judged],
                     mark_before, tag, version)
    if t_after is not None and t_after != t_before:
        _append_clock(session, pipeline, plan, version, t_after, tag)
    clock.lap("state")
    return stats


def _merge_gold(source: DataFrame, target: str, literal: Sequence[str] | None, app_id: str | None, version: int | None) -> dict[str, int]:
    """Apply `gold_differences`: delete markers, changed rows, new rows (keyed by the pair)."""
    on = f"t.{PAIR} = s.{PAIR}"
    if literal is not None:
        on += f" AND t.{WINDOW_KEY} IN ({', '.join(string_literal(k) for k in literal)})"
    columns = [c for c in source.columns if c != "_present"]
    values = source_values(columns)
    clauses = [
        matched_delete("NOT s._present"),
        matched_update(values, f"s._present AND NOT (t.{ROW_HASH} <=> s.{ROW_HASH})"),
        not_matched_insert(values, "s._present"),
    ]
    with delta_txn(source.sparkSession, app_id, version):
        return merge(source, target, on, clauses)


def _merge_events(side: Side, judged: DataFrame, table: str, app_id: str | None, version: int | None) -> int:
    """The changed events into the side's event state: a deleted one leaves it."""
    on = " AND ".join(f"t.{quote(c)} = s.{quote(c)}" for c in side.source.primary_key)
    values = source_values([f.name for f in event_schema(side).fields])
    clauses = [matched_delete("s._gone"), matched_update(values, "NOT s._gone"), not_matched_insert(values, "NOT s._gone")]
    with delta_txn(judged.sparkSession, app_id, version):
        metrics = merge(judged, table, on, clauses)
    return metrics["inserted"] + metrics["updated"] + metrics["deleted"]


def _record_late(session: SparkSession, pipeline: Pipeline, judged: Sequence[tuple[Side, DataFrame]], mark: int | None,
                 tag: Callable[[str], str | None], version: int | None) -> None:
    """Record each event that first arrived late in `silver._late_changes` (reason `window_closed`),
    both sides in one append (one txn tag per table and batch)."""
    behind = (F.lit(mark).cast("long") - F.unix_micros(F.col(AT))) / 1000 if mark is not None else F.lit(None)
    rows = union_all([
        events.where(F.col("_first") & F.col(LATE) & ~F.col("_gone")).select(
            F.lit(side.source.name).alias("source"),
            F.to_json(F.struct(*side.source.primary_key)).alias("key"),
            F.col("_sequence").alias("sequence"),
            F.lit("window").alias("op"),
            F.col(AT).alias("source_ts"),
            behind.cast("long").alias("late_by_ms"),
            F.lit(LATE_REASON).alias("reason"),
            write_time().alias("recorded_at"),
        )
        for side, events in judged
    ])
    table = late_changes_table(pipeline)
    with delta_txn(session, tag(table), version):
        rows.write.format("delta").mode("append").saveAsTable(table)


def _append_clock(session: SparkSession, pipeline: Pipeline, plan: ViewPlan, version: int | None, t_us: int,
                  tag: Callable[[str], str | None]) -> None:
    table = clock_table(pipeline, plan)
    at = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=t_us)
    row = local_frame(session, [(version if version is not None else 0, at)], clock_schema())
    with delta_txn(session, tag(table), version):
        row.write.format("delta").mode("append").saveAsTable(table)


# --------------------------------------------------------------------------- the whole view (verify, the baseline)


def whole_view(session: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> DataFrame:
    """Every row of the view from its event state and the watermark now: what the batches must
    have written (a recompute's baseline and a rebuild's rows), no silver read."""
    base, joined = (session.read.table(event_table(pipeline, plan, side)) for side in sides(plan))
    return window_rows(plan, base, joined, watermark_us(plan, stream_time_before(session, pipeline, plan, None)))


def accepted_events(session: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> dict[str, DataFrame]:
    """Per source, the primary keys of the events the view accepted (not late): what the oracle
    joins, from silver, for `verify`."""
    return {side.source.name: session.read.table(event_table(pipeline, plan, side)).where(~F.col(LATE)).select(*side.source.primary_key)
            for side in sides(plan)}


def watermark(session: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> datetime | None:
    """The view's watermark now (stream time less the grace); None before any event."""
    mark = watermark_us(plan, stream_time_before(session, pipeline, plan, None))
    return None if mark is None else datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=mark)
