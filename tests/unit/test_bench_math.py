"""The benchmarks' pure parts: a change record's sequence (the same number silver
and gold record for it), percentiles, and the rule that says whether lag stayed bounded."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Callable

from lakehouse.declaration import load_pipeline
from lakehouse.paths import REPO_ROOT
from testkit.bench.freshness import latency_summary, percentile, record_sequence

SHOP = load_pipeline(REPO_ROOT / "schemas" / "shop" / "pipeline.yml")


def _value(op: str, lsn: int) -> bytes:
    return json.dumps({"before": None, "after": {"id": 1}, "op": op, "source": {"lsn": lsn, "ts_ms": 1}}).encode()


def test_a_change_records_sequence_is_silvers_sequence_for_it() -> None:
    topic = SHOP.source("orders").topic
    assert record_sequence(SHOP, topic, _value("u", 1234), 0) == ("orders", Decimal(12341))
    assert record_sequence(SHOP, topic, _value("d", 1234), 0) == ("orders", Decimal(12340))


def test_tombstones_and_snapshot_reads_are_not_timed() -> None:
    topic = SHOP.source("orders").topic
    assert record_sequence(SHOP, topic, None, 0) is None
    assert record_sequence(SHOP, topic, _value("r", 99), 0) is None


def test_percentiles_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 51.0 and percentile(values, 0.99) == 99.0
    assert percentile([], 0.5) is None


def _run(latency_at: Callable[[float], float], seen_if: Callable[[int], bool] = lambda i: True) -> dict:
    sent = {("orders", Decimal(i)): float(i) for i in range(300)}
    seen = {k: t + latency_at(t) for k, t in sent.items() if seen_if(int(t))}
    return latency_summary(sent, seen)


def test_steady_latency_is_bounded() -> None:
    summary = _run(lambda t: 3.0)
    assert summary["bounded"] and summary["p50_s"] == 3.0 and summary["changes_seen"] == 300


def test_latency_that_keeps_growing_is_not_bounded() -> None:
    assert not _run(lambda t: 1.0 + t / 5)["bounded"]  # 1 s at the start, 61 s at the end


def test_changes_still_unseen_at_the_end_are_not_bounded_even_if_the_seen_ones_were_fast() -> None:
    assert not _run(lambda t: 2.0, seen_if=lambda i: i < 220)["bounded"]


def test_the_pipeline_bench_splits_batch_cost_into_fixed_and_per_change() -> None:
    from testkit.bench.pipeline import fit_fixed_and_per_change

    points = [(1_000, 6.0 + 0.0005 * 1_000), (10_000, 6.0 + 0.0005 * 10_000), (100_000, 6.0 + 0.0005 * 100_000)]
    fixed, per_change = fit_fixed_and_per_change(points)
    assert round(fixed, 6) == 6.0 and round(per_change, 9) == 0.0005
    assert fit_fixed_and_per_change([(1_000, 1.0), (1_000, 2.0)]) is None  # one size says nothing about the slope


def test_a_catch_up_that_fills_the_drain_is_not_bounded() -> None:
    sent = {("orders", Decimal(i)): float(i) for i in range(300)}
    seen = {k: t + 3.0 for k, t in sent.items()}
    assert latency_summary(sent, seen, drain_s=60)["bounded"]
    assert latency_summary(sent, seen, drain_s=60)["catch_up_s"] == 3.0
    assert not latency_summary(sent, seen, drain_s=3)["bounded"]


def test_a_gold_cell_timed_more_than_once_reports_its_medians_and_spread() -> None:
    from testkit.bench.gold import cell_medians, render_cells

    def run(mode: str, gold: float, full: float, path: str = "incremental") -> dict:
        return {"workload": "oltp", "fraction": 0.001, "refresh": mode, "path": path, "gold_s": gold,
                "full_recompute_s": full, "phases_s": {"merge": gold / 2, "keys": 1.0}}

    runs = [run("incremental", 30.0, 9.0), run("auto", 20.0, 10.0, "recompute"), run("incremental", 12.0, 8.0),
            run("auto", 18.0, 8.0, "incremental"), run("incremental", 15.0, 11.0)]
    inc, auto = cell_medians(runs)  # first-run order
    assert (inc["refresh"], inc["runs"], inc["gold_s"], inc["gold_s_range"]) == ("incremental", 3, 15.0, [12.0, 30.0])
    assert (inc["full_recompute_s"], inc["full_over_gold"], inc["phases_s"]) == (9.0, 0.6, {"keys": 1.0, "merge": 7.5})
    assert (auto["runs"], auto["gold_s"], auto["full_recompute_s"], auto["paths"]) == (2, 19.0, 9.0, ["incremental", "recompute"])
    table = render_cells({"fact_rows": 1_000_000, "cells": [inc, auto]})
    assert "| 1,000,000 | oltp | 0.10% | incremental | incremental | 3 | 15.0 | 12.0-30.0 | 9.0 | 0.6x |" in table


def test_a_gold_run_reports_the_ratio_its_merge_alone_would_allow() -> None:
    from testkit.bench.gold import merge_bound, render_table

    # a 3.4 s MERGE (Delta's executionTimeMs) beside a 9.44 s recompute: no batch around it could beat 2.78x
    assert merge_bound(9.44, {"operations": "MERGE,WRITE", "executionTimeMs": 3399}) == 2.78
    assert merge_bound(9.44, {"operations": "WRITE", "appendedRows": 200}) is None  # new rows only: no MERGE
    assert merge_bound(9.44, {}) is None
    run = {"workload": "oltp", "fraction": 0.001, "path": "incremental", "refresh": "incremental", "affected_keys": 2508,
           "gold_files_touched": 10, "gold_files": 10, "gold_s": 18.79, "full_recompute_s": 9.44, "full_over_gold": 0.5,
           "gold_rows_rewritten_per_changed_row": 1.0, "spark_jobs": 124}
    with_bound, without = render_table({"fact_rows": 1_000_000, "runs": [run | {"full_over_gold_merge": 2.78}, run]}).splitlines()[2:]
    assert "| 0.5x | 2.78x | 1.0 | 124 |" in with_bound
    assert "| 0.5x |  | 1.0 | 124 |" in without  # a JSON from before the column


def test_freshness_runs_at_one_rate_or_a_repeated_one_are_drawn_side_by_side(tmp_path) -> None:
    from testkit.bench.plot import freshness_groups, plot_freshness

    def run(schedule: str, p50: float, p95: float, p99: float, bounded: bool, **extra) -> dict:
        return {"rate": 500.0, "schedule": schedule, "duration_s": 120.0, "changes_seen": 10, "p50_s": p50,
                "p95_s": p95, "p99_s": p99, "bounded": bounded, **extra}

    result = {"rates": [run("concurrent", 92.0, 146.0, 150.0, True), run("chained", 46.0, 67.0, 71.0, True, label="chained\n10 min"),
                        run("chained", 167.0, 393.0, 430.0, False)],
              "highest_bounded_rate": 500.0}
    assert freshness_groups(result["rates"]) == [
        ("concurrent\n120s sent", 92.0, 146.0, 150.0),
        ("chained\n10 min", 46.0, 67.0, 71.0),
        ("chained\n120s sent\nNOT bounded", 167.0, 393.0, 430.0),
    ]
    out = plot_freshness(result, tmp_path / "runs.png")
    assert out.exists() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # runs at different rates, one of them repeated: still side by side, each labelled with its rate
    trickle = [run("chained", 31.0, 47.0, 70.0, False) | {"rate": 5.0}, run("chained", 39.0, 57.0, 61.0, True),
               run("chained", 34.0, 50.0, 76.0, False) | {"rate": 5.0}]
    assert [g[0] for g in freshness_groups(trickle)] == [
        "5/s\nchained\n120s sent\nNOT bounded", "500/s\nchained\n120s sent", "5/s\nchained\n120s sent\nNOT bounded"]
    assert plot_freshness({"rates": trickle, "highest_bounded_rate": 500.0}, tmp_path / "rates.png").exists()


def test_a_batch_phase_is_charged_with_the_jobs_and_scans_submitted_during_it() -> None:
    from testkit.bench.phases import attribute

    spans = [("read", 0.0, 1.0), ("keys", 1.0, 3.0), ("merge", 3.0, 7.0)]
    jobs = [(0.5, "collect"), (1.5, "collect"), (2.0, "count"), (4.0, "Delta: Filtering files for query"), (6.5, "collect"),
            (9.0, "collect")]  # the last after the batch: another run's
    scans = [
        (1.2, [{"table": "subs", "files": 3, "rows": 300}]),
        (4.0, [{"table": "gold", "files": 10, "rows": 1000}, {"table": "gold", "files": 10, "rows": 1000}]),
        (8.0, [{"table": "gold", "files": 99, "rows": 99}]),
    ]
    out = attribute(spans, jobs, scans)
    assert list(out) == ["read", "keys", "merge"]
    assert [out[p]["jobs"] for p in out] == [1, 2, 2]
    assert out["keys"]["job_kinds"] == {"collect": 1, "count": 1}
    assert (out["keys"]["files_read"], out["keys"]["rows_read"]) == (3, 300)
    assert out["merge"]["tables"] == {"gold": {"files": 20, "rows": 2000}}
    assert out["read"] == {"jobs": 1, "job_kinds": {"collect": 1}, "sql_executions": 0, "files_read": 0, "rows_read": 0, "tables": {}}
    assert [out[p]["sql_executions"] for p in out] == [0, 1, 1]  # each execution counted once, in its phase


def test_a_phase_counts_the_seconds_some_job_ran_once_however_many_overlap() -> None:
    from testkit.bench.gold import render_phase_reads
    from testkit.bench.phases import job_seconds

    spans = [("keys", 10.0, 14.0), ("merge", 14.0, 20.0)]
    runs = [(10.5, 11.5), (11.0, 12.0), (11.2, 11.4),  # overlapping: 10.5-12.0 once
            (13.5, 15.0),  # across the two phases: half a second in keys, one in merge
            (19.0, 21.0),  # past the batch's end: only the merge's last second
            (30.0, 31.0)]  # another run's
    assert job_seconds(spans, runs) == {"keys": 2.0, "merge": 2.0}
    assert job_seconds(spans, []) == {"keys": 0.0, "merge": 0.0}
    assert job_seconds([("keys", 0.0, 1.0), ("keys", 5.0, 6.0)], [(0.5, 5.5)]) == {"keys": 1.0}  # two batches' spans summed
    result = {"fact_rows": 1000, "runs": [{
        "workload": "oltp", "fraction": 0.001, "path": "incremental", "full_recompute_s": 9.0, "phases_s": {"keys": 4.0},
        "phase_reads": {"keys": {"jobs": 3, "job_s": 2.0, "files_read": 1, "rows_read": 10},
                        "full recompute": {"jobs": 2, "files_read": 4, "rows_read": 40}}}]}
    table = render_phase_reads(result).splitlines()
    assert "s with a job running" in table[0]
    assert table[2].split("|")[6:8] == [" 4.0 ", " 2.0 "] and table[3].split("|")[6:8] == [" 9.0 ", "  "]


def test_scans_are_read_from_the_ui_plans_parquet_nodes() -> None:
    from testkit.bench.phases import job_kind, metric_number, scans_of, ui_time

    execution = {"nodes": [
        {"nodeName": "Scan parquet spark_catalog.silver.orders_store",
         "metrics": [{"name": "number of files read", "value": "12"}, {"name": "number of output rows", "value": "1,000,040"},
                     {"name": "size of files read", "value": "69.5 MiB"}]},
        {"nodeName": "Scan ExistingRDD", "metrics": [{"name": "number of output rows", "value": "5"}]},
        {"nodeName": "Filter", "metrics": []},
    ]}
    assert scans_of(execution) == [{"table": "spark_catalog.silver.orders_store", "files": 12, "rows": 1_000_040}]
    assert metric_number("total (min, med, max)\n1,234 (1, 2, 3)") == 1234 and metric_number("") == 0
    assert ui_time("1970-01-01T00:00:01.500GMT") == 1.5
    assert job_kind({"name": "collect at /work/lakehouse/gold/frames.py:131"}) == "collect at frames.py:131"
    assert job_kind({"description": "Delta: gold_v", "name": "count at /x/DeltaLog.scala:9"}) == "count at DeltaLog.scala:9, in a Delta command"
    assert job_kind({"name": "$anonfun$withThreadLocalCaptured$2 at CompletableFuture.java:1768"}) == "query stage (adaptive execution, broadcast)"
    assert job_kind({"description": "Delta: gold_v", "name": "$anonfun$recordDeltaOperationInternal$1 at DatabricksLogging.scala:128"}) == (
        "Delta operation, in a Delta command")
    assert job_kind({}) == "unnamed"
