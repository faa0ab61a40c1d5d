"""The operators' page, rendered from rows (no Spark): what each section shows, and the charts'
pure geometry. The page opened in a real browser is tests/e2e/test_dashboard_browser.py."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

from lakehouse.quality.charts import line_chart, stacked_bar_chart
from lakehouse.quality.dashboard import gold_freshness_sql, placeholders_of, query_names, query_text, render_dashboard

T0 = datetime(2026, 1, 1, 12, 0)


def rows() -> dict[str, list[dict]]:
    return {
        "pass_rate_by_run": [  # newest first, as the query orders them
            {"run_id": "b", "run_at": T0 + timedelta(minutes=15), "checks": 40, "passed": 39, "errors": 1, "warnings": 0, "pass_rate_pct": 97.5},
            {"run_id": "a", "run_at": T0, "checks": 40, "passed": 40, "errors": 0, "warnings": 0, "pass_rate_pct": 100.0},
        ],
        "failing_checks_latest_run": [{"layer": "gold", "table_name": "g.v", "check_name": "rule:known_status", "severity": "error",
                                       "description": "status <is> known", "observed_value": "2", "unexpected_count": 2, "unexpected_percent": 5.0}],
        "failing_checks_by_table": [
            {"run_id": "a", "run_at": T0, "layer": "gold", "table_name": "g.v", "checks": 10, "failing": 0, "failing_errors": 0},
            {"run_id": "a", "run_at": T0, "layer": "silver", "table_name": "s.c", "checks": 10, "failing": 0, "failing_errors": 0},
            {"run_id": "b", "run_at": T0 + timedelta(minutes=15), "layer": "gold", "table_name": "g.v", "checks": 10, "failing": 1, "failing_errors": 1},
            {"run_id": "b", "run_at": T0 + timedelta(minutes=15), "layer": "silver", "table_name": "s.c", "checks": 10, "failing": 0, "failing_errors": 0},
        ],
        "quarantine_by_reason": [{"source": "orders", "reason": "not JSON", "records": 3, "first_at": T0, "last_at": T0}],
        "held_changes": [{"source": "products", "reason": "price_positive: price is at least 0.01", "held": 2, "released": 1, "last_held_at": T0}],
        "gold_freshness": [{"view": "v", "rows": 4495, "source_ts": T0, "updated_at": T0 + timedelta(seconds=30)}],
        "stream_throughput_by_minute": [
            {"stage": "bronze", "minute": T0, "batches": 2, "rows_in": 100, "rows_out": 99, "quarantined": 1, "avg_batch_s": 0.5},
            {"stage": "silver", "minute": T0, "batches": 1, "rows_in": 99, "rows_out": 90, "quarantined": None, "avg_batch_s": 2.0},
        ],
        "kafka_lag": [{"stream": "bronze_orders", "at": T0, "records_behind": 10}, {"stream": "bronze_orders", "at": T0 + timedelta(seconds=9), "records_behind": 0}],
    }


def test_the_page_shows_every_section_with_its_numbers_and_a_link_to_the_data_docs(tmp_path: Path):
    docs = tmp_path / "data_docs" / "index.html"
    html = render_dashboard("shop", rows(), data_docs=docs, now=T0 + timedelta(minutes=2, seconds=30))
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html and "http" not in html.replace("http://www.w3.org/2000/svg", "")
    assert re.search(r"pass rate<b class=\"bad\">97.50 %</b>", html)  # the latest run's, not the first
    assert "status &lt;is&gt; known" in html  # text is escaped
    assert "rule:known_status" in html and "not JSON" in html and "price_positive: price is at least 0.01" in html
    assert "<td>v</td><td class=\"num\">4,495</td>" in html and "<td class=\"num\">2.00</td>" in html  # minutes since the last write
    assert f'href="{docs.as_uri()}"' in html
    charts = re.findall(r'aria-label="([^"]+)"', html)
    assert charts == ["Pass rate by run", "Failing checks by table, per run", "Kept out of the lake, by source",
                      "Rows in per minute, by stage", "Mean batch time, by stage", "Kafka records behind, by bronze stream"]
    trend = html.split('aria-label="Failing checks by table, per run"')[1].split("</svg>")[0]
    assert "gold g.v" in trend and "silver s.c" not in trend  # only tables that failed something


def test_an_empty_lake_says_what_to_run_instead_of_drawing_nothing():
    html = render_dashboard("shop", {})
    assert "no quality run yet" in html and "cdc-enrich run --stage quality" in html
    assert "nothing quarantined" in html and "no change held" in html and "no gold table yet" in html and "no stream metrics yet" in html
    assert "<svg" not in html and "GX Data Docs: none built yet" in html


def test_a_line_chart_breaks_at_missing_values_and_a_bar_stacks_its_series():
    svg = line_chart("t", ["a", "b", "c", "d"], {"s": [1.0, 2.0, None, 4.0]})
    assert svg.count("<polyline") == 1 and svg.count("<circle") == 3  # a-b joined, d alone
    bars = stacked_bar_chart("t", ["m1", "m2"], {"x": [1.0, None], "y": [3.0, 2.0]})
    heights = [float(h) for h in re.findall(r'class="bar"[^>]*height="([0-9.]+)"', bars)]
    assert len(heights) == 3 and abs(heights[0] * 3 - heights[1]) < 0.2  # y's 3 stacked on x's 1
    assert "<title>y m2: 2</title>" in bars


def test_each_query_names_its_tables_and_gold_freshness_reads_what_a_table_has(shop_pipeline):
    assert {n: placeholders_of(n) for n in query_names()} == {
        "failing_checks_by_table": {"{results}"}, "failing_checks_latest_run": {"{results}"}, "kafka_lag": {"{metrics}"},
        "pass_rate_by_run": {"{results}"}, "quarantine_by_reason": {"{quarantine}"}, "stream_throughput_by_minute": {"{metrics}"},
    }
    assert "FROM q.r" in query_text("pass_rate_by_run", {"{results}": "q.r"})
    sql = gold_freshness_sql(shop_pipeline, {"shop_gold.orders_enriched": ["order_id", "_row_hash"],
                                             "shop_gold.order_items_enriched": ["order_id", "_source_ts", "_updated_at"]})
    assert sql == (
        "SELECT 'order_items_enriched' AS view, count(*) AS rows, max(_source_ts) AS source_ts, max(_updated_at) AS updated_at "
        "FROM shop_gold.order_items_enriched UNION ALL "
        "SELECT 'orders_enriched' AS view, count(*) AS rows, CAST(NULL AS TIMESTAMP) AS source_ts, CAST(NULL AS TIMESTAMP) AS updated_at "
        "FROM shop_gold.orders_enriched"
    )
    assert gold_freshness_sql(shop_pipeline, {}) is None
