"""The benchmarks' plots, chosen by the results' shape:

- gold: seconds against change fraction, gold (as the product runs it) beside the full
  recompute, one panel per workload, one line style per scale;
- pipeline: records/s per stage against batch size (beside the raw copy), and every batch's
  seconds against its rows with the fitted fixed + per-change line;
- freshness: latency percentiles against the rate of changes;
- as_of: seconds against the share of events, an as-of view's batch beside the full recompute.

    .venv/bin/python -m testkit.bench.plot gold.png bench-1m.json bench-10m.json
    .venv/bin/python -m testkit.bench.plot pipeline.png bench-pipeline.json

The JSON files are what `cdc-enrich bench ... --out FILE.json` wrote; the PNG goes where the
first argument says.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
from datetime import date
from pathlib import Path
from typing import Any, Sequence

PANELS = ("uniform", "oltp", "hot_parent")


def plot_gold(results: Sequence[dict[str, Any]], out: Path, machine: str | None = None) -> Path:
    """Draw `bench_gold` results (one per scale) into `out` (PNG)."""
    from testkit.bench.gold import cell_medians

    workloads = [w for w in PANELS if any(r["workload"] == w for res in results for r in res["runs"])]
    fig, axes = _figure(len(workloads))
    styles = ["-", "--", ":"]
    for ax, workload in zip(axes, workloads):
        for style, res in zip(styles, sorted(results, key=lambda r: r["fact_rows"])):
            scale = f"{res['fact_rows'] / 1e6:g}M rows"
            every = [r for r in res["runs"] if r["workload"] == workload]
            fractions = sorted({r["fraction"] for r in every})
            if not fractions:
                continue
            full = [statistics.median(r["full_recompute_s"] for r in every if r["fraction"] == f) for f in fractions]
            ax.plot([f * 100 for f in fractions], full, style, color="tab:red", marker="x", label=f"full recompute (median), {scale}")
            cells = sorted(cell_medians(every), key=lambda c: c["fraction"])  # a repeated cell drawn at its median
            auto = [c for c in cells if c["refresh"] == "auto"]
            if auto:  # gold as the cost model picks (a file of pinned modes only has none)
                xs = [c["fraction"] * 100 for c in auto]
                ax.plot(xs, [c["gold_s"] for c in auto], style, color="tab:blue", label=f"gold (auto), {scale}")
                for x, c in zip(xs, auto):  # the path the cost model took
                    marker = "o" if c["paths"] == ["incremental"] else "s"
                    ax.plot([x], [c["gold_s"]], marker, color="tab:blue", markersize=6, markerfacecolor="white")
            for mode, color in (("incremental", "tab:purple"), ("recompute", "tab:green")):  # `bench gold --refresh`
                pinned = [c for c in cells if c["refresh"] == mode]
                if pinned:
                    ax.plot([c["fraction"] * 100 for c in pinned], [c["gold_s"] for c in pinned], style, color=color,
                            marker=".", label=f"{mode} (pinned), {scale}")
        _style(ax, "changed share of the fact table, %", "seconds per batch",
               f"{workload}  (gold: o incremental, \u25a1 recompute)", ylog=True)
    return _save(fig, out, "cdc-enrich bench gold, order_items_enriched", machine)


def plot_as_of(results: Sequence[dict[str, Any]], out: Path, machine: str | None = None) -> Path:
    """Draw `bench_as_of` results (one per scale) into `out` (PNG): one panel per workload."""
    workloads = [w for w in ("new_events", "late_versions") if any(r["workload"] == w for res in results for r in res["runs"])]
    fig, axes = _figure(len(workloads))
    for ax, workload in zip(axes, workloads):
        for style, res in zip(["-", "--", ":"], sorted(results, key=lambda r: r["events"])):
            runs = sorted((r for r in res["runs"] if r["workload"] == workload), key=lambda r: r["fraction"])
            scale = f"{res['events'] / 1e6:g}M events"
            xs = [r["fraction"] * 100 for r in runs]
            ax.plot(xs, [r["full_recompute_s"] for r in runs], style, color="tab:red", marker="x", label=f"full recompute, {scale}")
            ax.plot(xs, [r["gold_s"] for r in runs], style, color="tab:blue", marker="o", label=f"as-of view batch, {scale}")
        _style(ax, "share of the events (new, or re-enriched), %", "seconds per batch", workload, ylog=True)
    return _save(fig, out, "cdc-enrich bench as_of, payments as of their time", machine)


def _figure(panels: int) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(5.6 * panels, 4.4), squeeze=False)
    return fig, axes[0]


def _style(ax: Any, xlabel: str, ylabel: str, title: str, *, ylog: bool = False, legend_size: int = 7) -> None:
    """One panel's axes as every bench plot draws them: log x (and y), labels, grid, legend."""
    ax.set_xscale("log")
    if ylog:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=legend_size)


