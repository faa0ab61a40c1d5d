"""Decoding one Debezium record (lakehouse.bronze.debezium): pure Python, no Spark, no Kafka.

Messages are built here the way Debezium 3.6's PostgreSQL connector writes them through
Kafka Connect's JsonConverter (decimal.handling.mode=precise, time.precision.mode=adaptive),
bare and with `schemas.enable=true`, so the decoder is tested against the wire format.
"""

from __future__ import annotations

import base64
import decimal
import json
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakehouse.bronze.debezium import (
    DECODED_COLUMNS,
    OLD_KEY_HEADER,
    TOMBSTONE,
    UNAVAILABLE,
    decode_kafka_record,
    decode_record,
)
from lakehouse.declaration import Column, Source

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

THINGS = Source(
    name="things",
    topic="t.public.things",
    primary_key=("id",),
    columns=(
        Column("id", "bigint"),
        Column("small", "smallint"),
        Column("n", "int"),
        Column("price", "decimal(10,2)"),
        Column("big", "decimal(38,0)"),
        Column("ratio", "double"),
        Column("f", "float"),
        Column("flag", "boolean"),
        Column("name", "string"),
        Column("created_at", "timestamp"),
        Column("day", "date"),
    ),
)
LINES = Source(
    name="lines",
    topic="t.public.lines",
    primary_key=("order_id", "line_no"),
    columns=(Column("order_id", "bigint"), Column("line_no", "int"), Column("qty", "int")),
)

# --------------------------------------------------------------------------- a tiny Debezium encoder

_CONNECT = {"bigint": "int64", "int": "int32", "smallint": "int16", "double": "float64", "float": "float32",
            "boolean": "boolean", "string": "string"}


def decimal_b64(value: Decimal, scale: int) -> str:
    """Java BigInteger.toByteArray of the unscaled value, base64 (Connect Decimal)."""
    unscaled = int(value.scaleb(scale, context=decimal.Context(prec=80)))  # the default 28 digits would round
    length = ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) // 8
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def micros(value: datetime) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def wire(column: Column, value: Any) -> Any:
    """A Python value as the JSON converter writes it."""
    if value is None or value == UNAVAILABLE:
        return value
    if column.decimal_scale is not None:
        return decimal_b64(value, column.decimal_scale)
    if column.type == "timestamp":
        return micros(value)
    if column.type == "date":
        return (value - date(1970, 1, 1)).days
    return value


def field_schema(column: Column, name: str | None = None) -> dict[str, Any]:
    if column.decimal_scale is not None:
        return {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
                "parameters": {"scale": str(column.decimal_scale)}, "field": column.name}
    if column.type == "timestamp":
        return {"type": "int64", "optional": True, "name": name or "io.debezium.time.MicroTimestamp", "version": 1, "field": column.name}
    if column.type == "date":
        return {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1, "field": column.name}
    return {"type": _CONNECT[column.type], "optional": True, "field": column.name}


def key_schema(source: Source) -> dict[str, Any]:
    return {"type": "struct", "optional": False, "name": f"{source.topic}.Key",
            "fields": [field_schema(source.column(k)) for k in source.primary_key]}


