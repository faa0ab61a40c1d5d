"""Benchmark: gold maintenance (the product's path, picked per batch) against a full recompute
of the same view on the same data, side by side, on production-shaped workloads.

Not a test. `bench_gold` builds silver current tables for one view's sources (the fact table
with `fact_rows` rows, each parent ten times smaller per hop; one "hot" customer owns 1 % of
the orders), builds gold, then for each workload and fraction changes silver and times, on the
same data:

- gold: `run_gold` for the view, as a user runs it (`options.gold_refresh: auto`: the cost
  model picks the incremental path or a recompute diffed against gold; the report says which);
  with `refresh` naming more modes, each cell runs once per mode (each on a fresh batch of the
  same shape), so both paths are timed side by side: what calibrating the cost model needs
  (`options.gold_incremental_overhead_rows`);
- full: the whole join from silver current, written over a copy table (what teams run today).

Workloads (fraction = changed fact rows / fact rows):
- uniform: uniformly random fact rows updated (one in ten moves its foreign key), and the same
  fraction of each parent;
- oltp: 20 % new fact rows (and their new orders) at the top of the key space, 70 % updates of
  which 90 % fall among the newest 5 % of keys, and 2 % + 1 % of the fraction as renamed
  customers and repriced products, which fan out through the subscriptions;
- hot_parent: the hot customer renamed (1 % of the fact rows fan out from one change).

With `repeats` > 1 every cell runs that many batches (each a fresh batch of the same shape, the
modes still rotated within each round), and `cells` holds each cell's medians: a stream's
batches after its first are what users pay, and this machine's noise is 10-20 % a run.

Reported per run: times and their ratio, the path taken and why, seconds per phase, Spark jobs,
and each table's Delta operation metrics for the commits of the run (files scanned and
touched, rows rewritten); the subscription tables' sizes; and whether gold equals the full
recompute at the end. A run that may walk the subscriptions after one that left them behind
(a batch recomputed whatever its keys writes none) has them caught up first, timed apart
(`subscriptions_catch_up_s`): the modes rotate here from run to run, a stream switches once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import math
import shutil
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import REFRESH_MODES, Pipeline, Source
from lakehouse.gold import ViewPlan, ViewRun, catch_up_subscriptions, full_recompute, num_files, run_gold, subscription_sizes, view_plan
from testkit.reference_silver import append_silver_rows, apply_silver_changes, changes_schema, create_silver_current
from lakehouse.paths import checkpoint_dir
from lakehouse.tables import gold_table, silver_current_schema, silver_current_table, subscription_table
from lakehouse.verify.views import diff_frames
from testkit.bench import check_workloads, fresh_schemas, markdown_table
from testkit.bench.phases import phase_resources, ui_rest


def _bench_pipeline(pipeline: Pipeline) -> Pipeline:
    tables = dataclasses.replace(
        pipeline.tables, silver_schema=f"{pipeline.name}_bench_silver", gold_schema=f"{pipeline.name}_bench_gold"
    )
    return dataclasses.replace(pipeline, name=f"{pipeline.name}_bench", tables=tables)


def _sizes(pipeline: Pipeline, view: str, fact_rows: int) -> dict[str, int]:
    """Rows per source: the fact table, then ten times fewer per hop (at least 100)."""
    plan = view_plan(pipeline, view)
    depth = {0: 0}
    rows: dict[str, int] = {}
    for alias in plan.aliases:
        if alias.parent is not None:
            depth[alias.index] = depth[alias.parent] + (0 if alias.join and alias.join.is_primary_key_join else 1)
        n = max(100, fact_rows // (10 ** depth[alias.index]))
        rows[alias.source.name] = max(rows.get(alias.source.name, 0), n)
    return rows


def _value(column: str, type_name: str, idx: Column, salt: int) -> Column:
    mixed = F.pmod(F.xxhash64(idx, F.lit(salt), F.lit(column)), F.lit(1000))
    if type_name == "string":
        return F.concat(F.lit(f"{column}-"), mixed.cast("string"))
    if type_name in ("bigint", "int", "smallint"):
        return mixed.cast(type_name)
    if type_name.startswith("decimal"):
        return (mixed / F.lit(10)).cast(type_name)
    if type_name in ("double", "float"):
        return (mixed / F.lit(7)).cast(type_name)
    if type_name == "boolean":
        return mixed % 2 == 0
    if type_name == "date":
        return F.date_add(F.lit("2025-01-01").cast("date"), mixed.cast("int"))
    return F.timestamp_seconds(F.lit(1_735_689_600) + mixed * 3600)


HOT_SHARE = 100  # one order in this many belongs to the hot customer (key 0)
WORKLOADS = ("oltp", "hot_parent", "uniform")  # in this order: each leaves gold as its changes laid it out
FRACTIONS = (0.0001, 0.001, 0.01, 0.1, 0.25)


def _rows(spark: SparkSession, pipeline: Pipeline, source: Source, sizes: dict[str, int], salt: int,
          start: int = 0, count: int | None = None) -> DataFrame:
    """Rows `start`..`start+count` (default: all `sizes[source]`) with unique keys and foreign keys
    into the referenced sources' ranges; a fact table's key starts with its parent's key."""
    n = sizes[source.name]
    idx = F.col("id")
    fk_target = {c: fk.references for fk in source.foreign_keys for c in fk.columns}
    fanout = 1
    if len(source.primary_key) > 1 and source.primary_key[0] in fk_target:
        fanout = max(1, math.ceil(n / sizes.get(fk_target[source.primary_key[0]], n)))
    cols: list[Column] = []
    for col in source.columns:
        if len(source.primary_key) > 1 and col.name == source.primary_key[0]:
            expr = F.floor(idx / fanout)
        elif len(source.primary_key) > 1 and col.name in source.primary_key:
            expr = idx % fanout
        elif col.name in source.primary_key:
            expr = idx
        elif col.name in fk_target and fk_target[col.name] in sizes:
            expr = F.pmod(F.xxhash64(idx, F.lit(salt), F.lit(col.name)), F.lit(sizes[fk_target[col.name]]))
            if fk_target[col.name] == "customers":  # the hot customer
                expr = F.when(idx % HOT_SHARE == 7, F.lit(0)).otherwise(expr)
        else:
            expr = _value(col.name, col.type, idx, salt)
        cols.append(expr.cast(col.type).alias(col.name))
    return spark.range(start, start + (n if count is None else count)).select(*cols)


