"""`cdc-enrich dashboard` opened in a real headless Chromium (Debian's, driven by Playwright): the
page written from real Delta tables (quality results, stream metrics, quarantine, gold) renders
every section, draws each chart at its size with a mark per value, and links to the Data Docs.

CDC_ENRICH_SCREENSHOT=<file.png> also saves the screenshot (how the README's is made).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from cdc_enrich.cli import main
from lakehouse.declaration import Pipeline
from lakehouse.gold import ensure_gold_table, view_plan
from lakehouse.metrics import METRICS_SCHEMA, metrics_table
from lakehouse.quality.runner import RESULTS_SCHEMA, data_docs_folder, ensure_results_table
from lakehouse.spark import ensure_schemas
from lakehouse.tables import gold_table, quarantine_schema, quarantine_table

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
T0 = datetime(2026, 1, 1, 12, 0)


def write_tables(spark, pipeline: Pipeline) -> None:
    """Three quality runs (the last failing two checks), four minutes of three stages' batches,
    two quarantined records, and a gold table with three rows."""
    ensure_schemas(spark, pipeline)
    results = []
    for run in range(3):
        for check in range(10):
            failed = run == 2 and check < 2
            results.append({
                "run_id": f"run{run}", "run_at": T0 + timedelta(minutes=15 * run), "layer": "gold", "table_name": gold_table(pipeline, "orders_enriched"),
                "suite": "gold", "expectation": f"expect_{check}", "success": not failed, "severity": "error", "observed_value": "1" if failed else "0",
                "unexpected_count": 1 if failed else 0, "element_count": 3, "pipeline": pipeline.name, "check_name": f"check_{check}",
                "description": f"planted check {check}", "unexpected_percent": 33.3 if failed else 0.0,
            })
    spark.createDataFrame(results, RESULTS_SCHEMA).write.format("delta").mode("append").saveAsTable(ensure_results_table(spark, pipeline))
    metrics = [
        (pipeline.name, stage, f"{stage}_orders", "q", "r", m, T0 + timedelta(minutes=m), 100 * (m + 1), 90 * (m + 1), 0, None, None, 800 + 100 * k, {},
         {"t": 300 - 100 * m} if stage == "bronze" else None, "kafka" if stage == "bronze" else "delta")
        for m in range(4) for k, stage in enumerate(("bronze", "silver", "gold"))
    ]
    spark.createDataFrame(metrics, METRICS_SCHEMA).write.format("delta").mode("append").saveAsTable(metrics_table(pipeline))
    spark.createDataFrame(
        [("orders", "shop.public.orders", 0, i, T0, None, b"{", "not JSON", T0) for i in range(2)], quarantine_schema()
    ).write.format("delta").mode("append").saveAsTable(quarantine_table(pipeline))
    plan = view_plan(pipeline, "orders_enriched")
    table = ensure_gold_table(spark, pipeline, plan)
    gold = [{c: None for c in plan.gold_columns} | {"order_id": i, "_orders_seq": Decimal(i), "_row_hash": "0" * 32,
                                                    "_source_ts": T0, "_updated_at": T0 + timedelta(seconds=i)} for i in range(3)]
    spark.createDataFrame(gold, plan.gold_schema()).write.format("delta").mode("append").saveAsTable(table)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Chromium is installed by make setup (tools/setup.sh)")
def test_the_dashboard_renders_in_chromium_with_its_charts_tables_and_data_docs_link(spark, lake: Path, shop_pipeline: Pipeline, tmp_path: Path):
    from playwright.sync_api import sync_playwright

    token = uuid.uuid4().hex[:6]
    pipeline = dataclasses.replace(shop_pipeline, tables=dataclasses.replace(
        shop_pipeline.tables, bronze_schema=f"d{token}_bronze", silver_schema=f"d{token}_silver", gold_schema=f"d{token}_gold", quality_schema=f"d{token}_quality"))
    write_tables(spark, pipeline)
    docs = data_docs_folder(lake, pipeline) / "index.html"
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text("<html><body><h1>Data Docs</h1></body></html>")

    from lakehouse.quality.dashboard import write_dashboard

    board = write_dashboard(spark, pipeline, lake, tmp_path / "board.html")
    assert (board.runs, board.failing, board.quarantined, board.batches) == (3, 2, 2, 12)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1240, "height": 900})
        page.goto(board.path.as_uri())
        assert page.title() == f"cdc-enrich: {pipeline.name}"
        assert [h.inner_text() for h in page.locator("h2").all()] == ["Quality", "Quarantine", "Gold: freshness and rows", "Streams"]
        charts = {c.get_attribute("aria-label"): c for c in page.locator("svg.chart").all()}
        assert list(charts) == ["Pass rate by run", "Failing checks by table, per run", "Kept out of the lake, by source",
                                "Rows in per minute, by stage", "Mean batch time, by stage", "Kafka records behind, by bronze stream"]
        for name, chart in charts.items():
            box = chart.bounding_box()
            assert box and box["width"] >= 500 and box["height"] >= 200, (name, box)  # laid out at size, on the page
        assert charts["Pass rate by run"].locator("circle").count() == 3  # one per run
        assert charts["Rows in per minute, by stage"].locator("rect.bar").count() == 12  # 4 minutes x 3 stages
        assert charts["Kafka records behind, by bronze stream"].locator("circle").count() == 4
        assert page.locator(".tile b").nth(1).inner_text() == "80.00 %"  # 8 of the latest run's 10 checks passed
        failing = page.locator("table.failing tbody tr")
        assert failing.count() == 2 and "planted check 0" in failing.nth(0).inner_text()
        assert "not JSON" in page.locator("table.quarantine").inner_text()
        gold_row = page.locator("table.gold tbody tr").first.inner_text()
        assert gold_row.startswith("orders_enriched\t3\t2026-01-01 12:00:00\t2026-01-01 12:00:02"), gold_row
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        if os.environ.get("CDC_ENRICH_SCREENSHOT"):
            page.screenshot(path=os.environ["CDC_ENRICH_SCREENSHOT"], full_page=True)
        page.click("#data-docs")
        page.wait_for_load_state()
        assert page.url == docs.as_uri() and page.locator("h1").inner_text() == "Data Docs"
        browser.close()
    assert (tmp_path / "dashboard.png").stat().st_size > 20_000

    # the CLI writes the page where the demo says (the shop's own tables: empty sections say so)
    assert main(["dashboard", "--pipeline", str(shop_pipeline.path), "--lake", str(lake)]) == 0
    assert "cdc-enrich: shop" in (lake / "quality" / "dashboard" / "shop.html").read_text()
