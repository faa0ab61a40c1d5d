"""Descriptions in the pipeline file (long forms of a column and a view column), and the data
dictionary `cdc-enrich docs` writes from the declaration."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lakehouse.declaration import load_pipeline, parse_pipeline
from lakehouse.dictionary import data_dictionary
from lakehouse.errors import PipelineConfigError
from tests.conftest import REPO
from tests.unit.test_config import GOOD

SHOP = REPO / "schemas" / "shop" / "pipeline.yml"


def test_descriptions_are_declared_per_source_column_view_and_view_column() -> None:
    p = load_pipeline(SHOP)
    assert p.source("customers").description == "People who have an account in the shop."
    assert p.source("customers").column("segment").description == "Marketing segment: retail, business or vip"
    assert p.source("customers").column("name").description is None  # the short form: a type alone
    assert p.view("orders_enriched").description.startswith("Orders with the customer")
    segment = [c for c in p.view("orders_enriched").columns if c.name == "customer_segment"][0]
    assert (segment.alias, segment.column, segment.description) == ("customer", "segment", "The customer's current marketing segment")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("      name: string\n", "      name: {type: string, description: 5}\n", "description: expected a description (text)"),
        ("      name: string\n", "      name: {type: string, comment: x}\n", "unknown field 'comment'"),
        ("      name: string\n", "      name: {description: no type}\n", "expected a column type"),
    ],
)
def test_a_bad_description_is_rejected_with_its_line(old: str, new: str, expected: str) -> None:
    assert old in GOOD
    with pytest.raises(PipelineConfigError, match=re.escape(expected)):
        parse_pipeline(GOOD.replace(old, new, 1), "bad.yml")


def test_the_data_dictionary_has_every_table_column_key_join_and_rule() -> None:
    p = load_pipeline(SHOP)
    text = data_dictionary(p)
    for source in p.sources.values():
        assert f"### Source `{source.name}`" in text and f"`{source.topic}`" in text
    assert "| `segment` | string | Marketing segment: retail, business or vip |" in text
    assert "| `id` (key) | bigint |  |" in text
    assert "Foreign key `customer`: (customer_id) references `customers`." in text
    assert "- left join `customers` as `customer` on foreign key `orders.customer`." in text
    assert "| `customer_segment` | customer.segment | string | The customer's current marketing segment |" in text
    assert "| `order_date` | orders.order_date | date |  |" in text
    assert "Gold table `shop_gold.orders_enriched`, one row per `orders` row; key (order_id)." in text
    assert "Analyst view `shop_gold_analyst.orders_enriched`: the columns below plus `_source_ts` and `_updated_at`." in text
    assert "Delta time travel reaches 7 days back" in text and "`shop_quality.stream_metrics`" in text
    assert "| gold | `shop_gold.orders_enriched` | key_unique | error | one gold row per base key |" in text


def test_docs_command_writes_the_dictionary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cdc_enrich.cli import main

    out = tmp_path / "dd.md"
    assert main(["--lake", str(tmp_path), "docs", "--pipeline", str(SHOP), "--out", str(out)]) == 0
    assert out.read_text().startswith("# Data dictionary: pipeline `shop`")
    assert "written to" in capsys.readouterr().out
