"""Gold's pure pieces: a view's plan (aliases, keys, relations) and the oracle's SQL text."""

from __future__ import annotations

import pytest

from lakehouse.declaration import Pipeline
from lakehouse.errors import PipelineConfigError
from lakehouse.gold.analyst import analyst_view_sql
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
    assert plan.gold_columns[-11:] == (
        "_order_items_hash", "_order_items_seq", "_ord_hash", "_ord_seq",
        "_customer_hash", "_customer_seq", "_product_hash", "_product_seq", "_row_hash",
        "_source_ts", "_updated_at",
    )


def test_oracle_is_the_plain_sql_join(shop_pipeline: Pipeline):
    sql = oracle_sql(shop_pipeline, "order_items_enriched", {s: f"state_{s}" for s in shop_pipeline.sources})
    assert "FROM state_order_items AS `order_items`" in sql
    assert "JOIN state_orders AS `ord` ON `ord`.`id` = `order_items`.`order_id`" in sql
    assert "LEFT JOIN state_customers AS `customer` ON `customer`.`id` = `ord`.`customer_id`" in sql
    assert "LEFT JOIN state_products AS `product` ON `product`.`id` = `order_items`.`product_id`" in sql
    assert sql.index("`ord`") < sql.index("`customer` ON")  # declared order: a chain reads left to right


def test_a_recompute_handed_the_plan_uses_it_instead_of_building_it_again(shop_pipeline: Pipeline, monkeypatch):
    from lakehouse.gold import recompute

    plan = view_plan(shop_pipeline, "order_items_enriched")
    monkeypatch.setattr(recompute, "view_plan", lambda *_: pytest.fail("the plan was built again"))
    monkeypatch.setattr(recompute, "live_rows", lambda spark, pipeline, source: f"live {source.name}")
    monkeypatch.setattr(recompute, "join_view", lambda used, live: (used, live))
    used, live = recompute.full_recompute(None, shop_pipeline, plan)
    assert used is plan and live == {s.name: f"live {s.name}" for s in plan.sources}


# --------------------------------------------------------------------------- pure DataFrame functions


# --------------------------------------------------------------------------- the MERGE and its hash check


# --------------------------------------------------------------------------- runs: checkpoints, replays, verify, job




# --------------------------------------------------------------------------- key ranges and the cost model (pure)


def test_key_ranges_cover_every_key_in_at_most_the_asked_number_of_intervals():
    from lakehouse.gold.layout import key_ranges

    keys = [5, 1, 2, 3, 1000, 1001, 50, None, 2]
    assert key_ranges(keys, max_ranges=10) == [(1, 1), (2, 2), (3, 3), (5, 5), (50, 50), (1000, 1000), (1001, 1001)]
    # cut at the widest gaps: 50 -> 1000, then 5 -> 50
    assert key_ranges(keys, max_ranges=3) == [(1, 5), (50, 50), (1000, 1001)]
    assert key_ranges(keys, max_ranges=1) == [(1, 1001)]
    assert key_ranges([], max_ranges=4) == []
    # strings have no distance: even chunks of the sorted values, still covering each
    words = [f"k{i:03d}" for i in range(10)]
    ranges = key_ranges(words, max_ranges=3)
    assert len(ranges) == 3 and all(any(lo <= w <= hi for lo, hi in ranges) for w in words)


def test_key_ranges_of_an_append_mostly_table_are_one_interval_and_a_few_points():
    """The OLTP shape: recent keys dense at the top, a few old ones scattered."""
    from lakehouse.gold.layout import key_ranges

    recent = list(range(950_000, 1_000_000))
    old = [12, 40_000, 500_000]
    assert key_ranges(recent + old, max_ranges=8) == [(12, 12), (40_000, 40_000), (500_000, 500_000), (950_000, 999_999)]


