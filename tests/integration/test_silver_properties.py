"""Property: whatever the arrival order, duplication and batching, silver converges to the
latest-by-sequence state and to the full ordered version list of the source's true history.

A random source history (few keys, small LSNs) of inserts, updates (some with an unchanged TOAST
column, sent as Debezium's placeholder), deletes (+ tombstones), re-creates, primary-key changes
(delete old key + create new key at one LSN), truncates and snapshots (`r` rows at one LSN) is
turned into bronze records; some are delivered twice; all are shuffled and cut into batches.
After every batch is applied, silver must equal `reference_model(events)`, a plain-Python
statement of the semantics:

- per key, the distinct versions by sequence; a truncate adds a delete version (`_op='t'`) to
  every key alive just before it;
- a TOAST placeholder takes the previous version's value;
- `_valid_to` / `_valid_to_sequence` are the next version's source time / sequence;
- current = each key's last version when alive; a deleted key has a `_deleted` marker if it
  was ever live in current, else no row; the live view = the keys whose last version is alive.

The reference is also checked against the generator's own final state (the true source table).

Example counts: `SILVER_EXAMPLES` (default 3) for the regular run; the `slow` test runs more (30),
through the streaming runner (`run_silver` after each bronze append).
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from lakehouse.ordering import postgres_sequence
from lakehouse.silver import (
    StreamState,
    apply_batch,
    ensure_silver_tables,
    live_view,
    row_hash,
    run_silver,
)
from lakehouse.tables import (
    bronze_schema,
    bronze_table,
    silver_current_table,
    silver_history_table,
)
from testkit.bench.silver import BronzeChange, bronze_frame

BASE = datetime(2026, 3, 1)
BASE_MS = 1_772_323_200_000
KEYS = (1, 2, 3)
SPARE_KEYS = (4, 5)  # targets of primary-key changes
VALUE_COLUMNS = ("sku", "title", "price", "description")

settings.register_profile(
    "silver",
    max_examples=int(os.environ.get("SILVER_EXAMPLES", "2")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "silver-slow",
    parent=settings.get_profile("silver"),
    max_examples=int(os.environ.get("SILVER_SLOW_EXAMPLES", "30")),
)


# --------------------------------------------------------------------------- the source's true history


@dataclasses.dataclass(frozen=True)
class Scenario:
    events: tuple[BronzeChange, ...]  # in source (LSN) order, each once
    truth: dict[int, dict[str, Any]]  # the source table at the end
    batches: tuple[tuple[BronzeChange, ...], ...]  # what bronze receives, batch by batch


def _values(draw: Any, key: int) -> dict[str, Any]:
    return {
        "id": key,
        "sku": f"sku-{key}",
        "title": draw(st.sampled_from(("a", "b", "c", "d"))),
        "price": Decimal(draw(st.sampled_from(("1.00", "2.50", "9.99")))),
        "description": draw(st.sampled_from(("short", "long text", "very long text"))),
    }


def _at_ms(lsn: int) -> int:
    return BASE_MS + lsn * 1000


@st.composite
def scenarios(draw: Any, max_steps: int = 10, max_batches: int = 3) -> Scenario:
    """A true history, then its delivery: duplicates, shuffle, batches."""
    steps = draw(
        st.lists(
            st.sampled_from(("write",) * 6 + ("delete",) * 2 + ("pk_change", "truncate", "snapshot")),
            min_size=4,
            max_size=max_steps,
        )
    )
    table: dict[int, dict[str, Any]] = {}
    events: list[BronzeChange] = []
    lsn = 0
    for step in steps:
        lsn += draw(st.integers(1, 3))
        ts = _at_ms(lsn)
        if step == "write":
            key = draw(st.sampled_from(KEYS))
            row = _values(draw, key)
            if key in table:
                toast = draw(st.booleans())
                if toast:  # unchanged TOASTed column: Debezium sends the placeholder
                    row["description"] = table[key]["description"]
                table[key] = row
                events.append(BronzeChange("u", after=dict(row), sequence=postgres_sequence(lsn, "u"), ts_ms=ts,
                                           unavailable=("description",) if toast else ()))
            else:
                table[key] = row
                events.append(BronzeChange("c", after=dict(row), sequence=postgres_sequence(lsn, "c"), ts_ms=ts))
        elif step == "delete" and table:
            key = draw(st.sampled_from(sorted(table)))
            del table[key]
            events.append(BronzeChange("d", key={"id": key}, sequence=postgres_sequence(lsn, "d"), ts_ms=ts))
            events.append(BronzeChange("tombstone", key={"id": key}))
        elif step == "pk_change" and table and any(k not in table for k in KEYS + SPARE_KEYS):
            old = draw(st.sampled_from(sorted(table)))
            new = draw(st.sampled_from([k for k in KEYS + SPARE_KEYS if k not in table]))
            row = dict(table.pop(old), id=new)
            table[new] = row
            events.append(BronzeChange("d", key={"id": old}, sequence=postgres_sequence(lsn, "d"), ts_ms=ts))
            events.append(BronzeChange("tombstone", key={"id": old}))
            events.append(BronzeChange("c", after=dict(row), sequence=postgres_sequence(lsn, "c"), ts_ms=ts))
        elif step == "truncate":
            table.clear()
            events.append(BronzeChange("t", sequence=postgres_sequence(lsn, "t"), ts_ms=ts))
        elif step == "snapshot":
            for key in sorted(table):  # every row of one snapshot shares the snapshot's LSN
                events.append(BronzeChange("r", after=dict(table[key]), sequence=postgres_sequence(lsn, "r"), ts_ms=ts))

    delivered = list(events)
    if events:
        delivered += [events[i] for i in draw(st.lists(st.integers(0, len(events) - 1), max_size=3))]
    delivered = draw(st.permutations(delivered))
    n_batches = draw(st.sampled_from((1,) + (2,) * 2 + tuple(range(3, max_batches + 1)) * 2))
    n_cuts = max(0, min(n_batches - 1, len(delivered) - 1))
    cuts = sorted(draw(st.lists(st.integers(1, max(1, len(delivered) - 1)), min_size=n_cuts, max_size=n_cuts, unique=True)))
    bounds = [0, *cuts, len(delivered)]
    batches = tuple(tuple(delivered[a:b]) for a, b in zip(bounds, bounds[1:]))
    return Scenario(tuple(events), {k: dict(v) for k, v in table.items()}, batches)


# --------------------------------------------------------------------------- the reference model


def _ts(ms: int | None) -> datetime | None:
    return BASE + timedelta(milliseconds=ms - BASE_MS) if ms is not None else None


def reference_model(events: list[BronzeChange]) -> tuple[dict[int, dict[str, Any]], dict[int, list[dict[str, Any]]]]:
    """(last version per key, ordered versions per key) from the set of events."""
    changes: dict[tuple[int, int], BronzeChange] = {}
    truncates: set[tuple[int, int]] = set()
    for e in events:
        if e.op in ("r", "c", "u", "d"):
            key = (e.key or e.after)["id"]
            changes.setdefault((key, int(e.sequence)), e)
        elif e.op == "t":
            truncates.add((int(e.sequence), e.ts_ms))
    truncate_list = sorted(truncates)
    history: dict[int, list[dict[str, Any]]] = {}
    for key in sorted({k for k, _ in changes}):
        real = sorted(((s, e) for (k, s), e in changes.items() if k == key), key=lambda x: x[0])
        versions = []
        for i, (s, e) in enumerate(real):
            versions.append({"seq": s, "op": e.op, "deleted": e.op == "d", "ts": e.ts_ms, "event": e})
            if e.op != "d":
                nxt = real[i + 1][0] if i + 1 < len(real) else None
                hit = [t for t in truncate_list if t[0] > s and (nxt is None or t[0] < nxt)]
                if hit:
                    versions.append({"seq": hit[0][0], "op": "t", "deleted": True, "ts": hit[0][1], "event": None})
        versions.sort(key=lambda v: v["seq"])
        previous: dict[str, Any] = {c: None for c in VALUE_COLUMNS}
        for v in versions:
            if v["deleted"]:
                values = {c: None for c in VALUE_COLUMNS}
            else:
                values = {c: v["event"].after[c] for c in VALUE_COLUMNS}
                for c in v["event"].unavailable:
                    values[c] = previous[c]
            v["values"] = values
            previous = values
        for v, nxt in zip(versions, versions[1:] + [None]):
            v["valid_to"] = nxt["ts"] if nxt else None
            v["valid_to_seq"] = nxt["seq"] if nxt else None
        history[key] = versions
    current = {key: versions[-1] for key, versions in history.items()}
    return current, history


# --------------------------------------------------------------------------- running and checking


def _variant(spark: Any, pipeline: Any) -> tuple[Any, Any]:
    tag = uuid.uuid4().hex[:8]
    variant = dataclasses.replace(
        pipeline,
        tables=dataclasses.replace(pipeline.tables, catalog=None, bronze_schema=f"p{tag}_bronze", silver_schema=f"p{tag}_silver"),
    )
    source = variant.source("products")
    ensure_silver_tables(spark, variant, source)
    return variant, source


def _drop(spark: Any, pipeline: Any) -> None:
    for schema in (pipeline.tables.bronze_schema, pipeline.tables.silver_schema):
        spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def assert_silver_matches_reference(spark: Any, pipeline: Any, source: Any, scenario: Scenario) -> None:
    expected_current, expected_history = reference_model(list(scenario.events))
    # the reference agrees with the source table the generator kept
    assert {k: v["values"] | {"id": k} for k, v in expected_current.items() if not v["deleted"]} == scenario.truth

    history: dict[int, list[dict[str, Any]]] = {}
    for r in spark.table(silver_history_table(pipeline, source)).orderBy("id", "_sequence").collect():
        history.setdefault(r["id"], []).append(r.asDict())
    got = {
        key: [(int(r["_sequence"]), r["_op"], r["_deleted"], {c: r[c] for c in VALUE_COLUMNS}, r["_valid_from"], r["_valid_to"],
               int(r["_valid_to_sequence"]) if r["_valid_to_sequence"] is not None else None) for r in rows]
        for key, rows in history.items()
    }
    want = {
        key: [(v["seq"], v["op"], v["deleted"], v["values"], _ts(v["ts"]), _ts(v["valid_to"]), v["valid_to_seq"]) for v in versions]
        for key, versions in expected_history.items()
    }
    assert got == want

    current = {r["id"]: r.asDict() for r in spark.table(silver_current_table(pipeline, source)).collect()}
    for key, v in expected_current.items():
        row = current.get(key)
        if v["deleted"]:
            # a marker (payload null), or no row when the key was never live in current
            assert row is None or (row["_deleted"] and all(row[c] is None for c in VALUE_COLUMNS)), key
        else:
            assert row is not None and not row["_deleted"], key
            assert (int(row["_sequence"]), row["_op"], {c: row[c] for c in VALUE_COLUMNS}, row["_source_ts"]) == (
                v["seq"], v["op"], v["values"], _ts(v["ts"])), key
    assert set(current) <= set(expected_current)
    live = {r["id"]: r.asDict() for r in spark.table(live_view(pipeline, source)).collect()}
    assert live == scenario.truth
    bad_hash = spark.table(silver_current_table(pipeline, source)).filter(~F.col("_row_hash").eqNullSafe(row_hash(source)))
    assert bad_hash.count() == 0


# --------------------------------------------------------------------------- the properties


@pytest.mark.long
@settings(settings.get_profile("silver"))
@given(scenario=scenarios())
def test_any_arrival_order_converges_to_the_reference(spark, shop_pipeline, scenario: Scenario) -> None:
    """Batches straight through `apply_batch` (what foreachBatch calls), one batch id each."""
    pipeline, source = _variant(spark, shop_pipeline)
    stream = StreamState()  # what the source's stream keeps between batches
    try:
        for batch_id, batch in enumerate(scenario.batches):
            if batch:
                apply_batch(bronze_frame(spark, source, batch, first_offset=batch_id * 1000), batch_id, pipeline, source, "prop", stream)
        assert_silver_matches_reference(spark, pipeline, source, scenario)
    finally:
        _drop(spark, pipeline)


@pytest.mark.slow
@settings(settings.get_profile("silver-slow"))
@given(scenario=scenarios(max_steps=16, max_batches=4))
def test_streaming_any_arrival_order_converges_to_the_reference(spark, shop_pipeline, tmp_path_factory, scenario: Scenario) -> None:
    """The same property through the streaming runner: append each batch to bronze, drain it."""
    pipeline, source = _variant(spark, shop_pipeline)
    lake = tmp_path_factory.mktemp("silver-prop")
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {pipeline.tables.bronze_schema}")
    DeltaTable.createIfNotExists(spark).tableName(bronze_table(pipeline, source)).addColumns(bronze_schema(source)).execute()
    try:
        for i, batch in enumerate(scenario.batches):
            if batch:
                bronze_frame(spark, source, batch, first_offset=i * 1000).write.format("delta").mode("append").saveAsTable(
                    bronze_table(pipeline, source))
                run_silver(spark, pipeline, Path(lake), sources=["products"])
        assert_silver_matches_reference(spark, pipeline, source, scenario)
    finally:
        _drop(spark, pipeline)


def test_reference_model_states_the_rules() -> None:
    """The reference itself, on a hand-written history (no Spark)."""
    def u(op, lsn, title=None, key=1, toast=False):
        after = {"id": key, "sku": "s", "title": title, "price": Decimal("1.00"), "description": None if toast else f"d{lsn}"}
        return BronzeChange(op, key={"id": key}, after=after if op not in ("d", "t") else None,
                            sequence=postgres_sequence(lsn, op), ts_ms=_at_ms(lsn), unavailable=("description",) if toast else ())

    events = [u("c", 1, "a"), u("u", 3, "b", toast=True), BronzeChange("t", sequence=postgres_sequence(5, "t"), ts_ms=_at_ms(5)),
              u("c", 7, "c"), u("c", 1, "a")]
    current, history = reference_model(events)
    assert [(v["op"], v["values"]["description"], v["valid_to_seq"]) for v in history[1]] == [
        ("c", "d1", 31), ("u", "d1", 51), ("t", None, 71), ("c", "d7", None)
    ]
    assert current[1]["values"]["title"] == "c"
