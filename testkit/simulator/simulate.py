"""`simulate`: a pipeline's workload as Kafka records plus the source truth, and `write_truth`."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from lakehouse.declaration import (
    Pipeline,
)
from lakehouse.verify.truth import read_truth, read_truth_frames, write_truth_files  # noqa: F401 (the simulator's truth API)
from testkit.simulator.chaos import CHAOS_PLANS
from testkit.simulator.database import _Database
from testkit.simulator.driver import _Driver
from testkit.simulator.records import TRUTH_FORMAT, KafkaRecord, Simulation
from testkit.simulator.timeline import _Timeline
from testkit.simulator.workload import load_workload

# =========================================================================== public API


def simulate(
    pipeline: Pipeline,
    seed: int = 0,
    scale: int = 1,
    events: int = 1000,
    chaos: str = "none",
    schemas_enabled: bool = False,
    partitions: int = 1,
    workload: Path | None = None,
) -> Simulation:
    """Run the workload over the pipeline's sources; the same arguments give the same bytes."""
    if chaos not in CHAOS_PLANS:
        raise ValueError(f"chaos must be one of {', '.join(CHAOS_PLANS)}, not {chaos!r}")
    if scale < 0 or events < 0 or partitions < 1:
        raise ValueError(f"need scale >= 0, events >= 0 and partitions >= 1 (got {scale}, {events}, {partitions})")
    plan = CHAOS_PLANS[chaos]
    hints = load_workload(pipeline, workload)
    driver = _Driver(pipeline, hints, plan, seed, schemas_enabled, partitions)
    driver.build_snapshot(scale)
    transactions = driver.stream(events)
    timeline = _Timeline(driver.emitter.items, random.Random(f"{seed}:timeline"), pipeline.kafka.topic_prefix)
    for _ in range(plan.restarts):
        timeline.restart()
    timeline.assign_runs()
    if plan.snapshot_replays:
        timeline.replay_snapshot(plan.snapshot_replays)
    timeline.lag(plan.lags_s)
    records = timeline.records()
    truth = _truth(pipeline, driver.db)
    stats = _stats(pipeline, driver, timeline, records, truth, transactions,
                   dict(seed=seed, scale=scale, events_requested=events, chaos=chaos, schemas_enabled=schemas_enabled, partitions=partitions))
    return Simulation(records=records, truth=truth, stats=stats, history=_history(pipeline, driver.emitter.versions))


def _truth(pipeline: Pipeline, db: _Database) -> dict[str, list[dict[str, Any]]]:
    return {
        name: [dict(db.tables[name].rows[k]) for k in sorted(db.tables[name].rows)]
        for name in pipeline.sources
    }


def _history(pipeline: Pipeline, versions: list[tuple[str, tuple[Any, ...], dict[str, Any] | None, int, int]]) -> dict[str, list[dict[str, Any]]]:
    """The version log as history rows: per key in commit (LSN) order, each version valid from
    its commit time (ms, as Debezium's `ts_ms`) to the next one's; a delete is a version too."""
    by_key: dict[tuple[str, tuple[Any, ...]], list[tuple[int, int, dict[str, Any] | None, int]]] = {}
    for order, (source, key, row, lsn, commit_us) in enumerate(versions):
        by_key.setdefault((source, key), []).append((lsn, order, row, commit_us))
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in pipeline.sources}
    for (source, key), chain in sorted(by_key.items(), key=lambda kv: (kv[0][0], repr(kv[0][1]))):
        src = pipeline.sources[source]
        chain.sort(key=lambda v: (v[0], v[1]))
        for i, (_, _, row, commit_us) in enumerate(chain):
            values = dict(row) if row is not None else {**{c: None for c in src.column_names}, **dict(zip(src.primary_key, key))}
            after = _ms_time(chain[i + 1][3]) if i + 1 < len(chain) else None
            out[source].append({**values, "_valid_from": _ms_time(commit_us), "_valid_to": after, "_deleted": row is None})
    return out


def _ms_time(commit_us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=commit_us // 1000)


def _stats(pipeline: Pipeline, driver: _Driver, timeline: _Timeline, records: list[KafkaRecord],
           truth: dict[str, list[dict[str, Any]]], transactions: int, run: dict[str, Any]) -> dict[str, Any]:
    emitter = driver.emitter
    ops = emitter.ops
    return {
        "truth_format": TRUTH_FORMAT,
        "pipeline": pipeline.name,
        **run,
        "records": len(records),
        "change_events": sum(o["c"] + o["u"] + o["d"] for o in ops.values()),
        "transactions": transactions,
        "snapshot": {"lsn": emitter.snapshot_lsn, "tx_id": emitter.snapshot_tx_id, "rows": {s: o["r"] for s, o in ops.items()}},
        "final_lsn": emitter.last_lsn or emitter.snapshot_lsn,  # of the last change event
        "final_commit_end_lsn": emitter.last_commit_end,
        "final_tx_id": emitter.tx_id,
        "ops": ops,
        "rows": {name: len(rows) for name, rows in truth.items()},
        "topics": {s.name: s.topic for s in pipeline.sources.values()},
        "chaos_applied": {**driver.chaos, **timeline.applied},
        "sources": {
            s.name: {"kind": s.kind, "primary_key": list(s.primary_key), "columns": [[c.name, c.type] for c in s.columns]}
            for s in pipeline.sources.values()
        },
    }


# --------------------------------------------------------------------------- truth files


def write_truth(sim: Simulation, directory: Path) -> None:
    """The simulation's final rows and stats as the truth files `verify --truth` reads."""
    write_truth_files(sim.truth, sim.stats, directory, history=sim.history)


