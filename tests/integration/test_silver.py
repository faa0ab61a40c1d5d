"""Versioned silver tables, as a specification: one test per rule of lakehouse.silver.

Bronze input is built directly in the `bronze_schema(source)` layout (testkit.bench.silver's
builder), either appended to a bronze Delta table and streamed (`run_silver`), or handed to
`apply_batch` as one micro-batch with an explicit batch id. Real Delta tables throughout; every
test works in its own bronze/silver schemas.

Times: source time is `2026-03-01 + lsn seconds`; sequences follow the postgres rule
(`lsn * 10`, +1 unless a delete), as bronze computes them.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline, Source
from lakehouse.errors import CdcEnrichError
from lakehouse.ordering import postgres_sequence
from lakehouse.silver import (
    SilverStats,
    StreamState,
    apply_batch,
    as_of,
    build_timeline,
    changes_from_bronze,
    compact_history,
    dedupe_changes,
    ensure_silver_tables,
    history_as_of,
    keys_in,
    late_changes,
    live_view,
    row_hash,
    run_silver,
    silver_checkpoint,
    truncates_table,
)
from lakehouse.silver.layout import (
    TOAST_RECORDED_PROPERTY,
    TRUNCATES_RECORDED_PROPERTY,
    HistoryFacts,
    history_facts,
    toast_table,
)
from lakehouse.tables import (
    bronze_schema,
    bronze_table,
    late_changes_table,
    silver_current_schema,
    silver_current_table,
    silver_history_schema,
    silver_history_table,
    silver_store_table,
)
from testkit.bench.silver import BronzeChange, bronze_frame

BASE = datetime(2026, 3, 1)
BASE_MS = 1_772_323_200_000  # BASE as epoch milliseconds (UTC)
STAMPS = ("_updated_at", "_recorded_at")  # silver's write stamps, one per kind of row


# --------------------------------------------------------------------------- helpers


def at(lsn: float) -> datetime:
    """The source time of an event at `lsn`."""
    return BASE + timedelta(seconds=lsn)


def seq(lsn: int, op: str = "u") -> int:
    return int(postgres_sequence(lsn, op))


def product(i: int, title: str, description: str = "text", price: str = "1.50") -> dict[str, Any]:
    return {"id": i, "sku": f"sku-{i}", "title": title, "price": Decimal(price), "description": description}


def ev(op: str, lsn: int, row: dict[str, Any] | None = None, key: dict[str, Any] | None = None,
       unavailable: tuple[str, ...] = (), ts_lsn: float | None = None, old_key: dict[str, Any] | None = None) -> BronzeChange:
    """A bronze change at `lsn` (sequence from the postgres rule, source time from lsn)."""
    if op == "tombstone":
        return BronzeChange("tombstone", key=key)
    ts = BASE_MS + int((ts_lsn if ts_lsn is not None else lsn) * 1000)
    return BronzeChange(op, key=key, after=row if op not in ("d", "t") else None, sequence=seq(lsn, op), ts_ms=ts,
                        unavailable=unavailable, old_key=old_key)


def key_move(lsn: int, old_id: int, row: dict[str, Any], unavailable: tuple[str, ...] = ("description",)) -> list[BronzeChange]:
    """`UPDATE .. SET id = ..` as Debezium sends it: delete + tombstone of the old key, then the
    new key's create at the same LSN with the placeholder and the `__debezium.oldkey` header."""
    old = {"id": old_id}
    return [ev("d", lsn, key=old), ev("tombstone", lsn, key=old),
            ev("c", lsn, {**row, "description": None}, unavailable=unavailable, old_key=old)]


@dataclasses.dataclass
class Env:
    """One test's pipeline variant (own schemas), its source, and ways to feed and read it."""

    spark: Any
    pipeline: Pipeline
    source: Source
    lake: Path
    offset: int = 0
    app_id: str = "test-app"
    bronze_made: bool = False
    # what the source's stream keeps between batches (its truncates, whether TOAST placeholders
    # were recorded), as `run_silver` keeps it: `apply` is the stream's foreachBatch
    state: StreamState = dataclasses.field(default_factory=StreamState)

    # ---- feeding
    def frame(self, changes: list[BronzeChange]):
        df = bronze_frame(self.spark, self.source, changes, first_offset=self.offset)
        self.offset += len(changes)
        return df

    def apply(self, batch_id: int, *changes: BronzeChange) -> SilverStats:
        """One micro-batch through `apply_batch` (what foreachBatch calls)."""
        return apply_batch(self.frame(list(changes)), batch_id, self.pipeline, self.source, self.app_id, self.state)

    def bronze(self) -> str:
        """The bronze table, created on first use: most specs hand batches to `apply` and never read it."""
        name = bronze_table(self.pipeline, self.source)
        if not self.bronze_made:
            self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {self.pipeline.tables.bronze_schema}")
            DeltaTable.createIfNotExists(self.spark).tableName(name).addColumns(bronze_schema(self.source)).execute()
            self.bronze_made = True
        return name

    def append(self, *changes: BronzeChange) -> None:
        """Append to the bronze table (for the streaming runner)."""
        self.frame(list(changes)).write.format("delta").mode("append").saveAsTable(self.bronze())

    def run(self):
        self.bronze()
        self.state = StreamState()  # another stream writes the tables: `apply` reads them afresh next
        return run_silver(self.spark, self.pipeline, self.lake, sources=[self.source.name])

    # ---- reading
    @property
    def current_name(self) -> str:
        return silver_current_table(self.pipeline, self.source)

    @property
    def history_name(self) -> str:
        return silver_history_table(self.pipeline, self.source)

    def current(self) -> dict[Any, dict[str, Any]]:
        return {r["id"]: r.asDict() for r in self.spark.table(self.current_name).collect()}

    def live(self) -> dict[Any, dict[str, Any]]:
        return {r["id"]: r.asDict() for r in self.spark.table(live_view(self.pipeline, self.source)).collect()}

    def history(self, key: Any = None) -> list[dict[str, Any]]:
        df = self.spark.table(self.history_name)
        if key is not None:
            df = df.filter(F.col("id") == key)
        return [r.asDict() for r in df.orderBy("id", "_sequence").collect()]

    @property
    def store_name(self) -> str:
        return silver_store_table(self.pipeline, self.source)

    def version(self, table: str | None = None) -> int:
        """The latest Delta version of `table` (default: the source's store)."""
        return DeltaTable.forName(self.spark, table or self.store_name).history(1).collect()[0]["version"]

    def cdf(self, after_version: int) -> list[dict[str, Any]]:
        """Change feed rows of current rows (the store's `current` kind) committed after `after_version`."""
        if self.version() <= after_version:
            return []
        df = self.spark.read.format("delta").option("readChangeFeed", "true").option(
            "startingVersion", after_version + 1).table(self.store_name).where("_kind = 'current'")
        return [r.asDict() for r in df.select(*silver_current_schema(self.source).fieldNames(), "_change_type").collect()]


