"""The operators' page: one self-contained HTML file of the quality results, the quarantine, gold's
freshness and the stream metrics (`cdc-enrich dashboard`).

The page runs the same SQL as the bundle's Lakeview dashboard (`lakehouse/quality/queries/*.sql`,
one place per query; `query_text` fills in the tables), reads gold's freshness columns, and draws
its plots as inline SVG (`lakehouse.quality.charts`): no script, nothing fetched, so it opens from
a file, an e-mail or a job's artifacts. Reading (`dashboard_data`, Spark) is apart from rendering
(`render_dashboard`, pure), which tests call with rows of their own.

>>> html = render_dashboard("shop", {}, generated_at="2026-01-01 00:00 UTC")
>>> "<h1>cdc-enrich: shop</h1>" in html and "no quality run yet" in html
True
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

from pyspark.sql import SparkSession

from lakehouse.declaration import Pipeline
from lakehouse.gold.plan import FRESHNESS_COLUMNS
from lakehouse.metrics import metrics_table
from lakehouse.quality.charts import line_chart, stacked_bar_chart
from lakehouse.quality.runner import data_docs_folder
from lakehouse.tables import gold_table, held_changes_table, quality_results_table, quarantine_table

Rows = list[dict[str, Any]]

#: Placeholder in a query file -> what it names (`query_text`).
PLACEHOLDERS = ("{results}", "{metrics}", "{quarantine}")


def query_names() -> list[str]:
    """Every operator query shipped with the engine (`lakehouse/quality/queries/<name>.sql`)."""
    folder = resources.files("lakehouse.quality").joinpath("queries")
    return sorted(p.name[: -len(".sql")] for p in folder.iterdir() if p.name.endswith(".sql"))


def query_text(name: str, tables: Mapping[str, str]) -> str:
    """A query's SQL with its placeholders replaced by `tables` (placeholder -> table name).

    >>> "FROM main.q.expectation_results" in query_text("pass_rate_by_run", {"{results}": "main.q.expectation_results"})
    True
    """
    text = resources.files("lakehouse.quality").joinpath("queries", f"{name}.sql").read_text()
    for placeholder, table in tables.items():
        text = text.replace(placeholder, table)
    return text


def placeholders_of(name: str) -> set[str]:
    """The tables a query reads, as placeholders."""
    text = query_text(name, {})
    return {p for p in PLACEHOLDERS if p in text}


def pipeline_tables(pipeline: Pipeline) -> dict[str, str]:
    """The pipeline's table for each placeholder."""
    return {"{results}": quality_results_table(pipeline), "{metrics}": metrics_table(pipeline), "{quarantine}": quarantine_table(pipeline)}


@dataclass(frozen=True)
class Dashboard:
    """Where the page was written and what it held (for the CLI's report)."""

    path: Path
    runs: int
    failing: int
    quarantined: int
    batches: int

    def render(self) -> str:
        return (f"dashboard: {self.path} ({self.runs} quality runs, {self.failing} failing checks in the latest, "
                f"{self.quarantined} records quarantined, {self.batches} stream batches)")


# --------------------------------------------------------------------------- reading (Spark)


def gold_freshness_sql(pipeline: Pipeline, existing: Mapping[str, Sequence[str]]) -> str | None:
    """Rows, newest source commit reflected and newest write of each gold table in `existing`
    (table -> its columns; a table made before gold had freshness columns reads null)."""
    parts = []
    for view in sorted(pipeline.views):
        table = gold_table(pipeline, view)
        if table not in existing:
            continue
        source_ts, updated_at = (f"max({c})" if c in existing[table] else "CAST(NULL AS TIMESTAMP)" for c in FRESHNESS_COLUMNS)
        parts.append(f"SELECT '{view}' AS view, count(*) AS rows, {source_ts} AS source_ts, {updated_at} AS updated_at FROM {table}")
    return " UNION ALL ".join(parts) if parts else None


def held_changes_sql(pipeline: Pipeline, existing: Sequence[str]) -> str | None:
    """Changes held by each quarantine rule, per source whose held table is in `existing`."""
    parts = [
        f"SELECT '{s.name}' AS source, _reason AS reason, count(*) - count(_released_at) AS held, count(_released_at) AS released, "
        f"max(_held_at) AS last_held_at FROM {held_changes_table(pipeline, s)} GROUP BY _reason"
        for s in pipeline.sources.values() if held_changes_table(pipeline, s) in existing
    ]
    return (" UNION ALL ".join(parts) + " ORDER BY held DESC, source, reason") if parts else None


