"""Bronze ingest through the real Kafka broker (lakehouse.bronze.run_bronze), real Spark and Delta.

- fuzzed traffic through Kafka: bronze + quarantine = everything produced, exact coordinates,
  specific reasons, and a rerun on the same checkpoint adds nothing;
- kill -9 of the ingest job mid-stream, restart: bronze complete and unique by coordinates;
- the simulator's workload end to end: the latest bronze version per key is the source truth;
- the ingest benchmark runs end to end (smoke).

Every test uses its own topic prefix, table schemas and checkpoints (`isolated_pipeline`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from lakehouse import bronze
from lakehouse.declaration import Pipeline, Source
from lakehouse.tables import bronze_table, quarantine_table
from testkit.bench.ingest import isolated_pipeline
from tests.conftest import REPO
from tests.integration.test_bronze import UTC, _tag, _valid_records
from tests.shop_views import five_tables, five_tables_file, narrowed_file
from tests.unit.test_debezium import change, decimal_b64, dumps



def _produce(bootstrap: str, records: list[tuple[str, bytes | None, bytes | None]]) -> list[tuple[str, int, int]]:
    """Produce in order; returns each record's (topic, partition, offset)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    coordinates: list[Any] = [None] * len(records)

    def delivered(index: int):  # noqa: ANN202
        def callback(err: Any, msg: Any) -> None:
            assert err is None, err
            coordinates[index] = (msg.topic(), msg.partition(), msg.offset())
        return callback

    for i, (topic, key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, on_delivery=delivered(i))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert all(coordinates)
    return coordinates


def _topics(bootstrap: str) -> set[str] | None:
    from lakehouse.kafka import KafkaConnection, check_connection

    return check_connection(KafkaConnection(bootstrap))


