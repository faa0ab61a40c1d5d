"""`run --continuous`: every stage's queries in one Spark application, fed while running, under
either schedule (`options.continuous`: all queries at once, or cycles of drains in flow order).

Changes produced while the run is going reach gold without anyone starting a stage, gold
equals the oracle over the truth while the queries still run, a stop request stops every query
between batches, and a later drain over the same checkpoints finds nothing left to do: nothing
was lost and nothing is written twice.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devstack.broker import create_topics
from lakehouse.bronze import run_bronze
from lakehouse.continuous import ContinuousReport, run_continuous
from lakehouse.declaration import Pipeline
from lakehouse.gold import run_gold
from lakehouse.silver import run_silver
from lakehouse.spark import ensure_schemas
from lakehouse.tables import gold_table
from lakehouse.verify.views import verify_pipeline
from testkit.bench.ingest import isolated_pipeline
from testkit.simulator import produce, simulate, write_truth
from tests.integration.test_bronze import _tag
from tests.shop_views import narrowed

pytestmark = [pytest.mark.kafka]

SEED, EVENTS = 21, 150
INTERVALS = {"bronze": "1 second", "silver": "1 second", "gold": "1 second"}


def _gold_rows(spark: SparkSession, pipeline: Pipeline) -> int:
    """Rows in the pipeline's gold tables (0 until gold has been built from something)."""
    tables = [gold_table(pipeline, v) for v in pipeline.views]
    return sum(spark.table(t).count() for t in tables) if all(spark.catalog.tableExists(t) for t in tables) else 0


def _wait(condition, timeout_s: float, every_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every_s)
    return False


def _start(spark: SparkSession, pipeline: Pipeline, lake: Path, bootstrap: str, schedule: str):
    """A continuous run of `pipeline` under `schedule` in a thread: (stop event, thread, outcome)."""
    stop = threading.Event()
    outcome: list[ContinuousReport | BaseException] = []
    scheduled = pipeline.with_options(continuous=schedule)

    def run() -> None:
        try:
            outcome.append(run_continuous(spark, scheduled, lake, bootstrap, stop=stop))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            outcome.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    return stop, runner, outcome


def _stopped(stop: threading.Event, runner: threading.Thread, outcome: list) -> ContinuousReport:
    stop.set()
    runner.join(timeout=300)
    assert not runner.is_alive(), "the continuous run did not stop"
    (report,) = outcome
    assert isinstance(report, ContinuousReport), report
    assert report.restarts == {}
    return report


@pytest.mark.long
def test_changes_produced_while_running_reach_gold_under_either_schedule_and_a_stop_loses_nothing(
    spark: SparkSession, shop_pipeline: Pipeline, kafka_bootstrap: str, lake: Path, tmp_path: Path
) -> None:
    """A chained run takes the first burst and is stopped once gold has read from it; a
    concurrent run over the same checkpoints takes the second burst and converges to the oracle
    while it runs; then drains find nothing left. Both schedules, taking turns on one lake."""
    whole = isolated_pipeline(shop_pipeline, "cont" + _tag())
    whole = whole.with_options(intervals=INTERVALS)
    sim = simulate(whole, seed=SEED, events=EVENTS, chaos="some")
    write_truth(sim, tmp_path / "truth")
    # one view and its two sources: five queries (bronze x2, silver x2, gold) show what a dozen would
    pipeline = narrowed(whole, "orders_enriched")
    records = [r for r in sim.records if r.topic in pipeline.topics]
    half = len(records) // 2
    # Debezium creates every captured table's topic with its snapshot. (A topic that does not
    # exist yet makes its bronze query fail and restart with backoff until it does: the
    # continuous restart policy, in tests/unit/test_streaming.py.)
    create_topics(kafka_bootstrap, list(pipeline.topics), 1)
    ensure_schemas(spark, pipeline)

    stop, runner, outcome = _start(spark, pipeline, lake, kafka_bootstrap, "chained")
    try:
        produce(records[:half], kafka_bootstrap)
        assert _wait(lambda: bool(outcome) or _gold_rows(spark, pipeline) > 0, 240), "the chained run never reached gold"
        assert not outcome, f"the chained run ended early: {outcome}"
    finally:
        chained = _stopped(stop, runner, outcome)
    assert chained.schedule == "chained" and chained.cycles >= 1
    assert chained.bronze.records == half and chained.bronze.quarantined == 0

    stop, runner, outcome = _start(spark, pipeline, lake, kafka_bootstrap, "concurrent")
    try:
        produce(records[half:], kafka_bootstrap)
        assert _wait(lambda: bool(outcome) or verify_pipeline(spark, pipeline, tmp_path / "truth").ok, 300, every_s=5), (
            "gold never converged to the truth while running:\n" + verify_pipeline(spark, pipeline, tmp_path / "truth").render()
        )
        assert not outcome, f"the continuous run ended early: {outcome}"
    finally:
        concurrent = _stopped(stop, runner, outcome)
    assert concurrent.schedule == "concurrent" and concurrent.cycles == 0
    assert concurrent.bronze.records == len(records) - half and concurrent.bronze.quarantined == 0
    assert not any(q.isActive for q in spark.streams.active if q.name and pipeline.name in q.name)

    # A drain over the same checkpoints: nothing was left behind, nothing is read twice.
    assert run_bronze(spark, pipeline, lake, kafka_bootstrap).records == 0
    assert sum(s.changes_read for s in run_silver(spark, pipeline, lake).sources.values()) == 0
    assert all(run.changes_read == 0 for run in run_gold(spark, pipeline, lake).views.values())
    assert verify_pipeline(spark, pipeline, tmp_path / "truth").ok


