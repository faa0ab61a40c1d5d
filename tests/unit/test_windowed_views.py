"""Windowed views (seed 002's KStream-KStream join): what may be declared, each mistake with file,
line and field, the view's key and kind, and the windowed join as the oracle writes it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from lakehouse.declaration import parse_pipeline
from lakehouse.dictionary import data_dictionary
from lakehouse.errors import PipelineConfigError
from lakehouse.gold import view_plan
from lakehouse.gold.runner import WINDOWED, view_kind
from lakehouse.gold.windowed import sides
from lakehouse.quality.suites import build_suites
from lakehouse.sqltext import SPARK, render_view
from tests.windowed_views import LEFT_VIEW, PIPELINE


def load(text: str = PIPELINE):
    return parse_pipeline(text, "w.yml")


def test_a_windowed_join_pairs_two_events_sources_within_a_bound():
    pipeline = load()
    view = pipeline.view("refunds_outer")
    join = view.joins[0]
    assert (join.kind, join.type, join.table) == ("window", "outer", "refunds")
    assert join.window.on == (("account", "account"),)
    assert (join.window.before, join.window.after, join.window.grace) == (timedelta(hours=1), timedelta(days=2), timedelta(hours=12))
    assert (join.window.base_time, join.window.time) == ("paid_at", "refunded_at")
    assert view.windowed and not view.temporal  # not an as-of view, though its base is events
    plan = view_plan(pipeline, view)
    assert view_kind(plan) is WINDOWED
    assert plan.key_columns == ("payment_id", "refund_id")  # a row is a pair
    base, joined = sides(plan)
    assert (base.span_us, joined.span_us) == (2 * 86_400 * 10**6, 3_600 * 10**6)  # after, before
    assert (base.emits_unmatched, joined.emits_unmatched) == (True, True)


def test_times_default_to_the_commit_time_and_durations_to_zero():
    pipeline = load(PIPELINE + LEFT_VIEW)
    join = pipeline.view("refunds_left").joins[0]
    assert (join.window.before, join.window.after, join.window.grace) == (timedelta(0), timedelta(days=1), timedelta(hours=1))
    assert (join.window.base_time, join.window.time) == (None, None)
    base, joined = sides(view_plan(pipeline, "refunds_left"))
    assert (base.time, joined.time) == ("_source_ts", "_source_ts")
    assert (base.emits_unmatched, joined.emits_unmatched) == (True, False)  # left: only the base side's unmatched rows


def test_the_oracle_writes_the_window_and_closes_unmatched_rows_below_the_watermark():
    pipeline = load()
    sql = render_view(pipeline, "refunds_outer", {s: s for s in pipeline.sources}, SPARK, "timestamp_micros(5)")
    assert ("FULL OUTER JOIN refunds AS `refund` ON `refund`.`account` = `payments`.`account` AND `refund`.`refunded_at` "
            "BETWEEN `payments`.`paid_at` - INTERVAL '3600' SECOND AND `payments`.`paid_at` + INTERVAL '172800' SECOND") in sql
    assert "(`refund`.`id` IS NOT NULL OR `payments`.`paid_at` + INTERVAL '172800' SECOND < timestamp_micros(5))" in sql
    assert "(`payments`.`id` IS NOT NULL OR `refund`.`refunded_at` + INTERVAL '3600' SECOND < timestamp_micros(5))" in sql
    unwatermarked = render_view(pipeline, "refunds_outer", {s: s for s in pipeline.sources}, SPARK)
    assert "< CAST(NULL AS TIMESTAMP)" in unwatermarked  # before any event nothing has closed
    inner = render_view(load(PIPELINE.replace("type: outer", "type: inner")), "refunds_outer", {s: s for s in pipeline.sources}, SPARK)
    assert "WHERE" not in inner


def test_the_quality_suite_of_a_windowed_view_checks_pairs_and_live_events():
    suites = {s.name: s for s in build_suites(load())}
    checks = [e.meta["check"] for e in suites["gold.refunds_outer"].suite.expectations]
    assert checks == ["pair_not_null", "pair_unique", "event_live:payments", "event_live:refund"]  # outer: either side may be missing
    inner = {s.name: s for s in build_suites(load(PIPELINE.replace("type: outer", "type: inner")))}
    assert "event_not_null:refund_id" in [e.meta["check"] for e in inner["gold.refunds_outer"].suite.expectations]


def test_the_data_dictionary_says_a_row_is_a_pair():
    text = data_dictionary(load())
    assert "one row per pair of `payments` and `refunds` events within the window" in text
    assert "`refund.account` = `payments.account`, its time within 1 hour before and 2 days after the base event's (grace 12 hours" in text


BAD = [
    ("window: {on: {account: account}, after: 2 weeks}", "joins[0].window.after", "expected a duration such as '7 days'"),
    ("window: {on: {acct: account}}", "joins[0].window.on.acct", "'refunds' has no column 'acct'"),
    ("window: {on: {amount: paid_at}}", "joins[0].window.on.amount", "refunds.amount is bigint but payments.paid_at is timestamp"),
    ("window: {on: {account: account}, time: {refund: amount}}", "joins[0].window.time.refund", "an event's time must be a timestamp column"),
    ("window: {on: {account: account}, time: {ord: paid_at}}", "joins[0].window.time", "ord"),
    ("window: {on: {account: account}, within: 3 days}", "joins[0].window", "within"),
    ("window: {on: []}", "joins[0].window.on", "expected a mapping of refunds column to payments column"),
]


def _with_window(window: str) -> str:
    start = PIPELINE.index("        window:")
    end = PIPELINE.index("    columns:\n      payment_id")
    return PIPELINE[:start] + f"        {window}\n" + PIPELINE[end:]


@pytest.mark.parametrize(("window", "field", "message"), BAD)
def test_a_bad_window_is_refused_with_file_line_and_field(window: str, field: str, message: str):
    with pytest.raises(PipelineConfigError) as err:
        load(_with_window(window))
    text = str(err.value)
    assert re.search(rf"w\.yml:\d+: views\.refunds_outer\.{re.escape(field)}", text), text
    assert message in text, text


def test_a_windowed_join_needs_two_events_sources_and_both_keys():
    table_base = PIPELINE.replace("  payments:\n    kind: events", "  payments:\n    kind: table")
    with pytest.raises(PipelineConfigError, match=r"w\.yml:\d+: views\.refunds_outer\.joins\[0\]: a windowed join pairs two events sources; 'payments' is kind table"):
        load(table_base)
    no_refund_key = PIPELINE.replace("      refund_id: refund.id\n", "")
    with pytest.raises(PipelineConfigError, match=r"views\.refunds_outer\.columns: must select the joined events' primary key column refund\.id"):
        load(no_refund_key)
    as_of = PIPELINE.replace("    base: payments\n", "    base: payments\n    as_of: paid_at\n", 1)
    with pytest.raises(PipelineConfigError, match=r"views\.refunds_outer\.as_of: a windowed view times its events in its join's `window.time`"):
        load(as_of)


def test_a_join_declared_after_a_windowed_join_is_refused_not_ignored():
    """A windowed view pairs two events sources and nothing else: a join after its window was
    once accepted and then ignored by gold (which reads the first join only)."""
    later = PIPELINE.replace(
        "          time: {payments: paid_at, refund: refunded_at}\n",
        "          time: {payments: paid_at, refund: refunded_at}\n"
        "      - {alias: again, table: refunds, on: primary_key}\n",
    )
    assert later != PIPELINE
    with pytest.raises(PipelineConfigError) as err:
        load(later)
    text = str(err.value)
    assert re.search(r"w\.yml:\d+: views\.refunds_outer\.joins\[1\]: a windowed join \(refund\) pairs two events sources "
                     r"and must be the view's only join", text), text