def _silver_rows(df: DataFrame, source: Source, sequence: int) -> DataFrame:
    return df.select(
        *source.column_names,
        F.sha2(F.to_json(F.array(*[F.col(c).cast("string") for c in source.column_names])), 256).alias("_row_hash"),
        F.lit(sequence).cast("decimal(38,0)").alias("_sequence"),
        F.current_timestamp().alias("_source_ts"),
        F.lit("c").alias("_op"),
        F.lit(False).alias("_deleted"),
        F.current_timestamp().alias("_updated_at"),
    ).select(*[f.name for f in silver_current_schema(source).fields])


def _as_changes(df: DataFrame, source: Source, sequence: int) -> DataFrame:
    return df.select(*source.column_names, F.lit(sequence).cast("decimal(38,0)").alias("_sequence"),
                     F.lit(False).alias("_delete")).select(*[f.name for f in changes_schema(source).fields])


def _updated(picked: DataFrame, source: Source, sequence: int, sizes: dict[str, int], fk_moves: float = 0.1) -> DataFrame:
    """`picked` rows with their first plain value column changed and, for `fk_moves` of them, a
    foreign key moved (so subscriptions move too)."""
    value_cols = [c for c in source.value_columns if all(c not in fk.columns for fk in source.foreign_keys)]
    out = []
    for col in source.columns:
        expr = F.col(col.name)
        if value_cols and col.name == value_cols[0]:
            expr = _value(col.name, col.type, F.col(source.primary_key[0]).cast("long"), sequence)
        fk = next((f for f in source.foreign_keys if col.name in f.columns and col.name not in source.primary_key), None)
        if fk is not None and fk.references in sizes and fk_moves > 0:
            moved = F.pmod(F.xxhash64(F.col(source.primary_key[0]), F.lit(sequence)), F.lit(sizes[fk.references]))
            expr = F.when(F.rand(sequence + 1) < fk_moves, moved).otherwise(expr)
        out.append(expr.cast(col.type).alias(col.name))
    return _as_changes(picked.select(*out), source, sequence)


