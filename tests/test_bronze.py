"""Bronze ingest (lakehouse.bronze) on the real Spark session, real Delta and the real Kafka broker.

- the SQL pass is held to `debezium.decode_record` on valid, odd and fuzzed records;
- a replayed micro-batch (same txnVersion) writes nothing twice, also after a partial write;
- fuzzed traffic through Kafka: bronze + quarantine = everything produced, exact coordinates,
  specific reasons, and a rerun on the same checkpoint adds nothing;
- kill -9 of the ingest job mid-stream, restart: bronze complete and unique by coordinates;
- the simulator's workload end to end: the latest bronze version per key is the source truth.

Every test uses its own topic prefix, table schemas and checkpoints (`isolated_pipeline`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import DataFrame, SparkSession

from lakehouse import bronze
from lakehouse.bronze import parse as bronze_parse, runner as bronze_runner
from testkit.bench.ingest import isolated_pipeline
from lakehouse.declaration import Pipeline, Source
from lakehouse.bronze.debezium import UNAVAILABLE
from lakehouse.tables import bronze_schema, bronze_table, quarantine_schema, quarantine_table
from test_debezium import REJECTIONS, THINGS, change, decimal_b64, dumps, image_of, key_of, pg_source, thing

REPO = Path(__file__).resolve().parent.parent
KAFKA_SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
UTC = timezone.utc


def _kafka_frame(spark: SparkSession, records: list[tuple[bytes | None, bytes | None, str]]) -> DataFrame:
    """Rows shaped like Spark's Kafka source, offsets in list order."""
    ts = datetime(2026, 1, 1)
    rows = [(k, v, topic, i % 2, i, ts) for i, (k, v, topic) in enumerate(records)]
    return spark.createDataFrame(rows, KAFKA_SCHEMA)


def _tag() -> str:
    return uuid.uuid4().hex[:8]


# --------------------------------------------------------------------------- random valid rows for any source


def _random_value(column_type: str, rng: random.Random) -> Any:
    if column_type in ("bigint", "int", "smallint"):
        return rng.randint(-30000, 30000)
    if column_type == "string":
        return rng.choice(["", "a", "Zoë", "line\nbreak", "\"quoted\"", "x" * 50])
    if column_type == "boolean":
        return rng.random() < 0.5
    if column_type in ("double", "float"):
        return rng.choice([0.0, 1.5, -2.25, round(rng.uniform(-1e6, 1e6), 3)])
    if column_type == "timestamp":
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randint(-10**14, 10**14))
    if column_type == "date":
        return date(2026, 1, 1) + timedelta(days=rng.randint(-20000, 20000))
    precision, scale = (int(x) for x in column_type[len("decimal("):-1].split(","))
    return Decimal(rng.randint(-(10 ** precision) + 1, 10 ** precision - 1)).scaleb(-scale)


def _random_row(source: Source, rng: random.Random, key: dict[str, Any]) -> dict[str, Any]:
    row = {c.name: (None if rng.random() < 0.1 else _random_value(c.type, rng)) for c in source.columns}
    row.update(key)
    return row


def _valid_records(source: Source, rng: random.Random, count: int, schemas: bool = False) -> list[tuple[bytes | None, bytes | None]]:
    """Creates, updates, deletes + tombstones of `source`, as Debezium writes them."""
    out: list[tuple[bytes | None, bytes | None]] = []
    lsn = 1000
    for i in range(count):
        lsn += rng.randint(1, 50)
        key = {k: (i if source.column(k).type in ("bigint", "int", "smallint") else _random_value(source.column(k).type, rng))
               for k in source.primary_key}
        op = rng.choice(["r", "c", "u", "u", "d"])
        if op == "d":
            out.append(change(source, "d", before=key, lsn=lsn, schemas=schemas))
            out.append((key_of(source, key, schemas), None))
        else:
            row = _random_row(source, rng, key)
            toastable = [c.name for c in source.columns if c.type == "string" and c.name not in source.primary_key]
            if toastable and rng.random() < 0.15:  # PostgreSQL TOASTs text, not numbers
                row[rng.choice(toastable)] = UNAVAILABLE
            out.append(change(source, op, after=row, lsn=lsn, schemas=schemas))
    return out


# --------------------------------------------------------------------------- the SQL pass vs decode_record


