"""Quarantine rules (severity `quarantine` on a source, `lakehouse.silver.held`), as a
specification: a change that breaks one is held out of silver with the rule's name, nothing is
lost, a correction upstream flows through, and fixing the rule lets the held changes through as
if they had never been held."""

from __future__ import annotations

import dataclasses

from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline, Rule
from lakehouse.silver.held import release_held
from lakehouse.silver.holding import first_failing_rule
from lakehouse.tables import held_changes_table
from tests.integration.test_silver import Env, ev, make_env, product, seq  # noqa: F401 - make_env is a fixture

PRICE = Rule("price_positive", "range", "quarantine", columns=("price",), minimum=0.01)
TITLE = Rule("title_set", "not_null", "quarantine", columns=("title",), description="a product has a title")


def with_rules(env: Env, *rules: Rule) -> Env:
    source = dataclasses.replace(env.pipeline.source("products"), rules=rules)
    pipeline: Pipeline = dataclasses.replace(env.pipeline, sources={**env.pipeline.sources, "products": source})
    return dataclasses.replace(env, pipeline=pipeline, source=source)


def held(env: Env) -> list[dict]:
    rows = env.spark.table(held_changes_table(env.pipeline, env.source)).orderBy("id", "_sequence").collect()
    return [r.asDict() for r in rows]


def test_a_change_breaking_a_quarantine_rule_is_held_with_its_rule_and_let_through_when_the_rule_is_fixed(make_env):
    env = with_rules(make_env(), PRICE, TITLE)
    batch = [
        ev("c", 1, product(1, "one", price="1.50")),
        ev("c", 2, {**product(2, "two"), "title": None}),  # no title
        ev("u", 3, product(1, "one", price="-1.00")),  # a negative price
        ev("c", 4, product(3, "three")), ev("d", 5, key={"id": 3}),  # a delete is never judged
    ]
    stats = env.apply(0, *batch)
    assert (stats.held, stats.current_upserted, stats.history_written) == (2, 1, 3)  # 1 at v1; 3 lived and died in the batch
    assert env.current()[1]["price"] == 1.5 and set(env.current()) == {1} and len(env.history(3)) == 2
    assert [r["_sequence"] for r in env.history(1)] == [seq(1)]  # the held version is in no table of silver
    rows = held(env)
    assert [(r["id"], r["_rule"], r["_reason"], r["_batch_id"], r["_released_at"]) for r in rows] == [
        (1, "price_positive", "price_positive: price is at least 0.01", 0, None),
        (2, "title_set", "title_set: a product has a title", 0, None),
    ]
    assert rows[0]["_sequence"] == seq(3) and float(rows[0]["price"]) == -1.0  # the change itself, to apply later
    assert env.apply(0, *batch).held == 2 and len(held(env)) == 2  # a replayed batch records them once

    # corrected upstream: the next change of key 1 passes and silver moves on; the held one stays held
    env.apply(1, ev("u", 6, product(1, "one", price="2.00")))
    assert env.current()[1]["price"] == 2.0 and len(held(env)) == 2
    assert release_held(env.spark, env.pipeline, env.source, "release") == 0  # judged again: they still fail

    # the rule is fixed (price may be negative now: refunds): the next start lets both through
    fixed = with_rules(env, Rule("title_set", "not_null", "warn", columns=("title",)))
    assert fixed.run().sources["products"].released == 2
    current = fixed.current()
    assert current[2]["title"] is None and current[2]["_sequence"] == seq(2)
    assert current[1]["price"] == 2.0  # the released v3 is older than v6: history only, as a late change would be
    assert [(r["_sequence"], float(r["price"])) for r in fixed.history(1)] == [(seq(1), 1.5), (seq(3), -1.0), (seq(6), 2.0)]
    assert all(r["_released_at"] is not None for r in held(fixed))  # the record stays
    assert release_held(fixed.spark, fixed.pipeline, fixed.source, "release") == 0  # once

    # operators see both on the dashboard
    from lakehouse.quality.dashboard import dashboard_data

    shown = {(r["source"], r["reason"]): (r["held"], r["released"]) for r in dashboard_data(fixed.spark, fixed.pipeline)["held_changes"]}
    assert shown == {("products", "price_positive: price is at least 0.01"): (0, 1), ("products", "title_set: a product has a title"): (0, 1)}


def test_a_rule_judges_the_values_sent_and_never_a_toasted_column(spark, shop_pipeline):
    desc = Rule("described", "regex", "quarantine", columns=("description",), pattern="^[a-z]")
    rows = spark.createDataFrame(
        [(1, "text", [], False), (2, None, ["description"], False), (3, "Text", [], False), (4, None, [], True), (5, None, [], False)],
        "id bigint, description string, _unavailable array<string>, _deleted boolean",
    )
    judged = {r["id"]: r["rule"] for r in rows.select("id", first_failing_rule([desc]).alias("rule")).collect()}
    assert judged == {1: None, 2: None, 3: "described", 4: None, 5: None}  # toasted, deleted and null pass a regex
    cond = Rule("cheap", "row_condition", "quarantine", condition="length(description) < 5")
    judged = {r["id"]: r["rule"] for r in rows.select("id", first_failing_rule([cond]).alias("rule")).collect()}
    assert judged == {1: None, 2: "cheap", 3: None, 4: None, 5: "cheap"}  # a condition that is null fails, as in the quality suites
    assert rows.where(F.col("id") == 1).select(first_failing_rule([]).alias("r")).first()["r"] is None