@pytest.fixture
def make_env(spark, shop_pipeline, tmp_path):
    """Build an Env for a source with its own bronze and silver schemas, silver's tables created."""

    def build(source_name: str = "products", **options: Any) -> Env:
        tag = uuid.uuid4().hex[:8]
        pipeline = dataclasses.replace(
            shop_pipeline,
            tables=dataclasses.replace(shop_pipeline.tables, catalog=None, bronze_schema=f"t{tag}_bronze", silver_schema=f"t{tag}_silver"),
        ).with_options(**options)
        source = pipeline.source(source_name)
        ensure_silver_tables(spark, pipeline, source)  # the bronze table: `Env.bronze`
        return Env(spark, pipeline, source, tmp_path / tag)

    return build


def versions(rows: list[dict[str, Any]]) -> list[tuple]:
    """History rows as (sequence, op, deleted, title, valid_from, valid_to, valid_to_sequence)."""
    return [
        (int(r["_sequence"]), r["_op"], r["_deleted"], r["title"], r["_valid_from"], r["_valid_to"],
         int(r["_valid_to_sequence"]) if r["_valid_to_sequence"] is not None else None)
        for r in rows
    ]


# --------------------------------------------------------------------------- 1. current + history


def test_current_keeps_latest_per_key_and_history_every_version(make_env):
    env = make_env()
    stats = env.apply(0, ev("c", 1, product(1, "one")), ev("u", 2, product(1, "one v2")), ev("c", 3, product(2, "two")))
    assert (stats.changes_read, stats.current_upserted, stats.history_written) == (3, 2, 3)
    stats = env.apply(1, ev("d", 4, key={"id": 2}), ev("tombstone", 4, key={"id": 2}))
    assert (stats.changes_read, stats.tombstones, stats.current_upserted, stats.history_written) == (2, 1, 1, 2)

    current = env.current()
    assert current[1]["title"] == "one v2" and current[1]["_sequence"] == seq(2) and not current[1]["_deleted"]
    assert current[1]["_op"] == "u" and current[1]["_source_ts"] == at(2)
    # the deleted key stays as a marker holding the delete's sequence, payload null
    assert current[2]["_deleted"] and current[2]["_sequence"] == seq(4, "d") and current[2]["_op"] == "d"
    assert all(current[2][c] is None for c in env.source.value_columns) and current[2]["_row_hash"] is None
    assert set(env.live()) == {1}
    assert set(env.live()[1]) == set(env.source.column_names)

    assert versions(env.history(1)) == [
        (seq(1), "c", False, "one", at(1), at(2), seq(2)),
        (seq(2), "u", False, "one v2", at(2), None, None),
    ]
    assert versions(env.history(2)) == [
        (seq(3), "c", False, "two", at(3), at(4), seq(4, "d")),
        (seq(4, "d"), "d", True, None, at(4), None, None),
    ]
    # the row hash is the hash of the row's columns
    checked = env.spark.table(env.current_name).filter(~F.col("_row_hash").eqNullSafe(row_hash(env.source)))
    assert checked.count() == 0
    # the views over the store show the contract's columns and types; a write stamp is NOT NULL
    # within its own kind of row only, so the view shows it nullable
    layout = lambda schema: [(f.name, f.dataType, f.nullable or f.name in STAMPS) for f in schema.fields]  # noqa: E731 - comments aside
    assert layout(env.spark.table(env.current_name).schema) == layout(silver_current_schema(env.source))
    assert layout(env.spark.table(env.history_name).schema) == layout(silver_history_schema(env.source))
    store = env.spark.table(silver_store_table(env.pipeline, env.source))
    assert store.filter("_updated_at IS NULL AND _kind = 'current' OR _recorded_at IS NULL AND _kind = 'history'").count() == 0


def test_a_key_deleted_and_recreated_has_both_lives_in_history(make_env):
    env = make_env()
    env.apply(0, ev("c", 1, product(1, "first")), ev("d", 2, key={"id": 1}))
    env.apply(1, ev("c", 3, product(1, "second")))
    assert env.current()[1]["title"] == "second" and not env.current()[1]["_deleted"]
    assert versions(env.history(1)) == [
        (seq(1), "c", False, "first", at(1), at(2), seq(2, "d")),
        (seq(2, "d"), "d", True, None, at(2), at(3), seq(3)),
        (seq(3), "c", False, "second", at(3), None, None),
    ]


# --------------------------------------------------------------------------- 2. ordering by sequence


def test_changes_to_one_key_in_one_batch_are_ordered_by_sequence_not_arrival(make_env):
    env = make_env()
    second = ev("u", 2, product(1, "second"))
    stats = env.apply(0, ev("u", 3, product(1, "third")), ev("c", 1, product(1, "first")), second, second)  # one delivered twice
    assert stats.duplicates == 1 and stats.history_written == 3
    assert env.current()[1]["title"] == "third"
    assert [v[0] for v in versions(env.history(1))] == [seq(1), seq(2), seq(3)]
    assert versions(env.history(1))[0][5] == at(2)


# --------------------------------------------------------------------------- 3. out of order, duplicates


def test_out_of_order_change_goes_into_history_between_its_neighbours_only(make_env):
    env = make_env()
    env.apply(0, ev("c", 10, product(1, "v10")), ev("u", 30, product(1, "v30")))
    current_version = env.version()
    before = env.current()[1]

    stats = env.apply(1, ev("u", 20, product(1, "v20")))

    assert stats.out_of_order == 1 and stats.current_upserted == 0 and stats.history_written == 2  # new + neighbour
    assert env.cdf(current_version) == []  # current untouched: nothing downstream (history's versions were written)
    assert env.current()[1] == before
    assert versions(env.history(1)) == [
        (seq(10), "c", False, "v10", at(10), at(20), seq(20)),
        (seq(20), "u", False, "v20", at(20), at(30), seq(30)),
        (seq(30), "u", False, "v30", at(30), None, None),
    ]


