"""Benchmark: incremental gold maintenance vs a full recompute of the same view, same data.

Not a test. `bench_gold` builds silver current tables for one view's sources (the fact table
with `fact_rows` rows, each parent ten times smaller per hop), builds gold through the
incremental path, then for each fraction changes that share of the fact rows (and of each
parent) in silver and times, side by side on the same data:

- incremental: `run_gold` for the view (subscriptions, affected keys, recompute, MERGE);
- full: the whole join from silver current, written over a copy table (what teams run today).

Reported: times, their ratio, the crossover fraction (where incremental stops paying off,
interpolated on the measured points), subscription table sizes, and whether the incremental
gold equals the full recompute at the end.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline, Source
from lakehouse.gold import full_recompute, num_files, run_gold, subscription_sizes, view_plan
from testkit.reference_silver import apply_silver_changes, changes_schema, create_silver_current
from lakehouse.paths import checkpoint_dir
from lakehouse.tables import gold_table, silver_current_schema, silver_current_table, subscription_table
from lakehouse.verify.views import diff_frames


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


def _rows(spark: SparkSession, pipeline: Pipeline, source: Source, sizes: dict[str, int], salt: int) -> DataFrame:
    """`sizes[source]` rows with unique keys and foreign keys into the referenced sources' ranges."""
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
        else:
            expr = _value(col.name, col.type, idx, salt)
        cols.append(expr.cast(col.type).alias(col.name))
    return spark.range(n).select(*cols)


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


def _changes(spark: SparkSession, pipeline: Pipeline, source: Source, fraction: float, sequence: int, sizes: dict[str, int]) -> DataFrame:
    """About `fraction` of the source's live rows, with one selected value column changed and,
    for one in ten, a foreign key moved (so subscriptions move too)."""
    current = spark.read.table(silver_current_table(pipeline, source)).where(~F.col("_deleted"))
    picked = current.where(F.rand(sequence) < F.lit(fraction))
    value_cols = [c for c in source.value_columns if all(c not in fk.columns for fk in source.foreign_keys)]
    out = []
    for col in source.columns:
        expr = F.col(col.name)
        if value_cols and col.name == value_cols[0]:
            expr = _value(col.name, col.type, F.col(source.primary_key[0]).cast("long"), sequence)
        fk = next((f for f in source.foreign_keys if col.name in f.columns and col.name not in source.primary_key), None)
        if fk is not None and fk.references in sizes:
            moved = F.pmod(F.xxhash64(F.col(source.primary_key[0]), F.lit(sequence)), F.lit(sizes[fk.references]))
            expr = F.when(F.rand(sequence + 1) < 0.1, moved).otherwise(expr)
        out.append(expr.cast(col.type).alias(col.name))
    return picked.select(*out, F.lit(sequence).cast("decimal(38,0)").alias("_sequence"), F.lit(False).alias("_delete")).select(
        *[f.name for f in changes_schema(source).fields]
    )


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


def _files_touched_by_last_merge(spark: SparkSession, table: str) -> int:
    """Target files the last MERGE had to read and mark (a deletion vector) or rewrite.

    With uniformly random keys every file holds some affected row: the MERGE then reads the
    whole table however small the change, which is what bounds incremental against a recompute.
    """
    metrics = spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").first()["operationMetrics"]
    return int(metrics.get("numTargetDeletionVectorsAdded", 0)) + int(metrics.get("numTargetFilesRemoved", 0))


def _crossover(points: Sequence[tuple[float, float, float]]) -> float | None:
    """Fraction where incremental time reaches full time, log-interpolated; None if not reached."""
    for (f0, inc0, full0), (f1, inc1, full1) in zip(points, points[1:]):
        d0, d1 = inc0 - full0, inc1 - full1
        if d0 < 0 <= d1:
            t = -d0 / (d1 - d0)
            return float(math.exp(math.log(f0) + t * (math.log(f1) - math.log(f0))))
    if points and points[0][1] >= points[0][2]:
        return points[0][0]
    return None


