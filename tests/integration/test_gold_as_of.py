"""As-of views, randomized: for any arrival order, gold equals the temporal SQL join.

Each seed writes a small source history with commit times: customers and orders versioned
(segment and status changes, foreign-key moves, deletes and re-creations, dangling and null
fks), a global `methods` table relabelled over time, and payments (events) referring to orders
at their commit time, some paid "at" another time (`paid_at`), some updated or deleted
afterwards. Every change is delivered to real silver (`apply_batch`, history and all) in
rounds, each table's changes shuffled: dimension versions and events arrive out of order and
late, some twice. Gold runs after every round; after every round but the first (which builds
gold from silver) gold equals the oracle over what silver holds (the temporal join over silver
history, `verify`'s check), and after the last it also equals the oracle over the generated
truth (every version with its commit time),
the property DESIGN.md states: convergence to the temporal SQL join for any arrival order.

Seeds own disjoint key ranges of one set of tables (as in test_gold_properties), so 20 seeds
cost about what one does. CDC_ENRICH_AS_OF_SEEDS / _ROUNDS set the default run; the `slow` run
takes CDC_ENRICH_AS_OF_SLOW_SEEDS seeds over more rounds.
"""

from __future__ import annotations

import dataclasses
import os
import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline, parse_pipeline
from lakehouse.gold import run_gold, view_plan
from lakehouse.gold.as_of import index_table
from lakehouse.gold.delta import insert_new_rows
from lakehouse.gold.layout import key_ranges
from lakehouse.silver import StreamState, apply_batch, ensure_silver_tables
from lakehouse.tables import gold_table, row_struct
from lakehouse.verify.oracle import oracle_view, silver_history_state, silver_live_state
from lakehouse.verify.views import diff_frames, verify_pipeline
from testkit.bench.silver import BronzeChange, bronze_frame
from tests.as_of_views import PIPELINE

SEEDS = int(os.environ.get("CDC_ENRICH_AS_OF_SEEDS", "20"))
ROUNDS = int(os.environ.get("CDC_ENRICH_AS_OF_ROUNDS", "2"))
SLOW_SEEDS = int(os.environ.get("CDC_ENRICH_AS_OF_SLOW_SEEDS", "200"))
SLOW_ROUNDS = int(os.environ.get("CDC_ENRICH_AS_OF_SLOW_ROUNDS", "5"))
SPAN = 1000
EPOCH = datetime(2026, 3, 1, tzinfo=timezone.utc)

TABLES = ("customers", "orders", "methods", "payments")


# --------------------------------------------------------------------------- source histories


@dataclass(frozen=True)
class Version:
    """One committed change: the row (None: deleted) of a key at a sequence and commit time."""

    table: str
    key: Any
    row: dict[str, Any] | None
    sequence: int
    ts: datetime


