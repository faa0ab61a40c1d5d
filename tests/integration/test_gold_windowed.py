"""Windowed views (seed 002's KStream-KStream join), randomized: gold equals the windowed SQL
join over the events gold accepted, and gold accepts exactly the events a plain reference of
the watermark rule accepts.

Each seed writes payments and refunds of a few accounts over ten days: refunds on the window's
edges (exactly 2 days after a payment, exactly 1 hour before, and a second beyond either),
refunds of no payment, null accounts, and some events updated (amount, time, account) or
deleted afterwards. Every change is delivered in batches by its time jittered by up to 16
hours (some after the 12 hours' grace: late), some twice, an update sometimes before its insert; silver's rule (the newest sequence per key
is current) is applied in Python and gold's batch (`process_windowed`) gets the change rows
silver would emit.

The reference (`Reference`) replays the same batches with the rule of `lakehouse.gold.windowed`
written as plain Python: stream time is the latest accepted event time, the watermark is
stream time less the grace, an event first arriving below the watermark is late. After the
last batch gold must equal `oracle_view` (the SQL join of `lakehouse.sqltext`) over the events
the reference accepted and its final watermark, and gold's own record of late events must be
the reference's, also when a batch dies between its gold and event-state commits and runs again.
Seeds own disjoint accounts and keys and share one clock, as partitions of a
Kafka Streams task share stream time: one seed's events may make another's late, which the
reference replays exactly. CDC_ENRICH_WINDOW_SEEDS / _BATCHES set the default run; `slow`
takes more.
"""

from __future__ import annotations

import os
import random
import uuid
from unittest import mock
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakehouse.declaration import Pipeline, parse_pipeline
from lakehouse.gold import full_recompute, run_gold, view_plan
from lakehouse.gold.runner import prepare_view
from lakehouse.gold.windowed import LATE, LATE_REASON, event_table, process_windowed, sides, windowed_feeds
from lakehouse.silver import StreamState, apply_batch, ensure_silver_tables
from lakehouse.tables import gold_table, late_changes_table, row_struct
from lakehouse.verify.oracle import oracle_view
from lakehouse.verify.truth import write_truth_files
from lakehouse.verify.views import diff_frames, verify_pipeline
from testkit.bench.silver import BronzeChange, bronze_frame
from tests.windowed_views import PIPELINE

SEEDS = int(os.environ.get("CDC_ENRICH_WINDOW_SEEDS", "20"))
BATCHES = int(os.environ.get("CDC_ENRICH_WINDOW_BATCHES", "3"))
SLOW_SEEDS = int(os.environ.get("CDC_ENRICH_WINDOW_SLOW_SEEDS", "200"))
SLOW_BATCHES = int(os.environ.get("CDC_ENRICH_WINDOW_SLOW_BATCHES", "8"))
EPOCH = datetime(2026, 3, 1, tzinfo=timezone.utc)
SPAN = 1000
BEFORE, AFTER, GRACE = timedelta(hours=1), timedelta(days=2), timedelta(hours=12)
TIME = {"payments": "paid_at", "refunds": "refunded_at"}
DELIVERY_SPAN = timedelta(days=12)  # events happen over 10 days; refunds up to 2 days after
SIDES = {"payments": "base", "refunds": "joined"}


@dataclass(frozen=True)
class Change:
    """One committed change of an event: its row (None: deleted) at a sequence."""

    table: str
    key: int
    row: dict[str, Any] | None
    sequence: int