@pytest.mark.slow  # the default suite: test_the_same_batch_id_twice_writes_once, the snapshot replay test and the property test's duplicated deliveries
def test_duplicate_changes_nothing_anywhere(make_env):
    env = make_env()
    batch = [ev("c", 1, product(1, "one")), ev("u", 2, product(1, "two")), ev("d", 3, key={"id": 1})]
    env.apply(0, *batch)
    versions_before = env.version()
    current, history = env.current(), env.history()

    stats = env.apply(1, *batch, batch[1])  # re-delivered (new offsets, same changes), one twice

    assert stats.duplicates == 4 and stats.current_upserted == 0 and stats.history_written == 0
    assert env.version() == versions_before  # no commit at all
    assert env.current() == current and env.history() == history


# --------------------------------------------------------------------------- 4. deletes and truncates


@pytest.mark.slow  # the default suite: test_a_delete_of_an_unseen_key_blocks_its_older_insert and the property test's arrival orders
def test_an_update_older_than_a_delete_never_resurrects_the_row(make_env):
    env = make_env()
    env.apply(0, ev("c", 1, product(1, "one")))
    env.apply(1, ev("d", 30, key={"id": 1}))
    version = env.version()
    env.apply(2, ev("u", 20, product(1, "late update")), ev("u", 2, product(1, "very late")))
    assert env.current()[1]["_deleted"] and env.current()[1]["_sequence"] == seq(30, "d") and env.live() == {}
    assert env.cdf(version) == []
    assert [(v[0], v[3]) for v in versions(env.history(1))] == [
        (seq(1), "one"), (seq(2), "very late"), (seq(20), "late update"), (seq(30, "d"), None)
    ]


def test_a_delete_of_an_unseen_key_blocks_its_older_insert(make_env):
    env = make_env()
    start = env.version()
    env.apply(0, ev("d", 30, key={"id": 7}))
    env.apply(1, ev("c", 10, product(7, "older insert")))
    # never live: no current row, no change-feed row; history holds both and orders them
    assert 7 not in env.current() and env.live() == {} and env.cdf(start) == []
    assert [v[0] for v in versions(env.history(7))] == [seq(10), seq(30, "d")]


def test_a_key_created_and_deleted_within_one_batch_never_reaches_current(make_env):
    env = make_env()
    start = env.version()
    env.apply(0, ev("c", 1, product(1, "brief")), ev("d", 2, key={"id": 1}), ev("tombstone", 2, key={"id": 1}))
    assert env.current() == {} and env.cdf(start) == []
    assert [v[1] for v in versions(env.history(1))] == ["c", "d"]


@pytest.mark.slow  # the default suite: test_a_late_delete_before_a_truncate_removes_the_truncates_delete_version and the property test's truncates
def test_truncate_deletes_older_rows_and_keeps_older_late_changes_out_of_current(make_env):
    env = make_env()
    env.apply(0, ev("c", 1, product(1, "one")), ev("c", 2, product(2, "two")))
    env.apply(1, ev("d", 3, key={"id": 2}))
    stats = env.apply(2, ev("t", 10), ev("c", 12, product(3, "after truncate")))
    assert stats.truncates == 1
    current = env.current()
    assert current[1]["_deleted"] and current[1]["_sequence"] == seq(10, "t") and current[1]["_op"] == "t"
    assert current[2]["_sequence"] == seq(3, "d")  # already a marker: untouched
    assert set(env.live()) == {3}
    assert versions(env.history(1))[-1] == (seq(10, "t"), "t", True, None, at(10), None, None)
    assert len(env.history(2)) == 2  # no delete version for a key already deleted
    assert env.spark.table(truncates_table(env.pipeline)).count() == 1

    # late: a change older than the truncate for a key current never had, and one for key 1
    version = env.version()
    stats = env.apply(3, ev("c", 5, product(4, "before truncate")), ev("u", 6, product(1, "one v6")))
    assert stats.out_of_order == 2 and stats.current_upserted == 0
    assert env.cdf(version) == [] and 4 not in env.current() and set(env.live()) == {3}
    assert versions(env.history(4)) == [
        (seq(5), "c", False, "before truncate", at(5), at(10), seq(10, "t")),
        (seq(10, "t"), "t", True, None, at(10), None, None),
    ]
    assert [v[0] for v in versions(env.history(1))] == [seq(1), seq(6), seq(10, "t")]

    # a change newer than the truncate is applied normally
    env.apply(4, ev("c", 15, product(4, "after")))
    assert env.live()[4]["title"] == "after"


def test_a_late_delete_before_a_truncate_removes_the_truncates_delete_version(make_env):
    env = make_env()
    env.apply(0, ev("c", 1, product(1, "one")))
    env.apply(1, ev("t", 10))
    assert [v[1] for v in versions(env.history(1))] == ["c", "t"]
    version = env.version()
    env.apply(2, ev("d", 5, key={"id": 1}))  # the key was already gone when the truncate ran
    assert versions(env.history(1)) == [
        (seq(1), "c", False, "one", at(1), at(5), seq(5, "d")),
        (seq(5, "d"), "d", True, None, at(5), None, None),
    ]
    assert env.current()[1]["_deleted"] and env.cdf(version) == []  # a marker is not rewritten by a marker


# --------------------------------------------------------------------------- 6. every CDC case


def test_primary_key_change_is_a_delete_of_the_old_key_and_an_insert_of_the_new(make_env):
    env = make_env()
    env.apply(0, ev("c", 1, product(1, "moving")))
    # Debezium: delete (old key) + tombstone + create (new key), one LSN: the delete sorts first
    env.apply(1, ev("d", 5, key={"id": 1}), ev("tombstone", 5, key={"id": 1}), ev("c", 5, product(9, "moving")))
    assert set(env.live()) == {9} and env.current()[1]["_deleted"]
    assert seq(5, "d") < seq(5, "c")


def test_snapshot_replay_older_is_out_of_order_equal_is_a_duplicate(make_env):
    env = make_env()
    env.apply(0, ev("r", 1, product(1, "snap")), ev("r", 1, product(2, "snap")))  # one snapshot LSN
    env.apply(1, ev("u", 5, product(1, "updated")))
    stats = env.apply(2, ev("r", 1, product(1, "snap")), ev("r", 1, product(2, "snap")))
    assert stats.duplicates == 2 and stats.history_written == 0
    stats = env.apply(3, ev("r", 3, product(1, "older snapshot")))
    assert stats.out_of_order == 1 and env.current()[1]["title"] == "updated"
    assert env.current()[2]["_op"] == "r"