def dashboard_data(spark: SparkSession, pipeline: Pipeline) -> dict[str, Rows]:
    """Every operator query's rows, plus `gold_freshness`; a query whose table does not exist yet
    (no quality run, no stream so far) has no rows."""
    tables = pipeline_tables(pipeline)
    exists = {p: spark.catalog.tableExists(t) for p, t in tables.items()}
    data: dict[str, Rows] = {}
    for name in query_names():
        needs = placeholders_of(name)
        data[name] = [r.asDict() for r in spark.sql(query_text(name, tables)).collect()] if all(exists[p] for p in needs) else []
    gold = {gold_table(pipeline, v): spark.table(gold_table(pipeline, v)).columns for v in pipeline.views
            if spark.catalog.tableExists(gold_table(pipeline, v))}
    sql = gold_freshness_sql(pipeline, gold)
    data["gold_freshness"] = [r.asDict() for r in spark.sql(sql).collect()] if sql else []
    held = [held_changes_table(pipeline, s) for s in pipeline.sources.values() if spark.catalog.tableExists(held_changes_table(pipeline, s))]
    sql = held_changes_sql(pipeline, held)
    data["held_changes"] = [r.asDict() for r in spark.sql(sql).collect()] if sql else []
    return data


def write_dashboard(spark: SparkSession, pipeline: Pipeline, lake: Path, out: Path | None = None) -> Dashboard:
    """Read the tables and write the page (default `<lake>/quality/dashboard/<pipeline>.html`)."""
    data = dashboard_data(spark, pipeline)
    path = out or Path(lake) / "quality" / "dashboard" / f"{pipeline.name}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    docs = data_docs_folder(Path(lake), pipeline) / "index.html"
    html = render_dashboard(pipeline.name, data, data_docs=docs if docs.exists() else None)
    path.write_text(html)
    latest = data.get("failing_checks_latest_run", [])
    return Dashboard(path, len(data.get("pass_rate_by_run", [])), len(latest),
                     sum(r["records"] for r in data.get("quarantine_by_reason", [])), sum(r["batches"] or 0 for r in data.get("stream_throughput_by_minute", [])))