def value_schema(source: Source, names: dict[str, str] | None = None) -> dict[str, Any]:
    row = [field_schema(c, (names or {}).get(c.name)) for c in source.columns]
    image = lambda f: {"type": "struct", "fields": row, "optional": True, "name": f"{source.topic}.Value", "field": f}  # noqa: E731
    return {
        "type": "struct", "optional": False, "name": f"{source.topic}.Envelope", "version": 2,
        "fields": [
            image("before"), image("after"),
            {"type": "struct", "fields": [{"type": "int64", "optional": True, "field": "lsn"}], "optional": False,
             "name": "io.debezium.connector.postgresql.Source", "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


def pg_source(table: str = "things", lsn: int = 33_000_000, ts_ms: int = 1_767_225_600_000, snapshot: str = "false", tx_id: int = 771) -> dict[str, Any]:
    return {
        "version": "3.6.3.Final", "connector": "postgresql", "name": "t", "ts_ms": ts_ms, "snapshot": snapshot,
        "db": "shop", "sequence": json.dumps([None, str(lsn)]), "ts_us": ts_ms * 1000, "ts_ns": ts_ms * 1_000_000,
        "schema": "public", "table": table, "txId": tx_id, "lsn": lsn, "xmin": None,
    }


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def key_of(source: Source, row: dict[str, Any], schemas: bool = False) -> bytes:
    payload = {k: wire(source.column(k), row[k]) for k in source.primary_key}
    return dumps({"schema": key_schema(source), "payload": payload}) if schemas else dumps(payload)


def image_of(source: Source, row: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if row is None else {c.name: wire(c, row.get(c.name)) for c in source.columns}


def change(
    source: Source, op: str, before: dict[str, Any] | None = None, after: dict[str, Any] | None = None,
    *, lsn: int = 33_000_000, schemas: bool = False, source_block: dict[str, Any] | None = None,
    names: dict[str, str] | None = None,
) -> tuple[bytes | None, bytes]:
    """(key, value) of one change as Debezium writes it."""
    keyed = after if after is not None else before
    block = source_block or pg_source(source.name, lsn=lsn)
    envelope = {"before": image_of(source, before), "after": image_of(source, after), "source": block,
                "transaction": None, "op": op, "ts_ms": block.get("ts_ms", 0) + 5,
                "ts_us": (block.get("ts_ms", 0) + 5) * 1000, "ts_ns": (block.get("ts_ms", 0) + 5) * 1_000_000}
    value = dumps({"schema": value_schema(source, names), "payload": envelope}) if schemas else dumps(envelope)
    key = None if keyed is None or op == "t" else key_of(source, keyed, schemas)
    return key, value


def thing(**overrides: Any) -> dict[str, Any]:
    row = {
        "id": 42, "small": -7, "n": 123456, "price": Decimal("1234.50"), "big": Decimal("-98765432109876543210"),
        "ratio": 0.25, "f": 1.5, "flag": True, "name": "Zoë «quoted» \"x\"",
        "created_at": datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC), "day": date(2026, 3, 1),
    }
    row.update(overrides)
    return row


def decode(source: Source, key: bytes | None, value: bytes | None, offset: int = 9) -> tuple[dict | None, str | None]:
    return decode_record(source, key, value, source.topic, 0, offset)


def ok(source: Source, key: bytes | None, value: bytes | None) -> dict[str, Any]:
    row, reason = decode(source, key, value)
    assert reason is None, reason
    assert row is not None
    return row


def rejected(source: Source, key: bytes | None, value: bytes | None) -> str:
    row, reason = decode(source, key, value)
    assert row is None, f"expected a rejection, got {row}"
    assert reason
    return reason


# --------------------------------------------------------------------------- valid records


@pytest.mark.parametrize("schemas", [False, True], ids=["bare", "schemas.enable"])
def test_create_event_decodes_every_type(schemas: bool) -> None:
    row_in = thing()
    key, value = change(THINGS, "c", after=row_in, lsn=5_000_123, schemas=schemas)
    row = ok(THINGS, key, value)
    assert set(row) == set(DECODED_COLUMNS)
    assert row["_after"] == row_in
    assert row["_key"] == {"id": 42}
    assert row["_before"] is None
    assert row["_op"] == "c"
    assert row["_sequence"] == Decimal(5_000_123 * 10 + 1)
    assert row["_source_lsn"] == 5_000_123
    assert row["_source_tx_id"] == 771
    assert row["_source_snapshot"] == "false"
    assert row["_source_ts_ms"] == 1_767_225_600_000
    assert row["_event_ts_ms"] == 1_767_225_600_005
    assert (row["_topic"], row["_partition"], row["_offset"]) == (THINGS.topic, 0, 9)
    assert (row["_raw_key"], row["_raw_value"]) == (key, value)
    assert row["_unavailable_columns"] is None


def test_bare_and_wrapped_decode_to_the_same_row() -> None:
    bare = ok(THINGS, *change(THINGS, "u", after=thing(), schemas=False))
    wrapped = ok(THINGS, *change(THINGS, "u", after=thing(), schemas=True))
    strip = lambda r: {k: v for k, v in r.items() if not k.startswith("_raw")}  # noqa: E731
    assert strip(bare) == strip(wrapped)


def test_delete_orders_before_create_at_the_same_lsn() -> None:
    """A primary-key update is delete(old) + create(new) at one LSN: the delete sorts first."""
    deleted = ok(THINGS, *change(THINGS, "d", before={"id": 42}, lsn=700))
    created = ok(THINGS, *change(THINGS, "c", after=thing(id=43), lsn=700))
    assert deleted["_op"] == "d" and deleted["_after"] is None
    assert deleted["_before"]["id"] == 42 and deleted["_before"]["name"] is None
    assert deleted["_sequence"] < created["_sequence"]


def test_primary_key_change_create_keeps_the_old_key_header() -> None:
    """The create half carries `__debezium.oldkey` (SimpleHeaderConverter text); it becomes `_old_key`."""
    key, value = change(LINES, "c", after={"order_id": 7, "line_no": 3, "qty": 1}, lsn=700)
    headers = [("__debezium.context.connectorName", b"shop"), (OLD_KEY_HEADER, b'{"order_id":7,"line_no":2}')]
    row, reason = decode_record(LINES, key, value, LINES.topic, 0, 1, headers)
    assert reason is None and row["_old_key"] == {"order_id": 7, "line_no": 2}
    assert ok(LINES, key, value)["_old_key"] is None  # no header, no old key
    deleted, _ = decode_record(LINES, *change(LINES, "d", before={"order_id": 7, "line_no": 2}, lsn=700), LINES.topic, 0, 0,
                               [("__debezium.newkey", b'{"order_id":7,"line_no":3}')])
    assert deleted["_old_key"] is None  # the delete half names the new key: nothing to carry over


@pytest.mark.parametrize("header, reason", [
    (b'{"order_id":7', "header __debezium.oldkey is not valid JSON"),
    (b'{"order_id":7}', "header __debezium.oldkey: fields do not match the primary key (order_id, line_no): missing line_no"),
    (b'{"order_id":"x","line_no":2}', "header __debezium.oldkey.order_id"),
])
def test_a_malformed_old_key_header_is_quarantined_with_the_header_named(header: bytes, reason: str) -> None:
    row, why = decode_record(LINES, *change(LINES, "c", after={"order_id": 7, "line_no": 3, "qty": 1}), LINES.topic, 0, 1,
                             [(OLD_KEY_HEADER, header)])
    assert row is None and why.startswith(reason), why


def test_tombstone_is_kept_without_sequence() -> None:
    row = ok(THINGS, key_of(THINGS, {"id": 42}), None)
    assert row["_op"] == TOMBSTONE
    assert row["_key"] == {"id": 42}
    assert row["_sequence"] is None and row["_after"] is None and row["_source_lsn"] is None
    assert row["_raw_value"] is None


def test_truncate_has_null_key() -> None:
    _, value = change(THINGS, "t", lsn=900)
    row = ok(THINGS, None, value)
    assert row["_op"] == "t" and row["_key"] is None
    assert row["_sequence"] == Decimal(9001)


def test_toast_placeholder_nulls_and_lists_columns() -> None:
    row = ok(THINGS, *change(THINGS, "u", after=thing(name=UNAVAILABLE, small=UNAVAILABLE)))
    assert row["_after"]["name"] is None and row["_after"]["small"] is None
    assert row["_unavailable_columns"] == "small,name"  # declared column order


def test_composite_key() -> None:
    row = ok(LINES, *change(LINES, "r", after={"order_id": 7, "line_no": 2, "qty": 3}))
    assert row["_key"] == {"order_id": 7, "line_no": 2}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (decimal_b64(Decimal("1234.50"), 2), Decimal("1234.50")),
        (decimal_b64(Decimal("-0.01"), 2), Decimal("-0.01")),
        (decimal_b64(Decimal("99999999.99"), 2), Decimal("99999999.99")),
        ("AA==", Decimal("0.00")),
        ("1234.5", Decimal("1234.50")),  # decimal.handling.mode=string
        ("-17.25", Decimal("-17.25")),
        (1234.5, Decimal("1234.50")),  # decimal.handling.mode=double
        (17, Decimal("17.00")),
        (1.005, Decimal("1.01")),  # half-up to the declared scale
        ("1e3", Decimal("1000.00")),
    ],
)
def test_decimal_encodings(raw: Any, expected: Decimal) -> None:
    after = image_of(THINGS, thing())
    after["price"] = raw
    value = dumps({"before": None, "after": after, "source": pg_source(), "op": "c", "ts_ms": 1})
    row = ok(THINGS, key_of(THINGS, {"id": 42}), value)
    assert row["_after"]["price"] == expected


def test_decimal_scale_zero_digits_are_numbers_but_schema_says_bytes() -> None:
    """Bare: '1234' for decimal(38,0) is string mode; with the Connect schema it is base64."""
    after = image_of(THINGS, thing())
    after["big"] = "1234"
    bare = dumps({"before": None, "after": after, "source": pg_source(), "op": "c", "ts_ms": 1})
    assert ok(THINGS, key_of(THINGS, {"id": 42}), bare)["_after"]["big"] == Decimal(1234)
    wrapped = dumps({"schema": value_schema(THINGS), "payload": json.loads(bare)})
    assert ok(THINGS, key_of(THINGS, {"id": 42}), wrapped)["_after"]["big"] == Decimal(int.from_bytes(base64.b64decode("1234"), "big", signed=True))


@pytest.mark.parametrize(
    ("raw", "name", "expected"),
    [
        (1_767_225_600_123_456, None, datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)),
        (-1, None, datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
        ("2026-01-01T00:00:00.123456Z", None, datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)),  # ZonedTimestamp
        ("2026-01-01T02:30:00+02:30", None, datetime(2026, 1, 1, 0, 0, tzinfo=UTC)),
        ("2026-01-01T00:00:00.123456789Z", None, datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)),
        (1_767_225_600_123, "io.debezium.time.Timestamp", datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)),
        (1_767_225_600_123_456_789, "io.debezium.time.NanoTimestamp", datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)),
    ],
)
def test_timestamp_encodings(raw: Any, name: str | None, expected: datetime) -> None:
    after = image_of(THINGS, thing())
    after["created_at"] = raw
    envelope = {"before": None, "after": after, "source": pg_source(), "op": "c", "ts_ms": 1}
    value = dumps({"schema": value_schema(THINGS, {"created_at": name}), "payload": envelope}) if name else dumps(envelope)
    assert ok(THINGS, key_of(THINGS, {"id": 42}), value)["_after"]["created_at"] == expected


