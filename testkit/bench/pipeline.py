"""Benchmark: changes through every stage (bronze, silver, gold) at several batch sizes, beside the
raw Kafka-to-Delta copy of the same records.

For each batch size B (records per trigger, per query): an isolated pipeline (own topics,
schemas, checkpoints), the simulator's workload produced once, then, timed one after another:
the raw copy (`availableNow`, at most B records per trigger), bronze (at most B records per
trigger and topic), silver (one bronze file per trigger: one bronze batch), gold (Delta's default
admission, as production runs it: a view's query takes every silver commit written before it
started). Every stage runs its queries as the product does (concurrently). Gold is not capped
at one file per trigger: a silver store's commit holds a file per kind (`lakehouse.silver.store`),
so a cap in files splits a commit's current rows from its history rows and puts each feed's
current rows in a different trigger (measured on 2026-12-06: 14 gold batches where the earlier
two-table layout had 6, and gold 92-104 s against 56 s).
Gold is verified against the simulator's truth at the end of every size: a fast wrong answer
does not count.

Per stage: changes/s (records in / wall seconds), Spark jobs per batch (the UI's REST API),
Delta's MERGE metrics summed over the stage's commits, and every micro-batch's input rows and
duration from a StreamingQueryListener, fitted over all sizes to `seconds = fixed + per_change x
rows` (least squares). Batch durations include waiting for the stage's other queries (two cores,
five to six queries): the fit says what a batch costs here, not on an idle core. The workload
is capped at `max_batches` batches per query for the small sizes, so a run stays in minutes.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

from pyspark.sql import SparkSession

from lakehouse.declaration import Pipeline
from lakehouse.paths import checkpoint_dir
from lakehouse.spark import ensure_schemas
from lakehouse.tables import gold_table, silver_store_table
from testkit.bench import markdown_table
from testkit.bench.gold import commits_since, jobs_so_far, versions_of
from testkit.bench.ingest import _clean, _raw_ceiling, isolated_pipeline

BATCH_SIZES = (1_000, 10_000, 100_000)
STAGES = ("raw", "bronze", "silver", "gold")


class _Progress:
    """Every micro-batch's (query name, input rows, seconds), from a StreamingQueryListener."""

    def __init__(self, spark: SparkSession) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        self.batches: list[tuple[str, int, float]] = []
        lock = threading.Lock()
        batches = self.batches

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's names
                pass

            def onQueryProgress(self, event: Any) -> None:  # noqa: N802
                p = event.progress
                rows = int(p.numInputRows or 0)
                if rows:
                    with lock:
                        batches.append((p.name or "", rows, (p.durationMs or {}).get("triggerExecution", 0) / 1000))

            def onQueryIdle(self, event: Any) -> None:  # noqa: N802
                pass

            def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
                pass

        self.listener = Listener()
        spark.streams.addListener(self.listener)
        self.spark = spark

    def take(self) -> list[tuple[str, int, float]]:
        time.sleep(0.5)  # the listener bus delivers the last progress asynchronously
        taken = list(self.batches)
        self.batches.clear()
        return taken

    def close(self) -> None:
        self.spark.streams.removeListener(self.listener)


