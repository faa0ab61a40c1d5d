"""Quality suites and runner: real great-expectations on real Delta tables in the documented layouts.

The tables are written here directly (bronze, quarantine, silver current, gold), tiny, under
unique schema names, so these tests need none of the bronze/silver/gold jobs. Two sets:
a clean one, on which every expectation must pass, and one with planted defects, each of
which must fail exactly its own expectation (asserted by table + expectation type + check).
"""

from __future__ import annotations

import copy
import dataclasses
import time
import uuid
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakehouse.declaration import Pipeline, Source, View
from lakehouse.errors import UnknownNameError
from lakehouse.tables import (
    SEQUENCE_TYPE,
    bronze_schema,
    bronze_table,
    gold_table,
    quality_results_table,
    quarantine_schema,
    quarantine_table,
    silver_current_schema,
    silver_current_table,
    spark_type,
)
from lakehouse.quality.runner import QualityReport, run_quality
from lakehouse.quality.suites import build_suites
from lakehouse.silver import ensure_silver_tables
from testkit.reference_silver import append_silver_rows
from tests.conftest import REPO
from tests.shop_views import five_tables

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


# --------------------------------------------------------------------------- helpers


def unique_pipeline(pipeline: Pipeline, tag: str) -> Pipeline:
    """The shop's five tables and their views (`tests.shop_views.five_tables`: the data below is
    theirs) with schemas of their own, so test sets never see each other's tables."""
    pipeline = five_tables(pipeline)
    tables = dataclasses.replace(
        pipeline.tables,
        catalog=None,
        bronze_schema=f"q{tag}_bronze",
        silver_schema=f"q{tag}_silver",
        gold_schema=f"q{tag}_gold",
        quality_schema=f"q{tag}_quality",
    )
    return dataclasses.replace(pipeline, tables=tables)


def pk(source: Source, row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c] for c in source.primary_key)


def silver_row(source: Source, seq: int, deleted: bool = False, **values: Any) -> dict[str, Any]:
    row = {c: (values.get(c) if not deleted or c in source.primary_key else None) for c in source.column_names}
    key = ",".join(str(values[c]) for c in source.primary_key)
    return row | {
        "_row_hash": None if deleted else f"h:{source.name}:{key}:{seq}",
        "_sequence": Decimal(seq),
        "_source_ts": NOW,
        "_op": "d" if deleted else "r",
        "_deleted": deleted,
        "_updated_at": NOW,
    }


def shop_silver(p: Pipeline) -> dict[str, list[dict[str, Any]]]:
    """Tiny current state; customer 4 is deleted (order 3 points at it: a left join finds nothing)."""
    c, pr, o, oi, pay = (p.source(n) for n in ("customers", "products", "orders", "order_items", "payments"))
    return {
        "customers": [
            silver_row(c, 100, id=1, name="Ann", email="ann@x", segment="gold", created_at=NOW),
            silver_row(c, 101, id=2, name="Bob", email="bob@x", segment="basic", created_at=NOW),
            silver_row(c, 140, deleted=True, id=4),
        ],
        "products": [
            silver_row(pr, 110, id=10, sku="P10", title="Pen", price=Decimal("1.50"), description="blue"),
            silver_row(pr, 111, id=11, sku="P11", title="Pad", price=Decimal("2.25"), description="A5"),
        ],
        "orders": [
            silver_row(o, 120, id=1, customer_id=1, status="shipped", order_date=date(2026, 2, 1), total=Decimal("5.25")),
            silver_row(o, 121, id=2, customer_id=2, status="new", order_date=date(2026, 2, 2), total=Decimal("4.50")),
            silver_row(o, 122, id=3, customer_id=4, status="new", order_date=date(2026, 2, 3), total=Decimal("2.25")),
        ],
        "order_items": [
            silver_row(oi, 130, order_id=1, line_no=1, product_id=10, quantity=2, unit_price=Decimal("1.50")),
            silver_row(oi, 131, order_id=1, line_no=2, product_id=11, quantity=1, unit_price=Decimal("2.25")),
            silver_row(oi, 132, order_id=2, line_no=1, product_id=10, quantity=3, unit_price=Decimal("1.50")),
            silver_row(oi, 133, order_id=3, line_no=1, product_id=11, quantity=1, unit_price=Decimal("2.25")),
        ],
        "payments": [silver_row(pay, 160, id=1, order_id=1, amount=Decimal("5.25"), method="card", paid_at=NOW)],
    }


