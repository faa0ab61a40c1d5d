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




def test_the_suites_driver_maps_the_class_archive_that_setup_built(spark) -> None:
    """`make setup` records a class archive (`devstack.class_archive`) and every local driver maps
    it: the JVM reports the archives it mapped, the JDK's own (~13 MB) plus this one (~220 MB).
    An archive the JVM refused (another JDK, another classpath) would leave only the JDK's."""
    from lakehouse.paths import jvm_class_archive

    archive = jvm_class_archive()
    assert archive.is_file(), f"{archive} is missing: `make setup` should have built it (see .cache/jvm/build.log)"
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    info = subprocess.run(["jcmd", str(pid), "VM.info"], capture_output=True, text=True, timeout=60).stdout
    mapped = [line for line in info.splitlines() if line.startswith("CDS archive(s) mapped at:")]
    assert mapped, info[:2000]
    size = int(mapped[0].split("size ")[1].split(",")[0])
    assert size > archive.stat().st_size, (size, archive.stat().st_size)


def test_the_local_driver_asks_the_jvm_for_a_class_or_static_method_once(spark) -> None:
    """`lakehouse.py4j_cache`: PySpark's lookups of `functions` and its methods (every `F.col`)
    are answered on the Python side after the first; a static field's value is asked each time."""
    from pyspark.sql import functions as F

    from lakehouse.py4j_cache import CachedJVMView

    jvm = spark.sparkContext._jvm
    assert type(jvm) is CachedJVMView
    client = jvm._gateway_client
    sent: list[str] = []
    send = client.send_command
    client.send_command = lambda command, *a, **k: sent.append(command) or send(command, *a, **k)
    try:
        F.col("warm")  # the first lookup of the class and of `col` may ask the JVM
        sent.clear()
        assert str(F.col("a")) == "Column<'a'>"
        kinds = [c.split("\n")[0] for c in sent]
        assert "c" in kinds and "r" not in kinds  # calls (`col`, `toString`), no reflection round trip
        integer = getattr(jvm, "java.lang.Integer")
        assert integer is getattr(jvm, "java.lang.Integer")
        assert integer.MAX_VALUE == 2**31 - 1 and "MAX_VALUE" not in vars(integer)  # a field: asked again
        assert integer.valueOf(7) == 7 and "valueOf" in vars(integer)  # a static method: kept
    finally:
        del client.send_command
