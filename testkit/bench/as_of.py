"""Benchmark: an as-of view's batch (seed 001) against recomputing the whole view, side by side.

Not a test. `bench_as_of` writes silver for payments (events, `events` rows spread over 1,000
days) joined as of their time to orders (ten times fewer, three versions each, moving between
customers and statuses) and customers (a hundred times fewer, three versions each), builds gold,
then for each workload and fraction changes silver through silver's own batch (`apply_batch`:
history, change feeds and all) and times, on the same data:

- gold: `run_gold` for the view, as a user runs it (the events to re-enrich found through the
  view's index, recomputed from history, MERGEd);
- full: the whole as-of join from silver, written over a copy table (what teams run today).

Workloads (fraction = share of the events):
- new_events: new payments at the end of the time range (the usual traffic);
- late_versions: customer versions arriving late, each placed in the middle of an existing
  version's interval, enough of them to re-enrich about `fraction` of the payments.

Reported per run: times and their ratio, events re-enriched, seconds per phase, Spark jobs, and
each table's Delta operation metrics; whether gold equals the full recompute at the end.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline, Source, parse_pipeline
from lakehouse.gold import run_gold, view_plan
from lakehouse.gold.as_of import index_table
from lakehouse.paths import checkpoint_dir
from lakehouse.silver import apply_batch, ensure_silver_tables
from lakehouse.silver.plan import row_hash
from lakehouse.tables import (
    HISTORY_KIND,
    bronze_schema,
    gold_table,
    silver_current_schema,
    silver_history_schema,
)
from testkit.bench import check_workloads, fresh_schemas, markdown_table
from testkit.bench.gold import gold_equals_full, side_by_side
from testkit.reference_silver import append_silver_rows

PIPELINE = """\
name: asofbench
kafka: {topic_prefix: asofbench}
sources:
  customers:
    primary_key: [id]
    columns: {id: bigint, segment: string}
  orders:
    primary_key: [id]
    columns: {id: bigint, customer_id: bigint, status: string}
    foreign_keys:
      customer: {columns: [customer_id], references: customers}
  payments:
    kind: events
    primary_key: [id]
    columns: {id: bigint, order_id: bigint, amount: bigint}
    foreign_keys:
      order: {columns: [order_id], references: orders}
views:
  payments_as_of:
    base: payments
    joins:
      - {alias: ord, via: payments.order, type: left}
      - {alias: customer, via: ord.customer, type: left}
    columns: {payment_id: payments.id, amount: payments.amount, status: ord.status, segment: customer.segment}
"""
VIEW = "payments_as_of"
FRACTIONS = (0.0001, 0.001, 0.01, 0.1)
WORKLOADS = ("new_events", "late_versions")
START_MS = int(datetime(2023, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
SPAN_MS = 1000 * 86_400_000  # the events' and versions' time range: 1,000 days
VERSIONS = 3  # per dimension key


def _sizes(events: int) -> dict[str, int]:
    return {"payments": events, "orders": max(10, events // 10), "customers": max(10, events // 100)}


def _versioned(spark: SparkSession, source: Source, keys: int, values: Callable[[Column, Column], list[Column]]) -> DataFrame:
    """`VERSIONS` versions per key at even intervals with a per-key offset, in history's layout."""
    step = SPAN_MS // VERSIONS
    df = spark.range(keys * VERSIONS).select((F.col("id") % keys).alias("k"), (F.col("id") / keys).cast("long").alias("v"))
    df = df.select(
        F.col("k").alias(source.primary_key[0]), *values(F.col("k"), F.col("v")),
        ((F.col("k") * VERSIONS + F.col("v")) * 10 + 1).cast("decimal(38,0)").alias("_sequence"),
        F.when(F.col("v") == 0, "c").otherwise("u").alias("_op"),
        F.lit(False).alias("_deleted"),
        F.timestamp_millis(F.lit(START_MS) + F.col("v") * step + (F.col("k") * 7919) % step).alias("_valid_from"),
        F.when(F.col("v") < VERSIONS - 1, F.timestamp_millis(F.lit(START_MS) + (F.col("v") + 1) * step + (F.col("k") * 7919) % step)).alias("_valid_to"),
        F.when(F.col("v") < VERSIONS - 1, ((F.col("k") * VERSIONS + F.col("v") + 1) * 10 + 1).cast("decimal(38,0)")).alias("_valid_to_sequence"),
    )
    return df.withColumn("_row_hash", row_hash(source)).withColumn("_recorded_at", F.current_timestamp())


