"""One view-to-SQL renderer, one identifier quoting, a view's derived facts on the declaration.

Pure: no SparkSession (gold's `view_plan` imports Spark types only, to compare with it).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from lakehouse.declaration import Pipeline, load_pipeline
from lakehouse.errors import UnknownNameError
from lakehouse.gold import view_plan
from lakehouse.sqltext import POSTGRES, SPARK, quote, quote_qualified, render_view
from lakehouse.verify.oracle import oracle_sql
from lakehouse.verify.postgres import postgres_view_sql, view_key_columns
from tests.conftest import REPO
from tests.shop_views import all_views_pipeline

SHOP = REPO / "schemas" / "shop" / "pipeline.yml"

SPARK_ITEMS = """SELECT
  `order_items`.`order_id` AS `order_id`,
  `order_items`.`line_no` AS `line_no`,
  `order_items`.`quantity` AS `quantity`,
  `order_items`.`unit_price` AS `unit_price`,
  `ord`.`status` AS `order_status`,
  `ord`.`customer_id` AS `customer_id`,
  `customer`.`name` AS `customer_name`,
  `order_items`.`product_id` AS `product_id`,
  `product`.`sku` AS `product_sku`,
  `product`.`title` AS `product_title`
FROM state_order_items AS `order_items`
JOIN state_orders AS `ord` ON `ord`.`id` = `order_items`.`order_id`
LEFT JOIN state_customers AS `customer` ON `customer`.`id` = `ord`.`customer_id`
LEFT JOIN state_products AS `product` ON `product`.`id` = `order_items`.`product_id`"""

POSTGRES_ORDERS = """SELECT
  "orders"."id" AS "order_id",
  "orders"."status" AS "status",
  "orders"."order_date" AS "order_date",
  "orders"."total" AS "total",
  "orders"."customer_id" AS "customer_id",
  "customer"."name" AS "customer_name",
  "customer"."segment" AS "customer_segment"
FROM "public"."orders" AS "orders"
LEFT JOIN "public"."customers" AS "customer" ON "customer"."id" = "orders"."customer_id\""""


@pytest.fixture(scope="module")
def shop() -> Pipeline:
    return load_pipeline(SHOP)


@pytest.fixture(scope="module")
def all_views() -> Pipeline:
    """The shop pipeline with VARIANT_VIEWS added."""
    return all_views_pipeline(SHOP)


def _state(pipeline: Pipeline) -> dict[str, str]:
    return {s: f"state_{s}" for s in pipeline.sources}


# --------------------------------------------------------------------------- quoting


def test_quote_wraps_and_escapes_the_dialects_quote_character() -> None:
    assert quote("id") == "`id`" and quote("id", SPARK) == "`id`"
    assert quote("a`b", SPARK) == "`a``b`"
    assert quote("id", POSTGRES) == '"id"'
    assert quote('a"b', POSTGRES) == '"a""b"'
    assert quote("a`b", POSTGRES) == '"a`b"'  # only the dialect's own quote is special


def test_quote_qualified_quotes_each_part() -> None:
    assert quote_qualified("cat", "silver", "orders") == "`cat`.`silver`.`orders`"
    assert quote_qualified("public", "orders", dialect=POSTGRES) == '"public"."orders"'
    assert quote_qualified("x.y") == "`x.y`"  # a part is one identifier, dots and all


def hand_quoted_identifiers(path) -> list[int]:
    """Lines of `path` where an f-string wraps a value in backticks itself (`` f"`{name}`" ``)."""
    import ast

    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.JoinedStr):
            parts = node.values
            for before, value, after in zip(parts, parts[1:], parts[2:]):
                if (isinstance(value, ast.FormattedValue) and isinstance(before, ast.Constant) and isinstance(after, ast.Constant)
                        and str(before.value).endswith("`") and str(after.value).startswith("`")):
                    lines.append(node.lineno)
    return lines


def test_the_engine_quotes_identifiers_through_sqltext_never_by_hand() -> None:
    """A name wrapped in backticks by hand breaks on a name holding one; `quote` (or
    `deltasql.column_ddl` for a column's DDL) doubles it. The data dictionary's backticks are Markdown."""
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for package in ("lakehouse", "jobs")
        for path in sorted((REPO / package).rglob("*.py"))
        if path.name != "dictionary.py"
        for line in hand_quoted_identifiers(path)
    ]
    assert not found, "quote these with lakehouse.sqltext.quote:\n" + "\n".join(found)


