"""End to end against a real PostgreSQL and a real Debezium connector: the database is the truth.

A private PostgreSQL cluster (devstack.postgres), Debezium's PostgreSQL connector on a Kafka
Connect standalone worker (devstack.connect) writing to the session's Kafka broker, a DML
workload from two connections (testkit.pg_workload), then bronze -> silver -> gold drained with
availableNow, and gold/silver compared with the database itself (lakehouse.verify.postgres).

Also: real Debezium records compared, shape by shape, with what testkit.simulator produces.

Knobs: CDC_ENRICH_PG_E2E_TRANSACTIONS (default 2000) sets the workload size of the default run,
CDC_ENRICH_PG_E2E_SLOW_TRANSACTIONS (default 10000) that of the `slow` run (`make test-slow`);
CDC_ENRICH_PG_E2E_MID_DRAIN=1 adds a bronze -> silver -> gold round in the middle of the run.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import pytest

from devstack.procs import free_port
from lakehouse.declaration import Pipeline, parse_pipeline
from tests.conftest import KAFKA_GROUP
from tests.shop_views import current_state_only, five_tables

TRANSACTIONS = int(os.environ.get("CDC_ENRICH_PG_E2E_TRANSACTIONS", "300"))
RESNAPSHOT_TRANSACTIONS = int(os.environ.get("CDC_ENRICH_PG_E2E_RESNAPSHOT_TRANSACTIONS", "500"))
SLOW_TRANSACTIONS = int(os.environ.get("CDC_ENRICH_PG_E2E_SLOW_TRANSACTIONS", "10000"))
# One extra bronze -> silver -> gold round while the workload is half done (gold maintained
# incrementally over real data). Off by default: on 2 shared cores it costs as much as the final drain.
MID_RUN_DRAIN = os.environ.get("CDC_ENRICH_PG_E2E_MID_DRAIN", "0") == "1"
PLACEHOLDER = "__debezium_unavailable_value"

# one worker runs the module (`make test`: --dist loadgroup), so its PostgreSQL cluster starts once;
# the broker's group (tests/conftest.py), which its tests that read Kafka are in anyway
pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group(KAFKA_GROUP)]


# --------------------------------------------------------------------------- preconditions and fixtures


def _missing_prerequisite() -> str | None:
    """Why this module cannot run here (None: it can): PostgreSQL binaries, the Connect jars."""
    from devstack import postgres
    from lakehouse.errors import StackError
    from lakehouse.paths import jars

    try:
        postgres._bin_dir()
    except StackError as exc:
        return str(exc)
    if not any(j.name.startswith("debezium-connector-postgres") for j in jars("connect")):
        return "the Kafka Connect + Debezium jars are missing from .cache/jars/connect: run `make setup`"
    return None


@pytest.fixture(scope="module")
def pg_lake(lake: Path) -> Iterator[Path]:
    """A PostgreSQL cluster under the session lake, stopped at the end of the module."""
    from devstack.postgres import postgres_down, postgres_up

    reason = _missing_prerequisite()
    if reason:
        pytest.skip(reason)
    postgres_up(lake, port=free_port())
    yield lake
    postgres_down(lake)


def _variant(pipeline_path: Path, name: str, as_of: bool = True) -> Pipeline:
    """The shop pipeline under another name and topic prefix: its own database, topics, slot,
    tables and checkpoints, so other tests on the session's broker and lake never interfere.
    (The file name stays the real one: the simulator's workload.yml hints are found next to it.)
    Its as-of view is compared with the temporal join over the histories the database's triggers
    keep (`lakehouse.verify.postgres.history_statements`); `as_of=False` leaves it out, with the
    windowed view's refunds and the global payment_methods (each costs every stage a stream; the
    slow cases have them)."""
    text = pipeline_path.read_text().replace("name: shop", f"name: {name}", 1).replace("topic_prefix: shop", f"topic_prefix: {name}", 1)
    for layer in ("bronze", "silver", "gold", "quality"):
        text = text.replace(f"shop_{layer}", f"{name}_{layer}")
    pipeline = parse_pipeline(text, filename=str(pipeline_path))
    if as_of:
        return pipeline
    return current_state_only(five_tables(pipeline))


# --------------------------------------------------------------------------- pure pieces (no database)


# --------------------------------------------------------------------------- lifecycle


def test_postgres_lifecycle_is_idempotent_and_pid_owned(pg_lake: Path) -> None:
    """up twice leaves one server; the role can replicate; status reflects the process."""
    import psycopg

    from devstack.postgres import dsn, postgres_status, postgres_up
    from lakehouse.errors import StackError

    first = postgres_status(pg_lake)
    again = postgres_up(pg_lake)
    assert first.running and again.pid == first.pid
    with psycopg.connect(dsn(pg_lake, database="shop"), autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('wal_level'), rolreplication, rolcanlogin FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    assert row == ("logical", True, True)
    with pytest.raises(StackError, match="already running on port"):
        postgres_up(pg_lake, port=first.port + 1 if first.port < 65535 else first.port - 1)


# --------------------------------------------------------------------------- real records vs the simulator


def _consume(bootstrap: str, topics: list[str], idle_s: float = 6.0, timeout_s: float = 120.0) -> list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    """Every record of `topics` from the beginning, until none arrived for `idle_s`."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"shapes-{time.time_ns()}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(topics)
    out = []
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    try:
        while time.monotonic() < deadline and time.monotonic() - last < idle_s:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            last = time.monotonic()
            out.append((msg.topic(), msg.key(), msg.value(), list(msg.headers() or [])))
    finally:
        consumer.close()
    return out


