"""Decoding one Debezium Kafka record against a declared `Source`: the exact rules, in plain Python.

This module is the specification of bronze parsing. `decode_record` turns the raw key and
value bytes of one Kafka record into a bronze row (typed like `tables.bronze_schema`) or into
a specific reason why the record must go to quarantine. It needs no Spark, so every rule is
unit-tested directly. `lakehouse.bronze` evaluates the common, unambiguous shapes of these
rules in Spark SQL for speed and sends every other record through this function, so a
quarantine reason always comes from here.

What is accepted (Debezium 3.x, Kafka Connect's JsonConverter):

- key and value either bare or wrapped as `{"schema": .., "payload": ..}` (schemas.enable);
  with a wrapper, the Connect field schemas decide ambiguous encodings (decimal bytes vs
  decimal strings, timestamp units);
- a null value is a tombstone (kept, `_op = 'tombstone'`, no sequence); it needs a key;
- `op` one of c, r, u, d, t; `t` (truncate) has a null key and no row images;
- the key holds exactly the primary-key columns, non-null, and equals the primary key of
  every non-null row image (`before`, `after`);
- column values by declared type: integers as JSON integers within range; double/float as
  JSON numbers; booleans; strings as JSON strings; decimal(p,s) as base64 big-endian
  two's-complement unscaled bytes (decimal.handling.mode=precise), as a JSON number
  (mode=double) or a numeric string (mode=string), rounded half-up to the scale and
  rejected when wider than the precision; timestamp as epoch microseconds
  (MicroTimestamp; millis/nanos when the Connect schema says Timestamp/NanoTimestamp) or an
  ISO-8601 string with an offset (ZonedTimestamp); date as epoch days or `YYYY-MM-DD`;
- Debezium's TOAST placeholder `__debezium_unavailable_value` in a row image: the column is
  set null and listed in `_unavailable_columns` (for `after`);
- columns present in an image but not declared are ignored (the raw value keeps them), so a
  column added at the source does not stop ingest;
- the Kafka header `__debezium.oldkey` (Connect's SimpleHeaderConverter rendering of the old
  key, `{"id":1}`), which Debezium puts on the create half of a primary-key change, decoded
  like a key into `_old_key`: silver takes the moved row's TOASTed columns from the old key.

Ambiguity left by bare (schemaless) JSON: a digits-only string for a decimal with scale 0
may be base64 (precise mode) or a number (string mode); it is read as a number. With
scale > 0 Debezium's string mode always prints the point, so digits-only means base64.
Wrapped messages carry the schema and are never ambiguous.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation, localcontext
from typing import Any, Mapping, Sequence

from lakehouse import ordering
from lakehouse.declaration import Column, Pipeline, Source

UNAVAILABLE = "__debezium_unavailable_value"
OPS = ("c", "r", "u", "d", "t")
TOMBSTONE = "tombstone"

DECIMAL_LOGICAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
MILLIS_TIMESTAMPS = ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp")
MICROS_TIMESTAMPS = ("io.debezium.time.MicroTimestamp",)
NANOS_TIMESTAMPS = ("io.debezium.time.NanoTimestamp",)
STRING_TYPES = ("string",)
NUMBER_TYPES = ("double", "float", "float64", "float32")

INT_RANGES = {
    "smallint": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
FLOAT_MAX = 3.4028234663852886e38
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
EPOCH_DATE = date(1970, 1, 1)
MIN_MICROS = -62135596800000000  # 0001-01-01T00:00:00Z
MAX_MICROS = 253402300799999999  # 9999-12-31T23:59:59.999999Z
MIN_DAYS = -719162  # 0001-01-01
MAX_DAYS = 2932896  # 9999-12-31

# ASCII-only patterns: Python's \d also matches other scripts' digits, Spark's does not.
NUMERIC = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$")
DIGITS = re.compile(r"^[0-9]+$")
BASE64 = re.compile(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")
ISO_TIMESTAMP = re.compile(
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})?$"
)
ISO_DATE = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})$")
DECIMAL_TYPE = re.compile(r"^decimal\((\d+),(\d+)\)$")

# Bronze columns this module fills; the runner adds `_kafka_ts` and `_ingested_at`.
DECODED_COLUMNS = (
    "_topic", "_partition", "_offset", "_raw_key", "_raw_value", "_op", "_key", "_before", "_after",
    "_source_ts_ms", "_source_lsn", "_source_tx_id", "_source_snapshot", "_source_file", "_source_pos",
    "_source_row", "_event_ts_ms", "_unavailable_columns", "_sequence", "_old_key",
)
OLD_KEY_HEADER = "__debezium.oldkey"

Headers = Sequence[tuple[str, bytes | None]] | None  # Kafka record headers (name, value)
FieldSchemas = Mapping[str, tuple[str | None, str | None]]  # column -> (Connect name, Connect type)
Row = dict[str, Any]


class Rejected(Exception):
    """A record that must go to quarantine; the message is the specific reason."""


# --------------------------------------------------------------------------- entry points


def decode_record(
    source: Source,
    key: bytes | None,
    value: bytes | None,
    topic: str,
    partition: int,
    offset: int,
    headers: Headers = None,
) -> tuple[Row | None, str | None]:
    """One Kafka record of `source`'s topic -> (bronze row, None) or (None, reason).

    The row holds every bronze column except `_kafka_ts` and `_ingested_at` (Kafka and
    the writer supply those); `_key`, `_before`, `_after` and `_old_key` are dicts over the
    declared columns. `headers`: the record's Kafka headers as (name, bytes) pairs; only
    `__debezium.oldkey` is read. Never raises for bad input: every problem becomes a reason
    naming the field, the offending value and the expectation.
    """
    key = _as_bytes(key)
    value = _as_bytes(value)
    try:
        row = _decode(source, key, value, partition, offset)
        if row["_op"] in ("c", "r", "u"):
            row["_old_key"] = _old_key(source, headers)
    except Rejected as exc:
        return None, str(exc)
    except RecursionError:
        return None, "record: JSON nested too deeply to decode"
    row.update(_topic=topic, _partition=partition, _offset=offset, _raw_key=key, _raw_value=value)
    return row, None


def decode_kafka_record(
    pipeline: Pipeline,
    key: bytes | None,
    value: bytes | None,
    topic: str,
    partition: int,
    offset: int,
) -> tuple[str | None, Row | None, str | None]:
    """Like `decode_record`, choosing the source by topic: (source name or None, row, reason)."""
    source = source_for_topic(pipeline, topic)
    if source is None:
        return None, None, unknown_topic_reason(pipeline, topic)
    row, reason = decode_record(source, key, value, topic, partition, offset)
    return source.name, row, reason


def source_for_topic(pipeline: Pipeline, topic: str) -> Source | None:
    for source in pipeline.sources.values():
        if source.topic == topic:
            return source
    return None


def unknown_topic_reason(pipeline: Pipeline, topic: str) -> str:
    """The quarantine reason for a record on a topic no source declares (SQL builds the same)."""
    return f"topic '{topic}' is declared by no source of pipeline '{pipeline.name}'"


# --------------------------------------------------------------------------- the record


def _decode(source: Source, key: bytes | None, value: bytes | None, partition: int, offset: int) -> Row:
    key_doc, key_schema = _unwrap(_parse_json("key", key)) if key is not None else (None, None)
    env, value_schema = _unwrap(_parse_json("value", value)) if value is not None else (None, None)
    if env is None:  # a tombstone: Kafka null value (or a wrapper whose payload is null)
        if key_doc is None:
            raise Rejected("tombstone (null value) with a null key: nothing identifies the deleted row")
        return _empty_row(TOMBSTONE, _decode_key(source, key_doc, key_schema))
    if not isinstance(env, dict):
        raise Rejected(f"value: expected a Debezium envelope (a JSON object with op, source, before, after), got {_show(env)}")
    op = _op(env)
    src = env.get("source")
    if src is None:
        raise Rejected("value.source is missing (every Debezium change carries its source block)")
    if not isinstance(src, dict):
        raise Rejected(f"value.source: expected an object, got {_show(src)}")
    if op == "t":
        if key_doc is not None:
            raise Rejected(f"op 't' (truncate) must have a null key, got key {_show_json(key_doc)}")
        for image in ("before", "after"):
            if env.get(image) is not None:
                raise Rejected(f"op 't' (truncate) carries no row image, but value.{image} is {_show(env[image])}")
        key_row = None
    else:
        if key_doc is None:
            raise Rejected(f"key is null, but op '{op}' needs the primary key ({', '.join(source.primary_key)})")
        key_row = _decode_key(source, key_doc, key_schema)
    before, _ = _image(source, env, "before", value_schema, key_row)
    after, unavailable = _image(source, env, "after", value_schema, key_row)
    if op in ("c", "r", "u") and after is None:
        raise Rejected(f"value.after is null, but op '{op}' needs the new row image")
    if op == "d" and before is None:
        raise Rejected("value.before is null, but op 'd' needs the deleted row's key in the before image")
    row = _empty_row(op, key_row)
    row.update(
        _before=before,
        _after=after,
        _source_ts_ms=_typed_field(src, "ts_ms", "value.source", "bigint"),
        _source_lsn=_typed_field(src, "lsn", "value.source", "bigint"),
        _source_tx_id=_typed_field(src, "txId", "value.source", "bigint"),
        _source_snapshot=_snapshot(src),
        _source_file=_typed_field(src, "file", "value.source", "string"),
        _source_pos=_typed_field(src, "pos", "value.source", "bigint"),
        _source_row=_typed_field(src, "row", "value.source", "int"),
        _event_ts_ms=_typed_field(env, "ts_ms", "value", "bigint"),
        _unavailable_columns=",".join(unavailable) or None,
    )
    row["_sequence"] = _sequence(source, row, op, partition, offset)
    return row


def _empty_row(op: str, key_row: Row | None) -> Row:
    row: Row = {c: None for c in DECODED_COLUMNS}
    row.update(_op=op, _key=key_row)
    return row


def _op(env: Mapping[str, Any]) -> str:
    if "op" not in env or env["op"] is None:
        raise Rejected("value.op is missing (expected one of c, r, u, d, t)")
    op = env["op"]
    if not isinstance(op, str):
        raise Rejected(f"value.op: {_show(op)} is not a string (expected one of c, r, u, d, t)")
    if op not in OPS:
        raise Rejected(f"value.op: {_show(op)} is not a Debezium operation (expected one of c, r, u, d, t)")
    return op


def _old_key(source: Source, headers: Any) -> Row | None:
    """The `__debezium.oldkey` header decoded like a key (the last one wins, as in Kafka's
    `Headers.lastHeader`), or None without one."""
    raw = None
    for name, value in headers or ():
        if name == OLD_KEY_HEADER:
            raw = _as_bytes(value)
    if raw is None:
        return None
    doc, schema = _unwrap(_parse_json(f"header {OLD_KEY_HEADER}", raw))
    return _decode_key(source, doc, schema, f"header {OLD_KEY_HEADER}")


def _decode_key(source: Source, doc: Any, schema: Any, where: str = "key") -> Row:
    pk = source.primary_key
    if not isinstance(doc, dict):
        raise Rejected(f"{where}: expected a JSON object with the primary key ({', '.join(pk)}), got {_show(doc)}")
    missing = [c for c in pk if c not in doc]
    extra = sorted(k for k in doc if k not in pk)
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"unexpected {', '.join(extra)}")
        raise Rejected(f"{where}: fields do not match the primary key ({', '.join(pk)}): {'; '.join(parts)}")
    fields = _struct_fields(schema)
    out: Row = {}
    for name in pk:
        if doc[name] is None:
            raise Rejected(f"{where}.{name} is null; a primary key column cannot be null")
        out[name] = convert_value(f"{where}.{name}", source.column(name), doc[name], fields.get(name))
    return out


def _image(source: Source, env: Mapping[str, Any], image: str, schema: Any, key_row: Row | None) -> tuple[Row | None, list[str]]:
    """A typed row image (or None) and the columns that carried the TOAST placeholder."""
    doc = env.get(image)
    if doc is None:
        return None, []
    if not isinstance(doc, dict):
        raise Rejected(f"value.{image}: expected a row object, got {_show(doc)}")
    fields = _image_fields(schema, image)
    out: Row = {}
    unavailable: list[str] = []
    for column in source.columns:
        raw = doc.get(column.name)
        if raw == UNAVAILABLE:
            unavailable.append(column.name)
            out[column.name] = None
        elif raw is None:
            out[column.name] = None
        else:
            out[column.name] = convert_value(f"value.{image}.{column.name}", column, raw, fields.get(column.name))
    if key_row is not None:
        for name, key_value in key_row.items():
            if out[name] != key_value:
                raise Rejected(
                    f"key does not match value.{image}: key.{name} = {_show_py(key_value)} "
                    f"but value.{image}.{name} = {_show_py(out[name])}"
                )
    return out, unavailable


def _unicode(where: str, text: str) -> str:
    """JSON may escape a lone UTF-16 surrogate (\\ud800); no Unicode text holds one."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise Rejected(f"{where}: {_show(text)} is not valid Unicode (lone surrogate at character {exc.start})") from None
    return text


