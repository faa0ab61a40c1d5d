"""Global tables (`kind: global`, seed 004) joined on a key expression of an earlier alias: what may
be declared, each mistake with file, line and field, and the join as the oracle writes it."""

from __future__ import annotations

import re

import pytest

from lakehouse.declaration import parse_pipeline
from lakehouse.declaration.expressions import column_references, rewrite_references
from lakehouse.errors import PipelineConfigError
from lakehouse.gold import view_plan
from lakehouse.sqltext import POSTGRES, SPARK, render_view
from tests.global_views import global_pipeline

GOOD_JOIN = '{alias: st, table: statuses, key: "upper(trim(orders.status))", type: left}'


def load(join: str = GOOD_JOIN):
    return parse_pipeline(global_pipeline(join), "p.yml")


def test_a_global_table_joins_on_an_expression_of_one_earlier_alias():
    pipeline = load()
    view = pipeline.view("orders_enriched")
    st, land = view.joins[1], view.joins[2]
    assert (st.kind, st.parent_alias, st.key, st.type) == ("expression", "orders", "upper(trim(orders.status))", "left")
    assert (land.kind, land.parent_alias) == ("expression", "c")
    plan = view_plan(pipeline, "orders_enriched")
    assert [(s.name, f.name) for s, f in plan.relations] == [("orders", "customer")]  # no subscription for a global
    assert "status" in plan.alias("orders").used and "country" in plan.alias("c").used  # what the expressions read


def test_the_oracle_writes_the_join_on_the_expression_in_each_dialect():
    pipeline = load()
    spark_sql = render_view(pipeline, "orders_enriched", {s: s for s in pipeline.sources}, SPARK)
    assert "LEFT JOIN statuses AS `st` ON `st`.`code` = (upper(trim(`orders`.`status`)))" in spark_sql
    assert "JOIN countries AS `land` ON `land`.`iso` = (upper(`c`.`country`))" in spark_sql
    pg = render_view(pipeline, "orders_enriched", {s: s for s in pipeline.sources}, POSTGRES)
    assert 'ON "st"."code" = (upper(trim("orders"."status")))' in pg


@pytest.mark.parametrize(
    ("join", "field", "message"),
    [
        ('{alias: st, table: customers, key: "orders.customer_id"}', "joins[1].table", "reads a global table (kind: global); 'customers' is kind table"),
        ('{alias: st, table: statuses, key: "upper(x.status)"}', "joins[1].key", "x.status: 'x' is not an earlier alias of this view"),
        ('{alias: st, table: statuses, key: "upper(orders.state)"}', "joins[1].key", "'orders' has no column 'state'"),
        ('{alias: st, table: statuses, key: "concat(orders.status, c.name)"}', "joins[1].key", "reads orders, c: a key expression reads one earlier alias"),
        ('{alias: st, table: statuses, key: "upper(\'x\')"}', "joins[1].key", "the expression reads no column"),
        ('{alias: st, table: statuses, key: "orders.status", type: outer}', "joins[1].type", "expected one of inner, left"),
        ('{alias: st, table: statuses, on: primary_key}', "joins[1].table", "keys of the same type: 'statuses' has string, 'orders' has bigint"),
    ],
)
def test_a_bad_global_join_is_rejected_with_file_line_and_field(join: str, field: str, message: str):
    with pytest.raises(PipelineConfigError) as info:
        load(join)
    text = str(info.value)
    assert re.search(rf"p\.yml:\d+: views\.orders_enriched\.{re.escape(field)}: .*{re.escape(message)}", text), text


def test_a_global_table_has_a_one_column_key():
    text = global_pipeline(GOOD_JOIN).replace("primary_key: [code]", "primary_key: [code, label]")
    with pytest.raises(PipelineConfigError, match=r"sources\.statuses\.primary_key: a global table is joined on one key expression"):
        parse_pipeline(text, "p.yml")


def test_references_skip_string_literals_and_function_names():
    assert column_references("coalesce(o.status, 'o.status') || sys.fn(x) || c.name") == [("o", "status"), ("c", "name")]
    assert rewrite_references("o.a + o.a", lambda a, c: c.upper()) == "A + A"
