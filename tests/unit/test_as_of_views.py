"""As-of views (seed 001) in a pipeline file: what declares one, what is refused, and the oracle's SQL."""

from __future__ import annotations

import re

import pytest

from lakehouse.declaration import parse_pipeline
from lakehouse.errors import PipelineConfigError
from lakehouse.gold import view_plan
from lakehouse.gold.runner import AS_OF, CURRENT_STATE, view_kind
from lakehouse.sqltext import POSTGRES, SPARK, render_view
from tests.as_of_views import PIPELINE


def test_a_view_based_on_an_events_source_is_joined_as_of_each_event():
    pipeline = parse_pipeline(PIPELINE, "p.yml")
    on_commit, on_paid = pipeline.view("payments_as_of"), pipeline.view("payments_paid_inner")
    assert (on_commit.temporal, on_commit.as_of) == (True, None)
    assert (on_paid.temporal, on_paid.as_of) == (True, "paid_at")
    plan = view_plan(pipeline, "payments_paid_inner")
    assert plan.relations == ()  # no subscription table: the view keeps its own index
    assert "paid_at" in plan.base.used  # the time is read though no column selects it
    assert view_kind(plan) is AS_OF
    as_tables = PIPELINE.replace("kind: events", "kind: table").replace("    as_of: paid_at\n", "")
    assert view_kind(view_plan(parse_pipeline(as_tables, "p.yml"), "payments_as_of")) is CURRENT_STATE


def test_the_oracle_looks_each_join_up_at_the_events_time_in_both_dialects():
    pipeline = parse_pipeline(PIPELINE, "p.yml")
    relations = {s: s for s in pipeline.sources}
    spark_sql = render_view(pipeline, "payments_as_of", relations, SPARK)
    assert ("LEFT JOIN customers AS `customer` ON `customer`.`id` = `ord`.`customer_id` AND NOT `customer`.`_deleted` "
            "AND `customer`.`_valid_from` <= `payments`.`_source_ts` AND (`customer`.`_valid_to` IS NULL OR "
            "`payments`.`_source_ts` < `customer`.`_valid_to`)") in spark_sql
    assert "AS `m` ON `m`.`code` = (upper(`payments`.`method`)) AND NOT `m`.`_deleted`" in spark_sql
    pg = render_view(pipeline, "payments_paid_inner", relations, POSTGRES)
    assert 'JOIN orders AS "ord" ON "ord"."id" = "payments"."order_id" AND NOT "ord"."_deleted" AND "ord"."_valid_from" <= "payments"."paid_at"' in pg


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (("base: payments\n    as_of: paid_at", "base: payments\n    as_of: amount"), "payments_paid_inner.as_of",
         "payments.amount is bigint; the as-of time must be a timestamp column"),
        (("base: payments\n    as_of: paid_at", "base: payments\n    as_of: when"), "payments_paid_inner.as_of",
         "expected a timestamp column of 'payments'"),
        (("kind: events\n", "kind: table\n"), "payments_paid_inner.as_of",
         "only a view based on an events source is joined as of a time; 'payments' is kind table"),
        (("- {alias: customer, via: ord.customer, type: inner}",
          "- {alias: customer, via: ord.customer, type: inner}\n      - {alias: twin, table: payments, \"on\": primary_key}"),
         "payments_paid_inner.joins[2]", "a primary-key join is not supported here"),
    ],
)
def test_a_bad_as_of_view_is_rejected_with_file_line_and_field(change: tuple[str, str], field: str, message: str):
    old, new = change
    assert old in PIPELINE
    with pytest.raises(PipelineConfigError) as info:
        parse_pipeline(PIPELINE.replace(old, new), "p.yml")
    text = str(info.value)
    assert re.search(rf"p\.yml:\d+: views\.{re.escape(field)}: .*{re.escape(message)}", text), text