def _junk_records() -> list[tuple[bytes | None, bytes | None]]:
    """Odd but sometimes valid values in every column, wide decimals, other units, random bytes."""
    rng = random.Random(7)
    junk_values = ["abc", "", 1.5, 2**40, -1, 0, True, None, [], {}, "1234", "12.345", "-0.5", "+1", ".5", "1e3",
                   "2026-01-01", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00", "2026-01-01T01:00:00.5+01:00",
                   "0001-01-01T00:00:00Z", "AA==", "AQ==", "//8=", "gAAAAAAAAAAA", 1e300, 0.1, 12345678901234567,
                   0.30000000000000004, 2**53 + 1, -(2**63), 2**63, 10**18, -719162, 2932897, UNAVAILABLE]
    out: list[tuple[bytes | None, bytes | None]] = []
    key = key_of(THINGS, {"id": 42})
    for column in THINGS.columns:
        for junk in junk_values:
            after = image_of(THINGS, thing())
            after[column.name] = junk
            out.append((key, dumps({"before": None, "after": after, "source": pg_source(), "op": "u", "ts_ms": 1})))
    for name in ("io.debezium.time.Timestamp", "io.debezium.time.NanoTimestamp", "io.debezium.time.ZonedTimestamp"):
        out.append(change(THINGS, "c", after=thing(), schemas=True, names={"created_at": name}))
    wide = image_of(THINGS, thing())
    wide["big"] = decimal_b64(Decimal(10**30), 0)  # 13 bytes: beyond the SQL pass, exact in Python
    out.append((key, dumps({"before": None, "after": wide, "source": pg_source(), "op": "c", "ts_ms": 1})))
    wrapped = json.loads(change(THINGS, "c", after=thing(), schemas=True)[1])
    wrapped["schema"]["fields"][1]["fields"][3] = "not a field schema"  # malformed Connect schema
    out.append((key, dumps(wrapped)))
    out.append((dumps({"schema": None, "payload": {"id": 42}}), change(THINGS, "c", after=thing())[1]))
    out.append((key, dumps({"schema": {}, "payload": None})))  # wrapped tombstone
    bare = change(THINGS, "c", after=thing())[1]
    out += [
        (key, bare.replace(b'"after"', b'"After"')),  # JSON keys are case-sensitive
        (key, bare.replace(b'"Zo', b'"\xed\xa0\x80Zo')),  # an encoded surrogate: not UTF-8
        (key, bare.replace(b'"Zo', b'"\xc0\xafZo')),  # an overlong encoding: not UTF-8
        (key, bare.replace(b'"Zo', b'"\\ud800Zo')),  # a lone surrogate escape
        (key, bare + b" trailing"),
        (key, bare + bare),
        (key, b"  " + bare),
    ]
    # where a JVM JSON parser and Python's json module could part ways
    out += [
        (key, b"\xef\xbb\xbf" + bare),  # a byte-order mark: Python rejects it, Jackson would skip it
        (key, bare.decode().encode("utf-16-le")),  # Jackson would detect UTF-16 from the bytes
        (key, bare.replace(b'"op":"c"', b'"op":"d","op":"c"')),  # a duplicate key: Python keeps the last
        (key, bare.replace(b'"op":"c"', b'"op":"c" ')),
        (b" " + key + b"\n", bare),
    ]
    raw_tokens = {
        "ratio": [b"-0.0", b"0.0", b"-0", b"1E-400", b"1e400", b"-1.5e-3", b"123456789012345678901234567890"],
        "f": [b"-0.0", b"3.4028235e38", b"3.4028234663852886e38", b"1e-50", b"0.1"],
        "price": [b"12.345", b"-12.345", b"-0.0", b"1e2", b"99999999.995", b"1E-400", b'"12.5\n"', b'"1.e1"', b'"+.5"', b'"-0"'],
        "big": [b"1e37", b"-1E+37", b'"AA=="', b'"/w=="', b'"gAAAAAAAAAAAAAAAAAAAAAAA"'],
        "created_at": [b'"2026-01-01T00:00:00+18:00"', b'"2026-01-01T00:00:00+17:59"', b'"2026-01-01 00:00:00"',
                       b'"9999-12-31T23:59:59Z"', b'"2026-01-01T00:00:00.1234567Z"', b'"2026-02-30T00:00:00Z"',
                       b'"2026-01-01T24:00:00Z"', b'"2026-01-01T00:00:60Z"', b'"2026-01-01T00:00:00-00:30"',
                       b"-62135596800000000", b"253402300800000000"],
        "day": [b'"2026-02-30"', b'"0001-01-01"', b'"2026-1-1"', b"-719163"],
        "name": [b'"\\ud83d\\ude00"', b'"\\udc00"', b'"tab\\there"', b'"nul\\u0000"'],
        "n": [b"2147483648", b"-2147483648", b"1.0", b"1e3", b"true"],
    }
    for column, tokens in raw_tokens.items():
        for token in tokens:
            doc = json.loads(bare)
            doc["after"][column] = "@raw@"
            out.append((key, dumps(doc).replace(b'"@raw@"', token)))
    for _ in range(40):
        out.append((rng.choice([None, key, rng.randbytes(rng.randint(0, 12))]), rng.choice([None, rng.randbytes(rng.randint(0, 60))])))
    valid = [r for r in _valid_records(THINGS, rng, 40) + _valid_records(THINGS, rng, 10, schemas=True) if r[1] is not None]
    for _ in range(300):  # seeded mutations of valid records: most break the JSON, some change a value
        k, v = rng.choice(valid)
        out.append((k, _mutate(v, rng)))
    return out