def _snapshot(src: Mapping[str, Any]) -> str | None:
    raw = src.get("snapshot")
    if raw is None:
        return raw
    if isinstance(raw, str):
        return _unicode("value.source.snapshot", raw)
    if isinstance(raw, bool):
        return "true" if raw else "false"
    raise Rejected(f"value.source.snapshot: {_show(raw)} is not a string or boolean")


def _typed_field(doc: Mapping[str, Any], name: str, where: str, type_name: str) -> Any:
    raw = doc.get(name)
    if raw is None:
        return None
    return convert_value(f"{where}.{name}", Column(name, type_name), raw, None)


def _sequence(source: Source, row: Row, op: str, partition: int, offset: int) -> Decimal:
    """The declared ordering rule's value (`lakehouse.ordering`) from the decoded source fields."""
    rule = ordering.rule(source.sequence)
    fields = {name: _required(row, f"_source_{name}", f"value.source.{name}", rule.name) for name in rule.fields}
    try:
        return rule.python(fields, op, partition, offset)
    except ValueError as exc:
        raise Rejected(f"value.source: no valid {rule.name} sequence: {exc}") from None


def _required(row: Row, column: str, where: str, rule: str) -> Any:
    if row[column] is None:
        raise Rejected(f"{where} is missing (the '{rule}' sequence rule needs it)")
    return row[column]