def test_the_cost_model_picks_the_cheaper_path_and_says_why():
    from lakehouse.gold.cost import RefreshEstimate, choose_refresh, forced_refresh

    small = choose_refresh(RefreshEstimate(affected_keys=1_000, gold_rows=10_000_000, base_rows=10_000_000))
    assert small.path == "incremental" and "1000 affected key(s) of 10000000 gold row(s)" in small.reason
    large = choose_refresh(RefreshEstimate(affected_keys=3_000_000, gold_rows=10_000_000, base_rows=10_000_000))
    assert large.path == "recompute" and large.reason.startswith("recompute is cheaper")
    # the batch's own changes are only a lower bound: they can prove a recompute, never the reverse
    assert choose_refresh(RefreshEstimate(1_000, 10_000_000, 10_000_000), keys_are_a_lower_bound=True).path == "undecided"
    assert choose_refresh(RefreshEstimate(3_000_000, 10_000_000, 10_000_000), keys_are_a_lower_bound=True).path == "recompute"
    assert forced_refresh("auto") is None
    assert forced_refresh("recompute").path == "recompute"
    with pytest.raises(PipelineConfigError, match="options.gold_refresh must be one of auto, incremental, recompute"):
        forced_refresh("sometimes")


def test_a_small_view_is_recomputed_whatever_the_batch_since_the_incremental_path_has_a_fixed_cost():
    from lakehouse.gold.cost import INCREMENTAL_OVERHEAD_ROWS, RefreshEstimate, choose_refresh, recompute_whatever_the_keys

    small_view = (20_000, 20_000)  # gold and base rows (the parent tables weigh the same on both paths)
    one_key = choose_refresh(RefreshEstimate(1, *small_view))
    assert one_key.path == "recompute" and f"incremental ~{INCREMENTAL_OVERHEAD_ROWS + 22:,.0f}, recompute ~30,000" in one_key.reason
    assert recompute_whatever_the_keys(*small_view, INCREMENTAL_OVERHEAD_ROWS).path == "recompute"
    # without the fixed cost (options.gold_incremental_overhead_rows: 0) one key is cheaper incrementally
    assert choose_refresh(RefreshEstimate(1, *small_view, overhead_rows=0)).path == "incremental"
    assert recompute_whatever_the_keys(*small_view, 0) is None
    # a large view keeps the choice to the keys
    assert recompute_whatever_the_keys(10_000_000, 10_000_000, INCREMENTAL_OVERHEAD_ROWS) is None


def test_a_batch_too_small_to_prove_a_recompute_does_not_count_its_keys():
    from lakehouse.gold.cost import counting_keys_may_pick_recompute

    sizes = (10_000_000, 10_000_000)  # gold and base rows
    assert not counting_keys_may_pick_recompute(12, *sizes)  # even 12 keys keep the incremental path cheaper
    assert counting_keys_may_pick_recompute(3_000_000, *sizes)  # so many rows may be so many keys: count them
    assert counting_keys_may_pick_recompute(None, *sizes)  # no bound known (a direct call): count


def test_the_analyst_view_shows_the_declared_columns_and_freshness_never_lineage(shop_pipeline: Pipeline):
    sql = analyst_view_sql(shop_pipeline, view_plan(shop_pipeline, "orders_enriched"))
    assert sql.startswith("CREATE OR REPLACE VIEW shop_gold_analyst.orders_enriched (`order_id` COMMENT 'orders.id (orders.id)'".replace(" (orders.id)", ""))
    assert sql.endswith(
        " AS SELECT `order_id`, `status`, `order_date`, `total`, `customer_id`, `customer_name`, `customer_segment`,"
        " `_source_ts`, `_updated_at` FROM shop_gold.orders_enriched"
    )
    assert "`customer_segment` COMMENT 'The customer''s current marketing segment'".replace("''", "\\'") in sql
    assert "Lineage columns stay on shop_gold.orders_enriched." in sql


def test_a_phase_clock_sums_seconds_per_phase_and_keeps_each_laps_wall_clock_span():
    import time

    from lakehouse.gold.clock import PhaseClock

    clock = PhaseClock()
    before = time.time()
    clock.lap("keys")
    clock.lap("merge")
    clock.lap("keys")
    assert list(clock.phases) == ["keys", "merge"] and all(s >= 0 for s in clock.phases.values())
    assert [s[0] for s in clock.spans] == ["keys", "merge", "keys"]
    assert all(start <= end for _, start, end in clock.spans)
    assert all(a[2] == b[1] for a, b in zip(clock.spans, clock.spans[1:]))  # contiguous: every second is some phase's
    assert clock.spans[0][1] <= before + 1 and clock.spans[-1][2] <= time.time()
