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


@pytest.fixture(scope="session")
def spark(lake: Path):
    """One local Delta-enabled session for every test (the same factory the jobs use)."""
    from lakehouse.spark import build_local_spark

    session = build_local_spark(lake, app_name="cdc-enrich-tests", cores=2)
    session.conf.set("spark.sql.shuffle.partitions", "2")
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
def kafka_bootstrap(lake: Path) -> str:
    """A real Kafka broker on 127.0.0.1, started through the same stack code as the CLI."""
    import socket

    from devstack.broker import broker_down, broker_up

    def free_pair() -> int:
        for _ in range(50):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            try:
                with socket.socket() as s2:
                    s2.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
        raise RuntimeError("no free pair of ports on 127.0.0.1")

    status = broker_up(lake, port=free_pair())
    yield status.bootstrap
    broker_down(lake)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `long` first (stable otherwise): two workers then finish together instead of
    one running a long test alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
