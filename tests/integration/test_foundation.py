"""The local lake works as a user meets it: a table written in one process is found by name in the next, and time travels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "cdc_enrich.cli"]


def run_cli(*args: str, lake: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.run([*CLI, "--lake", str(lake), *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow  # two Spark starts (50 s); the default suite holds it in the bronze kill -9 test, whose restarted job finds the first job's tables by name
def test_a_table_written_in_one_process_is_found_by_name_in_the_next_and_time_travels(tmp_path: Path):
    """Two separate processes (the embedded metastore allows one per lake at a time)."""
    lake = tmp_path / "lake"
    created = subprocess.run(
        [sys.executable, "-c", (
            "import sys; from lakehouse.spark import build_local_spark; from pathlib import Path\n"
            f"s = build_local_spark(Path({str(lake)!r}))\n"
            "s.sql('CREATE SCHEMA IF NOT EXISTS demo_db')\n"
            "s.sql('CREATE TABLE demo_db.t USING DELTA AS SELECT id, id * 10 AS v FROM range(3)')\n"
            "s.sql('INSERT INTO demo_db.t VALUES (3, 30), (4, 40)')\n"
        )],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
    )
    assert created.returncode == 0, created.stderr[-2000:]
    # one CLI process (a Spark start each): the table now, and as of its first version
    read = run_cli(
        "sql",
        "SELECT (SELECT count(*) FROM demo_db.t) AS n_now, count(*) AS n_then, max(v) AS top FROM demo_db.t VERSION AS OF 0",
        lake=lake,
    )
    assert read.returncode == 0, read.stderr[-2000:]
    assert [c.strip() for c in read.stdout.splitlines()[2].split("|")] == ["5", "3", "20"]


