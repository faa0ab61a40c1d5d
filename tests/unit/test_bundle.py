"""databricks.yml is a valid bundle: its includes resolve, its jobs pass the typed models of
`databricks-bundles` (which reject unknown or misspelt fields), and every task's entry point
exists and accepts the task's parameters."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO


def load_bundle() -> tuple[dict, list[tuple[Path, dict]]]:
    root = yaml.safe_load((REPO / "databricks.yml").read_text())
    included = []
    for pattern in root.get("include", []):
        for path in sorted(REPO.glob(pattern)):
            included.append((path, yaml.safe_load(path.read_text())))
    return root, included


def all_jobs() -> list[tuple[Path, str, dict]]:
    _, included = load_bundle()
    return [(path, name, job) for path, doc in included for name, job in doc.get("resources", {}).get("jobs", {}).items()]


def test_bundle_has_dev_and_prod_targets_and_includes_resources():
    root, included = load_bundle()
    assert root["bundle"]["name"] == "cdc-enrich"
    assert root["targets"]["dev"]["mode"] == "development"
    assert root["targets"]["prod"]["mode"] == "production"
    assert included, "include: matched no resource files"
    declared = set(root.get("variables", {}))
    for path, doc in included:
        for var in __import__("re").findall(r"\$\{var\.([a-z_]+)\}", path.read_text()):
            assert var in declared, f"{path.name} uses undeclared variable {var}"


@pytest.mark.parametrize(("path", "name", "job"), all_jobs(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_job_passes_the_typed_bundle_model(path: Path, name: str, job: dict):
    from databricks.bundles.jobs import Job

    Job.from_dict(job)  # raises on an unknown or misspelt field


def test_every_task_entry_point_exists_and_accepts_its_parameters():
    tasks = [t for path, _, job in all_jobs() for t in job["tasks"]]
    assert [t["task_key"] for t in tasks] == ["bronze_ingest", "silver_apply", "gold_refresh", "quality_check", "run_continuous"]
    for path, _, job in all_jobs():
        for task in job["tasks"]:
            script = (path.parent / task["spark_python_task"]["python_file"]).resolve()
            assert script.is_file(), f"{task['task_key']}: {script} does not exist"
            module = importlib.import_module(f"jobs.{script.stem}")
            module.build_parser().parse_args(task["spark_python_task"]["parameters"])


def test_the_continuous_job_runs_every_stage_in_one_long_running_task():
    """The continuous job is the scheduled flow as one query set (`jobs/run_continuous.py`); it is
    paused by default so that a deploy never runs both against one lake."""
    jobs = {name: job for _, name, job in all_jobs()}
    continuous = jobs["cdc_enrich_continuous"]
    assert continuous["continuous"]["pause_status"] == "PAUSED"
    assert "schedule" not in continuous and continuous["max_concurrent_runs"] == 1
    assert [t["task_key"] for t in continuous["tasks"]] == ["run_continuous"]
