"""Benchmark: one global row changed (seed 004), gold's batch against recomputing the view.

Not a test. A current-state view joins orders to a small global `statuses` table on a key
expression (`upper(orders.status)`, no foreign key, no subscription table: KIP-99's non-key
join). `bench_global_row` writes silver for `rows` orders over `STATUSES` status values and the
statuses, builds gold, then, round by round, relabels one status (the rows that map to it are a
`1 / STATUSES` share of the view) and times, on the same data:

- gold: `run_gold` for the view, as a user runs it (the changed global key found in the base's
  silver current table, those rows re-joined and MERGEd);
- full: the whole view from silver, written over a copy table (what teams run today).

Reported per round: times and their ratio, gold rows changed, rows the MERGE rewrote, seconds per
phase, Spark jobs; whether gold equals the full recompute at the end.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import parse_pipeline
from lakehouse.gold import run_gold, view_plan
from lakehouse.paths import checkpoint_dir
from lakehouse.tables import gold_table
from testkit.bench import fresh_schemas, markdown_table
from testkit.bench.gold import _as_changes, _silver_rows, gold_equals_full, rows_rewritten, side_by_side
from testkit.reference_silver import append_silver_rows, apply_silver_changes, create_silver_current

PIPELINE = """\
name: globalbench
kafka: {topic_prefix: globalbench}
sources:
  orders:
    primary_key: [id]
    columns: {id: bigint, status: string, total: bigint}
  statuses:
    kind: global
    primary_key: [code]
    columns: {code: string, label: string}
views:
  orders_labelled:
    base: orders
    joins:
      - {alias: st, table: statuses, key: "upper(orders.status)", type: left}
    columns: {order_id: orders.id, status: orders.status, total: orders.total, status_label: st.label}
"""
VIEW = "orders_labelled"
STATUSES = 7
ROUNDS = 3


def bench_global_row(
    spark: SparkSession, lake: Path, rows: int = 1_000_000, rounds: int = ROUNDS, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """One status relabelled per round: gold's batch beside the whole view recomputed."""
    say = progress or (lambda _m: None)
    pipeline = parse_pipeline(PIPELINE, filename="global_row_bench.yml")
    plan = view_plan(pipeline, VIEW)
    fresh_schemas(spark, pipeline)
    shutil.rmtree(checkpoint_dir(lake, pipeline.name, f"gold_{VIEW}"), ignore_errors=True)
    orders, statuses = pipeline.source("orders"), pipeline.source("statuses")
    started = time.monotonic()
    for source in (orders, statuses):
        create_silver_current(spark, pipeline, source)
    order_rows = spark.range(rows).select(
        F.col("id"), F.concat(F.lit("status-"), (F.col("id") % STATUSES).cast("string")).alias("status"), (F.col("id") % 500).alias("total"))
    append_silver_rows(_silver_rows(order_rows, orders, 1), pipeline, orders)
    status_rows = spark.range(STATUSES).select(
        F.concat(F.lit("STATUS-"), F.col("id").cast("string")).alias("code"), F.concat(F.lit("label "), F.col("id").cast("string")).alias("label"))
    append_silver_rows(_silver_rows(status_rows, statuses, 1), pipeline, statuses)
    result: dict[str, Any] = {"view": VIEW, "rows": rows, "statuses": STATUSES, "load_s": round(time.monotonic() - started, 1)}
    started = time.monotonic()
    run_gold(spark, pipeline, lake, views=[VIEW])
    result["initial_build_s"] = round(time.monotonic() - started, 1)
    say(f"bench global_row: {rows:,} orders over {STATUSES} statuses loaded in {result['load_s']} s, gold built in {result['initial_build_s']} s")
    target = gold_table(pipeline, VIEW)
    full_table = f"{target}__full"
    runs = []
    for round_ in range(rounds):
        sequence = 10 + round_
        code = f"STATUS-{round_ % STATUSES}"
        relabelled = spark.createDataFrame([(code, f"label {round_ % STATUSES} (renamed {round_})")], "code string, label string")
        apply_silver_changes(spark, pipeline, statuses, _as_changes(relabelled, statuses, sequence))
        side = side_by_side(spark, pipeline, lake, VIEW, [target], full_table)
        gold_commit = side.commits.get(target.rsplit(".", 1)[-1], {})
        changed = side.run.inserted + side.run.updated + side.run.deleted
        rewritten = rows_rewritten(gold_commit)
        run = {
            "round": round_,
            "path": ",".join(side.run.paths) or "none",
            "affected_keys": side.run.affected_keys,
            "gold_rows_changed": changed,
            "gold_rows_rewritten": rewritten,
            "spark_jobs": side.jobs,
            "gold_s": round(side.gold_s, 2),
            "phases_s": {k: round(v, 2) for k, v in side.run.phases.items()},
            "phase_reads": side.phase_resources,
            "full_recompute_s": round(side.full_s, 2),
            "full_over_gold": round(side.full_s / side.gold_s, 2) if side.gold_s else None,
        }
        runs.append(run)
        say(f"bench global_row: round {round_}: gold {run['gold_s']} s ({run['path']}, {changed:,} rows changed, "
            f"{rewritten:,} rewritten, phases {run['phases_s']}), full {run['full_recompute_s']} s, ratio {run['full_over_gold']}")
    result["runs"] = runs
    result.update(gold_equals_full(spark, plan, target, full_table))
    return result


def render_table(result: dict[str, Any]) -> str:
    """The rounds as a Markdown table."""
    return markdown_table(
        ("orders", "round", "path", "gold rows changed", "rows rewritten", "gold s", "full recompute s", "full / gold"),
        [(f"{result['rows']:,}", r["round"], r["path"], f"{r['gold_rows_changed']:,}", f"{r['gold_rows_rewritten']:,}",
          r["gold_s"], r["full_recompute_s"], r["full_over_gold"]) for r in result["runs"]],
    )
