"""Global tables in a current-state view (seed 004): joined by broadcast on a key expression of an
earlier alias, kept equal to the SQL join when the base, the alias the expression reads, or the
global table itself changes; a bad expression stops the job before any query, with file, line
and field."""

from __future__ import annotations

import itertools
import os
import random
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from lakehouse.declaration import load_pipeline, parse_pipeline
from lakehouse.entry import run_stage
from lakehouse.errors import PipelineConfigError
from lakehouse.gold import run_gold
from lakehouse.tables import gold_table
from testkit.reference_silver import Change
from tests.global_views import global_pipeline
from tests.integration.test_gold import apply, assert_gold_equals_oracle, create_silver, gold_changes, table_version


def glob(token: str, status_key: str = "upper(orders.status)") -> str:
    """The shared global-tables pipeline in schemas of its own, refreshed incrementally."""
    header = (f"name: glob_{token}\nkafka: {{topic_prefix: glob}}\n"
              f"tables: {{silver_schema: gl_{token}_silver, gold_schema: gl_{token}_gold}}\noptions: {{gold_refresh: incremental}}\n")
    return global_pipeline(f'{{alias: st, table: statuses, key: "{status_key}", type: left}}', header)


def customer(i: int, country: str | None) -> dict:
    return {"id": i, "name": f"c{i}", "country": country}


def order(i: int, cust: int, status: str) -> dict:
    return {"id": i, "customer_id": cust, "status": status}


def test_a_change_to_a_global_row_rejoins_exactly_the_rows_that_map_to_it(spark, lake: Path):
    pipeline = parse_pipeline(glob(uuid.uuid4().hex[:6]), "glob.yml")
    create_silver(spark, pipeline)
    apply(spark, pipeline, "customers", Change(customer(1, "fr"), 10), Change(customer(2, "de"), 11))
    apply(spark, pipeline, "orders", Change(order(10, 1, "paid"), 12), Change(order(11, 2, "new"), 13), Change(order(12, 1, "weird"), 14))
    apply(spark, pipeline, "statuses", Change({"code": "PAID", "label": "Paid"}, 15), Change({"code": "NEW", "label": "New"}, 16))
    apply(spark, pipeline, "countries", Change({"iso": "FR", "region": "Europe"}, 17))
    run_gold(spark, pipeline, lake)
    table = gold_table(pipeline, "orders_enriched")
    rows = {r["order_id"]: (r["status_label"], r["region"]) for r in spark.table(table).collect()}
    assert rows == {10: ("Paid", "Europe"), 12: (None, "Europe")}  # 11: no DE yet (inner); 12: no WEIRD (left)
    assert_gold_equals_oracle(spark, pipeline)

    # global rows change: a label, a new country (an inner row appears), a status code gains a row
    before = table_version(spark, table)
    apply(spark, pipeline, "statuses", Change({"code": "PAID", "label": "Settled"}, 20), Change({"code": "WEIRD", "label": "Odd"}, 21),
          Change({"code": "UNUSED", "label": "x"}, 23))  # maps to no row: rewrites nothing
    apply(spark, pipeline, "countries", Change({"iso": "DE", "region": "Europe"}, 22))
    report = run_gold(spark, pipeline, lake).views["orders_enriched"]
    assert report.affected_keys == 3 and report.paths == {"incremental": 1}
    changed = sorted((c["order_id"], c["_change_type"], c["status_label"]) for c in gold_changes(spark, table, before)
                     if c["_change_type"] != "update_preimage")
    assert changed == [(10, "update_postimage", "Settled"), (11, "insert", "New"), (12, "update_postimage", "Odd")]
    assert_gold_equals_oracle(spark, pipeline)

    # a global row deleted (inner rows go), the base's own expression input moves, the alias's too
    apply(spark, pipeline, "countries", Change(None, 30, key={"iso": "FR"}))
    apply(spark, pipeline, "orders", Change(order(11, 2, "Paid"), 31))
    apply(spark, pipeline, "customers", Change(customer(1, "De"), 32))
    run_gold(spark, pipeline, lake)
    rows = {r["order_id"]: (r["status_label"], r["region"]) for r in spark.table(table).collect()}
    assert rows == {10: ("Settled", "Europe"), 11: ("Settled", "Europe"), 12: ("Odd", "Europe")}  # customer 1 moved to DE
    assert_gold_equals_oracle(spark, pipeline)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("length(orders.status)", "the expression is int but statuses.code is string: cast it"),
        ("upper(orders.status", "not a valid Spark SQL expression over the columns of orders"),
    ],
)
def test_a_key_expression_spark_cannot_use_stops_the_job_with_file_line_and_field(spark, lake: Path, tmp_path: Path, key: str, message: str):
    file = tmp_path / "glob.yml"
    file.write_text(glob(uuid.uuid4().hex[:6], key))
    pipeline = load_pipeline(file)  # the loader has no analyzer: it accepts the file
    with pytest.raises(PipelineConfigError) as info:
        run_stage("silver", spark, pipeline, lake)
    line = 1 + file.read_text().splitlines().index(next(s for s in file.read_text().splitlines() if "alias: st" in s))
    assert f"{file}:{line}: views.orders_enriched.joins[1].key: {message}" in str(info.value)


