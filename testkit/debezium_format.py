"""How Debezium's PostgreSQL connector encodes a change, byte for byte, with Kafka Connect's JsonConverter.

The simulator writes records through this module so that everything downstream (bronze parsing,
sequences, TOAST handling) is exercised against the real wire format, not a convenient imitation.
Facts encoded here (Debezium 3.x defaults, checked against real connector output):

- key: the primary-key columns; value: the envelope `before, after, source, transaction, op,
  ts_ms, ts_us, ts_ns`; with `schemas.enable=true` both are wrapped as `{"schema":..,"payload":..}`;
- `decimal.handling.mode=precise`: `org.apache.kafka.connect.data.Decimal`, base64 of the
  big-endian two's-complement unscaled value (Java `BigInteger.toByteArray`), scale from the type;
- `time.precision.mode=adaptive`: `timestamp` -> `io.debezium.time.MicroTimestamp` (epoch micros),
  `date` -> `io.debezium.time.Date` (epoch days);
- JSON as Jackson writes it: compact, UTF-8, fields in schema order;
- the primary-key-change headers go through Connect's default SimpleHeaderConverter, which
  renders the key Struct as `{"id":1}` (strings quoted, decimals as plain numbers).
"""

from __future__ import annotations

import base64
import json
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any, Mapping

from lakehouse.declaration import Column, Source

DEBEZIUM_VERSION = "3.6.3.Final"
CONNECTOR = "postgresql"
UNAVAILABLE_VALUE = "__debezium_unavailable_value"  # unavailable.value.placeholder default
NEW_KEY_HEADER = "__debezium.newkey"
OLD_KEY_HEADER = "__debezium.oldkey"
SNAPSHOT_MARKERS = "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_EPOCH_DATE = date(1970, 1, 1)
_CONNECT_TYPES = {
    "bigint": "int64",
    "int": "int32",
    "smallint": "int16",
    "string": "string",
    "double": "float64",
    "float": "float32",
    "boolean": "boolean",
}

Row = Mapping[str, Any]


# --------------------------------------------------------------------------- logical values


def decimal_bytes(value: Decimal, scale: int) -> bytes:
    """The unscaled value as Java's BigInteger.toByteArray: minimal big-endian two's complement."""
    number = unscaled(value, scale)
    length = ((number if number >= 0 else ~number).bit_length() + 8) // 8
    return number.to_bytes(length, "big", signed=True)


def unscaled(value: Decimal, scale: int) -> int:
    """value * 10**scale exactly (Decimal arithmetic would round beyond 28 digits; decimal(38,s) needs 38)."""
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"{value} is not a finite number")
    number = int("".join(map(str, digits)) or "0")
    shift = exponent + scale
    if shift >= 0:
        number *= 10**shift
    elif number % 10**-shift:
        raise ValueError(f"{value} has more than {scale} decimal places")
    else:
        number //= 10**-shift
    return -number if sign else number


def encode_decimal(value: Decimal, scale: int) -> str:
    """A decimal as the JSON converter writes Connect's Decimal: base64 of `decimal_bytes`."""
    return base64.b64encode(decimal_bytes(value, scale)).decode("ascii")


def epoch_micros(value: datetime) -> int:
    """MicroTimestamp: a naive datetime is taken as UTC (PostgreSQL `timestamp` has no zone)."""
    aware = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    delta = aware - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def epoch_days(value: date) -> int:
    return (value - _EPOCH_DATE).days


def connect_value(column: Column, value: Any) -> Any:
    """A Python column value as it appears in the JSON payload (the TOAST placeholder passes as is)."""
    if value is None or value == UNAVAILABLE_VALUE:
        return value
    if column.decimal_scale is not None:
        return encode_decimal(value, column.decimal_scale)
    if column.type == "timestamp":
        return epoch_micros(value)
    if column.type == "date":
        return epoch_days(value)
    return value


