"""The wheel the bundle deploys carries the engine (quality suites included) and the CLI under
names no other wheel uses; it installs on a Databricks runtime (Spark and Delta are the runtime's);
the jobs run as files, the local stack and the test kit stay in the checkout."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import REPO

SHIPPED = ("lakehouse", "cdc_enrich")
KEPT_HOME = ("jobs", "quality", "devstack", "testkit", "tests")
#: What a Databricks runtime ships (or the local stack alone needs): never a runtime requirement.
RUNTIME_PROVIDED = ("pyspark", "delta-spark", "psycopg", "databricks-")


def build_wheel(workdir: Path) -> Path:
    """Build from a copy of the checkout (setuptools writes build/ and egg-info beside the sources)."""
    src = workdir / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", *SHIPPED, *KEPT_HOME):
        item = REPO / name
        if item.is_dir():
            shutil.copytree(item, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(item, src / name)
    out = workdir / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        check=True, capture_output=True, text=True,
    )
    return next(out.glob("cdc_enrich-*.whl"))


def test_the_wheel_carries_the_engine_and_jobs_not_the_local_stack_or_test_kit(tmp_path: Path) -> None:
    with zipfile.ZipFile(build_wheel(tmp_path)) as wheel:
        tops = {name.split("/")[0] for name in wheel.namelist() if not name.split("/")[0].endswith((".dist-info", ".data"))}
        entry_points = next(wheel.read(n).decode() for n in wheel.namelist() if n.endswith("entry_points.txt"))
    assert tops == set(SHIPPED)
    assert "cdc-enrich = cdc_enrich.cli:main" in entry_points


def test_the_wheel_requires_only_what_a_databricks_runtime_lacks(tmp_path: Path) -> None:
    with zipfile.ZipFile(build_wheel(tmp_path)) as wheel:
        metadata = next(wheel.read(n).decode() for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        names = wheel.namelist()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    runtime = [r for r in requires if "extra ==" not in r]
    assert sorted(re.split(r"[=<>\[;]", r)[0] for r in runtime) == ["confluent-kafka", "great-expectations", "pyyaml"]
    assert not [r for r in runtime if r.startswith(RUNTIME_PROVIDED) or "[spark]" in r]
    local = [r for r in requires if 'extra == "local"' in r]
    assert {r.split("==")[0] for r in local} >= {"pyspark", "delta-spark", "great-expectations[spark]"}
    assert "Provides-Extra: local" in metadata and "Provides-Extra: dev" in metadata
    # the quality suites travel inside the engine, the log4j config with it
    assert "lakehouse/quality/suites.py" in names and "lakehouse/log4j2.properties" in names
    assert "lakehouse/quality/queries/pass_rate_by_run.sql" in names  # the operator queries travel with the engine
