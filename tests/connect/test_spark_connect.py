"""The pipeline under Spark Connect, as Databricks serverless and Standard access mode clusters
run it: a local Connect server started from pyspark's own jar (without the JVM decoder's jar),
a client process whose only session is `SPARK_REMOTE`'s, and gold equal to the oracle.

What it shows: every stage runs with no sparkContext, py4j or caching on the client; Delta is
written through SQL (no Delta Connect plugin on the server); bronze picks its SQL pass by itself
and says so; foreachBatch functions run in the server's Python worker and their outcomes come
back to the run's report by table (`lakehouse.outcomes`); quality runs GX over Connect frames;
checkpoints given as a URI (`file:` here, `s3://` in production) are inspected through Spark.
The server evaluates as the in-process tests' session does (`SERVER_CONF`); the e2e tests' job
processes are where the production settings run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.spark_connect import connect_server
from testkit.bench.ingest import isolated_pipeline
from testkit.simulator import produce, simulate, write_truth
from tests.conftest import IN_PROCESS_SPARK_CONF
from tests.connect.client import connect_pipeline
from tests.integration.test_bronze import _tag

pytestmark = [pytest.mark.kafka]

REPO = Path(__file__).resolve().parents[2]
SEED, EVENTS = 5, 300
#: The in-process session's settings (interpreted expressions, one partition, no adaptive
#: execution: `tests/conftest.py` says what each saves on a few rows), but for its in-memory
#: catalog: what is under test is the Connect protocol and the client's code paths, not Spark's
#: code generation.
SERVER_CONF = {k: v for k, v in IN_PROCESS_SPARK_CONF.items() if k != "spark.sql.catalogImplementation"}


@pytest.mark.long
def test_the_pipeline_runs_under_spark_connect_and_gold_equals_the_oracle(
    shop_pipeline, shop_pipeline_path: Path, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """orders_enriched over orders and customers (`connect_pipeline`), through every stage."""
    tag = "connect" + _tag()
    pipeline = connect_pipeline(shop_pipeline_path, tag)
    sim = simulate(isolated_pipeline(shop_pipeline, tag), seed=SEED, events=EVENTS, chaos="some")
    write_truth(sim, tmp_path / "truth")
    records = [r for r in sim.records if r.topic in pipeline.topics]
    produce(records, kafka_bootstrap)

    lake = tmp_path / "lake"  # its own metastore: the classic test session holds the suite's
    with connect_server(lake, conf=SERVER_CONF) as url:
        # checkpoints as a URI, read and written through Spark (Hadoop's filesystem), as s3:// would be
        checkpoints = tmp_path / "checkpoints"
        env = dict(os.environ, SPARK_REMOTE=url, CDC_ENRICH_LAKE=str(lake), CDC_ENRICH_CHECKPOINTS=checkpoints.as_uri())
        done = subprocess.run(
            [sys.executable, "-m", "tests.connect.client", "--pipeline", str(shop_pipeline_path), "--tag", tag,
             "--lake", str(lake), "--bootstrap", kafka_bootstrap, "--truth", str(tmp_path / "truth")],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
        )
    assert done.returncode == 0, f"the Connect client failed:\n{done.stderr[-6000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"Connect client, seconds per step: {result['seconds']}")

    assert result["connect"] is True
    assert result["verify_ok"], result["verify"]
    bronze = result["bronze"]
    assert bronze["decoding"] == "SQL pass (Spark Connect: no JVM decoder)"
    assert bronze["records"] == len(records) and bronze["quarantined"] == 0, bronze
    # the batch functions ran in the server's worker: their outcomes reached the report by table
    assert bronze["rows"] == len(records) and bronze["batches"] >= len(pipeline.sources), bronze
    silver = result["silver"]
    assert sum(s["changes_read"] for s in silver.values()) > 0, silver
    assert all(run["batches"] >= 1 and run["inserted"] > 0 for run in result["gold"].values()), result["gold"]
    assert any(line.startswith("silver ") and " batch " in line for line in result["progress_lines"])
    # one outcome per batch with data (and none left over): the upkeep step drops them
    assert result["outcomes_pruned"] >= bronze["batches"] + len(silver) + len(result["gold"]), result["outcomes_pruned"]
    assert bronze["again"] == 0, "bronze did not resume from its URI checkpoints"
    streams = {p.name for p in (checkpoints / pipeline.name).iterdir()}
    assert "bronze" in streams and any(n.startswith("silver__") for n in streams) and any(n.startswith("gold_") for n in streams), streams
    assert all((checkpoints / pipeline.name / n / "silver_app_id").is_dir() for n in streams if n.startswith("silver__"))
    assert result["quality"]["validated"] > 0 and result["quality"]["evaluated"] > 0, result["quality"]
