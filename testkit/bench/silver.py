"""Benchmark of the silver MERGE, and synthetic bronze batches (also used by the tests).

`bench_silver` applies the same batch of changes to a current table of each size and reports
wall time and, from Delta's MERGE metrics (DESCRIBE HISTORY operationMetrics), how many target
rows were rewritten per changed row, with and without deletion vectors. The claim under test:
a batch's cost follows the batch, not the table. A MERGE must still scan the target to find
matches (no partitioning, random keys), but with deletion vectors it rewrites only the changed
rows instead of every row of every touched file.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline, Source
from lakehouse.deltasql import create_table
from lakehouse.frames import local_frame
from lakehouse.silver import apply_batch, ensure_silver_tables
from lakehouse.tables import CURRENT_KIND, HISTORY_KIND, bronze_schema, silver_store_schema, silver_store_table
from testkit.bench.phases import phase_resources

PLACEHOLDER = "__debezium_unavailable_value"


# --------------------------------------------------------------------------- synthetic bronze rows


@dataclass(frozen=True)
class BronzeChange:
    """One bronze record, as the bronze stage would write it (only what silver reads matters).

    `op`: r, c, u, d, t or tombstone. `key`/`after` map column -> value. `unavailable` lists
    TOAST placeholder columns (their `after` value is Debezium's placeholder). `old_key`: the
    `__debezium.oldkey` header of a primary-key change's create.
    """

    op: str
    key: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    sequence: int | Decimal | None = None
    ts_ms: int | None = None
    unavailable: tuple[str, ...] = ()
    partition: int = 0
    old_key: dict[str, Any] | None = None
    snapshot: str | None = None  # `source.snapshot` (default: "true" for op r, else "false")


def bronze_rows(source: Source, changes: Iterable[BronzeChange], first_offset: int = 0) -> list[Row]:
    """Rows in the `bronze_schema(source)` layout, offsets in arrival order."""
    now = datetime(2026, 1, 1)
    rows = []
    for i, ch in enumerate(changes):
        key = {k: (ch.key or ch.after or {}).get(k) for k in source.primary_key} if ch.op != "t" else None
        after = None
        if ch.after is not None:
            after = {c: ch.after.get(c) for c in source.column_names}
            for c in ch.unavailable:
                if c in source.column_names and source.column(c).type == "string":
                    after[c] = PLACEHOLDER
        before = dict(key or {}, **{c: None for c in source.value_columns}) if ch.op == "d" else None
        if before is not None:
            before = {c: before.get(c) for c in source.column_names}
        rows.append(
            Row(
                _topic=source.topic,
                _partition=ch.partition,
                _offset=first_offset + i,
                _kafka_ts=now,
                _raw_key=None,
                _raw_value=None,
                _op=ch.op,
                _key=Row(**key) if key is not None and ch.op != "t" else None,
                _before=Row(**before) if before is not None else None,
                _after=Row(**after) if after is not None else None,
                _source_ts_ms=ch.ts_ms,
                _source_lsn=int(ch.sequence) // 10 if ch.sequence is not None else None,
                _source_tx_id=None,
                _source_snapshot=ch.snapshot or ("true" if ch.op == "r" else "false"),
                _source_file=None,
                _source_pos=None,
                _source_row=None,
                _event_ts_ms=ch.ts_ms,
                _unavailable_columns=",".join(ch.unavailable) if ch.unavailable else None,
                _sequence=Decimal(ch.sequence) if ch.sequence is not None else None,
                _ingested_at=now,
                _old_key=Row(**{k: ch.old_key[k] for k in source.primary_key}) if ch.old_key else None,
            )
        )
    return rows


def bronze_frame(spark: SparkSession, source: Source, changes: Iterable[BronzeChange], first_offset: int = 0) -> DataFrame:
    """A bronze DataFrame of the given changes (for `apply_batch` or appending to bronze)."""
    return local_frame(spark, bronze_rows(source, changes, first_offset), bronze_schema(source))


# --------------------------------------------------------------------------- benchmark


def _bench_source(pipeline: Pipeline) -> Source:
    """The first single-bigint-key table source of the pipeline (products in the shop demo)."""
    for src in pipeline.sources.values():
        if src.kind == "table" and len(src.primary_key) == 1 and src.column(src.primary_key[0]).type == "bigint":
            return src
    raise ValueError("the benchmark needs a table source with a single bigint primary key")


def _value_expr(source: Source, column: str, salt: str) -> str:
    t = source.column(column).type
    if t == "string":
        return f"concat('{column}-', cast(id as string), '{salt}')"
    if t.startswith("decimal"):
        return f"cast((id % 1000) / 10 as {t})"
    if t in ("bigint", "int", "smallint"):
        return f"cast(id % 1000 as {t})"
    if t == "double" or t == "float":
        return f"cast(id / 7 as {t})"
    if t == "boolean":
        return "id % 2 = 0"
    if t == "date":
        return "date_add(date'2026-01-01', cast(id % 365 as int))"
    return "timestamp'2026-01-01 00:00:00'"


def _seed_tables(spark: SparkSession, pipeline: Pipeline, source: Source, rows: int) -> None:
    """The store's current and history rows for `rows` keys, one version each (sequence 10*id+1)."""
    key = source.primary_key[0]
    values = [f"{_value_expr(source, c, '')} as `{c}`" for c in source.value_columns]
    base = spark.range(rows).selectExpr(
        f"id as `{key}`", *values, "cast(id * 10 + 1 as decimal(38,0)) as _sequence",
        "timestamp_millis(1767225600000 + id) as _ts",
    )
    hashed = base.withColumn("_deleted", F.lit(False))
    hashed = hashed.withColumn("_row_hash", F.sha2(F.to_json(F.struct(*source.column_names)), 256))
    hashed.select(
        *source.column_names, "_row_hash", "_sequence", F.col("_ts").alias("_source_ts"), F.lit("r").alias("_op"),
        "_deleted", F.current_timestamp().alias("_updated_at"),
        F.lit(CURRENT_KIND).alias("_kind"),
    ).repartition(max(1, rows // 250_000)).write.format("delta").mode("append").saveAsTable(silver_store_table(pipeline, source))
    hashed.select(
        *source.column_names, "_row_hash", "_sequence", F.lit("r").alias("_op"), "_deleted",
        F.col("_ts").alias("_valid_from"), F.lit(None).cast("timestamp").alias("_valid_to"),
        F.lit(None).cast("decimal(38,0)").alias("_valid_to_sequence"), F.current_timestamp().alias("_recorded_at"),
        F.lit(HISTORY_KIND).alias("_kind"),
    ).repartition(max(1, rows // 250_000)).write.format("delta").mode("append").saveAsTable(silver_store_table(pipeline, source))


def _change_batch(spark: SparkSession, source: Source, rows: int, changes: int) -> DataFrame:
    """`changes` bronze rows over existing keys spread across the table: 80% updates,
    10% deletes, 10% inserts of new keys; sequences above every stored one."""
    key = source.primary_key[0]
    stride = max(1, rows // changes)
    top = rows * 10 + 10
    after = [f"{_value_expr(source, c, '-v2')} as `{c}`" for c in source.value_columns]
    df = spark.range(changes).selectExpr(
        "id as n",
        f"case when id % 10 = 9 then {rows} + id else (id * {stride}) % {rows} end as id",
        "case when id % 10 = 8 then 'd' when id % 10 = 9 then 'c' else 'u' end as op",
    )
    df = df.selectExpr("n", "op", "id", *after)
    schema = bronze_schema(source)
    return df.select(
        F.lit(source.topic).alias("_topic"),
        F.lit(0).alias("_partition"),
        F.col("n").alias("_offset"),
        F.current_timestamp().alias("_kafka_ts"),
        F.lit(None).cast("binary").alias("_raw_key"),
        F.lit(None).cast("binary").alias("_raw_value"),
        F.col("op").alias("_op"),
        F.struct(F.col("id").alias(key)).alias("_key"),
        F.lit(None).cast(schema["_before"].dataType).alias("_before"),
        F.when(F.col("op") != "d", F.struct(*[F.col("id").alias(c) if c == key else F.col(c) for c in source.column_names]))
        .cast(schema["_after"].dataType)
        .alias("_after"),
        (F.lit(1767225600000 + top) + F.col("n")).alias("_source_ts_ms"),
        F.lit(None).cast("bigint").alias("_source_lsn"),
        F.lit(None).cast("bigint").alias("_source_tx_id"),
        F.lit("false").alias("_source_snapshot"),
        F.lit(None).cast("string").alias("_source_file"),
        F.lit(None).cast("bigint").alias("_source_pos"),
        F.lit(None).cast("int").alias("_source_row"),
        F.lit(None).cast("bigint").alias("_event_ts_ms"),
        F.lit(None).cast("string").alias("_unavailable_columns"),
        (F.lit(top) + F.col("n") * 10 + 1).cast("decimal(38,0)").alias("_sequence"),
        F.current_timestamp().alias("_ingested_at"),
    )


class _PhaseCapture(logging.Handler):
    """Collects apply_batch's DEBUG phase timings while active."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.text = ""
        self._logger = logging.getLogger("lakehouse.silver")
        self._level = self._logger.level

    def emit(self, record: logging.LogRecord) -> None:
        self.text = record.getMessage()

    def __enter__(self) -> "_PhaseCapture":
        self._logger.addHandler(self)
        self._logger.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._level)


def _last_merge_metrics(spark: SparkSession, table: str) -> dict[str, int]:
    rows = DeltaTable.forName(spark, table).history(5).filter("operation = 'MERGE'").orderBy(F.col("version").desc()).limit(1).collect()
    return {k: int(v) for k, v in (rows[0]["operationMetrics"] or {}).items()} if rows else {}


LAYOUTS = ("no_dv", "dv", "dv_clustered")


def bench_silver(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    changes: int = 10_000,
    sizes: tuple[int, ...] = (100_000, 1_000_000),
    layouts: tuple[str, ...] = LAYOUTS,
) -> dict[str, Any]:
    """Apply one batch of `changes` changes to a source's store of each size, for each layout
    (`no_dv`: plain files; `dv`: deletion vectors, the default; `dv_clustered`: deletion vectors
    and the store liquid-clustered by the primary key instead of partitioned by kind, OPTIMIZEd
    after seeding); report per case seconds, the store MERGE's Delta metrics (history and
    current rows together) and rows rewritten per changed row, and per layout the time ratio of
    the largest to the smallest size. Tables go to fresh schemas (dropped afterwards)."""
    source = _bench_source(pipeline)
    run = uuid.uuid4().hex[:8]
    cases = []
    for layout in layouts:
        dv, clustered = layout != "no_dv", layout == "dv_clustered"
        for size in sizes:
            schema = f"bench_silver_{run}_{size}_{layout}"
            variant = dataclasses.replace(pipeline, tables=dataclasses.replace(pipeline.tables, catalog=None, silver_schema=schema))
            ensure_silver_tables(spark, variant, source, deletion_vectors=dv)
            store = silver_store_table(variant, source)
            if clustered:  # a partitioned table cannot be clustered: made again, clustered
                properties = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {store}").collect()
                              if not r["key"].startswith("delta.") or r["key"] in ("delta.enableChangeDataFeed", "delta.enableDeletionVectors")}
                spark.sql(f"DROP TABLE {store}")
                create_table(spark, store, silver_store_schema(source), properties=properties, cluster_by=source.primary_key)
            t0 = time.perf_counter()
            _seed_tables(spark, variant, source, size)
            if clustered:
                spark.sql(f"OPTIMIZE {store}")
            seed_s = time.perf_counter() - t0
            batch = _change_batch(spark, source, size, changes).localCheckpoint(eager=True)
            phases = _PhaseCapture()
            t0, began = time.perf_counter(), time.time()
            with phases:
                stats = apply_batch(batch, 0, variant, source, app_id=f"bench-{run}")
            seconds = time.perf_counter() - t0
            counts = (phase_resources(spark, [("batch", began, time.time())]) or {}).get("batch", {})
            m = _last_merge_metrics(spark, store)
            changed = m.get("numTargetRowsUpdated", 0) + m.get("numTargetRowsInserted", 0) + m.get("numTargetRowsDeleted", 0)
            rewritten = m.get("numTargetRowsCopied", 0) + m.get("numTargetRowsUpdated", 0)
            cases.append(
                {
                    "rows": size,
                    "layout": layout,
                    "seed_seconds": round(seed_s, 2),
                    "apply_seconds": round(seconds, 2),
                    "current_upserted": stats.current_upserted,
                    "history_written": stats.history_written,
                    "store_rows_copied": m.get("numTargetRowsCopied", 0),
                    "store_files_added": m.get("numTargetFilesAdded", 0),
                    "store_files_removed": m.get("numTargetFilesRemoved", 0),
                    "store_dvs_added": m.get("numTargetDeletionVectorsAdded", 0),
                    "store_merge_ms": m.get("executionTimeMs", 0),
                    "store_scan_ms": m.get("scanTimeMs", 0),
                    "rows_rewritten_per_changed_row": round(rewritten / changed, 2) if changed else None,
                    "phases": phases.text,
                    # counts that do not move with the machine's speed (None without the Spark UI)
                    "spark_jobs": counts.get("jobs"),
                    "sql_executions": counts.get("sql_executions"),
                    "rows_read": counts.get("rows_read"),
                }
            )
            spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    ratios = {}
    for layout in layouts:
        by_size = {c["rows"]: c["apply_seconds"] for c in cases if c["layout"] == layout}
        if len(by_size) > 1:
            ratios[layout] = round(by_size[max(by_size)] / by_size[min(by_size)], 2)
    return {"changes": changes, "sizes": list(sizes), "cases": cases, "time_ratio_largest_to_smallest": ratios}


def main(argv: list[str] | None = None) -> int:
    """`python -m testkit.bench.silver [--changes N] [--sizes a,b] [--lake DIR]`."""
    import argparse
    import json

    from lakehouse.declaration import load_pipeline
    from lakehouse.paths import REPO_ROOT, lake_root
    from lakehouse.spark import get_spark

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default=str(REPO_ROOT / "schemas" / "shop" / "pipeline.yml"))
    parser.add_argument("--lake", default=None)
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument("--sizes", default="100000,1000000")
    args = parser.parse_args(argv)
    lake = lake_root(args.lake)
    spark = get_spark(lake, app_name="bench-silver", ui=True)  # the counts come from the Spark UI
    result = bench_silver(spark, load_pipeline(Path(args.pipeline)), lake, args.changes, tuple(int(s) for s in args.sizes.split(",")))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