def _mutate(raw: bytes, rng: random.Random) -> bytes:
    """One to three edits at random places: a JSON-significant character replaced, inserted or
    deleted, or a span repeated."""
    out = bytearray(raw)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(out))
        kind = rng.choice(("replace", "insert", "delete", "repeat"))
        char = rng.choice(b'"{}[]:,-+.0123456789eE \\tnul')
        if kind == "replace":
            out[i] = char
        elif kind == "insert":
            out.insert(i, char)
        elif kind == "delete" and len(out) > 1:
            del out[i]
        else:
            out[i:i] = out[i:i + rng.randint(1, 12)]
    return bytes(out)


def _fast_pass(kind: str, spark: SparkSession, source: Source) -> Any:
    if kind == "jvm":
        assert bronze.decoder_available(spark), "the JVM decoder jar is missing: `make setup` builds it"
        return bronze.jvm_pass(source)
    return bronze.sql_pass(source)


def test_hybrid_parsing_uses_the_jvm_decoder(spark: SparkSession) -> None:
    """`make setup` builds the decoder and the session loads it: hybrid parsing takes the JVM pass."""
    assert isinstance(bronze.fast_pass(spark, THINGS, "hybrid"), bronze.JvmPass)
    assert isinstance(bronze.fast_pass(spark, THINGS, "sql"), bronze.SqlPass)


@pytest.mark.parametrize("kind", ["jvm", "sql"])
def test_fast_pass_agrees_with_decode_record(spark: SparkSession, kind: str) -> None:
    """Hybrid parsing == Python-only parsing on every record, with either fast pass (the JVM
    decoder, the SQL pass); clean Debezium traffic never needs Python."""
    rng = random.Random(1)
    standard = _valid_records(THINGS, rng, 60) + _valid_records(THINGS, rng, 30, schemas=True)
    standard.append(change(THINGS, "t")[0:2])
    odd = [(k, v) for _, k, v, _ in REJECTIONS if not (v and len(v) > 10_000)] + _junk_records()
    records = [(k, v, THINGS.topic) for k, v in standard + odd]
    kafka = _kafka_frame(spark, records).cache()

    sql = _fast_pass(kind, spark, THINGS).apply(kafka).cache()
    fast = {r["_offset"] for r in sql.where("_fast").select("_offset").collect()}
    if kind == "jvm":
        assert set(range(len(standard))) <= fast, "standard Debezium records must all take the fast path"
    else:  # the fallback leaves decimal bytes wider than 14 (decimal(38,0) here) to Python
        narrow = {i for i, (_, v) in enumerate(standard) if v is None or b'"big":' not in v or b'"big":null' in v}
        assert narrow <= fast and len(fast) > len(standard) // 2
    assert len(fast) < len(records), "the corpus must exercise the Python path too"

    # what the runner does (SQL, leftovers through Python) vs everything through Python
    hybrid = bronze_parse._fast_rows(sql).unionByName(bronze.decode_python(THINGS, bronze_parse._slow_input(sql))).cache()
    python = bronze.decode_python(THINGS, kafka).cache()
    assert hybrid.count() == python.count() == len(records)
    difference = hybrid.exceptAll(python).union(python.exceptAll(hybrid))
    mismatches = difference.select("_offset", "_reason", "_after").collect()
    assert not mismatches, f"the {kind} pass and Python disagree on {len(mismatches)} rows, e.g. {mismatches[:4]}"
    assert python.where("_reason is not null").count() >= len(REJECTIONS) - 1
    for df in (hybrid, python, sql, kafka):
        df.unpersist()


