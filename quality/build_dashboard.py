"""Writes quality/dashboard.lvdash.json (the bundle's Lakeview dashboard) from the operator queries
in lakehouse/quality/queries, which stay the one place each query is written (the local page,
`cdc-enrich dashboard`, runs them too):

    .venv/bin/python quality/build_dashboard.py

The dashboard's datasets name their tables unqualified (`expectation_results`,
`stream_metrics`); the bundle sets the catalog and schema (`dataset_catalog`,
`dataset_schema`). The dashboard holds every query over the quality schema's tables (the
quarantine table lives in bronze's: only the local page shows it). `tests/unit/test_bundle.py`
fails when the JSON is out of date.
"""

from __future__ import annotations

import json
from pathlib import Path

from lakehouse.quality.dashboard import query_text

HERE = Path(__file__).resolve().parent
TABLES = {"{results}": "expectation_results", "{metrics}": "stream_metrics"}

# dataset (query file) -> its widget: type, fields (name -> expression), encodings, position
WIDGETS = [
    ("pass_rate_by_run", "Pass rate by run (%)", "line",
     {"run_at": "`run_at`", "pass_rate_pct": "`pass_rate_pct`"},
     {"x": ("run_at", "temporal", "Run"), "y": ("pass_rate_pct", "quantitative", "Pass rate %")}, (0, 0, 3, 6)),
    ("stream_throughput_by_minute", "Rows in per minute, by stage", "bar",
     {"minute": "`minute`", "rows_in": "SUM(`rows_in`)", "stage": "`stage`"},
     {"x": ("minute", "temporal", "Minute"), "y": ("rows_in", "quantitative", "Rows in"), "color": ("stage", "categorical", "Stage")}, (3, 0, 3, 6)),
    ("kafka_lag", "Kafka records behind, by bronze stream", "line",
     {"at": "`at`", "records_behind": "`records_behind`", "stream": "`stream`"},
     {"x": ("at", "temporal", "Time"), "y": ("records_behind", "quantitative", "Records behind"), "color": ("stream", "categorical", "Stream")}, (0, 6, 6, 6)),
    ("failing_checks_by_table", "Failing checks by table, per run", "line",
     {"run_at": "`run_at`", "failing": "SUM(`failing`)", "table_name": "`table_name`"},
     {"x": ("run_at", "temporal", "Run"), "y": ("failing", "quantitative", "Failing checks"), "color": ("table_name", "categorical", "Table")}, (0, 20, 6, 6)),
    ("failing_checks_latest_run", "Failing checks of the latest run", "table",
     {c: f"`{c}`" for c in ("layer", "table_name", "check_name", "description", "severity", "observed_value", "unexpected_count", "unexpected_percent")},
     None, (0, 12, 6, 8)),
]


def query_lines(name: str) -> list[str]:
    text = query_text(name, TABLES)
    body = [line for line in text.splitlines() if not line.startswith("--")]
    return [line + "\n" for line in body]


def dashboard() -> dict:
    datasets, layout = [], []
    for name, title, kind, fields, encodings, (x, y, w, h) in WIDGETS:
        datasets.append({"name": name, "displayName": title, "queryLines": query_lines(name)})
        spec: dict = {"version": 3 if kind != "table" else 1, "widgetType": kind, "frame": {"showTitle": True, "title": title}}
        if encodings:
            spec["encodings"] = {
                axis: {"fieldName": field, "scale": {"type": scale}, "displayName": label} for axis, (field, scale, label) in encodings.items()
            }
        else:
            spec["encodings"] = {"columns": [{"fieldName": f, "displayName": f} for f in fields]}
        layout.append({
            "widget": {
                "name": f"{name}_widget",
                "queries": [{"name": "main_query", "query": {
                    "datasetName": name,
                    "fields": [{"name": f, "expression": e} for f, e in fields.items()],
                    "disaggregated": kind in ("table", "line"),
                }}],
                "spec": spec,
            },
            "position": {"x": x, "y": y, "width": w, "height": h},
        })
    return {"datasets": datasets, "pages": [{"name": "quality", "displayName": "cdc-enrich: quality and streams", "layout": layout}]}


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    (HERE / "dashboard.lvdash.json").write_text(render())
    print(f"wrote {HERE / 'dashboard.lvdash.json'}")
