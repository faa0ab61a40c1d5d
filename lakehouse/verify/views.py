"""`cdc-enrich verify`: does every gold table equal the plain SQL join of the latest state?

The state is the simulator's truth (what the source databases hold, written by the simulator)
when a directory is given, else silver current's live rows. Per view the report counts rows
missing from gold, extra in gold, and different (same key, other values), and gold rows whose
recorded lineage is stale: a `_<alias>_hash` that differs from the hash of the current silver
row it should be built from, or a `_<alias>_seq` newer than silver's (built from the future).
A recorded sequence *older* than silver's is fine: gold is not rewritten for a change to a
column the view does not read (see `lakehouse.gold`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline, Source
from lakehouse.frames import local_frame
from lakehouse.gold import full_recompute, view_plan, windowed
from lakehouse.gold.as_of import joined_sources
from lakehouse.gold.plan import ViewPlan
from lakehouse.sqltext import COMMIT_TIME, window_times
from lakehouse.verify.oracle import oracle_view, silver_history_state, silver_live_state
from lakehouse.tables import gold_table, row_struct, silver_current_table, silver_history_table


@dataclass
class FrameDiff:
    """How two keyed frames differ: counts plus a few sample keys of each kind."""

    expected_rows: int = 0
    actual_rows: int = 0
    missing: int = 0
    extra: int = 0
    different: int = 0
    duplicate_keys: int = 0
    samples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.different or self.duplicate_keys)


def diff_frames(
    expected: DataFrame, actual: DataFrame, key: Sequence[str], columns: Sequence[str], samples: int = 5
) -> FrameDiff:
    """Compare two frames keyed by `key` on `columns` (null-safe), in one aggregation (keys
    that `actual` holds more than once counted in the same pass).

    Samples (a second small job) are taken only when something differs.
    """
    e = expected.select(*[F.col(c).alias(f"e_{c}") for c in columns]).withColumn("_e", F.lit(True))
    a = actual.select(
        *[F.col(c).alias(f"a_{c}") for c in columns],
        F.lit(True).alias("_a"),
        F.count(F.lit(1)).over(Window.partitionBy(*[F.col(c) for c in key])).alias("_a_copies"),
    )
    cond = None
    for k in key:
        term = F.col(f"e_{k}").eqNullSafe(F.col(f"a_{k}"))
        cond = term if cond is None else cond & term
    joined = e.join(a, cond, "full_outer")
    same = F.lit(True)
    for c in columns:
        same = same & F.col(f"e_{c}").eqNullSafe(F.col(f"a_{c}"))
    kind = (
        F.when(F.col("_a").isNull(), "missing")
        .when(F.col("_e").isNull(), "extra")
        .when(~same, "different")
        .otherwise("same")
    )
    labelled = joined.withColumn("_kind", kind)
    kinds = ("missing", "extra", "different", "same")
    row = labelled.agg(
        *[F.count(F.when(F.col("_kind") == k, 1)).alias(k) for k in kinds],
        F.count_distinct(F.when(F.col("_a_copies") > 1, F.struct(*[F.col(f"a_{k}") for k in key]))).alias("_duplicate_keys"),
    ).first()
    counts, dup = {k: row[k] for k in kinds}, row["_duplicate_keys"]
    diff = FrameDiff(
        expected_rows=counts["missing"] + counts["different"] + counts["same"],
        actual_rows=counts["extra"] + counts["different"] + counts["same"],
        missing=counts["missing"],
        extra=counts["extra"],
        different=counts["different"],
        duplicate_keys=dup,
    )
    if not diff.ok and samples:
        for row in labelled.where("_kind <> 'same'").limit(samples).collect():
            side = "a" if row["_kind"] == "extra" else "e"
            keys = ", ".join(f"{k}={row[f'{side}_{k}']!r}" for k in key)
            if row["_kind"] == "different":
                cols = [c for c in columns if row[f"e_{c}"] != row[f"a_{c}"]]
                detail = "; ".join(f"{c}: expected {row[f'e_{c}']!r}, gold {row[f'a_{c}']!r}" for c in cols)
                diff.samples.append(f"different ({keys}): {detail}")
            else:
                diff.samples.append(f"{row['_kind']} ({keys})")
    return diff


@dataclass
class ViewCheck:
    view: str
    diff: FrameDiff = field(default_factory=FrameDiff)
    stale_hashes: int = 0
    error: str | None = None
    note: str | None = None  # what the view was checked against, when not what the report says

    @property
    def ok(self) -> bool:
        return self.error is None and self.diff.ok and self.stale_hashes == 0

    def render(self) -> str:
        if self.error:
            return f"  {self.view}: ERROR {self.error}"
        d = self.diff
        status = "ok" if self.ok else "DIFFERENT"
        lines = [
            f"  {self.view}: {status}: {d.actual_rows} gold row(s), {d.expected_rows} expected; "
            f"missing {d.missing}, extra {d.extra}, different {d.different}, "
            f"duplicate keys {d.duplicate_keys}, stale hashes {self.stale_hashes}"
        ]
        lines += [f"    ({self.note})"] if self.note else []
        lines += [f"    {s}" for s in d.samples]
        return "\n".join(lines)


#: An as-of view under `verify --truth`: the temporal join over the truth's version log (every
#: version the database committed, at its commit time; the snapshot's rows at the snapshot's).
AS_OF_AGAINST_TRUTH = "joined as of each event's time: checked against the temporal join over the truth's version log"
#: ... unless the truth cannot state it (no version log, or outages lost versions): the note says why.
AS_OF_AGAINST_SILVER = "joined as of each event's time: checked against the temporal join over silver history"


def _truth_log(spark: SparkSession, pipeline: Pipeline, truth_dir: Path, names: Sequence[str]) -> tuple[dict[str, DataFrame] | None, str]:
    """(every version of `names` from the truth's version log, "") when the log can state what a
    CDC consumer saw, else (None, why not: outages lost versions, or there is no log)."""
    from lakehouse.verify.truth import read_truth_history_frames, truth_outages

    outages = truth_outages(truth_dir)
    frames = None if outages else read_truth_history_frames(spark, pipeline, truth_dir, list(names))
    if frames is not None:
        return frames, ""
    return None, (f"{outages} connector outage(s) lost the records of versions committed meanwhile, which no CDC "
                  "consumer can know" if outages else "the truth files hold no version log; simulate again to write one")


def _live_at_commit(versions: DataFrame, source: Source) -> DataFrame:
    """A source's live rows from its versions, each with its commit time (`COMMIT_TIME`)."""
    live = versions.where(F.col("_valid_to").isNull() & ~F.col("_deleted"))
    return live.select(*source.column_names, F.col("_valid_from").alias(COMMIT_TIME))


def _as_of_state(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan, truth_dir: Path | None
                 ) -> tuple[dict[str, DataFrame], dict[str, DataFrame], str | None]:
    """(state, history, note) for an as-of view's oracle: from the truth's version log (the
    events' live rows with their commit time, every version of the joined sources) when it can
    state the join, else from silver, with a note saying why."""
    names = list(dict.fromkeys([plan.base.source.name, *(s.name for s in joined_sources(plan))]))
    note = None
    if truth_dir is not None:
        frames, why_not = _truth_log(spark, pipeline, truth_dir, names)
        if frames is not None:
            base = plan.base.source
            return {base.name: _live_at_commit(frames[base.name], base)}, frames, AS_OF_AGAINST_TRUTH
        note = f"{AS_OF_AGAINST_SILVER}, not the truth's version log: {why_not}"
    history = silver_history_state(spark, pipeline, [s.name for s in joined_sources(plan)])
    return silver_live_state(spark, pipeline, [s.name for s in plan.sources]), history, note


@dataclass
class VerifyReport:
    state: str  # where the expected state came from
    views: list[ViewCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.views)

    def render(self) -> str:
        head = f"verify against {self.state}: {'OK' if self.ok else 'DIFFERENCES FOUND'}"
        return "\n".join([head] + [v.render() for v in self.views])


def stale_lineage(spark: SparkSession, pipeline: Pipeline, view: str | ViewPlan) -> int:
    """Gold rows whose recorded lineage does not match silver current (see the module doc);
    `view`: its name, or its plan (not built again)."""
    plan = view if isinstance(view, ViewPlan) else view_plan(pipeline, view)
    current = full_recompute(spark, pipeline, plan)
    gold = spark.read.table(gold_table(pipeline, plan.view.name))
    g = gold.select(*[F.col(c).alias(f"g_{c}") for c in plan.key_columns + plan.lineage_columns])
    c = current.select(*[F.col(x).alias(f"c_{x}") for x in plan.key_columns + plan.lineage_columns])
    cond = None
    for k in plan.key_columns:
        term = F.col(f"g_{k}").eqNullSafe(F.col(f"c_{k}"))
        cond = term if cond is None else cond & term
    stale = F.lit(False)
    for alias in plan.aliases:
        stale = stale | ~F.col(f"g_{alias.gold_hash}").eqNullSafe(F.col(f"c_{alias.gold_hash}"))
        stale = stale | (F.col(f"g_{alias.gold_seq}") > F.col(f"c_{alias.gold_seq}"))
    return g.join(c, cond, "inner").where(stale).count()


def _truth_state(spark: SparkSession, pipeline: Pipeline, truth_dir: Path) -> Mapping[str, DataFrame]:
    from lakehouse.verify.truth import read_truth_frames

    return read_truth_frames(spark, pipeline, truth_dir)


def verify_pipeline(
    spark: SparkSession,
    pipeline: Pipeline,
    truth_dir: Path | None = None,
    views: Sequence[str] | None = None,
) -> VerifyReport:
    """Compare every (or the named) gold view with `oracle_view` over the truth or silver.

    With `truth_dir` (a simulator's truth files) the oracle reads the source truth; without it,
    silver current's live rows. `cdc-enrich verify` calls this.

    Example::

        report = verify_pipeline(spark, pipeline)                   # every view against silver
        report = verify_pipeline(spark, pipeline, truth_dir=Path(".lake/truth/shop"), views=["orders_enriched"])
        print(report.render())                                      # missing / extra / different rows per view
        assert report.ok
    """
    names = list(views) if views else list(pipeline.views)
    if truth_dir is not None:
        state = dict(_truth_state(spark, pipeline, Path(truth_dir)))
        report = VerifyReport(state=f"source truth in {truth_dir}")
    else:
        state = {}
        report = VerifyReport(state="silver current (live rows)")
    for name in names:
        check = ViewCheck(name)
        report.views.append(check)
        if name not in pipeline.views:
            check.error = f"no view {name!r} in pipeline {pipeline.name!r} (declared: {', '.join(pipeline.views)})"
            continue
        plan = view_plan(pipeline, name)
        if plan.view.windowed:
            _check_windowed(spark, pipeline, plan, check, state if truth_dir is not None else None,
                            Path(truth_dir) if truth_dir is not None else None)
            continue
        missing = [
            t
            for t in [gold_table(pipeline, name)] + [silver_current_table(pipeline, s) for s in plan.sources]
            + ([silver_history_table(pipeline, s) for s in joined_sources(plan)] if plan.view.temporal else [])
            if not spark.catalog.tableExists(t)
        ]
        if missing:
            check.error = f"table(s) not found: {', '.join(missing)}; run the pipeline first"
            continue
        history = None
        if plan.view.temporal:
            view_state, history, check.note = _as_of_state(spark, pipeline, plan, Path(truth_dir) if truth_dir is not None else None)
        elif truth_dir is None:
            view_state = silver_live_state(spark, pipeline, [s.name for s in plan.sources])
        else:
            view_state = {
                s.name: state[s.name] if s.name in state else local_frame(spark, [], row_struct(s))
                for s in plan.sources
            }  # a source with no rows in the truth is an empty table
        expected = oracle_view(spark, pipeline, name, view_state, history)
        actual = spark.read.table(gold_table(pipeline, name))
        check.diff = diff_frames(expected, actual, plan.key_columns, plan.output_columns)
        check.stale_hashes = stale_lineage(spark, pipeline, plan)
    return report


#: A windowed view's check, beside the report's state: which events it joins.
WINDOWED_ACCEPTED = "paired within the window over the events gold accepted (late ones are recorded in _late_changes and left out)"


def _check_windowed(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan, check: ViewCheck,
                    truth: Mapping[str, DataFrame] | None, truth_dir: Path | None) -> None:
    """A windowed view against the windowed SQL join (`oracle_view`) over the events it accepted,
    read from the truth when given (final rows; with the version log's commit times when a side is
    timed by its commit), else from silver, with the view's watermark closing unmatched windows."""
    tables = [gold_table(pipeline, plan.view.name), *[silver_current_table(pipeline, s) for s in plan.sources],
              *windowed.prepared_tables(pipeline, plan)]
    missing = [t for t in tables if not spark.catalog.tableExists(t)]
    if missing:
        check.error = f"table(s) not found: {', '.join(missing)}; run the pipeline first"
        return
    by_commit_time = COMMIT_TIME in window_times(plan.view)
    log, why_not = _truth_log(spark, pipeline, truth_dir, [s.name for s in plan.sources]) if truth_dir is not None and by_commit_time else (None, "")
    if truth is None or (by_commit_time and log is None):
        rows = silver_live_state(spark, pipeline, [s.name for s in plan.sources])
    elif log is not None:
        rows = {s.name: _live_at_commit(log[s.name], s) for s in plan.sources}
    else:
        rows = {s.name: (truth[s.name] if s.name in truth else local_frame(spark, [], row_struct(s)))
                .withColumn(COMMIT_TIME, F.lit(None).cast("timestamp")) for s in plan.sources}
    accepted = windowed.accepted_events(spark, pipeline, plan)
    state = {name: frame.join(accepted[name], list(pipeline.source(name).primary_key), "left_semi") for name, frame in rows.items()}
    expected = oracle_view(spark, pipeline, plan.view.name, state, watermark=windowed.watermark(spark, pipeline, plan))
    actual = spark.read.table(gold_table(pipeline, plan.view.name))
    check.diff = diff_frames(expected, actual, plan.key_columns, plan.output_columns)
    check.note = WINDOWED_ACCEPTED + ("; timed by the truth's version log (commit times)" if log is not None else
                                      f"; checked against silver, not the truth: {why_not}" if truth is not None and by_commit_time else "")