def generate(seed: int) -> list[Version]:
    """One seed's universe, in commit order: dimensions changing while payments happen."""
    rng = random.Random(seed)
    base = seed * SPAN
    customers = [base + i for i in range(1, 4)]
    orders = [base + i for i in range(1, 5)]
    codes = [f"S{seed}A", f"S{seed}B"]
    out: list[Version] = []
    live: dict[tuple[str, Any], dict[str, Any]] = {}
    seq, clock = seed * 10_000_000, EPOCH + timedelta(days=seed)
    payment_ids = iter(range(base + 1, base + SPAN))

    def commit(changes: list[tuple[str, Any, dict[str, Any] | None]]) -> None:
        nonlocal seq, clock
        clock += timedelta(milliseconds=rng.choice([1, 5, 250, 1000]))  # one transaction, one commit time
        for table, key, row in changes:
            seq += rng.randint(1, 3)
            out.append(Version(table, key, row, seq, clock))
            if row is None:
                live.pop((table, key), None)
            else:
                live[(table, key)] = row

    for code in codes:
        commit([("methods", code, {"code": code, "label": f"{code}-v0"})])
    for _ in range(rng.randint(25, 40)):
        roll = rng.random()
        if roll < 0.2:
            c = rng.choice(customers)
            row = None if (("customers", c) in live and rng.random() < 0.2) else {"id": c, "segment": rng.choice("abc")}
            commit([("customers", c, row)])
        elif roll < 0.45:
            o = rng.choice(orders)
            if ("orders", o) in live and rng.random() < 0.15:
                commit([("orders", o, None)])
            else:
                fk = rng.choice(customers + [None, base + 999])  # a null and a dangling fk
                commit([("orders", o, {"id": o, "customer_id": fk, "status": rng.choice(["new", "paid", "sent"])})])
        elif roll < 0.5:
            code = rng.choice(codes)
            commit([("methods", code, {"code": code, "label": f"{code}-v{rng.randint(1, 9)}"})])
        else:
            o = rng.choice(orders + [base + 998])
            p = next(payment_ids)
            method = rng.choice([c.lower() for c in codes] + codes + ["none"])
            paid = clock - timedelta(milliseconds=rng.choice([0, 300, 2000, 60_000]))
            payment = {"id": p, "order_id": o, "method": method, "amount": rng.randint(1, 99), "paid_at": paid}
            together = [("payments", p, payment)]
            if ("orders", o) in live and rng.random() < 0.4:  # paid in the transaction that moves the order on
                together.insert(0, ("orders", o, dict(live[("orders", o)], status="paid")))
            commit(together)
    for (table, key), row in list(live.items()):  # a few events corrected or withdrawn later
        if table == "payments" and rng.random() < 0.15:
            commit([("payments", key, None if rng.random() < 0.5 else dict(row, amount=row["amount"] + 100))])
    return out


def deliveries(seed: int, versions: list[Version], rounds: int) -> list[list[Version]]:
    """Each table's changes in an arrival order of its own (a few re-delivered, some moved
    late into a later round), cut into `rounds` rounds."""
    rng = random.Random(seed * 31 + 7)
    out: list[list[Version]] = [[] for _ in range(rounds)]
    for table in TABLES:
        topic = [v for v in versions if v.table == table]
        topic += [v for v in topic if rng.random() < 0.1]  # re-delivered
        rng.shuffle(topic) if rng.random() < 0.5 else topic.sort(key=lambda v: v.sequence if rng.random() < 0.8 else -v.sequence)
        cuts = sorted(rng.randint(0, len(topic)) for _ in range(rounds - 1))
        bounds = [0] + cuts + [len(topic)]
        for r in range(rounds):
            out[r].extend(topic[bounds[r]: bounds[r + 1]])
    return out


def truth(pipeline: Pipeline, versions: list[Version]) -> tuple[dict[str, list], dict[str, list]]:
    """(events' final live rows with their commit time; every table's history rows)."""
    by_key: dict[tuple[str, Any], list[Version]] = {}
    for v in versions:
        by_key.setdefault((v.table, v.key), []).append(v)
    state: dict[str, list] = {t: [] for t in TABLES}
    history: dict[str, list] = {t: [] for t in TABLES}
    for (table, key), vs in by_key.items():
        source = pipeline.source(table)
        vs.sort(key=lambda v: v.sequence)
        for i, v in enumerate(vs):
            row = v.row if v.row is not None else {source.primary_key[0]: key}
            valid_to = vs[i + 1].ts if i + 1 < len(vs) else None
            history[table].append(tuple(row.get(c) for c in source.column_names) + (v.ts, valid_to, v.row is None))
        if vs[-1].row is not None:
            state[table].append(tuple(vs[-1].row.get(c) for c in source.column_names) + (vs[-1].ts,))
    return state, history


# --------------------------------------------------------------------------- driving silver and gold


def _fresh(label: str) -> Pipeline:
    pipeline = parse_pipeline(PIPELINE, filename="as_of.yml")
    token = f"{label}_{uuid.uuid4().hex[:6]}"
    tables = dataclasses.replace(pipeline.tables, silver_schema=f"a_{token}_silver", gold_schema=f"a_{token}_gold")
    return dataclasses.replace(pipeline, name=f"a_{token}", tables=tables)