def _write_silver(spark: SparkSession, pipeline: Pipeline, source: Source, history: DataFrame) -> None:
    """History as given, current = each key's last version."""
    append_silver_rows(history.select(*[f.name for f in silver_history_schema(source).fields]), pipeline, source, HISTORY_KIND)
    last = history.where(F.col("_valid_to").isNull()).withColumn("_source_ts", F.col("_valid_from")).withColumn("_updated_at", F.current_timestamp())
    append_silver_rows(last.select(*[f.name for f in silver_current_schema(source).fields]), pipeline, source)


def _bronze_of(df: DataFrame, source: Source, first_offset: int) -> DataFrame:
    """Bronze rows (creates and updates) of `df`: source columns, `_sequence`, `_ts_ms`."""
    schema = bronze_schema(source)
    return df.select(
        F.lit(source.topic).alias("_topic"), F.lit(0).alias("_partition"),
        (F.lit(first_offset) + F.monotonically_increasing_id()).alias("_offset"), F.current_timestamp().alias("_kafka_ts"),
        F.lit(None).cast("binary").alias("_raw_key"), F.lit(None).cast("binary").alias("_raw_value"), F.lit("c").alias("_op"),
        F.struct(*[F.col(k) for k in source.primary_key]).cast(schema["_key"].dataType).alias("_key"),
        F.lit(None).cast(schema["_before"].dataType).alias("_before"),
        F.struct(*[F.col(c) for c in source.column_names]).cast(schema["_after"].dataType).alias("_after"),
        F.col("_ts_ms").alias("_source_ts_ms"), F.lit(None).cast("bigint").alias("_source_lsn"),
        F.lit(None).cast("bigint").alias("_source_tx_id"), F.lit("false").alias("_source_snapshot"),
        F.lit(None).cast("string").alias("_source_file"), F.lit(None).cast("bigint").alias("_source_pos"),
        F.lit(None).cast("int").alias("_source_row"), F.lit(None).cast("bigint").alias("_event_ts_ms"),
        F.lit(None).cast("string").alias("_unavailable_columns"), F.col("_sequence"), F.current_timestamp().alias("_ingested_at"),
    )


def _new_events(spark: SparkSession, sizes: dict[str, int], fraction: float, round_: int) -> tuple[str, DataFrame]:
    n = max(1, int(sizes["payments"] * fraction))
    first = sizes["payments"] * (round_ + 1) * 10
    df = spark.range(n).select(
        (F.lit(first) + F.col("id")).alias("id"), ((F.col("id") * 7) % sizes["orders"]).alias("order_id"),
        (F.col("id") % 100).alias("amount"),
        (F.lit(10**15 * (round_ + 1)) + F.col("id")).cast("decimal(38,0)").alias("_sequence"),
        (F.lit(START_MS + SPAN_MS) + F.lit(round_ * 1000) + F.col("id")).alias("_ts_ms"),
    )
    return "payments", df