# --------------------------------------------------------------------------- rendering (pure)

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1180px; color: #1d2733; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #dde3ea; }
.meta { color: #5b6b7c; } .grid2 { display: flex; flex-wrap: wrap; gap: 16px; }
.tiles { display: flex; gap: 12px; margin: 16px 0; } .tile { border: 1px solid #dde3ea; border-radius: 6px; padding: 8px 14px; }
.tile b { display: block; font-size: 20px; } .bad { color: #b42318; } .good { color: #1a7f37; }
table { border-collapse: collapse; margin: 6px 0 12px; } th, td { border-bottom: 1px solid #e6ebf0; padding: 4px 10px; text-align: left; }
th { background: #f4f6f8; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.chart { border: 1px solid #e6ebf0; border-radius: 6px; background: #fff; }
.chart .grid { stroke: #e6ebf0; } .chart .tick, .chart .legend { font-size: 11px; fill: #5b6b7c; }
.chart .chart-title { font-size: 13px; font-weight: 600; fill: #1d2733; } .empty { color: #5b6b7c; font-style: italic; }
"""


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _table(rows: Rows, columns: Sequence[str], empty: str, css_class: str) -> str:
    if not rows:
        return f'<p class="empty">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(
            f'<td class="num">{escape(_text(r.get(c)))}</td>' if isinstance(r.get(c), (int, float, Decimal)) and not isinstance(r.get(c), bool)
            else f"<td>{escape(_text(r.get(c)))}</td>" for c in columns
        ) + "</tr>"
        for r in rows
    )
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _pivot(rows: Rows, x: str, series: str, value: str) -> tuple[list[str], dict[str, list[float | None]]]:
    """Rows (x, series, value) -> x labels in first-seen order, one value list per series."""
    position = {label: i for i, label in enumerate(dict.fromkeys(_text(r[x]) for r in rows))}
    out: dict[str, list[float | None]] = {}
    for r in rows:
        values = out.setdefault(str(r[series]), [None] * len(position))
        values[position[_text(r[x])]] = float(r[value]) if r[value] is not None else None
    return list(position), out


def _quality(data: Mapping[str, Rows]) -> str:
    runs = list(reversed(data.get("pass_rate_by_run", [])))  # the query lists newest first
    if not runs:
        return '<h2>Quality</h2><p class="empty">no quality run yet: run <code>cdc-enrich run --stage quality</code></p>'
    last = runs[-1]
    latest = data.get("failing_checks_latest_run", [])
    tiles = (
        f'<div class="tiles"><div class="tile">latest run<b>{escape(_text(last["run_at"]))}</b></div>'
        f'<div class="tile">pass rate<b class="{"good" if last["pass_rate_pct"] == 100 else "bad"}">{_text(float(last["pass_rate_pct"]))} %</b></div>'
        f'<div class="tile">failing checks<b class="{"bad" if latest else "good"}">{len(latest)}</b></div>'
        f'<div class="tile">checks<b>{_text(last["checks"])}</b></div></div>'
    )
    labels = [_text(r["run_at"]) for r in runs]
    pass_rate = line_chart("Pass rate by run", labels, {"pass rate %": [float(r["pass_rate_pct"]) for r in runs]}, "%")
    trend_rows = [dict(r, table=f'{r["layer"]} {r["table_name"]}') for r in data.get("failing_checks_by_table", [])]
    failing_tables = {r["table"] for r in trend_rows if r["failing"]}
    trend_labels, trend = _pivot([r for r in trend_rows if r["table"] in failing_tables], "run_at", "table", "failing")
    trend_chart = line_chart("Failing checks by table, per run", trend_labels, trend, "failing checks") if trend else ""
    columns = ("layer", "table_name", "check_name", "severity", "description", "observed_value", "unexpected_count", "unexpected_percent")
    return (
        "<h2>Quality</h2>" + tiles + f'<div class="grid2">{pass_rate}{trend_chart}</div>'
        + "<h3>Failing checks of the latest run</h3>" + _table(latest, columns, "every check of the latest run passed", "failing")
    )


def _quarantine(data: Mapping[str, Rows]) -> str:
    rows, held = data.get("quarantine_by_reason", []), data.get("held_changes", [])
    chart = ""
    if rows or held:
        sources = list(dict.fromkeys([r["source"] for r in rows] + [r["source"] for r in held]))
        unreadable = [float(sum(r["records"] for r in rows if r["source"] == s)) for s in sources]
        holding = [float(sum(r["held"] for r in held if r["source"] == s)) for s in sources]
        chart = stacked_bar_chart("Kept out of the lake, by source", sources,
                                  {"records bronze could not read": unreadable, "changes held by a rule": holding}, "records")
    return (
        "<h2>Quarantine</h2>" + chart + "<h3>Records bronze could not read</h3>"
        + _table(rows, ("source", "reason", "records", "first_at", "last_at"), "nothing quarantined", "quarantine")
        + "<h3>Changes held out of silver by quarantine rules</h3>"
        + _table(held, ("source", "reason", "held", "released", "last_held_at"), "no change held", "held")
    )


def _gold(data: Mapping[str, Rows], now: datetime) -> str:
    rows = []
    for r in data.get("gold_freshness", []):
        age = (now - r["updated_at"]).total_seconds() / 60 if r.get("updated_at") else None
        rows.append(dict(r, minutes_since_write=round(age, 1) if age is not None else None))
    return "<h2>Gold: freshness and rows</h2>" + _table(
        rows, ("view", "rows", "source_ts", "updated_at", "minutes_since_write"), "no gold table yet", "gold"
    ) + '<p class="meta">source_ts: the newest source commit any gold row reflects; updated_at: the newest write.</p>'


def _streams(data: Mapping[str, Rows]) -> str:
    rows = data.get("stream_throughput_by_minute", [])
    if not rows:
        return '<h2>Streams</h2><p class="empty">no stream metrics yet (<code>&lt;quality_schema&gt;.stream_metrics</code> fills as streams run)</p>'
    labels, rows_in = _pivot(rows, "minute", "stage", "rows_in")
    _, batch_s = _pivot(rows, "minute", "stage", "avg_batch_s")
    charts = [stacked_bar_chart("Rows in per minute, by stage", labels, rows_in, "rows"),
              line_chart("Mean batch time, by stage", labels, batch_s, "seconds")]
    lag = data.get("kafka_lag", [])
    if lag:
        lag_labels, behind = _pivot(lag, "at", "stream", "records_behind")
        charts.append(line_chart("Kafka records behind, by bronze stream", lag_labels, behind, "records"))
    return "<h2>Streams</h2>" + f'<div class="grid2">{"".join(charts)}</div>'


def render_dashboard(pipeline: str, data: Mapping[str, Rows], data_docs: Path | None = None, generated_at: str | None = None,
                     now: datetime | None = None) -> str:
    """The page's HTML from query rows (`dashboard_data`'s shape; missing queries count as empty)."""
    now = now or datetime.now(timezone.utc).replace(tzinfo=None)
    generated_at = generated_at or now.strftime("%Y-%m-%d %H:%M UTC")
    docs = (f'<a id="data-docs" href="{escape(data_docs.as_uri())}">GX Data Docs of the latest run</a>' if data_docs
            else "GX Data Docs: none built yet (a quality run with a lake builds them)")
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>cdc-enrich: {escape(pipeline)}</title><style>{CSS}</style></head><body>",
        f"<h1>cdc-enrich: {escape(pipeline)}</h1>",
        f'<p class="meta">generated {escape(generated_at)} &middot; {docs}</p>',
        _quality(data), _quarantine(data), _gold(data, now), _streams(data),
        "</body></html>",
    ])