def _save(fig: Any, out: Path, title: str, machine: str | None = None) -> Path:
    import matplotlib.pyplot as plt

    fig.suptitle(f"{title}, {machine or platform.machine()} {_cores()} cores, {date.today().isoformat()}", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


STAGE_COLORS = {"raw": "tab:gray", "bronze": "tab:orange", "silver": "tab:blue", "gold": "tab:green"}


def plot_pipeline(result: dict[str, Any], out: Path) -> Path:
    """Draw a `bench_pipeline` result into `out` (PNG)."""
    fig, (left, right) = _figure(2)
    sizes = [row["batch_size"] for row in result["sizes"]]
    for stage, color in STAGE_COLORS.items():
        left.plot(sizes, [row["stages"][stage]["changes_per_s"] for row in result["sizes"]], "-o", color=color, label=stage)
    left.plot(sizes, [row["pipeline_changes_per_s"] for row in result["sizes"]], "-s", color="black", label="bronze+silver+gold")
    _style(left, "records per trigger (per query)", "records per second", "throughput per stage", ylog=True)
    for stage, points in result["batch_points"].items():
        if stage not in STAGE_COLORS or not points:
            continue
        right.plot([p[0] for p in points], [p[1] for p in points], ".", color=STAGE_COLORS[stage], label=stage, alpha=0.6)
        fit = result["fits"].get(stage)
        if fit:
            xs = sorted({p[0] for p in points})
            right.plot(xs, [fit["fixed_s"] + fit["per_change_ms"] / 1000 * x for x in xs], "-", color=STAGE_COLORS[stage],
                       label=f"{stage}: {fit['fixed_s']:.1f}s + {fit['per_change_ms']:.3f}ms/record")
    _style(right, "records in the batch", "seconds per batch", "every micro-batch, and the fitted fixed + per-record cost")
    return _save(fig, out, "cdc-enrich bench pipeline")


def plot_freshness(result: dict[str, Any], out: Path) -> Path:
    """Draw a `bench_freshness` result into `out` (PNG)."""
    fig, (ax,) = _figure(1)
    runs = [r for r in result["rates"] if r.get("changes_seen")]
    if len({r["rate"] for r in runs}) < len(runs):  # a rate run more than once: the runs side by side
        return _freshness_runs(fig, ax, runs, out)
    schedules = list(dict.fromkeys(r.get("schedule", "concurrent") for r in runs))
    for schedule, line in zip(schedules, ("-", "--")):
        mine = [r for r in runs if r.get("schedule", "concurrent") == schedule]
        for key, marker in (("p50_s", "o"), ("p95_s", "s"), ("p99_s", "^")):
            label = key.split("_")[0] + (f" {schedule}" if len(schedules) > 1 else "")
            ax.plot([r["rate"] for r in mine], [r[key] for r in mine], line + marker, label=label)
    for r in runs:
        ax.annotate("bounded" if r["bounded"] else "not bounded", (r["rate"], r["p99_s"]), fontsize=7,
                    textcoords="offset points", xytext=(4, 4))
    postgres = runs[0].get("unit") == "transactions" if runs else False
    _style(ax, "PostgreSQL transactions per second (Debezium)" if postgres else "changes per second (Kafka records)",
           "seconds from source commit to gold commit", "", legend_size=8)
    return _save(fig, out, "cdc-enrich bench freshness (continuous run" + (", PostgreSQL + Debezium)" if postgres else ")"))


def freshness_groups(runs: Sequence[dict[str, Any]]) -> list[tuple[str, float, float, float]]:
    """Runs side by side as the plot draws them, in the order run: each group's label (the run's
    optional `label`, else its rate when the runs' rates differ, its schedule and how long it
    sent, marked when its lag was not bounded) and its p50 / p95 / p99 bars."""
    groups = []
    rates = len({r["rate"] for r in runs}) > 1
    for r in runs:
        label = r.get("label") or (
            (f"{r['rate']:g}/s\n" if rates else "") + f"{r.get('schedule', 'concurrent')}\n{r['duration_s']:.0f}s sent")
        groups.append((label + ("" if r["bounded"] else "\nNOT bounded"), r["p50_s"], r["p95_s"], r["p99_s"]))
    return groups


def _freshness_runs(fig: Any, ax: Any, runs: Sequence[dict[str, Any]], out: Path) -> Path:
    """Runs side by side (`freshness_groups`): p50 / p95 / p99 bars per run."""
    width = 0.27
    groups = freshness_groups(runs)
    fig.set_size_inches(max(fig.get_size_inches()[0], 1.3 * len(groups)), fig.get_size_inches()[1])
    for i, name in enumerate(("p50", "p95", "p99")):
        xs = [j + (i - 1) * width for j in range(len(groups))]
        bars = ax.bar(xs, [g[i + 1] for g in groups], width, label=name)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], fontsize=7)
    rates = sorted({r["rate"] for r in runs})
    ax.set_xlabel(f"runs at {rates[0]:g} changes per second (Kafka records), in the order run" if len(rates) == 1
                  else "runs in the order run, by changes per second (Kafka records)")
    ax.set_ylabel("seconds from source commit to gold commit")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out, "bench freshness, runs side by side")


def _cores() -> int:
    import os

    return os.cpu_count() or 0


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    results = [json.loads(Path(p).read_text()) for p in argv[1:]]
    if "batch_points" in results[0]:
        print(plot_pipeline(results[0], Path(argv[0])))
    elif "highest_bounded_rate" in results[0]:
        print(plot_freshness(results[0], Path(argv[0])))
    elif "events" in results[0]:
        print(plot_as_of(results, Path(argv[0])))
    else:
        print(plot_gold(results, Path(argv[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
