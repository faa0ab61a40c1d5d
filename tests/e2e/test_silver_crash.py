"""kill -9 of the silver job in the middle of a batch, then a restart: the silver tables equal
those of an uninterrupted run over the same bronze (issue: idempotent batches, seed 001).

The jobs run as real subprocesses (`python -m jobs.bronze_ingest`, `jobs.silver_apply`), each
lake with its own metastore. Bronze is ingested from a simulated Debezium workload on the session's
broker into two lakes: one gets an uninterrupted silver run, the other
is SIGKILLed right after the first source's history MERGE committed (so that batch's current
MERGE has not run, or is running) and restarted on the same checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakehouse.declaration import Pipeline
from testkit.simulator import produce, simulate
from tests.e2e.test_bronze_kafka import REPO, _pipeline_file, _tag

# ~6 min on 2 cores (four Spark jobs as subprocesses): `make test-slow`
pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _run(module: str, pipeline_file: Path, lake: Path, log: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.Popen(
        [sys.executable, "-m", module, "--pipeline", str(pipeline_file), "--lake", str(lake), "--trigger", "available_now", *extra],
        cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )


def _finish(proc: subprocess.Popen, log: Path, timeout_s: float = 600) -> str:
    try:
        assert proc.wait(timeout_s) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return log.read_text()


def _commits(table_dir: Path) -> int:
    """How many Delta commits a table has (0 before it exists)."""
    return len(list((table_dir / "_delta_log").glob("*.json"))) if table_dir.exists() else 0


def _silver_rows(spark: SparkSession, lake: Path, pipeline: Pipeline) -> dict[str, list[tuple]]:
    """Every silver table's rows, by path, without the columns that record wall-clock time."""
    out = {}
    schema_dir = lake / "warehouse" / f"{pipeline.tables.silver_schema}.db"
    for table in sorted(p for p in schema_dir.iterdir() if (p / "_delta_log").exists()):
        df = spark.read.format("delta").load(str(table))
        columns = sorted(c for c in df.columns if c not in ("_recorded_at", "_updated_at", "recorded_at"))
        out[table.name] = sorted((tuple(r) for r in df.select(*columns).collect()), key=repr)
    return out


def test_kill_dash_9_inside_a_silver_batch_then_restart_equals_an_uninterrupted_run(
    spark: SparkSession, shop_pipeline: Pipeline, kafka_bootstrap: str, tmp_path: Path
) -> None:
    tag = "scrash" + _tag()
    pipeline_file, pipeline = _pipeline_file(shop_pipeline, tmp_path, tag)
    sim = simulate(pipeline, seed=21, events=1500, chaos="some")
    produce(sim.records, kafka_bootstrap)

    crashed, clean = tmp_path / "crashed", tmp_path / "clean"
    # the same topics into two lakes: the same bronze rows (only _ingested_at differs, which silver never reads)
    ingests = [(_run("jobs.bronze_ingest", pipeline_file, lake, tmp_path / f"bronze-{lake.name}.log", "--bootstrap", kafka_bootstrap),
                tmp_path / f"bronze-{lake.name}.log") for lake in (crashed, clean)]
    for proc, log in ingests:
        _finish(proc, log)

    uninterrupted = _run("jobs.silver_apply", pipeline_file, clean, tmp_path / "clean.log")

    first = _run("jobs.silver_apply", pipeline_file, crashed, tmp_path / "first.log")
    silver_dir = crashed / "warehouse" / f"{pipeline.tables.silver_schema}.db"
    histories = [silver_dir / f"{name}_history" for name in pipeline.sources]
    deadline = time.monotonic() + 600
    try:
        # tables are created with one commit; a second one is a batch's history MERGE
        while not any(_commits(h) >= 2 for h in histories):
            assert first.poll() is None, "the job ended before the kill:\n" + (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no history MERGE was ever committed"
            time.sleep(0.02)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the job, its Python workers and its Spark JVM
        first.wait(30)
    currents = [silver_dir / name for name in pipeline.sources]
    assert any(_commits(h) >= 2 for h in histories) and not all(_commits(c) >= 2 for c in currents), \
        "the kill came after every batch was complete: nothing was interrupted"

    restarted = _finish(_run("jobs.silver_apply", pipeline_file, crashed, tmp_path / "second.log"), tmp_path / "second.log")
    assert " batch " in restarted
    _finish(uninterrupted, tmp_path / "clean.log")

    after_crash, reference = _silver_rows(spark, crashed, pipeline), _silver_rows(spark, clean, pipeline)
    assert set(after_crash) == set(reference) and len(reference) >= 2 * len(pipeline.sources)
    for table, rows in reference.items():
        assert after_crash[table] == rows, f"silver table {table} differs after kill -9 and restart"