def header_text(column: Column, value: Any) -> str:
    """One Struct field as Connect's `Values.append(embedded=True)` writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, Decimal):
        return str(value)  # the Struct holds a BigDecimal, printed as a number
    return str(connect_value(column, value))


# --------------------------------------------------------------------------- Connect schemas


def field_schema(column: Column, optional: bool) -> dict[str, Any]:
    """The Connect schema of one column, as Debezium declares it."""
    if column.decimal_scale is not None:
        precision = column.type[column.type.index("(") + 1 : column.type.index(",")]
        return {
            "type": "bytes",
            "optional": optional,
            "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1,
            "parameters": {"scale": str(column.decimal_scale), "connect.decimal.precision": precision},
            "field": column.name,
        }
    if column.type == "timestamp":
        return {"type": "int64", "optional": optional, "name": "io.debezium.time.MicroTimestamp", "version": 1, "field": column.name}
    if column.type == "date":
        return {"type": "int32", "optional": optional, "name": "io.debezium.time.Date", "version": 1, "field": column.name}
    return {"type": _CONNECT_TYPES[column.type], "optional": optional, "field": column.name}


def _source_schema() -> dict[str, Any]:
    def f(name: str, typ: str, optional: bool) -> dict[str, Any]:
        return {"type": typ, "optional": optional, "field": name}

    snapshot = {
        "type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
        "parameters": {"allowed": SNAPSHOT_MARKERS}, "default": "false", "field": "snapshot",
    }
    fields = [
        f("version", "string", False), f("connector", "string", False), f("name", "string", False),
        f("ts_ms", "int64", False), snapshot, f("db", "string", False), f("sequence", "string", True),
        f("ts_us", "int64", True), f("ts_ns", "int64", True), f("schema", "string", False),
        f("table", "string", False), f("txId", "int64", True), f("lsn", "int64", True), f("xmin", "int64", True),
    ]
    return {"type": "struct", "fields": fields, "optional": False, "name": "io.debezium.connector.postgresql.Source", "field": "source"}


def _transaction_schema() -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [
            {"type": "string", "optional": False, "field": "id"},
            {"type": "int64", "optional": False, "field": "total_order"},
            {"type": "int64", "optional": False, "field": "data_collection_order"},
        ],
        "optional": True,
        "name": "event.block",
        "version": 1,
        "field": "transaction",
    }


def key_schema(source: Source, schema_name: str) -> dict[str, Any]:
    fields = [field_schema(source.column(k), optional=False) for k in source.primary_key]
    return {"type": "struct", "fields": fields, "optional": False, "name": f"{schema_name}.Key"}


def value_schema(source: Source, schema_name: str) -> dict[str, Any]:
    """The Envelope schema (version 2: with ts_us/ts_ns) of a table."""
    row_fields = [field_schema(c, optional=c.name not in source.primary_key) for c in source.columns]

    def image(field: str) -> dict[str, Any]:
        return {"type": "struct", "fields": row_fields, "optional": True, "name": f"{schema_name}.Value", "field": field}

    fields = [
        image("before"), image("after"), _source_schema(), _transaction_schema(),
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
        {"type": "int64", "optional": True, "field": "ts_us"},
        {"type": "int64", "optional": True, "field": "ts_ns"},
    ]
    return {"type": "struct", "fields": fields, "optional": False, "name": f"{schema_name}.Envelope", "version": 2}


# --------------------------------------------------------------------------- codec


def _json(value: Any) -> bytes:
    """Jackson's output: compact, non-ASCII written as UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class EnvelopeCodec:
    """Encodes keys, values and key headers of one captured table.

    `schema_name` is Debezium's `<topic.prefix>.<schema>.<table>`, which names the Key, Value
    and Envelope schemas.
    """

    def __init__(self, source: Source, schema_name: str, schemas_enabled: bool) -> None:
        self.source = source
        self.schemas_enabled = schemas_enabled
        self._columns = source.columns
        self._key_columns = tuple(source.column(k) for k in source.primary_key)
        self._key_schema = _json(key_schema(source, schema_name))
        self._value_schema = _json(value_schema(source, schema_name))

    def image(self, row: Row | None) -> dict[str, Any] | None:
        """A row image (`before`/`after`) in column order; missing columns are null."""
        if row is None:
            return None
        return {c.name: connect_value(c, row.get(c.name)) for c in self._columns}

    def key(self, row: Row) -> bytes:
        payload = _json({c.name: connect_value(c, row[c.name]) for c in self._key_columns})
        return self._wrap(self._key_schema, payload)

    def key_header(self, row: Row) -> bytes:
        """`__debezium.newkey`/`oldkey` header bytes (SimpleHeaderConverter rendering of the key Struct)."""
        parts = (f'"{c.name}":{header_text(c, row[c.name])}' for c in self._key_columns)
        return ("{" + ",".join(parts) + "}").encode("utf-8")

    def value(self, op: str, before: Row | None, after: Row | None, source_info: dict[str, Any], ts_us: int, ts_ns: int) -> bytes:
        envelope = {
            "before": self.image(before),
            "after": self.image(after),
            "source": source_info,
            "transaction": None,
            "op": op,
            "ts_ms": ts_us // 1000,
            "ts_us": ts_us,
            "ts_ns": ts_ns,
        }
        return self._wrap(self._value_schema, _json(envelope))

    def _wrap(self, schema: bytes, payload: bytes) -> bytes:
        if not self.schemas_enabled:
            return payload
        return b'{"schema":' + schema + b',"payload":' + payload + b"}"


def source_info(
    *,
    server: str,
    db: str,
    schema: str,
    table: str,
    commit_us: int,
    snapshot: str,
    lsn: int,
    last_commit_lsn: int | None,
    tx_id: int,
) -> dict[str, Any]:
    """The PostgreSQL `source` block, fields in the connector's order.

    `sequence` is the JSON string `[last commit LSN, LSN]`; the first is null until the connector
    has seen a commit (snapshot records, the first streamed transaction).
    """
    sequence = json.dumps([None if last_commit_lsn is None else str(last_commit_lsn), str(lsn)], separators=(",", ":"))
    return {
        "version": DEBEZIUM_VERSION,
        "connector": CONNECTOR,
        "name": server,
        "ts_ms": commit_us // 1000,
        "snapshot": snapshot,
        "db": db,
        "sequence": sequence,
        "ts_us": commit_us,
        "ts_ns": commit_us * 1000,
        "schema": schema,
        "table": table,
        "txId": tx_id,
        "lsn": lsn,
        "xmin": None,
        "origin": None,  # Debezium 3.6: the replication origin, null for changes made directly
        "origin_lsn": None,
    }


# --------------------------------------------------------------------------- Kafka's default partitioner


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (signed 32-bit result), used by the Java producer's default partitioner."""
    mask = 0xFFFFFFFF
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def default_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka Connect's producer picks for a keyed record: toPositive(murmur2) % n."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