def test_the_hand_quoting_rule_sees_a_name_in_backticks(tmp_path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('a = f"SELECT `{name}` FROM t"\nb = f"SELECT {quote(name)} FROM t"\n', encoding="utf-8")
    assert hand_quoted_identifiers(sample) == [1]


# --------------------------------------------------------------------------- rendering


def test_spark_dialect_renders_the_chain_view(shop: Pipeline) -> None:
    assert render_view(shop, "order_items_enriched", _state(shop), SPARK) == SPARK_ITEMS


def test_postgres_dialect_renders_the_orders_view(shop: Pipeline) -> None:
    relations = {s: quote_qualified("public", s, dialect=POSTGRES) for s in shop.sources}
    assert render_view(shop, "orders_enriched", relations, POSTGRES) == POSTGRES_ORDERS


@pytest.mark.parametrize("view", ["orders_enriched", "order_items_enriched"])
def test_oracle_and_postgres_check_are_the_one_renderer(shop: Pipeline, view: str) -> None:
    assert oracle_sql(shop, view, _state(shop)) == render_view(shop, shop.views[view], _state(shop), SPARK)
    relations = {s: quote_qualified(shop.kafka.source_schema, s, dialect=POSTGRES) for s in shop.sources}
    assert postgres_view_sql(shop, view) == render_view(shop, view, relations, POSTGRES)


def test_both_dialects_write_the_same_join_but_for_quotes(shop: Pipeline) -> None:
    for view in shop.views:
        spark = render_view(shop, view, {s: f'"public"."{s}"' for s in shop.sources}, SPARK)
        assert spark.replace("`", '"') == postgres_view_sql(shop, view)


def test_an_outer_primary_key_join_coalesces_the_key(all_views: Pipeline) -> None:
    sql = render_view(all_views, "orders_twin_outer", _state(all_views), SPARK)
    assert "FULL OUTER JOIN state_customers AS `twin` ON `twin`.`id` = `orders`.`id`" in sql
    assert "COALESCE(`orders`.`id`, `twin`.`id`) AS `order_id`" in sql
    pg = postgres_view_sql(all_views, "orders_twin_outer")
    assert 'COALESCE("orders"."id", "twin"."id") AS "order_id"' in pg


def test_the_renderer_imports_no_spark() -> None:
    code = "import sys, lakehouse.sqltext; sys.exit(any(m.split('.')[0] == 'pyspark' for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


# --------------------------------------------------------------------------- derived facts on the model


def test_view_facts_agree_with_gold_plan(all_views: Pipeline) -> None:
    for view in all_views.views.values():
        plan = view_plan(all_views, view)
        base = all_views.source(view.base)
        assert view.base_key_columns(base) == all_views.view_key(view) == plan.key_columns, view.name
        assert view_key_columns(all_views, view) == plan.key_columns, view.name
        assert tuple(pk for _, pk in view.key_pairs(base)) == base.primary_key, view.name
        assert view.has_outer == plan.has_outer == (view.name == "orders_twin_outer"), view.name


def test_join_kinds(all_views: Pipeline) -> None:
    kinds = {(v.name, j.alias): j.kind for v in all_views.views.values() for j in v.joins}
    assert kinds[("orders_twin_outer", "twin")] == "primary_key"
    assert kinds[("orders_twin_outer", "customer")] == "foreign_key"
    assert set(kinds.values()) == {"primary_key", "foreign_key"}
    for view in all_views.views.values():
        for join in view.joins:
            assert join.is_primary_key_join == (join.kind == "primary_key") == (join.foreign_key is None)
            if not join.is_primary_key_join:
                left, fk = all_views.join_relation(view, join)
                assert (left.name, fk.name) == (view.table_of(join.parent_alias), join.foreign_key)


def test_key_pairs_refuse_another_base_and_views_resolve_by_name(shop: Pipeline) -> None:
    view = shop.view("orders_enriched")
    assert shop.view(view) is view
    with pytest.raises(UnknownNameError, match="based on 'orders'"):
        view.key_pairs(shop.source("customers"))
    with pytest.raises(KeyError, match="no view 'nope'"):
        shop.view("nope")