def _live(spark: SparkSession, pipeline: Pipeline, source: Source) -> DataFrame:
    return spark.read.table(silver_current_table(pipeline, source)).where(~F.col("_deleted"))


def _uniform(spark, pipeline, plan, fraction, sequence, sizes) -> dict[str, DataFrame]:
    """`fraction` of every source's live rows, uniformly random."""
    return {
        s.name: _updated(_live(spark, pipeline, s).where(F.rand(sequence) < F.lit(fraction)), s, sequence, sizes)
        for s in plan.sources
    }


def _oltp(spark, pipeline, plan, fraction, sequence, sizes) -> dict[str, DataFrame]:
    """New fact rows at the top of the key space, updates mostly among the newest 5 % of keys,
    and a few parent changes that fan out (see the module docstring)."""
    fact = plan.base.source
    total = sizes[fact.name]
    changes = max(1, round(total * fraction))
    key0 = F.col(fact.primary_key[0])
    top = spark.read.table(silver_current_table(pipeline, fact)).agg(F.max(key0)).first()[0]
    recent_from = top * 0.95
    updates = 0.7 * changes
    recent_p = min(1.0, 0.9 * updates / (0.05 * total))
    old_p = min(1.0, 0.1 * updates / (0.95 * total))
    picked = _live(spark, pipeline, fact).where(
        F.when(key0 >= F.lit(recent_from), F.rand(sequence) < F.lit(recent_p)).otherwise(F.rand(sequence) < F.lit(old_p))
    )
    out = {fact.name: _updated(picked, fact, sequence, sizes, fk_moves=0.02)}
    inserted = max(1, round(0.2 * changes))
    parent_fk = next((fk for fk in fact.foreign_keys if fk.columns[0] == fact.primary_key[0]), None)
    if parent_fk is not None:  # new parents (orders) for the new fact rows, at the top of their key space
        parent = pipeline.source(parent_fk.references)
        fanout = max(1, math.ceil(total / sizes[parent.name]))
        first_parent = top + 1
        new_parents = _rows(spark, pipeline, parent, sizes, sequence, start=first_parent, count=math.ceil(inserted / fanout))
        new_facts = _rows(spark, pipeline, fact, sizes, sequence, start=first_parent * fanout, count=inserted)
        out[parent.name] = _as_changes(new_parents, parent, sequence)
        out[fact.name] = out[fact.name].unionByName(_as_changes(new_facts, fact, sequence))
    for share, name in ((0.02, "customers"), (0.01, "products")):
        if name in sizes and name in {s.name for s in plan.sources}:
            source = pipeline.source(name)
            p = min(1.0, share * changes / sizes[name])
            renamed = _updated(_live(spark, pipeline, source).where(F.rand(sequence + 7) < F.lit(p)), source, sequence, sizes, 0)
            out[name] = out[name].unionByName(renamed) if name in out else renamed
    return out


def _hot_parent(spark, pipeline, plan, fraction, sequence, sizes) -> dict[str, DataFrame]:
    """The hot customer (key 0, 1 % of the orders) renamed: one change, many gold rows."""
    if "customers" not in {s.name for s in plan.sources}:
        return {}
    source = pipeline.source("customers")
    return {"customers": _updated(_live(spark, pipeline, source).where(F.col("id") == 0), source, sequence, sizes, 0)}


_GENERATORS = {"uniform": _uniform, "oltp": _oltp, "hot_parent": _hot_parent}


# --------------------------------------------------------------------------- where the time goes


def versions_of(spark: SparkSession, tables: Sequence[str]) -> dict[str, int]:
    return {t: int(spark.sql(f"DESCRIBE HISTORY {t} LIMIT 1").first()["version"]) for t in tables}


#: Delta operation metrics worth reading per commit (MERGE's names; an append has numOutputRows).
_METRICS = (
    "numTargetFilesBeforeSkipping", "numTargetFilesAfterSkipping", "numTargetFilesRemoved",
    "numTargetDeletionVectorsAdded", "numTargetFilesAdded", "numSourceRows", "numTargetRowsInserted",
    "numTargetRowsUpdated", "numTargetRowsDeleted", "numTargetRowsCopied", "numOutputRows",
    "executionTimeMs", "scanTimeMs", "rewriteTimeMs",  # Delta's own timing of a MERGE: find touched files, write
)