def _bronze(version: Version, source) -> BronzeChange:
    ms = int(version.ts.timestamp() * 1000)
    key = {source.primary_key[0]: version.key}
    if version.row is None:
        return BronzeChange("d", key=key, sequence=version.sequence, ts_ms=ms)
    return BronzeChange("c", key=key, after=dict(version.row), sequence=version.sequence, ts_ms=ms)


def run_universe(spark, lake: Path, pipeline: Pipeline, seeds: list[int], rounds: int) -> None:
    histories = {s: generate(s) for s in seeds}
    plans = {s: deliveries(s, histories[s], rounds) for s in seeds}
    for table in TABLES:
        ensure_silver_tables(spark, pipeline, pipeline.source(table))
    streams = {table: StreamState() for table in TABLES}  # what each source's stream keeps between batches
    for r in range(rounds):
        for table in TABLES:
            source = pipeline.source(table)
            batch = [_bronze(v, source) for s in seeds for v in plans[s][r] if v.table == table]
            if batch:
                apply_batch(bronze_frame(spark, source, batch, first_offset=r * 100_000), r, pipeline, source, "asof", streams[table])
        run_gold(spark, pipeline, lake)
        if r in (0, rounds - 1):
            continue  # the first round builds gold from silver; the last is checked by `verify` below, and against the truth
        live = silver_live_state(spark, pipeline, TABLES)
        history = silver_history_state(spark, pipeline, TABLES)
        for name in pipeline.views:
            plan = view_plan(pipeline, name)
            diff = diff_frames(oracle_view(spark, pipeline, name, live, history), spark.table(gold_table(pipeline, name)),
                               plan.key_columns, plan.output_columns, samples=20)
            assert diff.ok, f"round {r}, view {name} against silver: {diff}"
    everything = [v for s in seeds for v in histories[s]]
    state_rows, history_rows = truth(pipeline, everything)
    state, history = {}, {}
    for table in TABLES:
        struct = row_struct(pipeline.source(table))
        state[table] = spark.createDataFrame(state_rows[table], struct.add("_source_ts", "timestamp"))
        history[table] = spark.createDataFrame(
            history_rows[table], row_struct(pipeline.source(table)).add("_valid_from", "timestamp")
            .add("_valid_to", "timestamp").add("_deleted", "boolean"))
    for name in pipeline.views:
        plan = view_plan(pipeline, name)
        expected = oracle_view(spark, pipeline, name, state, history)
        diff = diff_frames(expected, spark.table(gold_table(pipeline, name)), plan.key_columns, plan.output_columns, samples=20)
        assert diff.ok, f"view {name} against the truth: {diff}"
    report = verify_pipeline(spark, pipeline)  # against silver history, and no stale lineage hash
    assert report.ok, report.render()


# --------------------------------------------------------------------------- tests


@pytest.mark.long
def test_as_of_views_converge_to_the_temporal_join_for_any_arrival_order(spark, lake: Path):
    pipeline = _fresh("seeds")
    run_universe(spark, lake, pipeline, list(range(1, SEEDS + 1)), ROUNDS)
    # the truth was not trivial: some payments met a version that is not their order's last
    rows = spark.table(gold_table(pipeline, "payments_as_of"))
    assert rows.where(F.col("order_status").isNotNull()).count() > SEEDS
    assert rows.where(F.col("order_status").isNull()).count() > 0  # a dangling or too-early order: left keeps it


@pytest.mark.slow
def test_as_of_views_converge_many_seeds(spark, lake: Path):
    pipeline = _fresh("slow")
    run_universe(spark, lake, pipeline, list(range(1, SLOW_SEEDS + 1)), SLOW_ROUNDS)