def test_dates_as_days_or_iso() -> None:
    for raw in (20513, "2026-03-01"):
        after = image_of(THINGS, thing())
        after["day"] = raw
        value = dumps({"before": None, "after": after, "source": pg_source(), "op": "c", "ts_ms": 1})
        assert ok(THINGS, key_of(THINGS, {"id": 42}), value)["_after"]["day"] == date(2026, 3, 1)


def test_undeclared_columns_are_ignored() -> None:
    """A column added at the source must not stop ingest (the raw value still holds it)."""
    after = image_of(THINGS, thing())
    after["brand_new"] = {"nested": [1, 2]}
    value = dumps({"before": None, "after": after, "source": pg_source(), "op": "c", "ts_ms": 1})
    assert ok(THINGS, key_of(THINGS, {"id": 42}), value)["_after"] == thing()


def test_mysql_and_ts_ms_sequences() -> None:
    mysql = Source(name="m", topic="m", primary_key=("id",), columns=(Column("id", "bigint"),), sequence="mysql")
    block = {"connector": "mysql", "ts_ms": 10, "file": "mysql-bin.000003", "pos": 154, "row": 2, "snapshot": False}
    row = ok(mysql, *change(mysql, "c", after={"id": 1}, source_block=block))
    assert row["_sequence"] == Decimal(3 * 10**20 + 154 * 10**6 + 2)
    assert row["_source_file"] == "mysql-bin.000003" and row["_source_snapshot"] == "false"
    by_time = Source(name="s", topic="s", primary_key=("id",), columns=(Column("id", "bigint"),), sequence="ts_ms")
    row, reason = decode_record(by_time, *change(by_time, "c", after={"id": 1}, source_block={"ts_ms": 77}), "s", 3, 11)
    assert reason is None and row["_sequence"] == Decimal(77 * 10**24 + 3 * 10**18 + 11)