def commits_since(spark: SparkSession, before: dict[str, int]) -> dict[str, dict[str, int]]:
    """Per table written since `before`: the commits' operations and their summed metrics."""
    out: dict[str, dict[str, Any]] = {}
    for table, version in before.items():
        rows = spark.sql(f"DESCRIBE HISTORY {table}").where(F.col("version") > version).collect()
        if not rows:
            continue
        summed: dict[str, Any] = {"operations": ",".join(r["operation"] for r in sorted(rows, key=lambda r: r["version"]))}
        for r in rows:
            metrics = r["operationMetrics"] or {}
            for k in _METRICS:
                v = metrics.get(k)
                if v is not None and str(v).isdigit() and not (k == "numOutputRows" and r["operation"] == "WRITE"):
                    summed[k] = summed.get(k, 0) + int(v)
            if r["operation"] == "WRITE":  # a batch's new gold rows, appended apart from its MERGE
                summed["appendedRows"] = summed.get("appendedRows", 0) + int(metrics.get("numOutputRows", 0))
        out[table.rsplit(".", 1)[-1]] = summed
    return out


def jobs_so_far(spark: SparkSession) -> int | None:
    """The highest Spark job id so far (the UI's REST API; None without a UI)."""
    if not spark.sparkContext.uiWebUrl:
        return None
    try:
        return max((j["jobId"] for j in ui_rest(spark, "jobs")), default=-1)
    except OSError:
        return None


#: The full recompute's entry among a run's `phase_reads` (beside the batch's own phases).
FULL_RECOMPUTE = "full recompute"


@dataclass
class SideBySide:
    """One gold run as a user runs it, then the full recompute of the view on the same data."""

    run: ViewRun
    gold_s: float
    jobs: int | None  # Spark jobs the gold run took (None without the UI)
    commits: dict[str, dict[str, int]]  # per table written: operations and their metrics
    full_s: float
    phase_resources: dict[str, dict[str, Any]] | None = None  # per phase, and the full recompute: jobs, files and rows read (`phases`)


def side_by_side(spark: SparkSession, pipeline: Pipeline, lake: Path, view: str, written: Sequence[str], full_table: str) -> SideBySide:
    """`run_gold` for `view`, timed with its jobs and commits to `written`, then the whole view
    from silver written over `full_table` (what teams run today), timed."""
    before, jobs_before = versions_of(spark, written), jobs_so_far(spark)
    started = time.monotonic()
    run = run_gold(spark, pipeline, lake, views=[view]).views[view]
    gold_s = time.monotonic() - started
    jobs_after = jobs_so_far(spark)
    commits = commits_since(spark, before)
    started, started_wall = time.monotonic(), time.time()
    full_recompute(spark, pipeline, view).write.format("delta").mode("overwrite").saveAsTable(full_table)
    full_s = time.monotonic() - started
    # one read of the UI for both: the batch's phases and the full recompute as a phase of its own
    resources = phase_resources(spark, [*run.spans, (FULL_RECOMPUTE, started_wall, time.time())])
    jobs = jobs_after - jobs_before if jobs_after is not None and jobs_before is not None else None
    return SideBySide(run, gold_s, jobs, commits, full_s, resources)