@pytest.mark.slow  # 40-43 s, which the default suite's 20 minutes cannot pay
def test_a_correction_older_than_history_retention_leaves_old_events_as_they_are(spark, lake: Path):
    """A batch of new events only is appended to gold and the index. Compaction removes
    superseded versions without re-enriching the events built from them;
    a late dimension version older than the horizon is applied to history but leaves the events
    it falls under as they were (counted, recorded); a late *event* is enriched as of its time."""
    from lakehouse.silver.reads import compact_history, late_changes

    pipeline = _fresh("retention")
    for table in TABLES:
        ensure_silver_tables(spark, pipeline, pipeline.source(table))
    at = lambda *ymd: datetime(*ymd, tzinfo=timezone.utc)  # noqa: E731
    batch_id = iter(range(100))

    def deliver(*versions: Version) -> None:
        for table in TABLES:
            source = pipeline.source(table)
            rows = [_bronze(v, source) for v in versions if v.table == table]
            if rows:
                apply_batch(bronze_frame(spark, source, rows), next(batch_id), pipeline, source, "retention")

    deliver(
        Version("customers", 1, {"id": 1, "segment": "a"}, 10, at(2020, 1, 1)),
        Version("orders", 1, {"id": 1, "customer_id": 1, "status": "new"}, 11, at(2020, 1, 1)),
        Version("payments", 1, {"id": 1, "order_id": 1, "method": "x", "amount": 5, "paid_at": at(2020, 3, 1)}, 20, at(2020, 3, 1)),
        Version("customers", 1, {"id": 1, "segment": "b"}, 30, at(2020, 6, 1)),
    )
    view = "payments_as_of"
    segments = lambda: {r["payment_id"]: r["segment"] for r in spark.table(gold_table(pipeline, view)).collect()}  # noqa: E731
    run_gold(spark, pipeline, lake, views=[view])
    assert segments() == {1: "a"}
    deliver(Version("payments", 3, {"id": 3, "order_id": 1, "method": "x", "amount": 9, "paid_at": at(2020, 6, 15)}, 40, at(2020, 6, 15)))
    run = run_gold(spark, pipeline, lake, views=[view]).views[view]
    assert run.last_reason == "1 new event(s): appended" and run.inserted == 1
    assert segments() == {1: "a", 3: "b"}

    assert compact_history(spark, pipeline, "customers", retention_days=1, now=datetime(2020, 7, 2)) == 1  # "a" is gone
    assert run_gold(spark, pipeline, lake, views=[view]).views[view].updated == 0
    assert segments() == {1: "a", 3: "b"}  # kept: compaction does not re-enrich

    deliver(
        Version("customers", 1, {"id": 1, "segment": "c"}, 15, at(2020, 2, 1)),  # a correction older than the horizon
        Version("payments", 2, {"id": 2, "order_id": 1, "method": "x", "amount": 7, "paid_at": at(2020, 4, 1)}, 25, at(2020, 4, 1)),
    )
    run = run_gold(spark, pipeline, lake, views=[view]).views[view]
    assert run.kept_beyond_retention == 1 and "1 event(s) kept as they were" in run.line()
    assert segments() == {1: "a", 2: "c", 3: "b"}  # the late event is enriched as of its own time
    recorded = late_changes(spark, pipeline, "payments").where("reason = 'as_of_beyond_retention'").collect()
    assert [(r["key"], r["op"]) for r in recorded] == [('{"id":1}', "as_of")]


@pytest.mark.slow  # 36 s; the default suite checks as-of gold against PostgreSQL's own history (tests/e2e)
def test_verify_states_the_temporal_join_over_the_simulators_version_log(spark, lake: Path) -> None:
    """The simulator's truth records every version the database committed with its commit time
    (`<source>.history.jsonl`), so `verify --truth` states an as-of view's temporal join over the
    truth itself, not over what silver recorded: silver's history and gold are both checked. A
    workload with delivery chaos (duplicates, reordering, a restart) goes Debezium record ->
    bronze rows -> silver -> gold; the report says which state the view was checked against."""
    from testkit.simulator import simulate, write_truth
    from lakehouse.bronze import parse_batch
    from lakehouse.verify.views import AS_OF_AGAINST_TRUTH

    pipeline = _fresh("truth")
    sim = simulate(pipeline, seed=5, events=400, chaos="some")
    assert sim.stats["chaos_applied"]["resnapshots"] == 0
    truth_dir = lake / f"truth_{pipeline.name}"
    write_truth(sim, truth_dir)
    ts = datetime(2026, 1, 1)
    kafka = spark.createDataFrame([(r.key, r.value, r.topic, 0, i, ts) for i, r in enumerate(sim.records)],
                                  "key binary, value binary, topic string, partition int, offset long, timestamp timestamp")
    by_source, _ = parse_batch(pipeline, kafka)
    for table in TABLES:
        ensure_silver_tables(spark, pipeline, pipeline.source(table))
        apply_batch(by_source[table], 0, pipeline, pipeline.source(table), "truth")
    run_gold(spark, pipeline, lake)
    report = verify_pipeline(spark, pipeline, truth_dir=truth_dir)
    assert report.ok, report.render()
    assert [c.note for c in report.views] == [AS_OF_AGAINST_TRUTH] * len(pipeline.views)
    versions = sum(len(rows) for rows in sim.history.values())
    assert versions > sum(len(rows) for rows in sim.truth.values())  # more than the final rows: updates and deletes