def bench_gold(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    fact_rows: int = 1_000_000,
    fractions: Sequence[float] = (0.001, 0.01, 0.1),
    view: str | None = None,
) -> dict[str, Any]:
    """Incremental vs full recompute of one view (default: the one with the most joins)."""
    bench = _bench_pipeline(pipeline)
    name = view or max(pipeline.views, key=lambda v: len(pipeline.views[v].joins))
    plan = view_plan(bench, name)
    for schema in (bench.tables.silver_schema, bench.tables.gold_schema):
        spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        spark.sql(f"CREATE SCHEMA {schema}")
    shutil.rmtree(checkpoint_dir(lake, bench.name, f"gold_{name}"), ignore_errors=True)
    sizes = _sizes(bench, name, fact_rows)
    started = time.monotonic()
    for source in plan.sources:
        create_silver_current(spark, bench, source)
        _silver_rows(_rows(spark, bench, source, sizes, 1), source, 1).write.format("delta").mode("append").saveAsTable(
            silver_current_table(bench, source)
        )
    result: dict[str, Any] = {"view": name, "fact_rows": fact_rows, "rows": sizes, "load_s": round(time.monotonic() - started, 1)}
    started = time.monotonic()
    run_gold(spark, bench, lake, views=[name])
    result["initial_incremental_build_s"] = round(time.monotonic() - started, 1)
    result["subscription_lookup"] = lookups = {}
    for left, fk in plan.relations:
        table = subscription_table(bench, left, fk.name)
        before = _lookup_seconds(spark, table, fk.columns[0], sizes.get(fk.references, 100))
        spark.sql(f"OPTIMIZE {table}")  # liquid clustering by fk: files hold narrow fk ranges
        after = _lookup_seconds(spark, table, fk.columns[0], sizes.get(fk.references, 100))
        lookups[table] = {"as_written": before, "clustered_by_fk": after}
    full_table = f"{gold_table(bench, name)}__full"
    points: list[tuple[float, float, float]] = []
    runs = []
    for i, fraction in enumerate(sorted(fractions)):
        sequence = 10 + i
        changed = {}
        for source in plan.sources:
            df = _changes(spark, bench, source, fraction, sequence, sizes).cache()
            changed[source.name] = df.count()
            apply_silver_changes(spark, bench, source, df)
            df.unpersist()
        gold_files = num_files(spark, gold_table(bench, name))
        started = time.monotonic()
        report = run_gold(spark, bench, lake, views=[name]).views[name]
        incremental = time.monotonic() - started
        touched = _files_touched_by_last_merge(spark, gold_table(bench, name))
        started = time.monotonic()
        full_recompute(spark, bench, name).write.format("delta").mode("overwrite").saveAsTable(full_table)
        full = time.monotonic() - started
        points.append((fraction, incremental, full))
        runs.append(
            {
                "fraction": fraction,
                "changed_rows": changed,
                "affected_keys": report.affected_keys,
                "gold_inserted_updated_deleted": [report.inserted, report.updated, report.deleted],
                "gold_files_touched": f"{touched} of {gold_files}",
                "incremental_s": round(incremental, 2),
                "incremental_phases_s": {k: round(v, 2) for k, v in report.phases.items()},
                "full_recompute_s": round(full, 2),
                "full_over_incremental": round(full / incremental, 2) if incremental else None,
            }
        )
    result["runs"] = runs
    result["crossover_fraction"] = _crossover(points)
    result["subscriptions"] = subscription_sizes(spark, bench)
    diff = diff_frames(spark.table(full_table), spark.table(gold_table(bench, name)), plan.key_columns, plan.output_columns, samples=3)
    result["gold_equals_full_recompute"] = diff.ok
    if not diff.ok:
        result["difference"] = str(diff)
    return result
