"""Shared fixtures: one SparkSession for the whole run (2 cores), a lake under a temp dir."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test run's lake root: warehouse, metastore, checkpoints, broker files."""
    return tmp_path_factory.mktemp("lake")


# Every Spark JVM the suite starts (the session below, the job processes of the e2e tests, the
# local Spark Connect server) compiles with the JIT's first tier only: a test's JVM runs minutes
# of planning code over a few rows, where C2 compiler threads took 30 % of a pytest worker
# JVM's CPU (91 s of 304 s, eleven minutes into a run) on a machine the suite keeps busy.
# Eight silver and gold specs on two workers, run alternately: 263 s and 260 s with C2, 174 s
# and 208 s without.
os.environ.setdefault("CDC_ENRICH_JVM_OPTIONS", "-XX:TieredStopAtLevel=1")

# The in-process tests' frames hold a handful of rows, where Spark's code generation (per task:
# every projection's source is generated again to find its compiled class; whole stages) costs
# more than it saves: they evaluate expressions interpreted instead, a mode Spark's own test
# suites run; results are the same by Spark's contract. Measured on nine silver specs on two
# workers, run alternately: 288 s and 285 s with code generation, 242 s and 244 s without.
# Their tables live in an in-memory catalog (the session is the only reader of its lake's
# tables by name; a job process the e2e tests start keeps its own lake and Derby metastore):
# the eight specs above, alternately, 232 s and 232 s against 263 s and 260 s with Derby's.
# The job processes that the e2e and Connect tests start run the production settings (but for
# the JIT tier above).
# The in-process tests read their frames in one partition (a DataFrame built from Python rows, a shuffle):
# each stage is then one task, whose binary (interpreted plans are large object graphs) is
# deserialized once instead of two to four times, and a broadcast's job runs one task. Measured
# on test_composite_primary_key's two batches, repeated in one session (the 2nd-4th repetition):
# 9.6-11.6 s a batch and 8.6-9.4 s a repetition inside Spark jobs with a default parallelism of 4
# and 2 shuffle partitions; 7.1-9.1 s and 4.6-5.3 s with 1 and 1 (its 26 broadcast jobs a
# repetition: 12.3 s against 4.3 s over three). The suite on two workers: pytest 2,055 s, then 1,687 s.
# Adaptive execution is off in them: on frames of a few rows it re-plans nothing worth having,
# and it submits every shuffle stage as a Spark job of its own (a quality run over the shop's
# tables: 217 jobs with it, 132 without). Ten silver, gold, windowed and global specs
# on two workers, four runs each, alternated (2026-11-29): 252.5 / 264.8 / 270.2 / 265.8 s with
# it, 253.1 / 224.6 / 246.4 / 248.5 s without (medians 265.3 s and 247.4 s, -7 %). Results do not
# depend on it; the e2e tests' job processes keep it on, as production does.
IN_PROCESS_SPARK_CONF = {
    "spark.sql.catalogImplementation": "in-memory",
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.ui.explainMode": "simple",  # the plan text each query posts to the (disabled) UI
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="session")
def spark(lake: Path):
    """One local Delta-enabled session for every test (the same factory the jobs use), with
    `IN_PROCESS_SPARK_CONF` on top."""
    from lakehouse.spark import build_local_spark

    session = build_local_spark(lake, app_name="cdc-enrich-tests", cores=2, conf=IN_PROCESS_SPARK_CONF)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def shop_pipeline_path() -> Path:
    return REPO / "schemas" / "shop" / "pipeline.yml"


@pytest.fixture(scope="session")
def shop_pipeline(shop_pipeline_path: Path):
    from lakehouse.declaration import load_pipeline

    return load_pipeline(shop_pipeline_path)


@pytest.fixture(scope="session")
def kafka_broker(lake: Path):
    """A real Kafka broker on 127.0.0.1, started through the same stack code as the CLI, with
    its SASL_SSL listener (SCRAM-SHA-512 over TLS) beside the PLAINTEXT one."""
    import socket

    from devstack.broker import broker_down, broker_up

    def free_ports() -> int:  # port, port+1 (controller), port+2 (SASL_SSL)
        for _ in range(50):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            try:
                for offset in (1, 2):
                    with socket.socket() as s2:
                        s2.bind(("127.0.0.1", port + offset))
                return port
            except OSError:
                continue
        raise RuntimeError("no three free ports in a row on 127.0.0.1")

    yield broker_up(lake, port=free_ports(), secure=True)
    broker_down(lake)


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker) -> str:
    """The broker's PLAINTEXT listener."""
    return kafka_broker.bootstrap


@pytest.fixture(scope="session")
def secure_kafka(kafka_broker, lake: Path):
    """The broker's SASL_SSL listener (`devstack.broker.SecureListener`)."""
    from devstack.broker import secure_listener

    listener = secure_listener(lake)
    assert listener is not None
    return listener


# The xdist group (`make test`: --dist loadgroup) of every test that uses the Kafka broker, so that
# one worker starts one broker: a broker took 8.3 s of CPU to start and 4.8 s per idle two minutes
# after (measured 2026-11-29), and each worker kept its own for the whole run.
KAFKA_GROUP = "kafka"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook turns groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that use the Kafka broker in one xdist group (`KAFKA_GROUP`). Tests marked `long`
    first (stable otherwise): the workers then finish together instead of one running a long test
    alone at the end. Spark Connect's last among them: its server gives a foreachBatch worker a
    fixed 10 s to connect back, which the suite's start (two Spark drivers and a broker starting)
    made it miss in stop 31's and stop 34's CI."""
    for item in items:
        if "kafka_broker" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(KAFKA_GROUP))
    items.sort(key=lambda item: (item.get_closest_marker("long") is None, item.nodeid.startswith("tests/connect/")))


@pytest.fixture(scope="session", autouse=True)
def xdist_groups_hold(request: pytest.FixtureRequest) -> None:
    """Fail every test of a `--dist loadgroup` run whose `xdist_group` marks grouped nothing.

    pytest-xdist groups a marked test by a suffix it adds to the test's node id; pytest 9.2 keeps
    node ids where xdist 3.8's suffix does not reach (pytest-dev/pytest-xdist#1386). The groups
    then split silently across the workers, and each worker builds a group's module fixtures again
    (the quality module's tables and reports: 53 s of setup built again in a `--durations=0` run
    of the suite). A worker that raised at collection would crash without this message, so the
    check fails the tests instead."""
    if not getattr(request.config.option, "loadgroup", False):  # set on an xdist worker of a loadgroup run
        return
    session = request.session
    ungrouped = [item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if ungrouped:
        pytest.fail(
            f"--dist loadgroup did not group {len(ungrouped)} tests marked xdist_group (e.g. {ungrouped[0]}): "
            "this pytest and pytest-xdist do not work together; install the versions pyproject.toml pins (make setup)",
            pytrace=False,
        )