def bronze_rows(source: Source, silver: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What Kafka delivered for that state: a create per key; for a deleted key also the
    delete and the tombstone after it (which has no sequence)."""
    rows: list[dict[str, Any]] = []

    def record(op: str, seq: Decimal | None, key: dict[str, Any], after: dict[str, Any] | None) -> None:
        rows.append(
            {
                "_topic": source.topic,
                "_partition": 0,
                "_offset": len(rows),
                "_kafka_ts": NOW,
                "_op": op,
                "_key": key,
                "_after": after,
                "_sequence": seq,
                "_ingested_at": NOW,
            }
        )

    for row in silver:
        key = {c: row[c] for c in source.primary_key}
        if row["_deleted"]:
            record("c", row["_sequence"] - 1, key, key | {c: None for c in source.value_columns})
            record("d", row["_sequence"], key, None)
            record("tombstone", None, key, None)
        else:
            record("r", row["_sequence"], key, {c: row[c] for c in source.column_names})
    return rows


def gold_rows(p: Pipeline, view: View, silver: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The view's join over live silver rows, with the lineage columns gold records."""
    live = {
        name: {pk(p.source(name), r): r for r in rows if not r["_deleted"]} for name, rows in silver.items()
    }
    out = []
    for base_row in live[view.base].values():
        picked: dict[str, dict[str, Any] | None] = {view.base: base_row}
        keep = True
        for join in view.joins:
            parent = picked[join.parent_alias]
            found = None
            if parent is not None:
                parent_source = p.source(view.table_of(join.parent_alias))
                cols = parent_source.foreign_key(join.foreign_key).columns if join.foreign_key else parent_source.primary_key
                found = live[join.table].get(tuple(parent[c] for c in cols))
            if found is None and join.type == "inner":
                keep = False
                break
            picked[join.alias] = found
        if not keep:
            continue
        row = {c.name: (picked[c.alias] or {}).get(c.column) for c in view.columns}
        for alias in view.aliases:
            src = picked[alias]
            row[f"_{alias}_hash"] = None if src is None else f"g:{src['_row_hash']}"
            row[f"_{alias}_seq"] = None if src is None else src["_sequence"]
        row["_row_hash"] = "r:" + "|".join(str(row[c.name]) for c in view.columns)
        row["_updated_at"] = NOW
        out.append(row)
    return out


def gold_schema(p: Pipeline, view: View):
    from pyspark.sql.types import StringType, StructField, StructType, TimestampType

    fields = [StructField(c.name, spark_type(p.source(view.table_of(c.alias)).column(c.column).type), True) for c in view.columns]
    for alias in view.aliases:
        fields += [StructField(f"_{alias}_hash", StringType(), True), StructField(f"_{alias}_seq", SEQUENCE_TYPE, True)]
    fields += [StructField("_row_hash", StringType(), True), StructField("_updated_at", TimestampType(), False)]
    return StructType(fields)


def write(spark, name: str, rows: list[dict[str, Any]], schema) -> None:
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {name.rsplit('.', 1)[0]}")
    spark.createDataFrame(rows, schema).coalesce(1).write.format("delta").saveAsTable(name)


def write_set(spark, p: Pipeline, bronze, quarantine, silver, gold) -> None:
    for name, source in p.sources.items():
        write(spark, bronze_table(p, source), bronze[name], bronze_schema(source))
        ensure_silver_tables(spark, p, source)  # silver's own layout: current rows in the source's store
        append_silver_rows(spark.createDataFrame(silver[name], silver_current_schema(source)).coalesce(1), p, source)
    write(spark, quarantine_table(p), quarantine, quarantine_schema())
    for name, view in p.views.items():
        write(spark, gold_table(p, name), gold[name], gold_schema(p, view))


def clean_data(p: Pipeline):
    silver = shop_silver(p)
    bronze = {name: bronze_rows(p.source(name), rows) for name, rows in silver.items()}
    gold = {name: gold_rows(p, view, silver) for name, view in p.views.items()}
    # A snapshot replay re-delivered order 2 with a newer sequence and the same content: gold
    # keeps the row built from the older version (not rewritten). Healthy, must not be flagged.
    for row in gold["orders_enriched"]:
        if row["order_id"] == 2:
            row["_orders_seq"] -= 5
    return bronze, [], silver, gold


def failures(report: QualityReport) -> set[tuple[str, str, str, str]]:
    return {(o.table, o.expectation_type, o.check, o.severity) for o in report.failed}


# one worker runs the module (`make test`: --dist loadgroup): its clean and defect sets (40-60 s
# each) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("quality")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def clean(spark, shop_pipeline) -> Pipeline:
    p = unique_pipeline(shop_pipeline, uuid.uuid4().hex[:8])
    write_set(spark, p, *clean_data(p))
    return p


@pytest.fixture(scope="module")
def clean_report(spark, clean, lake) -> QualityReport:
    began = time.monotonic()
    report = run_quality(spark, clean, lake)
    print(f"\nrun_quality over the shop pipeline's tables: {time.monotonic() - began:.1f}s wall\n{report.render()}")
    return report


@pytest.fixture(scope="module")
def defects(spark, shop_pipeline) -> Pipeline:
    p = unique_pipeline(shop_pipeline, uuid.uuid4().hex[:8])
    bronze, quarantine, silver, gold = clean_data(p)
    o, pr, oi = p.source("orders"), p.source("products"), p.source("order_items")

    # bronze: a Kafka record stored twice, an unknown op, a change without a sequence
    bronze["customers"].append(copy.deepcopy(bronze["customers"][0]))
    bronze["orders"][0]["_op"] = "x"
    bronze["products"].append(bronze["products"][0] | {"_offset": 99, "_op": "u", "_sequence": None})
    # quarantine: one unparseable record (informational)
    quarantine.append(
        {"source": None, "topic": "shop.public.orders", "partition": 0, "offset": 7, "raw_value": b"{", "reason": "not JSON", "quarantined_at": NOW}
    )
    # silver: a duplicated single-column key and a duplicated compound key (same version)
    silver["products"].append(dict(silver["products"][0]))
    silver["order_items"].append(dict(silver["order_items"][0]))
    # gold row for a key deleted in silver: order 5 was live when gold was built, then deleted
    order5 = silver_row(o, 125, id=5, customer_id=1, status="new", order_date=date(2026, 2, 5), total=Decimal("1.00"))
    gold["orders_enriched"] += gold_rows(p, p.views["orders_enriched"], silver | {"orders": [order5]})
    silver["orders"].append(silver_row(o, 150, deleted=True, id=5))
    for row in gold["order_items_enriched"]:
        # stale: built from an older order_items version whose quantity was different
        if (row["order_id"], row["line_no"]) == (2, 1):
            row["_order_items_seq"] -= 10
            row["quantity"] = 1
        # an inner-joined alias without its hash
        if (row["order_id"], row["line_no"]) == (1, 2):
            row["_ord_hash"] = None
    write_set(spark, p, bronze, quarantine, silver, gold)
    return p


@pytest.fixture(scope="module")
def defect_report(spark, defects, lake) -> QualityReport:
    return run_quality(spark, defects, lake)


# --------------------------------------------------------------------------- suites (no Spark)


# --------------------------------------------------------------------------- runs


def test_clean_set_passes_and_every_result_lands_in_the_results_table(spark, clean, clean_report):
    report = clean_report
    assert report.ok, report.render()
    assert report.failed == ()
    assert report.skipped == ()  # silver's own tables, made as silver makes them (the late-change table empty)
    assert len(report.validated) == 15
    assert report.evaluated == sum(s.expectation_count for s in build_suites(clean)) == 55

    results = spark.table(quality_results_table(clean)).where(f"run_id = '{report.run_id}'")
    assert [f"{f.name}:{f.dataType.simpleString()}" for f in results.schema.fields] == [
        "run_id:string", "run_at:timestamp", "layer:string", "table_name:string", "suite:string",
        "expectation:string", "success:boolean", "severity:string", "observed_value:string",
        "unexpected_count:bigint", "element_count:bigint",
        "pipeline:string", "check_name:string", "description:string", "unexpected_percent:double",
    ]  # fmt: skip
    rows = results.collect()
    assert len(rows) == report.evaluated
    assert all(r.success for r in rows)
    by_table = {}
    for r in rows:
        by_table.setdefault(r.table_name, []).append(r)
    assert len(by_table[gold_table(clean, "order_items_enriched")]) == 7
    quarantine = by_table[quarantine_table(clean)]
    assert [(r.severity, r.observed_value, r.expectation) for r in quarantine] == [
        ("warning", "0", "expect_table_row_count_to_equal(value=0)")
    ]
    live_hash = [r for r in by_table[silver_current_table(clean, clean.source("customers"))] if "_row_hash" in r.expectation]
    assert live_hash[0].expectation == "expect_column_values_to_not_be_null(column=_row_hash, row_condition=_deleted == False)"
    assert (live_hash[0].element_count, live_hash[0].unexpected_count) == (2, 0)  # the deleted key is not counted
    stale = [r for r in by_table[gold_table(clean, "orders_enriched")] if "base_not_stale" in r.expectation][0]
    assert (stale.unexpected_count, stale.element_count, stale.observed_value) == (0, 3, "0")
    # GX's own Data Docs of the run, under the lake: an index and one validation page per table
    index = Path(report.data_docs)
    assert index.name == "index.html" and f"data docs: {index}" in report.render()
    pages = sorted(index.parent.glob("validations/**/*.html"))
    assert len(pages) >= len(report.validated)
    assert f"{clean.name}.gold.orders_enriched" in index.read_text()
    # what a dashboard groups and labels by: the pipeline, the stable check name, what it means
    assert {r.pipeline for r in rows} == {clean.name}
    assert {r.check_name for r in rows} == {o.check for o in report.outcomes}
    assert (stale.check_name, stale.unexpected_percent) == ("base_not_stale", 0.0)
    assert stale.description.startswith("no gold row is built from")


def test_same_run_id_replaces_its_rows(spark, clean, lake):
    run_id = f"retry-{uuid.uuid4().hex[:6]}"
    for _ in range(2):
        report = run_quality(spark, clean, lake, tables=["gold.orders_enriched"], run_id=run_id)
    assert report.ok and report.evaluated == 5
    assert spark.table(quality_results_table(clean)).where(f"run_id = '{run_id}'").count() == 5


def test_planted_defects_fail_exactly_their_expectations(defects, defect_report):
    p, report = defects, defect_report
    bronze = lambda name: bronze_table(p, p.source(name))  # noqa: E731
    silver = lambda name: silver_current_table(p, p.source(name))  # noqa: E731
    assert failures(report) == {
        (bronze("customers"), "expect_compound_columns_to_be_unique", "kafka_record_once", "error"),
        (bronze("orders"), "expect_column_values_to_be_in_set", "op_known", "error"),
        (bronze("products"), "expect_column_values_to_not_be_null", "sequence_not_null", "error"),
        (quarantine_table(p), "expect_table_row_count_to_equal", "quarantined_records", "warning"),
        (silver("products"), "expect_column_values_to_be_unique", "pk_unique", "error"),
        (silver("order_items"), "expect_compound_columns_to_be_unique", "pk_unique", "error"),
        (gold_table(p, "orders_enriched"), "unexpected_rows_expectation", "base_key_live", "error"),
        (gold_table(p, "order_items_enriched"), "unexpected_rows_expectation", "base_not_stale", "error"),
        (gold_table(p, "order_items_enriched"), "expect_column_values_to_not_be_null", "inner_hash_not_null:ord", "error"),
    }
    assert not report.ok and len(report.errors) == 8 and len(report.warnings) == 1
    counts = {(o.table, o.check): (o.unexpected_count, o.observed_value) for o in report.failed}
    assert counts[(gold_table(p, "orders_enriched"), "base_key_live")] == (1, "1")
    pk = [o for o in report.failed if (o.table, o.check) == (silver("products"), "pk_unique")][0]
    assert pk.unexpected_percent == round(100.0 * pk.unexpected_count / pk.element_count, 4) > 0
    assert counts[(gold_table(p, "order_items_enriched"), "base_not_stale")] == (1, "1")
    assert counts[(quarantine_table(p), "quarantined_records")] == (None, "1")
    assert counts[(silver("products"), "pk_unique")][0] == 2  # both rows of the duplicated key
    text = report.render()
    assert "quality FAILED" in text and "unexpected_rows_expectation(check=base_key_live)" in text
    assert "expect_column_values_to_not_be_null(column=_ord_hash)" in text


def test_warnings_alone_keep_the_run_ok(spark, defects, lake):
    report = run_quality(spark, defects, lake, tables=[quarantine_table(defects), "silver.customers"])
    assert report.ok
    assert [o.check for o in report.warnings] == ["quarantined_records"]
    assert report.validated == (quarantine_table(defects), silver_current_table(defects, defects.source("customers")))


def test_tables_that_do_not_exist_yet_are_skipped(spark, shop_pipeline, lake):
    p = unique_pipeline(shop_pipeline, uuid.uuid4().hex[:8])
    report = run_quality(spark, p, lake)
    assert report.ok and report.evaluated == 0
    assert len(report.skipped) == len(build_suites(p))
    assert "skipped: table not found" in report.render()
    with pytest.raises(UnknownNameError, match="unknown table"):
        run_quality(spark, p, lake, tables=["gold.nope"])


def test_a_table_off_its_layout_is_reported_not_raised(spark, shop_pipeline, lake):
    """A gold table missing a lineage column, with its silver table absent: the affected checks
    fail with GX's error as observed value; the others still run; the run completes."""
    p = unique_pipeline(shop_pipeline, uuid.uuid4().hex[:8])
    view = p.views["orders_enriched"]
    rows = [{k: v for k, v in r.items() if k != "_orders_hash"} for r in gold_rows(p, view, shop_silver(p))]
    schema = StructType([f for f in gold_schema(p, view).fields if f.name != "_orders_hash"])
    write(spark, gold_table(p, "orders_enriched"), rows, schema)
    report = run_quality(spark, p, lake, tables=["gold.orders_enriched"])
    assert {o.check for o in report.failed} == {"inner_hash_not_null:orders", "base_key_live", "base_not_stale"}
    assert all(o.error and o.observed_value.startswith("ERROR: ") for o in report.failed)
    assert "_orders_hash" in next(o.error for o in report.failed if o.check == "inner_hash_not_null:orders")
    assert {o.check for o in report.outcomes if o.success} == {"key_not_null:order_id", "key_unique"}
    assert not report.ok


def test_job_entry_point(spark, defects, clean, lake, tmp_path: Path, shop_pipeline_path: Path, capsys):
    from jobs.quality_check import main

    def pipeline_file(p: Pipeline) -> Path:
        text = shop_pipeline_path.read_text()
        for layer in ("bronze", "silver", "gold", "quality"):
            text = text.replace(f"shop_{layer}", getattr(p.tables, f"{layer}_schema"))
        path = tmp_path / f"{p.tables.bronze_schema}.yml"
        path.write_text(text)
        return path

    assert main(["--pipeline", str(pipeline_file(defects)), "--lake", str(lake), "--table", "gold.orders_enriched"]) == 1
    out = capsys.readouterr().out
    assert "quality FAILED" in out and "base_key_live" in out
    assert main(["--pipeline", str(pipeline_file(clean)), "--lake", str(lake), "--table", "silver.customers"]) == 0
    assert main(["--pipeline", str(pipeline_file(clean)), "--table", "gold.nope"]) == 2
    assert "unknown table" in capsys.readouterr().err


def test_the_operator_queries_in_quality_run_against_the_results(spark, defects, defect_report):
    """quality/queries/*.sql, as a dashboard (and the bundle's Lakeview datasets) run them: the
    latest run's failures are the table's, the pass rate row of a run adds up, and the stream
    queries sum a metrics table's rows by stage and minute and total the Kafka lag."""
    from datetime import datetime

    from lakehouse.metrics import METRICS_SCHEMA, metrics_table
    from lakehouse.quality.dashboard import pipeline_tables, query_names, query_text

    metrics = metrics_table(defects)
    rows = [
        (defects.name, "bronze", "bronze_x_orders", "q", "r", 0, datetime(2026, 1, 1, 0, 0, 5), 10, 9, 1, None, None, 900, {}, {"t": 4, "u": 1}, "kafka"),
        (defects.name, "bronze", "bronze_x_orders", "q", "r", 1, datetime(2026, 1, 1, 0, 0, 35), 5, 5, 0, None, None, 700, {}, {"t": 0, "u": 0}, "kafka"),
        (defects.name, "silver", "silver_x_orders", "q2", "r2", 0, datetime(2026, 1, 1, 0, 0, 50), 14, 12, None, None, None, 3000, {}, None, "delta"),
    ]
    spark.createDataFrame(rows, METRICS_SCHEMA).write.format("delta").mode("overwrite").saveAsTable(metrics)
    tables = pipeline_tables(defects)
    assert tables["{metrics}"] == metrics
    queries = {name: query_text(name, tables) for name in query_names()}
    assert set(queries) == {"pass_rate_by_run", "failing_checks_latest_run", "failing_checks_by_table", "stream_throughput_by_minute",
                            "kafka_lag", "quarantine_by_reason"}

    results = spark.table(quality_results_table(defects))
    last = results.orderBy(F.col("run_at").desc()).first().run_id  # other tests of this module run later, on subsets
    expected = results.where((F.col("run_id") == last) & ~F.col("success")).select("table_name", "expectation").collect()
    latest = spark.sql(queries["failing_checks_latest_run"]).collect()
    assert latest and sorted((r.table_name, r.expectation) for r in latest) == sorted(map(tuple, expected))
    assert [r.severity for r in latest] == sorted((r.severity for r in latest), key=lambda s: s != "error")  # errors first
    runs = {r.run_id: r for r in spark.sql(queries["pass_rate_by_run"]).collect()}
    mine = runs[defect_report.run_id]
    assert (mine.checks, mine.errors, mine.warnings) == (defect_report.evaluated, 8, 1)
    assert mine.passed == mine.checks - 9

    throughput = [(r.stage, r.batches, r.rows_in, r.rows_out, r.quarantined, r.avg_batch_s) for r in spark.sql(queries["stream_throughput_by_minute"]).collect()]
    assert throughput == [("bronze", 2, 15, 14, 1, 0.8), ("silver", 1, 14, 12, None, 3.0)]
    assert [(r.stream, r.records_behind) for r in spark.sql(queries["kafka_lag"]).collect()] == [("bronze_x_orders", 5), ("bronze_x_orders", 0)]
    trend = {(r.run_id, r.layer, r.table_name): (r.checks, r.failing) for r in spark.sql(queries["failing_checks_by_table"]).collect()}
    assert sum(f for (run, _, _), (_, f) in trend.items() if run == defect_report.run_id) == 9
    assert sum(c for (run, _, _), (c, _) in trend.items() if run == defect_report.run_id) == defect_report.evaluated
    quarantined = spark.table(quarantine_table(defects)).groupBy("reason").count().collect()
    by_reason = {r.reason: r.records for r in spark.sql(queries["quarantine_by_reason"]).collect()}
    assert by_reason == {r.reason: r["count"] for r in quarantined} and by_reason


def test_a_results_table_of_an_earlier_version_gains_the_new_columns(spark, clean, lake):
    """Results written before `pipeline`, `check_name`, `description`, `unexpected_percent`
    existed stay; the table gains the columns (null in its old rows) and new runs fill them."""
    old = dataclasses.replace(clean, tables=dataclasses.replace(clean.tables, quality_schema=f"q_old_{uuid.uuid4().hex[:6]}"))
    table = quality_results_table(old)
    spark.sql(f"CREATE SCHEMA {old.tables.quality_schema}")
    spark.sql(
        f"CREATE TABLE {table} (run_id string NOT NULL, run_at timestamp NOT NULL, layer string NOT NULL, "
        "table_name string NOT NULL, suite string NOT NULL, expectation string NOT NULL, success boolean NOT NULL, "
        "severity string NOT NULL, observed_value string, unexpected_count bigint, element_count bigint) USING delta"
    )
    spark.sql(f"INSERT INTO {table} VALUES ('old', current_timestamp(), 'gold', 't', 's', 'e', true, 'error', '0', 0, 1)")
    report = run_quality(spark, old, lake, tables=["gold.orders_enriched"])
    rows = {r.run_id: r for r in spark.table(table).collect()}
    assert rows["old"].check_name is None and rows["old"].pipeline is None
    assert {r.check_name for r in spark.table(table).where(f"run_id = '{report.run_id}'").collect()} == {o.check for o in report.outcomes}


def test_rules_declared_in_the_pipeline_file_run_beside_the_derived_suites(spark, clean, lake):
    """`expectations:` of a source (its live silver rows: the deleted customer 4 counts for no
    rule) and of a view (its gold rows), each kind once; `warn` is reported, `fail` fails the run."""
    text = """
customers:
  - {name: segment_known, accepted_values: {column: segment, values: [gold, basic]}}
  - {name: email_shape, regex: {column: email, pattern: '^[a-z]+@x$'}}
  - {name: vip_only, accepted_values: {column: segment, values: [vip]}, severity: warn, description: only VIPs (to be seen failing)}
  - {name: ids_positive, row_condition: "id > 0"}
  - {name: two_customers, row_count: {min: 2, max: 2}}
  - {name: name_unique, unique: [name]}
  - {name: email_set, not_null: email}
orders_enriched:
  - {name: customer_named, not_null: customer_name}
  - {name: totals_in_range, range: {column: total, min: 0, max: 10}}
  - {name: orders_join_customers, severity: warn, sql: "SELECT g.* FROM {table} g LEFT ANTI JOIN %s c ON g.customer_id = c.id AND NOT c._deleted"}
""" % silver_current_table(clean, clean.source("customers"))
    import yaml

    from lakehouse.declaration.loader import _rules
    from lakehouse.declaration.located import Located, Problems

    raw = yaml.safe_load(text)
    problems = Problems("rules.yml", Located("{}", "rules.yml"))
    customers = dataclasses.replace(clean.source("customers"), rules=_rules(raw["customers"], "x", clean.source("customers").column_names, problems, on_source=True))
    view = clean.views["orders_enriched"]
    view = dataclasses.replace(view, rules=_rules(raw["orders_enriched"], "y", tuple(c.name for c in view.columns), problems, on_source=False))
    problems.raise_if_any()
    ruled = dataclasses.replace(clean, sources={**clean.sources, "customers": customers}, views={**clean.views, "orders_enriched": view})

    report = run_quality(spark, ruled, lake, tables=["silver.customers", "gold.orders_enriched"])
    declared = {o.check: o for o in report.outcomes if o.check.startswith("rule:")}
    assert len(declared) == 10
    failed = {(o.check, o.severity, o.unexpected_count) for o in declared.values() if not o.success}
    assert failed == {("rule:vip_only", "warning", 2), ("rule:customer_named", "error", 1), ("rule:orders_join_customers", "warning", 1)}
    assert not report.ok and [o.check for o in report.errors] == ["rule:customer_named"]
    assert declared["rule:vip_only"].description == "only VIPs (to be seen failing)"
    assert declared["rule:email_set"].description == "email is set"
    stored = spark.table(quality_results_table(ruled)).where(f"run_id = '{report.run_id}' AND check_name LIKE 'rule:%'").count()
    assert stored == 10