def _fuzz(pipeline: Pipeline, rng: random.Random) -> list[tuple[str, bytes | None, bytes | None, str | None]]:
    """Valid traffic with malformed records mixed in: (topic, key, value, expected reason or None)."""
    out: list[tuple[str, bytes | None, bytes | None, str | None]] = []
    for source in pipeline.sources.values():
        out += [(source.topic, k, v, None) for k, v in _valid_records(source, rng, 25, schemas=rng.random() < 0.5)]
    products = pipeline.source("products")
    row = {"id": 5, "sku": "S", "title": "T", "price": Decimal("9.99"), "description": "D"}
    key, value = change(products, "c", after=row)
    envelope = json.loads(value)

    def edited(**changes: Any) -> bytes:
        return dumps({**envelope, **changes})

    def after(**changes: Any) -> bytes:
        return edited(after={**envelope["after"], **changes})

    t = products.topic
    bad = [
        (t, key, b"\xff\xfe" + rng.randbytes(48), "value is not UTF-8 text: invalid byte at position 0"),
        (t, key, value[: len(value) // 2], "value is not valid JSON"),
        (t, key, after(price="abc"), "value.after.price: 'abc' is not a decimal(10,2)"),
        (t, key, after(price=decimal_b64(Decimal("123456789.00"), 2)), "does not fit decimal(10,2)"),
        (t, key, after(id="5"), "value.after.id: '5' is not a bigint"),
        (t, key, edited(op="z"), "value.op: 'z' is not a Debezium operation"),
        (t, key, edited(op=None), "value.op is missing"),
        (t, key, edited(source={"ts_ms": 1}), "value.source.lsn is missing"),
        (t, b'{"id":6}', value, "key does not match value.after: key.id = 6 but value.after.id = 5"),
        (t, b'{"sku":"S"}', value, "key: fields do not match the primary key (id): missing id; unexpected sku"),
        (t, None, None, "tombstone (null value) with a null key"),
        (f"{pipeline.kafka.topic_prefix}.{pipeline.kafka.source_schema}.ghosts", key, value,
         f"topic '{pipeline.kafka.topic_prefix}.{pipeline.kafka.source_schema}.ghosts' is declared by no source"),
    ]
    for record in bad:
        out.insert(rng.randint(0, len(out)), record)
    return out


def _create_topics(bootstrap: str, pipeline: Pipeline, extra: tuple[str, ...] = ()) -> None:
    from devstack.broker import create_topics

    topics = list(pipeline.topics) + list(extra)
    create_topics(bootstrap, topics[:1], partitions=2)  # one topic with two partitions
    create_topics(bootstrap, topics[1:], partitions=1)


def _table_rows(spark: SparkSession, name: str, columns: list[str]) -> list[tuple]:
    return [tuple(r) for r in spark.table(name).select(*columns).collect()]


@pytest.mark.long
@pytest.mark.kafka
def test_fuzzed_traffic_through_kafka_bronze_plus_quarantine_is_everything(spark: SparkSession, shop_pipeline: Pipeline, kafka_bootstrap: str, lake: Path) -> None:
    pipeline = isolated_pipeline(five_tables(shop_pipeline), "fuzz" + _tag())
    rng = random.Random(11)
    records = _fuzz(pipeline, rng)
    ghost = f"{pipeline.kafka.topic_prefix}.{pipeline.kafka.source_schema}.ghosts"
    outside = f"{pipeline.kafka.topic_prefix}.other"  # not <prefix>.<schema>.*: never subscribed
    _create_topics(kafka_bootstrap, pipeline, (outside,))
    assert not bronze.undeclared_topics_exist(_topics(kafka_bootstrap), pipeline)  # no undeclared stream needed
    from devstack.broker import create_topics

    create_topics(kafka_bootstrap, [ghost], partitions=1)
    assert bronze.undeclared_topics_exist(_topics(kafka_bootstrap), pipeline)
    coordinates = _produce(kafka_bootstrap, [(t, k, v) for t, k, v, _ in records] + [(outside, b"x", b"y")])[:-1]
    expected_bad = {c: reason for c, (_, _, _, reason) in zip(coordinates, records) if reason}
    expected_good = {c for c, (_, _, _, reason) in zip(coordinates, records) if not reason}

    messages: list[str] = []
    report = bronze.run_bronze(spark, pipeline, lake, kafka_bootstrap, max_offsets_per_trigger=20, progress=messages.append)

    good = _table_rows_all(spark, pipeline)
    quarantined = {(r["topic"], r["partition"], r["offset"]): r["reason"]
                   for r in spark.table(quarantine_table(pipeline)).collect()}
    assert len(good) == len(set(good)), "bronze must be unique by (topic, partition, offset)"
    assert set(good) == expected_good
    assert set(quarantined) == set(expected_bad)
    for coordinate, reason in quarantined.items():
        assert expected_bad[coordinate] in reason, (reason, expected_bad[coordinate])
    assert report.records == len(records) and report.rows == len(expected_good) and report.quarantined == len(expected_bad)
    assert report.unknown_topic_records == 1
    assert report.tables["products"].quarantined == len(expected_bad) - 1
    assert all(t.batches >= 2 for t in report.tables.values())  # at most 20 records per batch
    assert any("/products batch 1:" in m for m in messages) and "quarantine" in report.render()
    assert any(f"5 source streams + 1 for undeclared {pipeline.kafka.topic_prefix}." in m for m in messages), messages[:1]
    assert report.decoding == "JVM decoder" and "parser hybrid: JVM decoder" in report.render()  # classic, jar attached

    again = bronze.run_bronze(spark, pipeline, lake, kafka_bootstrap)  # same checkpoint: nothing new
    assert again.records == 0 and again.rows == 0
    assert len(_table_rows_all(spark, pipeline)) == len(expected_good)
    assert spark.table(quarantine_table(pipeline)).count() == len(expected_bad)


def _table_rows_all(spark: SparkSession, pipeline: Pipeline) -> list[tuple]:
    rows: list[tuple] = []
    for source in pipeline.sources.values():
        rows += _table_rows(spark, bronze_table(pipeline, source), ["_topic", "_partition", "_offset"])
    return rows


# --------------------------------------------------------------------------- kill -9 and restart


def _pipeline_file(shop_pipeline: Pipeline, directory: Path, tag: str, *views: str) -> tuple[Path, Pipeline]:
    """A copy of the shop pipeline file (its five core tables, or only `views` and the sources
    they read) with its own name, topic prefix and schemas."""
    from lakehouse.declaration import load_pipeline

    raw = five_tables_file(yaml.safe_load((REPO / "schemas" / "shop" / "pipeline.yml").read_text()))
    if views:
        raw = narrowed_file(raw, *views)
    raw["name"] = f"shop_{tag}"
    raw["kafka"]["topic_prefix"] = f"shop-{tag}"
    for layer in ("bronze", "silver", "gold", "quality"):
        raw["tables"][f"{layer}_schema"] = f"shop_{tag}_{layer}"
    path = directory / "pipeline.yml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path, load_pipeline(path)


def _job(pipeline_file: Path, lake: Path, bootstrap: str, max_offsets: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.bronze_ingest", "--pipeline", str(pipeline_file), "--lake", str(lake),
         "--bootstrap", bootstrap, "--trigger", "available_now", "--max-offsets", str(max_offsets)],
        cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )


@pytest.mark.long
@pytest.mark.kafka
def test_kill_dash_9_mid_stream_then_restart_is_complete_and_unique(spark: SparkSession, shop_pipeline: Pipeline, kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = "crash" + _tag()
    # orders_enriched's two sources: two streams killed and restarted together (no undeclared topic here)
    pipeline_file, pipeline = _pipeline_file(shop_pipeline, tmp_path, tag, "orders_enriched")
    job_lake = tmp_path / "lake"  # its own metastore: the test session holds the shared one
    rng = random.Random(5)
    records = []
    for source in pipeline.sources.values():
        records += [(source.topic, k, v) for k, v in _valid_records(source, rng, 50)]
    rng.shuffle(records)
    records.insert(17, (pipeline.source("orders").topic, b'{"id":1}', b"not json"))
    _create_topics(kafka_bootstrap, pipeline)
    coordinates = _produce(kafka_bootstrap, records)

    checkpoints = job_lake / "checkpoints" / pipeline.name / "bronze"  # one per source stream

    def in_second_batch() -> bool:
        """Some stream committed batch 0 and has planned batch 1 (it is writing it now)."""
        return any((checkpoints / s / "commits" / "0").exists() and (checkpoints / s / "offsets" / "1").exists()
                   for s in pipeline.sources)

    first = _job(pipeline_file, job_lake, kafka_bootstrap, 20, tmp_path / "first.log")
    deadline = time.monotonic() + 300
    try:
        while not in_second_batch():
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no stream ever committed its first batch"
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.0))  # somewhere inside a batch
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the job, its Python workers and its Spark JVM
        first.wait(30)

    # the restart replays each interrupted batch as its offset log planned it, then takes the
    # rest at once (a larger limit than the first job's: fewer batches, the same replay)
    second = _job(pipeline_file, job_lake, kafka_bootstrap, 1000, tmp_path / "second.log")
    try:
        assert second.wait(400) == 0, (tmp_path / "second.log").read_text()[-3000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    log_text = (tmp_path / "second.log").read_text()
    assert "done" in log_text and " batch " in log_text, "the restart found nothing left to do: the kill came too late"
    assert "2 source streams from " in log_text, "no undeclared topic: no stream for them, and the start line says so"

    warehouse = job_lake / "warehouse"
    good: list[tuple] = []
    for source in pipeline.sources.values():
        path = warehouse / f"{pipeline.tables.bronze_schema}.db" / source.name
        good += [tuple(r) for r in spark.read.format("delta").load(str(path)).select("_topic", "_partition", "_offset").collect()]
    bad = spark.read.format("delta").load(str(warehouse / f"{pipeline.tables.bronze_schema}.db" / "_quarantine")).collect()
    assert len(good) == len(set(good)), f"duplicates after restart: {[c for c, n in Counter(good).items() if n > 1][:5]}"
    assert set(good) | {(r["topic"], r["partition"], r["offset"]) for r in bad} == set(coordinates)
    assert len(bad) == 1 and "value is not valid JSON" in bad[0]["reason"]


# --------------------------------------------------------------------------- the simulator, end to end


def _latest_by_key(rows: list[Any], source: Source) -> dict[tuple, dict[str, Any]]:
    """What bronze says each table holds: per key the latest by sequence, TOAST gaps filled from earlier versions."""
    state: dict[tuple, dict[str, Any] | None] = {}
    for row in sorted((r for r in rows if r["_sequence"] is not None), key=lambda r: r["_sequence"]):
        key = tuple(row["_key"][k] for k in source.primary_key)
        if row["_op"] == "d":
            state[key] = None
            continue
        if row["_op"] not in ("c", "r", "u"):
            continue
        image = row["_after"].asDict()
        for column in (row["_unavailable_columns"] or "").split(","):
            if column:
                image[column] = (state.get(key) or {}).get(column)
        state[key] = image
    return {k: v for k, v in state.items() if v is not None}


def _plain(value: Any) -> Any:
    """Datetimes as naive UTC: Spark hands back naive local time, the simulator aware UTC."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


@pytest.mark.kafka
def test_simulated_workload_end_to_end(spark: SparkSession, shop_pipeline: Pipeline, kafka_bootstrap: str, lake: Path) -> None:
    simulator = pytest.importorskip("testkit.simulator", reason="testkit/simulator is not there yet")
    pipeline = isolated_pipeline(five_tables(shop_pipeline), "sim" + _tag())
    sim = simulator.simulate(pipeline, seed=4, events=300, schemas_enabled=True)
    produced = simulator.produce(sim.records, kafka_bootstrap)
    report = bronze.run_bronze(spark, pipeline, lake, kafka_bootstrap)
    assert report.records == produced and report.quarantined == 0
    per_topic = Counter(r.topic for r in sim.records)
    for source in pipeline.sources.values():
        rows = spark.table(bronze_table(pipeline, source)).collect()
        assert len(rows) == per_topic[source.topic]
        latest = _latest_by_key(rows, source)
        truth = {tuple(r[k] for k in source.primary_key): r for r in sim.truth[source.name]}
        assert set(latest) == set(truth), source.name
        for key, row in truth.items():
            assert {c: _plain(v) for c, v in latest[key].items()} == {c: _plain(v) for c, v in row.items()}, (source.name, key)


@pytest.mark.slow  # 24 s of a benchmark's run whose figures no test can judge; `make bench` runs it whole
def test_bench_smoke(spark: SparkSession, shop_pipeline: Pipeline, kafka_bootstrap: str, lake: Path) -> None:
    pytest.importorskip("testkit.simulator", reason="the benchmark produces simulated events")
    from testkit.bench.ingest import bench_ingest

    result = bench_ingest(spark, five_tables(shop_pipeline), lake, kafka_bootstrap, events=150, warm_rounds=1)
    assert result["records"] > 150 and result["cold_records"] > 150
    for key in ("raw_seconds", "raw_events_per_s", "ingest_seconds", "ingest_events_per_s", "ratio", "cold_ratio"):
        assert result[key] > 0, key