def test_parse_batch_layout_and_undeclared_topics(spark: SparkSession, shop_pipeline: Pipeline) -> None:
    pipeline = isolated_pipeline(shop_pipeline, "layout" + _tag())
    customers = pipeline.source("customers")
    row = {"id": 1, "name": "Ada", "email": "a@x", "segment": "smb", "created_at": datetime(2026, 1, 1, tzinfo=UTC)}
    records = [
        (*change(customers, "c", after=row), customers.topic),
        (key_of(customers, {"id": 1}), b"{broken", customers.topic),
        (b'{"id":1}', b"{}", f"{pipeline.kafka.topic_prefix}.public.ghosts"),
    ]
    by_source, quarantine = bronze.parse_batch(pipeline, _kafka_frame(spark, records))
    assert _layout(by_source["customers"].schema) == _layout(bronze_schema(customers))
    assert _layout(quarantine.schema) == _layout(quarantine_schema())
    rows = by_source["customers"].collect()
    assert len(rows) == 1 and rows[0]["_after"]["name"] == "Ada" and rows[0]["_kafka_ts"] is not None
    reasons = sorted(((r["source"], r["reason"]) for r in quarantine.collect()), key=lambda x: (x[0] or "", x[1]))
    assert reasons == [
        (None, f"topic '{pipeline.kafka.topic_prefix}.public.ghosts' is declared by no source of pipeline '{pipeline.name}'"),
        ("customers", "value is not valid JSON: Expecting property name enclosed in double quotes at character 1 (7 bytes)"),
    ]


def _layout(schema: Any) -> list[tuple[str, Any]]:
    """Names and types (a projection may loosen top-level nullability; Delta enforces the table's)."""
    return [(f.name, f.dataType) for f in schema.fields]


def test_the_old_key_header_of_a_primary_key_change_reaches_bronze(spark: SparkSession) -> None:
    """Kafka headers as Spark's source gives them (includeHeaders): `__debezium.oldkey` -> `_old_key`,
    in every parser; a record without it stays on the fast path."""
    moved = change(THINGS, "c", after=thing(id=43, name=UNAVAILABLE), lsn=700)
    plain = change(THINGS, "u", after=thing(id=44), lsn=701)
    schema = KAFKA_SCHEMA + ", headers array<struct<key: string, value: binary>>"
    ts = datetime(2026, 1, 1)
    kafka = spark.createDataFrame(
        [(*moved, THINGS.topic, 0, 0, ts, [("__debezium.context.taskId", b"0"), ("__debezium.oldkey", b'{"id":42}')]),
         (*plain, THINGS.topic, 0, 1, ts, [])],
        schema,
    )
    for kind in ("jvm", "sql"):
        fast = {r["_offset"]: r["_fast"] for r in _fast_pass(kind, spark, THINGS).apply(kafka).collect()}
        assert fast == {0: False, 1: True}, kind
    for parser in bronze.PARSERS:
        rows = {r["_offset"]: r for r in bronze.parse_source(THINGS, kafka, parser).collect()}
        assert rows[0]["_reason"] is None and rows[0]["_old_key"]["id"] == 42, parser
        assert rows[0]["_unavailable_columns"] == "name" and rows[1]["_old_key"] is None, parser


# --------------------------------------------------------------------------- idempotent micro-batches