# --------------------------------------------------------------------------- quarantine reasons


def _value(**changes: Any) -> bytes:
    envelope = {"before": None, "after": image_of(THINGS, thing()), "source": pg_source(), "op": "c", "ts_ms": 1}
    envelope.update(changes)
    return dumps(envelope)


def _after(**changes: Any) -> bytes:
    after = image_of(THINGS, thing())
    after.update(changes)
    return _value(after=after)


KEY = key_of(THINGS, {"id": 42})

REJECTIONS = [
    ("value not JSON", KEY, b"this is not json", "value is not valid JSON: Expecting value at character 0"),
    ("truncated JSON", KEY, _value()[:40], "value is not valid JSON"),
    ("not UTF-8", KEY, b'{"op":"\xff"}', "value is not UTF-8 text: invalid byte at position 7"),
    ("JSON NaN", KEY, b'{"op":NaN}', "value is not valid JSON: NaN"),
    ("value is an array", KEY, b"[1,2]", "value: expected a Debezium envelope"),
    ("op missing", KEY, _value(op=None), "value.op is missing"),
    ("op unknown", KEY, _value(op="x"), "value.op: 'x' is not a Debezium operation (expected one of c, r, u, d, t)"),
    ("op not a string", KEY, _value(op=1), "value.op: 1 is not a string"),
    ("source missing", KEY, _value(source=None), "value.source is missing"),
    ("source not an object", KEY, _value(source="pg"), "value.source: expected an object, got 'pg'"),
    ("lsn missing", KEY, _value(source={"ts_ms": 1}), "value.source.lsn is missing (the 'postgres' sequence rule needs it)"),
    ("lsn wrong type", KEY, _value(source={"lsn": "12"}), "value.source.lsn: '12' is not a bigint"),
    ("lsn negative", KEY, _value(source={"lsn": -4}), "value.source: no valid postgres sequence"),
    ("snapshot wrong type", KEY, _value(source={**pg_source(), "snapshot": 3}), "value.source.snapshot: 3 is not a string or boolean"),
    ("after missing for c", KEY, _value(after=None), "value.after is null, but op 'c' needs the new row image"),
    ("before missing for d", KEY, _value(op="d", after=None), "value.before is null, but op 'd' needs"),
    ("after not an object", KEY, _value(after=[1]), "value.after: expected a row object, got a JSON array"),
    ("bigint gets text", KEY, _after(n="abc"), "value.after.n: 'abc' is not a int"),
    ("bigint gets fraction", KEY, _after(n=1.5), "value.after.n: 1.5 is not a int"),
    ("int out of range", KEY, _after(n=2**31), "value.after.n: 2147483648 is out of range for int"),
    ("smallint out of range", KEY, _after(small=40000), "value.after.small: 40000 is out of range for smallint"),
    ("decimal gets text", KEY, _after(price="abc"), "value.after.price: 'abc' is not a decimal(10,2)"),
    ("decimal undecodable base64", KEY, _after(price="A"), "value.after.price: 'A' is not a decimal(10,2)"),
    ("decimal too wide", KEY, _after(price=decimal_b64(Decimal("100000000.00"), 2)), "value.after.price: 'AlQL5AA=' (100000000.00) does not fit decimal(10,2)"),
    ("decimal number too wide", KEY, _after(price=123456789012.5), "value.after.price: 123456789012.5 (123456789012.50) does not fit decimal(10,2)"),
    ("decimal gets boolean", KEY, _after(price=True), "value.after.price: true is not a decimal(10,2)"),
    ("double gets text", KEY, _after(ratio="0.5"), "value.after.ratio: '0.5' is not a double"),
    ("float overflow", KEY, _after(f=1e39), "value.after.f: 1E+39 is out of range for float"),
    ("boolean gets number", KEY, _after(flag=1), "value.after.flag: 1 is not a boolean"),
    ("string gets number", KEY, _after(name=5), "value.after.name: 5 is not a string"),
    ("string gets object", KEY, _after(name={"a": 1}), "value.after.name: a JSON object is not a string"),
    ("timestamp garbage", KEY, _after(created_at="yesterday"), "value.after.created_at: 'yesterday' is not a timestamp"),
    ("timestamp impossible date", KEY, _after(created_at="2026-02-30T00:00:00Z"), "value.after.created_at: '2026-02-30T00:00:00Z' is not a timestamp"),
    ("timestamp out of range", KEY, _after(created_at=10**18), "value.after.created_at: 1000000000000000000 is out of range for a timestamp"),
    ("date garbage", KEY, _after(day="03/01/2026"), "value.after.day: '03/01/2026' is not a date"),
    ("key not JSON", b"\x00\x01", _value(), "key is not valid JSON"),
    ("key is a number", b"42", _value(), "key: expected a JSON object with the primary key (id), got 42"),
    ("key missing field", b'{"other":1}', _value(), "key: fields do not match the primary key (id): missing id; unexpected other"),
    ("key extra field", b'{"id":42,"x":1}', _value(), "key: fields do not match the primary key (id): unexpected x"),
    ("key null field", b'{"id":null}', _value(), "key.id is null; a primary key column cannot be null"),
    ("key wrong type", b'{"id":"42"}', _value(), "key.id: '42' is not a bigint"),
    ("key null for c", None, _value(), "key is null, but op 'c' needs the primary key (id)"),
    ("key disagrees with after", b'{"id":41}', _value(), "key does not match value.after: key.id = 41 but value.after.id = 42"),
    ("key disagrees with before", b'{"id":41}', _value(op="d", after=None, before={"id": 42}), "key does not match value.before: key.id = 41 but value.before.id = 42"),
    ("pk placeholder in after", KEY, _after(id=UNAVAILABLE), "key does not match value.after: key.id = 42 but value.after.id = null"),
    ("tombstone without key", None, None, "tombstone (null value) with a null key"),
    ("truncate with key", KEY, _value(op="t", after=None), "op 't' (truncate) must have a null key"),
    ("truncate with image", None, _value(op="t"), "op 't' (truncate) carries no row image, but value.after is a JSON object"),
    ("lone surrogate escape", KEY, _value().replace(b'"Zo', b'"\\ud800Zo'), "value.after.name: '\\ud800Zo\u00eb \u00abquoted\u00bb \"x\"' is not valid Unicode (lone surrogate at character 0)"),
    ("deeply nested", KEY, b"[" * 100_000 + b"]" * 100_000, "JSON nested too deeply"),
]


