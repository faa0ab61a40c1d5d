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
    assert [t["task_key"] for t in tasks] == ["bronze_ingest", "silver_apply", "gold_refresh", "quality_check", "run_continuous", "maintain"]
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


def test_prod_follows_the_rules_the_cli_enforces_for_production_mode():
    """`mode: production` deploys one shared copy: an explicit root path outside any user's home,
    a run-as identity that is not the deployer, and permissions for the team (the Databricks
    templates' prod target); dev keeps the per-user defaults."""
    root, _ = load_bundle()
    prod = root["targets"]["prod"]
    assert prod["workspace"]["root_path"].startswith("/Workspace/Shared/") and "${bundle.target}" in prod["workspace"]["root_path"]
    assert "~" not in prod["workspace"]["root_path"] and "current_user" not in prod["workspace"]["root_path"]
    assert set(prod["run_as"]) == {"service_principal_name"}
    assert {p["level"] for p in prod["permissions"]} == {"CAN_MANAGE", "CAN_VIEW"}
    assert "workspace" not in root["targets"]["dev"] and "run_as" not in root["targets"]["dev"]


def test_every_job_is_operable_parameters_retries_timeouts_and_notifications():
    for _, name, job in all_jobs():
        assert [p["name"] for p in job["parameters"]] == ["pipeline_file", "catalog"], name
        assert job["email_notifications"]["on_failure"] == ["${var.notification_email}"], name
        assert job["max_concurrent_runs"] == 1, name
        if "schedule" in job:
            assert job["timeout_seconds"] > 0, name
            assert job["schedule"]["pause_status"] == "UNPAUSED", name  # live in prod; development mode pauses it
        for task in job["tasks"]:
            args = task["spark_python_task"]["parameters"]
            assert args[args.index("--pipeline") + 1] == "{{job.parameters.pipeline_file}}", task["task_key"]
            assert args[args.index("--catalog") + 1] == "{{job.parameters.catalog}}", task["task_key"]
            if "continuous" not in job:
                assert task["max_retries"] >= 1, task["task_key"]
        node_types = {c["new_cluster"]["node_type_id"] for c in job["job_clusters"]}
        assert node_types == {"${var.node_type}"}, name  # per cloud: a variable, never hard-coded


def test_the_state_schema_and_volume_are_bundle_resources_and_every_stream_task_uses_the_volume():
    from databricks.bundles.schemas import Schema
    from databricks.bundles.volumes import Volume

    root, _ = load_bundle()
    Schema.from_dict(root["resources"]["schemas"]["cdc_enrich_state"])
    Volume.from_dict(root["resources"]["volumes"]["state"])
    volume = "/Volumes/${resources.volumes.state.catalog_name}/${resources.volumes.state.schema_name}/${resources.volumes.state.name}"
    for _, name, job in all_jobs():
        for task in job["tasks"]:
            args = task["spark_python_task"]["parameters"]
            if task["task_key"] != "maintain":
                assert args[args.index("--lake") + 1] == volume, task["task_key"]


def test_no_secret_is_written_into_the_bundle():
    """Kafka credentials reach the jobs from a secret scope (the cluster's env, or the pipeline
    file's ${secret:...} references), never as text in the bundle."""
    import re

    for path in [REPO / "databricks.yml", *sorted((REPO / "resources").glob("*.yml"))]:
        text = path.read_text()
        assert not re.search(r"(?i)(password|sasl\.jaas|secret)\s*[:=]\s*[\"']?[A-Za-z0-9+/]{8,}", text), path.name
        for value in re.findall(r"\{\{secrets/([^}]*)\}\}", text):
            assert value.startswith("${var.kafka_secret_scope}/"), value


def test_the_maintain_job_runs_upkeep_daily():
    jobs = {name: job for _, name, job in all_jobs()}
    maintain = jobs["cdc_enrich_maintain"]
    assert maintain["schedule"]["quartz_cron_expression"].startswith("0 30 3 ")
    assert [t["spark_python_task"]["python_file"] for t in maintain["tasks"]] == ["../jobs/maintain.py"]


def test_the_dashboard_is_a_bundle_resource_built_from_the_quality_queries():
    """The Lakeview dashboard passes the bundle model, reads the quality schema the bundle names,
    and is what quality/build_dashboard.py makes of the operator queries (lakehouse/quality/queries,
    one place per query) over that schema's tables."""
    import importlib.util
    import json
    import re

    from databricks.bundles.dashboards import Dashboard

    from lakehouse.quality.dashboard import placeholders_of, query_names

    _, included = load_bundle()
    dashboards = {name: d for path, doc in included for name, d in doc.get("resources", {}).get("dashboards", {}).items()}
    resource = dashboards["cdc_enrich_quality"]
    Dashboard.from_dict(resource)
    assert (resource["dataset_catalog"], resource["dataset_schema"]) == ("${var.catalog}", "${var.quality_schema}")
    path = (REPO / "resources" / resource["file_path"]).resolve()
    spec = importlib.util.spec_from_file_location("build_dashboard", REPO / "quality" / "build_dashboard.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    assert path.read_text() == builder.render(), "run .venv/bin/python quality/build_dashboard.py"
    board = json.loads(path.read_text())
    datasets = {d["name"]: "".join(d["queryLines"]) for d in board["datasets"]}
    over_quality_schema = {name for name in query_names() if placeholders_of(name) <= {"{results}", "{metrics}"}}
    assert set(datasets) == over_quality_schema and "pass_rate_by_run" in over_quality_schema
    for widget in (item["widget"] for page in board["pages"] for item in page["layout"]):
        query = widget["queries"][0]["query"]
        sql = datasets[query["datasetName"]]
        for field in query["fields"]:
            for column in re.findall(r"`([a-z_]+)`", field["expression"]):
                assert re.search(rf"\b{column}\b", sql), (widget["name"], column)
        for encoding in widget["spec"]["encodings"].values():
            names = [e["fieldName"] for e in (encoding if isinstance(encoding, list) else [encoding])]
            assert set(names) <= {f["name"] for f in query["fields"]}, widget["name"]
