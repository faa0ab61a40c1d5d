"""The simulator's truth files read back as typed Spark DataFrames, the oracle's input."""

from __future__ import annotations

from pathlib import Path

from lakehouse.declaration import Pipeline
from testkit.simulator import simulate, write_truth

# --------------------------------------------------------------------------- independent decoding


# --------------------------------------------------------------------------- fixtures


# --------------------------------------------------------------------------- determinism


# --------------------------------------------------------------------------- envelope fidelity


# --------------------------------------------------------------------------- truth = replay


# --------------------------------------------------------------------------- chaos


# --------------------------------------------------------------------------- a pipeline that is not the shop


# --------------------------------------------------------------------------- workload file


# --------------------------------------------------------------------------- truth files


def test_truth_frames_are_typed_for_spark(spark, shop_pipeline: Pipeline, tmp_path: Path) -> None:
    from lakehouse.tables import row_struct
    from testkit.simulator import read_truth_frames

    sim = simulate(shop_pipeline, seed=1, events=60)
    write_truth(sim, tmp_path)
    frames = read_truth_frames(spark, shop_pipeline, tmp_path)
    assert set(frames) == set(shop_pipeline.sources)
    customers = frames["customers"]
    assert customers.schema == row_struct(shop_pipeline.source("customers"))
    rows = {r["id"]: r.asDict() for r in customers.collect()}
    expected = sim.truth["customers"][0]
    got = rows[expected["id"]]
    assert got["created_at"].timestamp() == expected["created_at"].timestamp()  # collect() gives local naive time
    assert frames["products"].collect()[0]["price"] == sim.truth["products"][0]["price"]
    assert frames["order_items"].count() == len(sim.truth["order_items"])


# --------------------------------------------------------------------------- a real broker


