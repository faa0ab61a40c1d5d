"""Convergence, randomized: for any arrival order and batch split, gold equals the SQL join.

Each seed generates a small source history for the shop tables (creates, updates, foreign-key
churn, null and dangling fks, parents deleted and re-created, re-delivered and out-of-order
events, no-op re-deliveries), then delivers it to silver in rounds following one arrival
pattern (left tables first, right tables first, interleaved, one table held back until the
end, random). Gold runs after every round, each view in another refresh mode each round
(incremental, recompute, auto: `options.gold_refresh`), and after every round gold must equal
the oracle join of what silver holds at that moment (a stronger property than "after draining").

Spark's fixed cost per job dominates at this size, so seeds share tables: seed s owns the key
range [s*1000, s*1000+999] of every table and only references keys in its own range, so the
seeds of one run are independent universes processed by the same jobs (the cost grows with
rounds and views, hardly with seeds). A failure names the seeds whose key ranges differ. For
the same reason one pipeline holds the views: the shop's two (left; inner chain + left branch)
and a left join followed by an inner chain (`DEFAULT_VIEWS`) in the default run; the `slow` run
adds two more on the same tables (inner; primary-key outer join), whose join kinds the default
suite also holds in test_gold.py (the primary-key joins) and test_gold_seed000.py (inner).

Knobs: CDC_ENRICH_GOLD_SEEDS (seeds in the default run), CDC_ENRICH_GOLD_ROUNDS (delivery
rounds; CDC_ENRICH_GOLD_SLOW_ROUNDS for the slow run), CDC_ENRICH_GOLD_SLOW_SEEDS (the `slow` run, which also uses silver without delete
markers, so that gold meets real CDF `delete` rows).
"""

from __future__ import annotations

import dataclasses
import os
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lakehouse.declaration import REFRESH_MODES, Pipeline
from lakehouse.gold import run_gold, view_plan
from lakehouse.tables import gold_table
from lakehouse.verify.oracle import oracle_view, silver_live_state
from lakehouse.verify.views import diff_frames, stale_lineage
from testkit.reference_silver import Change, apply_silver_changes, create_silver_current
from tests.shop_views import all_views_pipeline, narrowed

SEEDS = int(os.environ.get("CDC_ENRICH_GOLD_SEEDS", "8"))
ROUNDS = int(os.environ.get("CDC_ENRICH_GOLD_ROUNDS", "2"))
SLOW_ROUNDS = int(os.environ.get("CDC_ENRICH_GOLD_SLOW_ROUNDS", "6"))
SLOW_SEEDS = int(os.environ.get("CDC_ENRICH_GOLD_SLOW_SEEDS", "300"))
SPAN = 1000
TABLES = ("customers", "products", "orders", "order_items")
LEFT = ("orders", "order_items")
RIGHT = ("customers", "products")
PATTERNS = ("left_first", "right_first", "interleaved", "held_back", "random")
#: The default run's views (each view is a gold query per round: the run's cost grows with them);
#: three views over two rounds still take every refresh mode in the second round.
DEFAULT_VIEWS = ("orders_enriched", "order_items_enriched", "items_left_chain")

# --------------------------------------------------------------------------- histories


@dataclass(frozen=True)
class Event:
    table: str
    key: tuple
    row: dict[str, Any] | None  # None: a delete
    sequence: int


def _key(table: str, row: dict[str, Any]) -> tuple:
    return (row["order_id"], row["line_no"]) if table == "order_items" else (row["id"],)


def _key_dict(table: str, key: tuple) -> dict[str, Any]:
    return {"order_id": key[0], "line_no": key[1]} if table == "order_items" else {"id": key[0]}


def generate_history(seed: int) -> list[Event]:
    """A random, small, referentially messy history of one seed's universe, in source order."""
    rng = random.Random(seed)
    base = seed * SPAN
    ids = {t: [base + i for i in range(1, rng.randint(2, 4) + 1)] for t in ("customers", "products", "orders")}
    dangling = base + 999  # a parent that never exists
    names = ["ann", "bob", "cy", "di"]
    events: list[Event] = []
    live: dict[tuple[str, tuple], dict[str, Any]] = {}
    seq = base * 10

    def emit(table: str, key: tuple, row: dict[str, Any] | None) -> None:
        nonlocal seq
        seq += rng.randint(1, 3)
        events.append(Event(table, key, row, seq))
        if row is None:
            live.pop((table, key), None)
        else:
            live[(table, key)] = row

    def new_row(table: str, key: tuple) -> dict[str, Any]:
        if table == "customers":
            return {"id": key[0], "name": rng.choice(names), "email": f"{rng.randint(0, 3)}@x", "segment": rng.choice(["a", "b"])}
        if table == "products":
            return {"id": key[0], "sku": f"sku{rng.randint(0, 3)}", "title": rng.choice(["t1", "t2"])}
        if table == "orders":
            fk = rng.choice(ids["customers"] + [None, dangling])
            return {"id": key[0], "customer_id": fk, "status": rng.choice(["new", "paid", "sent"])}
        fk = rng.choice(ids["products"] + [None])
        return {"order_id": key[0], "line_no": key[1], "product_id": fk, "quantity": rng.randint(1, 3)}

    def any_key(table: str) -> tuple:
        if table == "order_items":
            return (rng.choice(ids["orders"] + [dangling]), rng.randint(1, 2))
        return (rng.choice(ids[table]),)

    for _ in range(rng.randint(14, 26)):
        table = rng.choice(TABLES)
        key = any_key(table)
        current = live.get((table, key))
        roll = rng.random()
        if current is not None and roll < 0.2:
            emit(table, key, None)  # delete (a parent deleted, maybe re-created later)
        elif current is not None and roll < 0.3:
            emit(table, key, dict(current))  # a new version with the same content
        elif current is not None and table == "customers" and roll < 0.4:
            emit(table, key, dict(current, email=f"{rng.randint(4, 9)}@x"))  # a column no view reads
        else:
            emit(table, key, new_row(table, key))  # create, re-create, update, fk churn
    return events