def test_events_gold_already_holds_are_not_inserted_again(spark) -> None:
    """`insert_new_rows`, how an as-of view writes a batch of new events: only the keys gold does
    not hold are inserted (a first build may have read them already, see the slow scenario below),
    the change feed carries those inserts alone, and a replay of the batch's tag writes nothing."""
    name = f"asof_insert_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING) USING DELTA TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.range(3).select("id", F.lit("built").alias("v")).write.format("delta").mode("append").saveAsTable(name)
    before = spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()["version"]
    batch = spark.range(1, 6).select("id", F.lit("batch").alias("v"))  # 1 and 2 held already

    assert insert_new_rows(batch, name, ["id"], key_ranges(range(1, 6)), "asof-spec", 0) == 3
    assert insert_new_rows(batch, name, ["id"], None, "asof-spec", 0) == 0  # the same batch replayed
    assert sorted(tuple(r) for r in spark.table(name).collect()) == [
        (0, "built"), (1, "built"), (2, "built"), (3, "batch"), (4, "batch"), (5, "batch")
    ]
    feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", before + 1).table(name)
    assert sorted((r["_change_type"], r["id"]) for r in feed.collect()) == [("insert", 3), ("insert", 4), ("insert", 5)]


@pytest.mark.slow  # 85 s; the default suite holds its rule in the spec above (insert_new_rows)
def test_events_a_first_build_already_read_are_not_appended_again(spark, lake: Path):
    """A view's first batch builds gold from silver as silver is when the build runs, which can
    be past the end of that batch in the change feed (silver moved on meanwhile; here the stream
    takes one file per trigger). The later batches carry those events again as inserts into
    silver: they must not become second gold rows of the same events."""
    pipeline = _fresh("rebuild")
    versions = generate(7)
    for table in TABLES:
        ensure_silver_tables(spark, pipeline, pipeline.source(table))
    seen: set[tuple[str, Any]] = set()
    created = []  # each payment's first version: an insert into silver current
    for v in versions:
        if v.table == "payments" and (v.table, v.key) not in seen:
            created.append(v)
        seen.add((v.table, v.key))
    # dimensions and the first payments in one silver batch, then two batches of new payments only
    third = len(created) // 3
    batches = [[v for v in versions if v.table != "payments"] + created[:third], created[third:2 * third], created[2 * third:]]
    streams = {table: StreamState() for table in TABLES}
    for n, batch in enumerate(batches):
        for table in TABLES:
            source = pipeline.source(table)
            rows = [_bronze(v, source) for v in batch if v.table == table]
            if rows:
                apply_batch(bronze_frame(spark, source, rows, first_offset=n * 100_000), n, pipeline, source, "asof", streams[table])

    run = run_gold(spark, pipeline, lake, views=["payments_as_of"], max_files_per_trigger=1).views["payments_as_of"]

    assert run.paths.get("build") == 1 and run.batches > 1, run.line()
    report = verify_pipeline(spark, pipeline, views=["payments_as_of"])  # one gold row per event, as the join
    assert report.ok, report.render()