def snapshot(lsn: int, *rows: dict[str, Any]) -> list[BronzeChange]:
    """One table's snapshot as Debezium sends it: `r` records at one LSN, the last one marked."""
    return [
        dataclasses.replace(ev("r", lsn, row), snapshot="last_in_data_collection" if i == len(rows) - 1 else "true")
        for i, row in enumerate(rows)
    ]


def test_a_new_snapshot_deletes_the_keys_it_no_longer_holds_and_an_old_one_replayed_deletes_nothing(make_env):
    """A connector restarted from a snapshot offset re-snapshots: rows deleted while it was down
    have no delete event, only their absence from the new snapshot. A change older than the
    snapshot in the same batch counts; one newer than it stays."""
    env = make_env()
    env.apply(0, *snapshot(1, product(1, "a"), product(2, "b"), product(3, "c")))
    env.apply(1, ev("u", 5, product(1, "a2")))
    # down: key 2 deleted at lsn 7 and key 4 inserted at lsn 8, never sent; key 6 inserted at 9
    # and deleted at 9.5 likewise; then a new snapshot at lsn 10, key 7 created after it
    stats = env.apply(2, ev("c", 9, product(5, "sent, then deleted unseen")),
                      *snapshot(10, product(1, "a2"), product(3, "c"), product(4, "d")), ev("c", 12, product(7, "new")))
    assert stats.snapshot_deletes == 2
    assert set(env.live()) == {1, 3, 4, 7}
    assert env.current()[2]["_deleted"] and int(env.current()[2]["_sequence"]) == seq(10, "d")
    assert versions(env.history(2))[-1][:3] == (seq(10, "d"), "d", True)
    # the initial snapshot sent again: every key alive just before it is in it
    stats = env.apply(3, *snapshot(1, product(1, "a"), product(2, "b"), product(3, "c")))
    assert stats.snapshot_deletes == 0 and stats.out_of_order + stats.duplicates == 3
    assert set(env.live()) == {1, 3, 4, 7}
    # a snapshot spanning batches: the stream wrote its first record to bronze in an earlier
    # batch; it is reconciled when its last record arrives
    first, *rest = snapshot(20, product(1, "a2"), product(4, "d"))
    env.append(first)
    assert env.apply(4, first).snapshot_deletes == 0
    assert env.apply(5, *rest).snapshot_deletes == 2  # keys 3 and 7
    assert set(env.live()) == {1, 4}


def test_a_first_snapshot_into_an_empty_silver_still_deletes_a_key_its_batch_created_before_it(make_env):
    """With no silver row yet, only the batch's own changes before a snapshot can be alive at it:
    a key created there and absent from the snapshot is deleted, as on a table with rows (the
    initial load, with nothing before its snapshot, reads no bronze to reconcile)."""
    env = make_env()
    stats = env.apply(0, ev("c", 5, product(9, "created, then deleted unseen")), *snapshot(10, product(1, "a"), product(2, "b")))
    assert stats.snapshot_deletes == 1
    assert set(env.live()) == {1, 2}
    assert versions(env.history(9))[-1][:3] == (seq(10, "d"), "d", True)


@pytest.mark.parametrize("made", ["with the facts", "before the facts"])
def test_a_stream_started_later_learns_the_truncates_and_placeholders_recorded_before_it(make_env, made):
    """What a stream keeps between batches (the source's truncates; whether TOAST placeholders were
    recorded) a new stream learns from the history table's facts, reading the tables only when
    they may hold something: a new source's history says neither was recorded, and a stream says
    so before it writes the first of either. A table made before the facts reads both tables."""
    env = make_env()
    facts = lambda: history_facts(env.spark, env.pipeline, env.source)  # noqa: E731
    if made == "before the facts":
        env.spark.sql(f"ALTER TABLE {env.store_name} UNSET TBLPROPERTIES "
                      f"('{TRUNCATES_RECORDED_PROPERTY}', '{TOAST_RECORDED_PROPERTY}')")
        assert facts() == HistoryFacts(None, truncates=None, toast=None)
    else:
        assert facts() == HistoryFacts(None, truncates=False, toast=False)
    env.apply(0, ev("c", 1, product(1, "one", description="long text")),
              ev("u", 3, product(1, "one v3", description=None), unavailable=("description",)),
              ev("c", 4, product(2, "two")), ev("t", 10))
    assert facts() == HistoryFacts(None, truncates=None, toast=None)  # recorded: a new stream reads them

    env.state = StreamState()  # a stream started later, knowing nothing
    env.apply(1, ev("u", 2, product(1, "one v2", description="edited text")), ev("u", 5, product(2, "two v5")))
    # v3's placeholder is resolved again through the late v2 (read from the TOAST table) ...
    assert [r["description"] for r in env.history(1)] == ["long text", "edited text", "edited text", None]
    # ... and the late update of key 2 lands behind the truncate (read from the truncates table)
    assert [v[0] for v in versions(env.history(2))] == [seq(4), seq(5), seq(10, "t")]
    assert env.current() == {}  # both keys created and truncated within batch 0: never live in current

    if made == "with the facts":  # the store made again beside tables that kept the source's rows: not known
        env.spark.sql(f"DROP TABLE {env.store_name}")
        ensure_silver_tables(env.spark, env.pipeline, env.source)
        assert facts() == HistoryFacts(None, truncates=None, toast=None)


@pytest.mark.slow  # the default suite: the TOASTed key changes, test_compaction_keeps_a_resolved_toast_value_without_its_predecessor and the property test's placeholders
def test_toast_placeholder_keeps_the_previous_versions_value_even_when_that_arrives_late(make_env):
    env = make_env()
    env.apply(
        0,
        ev("c", 1, product(1, "one", description="long text")),
        ev("u", 3, product(1, "one v3", description=None), unavailable=("description",)),
    )
    assert env.current()[1]["description"] == "long text" and env.current()[1]["title"] == "one v3"
    assert [r["description"] for r in env.history(1)] == ["long text", "long text"]

    # a late version between them changed the text: v3 (unchanged since v2) now carries it
    version = env.version()
    env.apply(1, ev("u", 2, product(1, "one v2", description="edited text")))
    assert [r["description"] for r in env.history(1)] == ["long text", "edited text", "edited text"]
    assert env.current()[1]["description"] == "edited text" and env.current()[1]["_sequence"] == seq(3)
    # the one out-of-order case that reaches the change feed: same version, corrected value
    assert sorted(r["_change_type"] for r in env.cdf(version)) == ["update_postimage", "update_preimage"]
    # and chains: a second placeholder version resolves through the first
    env.apply(2, ev("u", 4, product(1, "one v4", description=None), unavailable=("description",)))
    assert env.current()[1]["description"] == "edited text"