SEEDS = int(os.environ.get("CDC_ENRICH_GLOBAL_SEEDS", "1"))
ROUNDS = int(os.environ.get("CDC_ENRICH_GLOBAL_ROUNDS", "2"))


def random_round(rng: random.Random, seq: Iterator[int]) -> dict[str, list[Change]]:
    """One round of changes over every table: base and parent rows moving between codes and
    countries, global rows relabelled, deleted and re-created, keys delivered in random order."""
    out: dict[str, list[Change]] = {t: [] for t in ("customers", "orders", "statuses", "countries")}
    for _ in range(rng.randint(3, 8)):
        table = rng.choice(list(out))
        if table == "customers":
            i = rng.randint(1, 4)
            out[table].append(Change(None, next(seq), key={"id": i}) if rng.random() < 0.15
                              else Change(customer(i, rng.choice(["fr", "De", "it", None])), next(seq)))
        elif table == "orders":
            i = rng.randint(10, 17)
            out[table].append(Change(None, next(seq), key={"id": i}) if rng.random() < 0.15
                              else Change(order(i, rng.randint(1, 5), rng.choice(["new", "paid", "Paid", "odd"])), next(seq)))
        elif table == "statuses":
            code = rng.choice(["NEW", "PAID", "ODD"])
            out[table].append(Change(None, next(seq), key={"code": code}) if rng.random() < 0.25
                              else Change({"code": code, "label": f"{code.lower()}-{rng.randint(1, 9)}"}, next(seq)))
        else:
            iso = rng.choice(["FR", "DE", "IT"])
            out[table].append(Change(None, next(seq), key={"iso": iso}) if rng.random() < 0.25
                              else Change({"iso": iso, "region": rng.choice(["Europe", "EU"])}, next(seq)))
    for changes in out.values():
        rng.shuffle(changes)  # arrival order within a round is not commit order
    return out


def run_random_rounds(spark, lake: Path, seeds: range, rounds: int) -> None:
    """Each seed in a fresh pipeline: `rounds` rounds of changes, gold checked against the oracle
    after each; the incremental path throughout (the cost model's recompute is tested apart)."""
    for seed in seeds:
        rng, seq = random.Random(seed), itertools.count(100)
        pipeline = parse_pipeline(glob(uuid.uuid4().hex[:6]), "glob.yml")
        create_silver(spark, pipeline)
        for _ in range(rounds):
            for table, changes in random_round(rng, seq).items():
                if changes:
                    apply(spark, pipeline, table, *changes)
            run_gold(spark, pipeline, lake)
            assert_gold_equals_oracle(spark, pipeline)


def test_random_rounds_of_base_parent_and_global_changes_keep_gold_equal_to_the_sql_join(spark, lake: Path):
    """SEEDS seeds of ROUNDS rounds (CDC_ENRICH_GLOBAL_SEEDS, CDC_ENRICH_GLOBAL_ROUNDS)."""
    run_random_rounds(spark, lake, range(1, SEEDS + 1), ROUNDS)


@pytest.mark.slow
def test_many_more_seeds_of_global_changes(spark, lake: Path):
    run_random_rounds(spark, lake, range(SEEDS + 1, SEEDS + 11), 6)
