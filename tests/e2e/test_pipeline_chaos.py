"""The whole pipeline over the simulator's heaviest chaos, through the real broker: bronze ->
silver -> gold, then every gold view equals the oracle over the source truth (the simulator's
final database), and every silver live view equals its source table.

Heavy chaos includes a connector outage with lost offsets: the changes committed while it was
down are never sent and it comes back with a new snapshot, so rows deleted in the outage
exist only as absences from that snapshot (lakehouse.silver.snapshots must delete them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakehouse.bronze import run_bronze
from lakehouse.declaration import Pipeline
from lakehouse.gold import run_gold
from lakehouse.silver import live_view, run_silver
from lakehouse.spark import ensure_schemas
from lakehouse.verify.views import diff_frames, verify_pipeline
from lakehouse.verify.truth import read_truth_frames
from testkit.bench.ingest import isolated_pipeline
from testkit.simulator import produce, simulate, write_truth
from tests.integration.test_bronze import _tag

# ~100 s on 2 cores: `make test-slow` (the default suite proves reconciliation against the real
# connector: tests/e2e/test_postgres_e2e.py, offsets lost)
pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SEED, EVENTS = 8, 800


@pytest.mark.long
def test_heavy_chaos_with_an_outage_and_a_new_snapshot_converges_to_the_truth(
    spark: SparkSession, shop_pipeline: Pipeline, kafka_bootstrap: str, lake: Path, tmp_path: Path
) -> None:
    pipeline = isolated_pipeline(shop_pipeline, "chaos" + _tag())
    sim = simulate(pipeline, seed=SEED, events=EVENTS, chaos="heavy")
    applied = sim.stats["chaos_applied"]
    assert applied["resnapshots"] == 1 and applied["records_lost_in_outages"] > 0, applied
    write_truth(sim, tmp_path / "truth")
    produce(sim.records, kafka_bootstrap)

    ensure_schemas(spark, pipeline)
    bronze_report = run_bronze(spark, pipeline, lake, kafka_bootstrap)
    assert bronze_report.quarantined == 0
    silver_report = run_silver(spark, pipeline, lake)
    run_gold(spark, pipeline, lake)

    truth = read_truth_frames(spark, pipeline, tmp_path / "truth")
    for name, source in pipeline.sources.items():
        columns = list(source.column_names)
        live = spark.table(live_view(pipeline, source))
        diff = diff_frames(truth[name], live, list(source.primary_key), columns)
        assert diff.ok, f"silver {name} differs from the source truth:\n" + "\n".join(diff.samples)
    report = verify_pipeline(spark, pipeline, tmp_path / "truth")
    assert report.ok, report.render()
    deleted_by_snapshots = sum(s.snapshot_deletes for s in silver_report.sources.values())
    assert deleted_by_snapshots > 0, "the outage deleted no row the lake held: the reconciliation path did not run"
