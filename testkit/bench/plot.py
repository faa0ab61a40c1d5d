"""The gold benchmark's plot: seconds against change fraction, gold (as the product runs it)
beside the full recompute, one panel per workload, one line style per scale.

    .venv/bin/python -m testkit.bench.plot docs/bench-gold.png bench-1m.json bench-10m.json
"""

from __future__ import annotations

import json
import platform
import sys
from datetime import date
from pathlib import Path
from typing import Any, Sequence

PANELS = ("uniform", "oltp", "hot_parent")


def plot_gold(results: Sequence[dict[str, Any]], out: Path, machine: str | None = None) -> Path:
    """Draw `bench_gold` results (one per scale) into `out` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = [w for w in PANELS if any(r["workload"] == w for res in results for r in res["runs"])]
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.2 * len(workloads), 4.4), squeeze=False)
    styles = ["-", "--", ":"]
    for ax, workload in zip(axes[0], workloads):
        for style, res in zip(styles, sorted(results, key=lambda r: r["fact_rows"])):
            runs = sorted((r for r in res["runs"] if r["workload"] == workload), key=lambda r: r["fraction"])
            if not runs:
                continue
            scale = f"{res['fact_rows'] / 1e6:g}M rows"
            xs = [r["fraction"] * 100 for r in runs]
            ax.plot(xs, [r["full_recompute_s"] for r in runs], style, color="tab:red", marker="x", label=f"full recompute, {scale}")
            ax.plot(xs, [r["gold_s"] for r in runs], style, color="tab:blue", label=f"gold (auto), {scale}")
            for x, r in zip(xs, runs):  # the path the cost model took
                marker = "o" if r["path"] == "incremental" else "s"
                ax.plot([x], [r["gold_s"]], marker, color="tab:blue", markersize=6, markerfacecolor="white")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{workload}  (gold: o incremental, \u25a1 recompute)", fontsize=10)
        ax.set_xlabel("changed share of the fact table, %")
        ax.set_ylabel("seconds per batch")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"cdc-enrich bench gold, order_items_enriched, {machine or platform.machine()} "
        f"{_cores()} cores, {date.today().isoformat()}",
        fontsize=10,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _cores() -> int:
    import os

    return os.cpu_count() or 0


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    results = [json.loads(Path(p).read_text()) for p in argv[1:]]
    print(plot_gold(results, Path(argv[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
