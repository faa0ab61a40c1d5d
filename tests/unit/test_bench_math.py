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


def test_freshness_runs_at_one_rate_are_drawn_side_by_side(tmp_path) -> None:
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
