"""Test data shared by tiers: more views on the shop tables (other join types, a primary-key outer join)."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from lakehouse.declaration import Pipeline, parse_pipeline

VARIANT_VIEWS = """
  orders_inner:
    base: orders
    joins: [{alias: customer, via: orders.customer, type: inner}]
    columns: {order_id: orders.id, status: orders.status, customer_id: orders.customer_id, customer_name: customer.name}
  items_left_chain:
    base: order_items
    joins:
      - {alias: ord, via: order_items.order, type: left}
      - {alias: customer, via: ord.customer, type: inner}
      - {alias: product, via: order_items.product, type: inner}
    columns: {order_id: order_items.order_id, line_no: order_items.line_no, quantity: order_items.quantity,
              order_status: ord.status, customer_name: customer.name, product_sku: product.sku}
  orders_twin_outer:
    base: orders
    joins:
      - {alias: twin, table: customers, "on": primary_key, type: outer}
      - {alias: customer, via: orders.customer, type: left}
    columns: {order_id: orders.id, status: orders.status, twin_name: twin.name, customer_name: customer.name}
"""


def all_views_pipeline(shop_pipeline_path: Path) -> Pipeline:
    """The shop pipeline's current-state views with VARIANT_VIEWS added, over its five core tables
    (its as-of and windowed views have their own tests: tests/integration/test_gold_as_of.py,
    test_gold_windowed.py)."""
    return current_state_only(five_tables(parse_pipeline(shop_pipeline_path.read_text().rstrip() + "\n" + VARIANT_VIEWS, filename="all_views.yml")))


def current_state_only(pipeline: Pipeline) -> Pipeline:
    """The pipeline's current-state (foreign-key) views only: its as-of views (read silver history)
    and windowed views (pair events) have their own tests."""
    return replace(pipeline, views={name: view for name, view in pipeline.views.items() if not view.temporal and not view.windowed})


def narrowed(pipeline: Pipeline, *views: str) -> Pipeline:
    """`pipeline` with only `views` and the sources they read (fewer queries for a stage test)."""
    chosen = {name: pipeline.views[name] for name in views}
    names = {view.table_of(alias) for view in chosen.values() for alias in view.aliases}
    return replace(pipeline, sources={n: s for n, s in pipeline.sources.items() if n in names}, views=chosen)


DEMO_EXTRAS = ("refunds", "payment_methods")  # the demo's windowed view and global table read these
# Tests whose subject is not those kinds run on the five core tables: each source is a stream in
# every stage, so the two extras cost every end-to-end run time without adding to what it proves
# (the demo and tests/e2e/test_pipeline_chaos.py run the whole file).


def five_tables(pipeline: Pipeline) -> Pipeline:
    """The shop pipeline over its five core tables: without the refunds and payment_methods
    sources, the windowed view and the global join (for tests whose data or cost is the five
    tables; the windowed and global kinds have their own tests)."""
    views = {}
    for name, view in pipeline.views.items():
        if view.windowed:
            continue
        dropped = {j.alias for j in view.joins if j.table in DEMO_EXTRAS}
        views[name] = replace(view, joins=tuple(j for j in view.joins if j.alias not in dropped),
                              columns=tuple(c for c in view.columns if c.alias not in dropped))
    return replace(pipeline, sources={n: s for n, s in pipeline.sources.items() if n not in DEMO_EXTRAS}, views=views)


def narrowed_file(raw: dict[str, Any], *views: str) -> dict[str, Any]:
    """`narrowed` on a pipeline file's parsed YAML (for tests that hand a job a file): the same
    views and sources, read off the parsed pipeline."""
    kept = narrowed(parse_pipeline(yaml.safe_dump(raw, sort_keys=False), filename="narrowed.yml"), *views)
    out = copy.deepcopy(raw)
    out["sources"] = {n: s for n, s in out["sources"].items() if n in kept.sources}
    out["views"] = {n: v for n, v in out.get("views", {}).items() if n in kept.views}
    return out


def five_tables_file(raw: dict[str, Any]) -> dict[str, Any]:
    """`five_tables` on a pipeline file's parsed YAML (for tests that hand a job a file)."""
    out = copy.deepcopy(raw)
    out["sources"] = {n: s for n, s in out["sources"].items() if n not in DEMO_EXTRAS}
    views = {}
    for name, view in out.get("views", {}).items():
        joins = view.get("joins", [])
        if any("window" in j for j in joins):
            continue
        dropped = {j["alias"] for j in joins if j.get("table") in DEMO_EXTRAS}
        view["joins"] = [j for j in joins if j["alias"] not in dropped]
        view["columns"] = {c: v for c, v in view["columns"].items()
                           if str(v["from"] if isinstance(v, dict) else v).split(".")[0] not in dropped}
        views[name] = view
    out["views"] = views
    return out