def generate(seed: int) -> list[Change]:
    """One seed's payments and refunds, with edge-of-window refunds, updates and deletes."""
    rng = random.Random(seed)
    base = seed * SPAN
    accounts = [seed * 100 + i for i in range(3)]
    seq = seed * 1_000_000
    out: list[Change] = []

    def commit(table: str, key: int, row: dict[str, Any] | None) -> None:
        nonlocal seq
        seq += 1
        out.append(Change(table, key, row, seq))

    def at(minutes: int) -> datetime:
        return EPOCH + timedelta(minutes=minutes)

    payments: list[dict[str, Any]] = []
    for i in range(rng.randint(3, 6)):
        row = {"id": base + i, "account": rng.choice(accounts + [None] * (rng.random() < 0.1)),
               "amount": rng.randint(1, 500), "paid_at": at(rng.randint(0, 14_400))}
        payments.append(row)
        commit("payments", row["id"], row)
    refund_ids = iter(range(base + 500, base + SPAN))
    for payment in payments:
        for _ in range(rng.choice([0, 1, 1, 2])):
            edge = rng.choice([AFTER, -BEFORE, AFTER + timedelta(seconds=1), -BEFORE - timedelta(seconds=1),
                               timedelta(minutes=rng.randint(-90, 3_000))])
            row = {"id": next(refund_ids), "account": payment["account"], "amount": rng.randint(1, 500),
                   "refunded_at": payment["paid_at"] + edge}
            commit("refunds", row["id"], row)
    for _ in range(rng.randint(0, 2)):  # a refund of no payment
        row = {"id": next(refund_ids), "account": rng.choice(accounts), "amount": 1, "refunded_at": at(rng.randint(0, 14_400))}
        commit("refunds", row["id"], row)
    for change in list(out):  # afterwards: some events change or go
        if rng.random() < 0.15 and change.row is not None:
            row = dict(change.row)
            what = rng.choice(["amount", "time", "account"])
            if what == "amount":
                row["amount"] += 1
            elif what == "time":
                row[TIME[change.table]] += timedelta(minutes=rng.randint(-600, 600))
            else:
                row["account"] = rng.choice(accounts)
            commit(change.table, change.key, row)
        elif rng.random() < 0.07:
            commit(change.table, change.key, None)
    return out


def _event_time(change: Change, last: dict[tuple[str, int], datetime]) -> datetime:
    if change.row is not None:
        last[(change.table, change.key)] = change.row[TIME[change.table]]
    return last.get((change.table, change.key), EPOCH)


def deliveries(seed: int, batches: int) -> list[list[Change]]:
    """A seed's changes in `batches` batches: delivered by their event time jittered by up to 16
    hours (so now and then after the 12 hours' grace), some twice; every seed's batch k covers
    the same stretch of delivery time, as one source database's would."""
    rng = random.Random(seed * 7 + 1)
    last: dict[tuple[str, int], datetime] = {}
    timed = [(_event_time(c, last) + timedelta(hours=rng.uniform(-16, 16)), c) for c in generate(seed)]
    timed += [(t + timedelta(hours=rng.uniform(0, 30)), c) for t, c in timed if rng.random() < 0.15]  # twice
    out: list[list[Change]] = [[] for _ in range(batches)]
    for at, change in sorted(timed, key=lambda tc: tc[0]):
        out[min(batches - 1, max(0, int((at - EPOCH) / DELIVERY_SPAN * batches)))].append(change)
    return out


# --------------------------------------------------------------------------- the reference (plain Python)


@dataclass
class Reference:
    """Silver's newest-sequence rule and the windowed view's watermark rule, in plain Python."""

    current: dict[tuple[str, int], Change] = field(default_factory=dict)
    events: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)  # accepted or late, by (table, key)
    late: set[tuple[str, int]] = field(default_factory=set)
    late_arrivals: int = 0  # first arrivals below the watermark (gold records each)
    stream_time: datetime | None = None

    def silver(self, batch: list[Change]) -> dict[tuple[str, int], Change]:
        """Apply a batch to silver current: the keys whose current row changed, and to what."""
        changed: dict[tuple[str, int], Change] = {}
        for change in batch:
            key = (change.table, change.key)
            if key not in self.current or change.sequence > self.current[key].sequence:
                self.current[key] = change
                changed[key] = change
        return changed

    def gold(self, changed: dict[tuple[str, int], Change]) -> None:
        mark = None if self.stream_time is None else self.stream_time - GRACE
        newest = self.stream_time
        for key, change in changed.items():
            if change.row is None:
                self.events.pop(key, None)
                self.late.discard(key)
                continue
            t = change.row[TIME[change.table]]
            if key not in self.events and (t is None or (mark is not None and t < mark)):
                self.late.add(key)
                self.late_arrivals += 1
            self.events[key] = change.row
            if key not in self.late:
                newest = t if newest is None else max(newest, t)
        self.stream_time = newest

    def accepted(self, table: str) -> list[dict[str, Any]]:
        return [row for (t, k), row in sorted(self.events.items()) if t == table and (t, k) not in self.late]

    @property
    def watermark(self) -> datetime | None:
        return None if self.stream_time is None else self.stream_time - GRACE


# --------------------------------------------------------------------------- running it