# --------------------------------------------------------------------------- JSON and wrappers


def _as_bytes(raw: Any) -> bytes | None:
    if raw is None or isinstance(raw, bytes):
        return raw
    return bytes(raw)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_json(where: str, raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejected(f"{where} is not UTF-8 text: invalid byte at position {exc.start}") from None
    try:
        return json.loads(text, parse_float=Decimal, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise Rejected(f"{where} is not valid JSON: {exc.msg} at character {exc.pos} ({len(raw)} bytes)") from None
    except ValueError as exc:
        raise Rejected(f"{where} is not valid JSON: {exc}") from None


def is_wrapper(doc: Any) -> bool:
    """JsonConverter with schemas.enable=true: an object holding `schema` and `payload`."""
    return isinstance(doc, dict) and "schema" in doc and "payload" in doc


def _unwrap(doc: Any) -> tuple[Any, Any]:
    if is_wrapper(doc):
        return doc["payload"], doc["schema"]
    return doc, None


def _struct_fields(schema: Any) -> dict[str, tuple[str | None, str | None]]:
    """Connect struct schema -> {field: (name, type)}; anything malformed means no hints."""
    fields = schema.get("fields") if isinstance(schema, dict) else None
    out: dict[str, tuple[str | None, str | None]] = {}
    if not isinstance(fields, list):
        return out
    for entry in fields:
        if isinstance(entry, dict) and isinstance(entry.get("field"), str) and entry["field"] not in out:
            name, typ = entry.get("name"), entry.get("type")
            out[entry["field"]] = (name if isinstance(name, str) else None, typ if isinstance(typ, str) else None)
    return out


def _image_fields(schema: Any, image: str) -> dict[str, tuple[str | None, str | None]]:
    """The field schemas of the envelope's `before`/`after` struct (first entry of that name)."""
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not isinstance(fields, list):
        return {}
    for entry in fields:
        if isinstance(entry, dict) and entry.get("field") == image:
            return _struct_fields(entry)
    return {}


# --------------------------------------------------------------------------- column values


def convert_value(where: str, column: Column, raw: Any, field: tuple[str | None, str | None] | None = None) -> Any:
    """One non-null JSON value -> the Python value of the column's Spark type, or `Rejected`."""
    type_name = column.type
    name, connect_type = field or (None, None)
    if type_name in INT_RANGES:
        return _to_int(where, type_name, raw)
    if type_name in ("double", "float"):
        return _to_float(where, type_name, raw)
    if type_name == "boolean":
        if isinstance(raw, bool):
            return raw
        raise Rejected(f"{where}: {_show(raw)} is not a boolean")
    if type_name == "string":
        if isinstance(raw, str):
            return _unicode(where, raw)
        raise Rejected(f"{where}: {_show(raw)} is not a string")
    if type_name == "timestamp":
        return _to_timestamp(where, raw, name)
    if type_name == "date":
        return _to_date(where, raw)
    match = DECIMAL_TYPE.match(type_name)
    if match:
        return _to_decimal(where, type_name, int(match.group(1)), int(match.group(2)), raw, name, connect_type)
    raise Rejected(f"{where}: unsupported column type {type_name}")  # config validation prevents this


def _is_int(raw: Any) -> bool:
    return isinstance(raw, int) and not isinstance(raw, bool)


def _to_int(where: str, type_name: str, raw: Any) -> int:
    if not _is_int(raw):
        raise Rejected(f"{where}: {_show(raw)} is not a {type_name}")
    low, high = INT_RANGES[type_name]
    if not low <= raw <= high:
        raise Rejected(f"{where}: {raw} is out of range for {type_name} ({low}..{high})")
    return raw


def _to_float(where: str, type_name: str, raw: Any) -> float:
    if not (_is_int(raw) or isinstance(raw, Decimal)):
        raise Rejected(f"{where}: {_show(raw)} is not a {type_name}")
    try:
        value = float(raw)
    except OverflowError:
        value = float("inf")
    limit = FLOAT_MAX if type_name == "float" else 1.7976931348623157e308
    if not abs(value) <= limit:
        raise Rejected(f"{where}: {_show(raw)} is out of range for {type_name}")
    return value


def _to_decimal(where: str, type_name: str, precision: int, scale: int, raw: Any, name: str | None, connect_type: str | None) -> Decimal:
    if _is_int(raw) or isinstance(raw, Decimal):
        number = Decimal(raw)
    elif isinstance(raw, str):
        number = _decimal_from_string(where, type_name, scale, raw, name, connect_type)
    elif isinstance(raw, dict) and name == VARIABLE_SCALE_DECIMAL:
        number = _variable_scale(where, type_name, raw)
    else:
        raise Rejected(f"{where}: {_show(raw)} is not a {type_name}")
    with localcontext(Context(prec=200)):
        if not number.is_finite():
            raise Rejected(f"{where}: {_show(raw)} is not a {type_name}")
        try:
            rounded = number.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
        except InvalidOperation:
            raise Rejected(f"{where}: {_show(raw)} does not fit {type_name}") from None
        if abs(rounded) >= Decimal(10) ** (precision - scale):
            raise Rejected(f"{where}: {_show(raw)} ({rounded}) does not fit {type_name}")
    return rounded


def decimal_string_is_number(text: str, scale: int, name: str | None, connect_type: str | None) -> bool:
    """Whether a JSON string for a decimal column is a number (else it must be base64 bytes)."""
    if name == DECIMAL_LOGICAL:
        return False
    if connect_type in STRING_TYPES or connect_type in NUMBER_TYPES:
        return True
    if not NUMERIC.match(text):
        return False
    return not (scale > 0 and DIGITS.match(text) and BASE64.match(text))


def _decimal_from_string(where: str, type_name: str, scale: int, text: str, name: str | None, connect_type: str | None) -> Decimal:
    if decimal_string_is_number(text, scale, name, connect_type):
        if not NUMERIC.match(text):
            raise Rejected(f"{where}: {_show(text)} is not a {type_name}")
        return Decimal(text)
    if not text or not BASE64.match(text):
        raise Rejected(f"{where}: {_show(text)} is not a {type_name} (neither a number nor base64 decimal bytes)")
    return Decimal(unscaled_from_base64(text)).scaleb(-scale, context=Context(prec=200))  # exact: 28 digits would round


def unscaled_from_base64(text: str) -> int:
    """Connect's Decimal bytes: big-endian two's complement (Java BigInteger.toByteArray)."""
    return int.from_bytes(base64.b64decode(text, validate=True), "big", signed=True)


def _variable_scale(where: str, type_name: str, raw: Mapping[str, Any]) -> Decimal:
    scale, value = raw.get("scale"), raw.get("value")
    if not _is_int(scale) or not isinstance(value, str) or not BASE64.match(value) or not value:
        raise Rejected(f"{where}: {_show_json(raw)} is not a {type_name} (bad VariableScaleDecimal)")
    try:
        return Decimal(unscaled_from_base64(value)).scaleb(-scale, context=Context(prec=200))
    except (binascii.Error, ValueError):
        raise Rejected(f"{where}: {_show_json(raw)} is not a {type_name} (bad VariableScaleDecimal)") from None


def timestamp_unit(name: str | None) -> int:
    """Microseconds per unit of an integer timestamp: 1000 (millis), 1 (micros), -1000 (nanos)."""
    if name in MILLIS_TIMESTAMPS:
        return 1000
    if name in NANOS_TIMESTAMPS:
        return -1000
    return 1


def _to_timestamp(where: str, raw: Any, name: str | None) -> datetime:
    if _is_int(raw):
        unit = timestamp_unit(name)
        micros = raw * unit if unit > 0 else raw // -unit
        if not MIN_MICROS <= micros <= MAX_MICROS:
            raise Rejected(f"{where}: {raw} is out of range for a timestamp (years 0001..9999)")
        return EPOCH + timedelta(microseconds=micros)
    if isinstance(raw, str):
        match = ISO_TIMESTAMP.match(raw)
        if match:
            try:
                return _iso_timestamp(match)
            except (ValueError, OverflowError):
                pass
    raise Rejected(f"{where}: {_show(raw)} is not a timestamp (epoch microseconds or ISO-8601)")


def _iso_timestamp(match: re.Match[str]) -> datetime:
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = (match.group(7) or "").ljust(6, "0")[:6]
    zone = match.group(8)
    if zone in (None, "Z"):
        tz = timezone.utc
    else:
        sign = 1 if zone[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    local = datetime(year, month, day, hour, minute, second, int(fraction), tzinfo=tz)
    return local.astimezone(timezone.utc)


def _to_date(where: str, raw: Any) -> date:
    if _is_int(raw):
        if not MIN_DAYS <= raw <= MAX_DAYS:
            raise Rejected(f"{where}: {raw} is out of range for a date (years 0001..9999)")
        return EPOCH_DATE + timedelta(days=raw)
    if isinstance(raw, str) and ISO_DATE.match(raw):
        try:
            return date.fromisoformat(raw)
        except ValueError:
            pass
    raise Rejected(f"{where}: {_show(raw)} is not a date (epoch days or YYYY-MM-DD)")


# --------------------------------------------------------------------------- messages


def _show(raw: Any) -> str:
    """A JSON value as a reason shows it: strings quoted and shortened, containers by kind."""
    if isinstance(raw, str):
        text = raw if len(raw) <= 40 else raw[:37] + "..."
        return repr(text)
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if raw is None:
        return "null"
    if isinstance(raw, dict):
        return "a JSON object"
    if isinstance(raw, list):
        return "a JSON array"
    return str(raw)


def _show_json(raw: Any) -> str:
    text = json.dumps(raw, default=str, separators=(",", ":"))
    return text if len(text) <= 60 else text[:57] + "..."


def _show_py(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return repr(value)
    return str(value)