def schedule(seed: int, events: list[Event], rounds: int, perturb: bool = True) -> list[list[Event]]:
    """Split each table's events (in topic order, with re-deliveries and a few out-of-order
    swaps unless `perturb` is off) into delivery rounds following one arrival pattern.

    Without silver's delete markers (the physical-delete universe) a late older event would
    resurrect a deleted row in silver itself, which is not what gold is tested for there.
    """
    rng = random.Random(seed * 7 + 1)
    pattern = PATTERNS[seed % len(PATTERNS)]
    held = rng.choice(TABLES)
    out: list[list[Event]] = [[] for _ in range(rounds)]
    half = max(1, rounds // 2)
    for table in TABLES:
        topic = [e for e in events if e.table == table]
        for e in list(topic):
            if perturb and rng.random() < 0.15:  # re-delivered later (same change, same sequence)
                topic.insert(rng.randint(topic.index(e), len(topic)), e)
        for i in range(len(topic) - 1):
            if perturb and rng.random() < 0.1:  # out of order
                topic[i], topic[i + 1] = topic[i + 1], topic[i]
        if pattern == "left_first":
            lo, hi = (0, half) if table in LEFT else (half, rounds)
        elif pattern == "right_first":
            lo, hi = (0, half) if table in RIGHT else (half, rounds)
        elif pattern == "held_back":
            lo, hi = (rounds - 1, rounds) if table == held else (0, rounds)
        elif pattern == "interleaved":
            lo, hi = 0, rounds
        else:
            lo = rng.randrange(rounds)
            hi = rng.randint(lo + 1, rounds)
        cuts = sorted(rng.randint(0, len(topic)) for _ in range(hi - lo - 1))
        if pattern == "interleaved":
            cuts = [len(topic) * (i + 1) // (hi - lo) for i in range(hi - lo - 1)]
        bounds = [0] + cuts + [len(topic)]
        for r in range(hi - lo):
            out[lo + r].extend(topic[bounds[r] : bounds[r + 1]])
    return out


def final_state(events: list[Event]) -> dict[tuple[str, tuple], dict[str, Any] | None]:
    latest: dict[tuple[str, tuple], Event] = {}
    for e in events:
        if (e.table, e.key) not in latest or e.sequence > latest[(e.table, e.key)].sequence:
            latest[(e.table, e.key)] = e
    return {k: e.row for k, e in latest.items()}


# --------------------------------------------------------------------------- driving silver and gold


def fresh(pipeline: Pipeline, label: str) -> Pipeline:
    token = f"{label}_{uuid.uuid4().hex[:6]}"
    tables = dataclasses.replace(pipeline.tables, silver_schema=f"p_{token}_silver", gold_schema=f"p_{token}_gold")
    return dataclasses.replace(pipeline, name=f"p_{token}", tables=tables)


def seeds_of(view_keys: list[str]) -> list[int]:
    found = set()
    for sample in view_keys:
        digits = "".join(ch if ch.isdigit() else " " for ch in sample).split()
        found.update(int(d) // SPAN for d in digits if int(d) >= SPAN)
    return sorted(found)


def run_universe(spark, lake: Path, pipeline: Pipeline, seeds: list[int], rounds: int, physical_delete: bool) -> None:
    """Deliver every seed's rounds together, run gold after each, check every view each time."""
    for view in pipeline.views.values():
        for alias in view.aliases:
            create_silver_current(spark, pipeline, pipeline.source(view.table_of(alias)))
    histories = {s: generate_history(s) for s in seeds}
    plans = {s: schedule(s, histories[s], rounds, perturb=not physical_delete) for s in seeds}
    taken: set[str] = set()  # the refresh paths the rounds took
    for r in range(rounds):
        for table in TABLES:
            batch = [e for s in seeds for e in plans[s][r] if e.table == table]
            if batch:
                changes = [Change(e.row, e.sequence, key=_key_dict(table, e.key)) for e in batch]
                apply_silver_changes(spark, pipeline, pipeline.source(table), changes, physical_delete=physical_delete)
        for i, name in enumerate(pipeline.views):  # each view in another refresh mode each round
            mode = REFRESH_MODES[(i + r) % len(REFRESH_MODES)]
            run = run_gold(spark, pipeline.with_options(gold_refresh=mode), lake, views=[name]).views[name]
            if mode != "auto":  # an empty gold table is built whatever the mode
                assert set(run.paths) <= {mode, "build"}, f"{name} in mode {mode} took {run.paths}"
            taken.update(run.paths)
        state = silver_live_state(spark, pipeline)
        for name in pipeline.views:
            plan = view_plan(pipeline, name)
            diff = diff_frames(
                oracle_view(spark, pipeline, name, state), spark.table(gold_table(pipeline, name)),
                plan.key_columns, plan.output_columns, samples=20,
            )
            assert diff.ok, f"round {r}, view {name}, seeds {seeds_of(diff.samples)}: {diff}"
    if rounds > 1:
        assert {"incremental", "recompute"} <= taken, f"the rounds took only {taken}"
    for name in pipeline.views:
        assert stale_lineage(spark, pipeline, name) == 0, name
        assert_only_real_changes(spark, pipeline, name)
    if not physical_delete:  # the harness itself: silver holds the latest version of every key
        expected = {}
        for s in seeds:
            expected.update(final_state(histories[s]))
        for table in TABLES:
            source = pipeline.source(table)
            got = {
                _key(table, r.asDict()): {c: r[c] for c in source.column_names}
                for r in state[table].collect()
            } if table in state else {}
            want = {
                k[1]: {c: row.get(c) for c in source.column_names}
                for k, row in expected.items()
                if k[0] == table and row is not None
            }
            assert got == want, table


def assert_only_real_changes(spark, pipeline: Pipeline, view: str) -> None:
    """Gold's change feed: every update changes the row, at most one change per key and commit."""
    table = gold_table(pipeline, view)
    plan = view_plan(pipeline, view)
    cdf = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).table(table)
    rows = [r.asDict() for r in cdf.collect()]
    images: dict[tuple, dict[str, dict]] = {}
    for row in rows:
        key = (row["_commit_version"],) + tuple(row[k] for k in plan.key_columns)
        kind = row["_change_type"]
        assert kind not in images.setdefault(key, {}), f"{view}: two {kind} rows for one key in one commit: {key}"
        images[key][kind] = row
    for key, kinds in images.items():
        if "update_preimage" in kinds:
            pre, post = kinds["update_preimage"], kinds["update_postimage"]
            changed = [c for c in plan.gold_columns if c.endswith("_hash") and pre[c] != post[c]]
            assert changed, f"{view}: a no-op update at {key}"
        assert not ({"insert", "delete"} <= set(kinds)), f"{view}: delete and insert of one key in one commit: {key}"


@pytest.mark.long
def test_gold_converges_for_random_histories_and_arrival_orders(spark, lake: Path, shop_pipeline_path: Path):
    """SEEDS seeds, `DEFAULT_VIEWS`, ROUNDS delivery rounds; gold checked against the oracle after each."""
    pipeline = fresh(narrowed(all_views_pipeline(shop_pipeline_path), *DEFAULT_VIEWS), "all")
    run_universe(spark, lake, pipeline, list(range(1, SEEDS + 1)), ROUNDS, physical_delete=False)


@pytest.mark.slow
def test_gold_converges_for_many_more_seeds_and_rounds(spark, lake: Path, shop_pipeline_path: Path):
    first = SEEDS + 1
    seeds = list(range(first, first + SLOW_SEEDS))
    for i, chunk in enumerate(range(0, len(seeds), 100)):
        pipeline = fresh(all_views_pipeline(shop_pipeline_path), "slow")
        run_universe(spark, lake, pipeline, seeds[chunk : chunk + 100], SLOW_ROUNDS, physical_delete=i % 2 == 1)


def test_schedules_cover_every_arrival_pattern_and_stay_complete():
    """The generator itself: every pattern occurs, and every event is delivered at least once."""
    patterns = set()
    for seed in range(1, 11):
        events = generate_history(seed)
        rounds = schedule(seed, events, 5)
        delivered = {(e.table, e.key, e.sequence) for r in rounds for e in r}
        assert delivered == {(e.table, e.key, e.sequence) for e in events}
        patterns.add(PATTERNS[seed % len(PATTERNS)])
        held_rounds = [i for i, r in enumerate(rounds) if r]
        assert held_rounds, seed
    assert patterns == set(PATTERNS)