@pytest.mark.parametrize(("key", "value", "reason"), [r[1:] for r in REJECTIONS], ids=[r[0] for r in REJECTIONS])
def test_rejections_name_the_field_and_the_problem(key: bytes | None, value: bytes | None, reason: str) -> None:
    assert reason in rejected(THINGS, key, value)


def test_undeclared_topic(shop_pipeline) -> None:
    pipeline = shop_pipeline
    name, row, reason = decode_kafka_record(pipeline, b'{"id":1}', b"{}", "shop.public.ghosts", 0, 1)
    assert (name, row) == (None, None)
    assert reason == "topic 'shop.public.ghosts' is declared by no source of pipeline 'shop'"
    name, row, reason = decode_kafka_record(pipeline, None, None, "shop.public.customers", 0, 1)
    assert name == "customers" and reason and reason.startswith("tombstone")


def test_simulator_codec_output_decodes_if_present() -> None:
    """Cross-check with the simulator's encoder (another implementation of the wire format)."""
    codec_mod = pytest.importorskip("testkit.debezium_format")
    codec = codec_mod.EnvelopeCodec(THINGS, "t.public.things", schemas_enabled=True)
    info = codec_mod.source_info(server="t", db="shop", schema="public", table="things", commit_us=1_767_225_600_000_000,
                                 snapshot="false", lsn=4242, last_commit_lsn=4000, tx_id=9)
    row_in = thing()
    value = codec.value("u", None, row_in, info, ts_us=1_767_225_600_000_001, ts_ns=1_767_225_600_000_001_000)
    row = ok(THINGS, codec.key(row_in), value)
    assert row["_after"] == row_in and row["_sequence"] == Decimal(42421)