def test_replayed_batch_writes_nothing_twice(spark: SparkSession, shop_pipeline: Pipeline) -> None:
    """A source stream's foreachBatch: the same batch id again (even after a partial write) adds nothing."""
    pipeline = isolated_pipeline(shop_pipeline, "replay" + _tag())
    orders = pipeline.source("orders")
    records = [(k, v, orders.topic) for k, v in _valid_records(orders, random.Random(3), 12)]
    records.append((b"junk", b"junk", orders.topic))
    batch = _kafka_frame(spark, records).cache()  # what the stream hands over: raw Kafka rows
    bronze.ensure_bronze_tables(spark, pipeline)
    table, quarantine = bronze_table(pipeline, orders), quarantine_table(pipeline)

    def run(batch_id: int, query_id: str = "q1") -> bronze.BronzeReport:
        """A fresh handler per call: each call is the first batch of a query restarted after
        a crash that left this batch uncommitted (so it may be a replay)."""
        report = bronze.BronzeReport(pipeline.name, "-", "available_now", "hybrid", quarantine,
                                     tables={orders.name: bronze.TableReport(orders.name, table)})
        handler = bronze_runner._SourceStream(pipeline, orders, "hybrid", report, threading.Lock(), lambda _m: None)
        handler.reset(replayable=batch_id)
        handler.bind(query_id)
        handler(handler.frame(batch), batch_id)
        return report

    def counts() -> tuple[int, int]:
        return spark.table(table).count(), spark.table(quarantine).count()

    first = run(0)
    assert counts() == (len(records) - 1, 1)
    assert (first.rows, first.quarantined, first.replayed_batches) == (len(records) - 1, 1, 0)

    again = run(0)  # a restart replays batch 0
    assert counts() == (len(records) - 1, 1)
    assert (again.rows, again.quarantined, again.replayed_batches) == (0, 0, 1)

    # a crash in batch 1 after the fast pass's bronze write, before the Python pass wrote; then the replay
    decoded = bronze.fast_pass(spark, orders).apply(batch)
    fast = bronze.bronze_rows(orders, bronze_parse._fast_rows(decoded))
    left_to_python = len(records) - 1 - fast.count()
    assert bronze_runner._append(spark, fast, table, "cdc-enrich-bronze-q1", 1, replay_check=True)
    replay = run(1)
    assert counts() == (2 * (len(records) - 1), 2)
    assert (replay.rows, replay.quarantined, replay.replayed_batches) == (left_to_python, 1, 1)

    assert run(0, query_id="q2").rows == len(records) - 1  # a new checkpoint (new query id) is new data
    batch.unpersist()


def test_only_a_batch_planned_but_not_committed_can_be_a_replay(tmp_path: Path) -> None:
    """Spark logs a batch's offsets before running it and its commit after: the gap is the replay."""
    checkpoint = tmp_path / "orders"
    assert bronze.uncommitted_batch(checkpoint) is None  # a new stream
    for folder, ids in (("offsets", ("0", "1", "2", ".2.crc")), ("commits", ("0", "1", ".1.crc"))):
        (checkpoint / folder).mkdir(parents=True)
        for name in ids:
            (checkpoint / folder / name).write_text("v1")
    assert bronze.uncommitted_batch(checkpoint) == 2  # crashed in batch 2
    (checkpoint / "commits" / "2").write_text("v1")
    assert bronze.uncommitted_batch(checkpoint) is None  # a clean stop: the next batch is new


def test_the_fast_write_counts_the_records_and_those_left_for_python(spark: SparkSession, shop_pipeline: Pipeline) -> None:
    """What decides whether the Python pass runs is counted while the fast rows are written;
    a replay that Delta skips has no count, so the Python pass decides (never skipped)."""
    pipeline = isolated_pipeline(shop_pipeline, "count" + _tag())
    orders = pipeline.source("orders")
    rng = random.Random(5)
    records = [(k, v, orders.topic) for k, v in _valid_records(orders, rng, 7)]
    records += [(b'{"id": 1}', b"not json", orders.topic), (b'{"id": 2}', None, orders.topic)]  # one slow, one tombstone
    bronze.ensure_bronze_tables(spark, pipeline)
    table = bronze_table(pipeline, orders)
    kafka = _kafka_frame(spark, records)

    def write(batch_id: int, replay_check: bool) -> dict[str, int] | None:
        decoded, observation = bronze.counted(bronze.fast_pass(spark, orders).apply(kafka), "count")
        wrote = bronze_runner._append(spark, bronze.bronze_rows(orders, bronze_parse._fast_rows(decoded)), table, "app-a", batch_id, replay_check)
        return bronze_runner._observed(observation) if wrote else None

    assert write(0, replay_check=True) == {"records": len(records), "slow": 1}
    assert write(0, replay_check=True) is None  # a replay: Delta skipped it, nothing counted
    assert spark.table(table).count() == len(records) - 1


# --------------------------------------------------------------------------- through Kafka


