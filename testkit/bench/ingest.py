"""Benchmark: bronze ingest throughput against the raw ceiling, on the same Kafka data.

The ceiling is what this machine can do without parsing: Spark reads the same topics with
`availableNow` and appends key, value and coordinates to one Delta table. The real ingest
reads the same topics into the bronze tables and quarantine. Both run in one process on one
session, side by side, in rounds. A cold round: new streams and tables (from the command line,
in a new JVM), paying start-up, code generation and the JVM compiling the generated code (its
JIT time was about two thirds of the process's CPU time in a 121k-record cold drain). Then warm
rounds drain freshly produced records with new runs on the same checkpoints and tables, as a
scheduled job does. The warm ratio says what parsing, validation and per-table writes cost,
independently of the machine's speed; the cold ratio what a small drain from a standing start
costs. Both are reported.

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

from lakehouse.bronze import KAFKA_COLUMNS, PARSERS, ensure_bronze_tables, kafka_stream, run_bronze
from lakehouse.declaration import Pipeline
from lakehouse.errors import CdcEnrichError
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
    from testkit.simulator import produce, simulate

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
    warm_rounds: int = 2,
    keep: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Time the raw copy and the bronze ingest over the same Kafka records, cold and running.

    Round 0 (cold): `events` simulated changes are produced and drained by new streams into
    new tables: this pays start-up, Spark's code generation and the JVM compiling that code,
    a fixed cost that dominates small drains. Then `warm_rounds` times, `events` more changes
    are produced and drained by new runs from the same checkpoints into the same tables, in
    the now warm process. Raw and ingest run side by side in every round; the best warm round
    of each counts.

    Returns `records` (Kafka records of one warm round), the raw ceiling's and each parser's
    seconds and events/s (records per second) for the best warm round, `ratio` = ingest
    events/s / raw events/s for the first parser (`ingest_*` repeat its figures), and the
    same for the cold round under `cold_*`.
    """
    unknown = [p for p in parsers if p not in PARSERS]
    if unknown or not parsers:
        raise CdcEnrichError(f"bench ingest: unknown parser(s) {', '.join(unknown) or '(none given)'}; expected some of {', '.join(PARSERS)}")
    say = progress or (lambda _m: None)
    tag = "bench" + uuid.uuid4().hex[:8]
    bench = isolated_pipeline(pipeline, tag)
    lake = Path(lake)
    max_offsets = max_offsets_per_trigger or bench.kafka.max_offsets_per_trigger
    ensure_schemas(spark, bench)  # the raw copy's table lives in the bench's bronze schema
    checkpoints = checkpoint_dir(lake, bench.name, "")
    raw_table = bench.tables.qualified("bronze", "_bench_raw")
    targets = {p: replace(bench, tables=replace(bench.tables, bronze_schema=f"{bench.tables.bronze_schema}_{p}")) for p in parsers}
    result: dict[str, Any] = {"events": events, "max_offsets_per_trigger": max_offsets, "warm_rounds": warm_rounds}
    best: dict[str, tuple[float, int]] = {}  # side -> (records/s, records) of its best warm round
    try:
        for round_no in range(warm_rounds + 1):
            records = _produce(bench, bootstrap, events, seed + round_no)
            label = "cold" if round_no == 0 else f"warm {round_no}"
            say(f"bench {label}: produced {records} Kafka records for {events} simulated changes (topics {bench.kafka.topic_prefix}.*)")
            timings = {"raw": _raw_ceiling(spark, bench, bootstrap, raw_table, checkpoints / "raw", max_offsets)}
            for parser in parsers:
                if round_no == 0:
                    ensure_bronze_tables(spark, targets[parser])  # before the clock, as the raw table is
                started = time.monotonic()
                report = run_bronze(spark, targets[parser], lake, bootstrap, max_offsets_per_trigger=max_offsets,
                                    parser=parser, checkpoint=checkpoints / f"bronze_{parser}")
                timings[parser] = time.monotonic() - started
                if report.records != records or report.quarantined:
                    raise CdcEnrichError(f"bench ingest: {parser} read {report.records} of {records} records, "
                                         f"quarantined {report.quarantined}: the figures would not compare like with like")
            for side, seconds in timings.items():
                rate = records / seconds
                if round_no == 0:
                    result[f"cold_{side}_seconds"] = round(seconds, 3)
                    result[f"cold_{side}_events_per_s"] = round(rate, 1)
                elif rate > best.get(side, (0.0, 0))[0]:
                    best[side] = (rate, records)
            say(f"bench {label}: raw {records / timings['raw']:,.0f} records/s ({timings['raw']:.1f}s); "
                + "; ".join(f"{p} {records / timings[p]:,.0f} records/s ({timings[p]:.1f}s, {timings['raw'] / timings[p]:.0%} of raw)" for p in parsers))
            if round_no == 0:
                result["cold_records"] = records
                result["cold_ratio"] = round(timings["raw"] / timings[parsers[0]], 3)
        final = best or {side: (result[f"cold_{side}_events_per_s"], result["cold_records"]) for side in ("raw", *parsers)}
        raw_rate, raw_records = final["raw"]
        result.update(records=raw_records, raw_seconds=round(raw_records / raw_rate, 3), raw_events_per_s=round(raw_rate, 1))
        for parser in parsers:
            rate, n = final[parser]
            result[f"{parser}_seconds"] = round(n / rate, 3)
            result[f"{parser}_events_per_s"] = round(rate, 1)
            result[f"{parser}_ratio"] = round(rate / raw_rate, 3)
        first = parsers[0]
        result.update(
            parser=first,
            ingest_seconds=result[f"{first}_seconds"],
            ingest_events_per_s=result[f"{first}_events_per_s"],
            ratio=result[f"{first}_ratio"],
        )
        say(f"bench: running ingest at {result['ratio']:.0%} of the raw ceiling (cold start: {result['cold_ratio']:.0%})")
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
