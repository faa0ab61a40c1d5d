"""Gold's pure pieces: a view's plan (aliases, keys, relations) and the oracle's SQL text."""

from __future__ import annotations

from lakehouse.declaration import Pipeline
from lakehouse.gold import (
    view_plan,
)
from lakehouse.verify.oracle import oracle_sql

# --------------------------------------------------------------------------- the plan and the oracle (no Spark jobs)


def test_view_plan_of_the_chain_view(shop_pipeline: Pipeline):
    plan = view_plan(shop_pipeline, "order_items_enriched")
    assert [a.alias for a in plan.aliases] == ["order_items", "ord", "customer", "product"]
    assert plan.key_columns == ("order_id", "line_no")
    assert [(s.name, f.name) for s, f in plan.relations] == [
        ("order_items", "order"),
        ("orders", "customer"),
        ("order_items", "product"),
    ]
    # an alias's lineage hash covers what the view reads of it: key, selected and join columns
    assert plan.alias("ord").used == ("id", "customer_id", "status")
    assert plan.alias("customer").used == ("id", "name")
    assert plan.gold_columns[-9:] == (
        "_order_items_hash", "_order_items_seq", "_ord_hash", "_ord_seq",
        "_customer_hash", "_customer_seq", "_product_hash", "_product_seq", "_row_hash",
    )


def test_oracle_is_the_plain_sql_join(shop_pipeline: Pipeline):
    sql = oracle_sql(shop_pipeline, "order_items_enriched", {s: f"state_{s}" for s in shop_pipeline.sources})
    assert "FROM state_order_items AS `order_items`" in sql
    assert "JOIN state_orders AS `ord` ON `ord`.`id` = `order_items`.`order_id`" in sql
    assert "LEFT JOIN state_customers AS `customer` ON `customer`.`id` = `ord`.`customer_id`" in sql
    assert "LEFT JOIN state_products AS `product` ON `product`.`id` = `order_items`.`product_id`" in sql
    assert sql.index("`ord`") < sql.index("`customer` ON")  # declared order: a chain reads left to right


# --------------------------------------------------------------------------- pure DataFrame functions


# --------------------------------------------------------------------------- the MERGE and its hash check


# --------------------------------------------------------------------------- runs: checkpoints, replays, verify, job