# --------------------------------------------------------------------------- properties


def _rows() -> st.SearchStrategy[dict[str, Any]]:
    timestamps = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC))
    return st.fixed_dictionaries({
        "id": st.integers(-(2**63), 2**63 - 1),
        "small": st.none() | st.integers(-(2**15), 2**15 - 1),
        "n": st.none() | st.integers(-(2**31), 2**31 - 1),
        "price": st.none() | st.decimals(min_value=Decimal("-99999999.99"), max_value=Decimal("99999999.99"), places=2),
        "big": st.none() | st.integers(-(10**38) + 1, 10**38 - 1).map(Decimal),  # st.decimals rounds in a 28-digit context
        "ratio": st.none() | st.floats(allow_nan=False, allow_infinity=False),
        "f": st.none() | st.floats(width=32, allow_nan=False, allow_infinity=False),
        "flag": st.none() | st.booleans(),
        "name": st.none() | st.text(max_size=30),
        "created_at": st.none() | timestamps,
        "day": st.none() | st.dates(),
    })


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row=_rows(), schemas=st.booleans(), op=st.sampled_from(["c", "r", "u"]), lsn=st.integers(0, 2**63 - 1))
def test_any_valid_row_round_trips(row: dict[str, Any], schemas: bool, op: str, lsn: int) -> None:
    decoded = ok(THINGS, *change(THINGS, op, after=row, lsn=lsn, schemas=schemas))
    assert decoded["_after"] == row
    assert decoded["_sequence"] == Decimal(lsn * 10 + 1)


@settings(max_examples=300, deadline=None)
@given(key=st.none() | st.binary(max_size=40), value=st.none() | st.binary(max_size=200))
def test_random_bytes_never_raise(key: bytes | None, value: bytes | None) -> None:
    row, reason = decode(THINGS, key, value)
    assert (row is None) != (reason is None)
    if reason is not None:
        assert reason.split(" ")[0].rstrip(":") in {"key", "value", "tombstone", "record"} or reason.startswith("key.")


@settings(max_examples=200, deadline=None)
@given(
    field=st.sampled_from([c.name for c in THINGS.columns]),
    junk=st.one_of(st.text(max_size=12), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
                   st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
)
def test_wrong_values_are_rejected_or_decoded_never_mangled(field: str, junk: Any) -> None:
    """Whatever a field holds, the outcome is a typed value or a reason naming that field."""
    row, reason = decode(THINGS, KEY, _after(**{field: junk}))
    if reason is not None:
        assert reason.startswith(f"value.after.{field}") or reason.startswith("key does not match value.after")
    else:
        assert row is not None and (field in row["_after"])
