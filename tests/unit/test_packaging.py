"""The wheel the bundle deploys carries the engine, the jobs, the quality suites and the CLI; the
local stack and the test kit stay in the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import REPO

SHIPPED = ("lakehouse", "jobs", "quality", "cdc_enrich")
KEPT_HOME = ("devstack", "testkit", "tests")


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
