"""databricks.yml is a valid bundle: its includes resolve, its jobs pass the typed models of
`databricks-bundles` (which reject unknown or misspelt fields), and every task's entry point
exists and accepts the task's parameters. The serverless variant (targets dev_serverless and
prod_serverless, resources/cdc_enrich_serverless.yml) runs the classic jobs' tasks unchanged on
environments, with the wheel and no jar, and pauses the classic jobs where it is deployed."""

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
    """The classic jobs: the included files' own resources, which every target deploys."""
    _, included = load_bundle()
    return [(path, name, job) for path, doc in included for name, job in doc.get("resources", {}).get("jobs", {}).items()]


#: The serverless job of each classic job it mirrors (cdc_enrich_continuous has none: its
#: processing-time queries are not a trigger serverless takes).
SERVERLESS_OF = {"cdc_enrich": "cdc_enrich_serverless", "cdc_enrich_maintain": "cdc_enrich_serverless_maintain"}
SERVERLESS_TARGETS = ("dev_serverless", "prod_serverless")
#: Where a task or a job says what it runs on; everything else must match between the variants.
TASK_COMPUTE = ("job_cluster_key", "new_cluster", "existing_cluster_id", "libraries", "environment_key")
JOB_COMPUTE = ("name", "job_clusters", "environments", "performance_target")


def target_jobs() -> dict[str, dict[str, tuple[Path, dict]]]:
    """Per target, the jobs the included files define or override under `targets.<t>.resources`
    (the CLI merges those into that target only)."""
    _, included = load_bundle()
    found: dict[str, dict[str, tuple[Path, dict]]] = {}
    for path, doc in included:
        for target, settings in (doc.get("targets") or {}).items():
            for name, job in ((settings or {}).get("resources") or {}).get("jobs", {}).items():
                found.setdefault(target, {})[name] = (path, job)
    return found


def serverless_jobs() -> list[tuple[Path, str, str, dict]]:
    """(file, target, job key, job) for every job a serverless target defines in full."""
    return [(path, target, name, job) for target, jobs in target_jobs().items() for name, (path, job) in jobs.items() if "tasks" in job]


def walk(value, key=None):
    """Every (key, value) pair of a nested YAML value, lists included."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k, v
            yield from walk(v, k)
    elif isinstance(value, list):
        for item in value:
            yield key, item
            yield from walk(item, key)


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
    templates' prod target); dev keeps the per-user defaults. prod_serverless and dev_serverless
    are prod and dev with the other compute: the same settings, each under its own root path."""
    root, _ = load_bundle()
    targets = root["targets"]
    assert {name for name, t in targets.items() if t["mode"] == "production"} == {"prod", "prod_serverless"}
    assert {name for name, t in targets.items() if t["mode"] == "development"} == {"dev", "dev_serverless"}
    for name in ("prod", "prod_serverless"):
        prod = targets[name]
        assert prod["workspace"]["root_path"].startswith("/Workspace/Shared/") and "${bundle.target}" in prod["workspace"]["root_path"], name
        assert "~" not in prod["workspace"]["root_path"] and "current_user" not in prod["workspace"]["root_path"], name
        assert set(prod["run_as"]) == {"service_principal_name"}, name
        assert {p["level"] for p in prod["permissions"]} == {"CAN_MANAGE", "CAN_VIEW"}, name
    for name in ("dev", "dev_serverless"):
        assert "workspace" not in targets[name] and "run_as" not in targets[name], name
    assert [n for n, t in targets.items() if t.get("default")] == ["dev"]
    for classic, serverless in (("prod", "prod_serverless"), ("dev", "dev_serverless")):
        settings = {k: v for k, v in targets[classic].items() if k != "default"}
        assert {k: v for k, v in targets[serverless].items() if k != "resources"} == settings, serverless


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


# --------------------------------------------------------------------------- the serverless variant