def _produce(bootstrap: str, records: list[tuple[str, bytes | None, bytes | None]]) -> list[tuple[str, int, int]]:
    """Produce in order; returns each record's (topic, partition, offset)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    coordinates: list[Any] = [None] * len(records)

    def delivered(index: int):  # noqa: ANN202
        def callback(err: Any, msg: Any) -> None:
            assert err is None, err
            coordinates[index] = (msg.topic(), msg.partition(), msg.offset())
        return callback

    for i, (topic, key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, on_delivery=delivered(i))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert all(coordinates)
    return coordinates


def _fuzz(pipeline: Pipeline, rng: random.Random) -> list[tuple[str, bytes | None, bytes | None, str | None]]:
    """Valid traffic with malformed records mixed in: (topic, key, value, expected reason or None)."""
    out: list[tuple[str, bytes | None, bytes | None, str | None]] = []
    for source in pipeline.sources.values():
        out += [(source.topic, k, v, None) for k, v in _valid_records(source, rng, 25, schemas=rng.random() < 0.5)]
    products = pipeline.source("products")
    row = {"id": 5, "sku": "S", "title": "T", "price": Decimal("9.99"), "description": "D"}
    key, value = change(products, "c", after=row)
    envelope = json.loads(value)

    def edited(**changes: Any) -> bytes:
        return dumps({**envelope, **changes})

    def after(**changes: Any) -> bytes:
        return edited(after={**envelope["after"], **changes})

    t = products.topic
    bad = [
        (t, key, b"\xff\xfe" + rng.randbytes(48), "value is not UTF-8 text: invalid byte at position 0"),
        (t, key, value[: len(value) // 2], "value is not valid JSON"),
        (t, key, after(price="abc"), "value.after.price: 'abc' is not a decimal(10,2)"),
        (t, key, after(price=decimal_b64(Decimal("123456789.00"), 2)), "does not fit decimal(10,2)"),
        (t, key, after(id="5"), "value.after.id: '5' is not a bigint"),
        (t, key, edited(op="z"), "value.op: 'z' is not a Debezium operation"),
        (t, key, edited(op=None), "value.op is missing"),
        (t, key, edited(source={"ts_ms": 1}), "value.source.lsn is missing"),
        (t, b'{"id":6}', value, "key does not match value.after: key.id = 6 but value.after.id = 5"),
        (t, b'{"sku":"S"}', value, "key: fields do not match the primary key (id): missing id; unexpected sku"),
        (t, None, None, "tombstone (null value) with a null key"),
        (f"{pipeline.kafka.topic_prefix}.{pipeline.kafka.source_schema}.ghosts", key, value,
         f"topic '{pipeline.kafka.topic_prefix}.{pipeline.kafka.source_schema}.ghosts' is declared by no source"),
    ]
    for record in bad:
        out.insert(rng.randint(0, len(out)), record)
    return out


def _create_topics(bootstrap: str, pipeline: Pipeline, extra: tuple[str, ...] = ()) -> None:
    from devstack.broker import create_topics

    topics = list(pipeline.topics) + list(extra)
    create_topics(bootstrap, topics[:1], partitions=2)  # one topic with two partitions
    create_topics(bootstrap, topics[1:], partitions=1)


def _table_rows(spark: SparkSession, name: str, columns: list[str]) -> list[tuple]:
    return [tuple(r) for r in spark.table(name).select(*columns).collect()]


@pytest.mark.kafka
def test_fuzzed_traffic_through_kafka_bronze_plus_quarantine_is_everything(spark: SparkSession, shop_pipeline: Pipeline, kafka_bootstrap: str, lake: Path) -> None:
    pipeline = isolated_pipeline(shop_pipeline, "fuzz" + _tag())
    rng = random.Random(11)
    records = _fuzz(pipeline, rng)
    ghost = f"{pipeline.kafka.topic_prefix}.{pipeline.kafka.source_schema}.ghosts"
    outside = f"{pipeline.kafka.topic_prefix}.other"  # not <prefix>.<schema>.*: never subscribed
    _create_topics(kafka_bootstrap, pipeline, (outside,))
    assert not bronze.undeclared_topics_exist(kafka_bootstrap, pipeline)  # no undeclared stream needed
    from devstack.broker import create_topics

    create_topics(kafka_bootstrap, [ghost], partitions=1)
    assert bronze.undeclared_topics_exist(kafka_bootstrap, pipeline)
    coordinates = _produce(kafka_bootstrap, [(t, k, v) for t, k, v, _ in records] + [(outside, b"x", b"y")])[:-1]
    expected_bad = {c: reason for c, (_, _, _, reason) in zip(coordinates, records) if reason}
    expected_good = {c for c, (_, _, _, reason) in zip(coordinates, records) if not reason}

    messages: list[str] = []
    report = bronze.run_bronze(spark, pipeline, lake, kafka_bootstrap, max_offsets_per_trigger=20, progress=messages.append)

    good = _table_rows_all(spark, pipeline)
    quarantined = {(r["topic"], r["partition"], r["offset"]): r["reason"]
                   for r in spark.table(quarantine_table(pipeline)).collect()}
    assert len(good) == len(set(good)), "bronze must be unique by (topic, partition, offset)"
    assert set(good) == expected_good
    assert set(quarantined) == set(expected_bad)
    for coordinate, reason in quarantined.items():
        assert expected_bad[coordinate] in reason, (reason, expected_bad[coordinate])
    assert report.records == len(records) and report.rows == len(expected_good) and report.quarantined == len(expected_bad)
    assert report.unknown_topic_records == 1
    assert report.tables["products"].quarantined == len(expected_bad) - 1
    assert all(t.batches >= 2 for t in report.tables.values())  # at most 20 records per batch
    assert any("/products batch 1:" in m for m in messages) and "quarantine" in report.render()

    again = bronze.run_bronze(spark, pipeline, lake, kafka_bootstrap)  # same checkpoint: nothing new
    assert again.records == 0 and again.rows == 0
    assert len(_table_rows_all(spark, pipeline)) == len(expected_good)
    assert spark.table(quarantine_table(pipeline)).count() == len(expected_bad)


def _table_rows_all(spark: SparkSession, pipeline: Pipeline) -> list[tuple]:
    rows: list[tuple] = []
    for source in pipeline.sources.values():
        rows += _table_rows(spark, bronze_table(pipeline, source), ["_topic", "_partition", "_offset"])
    return rows


# --------------------------------------------------------------------------- kill -9 and restart


def _pipeline_file(shop_pipeline: Pipeline, directory: Path, tag: str) -> tuple[Path, Pipeline]:
    """A copy of the shop pipeline file with its own name, topic prefix and schemas."""
    from lakehouse.declaration import load_pipeline

    raw = yaml.safe_load((REPO / "schemas" / "shop" / "pipeline.yml").read_text())
    raw["name"] = f"shop_{tag}"
    raw["kafka"]["topic_prefix"] = f"shop-{tag}"
    for layer in ("bronze", "silver", "gold", "quality"):
        raw["tables"][f"{layer}_schema"] = f"shop_{tag}_{layer}"
    path = directory / "pipeline.yml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path, load_pipeline(path)


def _job(pipeline_file: Path, lake: Path, bootstrap: str, max_offsets: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.bronze_ingest", "--pipeline", str(pipeline_file), "--lake", str(lake),
         "--bootstrap", bootstrap, "--trigger", "available_now", "--max-offsets", str(max_offsets)],
        cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )


@pytest.mark.kafka
def test_kill_dash_9_mid_stream_then_restart_is_complete_and_unique(spark: SparkSession, shop_pipeline: Pipeline, kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = "crash" + _tag()
    pipeline_file, pipeline = _pipeline_file(shop_pipeline, tmp_path, tag)
    job_lake = tmp_path / "lake"  # its own metastore: the test session holds the shared one
    rng = random.Random(5)
    records = []
    for source in pipeline.sources.values():
        records += [(source.topic, k, v) for k, v in _valid_records(source, rng, 50)]
    rng.shuffle(records)
    records.insert(17, (pipeline.source("orders").topic, b'{"id":1}', b"not json"))
    _create_topics(kafka_bootstrap, pipeline)
    coordinates = _produce(kafka_bootstrap, records)

    checkpoints = job_lake / "checkpoints" / pipeline.name / "bronze"  # one per source stream

    def in_second_batch() -> bool:
        """Some stream committed batch 0 and has planned batch 1 (it is writing it now)."""
        return any((checkpoints / s / "commits" / "0").exists() and (checkpoints / s / "offsets" / "1").exists()
                   for s in pipeline.sources)

    first = _job(pipeline_file, job_lake, kafka_bootstrap, 20, tmp_path / "first.log")
    deadline = time.monotonic() + 300
    try:
        while not in_second_batch():
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no stream ever committed its first batch"
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.0))  # somewhere inside a batch
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the job, its Python workers and its Spark JVM
        first.wait(30)

    second = _job(pipeline_file, job_lake, kafka_bootstrap, 20, tmp_path / "second.log")
    try:
        assert second.wait(400) == 0, (tmp_path / "second.log").read_text()[-3000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    log_text = (tmp_path / "second.log").read_text()
    assert "done" in log_text and " batch " in log_text, "the restart found nothing left to do: the kill came too late"

    warehouse = job_lake / "warehouse"
    good: list[tuple] = []
    for source in pipeline.sources.values():
        path = warehouse / f"{pipeline.tables.bronze_schema}.db" / source.name
        good += [tuple(r) for r in spark.read.format("delta").load(str(path)).select("_topic", "_partition", "_offset").collect()]
    bad = spark.read.format("delta").load(str(warehouse / f"{pipeline.tables.bronze_schema}.db" / "_quarantine")).collect()
    assert len(good) == len(set(good)), f"duplicates after restart: {[c for c, n in Counter(good).items() if n > 1][:5]}"
    assert set(good) | {(r["topic"], r["partition"], r["offset"]) for r in bad} == set(coordinates)
    assert len(bad) == 1 and "value is not valid JSON" in bad[0]["reason"]


# --------------------------------------------------------------------------- the simulator, end to end


def _latest_by_key(rows: list[Any], source: Source) -> dict[tuple, dict[str, Any]]:
    """What bronze says each table holds: per key the latest by sequence, TOAST gaps filled from earlier versions."""
    state: dict[tuple, dict[str, Any] | None] = {}
    for row in sorted((r for r in rows if r["_sequence"] is not None), key=lambda r: r["_sequence"]):
        key = tuple(row["_key"][k] for k in source.primary_key)
        if row["_op"] == "d":
            state[key] = None
            continue
        if row["_op"] not in ("c", "r", "u"):
            continue
        image = row["_after"].asDict()
        for column in (row["_unavailable_columns"] or "").split(","):
            if column:
                image[column] = (state.get(key) or {}).get(column)
        state[key] = image
    return {k: v for k, v in state.items() if v is not None}


def _plain(value: Any) -> Any:
    """Datetimes as naive UTC: Spark hands back naive local time, the simulator aware UTC."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