@pytest.mark.long
def test_sigterm_to_the_whole_process_group_stops_the_job_cleanly_and_loses_nothing(
    spark: SparkSession, shop_pipeline: Pipeline, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """systemd's default KillMode and a Kubernetes pod stop send SIGTERM to every process of the
    job's group, its Spark JVM included. The job still stops between batches, says so and exits
    0 (the JVM does not hear SIGTERM: `lakehouse.spark.jvm_deaf_to_sigterm`); every record it
    took in is in bronze once, and a drain afterwards finds the rest."""
    import os
    import signal
    import subprocess
    import sys

    from tests.e2e.test_bronze_kafka import REPO, _job, _pipeline_file

    tag = "term" + _tag()
    pipeline_file, pipeline = _pipeline_file(shop_pipeline, tmp_path, tag, "orders_enriched")
    sim = simulate(pipeline, seed=SEED, events=EVENTS, chaos="none")
    records = [r for r in sim.records if r.topic in pipeline.topics]
    create_topics(kafka_bootstrap, list(pipeline.topics), 1)
    produce(records, kafka_bootstrap)
    lake, log = tmp_path / "lake", tmp_path / "job.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    job = subprocess.Popen(
        [sys.executable, "-m", "jobs.run_continuous", "--pipeline", str(pipeline_file), "--lake", str(lake),
         "--bootstrap", kafka_bootstrap],
        cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        assert _wait(lambda: "continuous cycle 1:" in log.read_text() or job.poll() is not None, 300, every_s=1), log.read_text()
        os.killpg(job.pid, signal.SIGTERM)  # the whole group: the job, its Spark JVM, its Python workers
        code = job.wait(timeout=300)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    text = log.read_text()
    assert code == 0, text
    assert "stopped cleanly" in text and "Traceback" not in text and "Py4J" not in text, text

    # a drain over the job's checkpoints takes what it had not read; bronze then holds every record once
    drain = _job(pipeline_file, lake, kafka_bootstrap, 1000, tmp_path / "drain.log")
    assert drain.wait(400) == 0, (tmp_path / "drain.log").read_text()[-3000:]
    taken = []
    for source in pipeline.sources.values():
        path = lake / "warehouse" / f"{pipeline.tables.bronze_schema}.db" / source.name
        taken += [tuple(r) for r in spark.read.format("delta").load(str(path)).select("_topic", "_partition", "_offset").collect()]
    quarantine = lake / "warehouse" / f"{pipeline.tables.bronze_schema}.db" / "_quarantine"
    if quarantine.exists():
        taken += [tuple(r) for r in spark.read.format("delta").load(str(quarantine)).select("topic", "partition", "offset").collect()]
    assert len(taken) == len(set(taken)) == len(records)