@pytest.mark.parametrize("split", [
    pytest.param("one batch", marks=pytest.mark.slow),  # the default suite's chain case holds it (a move within one batch)
    pytest.param("old key stored earlier", marks=pytest.mark.slow),  # the default suite: the chain case and the property test's key changes
    "chain of moves in one batch",
])
def test_a_primary_key_change_carries_its_toasted_value_from_the_old_key(make_env, split):
    """Debezium's create for the new key has the placeholder; the value is the old key's."""
    env = make_env()
    born = [ev("c", 1, product(1, "one", description="long text")),
            ev("u", 2, product(1, "one v2", description=None), unavailable=("description",))]
    moved = key_move(5, 1, product(7, "one v2"))
    if split == "one batch":
        env.apply(0, *born, *moved)
    elif split == "old key stored earlier":
        env.apply(0, *born)
        env.apply(1, *moved)
    else:
        # 1 -> 7, an update of 7 that leaves the text alone, then 7 -> 9: all in one batch
        touched = ev("u", 6, product(7, "seven", description=None), unavailable=("description",))
        env.apply(0, *born, *moved, touched, *key_move(7, 7, product(9, "seven")))
    final = 9 if split.startswith("chain") else 7
    assert set(env.live()) == {final} and env.live()[final]["description"] == "long text"
    assert [r["description"] for r in env.history(final)] == ["long text"]
    # the value is now silver's own: a later placeholder update of the new key keeps it
    env.apply(5, ev("u", 8, product(final, "later", description=None), unavailable=("description",)))
    assert env.live()[final]["description"] == "long text" and env.live()[final]["title"] == "later"


def test_a_key_change_a_new_snapshot_already_holds_takes_the_snapshots_value(make_env):
    """A snapshot taken while the database changes reads past its LSN; the changes after that
    LSN are streamed again. Its row for a key that a key change created already has the moved
    row's values, newer than the old key's last version silver holds."""
    env = make_env()
    env.apply(0, ev("c", 1, product(1, "one", description="old text")))
    # down: key 1's text updated at lsn 3, then 1 -> 7 at lsn 12; the new snapshot says lsn 10
    # but read key 7 after the move; streaming from lsn 10 sends the move again
    env.apply(1, *snapshot(10, product(7, "one", description="new text")), *key_move(12, 1, product(7, "one")))
    assert set(env.live()) == {7} and env.live()[7]["description"] == "new text"


def test_a_first_load_whose_snapshot_a_key_change_follows_moves_the_snapshots_value(make_env):
    """A source's first batch into an empty silver (its snapshot, then `UPDATE .. SET id = ..` with
    the placeholder): the new key takes the value the snapshot gave the old one."""
    env = make_env()
    stats = env.apply(0, *snapshot(10, product(1, "one", description="snap text")), *key_move(12, 1, product(7, "one")))
    assert stats.snapshot_deletes == 0
    assert set(env.live()) == {7} and env.live()[7]["description"] == "snap text"


# --------------------------------------------------------------------------- 7. change data feed


def test_change_feed_carries_only_real_changes_and_a_delete_is_an_update_to_deleted(make_env):
    env = make_env()
    start = env.version()
    env.apply(0, ev("c", 1, product(1, "one")), ev("c", 2, product(2, "two")))
    env.apply(1, ev("u", 3, product(1, "one v3")), ev("d", 4, key={"id": 2}))
    feed = env.cdf(start)
    by_type = sorted((r["_change_type"], r["id"], r["_deleted"], r["title"]) for r in feed)
    assert by_type == [
        ("insert", 1, False, "one"),
        ("insert", 2, False, "two"),
        ("update_postimage", 1, False, "one v3"),
        ("update_postimage", 2, True, None),
        ("update_preimage", 1, False, "one"),
        ("update_preimage", 2, False, "two"),
    ]
    version = env.version()
    env.apply(2, ev("u", 3, product(1, "one v3")), ev("u", 2, product(1, "old")), ev("c", 1, product(2, "older")))
    assert env.cdf(version) == []  # duplicate and out-of-order: nothing
    props = env.spark.sql(f"SHOW TBLPROPERTIES {env.store_name}").collect()
    assert {r["key"]: r["value"] for r in props}["delta.enableChangeDataFeed"] == "true"


# --------------------------------------------------------------------------- 8. idempotent batches