@pytest.mark.kafka
def test_simulated_workload_end_to_end(spark: SparkSession, shop_pipeline: Pipeline, kafka_bootstrap: str, lake: Path) -> None:
    simulator = pytest.importorskip("testkit.simulator", reason="lakehouse/simulator.py is not there yet")
    pipeline = isolated_pipeline(shop_pipeline, "sim" + _tag())
    sim = simulator.simulate(pipeline, seed=4, events=300, schemas_enabled=True)
    produced = simulator.produce(sim.records, kafka_bootstrap)
    report = bronze.run_bronze(spark, pipeline, lake, kafka_bootstrap)
    assert report.records == produced and report.quarantined == 0
    per_topic = Counter(r.topic for r in sim.records)
    for source in pipeline.sources.values():
        rows = spark.table(bronze_table(pipeline, source)).collect()
        assert len(rows) == per_topic[source.topic]
        latest = _latest_by_key(rows, source)
        truth = {tuple(r[k] for k in source.primary_key): r for r in sim.truth[source.name]}
        assert set(latest) == set(truth), source.name
        for key, row in truth.items():
            assert {c: _plain(v) for c, v in latest[key].items()} == {c: _plain(v) for c, v in row.items()}, (source.name, key)


def test_bench_smoke(spark: SparkSession, shop_pipeline: Pipeline, kafka_bootstrap: str, lake: Path) -> None:
    pytest.importorskip("testkit.simulator", reason="the benchmark produces simulated events")
    from testkit.bench.ingest import bench_ingest

    result = bench_ingest(spark, shop_pipeline, lake, kafka_bootstrap, events=150, warm_rounds=1)
    assert result["records"] > 150 and result["cold_records"] > 150
    for key in ("raw_seconds", "raw_events_per_s", "ingest_seconds", "ingest_events_per_s", "ratio", "cold_ratio"):
        assert result[key] > 0, key