def change_frames(spark, pipeline: Pipeline, changed: dict[tuple[str, int], Change], version: int) -> dict[str, DataFrame]:
    """The change rows silver's change feed would carry for `changed` (one post-image per key)."""
    plan = view_plan(pipeline, "refunds_outer")
    out: dict[str, DataFrame] = {}
    for feed in windowed_feeds(pipeline, plan):
        schema = StructType([StructField("_change_type", StringType()), StructField("_commit_version", LongType()), *feed.fields])
        rows = []
        for (table, key), change in changed.items():
            if table != feed.source:
                continue
            values = {"id": key, "_sequence": Decimal(change.sequence), "_deleted": change.row is None,
                      "_source_ts": EPOCH + timedelta(seconds=change.sequence % 100_000), **(change.row or {})}
            rows.append(("update_postimage", version, *[values.get(f.name) for f in feed.fields]))
        if rows:
            out[feed.source] = spark.createDataFrame(rows, schema)
    return out


def run(spark, seeds: list[int], batches: int, crash_at: int | None = None) -> tuple[Pipeline, Reference]:
    """The seeds' batches through `process_windowed`; at batch `crash_at` the first attempt dies
    after writing gold and before the event state (a crash between two commits), and the batch
    is run again as a restarted stream would: it must come out as if nothing had happened."""
    schema = f"w{uuid.uuid4().hex[:8]}"
    pipeline = parse_pipeline(PIPELINE.replace("name: windowed", f"name: windowed\ntables: {{silver_schema: {schema}_s, gold_schema: {schema}_g}}"))
    plan = view_plan(pipeline, "refunds_outer")
    prepare_view(spark, pipeline, plan)
    per_seed = [deliveries(seed, batches) for seed in seeds]
    reference = Reference()
    for version in range(batches):
        batch = [c for seed_batches in per_seed for c in seed_batches[version]]
        changed = reference.silver(batch)
        reference.gold(changed)
        frames = change_frames(spark, pipeline, changed, version)
        if not frames:
            continue
        if version == crash_at:
            with mock.patch("lakehouse.gold.windowed._merge_events", side_effect=RuntimeError("killed between commits")):
                with pytest.raises(RuntimeError, match="killed between commits"):
                    process_windowed(spark, pipeline, plan, frames, app_id=lambda t: f"test/{t}", version=version)
        process_windowed(spark, pipeline, plan, frames, app_id=lambda t: f"test/{t}", version=version)
    return pipeline, reference


def check(spark, pipeline: Pipeline, reference: Reference) -> None:
    plan = view_plan(pipeline, "refunds_outer")
    state = {table: spark.createDataFrame([(*[r.get(c) for c in pipeline.source(table).column_names], EPOCH) for r in reference.accepted(table)],
                                          StructType([*row_struct(pipeline.source(table)).fields, StructField("_source_ts", _ts())]))
             for table in ("payments", "refunds")}
    expected = oracle_view(spark, pipeline, "refunds_outer", state, watermark=reference.watermark)
    gold = spark.read.table(gold_table(pipeline, "refunds_outer"))
    diff = diff_frames(expected, gold, plan.key_columns, plan.output_columns)
    assert diff.ok, f"gold differs from the windowed SQL join: {diff}"
    rebuilt = diff_frames(full_recompute(spark, pipeline, "refunds_outer"), gold, plan.key_columns, plan.output_columns)
    assert rebuilt.ok, f"the whole view from the event state differs from gold: {rebuilt}"
    for side in sides(plan):
        late = {(side.source.name, r["id"]) for r in spark.read.table(event_table(pipeline, plan, side)).where(F.col(LATE)).collect()}
        assert late == {k for k in reference.late if k[0] == side.source.name}, f"late {side.source.name} differ"
    recorded = spark.read.table(late_changes_table(pipeline)).where(F.col("reason") == LATE_REASON).count()
    assert recorded == reference.late_arrivals


def _ts():
    from pyspark.sql.types import TimestampType

    return TimestampType()


def test_windowed_view_equals_the_windowed_sql_join_for_any_arrival_order(spark) -> None:
    pipeline, reference = run(spark, list(range(SEEDS)), BATCHES, crash_at=BATCHES - 2)
    assert reference.late, "the scenarios should make some events late (else lateness is untested)"
    assert any(True for _ in reference.accepted("refunds"))
    check(spark, pipeline, reference)


@pytest.mark.slow
def test_windowed_view_converges_over_many_seeds_and_batches(spark) -> None:
    pipeline, reference = run(spark, list(range(SLOW_SEEDS)), SLOW_BATCHES)
    check(spark, pipeline, reference)


# --------------------------------------------------------------------------- through silver and the stream, by example


def _payment(key: int, account: int, at: datetime) -> BronzeChange:
    return BronzeChange("c", key={"id": key}, after={"id": key, "account": account, "amount": 10 * key, "paid_at": at},
                        sequence=key, ts_ms=int(at.timestamp() * 1000))