def test_streaming_run_resumes_and_a_replayed_batch_applies_nothing_twice(make_env):
    env = make_env()
    env.append(ev("c", 1, product(1, "one")), ev("c", 2, product(2, "two")))
    first = env.run()
    assert first.sources["products"].current_upserted == 2
    # one of them 40 days behind key 1's current version: late (grace 30 days), recorded
    env.append(ev("u", 3, product(1, "one v3")), ev("d", 4, key={"id": 2}), ev("u", 0, product(1, "late"), ts_lsn=-40 * 86400))
    second = env.run()
    assert second.sources["products"].batches == 1 and second.sources["products"].changes_read == 3
    again = env.run()  # same checkpoint, nothing new
    assert again.sources["products"].batches == 0
    state = (env.current(), env.history(), env.version())
    late_rows = env.spark.table(late_changes_table(env.pipeline)).count()
    assert late_rows == 1 and second.sources["products"].late == 1

    # crash after the batch's writes but before the checkpoint commit: Spark replays that batch id
    checkpoint = silver_checkpoint(env.pipeline, env.source, env.lake)
    commits = sorted((checkpoint / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    (checkpoint / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    replay = env.run()
    assert replay.sources["products"].batches == 1
    assert (env.current(), env.history(), env.version()) == state
    assert env.spark.table(late_changes_table(env.pipeline)).count() == late_rows

    # every batch of every run is a row of the metrics table (lakehouse.metrics), the replay too
    from lakehouse.metrics import metrics_table

    stream = f"silver_{env.pipeline.tables.silver_schema}_products"
    rows = env.spark.table(metrics_table(env.pipeline)).where(F.col("stream") == stream).orderBy("at").collect()
    assert [(r.stage, r.batch_id, r.input_rows) for r in rows] == [("silver", 0, 2), ("silver", 1, 3), ("silver", 1, 3)]
    assert [r.rows_out for r in rows] == [2, second.sources["products"].current_upserted, replay.sources["products"].current_upserted]
    assert len({r.run_id for r in rows}) == 3 and rows[0].kafka_lag is None and rows[0].batch_ms > 0
    assert "addBatch" in rows[0].durations_ms and rows[0].pipeline == env.pipeline.name


def test_the_same_batch_id_twice_writes_once(make_env):
    env = make_env(late_grace_days=1)
    env.apply(0, ev("c", 100 * 86400, product(1, "now")))
    stats = env.apply(1, ev("u", 1, product(1, "100 days late")))
    assert stats.late == 1
    state = (env.version(), env.version(late_changes_table(env.pipeline)))
    env.apply(1, ev("u", 1, product(1, "100 days late")))
    # even different data under a batch id already written is skipped: the Delta txn guard
    # (history and late-change writes of batch 1 are recorded; a replay never differs, this
    # only shows the guard is what stops it)
    env.apply(1, ev("u", 2, product(1, "other, also late")))
    assert (env.version(), env.version(late_changes_table(env.pipeline))) == state
    assert env.spark.table(late_changes_table(env.pipeline)).count() == 1
    assert env.current()[1]["title"] == "now"


# --------------------------------------------------------------------------- 9. time travel


def test_time_travel_by_delta_version_and_timestamp_and_by_source_time(make_env):
    env = make_env()
    env.apply(0, ev("c", 10, product(1, "one")), ev("c", 10, product(2, "two")))
    # Delta's time travel reads the store (the views over it have no versions of their own)
    version = env.version()
    committed_at = DeltaTable.forName(env.spark, env.store_name).history(1).collect()[0]["timestamp"]
    env.apply(1, ev("u", 20, product(1, "one v20")), ev("d", 30, key={"id": 2}))

    old = env.spark.sql(
        f"SELECT id, title FROM {env.store_name} VERSION AS OF {version} WHERE _kind = 'current' ORDER BY id").collect()
    assert [tuple(r) for r in old] == [(1, "one"), (2, "two")]
    old_history = env.spark.sql(
        f"SELECT count(*) AS n FROM {env.store_name} VERSION AS OF {version} WHERE _kind = 'history'").first()["n"]
    assert old_history == 2
    by_ts = env.spark.sql(
        f"SELECT title FROM {env.store_name} TIMESTAMP AS OF '{committed_at.isoformat()}' WHERE _kind = 'current' AND id = 1").first()
    assert by_ts["title"] == "one"

    def titles(ts):
        return {r["id"]: r["title"] for r in as_of(env.spark, env.pipeline, "products", ts).collect()}

    assert titles(at(5)) == {}
    assert titles(at(10)) == {1: "one", 2: "two"}
    assert titles(at(25)) == {1: "one v20", 2: "two"}
    assert titles(at(30)) == {1: "one v20"}  # deleted at 30
    assert titles(at(25).isoformat(sep=" ")) == {1: "one v20", 2: "two"}


# --------------------------------------------------------------------------- 5. retention and late changes


def test_late_changes_are_applied_counted_and_recorded_and_compaction_keeps_current(make_env):
    env = make_env(late_grace_days=2)
    day = 86400
    env.apply(0, ev("c", 1 * day, product(1, "d1")), ev("u", 10 * day, product(1, "d10")), ev("c", 10 * day, product(2, "k2")))
    stats = env.apply(1, ev("u", 9 * day, product(1, "d9 (1 day late)")), ev("u", 5 * day, product(1, "d5 (5 days late)")))
    assert stats.out_of_order == 2 and stats.late == 1
    assert len(env.history(1)) == 4  # applied even when late
    late = late_changes(env.spark, env.pipeline, "products").collect()
    assert [(json.loads(r["key"]), int(r["sequence"]), r["reason"], r["late_by_ms"]) for r in late] == [
        ({"id": 1}, seq(5 * day), "late", 5 * day * 1000)
    ]
    assert late[0]["source_ts"] == at(5 * day) and late[0]["op"] == "u"

    # keep 3 days of history as of day 12.5: versions whose valid_to is before day 9.5 go
    removed = compact_history(env.spark, env.pipeline, "products", retention_days=3, now=at(12.5 * day))
    assert removed == 2
    assert [r["title"] for r in env.history(1)] == ["d9 (1 day late)", "d10"]
    assert [r["title"] for r in env.history(2)] == ["k2"]  # a current version is never dropped
    assert env.live()[1]["title"] == "d10"

    # a change older than what compacted history still holds is placed if possible and recorded
    stats = env.apply(2, ev("u", 2 * day, product(1, "d2")))
    assert stats.late == 1
    reasons = sorted(r["reason"] for r in late_changes(env.spark, env.pipeline, "products").collect())
    assert reasons == ["beyond_retention", "late"]
    assert env.live()[1]["title"] == "d10"


def test_compaction_keeps_a_resolved_toast_value_without_its_predecessor(make_env):
    env = make_env()
    toast = toast_table(env.pipeline, env.source)
    assert not env.spark.catalog.tableExists(toast)  # made by the source's first placeholder
    day = 86400
    env.apply(0, ev("c", 1 * day, product(1, "v1", description="long")),
              ev("u", 2 * day, product(1, "v2", description=None), unavailable=("description",)))
    assert [r["_unavailable"] for r in env.spark.table(toast).collect()] == [["description"]]
    compact_history(env.spark, env.pipeline, "products", retention_days=1, now=at(10 * day))
    assert [r["description"] for r in env.history(1)] == ["long"]
    env.apply(1, ev("u", 3 * day, product(1, "v3", description=None), unavailable=("description",)))
    assert [r["description"] for r in env.history(1)] == ["long", "long"]
    assert env.current()[1]["description"] == "long"


# --------------------------------------------------------------------------- composite keys, pure functions, job


def test_composite_primary_key(make_env):
    env = make_env("order_items")

    def item(order: int, line: int, qty: int) -> dict[str, Any]:
        return {"order_id": order, "line_no": line, "product_id": 5, "quantity": qty, "unit_price": Decimal("2.00")}

    env.apply(0, ev("c", 1, item(1, 1, 1)), ev("c", 1, item(1, 2, 2)), ev("u", 2, item(1, 1, 10)))
    env.apply(1, ev("d", 3, key={"order_id": 1, "line_no": 2}), ev("u", 1, item(1, 2, 99)))
    rows = {(r["order_id"], r["line_no"]): r for r in env.spark.table(env.current_name).collect()}
    assert rows[(1, 1)]["quantity"] == 10 and rows[(1, 2)]["_deleted"]
    assert env.spark.table(live_view(env.pipeline, env.source)).count() == 1


def test_pure_planning_functions_on_plain_dataframes(spark, shop_pipeline):
    """The planning steps are functions of DataFrames: no tables needed."""
    source = shop_pipeline.source("products")
    bronze = bronze_frame(spark, source, [
        ev("u", 2, product(1, "b", description=None), unavailable=("description", "nonexistent")),
        ev("c", 1, product(1, "a", description="kept")),
        ev("c", 1, product(1, "a", description="kept")),
        ev("tombstone", 0, key={"id": 1}),
        ev("t", 3),
    ])
    changes = changes_from_bronze(bronze, source)
    assert changes.count() == 3  # tombstone and truncate are not keyed changes
    assert sorted(tuple(r["_unavailable"]) for r in changes.collect()) == [(), (), ("description",)]
    deduped = dedupe_changes(changes, source)
    existing = spark.createDataFrame([], silver_history_schema(source)).withColumn(
        "_unavailable", F.array().cast("array<string>"))
    timeline = build_timeline(existing, deduped, [(Decimal(seq(3, "t")), at(3))], source).orderBy("_sequence").collect()
    assert [(r["_op"], r["description"], r["_valid_to"]) for r in timeline] == [
        ("c", "kept", at(2)), ("u", "kept", at(3)), ("t", None, None)
    ]
    history = spark.createDataFrame([(r["id"], r["title"], r["_sequence"], r["_deleted"], r["_valid_from"], r["_valid_to"])
                                     for r in timeline], "id bigint, title string, _sequence decimal(38,0), _deleted boolean, "
                                     "_valid_from timestamp, _valid_to timestamp")
    assert [r["title"] for r in history_as_of(history, at(2.5), source).collect()] == ["b"]
    assert history_as_of(history, at(3), source).count() == 0


def test_a_small_batchs_keys_are_listed_in_the_scan_filter_for_one_and_compound_keys(spark, shop_pipeline):
    """`keys_in`: the rows of the listed keys, whatever the key's arity; values are cast to the
    key's type (a Python int against a bigint, a tuple against a compound key)."""
    products, items = shop_pipeline.source("products"), shop_pipeline.source("order_items")
    one = spark.createDataFrame([(1,), (2,), (3,)], "id bigint")
    assert sorted(r["id"] for r in one.filter(keys_in([3, 1], products)).collect()) == [1, 3]
    assert one.filter(keys_in([9], products)).count() == 0
    two = spark.createDataFrame([(1, 1), (1, 2), (2, 1)], "order_id bigint, line_no int")
    assert sorted(tuple(r) for r in two.filter(keys_in([(1, 2), (2, 1), (2, 2)], items)).collect()) == [(1, 2), (2, 1)]


def test_job_entry_point_applies_the_named_source(make_env, tmp_path, shop_pipeline_path):
    import yaml

    from jobs.silver_apply import main

    env = make_env()
    env.append(ev("c", 1, product(1, "from the job")))
    raw = yaml.safe_load(shop_pipeline_path.read_text())
    raw["tables"]["bronze_schema"] = env.pipeline.tables.bronze_schema
    raw["tables"]["silver_schema"] = env.pipeline.tables.silver_schema
    path = tmp_path / "pipeline.yml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["--pipeline", str(path), "--lake", str(env.lake), "--source", "products"]) == 0
    assert env.live()[1]["title"] == "from the job"
    assert main(["--pipeline", str(path), "--lake", str(env.lake), "--source", "nope"]) == 2  # a configuration error: exit 2, as in every job


def test_a_column_added_upstream_is_added_to_silver(make_env):
    from lakehouse.declaration import Column

    env = make_env()
    env.apply(0, ev("c", 1, product(1, "before")))
    grown = dataclasses.replace(env.source, columns=env.source.columns + (Column("weight", "int"),))
    pipeline = dataclasses.replace(env.pipeline, sources={**env.pipeline.sources, "products": grown})
    ensure_silver_tables(env.spark, pipeline, grown)
    grown_env = dataclasses.replace(env, pipeline=pipeline, source=grown)
    grown_env.apply(1, ev("u", 2, product(1, "after") | {"weight": 7}), ev("c", 3, product(2, "new") | {"weight": 1}))
    assert {k: (v["title"], v["weight"]) for k, v in grown_env.live().items()} == {1: ("after", 7), 2: ("new", 1)}
    assert [r["weight"] for r in grown_env.history(1)] == [None, 7]


def test_upkeep_compacts_history_optimizes_and_vacuums_keeping_time_travel(make_env, spark, monkeypatch):
    """`cdc-enrich maintain` on one source's tables: history compacted by the declared retention,
    the micro-batches' small files compacted, VACUUM keeping options.time_travel_days (and the
    tables' own retention properties saying so); an older table version is still readable."""
    import lakehouse.deltasql
    from lakehouse.upkeep import maintain, pipeline_tables

    # the MERGEs write as into a table past the rewrite threshold (deletion vectors, new files
    # per batch), where files pile up; a small table's MERGE rewrites its touched file instead
    monkeypatch.setattr(lakehouse.deltasql, "REWRITE_BELOW_BYTES", -1)
    env = make_env(history_retention_days=3)
    env.bronze()  # upkeep walks every layer's tables
    tag = env.pipeline.tables.silver_schema.removesuffix("_silver")
    env.pipeline = dataclasses.replace(
        env.pipeline, tables=dataclasses.replace(env.pipeline.tables, gold_schema=f"{tag}_gold", quality_schema=f"{tag}_quality")
    )
    day = 86400
    for batch in range(4):  # four batches: several small files per table
        env.apply(batch, ev("u", (batch + 1) * day, product(1, f"v{batch}")), ev("c", (batch + 1) * day, product(10 + batch, "k")))
    store = silver_store_table(env.pipeline, env.source)  # history and current rows, partitioned by kind
    files_before = spark.sql(f"DESCRIBE DETAIL {store}").first()["numFiles"]

    report = maintain(spark, env.pipeline, now=at(6.5 * day))  # retention 3 days: versions that ended before day 3.5 go
    assert report.ok, report.render()
    tables = pipeline_tables(spark, env.pipeline)
    assert store in tables and silver_current_table(env.pipeline, env.source) not in tables  # a view
    for step in ("optimize", "vacuum"):
        assert sorted(s.table for s in report.steps if s.step == step) == tables
    by = {(s.step, s.table): s.detail for s in report.steps}
    assert by[("compact", store)] == "2 versions dropped, 3 days kept"  # v0 (ended day 2), v1 (day 3)
    assert [r["title"] for r in env.history(1)] == ["v2", "v3"]
    assert by[("optimize", store)] == f"{files_before} files -> 2" and files_before > 2  # one file per kind
    assert spark.sql(f"DESCRIBE DETAIL {store}").first()["numFiles"] == 2
    # nothing is older than 7 days yet: what the dry run lists are the change feed's directories
    # (`_change_data` and a partition directory per kind), which VACUUM removes only once empty
    assert by[("vacuum", store)] == "3 files and directories deleted, 168 hours kept"
    properties = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {store}").collect()}
    assert properties["delta.deletedFileRetentionDuration"] == "interval 7 days"
    assert spark.sql(f"SELECT count(*) FROM {store} VERSION AS OF 1").first()[0] > 0  # time travel still reaches back
    assert "upkeep:" in report.render() and "all done" in report.render()


def test_silver_tables_of_the_earlier_two_table_layout_are_refused_before_anything_is_written(spark, shop_pipeline):
    """A source's current rows under `silver.<source>` as a table of their own (the layout before
    the store) stops the stream's set-up with what to do, instead of hiding those rows behind a view."""
    tag = uuid.uuid4().hex[:8]
    pipeline = dataclasses.replace(shop_pipeline, tables=dataclasses.replace(
        shop_pipeline.tables, catalog=None, silver_schema=f"t{tag}_silver"))
    source = pipeline.source("products")
    spark.sql(f"CREATE SCHEMA {pipeline.tables.silver_schema}")
    spark.sql(f"CREATE TABLE {silver_current_table(pipeline, source)} (id BIGINT) USING DELTA")
    with pytest.raises(CdcEnrichError, match="earlier silver layout.*replay bronze"):
        ensure_silver_tables(spark, pipeline, source)
    assert not spark.catalog.tableExists(silver_store_table(pipeline, source))


def test_silver_of_the_earlier_layout_moves_into_the_store_in_place(make_env, spark, tmp_path):
    """`cdc-enrich migrate-silver`: a source's two tables (the layout before the store) move into
    its store in one commit, with the history table's recorded facts; the tables are kept under
    new names, the views show the same rows, the source's stream applies its next batch, and the
    checkpoints of the gold views that read the source are removed (their feeds were the tables)."""
    from lakehouse.paths import checkpoint_dir
    from lakehouse.silver.migrate import KEPT_SUFFIX, migrate_silver

    env = make_env(history_retention_days=3)
    env.apply(0, ev("c", 1, product(1, "one")), ev("c", 2, product(2, "two")))
    env.apply(1, ev("u", 3, product(1, "one v3")), ev("d", 4, key={"id": 2}))
    current, history = env.current(), env.history()
    # the earlier layout, made from those rows: two Delta tables under the views' names
    for view, kind in ((env.current_name, "current"), (env.history_name, "history")):
        columns = (silver_current_schema if kind == "current" else silver_history_schema)(env.source).fieldNames()
        spark.sql(f"DROP VIEW {view}")
        spark.sql(f"CREATE TABLE {view} USING DELTA AS SELECT {', '.join(columns)} FROM {env.store_name} WHERE _kind = '{kind}'")
    spark.sql(f"ALTER TABLE {env.history_name} SET TBLPROPERTIES ('{TRUNCATES_RECORDED_PROPERTY}' = 'false')")
    spark.sql(f"DROP TABLE {env.store_name}")
    with pytest.raises(CdcEnrichError, match="migrate-silver"):
        ensure_silver_tables(spark, env.pipeline, env.source)
    lake = tmp_path / "lake"
    reading = checkpoint_dir(lake, env.pipeline.name, "gold_order_items_enriched")  # joins products
    other = checkpoint_dir(lake, env.pipeline.name, "gold_orders_enriched")
    for folder in (reading, other):
        (folder / "offsets").mkdir(parents=True)

    done = migrate_silver(spark, env.pipeline, lake)

    assert done.moved == {"products": 2 + 4} and not done.checkpoints_to_remove, done.render()  # current and history rows
    assert done.checkpoints_removed == [str(reading)] and not reading.exists() and other.exists()
    assert spark.catalog.getTable(env.current_name).tableType == "VIEW"
    assert env.current() == current and env.history() == history
    assert spark.table(f"{env.history_name}{KEPT_SUFFIX}").count() == 4
    assert history_facts(spark, env.pipeline, env.source).truncates is False  # carried over
    assert env.apply(2, ev("u", 5, product(1, "one v5"))).current_upserted == 1
    assert env.current()[1]["title"] == "one v5" and len(env.history(1)) == 3
    assert "nothing moved" in migrate_silver(spark, env.pipeline, lake).render()  # done once


def test_silver_tables_carry_the_pipeline_files_descriptions_as_comments(make_env, spark):
    """Table and column comments for analysts, the service's own columns explained too; an edited
    description reaches the table the next time its stream opens it."""
    env = make_env("customers")
    current, history = silver_current_table(env.pipeline, env.source), silver_history_table(env.pipeline, env.source)
    assert spark.catalog.getTable(current).description.startswith("People who have an account in the shop. Silver current")
    assert "every version of each row" in spark.catalog.getTable(history).description
    columns = {c.name: c.description for c in spark.catalog.listColumns(current)}
    assert columns["segment"] == "Marketing segment: retail, business or vip"
    assert columns["_deleted"].startswith("true when the row is deleted") and columns["name"] in (None, "")
    assert {c.name: c.description for c in spark.catalog.listColumns(history)}["_valid_to"].startswith("source commit time of the next")

    edited = dataclasses.replace(env.source, columns=tuple(
        dataclasses.replace(c, description="Segment (edited)") if c.name == "segment" else c for c in env.source.columns
    ))
    ensure_silver_tables(spark, dataclasses.replace(env.pipeline, sources={**env.pipeline.sources, "customers": edited}), edited)
    assert {c.name: c.description for c in spark.catalog.listColumns(current)}["segment"] == "Segment (edited)"