def _image_class(image: dict[str, Any] | None, pk: tuple[str, ...]) -> str:
    if image is None:
        return "null"
    if all(v is None for k, v in image.items() if k not in pk):
        return "key columns only"
    return "full row"


CONTEXT_HEADER = "__debezium.context."


def record_shape(pipeline: Pipeline, toast: dict[str, tuple[str, ...]], topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """(category, shape) of one record: what a decoder depends on, never the values themselves.

    The `__debezium.context.*` headers and the source block's field list are the same on every
    record; they are compared once, globally (see `shape_differences`)."""
    source = pipeline.source_for_topic(topic)
    names = tuple(h[0] for h in headers if not h[0].startswith(CONTEXT_HEADER))
    pk_change = "__debezium.newkey" in names or "__debezium.oldkey" in names
    if value is None:
        return (source.name, "tombstone", "pk change" if pk_change else "delete"), {"headers": names, "key": tuple(json.loads(key))}
    env = json.loads(value)
    op = env["op"]
    image = env["after"] or env["before"] or {}
    placeholders = tuple(sorted(c for c in toast.get(source.name, ()) if (env["after"] or {}).get(c) == PLACEHOLDER))
    variant = "pk change" if pk_change else "snapshot" if op == "r" else "toast unchanged" if placeholders else "plain"
    shape = {
        "envelope fields": tuple(env),
        "headers": names,
        "key": tuple(json.loads(key)),
        "before": _image_class(env["before"], source.primary_key),
        "after": _image_class(env["after"], source.primary_key),
        "TOAST placeholders in after": placeholders,
        "JSON types": tuple(sorted((c, type(v).__name__) for c, v in image.items() if v is not None and v != PLACEHOLDER)),
        "transaction": env["transaction"],
        "snapshot marker": env["source"]["snapshot"] if op != "r" else "(snapshot)",
    }
    return (source.name, op, variant), shape


def _global_shape(records: list[Any]) -> tuple[set[tuple[str, ...]], set[tuple[str, ...]], set[tuple[str, ...]]]:
    """Over all records: the source block's field lists, the context header lists, and the
    forms of `source.sequence` (["<last commit>", "<lsn>"], the first null until a commit was seen)."""
    source_fields, context, sequences = set(), set(), set()
    for _topic, _key, value, headers in records:
        context.add(tuple(h[0] for h in headers if h[0].startswith(CONTEXT_HEADER)))
        if value is not None:
            source = json.loads(value)["source"]
            source_fields.add(tuple(source))
            sequences.add(tuple("null" if s is None else type(s).__name__ for s in json.loads(source["sequence"])))
    return source_fields, context, sequences


def shape_differences(pipeline: Pipeline, real: list[Any], simulated: list[Any]) -> tuple[list[str], list[str]]:
    """(differences, categories the simulator does not produce), each as readable lines.

    Per category (table, op, variant) and shape field: a value the real connector sent that no
    simulated record of the category has is a difference."""
    from testkit.simulator import load_workload

    workload = load_workload(pipeline)
    toast = {s.name: workload.hints(s).toast for s in pipeline.sources.values() if s.replica_identity == "default"}
    differences, uncovered = [], []
    (real_source, real_context, real_seq), (sim_source, sim_context, sim_seq) = _global_shape(real), _global_shape(simulated)
    if not real_seq <= sim_seq:
        differences.append(f"source.sequence forms: real {sorted(real_seq)}, simulator {sorted(sim_seq)}")
    if real_source != sim_source:
        differences.append(f"every record: source block fields: real {sorted(real_source)}, simulator {sorted(sim_source)}")
    if real_context != sim_context:
        differences.append(f"every record (tombstones too): headers {CONTEXT_HEADER}*: real {sorted(real_context)}, simulator {sorted(sim_context)}")
    shapes: dict[str, dict[tuple[str, ...], list[dict[str, Any]]]] = {"real": defaultdict(list), "sim": defaultdict(list)}
    for side, records in (("real", real), ("sim", simulated)):
        for rec in records:
            cat, shape = record_shape(pipeline, toast, *rec)
            shapes[side][cat].append(shape)
    for cat in sorted(shapes["real"]):
        label = "/".join(cat)
        real_list, sim_list = shapes["real"][cat], shapes["sim"].get(cat)
        if not sim_list:
            toasted = [s for s in real_list if s.get("TOAST placeholders in after")]
            if toasted and cat[1] != "u":  # the placeholder where the simulator would send the value
                differences.append(f"{label}: the after image carries the TOAST placeholder for {toasted[0]['TOAST placeholders in after']} "
                                   "(the simulator never produces this record kind; its creates always carry the value)")
            uncovered.append(f"{label}: real {real_list[0]}")
            continue
        for field in real_list[0]:
            if field == "JSON types":  # per column: the simulator may leave null what the database filled
                sim_types = defaultdict(set)
                for shape in sim_list:
                    for column, kind in shape[field]:
                        sim_types[column].add(kind)
                wrong = {c: (k, sorted(sim_types[c])) for shape in real_list for c, k in shape[field] if sim_types[c] and k not in sim_types[c]}
                if wrong:
                    differences.append(f"{label}: JSON types (real, simulator): {wrong}")
                continue
            real_values = {shape[field] for shape in real_list}
            sim_values = {shape[field] for shape in sim_list}
            if not real_values <= sim_values:
                differences.append(f"{label}: {field}: real {sorted(real_values, key=repr)}, simulator {sorted(sim_values, key=repr)}")
    differences += _snapshot_differences(pipeline, real, simulated)
    return differences, uncovered


def _snapshot_differences(pipeline: Pipeline, real: list[Any], simulated: list[Any]) -> list[str]:
    """Where the first/last markers land, and whether all records of one snapshot (one LSN: the
    simulator's heavy chaos takes a second one after an outage) share one source time."""

    def summary(records: list[Any]) -> tuple[dict[str, list[str]], int]:
        markers: dict[str, list[str]] = defaultdict(list)
        times: dict[int, set[int]] = defaultdict(set)
        for topic, _key, value, _headers in records:
            if value is None:
                continue
            env = json.loads(value)
            if env["op"] == "r":
                markers[pipeline.source_for_topic(topic).name].append(env["source"]["snapshot"])
                times[env["source"]["lsn"]].add(env["source"]["ts_ms"])
        return {t: sorted(set(m) & {"first", "last"}) for t, m in markers.items()}, max(map(len, times.values()), default=0)

    (real_markers, real_times), (sim_markers, sim_times) = summary(real), summary(simulated)
    out = []
    real_ends = {t: m for t, m in real_markers.items() if m}
    sim_ends = {t: m for t, m in sim_markers.items() if m}
    if real_ends != sim_ends:
        out.append(f"snapshot first/last markers: real {real_ends} (tables in table.include.list order), simulator {sim_ends}")
    if (real_times == 1) != (sim_times == 1):
        out.append(f"snapshot source.ts_ms: real {real_times} distinct value(s) over all tables, simulator {sim_times}")
    return out


class SimulatorShapeMismatch(AssertionError):
    """The simulator's records differ in shape from the real connector's: fix the simulator."""


def test_real_debezium_records_have_the_simulators_shapes(pg_lake: Path, kafka_bootstrap: str, shop_pipeline_path: Path) -> None:
    """Every kind of record the real connector sent (snapshot, insert, update under FULL and
    DEFAULT, TOAST placeholder, delete + tombstone, primary-key change triple, events) has the
    shape the simulator gives the same kind: envelope and source fields, headers, before/after
    contents, value encodings (decimal as base64 string, timestamp/date as numbers), sequence."""
    import psycopg

    from devstack.connect import connect_down, connect_up, wait_until_streaming
    from devstack.postgres import dsn, postgres_up
    from testkit.pg_workload import create_schema, seed_database
    from testkit.simulator import simulate

    pipeline = _variant(shop_pipeline_path, "shapes", as_of=False)
    postgres_up(pg_lake, database="shapes")
    pg = dsn(pg_lake, database="shapes")
    create_schema(pg, pipeline)
    seed_database(pg, pipeline, seed=3)
    connect_lake = pg_lake / "shapes"
    try:
        first = connect_up(connect_lake, pipeline, kafka_bootstrap, pg, rest_port=free_port())
        assert connect_up(connect_lake, pipeline, kafka_bootstrap, pg).pid == first.pid  # idempotent
        wait_until_streaming(pg, pipeline, connect_lake)
        with psycopg.connect(pg, autocommit=True) as conn:
            _scripted_changes(conn)
        real = _consume(kafka_bootstrap, list(pipeline.topics))
    finally:
        connect_down(connect_lake)
    simulated = [(r.topic, r.key, r.value, list(r.headers)) for r in simulate(pipeline, seed=7, events=1500, chaos="heavy").records]
    differences, uncovered = shape_differences(pipeline, real, simulated)
    assert real, "the connector sent nothing"
    if differences:
        raise SimulatorShapeMismatch(
            "real Debezium vs simulator:\n  " + "\n  ".join(differences + ["(not produced by the simulator) " + u for u in uncovered])
        )


def _scripted_changes(conn: Any) -> None:
    """One of each kind of change, on the demo schema (the shape test's database)."""
    one = lambda q, *p: conn.execute(q, p).fetchone()  # noqa: E731
    order_without_payment = one("SELECT id FROM orders o WHERE NOT EXISTS (SELECT 1 FROM payments p WHERE p.order_id = o.id) ORDER BY id LIMIT 1")[0]
    product, other_product = (r[0] for r in conn.execute("SELECT id FROM products ORDER BY id LIMIT 2").fetchall())
    customer = one("SELECT id FROM customers ORDER BY id LIMIT 1")[0]
    item = one("SELECT order_id, line_no FROM order_items ORDER BY order_id, line_no LIMIT 1")
    conn.execute("INSERT INTO customers VALUES (900001, 'Real Person', 'r@example.com', 'consumer', '2026-02-03 04:05:06.789012')")
    conn.execute("UPDATE customers SET name = 'Renamed' WHERE id = 900001")  # FULL: before is the whole row
    conn.execute("UPDATE products SET title = 'Retitled' WHERE id = %s", (product,))  # DEFAULT + TOAST placeholder
    conn.execute("UPDATE products SET id = 900002 WHERE id = %s", (product,))  # PK change (+ TOAST), cascades to order_items
    conn.execute("UPDATE products SET description = repeat('z', 10) WHERE id = %s", (other_product,))
    conn.execute("UPDATE order_items SET line_no = 9001 WHERE order_id = %s AND line_no = %s", item)  # compound PK change
    conn.execute("UPDATE orders SET status = 'shipped', total = 12.34 WHERE id = %s", (order_without_payment,))
    conn.execute("DELETE FROM customers WHERE id = %s", (customer,))  # SET NULL on orders, then the delete
    conn.execute("DELETE FROM orders WHERE id = %s", (order_without_payment,))  # cascades to its items
    with conn.transaction():
        conn.execute("INSERT INTO orders VALUES (900003, NULL, 'new', '2026-03-04', 99.99)")
        conn.execute("INSERT INTO order_items VALUES (900003, 1, 900002, 2, 49.99), (900003, 2, NULL, 1, 0.01)")
        conn.execute("INSERT INTO payments VALUES (900004, 900003, 99.99, 'card', '2026-03-04 10:11:12')")


# --------------------------------------------------------------------------- the end-to-end run


def _stage_missing() -> str | None:
    from lakehouse.errors import CdcEnrichError
    from lakehouse.verify.postgres import stage_functions

    try:
        stage_functions()
    except CdcEnrichError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(
    ("transactions", "offsets_lost"),
    [
        (TRANSACTIONS, False),
        pytest.param(RESNAPSHOT_TRANSACTIONS, True, marks=pytest.mark.slow),
        pytest.param(SLOW_TRANSACTIONS, False, marks=pytest.mark.slow),
    ],
    ids=lambda v: f"{v}tx" if isinstance(v, int) and not isinstance(v, bool) else ("offsets-lost" if v else "resumed"),
)
@pytest.mark.long
def test_gold_equals_postgres_with_a_real_connector_restarted_mid_run(
    spark: Any, lake: Path, pg_lake: Path, kafka_bootstrap: str, shop_pipeline_path: Path, transactions: int,
    offsets_lost: bool,
) -> None:
    """`transactions` transactions from two connections, the connector killed (SIGKILL) and
    restarted in the middle of the run (while streaming: the initial snapshot is complete),
    optionally one incremental drain half-way, then drained until caught up: every gold view
    equals its join inside PostgreSQL and every silver table its source table, with zero
    differences.

    `offsets_lost`: the connector's offsets are gone when it restarts (a crash before its first
    streaming offset was flushed, or a reset connector), so it takes a new snapshot while rows
    deleted during the outage have no delete event: silver's snapshot reconciliation
    (lakehouse.silver.snapshots) must delete them."""
    missing = _stage_missing()
    if missing:
        pytest.skip(missing)
    from devstack.connect import (
        connect_down,
        connect_status,
        connect_up,
        offsets_file,
        snapshots_taken,
        wait_until_streaming,
    )
    from devstack.postgres import dsn, postgres_up
    from lakehouse.spark import ensure_schemas
    from lakehouse.tables import bronze_table
    from lakehouse.verify.postgres import stage_functions, verify_against_postgres
    from testkit.pg_workload import run_workload, seed_database

    timings: dict[str, float] = {}
    started = time.monotonic()
    snapshots_before = snapshots_taken(lake)  # connect.log is the lake's, appended across tests
    name = f"pge2e{transactions}{'r' if offsets_lost else ''}"  # each case its own database, topics, slot and tables
    # the as-of view (compared over the database's trigger-kept history) in the slow cases: 13-40 s
    # more per run, which the default suite's 20 minutes cannot pay
    compare_as_of = transactions != TRANSACTIONS
    pipeline = _variant(shop_pipeline_path, name, as_of=compare_as_of)
    postgres_up(pg_lake, database=name)
    pg = dsn(pg_lake, database=name)
    seed = seed_database(pg, pipeline, seed=11)
    rest_port = free_port()
    try:
        t = time.monotonic()
        connect_up(lake, pipeline, kafka_bootstrap, pg, rest_port=rest_port)
        wait_until_streaming(pg, pipeline, lake)  # the kill below must hit streaming, not the initial snapshot
        timings["connector start + snapshot"] = time.monotonic() - t

        # first part: the connector is SIGKILLed while the workload runs, then restarted
        first = transactions // 2
        halfway = threading.Event()
        box: dict[str, Any] = {}

        def first_part() -> None:
            try:
                box["stats"] = run_workload(pg, pipeline, first, seed=12, progress=lambda n: n >= first // 2 and halfway.set())
            except BaseException as exc:  # re-raised in the test thread
                box["error"] = exc
            finally:
                halfway.set()

        t = time.monotonic()
        worker = threading.Thread(target=first_part, name="pg-workload")
        worker.start()
        halfway.wait(timeout=600)
        killed_mid_run = worker.is_alive()
        assert connect_down(lake, kill=True), "the connector was not running"
        if offsets_lost:
            offsets_file(lake).unlink()
        time.sleep(2)  # the workload goes on while the connector is down: the slot keeps the changes
        connect_up(lake, pipeline, kafka_bootstrap, pg, rest_port=rest_port)
        worker.join()
        if "error" in box:
            raise box["error"]
        timings["workload part 1 (+ restart)"] = time.monotonic() - t

        if MID_RUN_DRAIN:  # an incremental round while the database is not yet final
            run_bronze, run_silver, run_gold = stage_functions()
            t = time.monotonic()
            ensure_schemas(spark, pipeline)
            run_bronze(spark, pipeline, lake, kafka_bootstrap)
            run_silver(spark, pipeline, lake)
            run_gold(spark, pipeline, lake)
            timings["mid-run drain"] = time.monotonic() - t

        t = time.monotonic()
        second = run_workload(pg, pipeline, transactions - first, seed=13)
        timings["workload part 2"] = time.monotonic() - t

        t = time.monotonic()
        report = verify_against_postgres(spark, pipeline, pg, lake, timeout_s=1200, bootstrap=kafka_bootstrap)
        timings["drain + verify"] = time.monotonic() - t
        status = connect_status(lake)
        snapshots = snapshots_taken(lake) - snapshots_before
    finally:
        connect_down(lake)
    timings["total"] = time.monotonic() - started

    placeholders = sum(
        spark.table(bronze_table(pipeline, s)).where("_unavailable_columns IS NOT NULL").count()
        for s in pipeline.sources.values()
    )
    summary = (
        f"{seed.render()}\n{box['stats'].render()}\n{second.render()}\n{report.render()}\n"
        f"connector killed mid-run: {killed_mid_run}; TOAST placeholders in bronze: {placeholders}; "
        f"snapshots taken: {snapshots} (a second one means the restart re-snapshotted); connector at the end: {status.describe()}\n"
        + "timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())
    )
    print(summary)
    assert status.task_state == "RUNNING", summary
    assert killed_mid_run, "the workload finished before the connector could be killed in its middle\n" + summary
    assert placeholders > 0, "no TOAST placeholder reached bronze: the TOAST path was not exercised\n" + summary
    expected_snapshots = 2 if offsets_lost else 1
    assert snapshots == expected_snapshots, (
        f"{snapshots} snapshots taken, expected {expected_snapshots} (a restart from a snapshot offset re-snapshots)\n" + summary
    )
    assert report.ok, summary
    as_of = [d for d in report.gold if d.name == "gold payments_enriched"]
    if compare_as_of and offsets_lost:  # the new snapshot delivered the versions committed meanwhile at its own time
        assert not as_of and any("payments_enriched: not compared" in n for n in report.not_compared), summary
    elif compare_as_of:  # joined as of each payment's commit time inside PostgreSQL, over the triggers' histories
        assert as_of and as_of[0].pg_rows > 0, summary