def _refund(key: int, account: int, at: datetime) -> BronzeChange:
    return BronzeChange("c", key={"id": key}, after={"id": key, "account": account, "amount": key, "refunded_at": at},
                        sequence=key, ts_ms=int(at.timestamp() * 1000))


def test_a_windowed_view_through_silver_pairs_at_once_closes_windows_later_and_records_a_late_refund(spark, lake) -> None:
    """Seed 002's outer window join, step by step through real silver tables and gold's stream:
    a pair is written at once; an unmatched refund's row once its window closed; an unmatched
    payment's row only when a later event moves the watermark past its window plus the grace; a
    refund arriving after that is recorded as late and changes nothing (no null row retracted)."""
    token = uuid.uuid4().hex[:6]
    pipeline = parse_pipeline(PIPELINE.replace("name: windowed", f"name: wi_{token}\ntables: {{silver_schema: wi_{token}_s, gold_schema: wi_{token}_g}}"))
    plan = view_plan(pipeline, "refunds_outer")
    payments, refunds = pipeline.source("payments"), pipeline.source("refunds")
    for source in (payments, refunds):
        ensure_silver_tables(spark, pipeline, source)
    day = lambda d, h=0: EPOCH + timedelta(days=d, hours=h)  # noqa: E731
    last_report: list[str] = []

    payments_sent: list[BronzeChange] = []
    refunds_sent: list[BronzeChange] = []
    streams = {source.name: StreamState() for source in (payments, refunds)}  # what each stream keeps between batches

    def deliver(round_: int, pays: list[BronzeChange], refs: list[BronzeChange]) -> set[tuple[Any, Any]]:
        payments_sent.extend(pays)
        refunds_sent.extend(refs)
        for source, batch in ((payments, pays), (refunds, refs)):
            if batch:
                apply_batch(bronze_frame(spark, source, batch, first_offset=round_ * 100), round_, pipeline, source, "wi",
                            streams[source.name])
        report = run_gold(spark, pipeline, lake)
        assert report.views["refunds_outer"].skipped is None
        last_report[:] = [report.render()]
        return {(r["payment_id"], r["refund_id"]) for r in spark.table(gold_table(pipeline, "refunds_outer")).collect()}

    # P1 (account 1) and P2 (account 2) paid on day 0; R1 refunds account 1 a day later; R9 refunds
    # account 9, which paid nothing. Stream time day 1 10:00, watermark day 0 22:00: R9's window
    # (its time plus the 1 hour a payment may follow it) has closed, P2's (its time plus 2 days) has not.
    assert deliver(0, [_payment(1, 1, day(0, 10)), _payment(2, 2, day(0, 12))],
                   [_refund(501, 1, day(1, 10)), _refund(509, 9, day(0, 11))]) == {(1, 501), (None, 509)}
    # P3 on day 5: the watermark moves to day 4 12:00, past P2's window (day 2 12:00): P2 unmatched.
    assert deliver(1, [_payment(3, 3, day(5))], []) == {(1, 501), (None, 509), (2, None)}
    # R2 refunds P2 on day 1, inside P2's window, but arrives after it closed: recorded, not joined.
    assert deliver(2, [], [_refund(502, 2, day(1))]) == {(1, 501), (None, 509), (2, None)}
    assert "1 late event(s) recorded in _late_changes, not joined" in last_report[0]
    late = spark.table(late_changes_table(pipeline)).where(F.col("reason") == LATE_REASON).collect()
    assert [(r["source"], r["key"]) for r in late] == [("refunds", '{"id":502}')]
    assert late[0]["late_by_ms"] == int((day(4, 12) - day(1)).total_seconds() * 1000)  # behind the watermark
    report = verify_pipeline(spark, pipeline)
    assert report.ok, report.render()
    assert "accepted" in report.render()
    # against a truth of the sources' final rows (the window is timed by declared columns, which it holds)
    truth = {"payments": [c.after for c in payments_sent], "refunds": [c.after for c in refunds_sent]}
    write_truth_files(truth, {"sources": {s.name: {"kind": s.kind, "primary_key": list(s.primary_key),
                                                   "columns": [[c.name, c.type] for c in s.columns]}
                                          for s in (payments, refunds)}}, lake / f"truth_{token}")
    by_truth = verify_pipeline(spark, pipeline, truth_dir=lake / f"truth_{token}")
    assert by_truth.ok and "checked against silver" not in by_truth.render(), by_truth.render()