@pytest.mark.parametrize(("path", "target", "name", "job"), serverless_jobs(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_serverless_job_passes_the_typed_bundle_model(path: Path, target: str, name: str, job: dict):
    from databricks.bundles.jobs import Job

    Job.from_dict(job)  # raises on an unknown or misspelt field


def test_only_the_serverless_targets_deploy_the_serverless_jobs_and_they_pause_the_classic_ones():
    """The classic targets deploy the classic jobs only; each serverless target deploys the
    serverless flow and upkeep and pauses every classic schedule, so one lake has one writer.
    The classic continuous job is deployed paused everywhere and has no serverless twin."""
    root, _ = load_bundle()
    per_target = target_jobs()
    assert set(per_target) == set(SERVERLESS_TARGETS) and set(SERVERLESS_TARGETS) <= set(root["targets"])
    classic = {name: job for _, name, job in all_jobs()}
    for target in SERVERLESS_TARGETS:
        jobs = {name: job for name, (_, job) in per_target[target].items()}
        assert {n for n, j in jobs.items() if "tasks" in j} == set(SERVERLESS_OF.values()), target
        overridden = {n: j for n, j in jobs.items() if "tasks" not in j}
        assert set(overridden) <= set(classic), target  # an override of a job that exists, never a new partial one
        for name, job in classic.items():
            if "schedule" in job:
                assert overridden[name] == {"schedule": {"pause_status": "PAUSED"}}, (target, name)
            else:
                assert job["continuous"]["pause_status"] == "PAUSED" and name not in overridden, (target, name)
        for name in SERVERLESS_OF.values():
            assert jobs[name]["schedule"]["pause_status"] == "UNPAUSED", (target, name)
            assert "continuous" not in jobs[name], (target, name)


def test_serverless_jobs_run_on_an_environment_with_the_wheel_and_no_jar():
    """The templates' serverless job: job-level environments (a version and the wheel as the
    dependency), every task naming one with environment_key; no job cluster, no libraries, and
    no jar anywhere (bronze decodes with its SQL pass there)."""
    root, _ = load_bundle()
    wheel_dir = "dist"
    assert f"-w {wheel_dir}" in root["artifacts"]["cdc_enrich"]["build"] and root["artifacts"]["cdc_enrich"]["type"] == "whl"
    for path, target, name, job in serverless_jobs():
        where = (target, name)
        assert "job_clusters" not in job, where
        environments = {e["environment_key"]: e["spec"] for e in job["environments"]}
        assert environments, where
        for spec in environments.values():
            assert spec["environment_version"] == "${var.serverless_environment_version}", where
            assert "client" not in spec, where  # deprecated in favour of environment_version
            wheels = [d for d in spec["dependencies"] if d.endswith(".whl")]
            assert wheels == ["../dist/*.whl"], where
            assert (path.parent / wheels[0]).resolve().parent == (REPO / wheel_dir).resolve(), where
        for task in job["tasks"]:
            assert task["environment_key"] in environments, (where, task["task_key"])
            assert not {"job_cluster_key", "new_cluster", "existing_cluster_id", "libraries"} & set(task), (where, task["task_key"])
        for key, value in walk(job):
            assert key not in ("jar", "java_dependencies", "spark_jar_task", "libraries"), (where, key)
            assert not (isinstance(value, str) and value.endswith(".jar")), (where, value)
        assert job["performance_target"] in ("PERFORMANCE_OPTIMIZED", "STANDARD"), where
    assert root["variables"]["serverless_environment_version"]["default"] == "4"


def test_serverless_jobs_run_the_classic_jobs_tasks_unchanged():
    """The duplicated YAML stays in sync: each serverless job is its classic job with only the
    compute swapped: same task keys in order, entry points, parameters, dependencies between
    tasks, retries; same job parameters, schedule, timeout, concurrency and notifications."""
    classic = {name: (path, job) for path, name, job in all_jobs()}
    for path, target, name, job in serverless_jobs():
        classic_name = next(c for c, s in SERVERLESS_OF.items() if s == name)
        classic_path, twin = classic[classic_name]
        assert [t["task_key"] for t in job["tasks"]] == [t["task_key"] for t in twin["tasks"]], (target, name)
        for task, classic_task in zip(job["tasks"], twin["tasks"]):
            stripped = {k: v for k, v in task.items() if k not in TASK_COMPUTE}
            assert stripped == {k: v for k, v in classic_task.items() if k not in TASK_COMPUTE}, (target, name, task["task_key"])
            script = (path.parent / task["spark_python_task"]["python_file"]).resolve()
            assert script == (classic_path.parent / classic_task["spark_python_task"]["python_file"]).resolve()
            assert script.is_file(), script
            importlib.import_module(f"jobs.{script.stem}").build_parser().parse_args(task["spark_python_task"]["parameters"])
        strip = lambda j: {k: v for k, v in j.items() if k not in (*JOB_COMPUTE, "tasks")}  # noqa: E731
        assert strip(job) == strip(twin), (target, name)
        assert job["name"] != twin["name"] and "serverless" in job["name"], (target, name)