def _late_versions(spark: SparkSession, sizes: dict[str, int], fraction: float, round_: int) -> tuple[str, DataFrame]:
    """Customer versions placed halfway into each picked customer's first interval; each customer
    has about events/customers payments over three intervals (a sixth of them re-enriched)."""
    per_customer = max(1.0, sizes["payments"] / sizes["customers"] / (2 * VERSIONS))
    n = max(1, min(sizes["customers"], int(sizes["payments"] * fraction / per_customer)))
    stride = max(1, sizes["customers"] // n)
    step = SPAN_MS // VERSIONS
    k = (F.col("id") * stride + round_) % sizes["customers"]
    df = spark.range(n).select(
        k.alias("id"), F.concat(F.lit(f"late{round_}-"), k.cast("string")).alias("segment"),
        ((k * VERSIONS) * 10 + 2 + round_).cast("decimal(38,0)").alias("_sequence"),  # between v0 and v1
        (F.lit(START_MS) + (k * 7919) % step + F.lit(step // 2) + F.lit(round_ * 1000)).alias("_ts_ms"),
    )
    return "customers", df


_GENERATORS = {"new_events": _new_events, "late_versions": _late_versions}


def bench_as_of(
    spark: SparkSession,
    lake: Path,
    events: int = 1_000_000,
    fractions: Sequence[float] = FRACTIONS,
    workloads: Sequence[str] = WORKLOADS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """An as-of view's batches against a full recompute of it, per workload and fraction."""
    check_workloads(workloads, WORKLOADS)
    say = progress or (lambda _m: None)
    pipeline = parse_pipeline(PIPELINE, filename="bench_as_of.yml")
    fresh_schemas(spark, pipeline)
    shutil.rmtree(checkpoint_dir(lake, pipeline.name, f"gold_{VIEW}"), ignore_errors=True)
    sizes = _sizes(events)
    started = time.monotonic()
    customers, orders, payments = (pipeline.source(n) for n in ("customers", "orders", "payments"))
    for source in (customers, orders, payments):
        ensure_silver_tables(spark, pipeline, source)
    _write_silver(spark, pipeline, customers, _versioned(
        spark, customers, sizes["customers"], lambda k, v: [F.concat(F.lit("seg"), (k % 5 + v).cast("string")).alias("segment")]))
    _write_silver(spark, pipeline, orders, _versioned(
        spark, orders, sizes["orders"], lambda k, v: [((k * 31 + v * 17) % sizes["customers"]).alias("customer_id"),
                                                      F.element_at(F.array(*[F.lit(s) for s in ("new", "paid", "sent")]), (v + 1).cast("int")).alias("status")]))
    pay = spark.range(sizes["payments"]).select(
        F.col("id"), ((F.col("id") * 7) % sizes["orders"]).alias("order_id"), (F.col("id") % 100).alias("amount"),
        (F.lit(10**14) + F.col("id")).cast("decimal(38,0)").alias("_sequence"), F.lit("c").alias("_op"), F.lit(False).alias("_deleted"),
        F.timestamp_millis(F.lit(START_MS) + (F.col("id") * 104_729) % SPAN_MS).alias("_valid_from"),
        F.lit(None).cast("timestamp").alias("_valid_to"), F.lit(None).cast("decimal(38,0)").alias("_valid_to_sequence"),
    )
    _write_silver(spark, pipeline, payments, pay.withColumn("_row_hash", row_hash(payments)).withColumn("_recorded_at", F.current_timestamp()))
    result: dict[str, Any] = {"view": VIEW, "events": events, "rows": sizes, "load_s": round(time.monotonic() - started, 1)}
    say(f"bench as_of: silver loaded ({sizes}, {VERSIONS} versions per dimension key) in {result['load_s']} s")
    started = time.monotonic()
    run_gold(spark, pipeline, lake, views=[VIEW])
    result["initial_build_s"] = round(time.monotonic() - started, 1)
    target = gold_table(pipeline, VIEW)
    written = [target, index_table(pipeline, VIEW)]
    say(f"bench as_of: initial build {result['initial_build_s']} s")
    full_table = f"{target}__full"
    runs = []
    for i, (workload, fraction) in enumerate((w, f) for w in workloads for f in sorted(fractions)):
        name, changes = _GENERATORS[workload](spark, sizes, fraction, i)
        source = pipeline.source(name)
        started = time.monotonic()
        apply_batch(_bronze_of(changes, source, 10_000_000 * (i + 1)).localCheckpoint(eager=True), 1000 + i, pipeline, source, "bench")
        silver_s = time.monotonic() - started
        side = side_by_side(spark, pipeline, lake, VIEW, written, full_table)
        report = side.run
        run = {
            "workload": workload, "fraction": fraction, "changed_rows": changes.count(), "silver_s": round(silver_s, 2),
            "events_reenriched": report.affected_keys, "path": report.last_reason,
            "gold_inserted_updated_deleted": [report.inserted, report.updated, report.deleted],
            "spark_jobs": side.jobs, "gold_s": round(side.gold_s, 2), "phases_s": {k: round(v, 2) for k, v in report.phases.items()},
            "phase_reads": side.phase_resources, "commits": side.commits, "full_recompute_s": round(side.full_s, 2),
            "full_over_gold": round(side.full_s / side.gold_s, 2) if side.gold_s else None,
        }
        runs.append(run)
        say(f"bench as_of: {workload} {fraction:.4%}: {run['changed_rows']} change(s), gold {run['gold_s']} s "
            f"({run['events_reenriched']} events, phases {run['phases_s']}), full {run['full_recompute_s']} s, ratio {run['full_over_gold']}")
    result["runs"] = runs
    result.update(gold_equals_full(spark, view_plan(pipeline, VIEW), target, full_table))
    return result


PHASES = ("keys", "recompute", "merge", "index")


def render_table(result: dict[str, Any]) -> str:
    """The runs as a Markdown table, with seconds per phase."""
    return markdown_table(
        ("events", "workload", "fraction", "changes", "events re-enriched", "gold s", *PHASES, "full recompute s", "full / gold", "jobs"),
        (
            (f"{result['events']:,}", r["workload"], f"{r['fraction']:.2%}", f"{r['changed_rows']:,}", f"{r['events_reenriched']:,}",
             r["gold_s"], *(f"{r['phases_s'].get(p, 0.0):.1f}" for p in PHASES), r["full_recompute_s"], f"{r['full_over_gold']}x",
             r["spark_jobs"])
            for r in result["runs"]
        ),
    )
