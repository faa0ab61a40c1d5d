"""The pipeline file: the demo declaration loads, and each kind of mistake is rejected with the
file, the line and the dotted path of the wrong field, before any job starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse.declaration import load_pipeline, parse_pipeline
from lakehouse.errors import PipelineConfigError

GOOD = """\
name: shop
kafka:
  topic_prefix: shop
sources:
  customers:
    primary_key: [id]
    columns:
      id: bigint
      name: string
  orders:
    primary_key: [id]
    columns:
      id: bigint
      customer_id: bigint
      total: decimal(12,2)
    foreign_keys:
      customer: {columns: [customer_id], references: customers}
views:
  orders_enriched:
    base: orders
    joins:
      - {alias: c, via: orders.customer, type: left}
    columns:
      order_id: orders.id
      customer_name: c.name
"""


def rejected(text: str) -> str:
    with pytest.raises(PipelineConfigError) as info:
        parse_pipeline(text, filename="bad.yml")
    return str(info.value)


def test_the_demo_pipeline_loads_into_immutable_objects(shop_pipeline):
    assert set(shop_pipeline.sources) == {"customers", "products", "orders", "order_items", "payments", "refunds", "payment_methods"}
    assert [s.name for s in shop_pipeline.sources.values() if s.kind != "table"] == ["payments", "refunds", "payment_methods"]
    assert shop_pipeline.source("order_items").primary_key == ("order_id", "line_no")
    assert shop_pipeline.source("orders").topic == "shop.public.orders"
    chain = shop_pipeline.views["order_items_enriched"]
    assert [(j.alias, j.table, j.type, j.parent_alias) for j in chain.joins] == [
        ("ord", "orders", "inner", "order_items"),
        ("customer", "customers", "left", "ord"),
        ("product", "products", "left", "order_items"),
    ]
    with pytest.raises(AttributeError):
        shop_pipeline.source("orders").topic = "x"  # frozen


def test_table_names_follow_catalog_and_schema():
    pipeline = parse_pipeline(GOOD.replace("kafka:", "tables:\n  catalog: main\n  gold_schema: gold\nkafka:"))
    assert pipeline.tables.qualified("gold", "orders_enriched") == "main.gold.orders_enriched"
    assert pipeline.tables.qualified("bronze", "orders") == "main.shop_bronze.orders"
    assert pipeline.tables.qualified("analyst", "orders_enriched") == "main.gold_analyst.orders_enriched"
    named = parse_pipeline(GOOD.replace("kafka:", "tables:\n  analyst_schema: shop\nkafka:"))
    assert named.tables.qualified("analyst", "orders_enriched") == "shop.orders_enriched"


def test_analyst_views_need_a_schema_of_their_own():
    with pytest.raises(PipelineConfigError) as info:
        parse_pipeline(GOOD.replace("kafka:", "tables:\n  gold_schema: gold\n  analyst_schema: gold\nkafka:"), "p.yml")
    assert "tables.analyst_schema" in str(info.value) and "a schema of their own" in str(info.value)


def test_each_stage_may_have_its_own_interval():
    pipeline = parse_pipeline(GOOD.replace("kafka:\n", "options:\n  processing_time: 5 seconds\n  intervals:\n    bronze: 1 second\nkafka:\n", 1))
    assert pipeline.options.interval("bronze") == "1 second"
    assert pipeline.options.interval("gold") == "5 seconds"
    assert (pipeline.options.interval_seconds("bronze"), pipeline.options.interval_seconds("gold")) == (1.0, 5.0)
    assert pipeline.options.continuous == "chained"


def test_a_continuous_run_may_chain_its_stages():
    pipeline = parse_pipeline(GOOD.replace("kafka:\n", "options:\n  continuous: chained\n  intervals:\n    bronze: 2 minutes\nkafka:\n", 1))
    assert pipeline.options.continuous == "chained"
    assert pipeline.options.interval_seconds("bronze") == 120.0


def test_a_good_file_has_no_problems():
    pipeline = parse_pipeline(GOOD, "good.yml")
    assert pipeline.views["orders_enriched"].joins[0].table == "customers"


@pytest.mark.parametrize(
    ("mutation", "line", "expected"),
    [
        pytest.param(("    primary_key: [id]\n    columns:\n      id: bigint\n      name", "    columns:\n      id: bigint\n      name"), 5, "sources.customers.primary_key: missing", id="missing-primary-key"),
        pytest.param(("references: customers", "references: clients"), 17, "sources.orders.foreign_keys.customer.references: references unknown source 'clients'", id="fk-unknown-table"),
        pytest.param(("columns: [customer_id]", "columns: [cust_id]"), 17, "foreign_keys.customer.columns[0]: foreign key column 'cust_id' is not a column of 'orders'", id="fk-column-missing"),
        pytest.param(("total: decimal(12,2)", "total: money"), 15, "sources.orders.columns.total: expected a column type", id="unknown-type"),
        pytest.param(("total: decimal(12,2)", "total: decimal(40,2)"), 15, "sources.orders.columns.total: expected a column type", id="decimal-too-wide"),
        pytest.param(("  customers:\n", "  customer-s:\n"), 5, "source name must be a plain identifier", id="identifier-not-plain"),
        pytest.param(("via: orders.customer", "via: orders.client"), 22, "views.orders_enriched.joins[0].via: source 'orders' declares no foreign key 'client'", id="join-unknown-fk"),
        pytest.param(("base: orders", "base: invoices"), 20, "views.orders_enriched.base: unknown source 'invoices'", id="view-unknown-base"),
        pytest.param(("customer_name: c.name", "customer_name: c.nickname"), 25, "views.orders_enriched.columns.customer_name: 'customers' has no column 'nickname'", id="view-unknown-column"),
        pytest.param(("type: left", "type: sideways"), 22, "views.orders_enriched.joins[0].type: expected one of inner, left", id="join-type"),
        pytest.param(("    primary_key: [id]\n    columns:\n      id: bigint\n      customer_id", "    primary_key: 7\n    columns:\n      id: bigint\n      customer_id"), 11, "sources.orders.primary_key: expected a non-empty list of column names, got a number 7", id="wrong-type-primary-key"),
        pytest.param(("kafka:\n", "kafka:\n  max_offsets_per_trigger: lots\n"), 3, "kafka.max_offsets_per_trigger: expected a whole number >= 1", id="wrong-type-number"),
        pytest.param(("  topic_prefix: shop\n", "  topic_prefix: shop\n  topic_prefx: x\n"), 4, "kafka.topic_prefx: unknown field 'topic_prefx'", id="misspelt-field"),
        pytest.param(("kafka:\n", "options:\n  gold_refresh: sometimes\nkafka:\n"), 3, "options.gold_refresh: expected one of auto, incremental, recompute", id="gold-refresh-mode"),
        pytest.param(("kafka:\n", "options:\n  gold_incremental_overhead_rows: -1\nkafka:\n"), 3, "options.gold_incremental_overhead_rows: expected a whole number >= 0", id="gold-overhead"),
        pytest.param(("kafka:\n", "options:\n  continuous: sometimes\nkafka:\n"), 3, "options.continuous: expected one of chained, concurrent", id="continuous-schedule"),
        pytest.param(("kafka:\n", "options:\n  intervals:\n    gold: soon\nkafka:\n"), 4, "options.intervals.gold: expected an interval such as '10 seconds'", id="stage-interval"),
        pytest.param(("kafka:\n", "options:\n  intervals:\n    platinum: 1 second\nkafka:\n"), 4, "options.intervals.platinum: unknown field", id="stage-interval-unknown-stage"),
        pytest.param(("order_id: orders.id\n", ""), 23, "must select the base table's primary key column orders.id", id="view-without-key"),
        pytest.param(("      customer_id: bigint\n", "      customer_id: string\n"), 17, "column 'customer_id' is string but customers.id is bigint", id="fk-type-mismatch"),
        pytest.param(("  customers:\n    primary_key: [id]", "  customers:\n    primary_key: [id, id]"), 6, "a primary key column is listed twice", id="duplicate-pk-column"),
    ],
)
def test_a_bad_file_names_the_line_and_field(mutation: tuple[str, str], line: int, expected: str):
    old, new = mutation
    assert old in GOOD, f"test mutation does not apply: {old!r}"
    message = rejected(GOOD.replace(old, new, 1))
    assert f"bad.yml:{line}: " in message, message
    assert expected in message, message


def test_every_problem_is_reported_at_once():
    text = GOOD.replace("customer_id: bigint", "customer_id: bignum").replace("kafka:\n", "kafka:\n  starting_offsets: never\n")
    message = rejected(text)
    assert "2 problems" in message
    assert message.index("bad.yml:3: kafka.starting_offsets") < message.index("bad.yml:15: sources.orders.columns.customer_id")


def test_not_yaml_is_rejected_with_its_line():
    message = rejected("name: shop\nsources: [\n  - {")
    assert message.startswith("bad.yml:") and "not valid YAML" in message


def test_a_missing_file_says_which(tmp_path: Path):
    with pytest.raises(PipelineConfigError, match="cannot read the pipeline file"):
        load_pipeline(tmp_path / "nope.yml")


def test_cli_rejects_a_bad_file_before_any_job_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from cdc_enrich.cli import main

    bad = tmp_path / "pipeline.yml"
    bad.write_text(GOOD.replace("references: customers", "references: clients"))
    assert main(["run", "--pipeline", str(bad), "--lake", str(tmp_path / "lake")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:17: sources.orders.foreign_keys.customer.references" in err
    assert not (tmp_path / "lake").exists()  # nothing was started


def test_yaml_1_1_words_stay_names_as_keys():
    """`on:` would be the boolean true in YAML 1.1; as a field or column name it must stay text."""
    text = GOOD.replace("      - {alias: c, via: orders.customer, type: left}", "      - {alias: c, table: customers, on: primary_key, type: outer}")
    pipeline = parse_pipeline(text.replace("      name: string", "      name: string\n      no: string"))
    join = pipeline.views["orders_enriched"].joins[0]
    assert join.is_primary_key_join and join.type == "outer"
    assert "no" in pipeline.source("customers").column_names
