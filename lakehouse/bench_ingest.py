"""Benchmark: bronze ingest throughput against the raw ceiling, on the same Kafka data.

The ceiling is what this machine can do without parsing: Spark reads the same topics with
`availableNow` and appends key, value and coordinates to one Delta table. The real ingest
then reads the same topics on a fresh checkpoint and writes the bronze tables and
quarantine. Both run in one process on one session, each twice (fresh checkpoint and tables
each time) and the better time counts, so neither pays the JVM's warm-up alone: the ratio
says what parsing, validation and per-table writes cost, independently of the machine's speed.

Everything the benchmark creates is isolated (its own pipeline name, topic prefix, table
schemas and checkpoints) and dropped afterwards unless `keep=True`.
"""

from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import SparkSession

from lakehouse.bronze import KAFKA_COLUMNS, ensure_bronze_tables, kafka_stream, run_bronze
from lakehouse.config import Pipeline
from lakehouse.paths import checkpoint_dir
from lakehouse.spark import ensure_schemas


def isolated_pipeline(pipeline: Pipeline, tag: str) -> Pipeline:
    """The same sources under a new name, topic prefix and table schemas (nothing shared)."""
    name = f"{pipeline.name}_{tag}"
    prefix = f"{pipeline.kafka.topic_prefix}-{tag}"
    kafka = replace(pipeline.kafka, topic_prefix=prefix)
    tables = replace(
        pipeline.tables,
        bronze_schema=f"{name}_bronze",
        silver_schema=f"{name}_silver",
        gold_schema=f"{name}_gold",
        quality_schema=f"{name}_quality",
    )
    sources = {n: replace(s, topic=f"{prefix}.{kafka.source_schema}.{n}") for n, s in pipeline.sources.items()}
    return replace(pipeline, name=name, kafka=kafka, tables=tables, sources=sources)


def _produce(pipeline: Pipeline, bootstrap: str, events: int, seed: int) -> int:
    from lakehouse.simulator import produce, simulate

    simulation = simulate(pipeline, seed=seed, events=events)
    return produce(simulation.records, bootstrap)


def _raw_ceiling(spark: SparkSession, pipeline: Pipeline, bootstrap: str, table: str, checkpoint: Path, max_offsets: int) -> float:
    """Seconds to copy the topics, unparsed, into one Delta table (availableNow)."""
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} (key BINARY, value BINARY, topic STRING, `partition` INT, "
        "`offset` BIGINT, timestamp TIMESTAMP) USING DELTA"
    )
    started = time.monotonic()
    query = (
        kafka_stream(spark, bootstrap, pipeline.kafka.starting_offsets, max_offsets, topics=pipeline.topics)
        .select(*KAFKA_COLUMNS)
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .toTable(table)
    )
    query.awaitTermination()
    return time.monotonic() - started


def bench_ingest(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    bootstrap: str,
    events: int,
    *,
    parsers: tuple[str, ...] = ("hybrid",),
    max_offsets_per_trigger: int | None = None,
    seed: int = 0,
    keep: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Produce `events` simulated changes once, then time the raw copy and the bronze ingest.

    Returns `records` (Kafka records produced: snapshot rows, changes, tombstones), then for the
    raw ceiling and each parser the seconds and events/s (Kafka records per second), and
    `ratio` = ingest events/s / raw events/s for the first parser (`ingest_*` repeat its figures).
    """
    say = progress or (lambda _m: None)
    tag = "bench" + uuid.uuid4().hex[:8]
    bench = isolated_pipeline(pipeline, tag)
    lake = Path(lake)
    max_offsets = max_offsets_per_trigger or bench.kafka.max_offsets_per_trigger
    records = _produce(bench, bootstrap, events, seed)
    say(f"bench: produced {records} Kafka records for {events} simulated changes (topics {bench.kafka.topic_prefix}.*)")
    ensure_schemas(spark, bench)  # the raw copies' tables live in the bench's bronze schema
    checkpoints = checkpoint_dir(lake, bench.name, "")
    result: dict[str, Any] = {"events": events, "records": records, "max_offsets_per_trigger": max_offsets}
    try:
        # Best of two raw copies: the first also pays the JVM's warm-up, which would flatter
        # whatever runs after it. The parsers then run in the order given.
        raw_table = bench.tables.qualified("bronze", "_bench_raw")
        raw_s = min(_raw_ceiling(spark, bench, bootstrap, f"{raw_table}{i}", checkpoints / f"raw{i}", max_offsets) for i in (1, 2))
        result.update(raw_seconds=round(raw_s, 3), raw_events_per_s=round(records / raw_s, 1))
        say(f"bench: raw ceiling {records / raw_s:,.0f} records/s ({raw_s:.1f}s)")
        for parser in parsers:
            # Best of two as well, each into its own bronze tables from its own checkpoint, so
            # neither the raw copy nor the ingest is measured with a cold JVM.
            took = float("inf")
            for attempt in (1, 2):
                target = replace(bench, tables=replace(bench.tables, bronze_schema=f"{bench.tables.bronze_schema}_{parser}{attempt}"))
                ensure_bronze_tables(spark, target)  # created before the clock starts, as the raw tables are
                started = time.monotonic()
                report = run_bronze(spark, target, lake, bootstrap, max_offsets_per_trigger=max_offsets,
                                    parser=parser, checkpoint=checkpoints / f"bronze_{parser}{attempt}", progress=progress)
                took = min(took, time.monotonic() - started)
            result[f"{parser}_seconds"] = round(took, 3)
            result[f"{parser}_events_per_s"] = round(records / took, 1)
            result[f"{parser}_ratio"] = round(raw_s / took, 3)
            result[f"{parser}_batches"] = report.batches
            result[f"{parser}_quarantined"] = report.quarantined
            say(f"bench: {parser} ingest {records / took:,.0f} records/s ({took:.1f}s, {raw_s / took:.0%} of raw)")
        first = parsers[0]
        result.update(
            parser=first,
            ingest_seconds=result[f"{first}_seconds"],
            ingest_events_per_s=result[f"{first}_events_per_s"],
            ratio=result[f"{first}_ratio"],
        )
    finally:
        if not keep:
            _clean(spark, bench, checkpoints, bootstrap)
    return result


def _clean(spark: SparkSession, bench: Pipeline, checkpoints: Path, bootstrap: str) -> None:
    """Drop what the benchmark made: its schemas (and tables), checkpoints and topics."""
    for schema in bench.tables.schemas():
        spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    for row in spark.sql(f"SHOW SCHEMAS LIKE '{bench.tables.bronze_schema}_*'").collect():
        spark.sql(f"DROP SCHEMA IF EXISTS {row[0]} CASCADE")
    shutil.rmtree(checkpoints, ignore_errors=True)
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.delete_topics(list(bench.topics), operation_timeout=30).values():
            try:
                future.result(timeout=30)
            except Exception:  # noqa: BLE001 - a leftover bench topic is harmless
                pass
    except Exception:  # noqa: BLE001
        pass