def fit_fixed_and_per_change(points: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """Least squares `seconds = fixed + per_change x rows` over (rows, seconds); None with fewer
    than two distinct sizes."""
    if len({r for r, _ in points}) < 2:
        return None
    n = len(points)
    mean_r = sum(r for r, _ in points) / n
    mean_s = sum(s for _, s in points) / n
    var = sum((r - mean_r) ** 2 for r, _ in points)
    per_change = sum((r - mean_r) * (s - mean_s) for r, s in points) / var
    return mean_s - per_change * mean_r, per_change


def bench_pipeline(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    bootstrap: str,
    events: int = 100_000,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    *,
    max_batches: int = 10,
    seed: int = 9,
    chaos: str = "some",
    keep: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Time raw copy, bronze, silver and gold over the same workload at each batch size."""
    from lakehouse.bronze import run_bronze
    from lakehouse.gold import prepare_view, run_gold, view_plan
    from lakehouse.silver import ensure_silver_tables, run_silver
    from lakehouse.verify.views import verify_pipeline
    from testkit.simulator import produce, simulate, write_truth

    say = progress or (lambda _m: None)
    recorder = _Progress(spark)
    sizes: list[dict[str, Any]] = []
    batches_by_stage: dict[str, list[tuple[int, float]]] = {s: [] for s in STAGES}
    try:
        for size in batch_sizes:
            tag = "pipe" + uuid.uuid4().hex[:8]
            bench = isolated_pipeline(pipeline, tag)
            n_events = min(events, max_batches * size * 2)
            simulation = simulate(bench, seed=seed, events=n_events, chaos=chaos)
            truth = Path(lake) / "truth" / bench.name
            write_truth(simulation, truth)
            records = produce(simulation.records, bootstrap)
            ensure_schemas(spark, bench)
            checkpoints = checkpoint_dir(Path(lake), bench.name, "")
            say(f"bench pipeline {size:,}/trigger: {records:,} records for {n_events:,} simulated changes")
            row: dict[str, Any] = {"batch_size": size, "events": n_events, "records": records, "stages": {}}
            tables = [silver_store_table(bench, s) for s in bench.sources.values()]

            def timed(stage: str, action: Callable[[], Any], written: Sequence[str] = ()) -> Any:
                before_versions = versions_of(spark, written) if written else {}
                jobs_before = jobs_so_far(spark)
                started = time.monotonic()
                result = action()
                seconds = time.monotonic() - started
                jobs_after = jobs_so_far(spark)
                batches = recorder.take()
                batches_by_stage[stage] += [(rows, secs) for _, rows, secs in batches]
                rows_in = sum(rows for _, rows, _ in batches)
                entry = {
                    "seconds": round(seconds, 2),
                    "rows_in": rows_in,
                    "batches": len(batches),
                    "changes_per_s": round(records / seconds, 1),
                    "median_batch_s": round(sorted(s for _, _, s in batches)[len(batches) // 2], 2) if batches else None,
                    "jobs": (jobs_after - jobs_before) if jobs_after is not None and jobs_before is not None else None,
                }
                if entry["jobs"] is not None and batches:
                    entry["jobs_per_batch"] = round(entry["jobs"] / len(batches), 1)
                if written:
                    entry["merge_metrics"] = _merge_totals(commits_since(spark, before_versions))
                row["stages"][stage] = entry
                say(f"  {stage}: {seconds:.1f}s, {len(batches)} batch(es), {records / seconds:,.0f} records/s"
                    + (f", {entry.get('jobs_per_batch')} Spark jobs/batch" if entry.get("jobs_per_batch") else ""))
                return result

            raw_table = bench.tables.qualified("bronze", "_bench_raw")
            timed("raw", lambda: _raw_ceiling(spark, bench, bootstrap, raw_table, checkpoints / "raw", size))
            timed("bronze", lambda: run_bronze(spark, bench, Path(lake), bootstrap, max_offsets_per_trigger=size,
                                               checkpoint=checkpoints / "bronze"))
            # silver's and gold's tables exist only once their queries start: created first, so
            # that the versions their MERGE metrics are counted from can be read
            for source in bench.sources.values():
                ensure_silver_tables(spark, bench, source)
            timed("silver", lambda: run_silver(spark, bench, Path(lake), max_files_per_trigger=1), tables)
            for view in bench.views:
                prepare_view(spark, bench, view_plan(bench, view))
            timed("gold", lambda: run_gold(spark, bench, Path(lake)),
                  [gold_table(bench, v) for v in bench.views])
            pipeline_s = sum(row["stages"][s]["seconds"] for s in ("bronze", "silver", "gold"))
            row["pipeline_seconds"] = round(pipeline_s, 2)
            row["pipeline_changes_per_s"] = round(records / pipeline_s, 1)
            verdict = verify_pipeline(spark, bench, truth)
            row["verify_ok"] = verdict.ok
            if not verdict.ok:
                raise RuntimeError(f"bench pipeline: gold differs from the truth at batch size {size}:\n{verdict.render()}")
            say(f"  all stages: {pipeline_s:.1f}s, {records / pipeline_s:,.0f} records/s; verify OK")
            sizes.append(row)
            if not keep:
                _clean(spark, bench, checkpoints, bootstrap)
                shutil.rmtree(truth, ignore_errors=True)
    finally:
        recorder.close()
    fits = {}
    for stage, points in batches_by_stage.items():
        fit = fit_fixed_and_per_change(points)
        if fit is not None:
            fits[stage] = {"fixed_s": round(fit[0], 3), "per_change_ms": round(fit[1] * 1000, 4), "batches": len(points)}
    return {"sizes": sizes, "fits": fits, "batch_points": {s: [[r, round(t, 3)] for r, t in p] for s, p in batches_by_stage.items()}}


def _merge_totals(commits: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Delta operation metrics summed over a stage's tables (and its MERGE count)."""
    totals: dict[str, int] = {}
    for metrics in commits.values():
        totals["merges"] = totals.get("merges", 0) + metrics.get("operations", "").split(",").count("MERGE")
        for key, value in metrics.items():
            if key != "operations" and isinstance(value, int):
                totals[key] = totals.get(key, 0) + value
    return totals


def render_table(result: dict[str, Any]) -> str:
    """The summary table (the CLI's, docs/performance.md's): per batch size and stage, records/s,
    batches, median batch, jobs per batch; then the fitted fixed and per-record cost per stage."""
    rows = []
    for row in result["sizes"]:
        size, records = f"{row['batch_size']:,}", f"{row['records']:,}"
        for stage in STAGES:
            e = row["stages"][stage]
            rows.append((size, records, stage, e["seconds"], f"{e['changes_per_s']:,.0f}", e["batches"],
                         e["median_batch_s"], e.get("jobs_per_batch", "-")))
        rows.append((size, records, "**bronze+silver+gold**", row["pipeline_seconds"],
                     f"**{row['pipeline_changes_per_s']:,.0f}**", "", "", ""))
    table = markdown_table(
        ("batch size", "records", "stage", "seconds", "records/s", "batches", "median batch s", "Spark jobs/batch"), rows
    )
    if not result.get("fits"):
        return table
    fits = markdown_table(
        ("stage", "fixed s per batch", "per change ms", "batches fitted"),
        ((stage, f["fixed_s"], f["per_change_ms"], f["batches"]) for stage, f in result["fits"].items()),
    )
    return table + "\n\n" + fits