def _catch_up(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> float:
    """Seconds to catch the view's subscription tables up when its last batch left them behind
    (a batch recomputed whatever its keys writes none), before a run that may walk them: the
    modes rotate from run to run here, where a stream pays this once when its view outgrows
    the recompute, so it is timed apart from the run (0 when nothing was behind)."""
    started = time.monotonic()
    if catch_up_subscriptions(spark, pipeline, plan) is None:
        return 0.0
    return round(time.monotonic() - started, 2)


def _lookup_seconds(spark: SparkSession, table: str, fk_column: str, parents: int) -> dict[str, Any]:
    """Time KIP-213's prefix scan: subscribers of 100 random parents, as a literal IN (best of 3)."""
    import random

    values = random.Random(7).sample(range(parents), min(100, parents))
    files = num_files(spark, table)
    best = float("inf")
    for _ in range(3):
        started = time.monotonic()
        spark.table(table).where(F.col(fk_column).isin(values)).count()
        best = min(best, time.monotonic() - started)
    return {"files": files, "lookup_100_parents_s": round(best, 3)}


def bench_gold(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    fact_rows: int = 1_000_000,
    fractions: Sequence[float] = FRACTIONS,
    view: str | None = None,
    workloads: Sequence[str] = WORKLOADS,
    progress: Callable[[str], None] | None = None,
    refresh: Sequence[str] = ("auto",),
    repeats: int = 1,
) -> dict[str, Any]:
    """Gold maintenance against a full recompute of one view (default: the one with the most joins),
    under each `options.gold_refresh` mode in `refresh`, each cell `repeats` times (`cells`: medians)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}: it is how many batches each cell times")
    check_workloads(workloads, WORKLOADS)
    check_workloads(refresh, REFRESH_MODES, "refresh mode")
    say = progress or (lambda _m: None)
    bench = _bench_pipeline(pipeline)
    name = view or max(pipeline.views, key=lambda v: len(pipeline.views[v].joins))
    plan = view_plan(bench, name)
    fresh_schemas(spark, bench)
    shutil.rmtree(checkpoint_dir(lake, bench.name, f"gold_{name}"), ignore_errors=True)
    sizes = _sizes(bench, name, fact_rows)
    started = time.monotonic()
    for source in plan.sources:
        create_silver_current(spark, bench, source)
        append_silver_rows(_silver_rows(_rows(spark, bench, source, sizes, 1), source, 1), bench, source)
    result: dict[str, Any] = {"view": name, "fact_rows": fact_rows, "rows": sizes, "load_s": round(time.monotonic() - started, 1)}
    say(f"bench gold: silver loaded ({sizes}) in {result['load_s']} s")
    started = time.monotonic()
    run_gold(spark, bench, lake, views=[name])
    result["initial_build_s"] = round(time.monotonic() - started, 1)
    target = gold_table(bench, name)
    written = [target] + [subscription_table(bench, left, fk.name) for left, fk in plan.relations]
    result["gold_files_after_build"] = num_files(spark, target)
    say(f"bench gold: initial build {result['initial_build_s']} s, {result['gold_files_after_build']} gold files")
    result["subscriptions_catch_up_s"] = _catch_up(spark, bench, plan)  # a build the model recomputed wrote none
    result["subscription_lookup"] = {
        subscription_table(bench, left, fk.name): _lookup_seconds(
            spark, subscription_table(bench, left, fk.name), fk.columns[0], sizes.get(fk.references, 100)
        )
        for left, fk in plan.relations
    }
    full_table = f"{target}__full"
    runs = []
    sequence = 10
    shapes = [(w, f) for w in workloads for f in (sorted(fractions) if w != "hot_parent" else [1 / HOT_SHARE])]
    # each shape runs every mode, the order rotated from one shape (and round) to the next (none always goes first)
    cells = [
        (w, f, refresh[(i + k + j) % len(refresh)], k)
        for i, (w, f) in enumerate(shapes) for k in range(repeats) for j in range(len(refresh))
    ]
    for workload, fraction, mode, repeat in cells:
        sequence += 1
        changed = {}
        for source_name, df in _GENERATORS[workload](spark, bench, plan, fraction, sequence, sizes).items():
            df = df.localCheckpoint(eager=True)
            changed[source_name] = df.count()
            apply_silver_changes(spark, bench, bench.source(source_name), df)
        gold_files = num_files(spark, target)
        catch_up_s = _catch_up(spark, bench, plan) if mode != "recompute" else 0.0
        side = side_by_side(spark, bench.with_options(gold_refresh=mode), lake, name, written, full_table)
        report, incremental, full, commits = side.run, side.gold_s, side.full_s, side.commits
        gold_commit = commits.get(target.rsplit(".", 1)[-1], {})
        changed_gold = report.inserted + report.updated + report.deleted
        rewritten = rows_rewritten(gold_commit)
        run = {
            "workload": workload,
            "fraction": fraction,
            "changed_rows": changed,
            "refresh": mode,
            "repeat": repeat,
            "path": ",".join(report.paths) or "none",
            "reason": report.last_reason,
            "affected_keys": report.affected_keys,
            "gold_inserted_updated_deleted": [report.inserted, report.updated, report.deleted],
            "gold_files": gold_files,
            "gold_files_touched": gold_commit.get("numTargetFilesRemoved", 0) + gold_commit.get("numTargetDeletionVectorsAdded", 0),
            "gold_rows_rewritten_per_changed_row": round(rewritten / changed_gold, 2) if changed_gold else None,
            "spark_jobs": side.jobs,
            "gold_s": round(incremental, 2),
            "phases_s": {k: round(v, 2) for k, v in report.phases.items()},
            "phase_reads": side.phase_resources,
            "commits": commits,
            "full_recompute_s": round(full, 2),
            "full_over_gold": round(full / incremental, 2) if incremental else None,
            "full_over_gold_merge": merge_bound(full, gold_commit),  # what the gold MERGE alone allows
            "subscriptions_catch_up_s": catch_up_s,
        }
        runs.append(run)
        say(
            f"bench gold: {workload} {fraction:.4%} ({mode}): gold {run['gold_s']} s ({run['path']}, "
            f"{run['affected_keys']} keys, {run['gold_files_touched']}/{gold_files} files touched, "
            f"phases {run['phases_s']}), full {run['full_recompute_s']} s, ratio {run['full_over_gold']}"
        )
    result["runs"] = runs
    result["repeats"] = repeats
    result["cells"] = cell_medians(runs)
    result["subscriptions"] = subscription_sizes(spark, bench)
    result.update(gold_equals_full(spark, plan, target, full_table))
    return result


def cell_medians(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell (workload, fraction, refresh mode), in first-run order: the runs' median gold and
    full recompute seconds, their ratio, each phase's median, the paths taken, and the spread.

    >>> cell_medians([{"workload": "oltp", "fraction": 0.001, "refresh": "auto", "path": "incremental",
    ...                "gold_s": s, "full_recompute_s": 9.0, "phases_s": {"merge": s / 2}} for s in (3.0, 4.0, 9.0)])[0]["gold_s"]
    4.0
    """
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for run in runs:
        cells.setdefault((run["workload"], run["fraction"], run.get("refresh", "auto")), []).append(run)
    out = []
    for (workload, fraction, mode), group in cells.items():
        gold = statistics.median(r["gold_s"] for r in group)
        full = statistics.median(r["full_recompute_s"] for r in group)
        phases = sorted({p for r in group for p in r["phases_s"]})
        out.append({
            "workload": workload, "fraction": fraction, "refresh": mode, "runs": len(group),
            "paths": sorted({r["path"] for r in group}),
            "gold_s": round(gold, 2), "gold_s_range": [min(r["gold_s"] for r in group), max(r["gold_s"] for r in group)],
            "full_recompute_s": round(full, 2),
            "full_over_gold": round(full / gold, 2) if gold else None,
            "phases_s": {p: round(statistics.median(r["phases_s"].get(p, 0.0) for r in group), 2) for p in phases},
        })
    return out


def render_cells(result: dict[str, Any]) -> str:
    """Each cell's medians over its repeats, as a Markdown table."""
    return markdown_table(
        ("rows", "workload", "fraction", "refresh", "path(s)", "runs", "gold s (median)", "gold s (range)",
         "full recompute s (median)", "full / gold", *PHASES),
        (
            (f"{result['fact_rows']:,}", c["workload"], f"{c['fraction']:.2%}", c["refresh"], ", ".join(c["paths"]), c["runs"],
             c["gold_s"], f"{c['gold_s_range'][0]}-{c['gold_s_range'][1]}", c["full_recompute_s"], f"{c['full_over_gold']}x",
             *(f"{c['phases_s'].get(p, 0.0):.1f}" for p in PHASES))
            for c in result["cells"]
        ),
    )


def _path(run: dict[str, Any]) -> str:
    """The path a run took, marked when its mode pinned it (results before `refresh`: auto)."""
    return run["path"] if run.get("refresh", "auto") == "auto" else f"{run['path']} (pinned)"


def rows_rewritten(commit: dict[str, int]) -> int:
    """Rows a batch's gold commits wrote (updated, copied, inserted, deleted, appended), from
    their Delta operation metrics."""
    keys = ("numTargetRowsUpdated", "numTargetRowsCopied", "numTargetRowsInserted", "numTargetRowsDeleted", "appendedRows")
    return sum(commit.get(k, 0) for k in keys)


def gold_equals_full(spark: SparkSession, plan: Any, target: str, full_table: str) -> dict[str, Any]:
    """The bench's closing check: gold equals the full recompute (and how, when it does not)."""
    diff = diff_frames(spark.table(full_table), spark.table(target), plan.key_columns, plan.output_columns, samples=3)
    return {"gold_equals_full_recompute": diff.ok} | ({} if diff.ok else {"difference": str(diff)})


def merge_bound(full_s: float, gold_commit: dict[str, Any]) -> float | None:
    """The full recompute's seconds over Delta's own time for the batch's gold MERGE
    (`executionTimeMs` of its gold commits, summed by `commits_since`; an append reports none):
    the best full / gold ratio a batch that writes gold by that MERGE could reach had everything
    else cost nothing (None without a MERGE's time).

    >>> merge_bound(9.44, {"operations": "MERGE,WRITE", "executionTimeMs": 3399})
    2.78
    >>> merge_bound(9.44, {"operations": "WRITE"}) is None
    True
    """
    ms = gold_commit.get("executionTimeMs")
    return round(full_s / (ms / 1000), 2) if ms else None


def render_table(result: dict[str, Any]) -> str:
    """The runs as a Markdown table (the CLI's summary, docs/performance.md)."""
    return markdown_table(
        ("rows", "workload", "fraction", "path", "affected keys", "gold files touched", "gold s", "full recompute s",
         "full / gold", "full / gold's MERGE alone", "rows rewritten per change", "jobs"),
        (
            (f"{result['fact_rows']:,}", r["workload"], f"{r['fraction']:.2%}", _path(r), f"{r['affected_keys']:,}",
             f"{r['gold_files_touched']} of {r['gold_files']}", r["gold_s"], r["full_recompute_s"], f"{r['full_over_gold']}x",
             f"{r['full_over_gold_merge']}x" if r.get("full_over_gold_merge") else "",
             r["gold_rows_rewritten_per_changed_row"], r["spark_jobs"])
            for r in result["runs"]
        ),
    )


PHASES = ("subscriptions", "cost", "keys", "recompute", "merge")


def render_phase_reads(result: dict[str, Any]) -> str:
    """Each run's phases, and the full recompute beside it, with what they ran
    (`testkit.bench.phases`): seconds, the seconds a Spark job was running (the rest is the
    driver's own work: planning, Delta's log and commits, Python), Spark jobs, and files and rows
    their Parquet scans read, as a Markdown table (empty without a UI)."""
    rows = []
    for r in result["runs"]:
        for phase, used in (r.get("phase_reads") or {}).items():
            seconds = r["full_recompute_s"] if phase == FULL_RECOMPUTE else r["phases_s"].get(phase, 0.0)
            running = f"{used['job_s']:.1f}" if "job_s" in used else ""
            rows.append((f"{result['fact_rows']:,}", r["workload"], f"{r['fraction']:.2%}", _path(r), phase,
                         f"{seconds:.1f}", running, used["jobs"], f"{used['files_read']:,}", f"{used['rows_read']:,}"))
    if not rows:
        return ""
    return markdown_table(("rows", "workload", "fraction", "path", "phase", "s", "s with a job running", "jobs", "files read", "rows read"), rows)


def render_phases(result: dict[str, Any]) -> str:
    """Seconds per phase of each run, as a Markdown table."""
    return markdown_table(
        ("rows", "workload", "fraction", "path", *PHASES, "gold s"),
        (
            (f"{result['fact_rows']:,}", r["workload"], f"{r['fraction']:.2%}", _path(r),
             *(f"{r['phases_s'].get(p, 0.0):.1f}" for p in PHASES), r["gold_s"])
            for r in result["runs"]
        ),
    )
