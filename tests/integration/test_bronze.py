"""Bronze decoding and writes (lakehouse.bronze) on the real Spark session and real Delta, no Kafka.

- both fast passes (the JVM decoder and the SQL pass) are held to `debezium.decode_record` on
  valid, odd and fuzzed records;
- parse_batch's layout, undeclared topics, the old-key header of a primary-key change;
- a replayed micro-batch writes nothing twice, also after a partial write; the fast write
  counts the records and those left for Python.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from lakehouse import bronze
from lakehouse.bronze import parse as bronze_parse
from lakehouse.bronze import runner as bronze_runner
from lakehouse.bronze.debezium import UNAVAILABLE
from lakehouse.declaration import Pipeline, Source
from lakehouse.outcomes import DirectMailbox
from lakehouse.tables import (
    bronze_schema,
    bronze_table,
    quarantine_schema,
    quarantine_table,
)
from testkit.bench.ingest import isolated_pipeline
from tests.shop_views import five_tables
from tests.unit.test_debezium import (
    REJECTIONS,
    THINGS,
    change,
    decimal_b64,
    dumps,
    image_of,
    key_of,
    pg_source,
    thing,
)

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
    pipeline = isolated_pipeline(five_tables(shop_pipeline), "layout" + _tag())
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
    in every parser. The JVM pass decodes a header like a key (bare or wrapped), so a primary-key
    change is written with the rest of its batch; the SQL pass leaves every record with the header
    to Python; a header that is no key of the source is Python's to reject; a delete's header is
    not read."""
    wrapped = key_of(THINGS, {"id": 41}, schemas=True)
    records = [
        (change(THINGS, "c", after=thing(id=43, name=UNAVAILABLE), lsn=700),
         [("__debezium.context.taskId", b"0"), ("__debezium.oldkey", b'{"id":42}')]),
        (change(THINGS, "u", after=thing(id=44), lsn=701), []),
        (change(THINGS, "c", after=thing(id=45), lsn=702), [("__debezium.oldkey", wrapped)]),
        (change(THINGS, "c", after=thing(id=46), lsn=703), [("__debezium.oldkey", b'{"id":"x"}')]),
        (change(THINGS, "d", before=thing(id=47), lsn=704), [("__debezium.oldkey", b'not json')]),
    ]
    schema = KAFKA_SCHEMA + ", headers array<struct<key: string, value: binary>>"
    ts = datetime(2026, 1, 1)
    kafka = spark.createDataFrame([(*r, THINGS.topic, 0, i, ts, h) for i, (r, h) in enumerate(records)], schema)
    expected_fast = {"jvm": {0: True, 1: True, 2: True, 3: False, 4: True},
                     "sql": {0: False, 1: True, 2: False, 3: False, 4: False}}
    for kind, expected in expected_fast.items():
        fast = {r["_offset"]: r["_fast"] for r in _fast_pass(kind, spark, THINGS).apply(kafka).collect()}
        assert fast == expected, kind
    for parser in bronze.PARSERS:
        rows = {r["_offset"]: r for r in bronze.parse_source(THINGS, kafka, parser).collect()}
        assert rows[0]["_reason"] is None and rows[0]["_old_key"]["id"] == 42, parser
        assert rows[0]["_unavailable_columns"] == "name" and rows[1]["_old_key"] is None, parser
        assert rows[2]["_reason"] is None and rows[2]["_old_key"]["id"] == 41, parser
        assert rows[3]["_reason"].startswith("header __debezium.oldkey.id"), (parser, rows[3]["_reason"])
        assert rows[4]["_reason"] is None and rows[4]["_old_key"] is None, parser


# --------------------------------------------------------------------------- idempotent micro-batches


def test_replayed_batch_writes_nothing_twice(spark: SparkSession, shop_pipeline: Pipeline, tmp_path: Path) -> None:
    """A source stream's foreachBatch: the same batch id again (even after a partial write) adds nothing."""
    pipeline = isolated_pipeline(five_tables(shop_pipeline), "replay" + _tag())
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
        # the checkpoint Spark would leave: the query's id, batch `batch_id` planned, not committed
        checkpoint = tmp_path / f"{query_id}-{batch_id}-{_tag()}"
        (checkpoint / "offsets").mkdir(parents=True)
        (checkpoint / "offsets" / str(batch_id)).write_text("v1\n")
        (checkpoint / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
        mailbox = DirectMailbox(lambda outcome: bronze_runner._count_batch(report, outcome, lambda _m: None))
        handler = bronze_runner._SourceStream(pipeline, orders, "hybrid", checkpoint, mailbox)
        handler.reset(spark)
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


def test_the_fast_write_counts_the_records_and_those_left_for_python(spark: SparkSession, shop_pipeline: Pipeline) -> None:
    """What decides whether the Python pass runs is counted while the fast rows are written;
    a replay that Delta skips has no count, so the Python pass decides (never skipped)."""
    pipeline = isolated_pipeline(five_tables(shop_pipeline), "count" + _tag())
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


# --------------------------------------------------------------------------- kill -9 and restart


# --------------------------------------------------------------------------- the simulator, end to end


