"""Bronze: Debezium topics -> one append-only Delta table per source, plus one quarantine table.

Parsing is two-tier, and `lakehouse.debezium.decode_record` is the single source of truth:

1. a fast pass decodes every record whose shape is common and unambiguous (what Debezium
   sends) and flags it `_fast`. It is deliberately conservative: anything unusual (a TOAST
   placeholder in a numeric column, a truncate, a wrapped tombstone, any malformed
   record...) is left unflagged. Two implementations, held to `decode_record` by the same
   differential test:
   - the JVM pass (`JvmPass`): `lakehouse/jvm/cdcenrich/DebeziumDecoder.java`, a Java UDF
     compiled by `make setup` against pyspark's own jars (Jackson, one compiled class for
     every source). Used whenever its jar is on the session's classpath;
   - the SQL pass (`SqlPass`): one strict `from_json` of the value with a typed schema
     (integers, booleans and doubles typed by Jackson, where a mismatch marks the record
     corrupt; strings, decimals, timestamps and dates as VARIANT so their JSON type is
     known), the small key as VARIANT. Pure Spark SQL: it needs no jar, so it serves where
     the decoder jar is not installed (`parser="sql"` forces it);
2. every unflagged record goes through `decode_record` in a Python UDF, which either decodes
   it exactly or names the specific reason for quarantine.

So malformed records get precise reasons, and clean traffic never pays for Python.
`parser="python"` sends every record through Python (kept for the benchmark's comparison).

Streams: one streaming query per source (plus one for undeclared topics), each with its own
checkpoint, started together, so concurrent queries keep both cores busy (one query would
decode one topic-partition at a time). Each source's fast pass is built once per run and
applied to the stream (analysed when the query starts, not per micro-batch). A batch is
decoded and written in one pass, never cached: counts taken during that write (an
`Observation`) say whether the Python pass has anything to do.

Exactly-once: each table write of a micro-batch is tagged (Delta's commit `userMetadata`)
with the query id (stable across restarts from the same checkpoint, new for a new checkpoint;
with `-python` for the Python pass's bronze rows, a second write to the same table) and the
batch id. Only the batch a crashed run planned but did not commit can be replayed
(`uncommitted_batch`); for that one batch a restart looks for its tags in the tables' history
and skips the writes that are there, so nothing is written twice. Every other batch writes
without a look-up: Delta's idempotent-writer options (txnAppId/txnVersion) would have each
append reconstruct the table's state (three Spark jobs per append, measured), the largest
fixed cost of a small drain.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterable

from pyspark.sql import Column as SqlColumn
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    VariantType,
    _parse_datatype_string as _parse_datatype,
)

from lakehouse import debezium as dbz
from lakehouse.config import Column, Pipeline, Source
from lakehouse.errors import CdcEnrichError
from lakehouse.paths import checkpoint_dir
from lakehouse.spark import ensure_schemas, write_time
from lakehouse.tables import bronze_schema, bronze_table, quarantine_schema, quarantine_table

log = logging.getLogger("lakehouse.bronze")

PARSERS = ("hybrid", "sql", "python")  # hybrid: the JVM pass when its jar is there, else SQL
TRIGGERS = ("available_now", "processing_time")
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
HEADERS = "headers"  # array<struct<key: string, value: binary>>, read with includeHeaders
STREAM = "bronze"

_VALUE_SCHEMA_TYPE = "array<struct<field:string,fields:array<struct<field:string,type:string,name:string>>>>"
_KEY_SCHEMA_TYPE = "array<struct<field:string,type:string,name:string>>"
_NARROW_NUMBER = r"^-?[0-9]+(\.[0-9]+)?$"
_ISO_TIMESTAMP_FAST = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|[+-](0[0-9]|1[0-7]):[0-5][0-9])$"
)
_ISO_DATE_FAST = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
_PRINTABLE_ASCII = r"^[ -~]*$"
_POW2 = [Decimal(2 ** (8 * n)) for n in range(9)]


# --------------------------------------------------------------------------- the SQL pass
#
# The pass is built as a few stacked projections (parse -> unwrap -> extract -> inspect ->
# convert -> assemble). Each level refers to the previous one's columns by name, so a parsed
# document or an extracted field is computed once, not re-inlined into every expression that
# uses it (which made the plan tree, and its compile time, explode).


class _Staging:
    """Builds the stacked projections: `put` queues a column for the next level, `flush` closes it."""

    def __init__(self) -> None:
        self.levels: list[tuple[SqlColumn, ...]] = []
        self._pending: dict[str, SqlColumn] = {}
        self._count = 0

    def put(self, expr: SqlColumn) -> SqlColumn:
        name = f"__s{self._count}"
        self._count += 1
        self._pending[name] = expr
        return F.col(name)

    def flush(self) -> None:
        self.levels.append(tuple(expr.alias(name) for name, expr in self._pending.items()))
        self._pending = {}


@dataclass(frozen=True)
class SqlPass:
    """The SQL pass of one source as unresolved columns: built once (thousands of py4j calls,
    about a second), applied to every micro-batch (a dozen calls). Columns are plain
    expressions, not tied to a DataFrame, so one pass serves every batch of a stream."""

    levels: tuple[tuple[SqlColumn, ...], ...]
    final: tuple[SqlColumn, ...]
    headers: bool

    def apply(self, kafka: DataFrame) -> DataFrame:
        """Kafka rows -> decoded rows (rows without a `headers` column are read as header-less)."""
        df = _with_headers(kafka, self.headers)
        for level in self.levels:
            df = df.select("*", *level)
        return df.select(*self.final)


def _with_headers(kafka: DataFrame, headers: bool) -> DataFrame:
    """Kafka rows for a pass built for `headers`: a missing `headers` column reads as none."""
    if headers and HEADERS not in kafka.columns:
        return kafka.withColumn(HEADERS, F.lit(None).cast("array<struct<key:string,value:binary>>"))
    return kafka


def _v(doc: SqlColumn, path: str) -> SqlColumn:
    """A sub-document as VARIANT; SQL NULL when the path is absent (JSON null stays a variant null)."""
    return F.try_variant_get(doc, path, "variant")


def _present(v: SqlColumn) -> SqlColumn:
    return v.isNotNull() & ~F.is_variant_null(v)


def _true(condition: SqlColumn) -> SqlColumn:
    """SQL three-valued logic -> two: NULL counts as false."""
    return F.coalesce(condition, F.lit(False))


def _all(conditions: Iterable[SqlColumn]) -> SqlColumn:
    """AND of many conditions as a balanced tree: a long left-deep chain overflows the JVM
    stack of the thread that generates and compiles its code."""
    terms = [_true(c) for c in conditions]
    if not terms:
        return F.lit(True)
    while len(terms) > 1:
        terms = [terms[i] & terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


def _json_text(raw: SqlColumn) -> SqlColumn:
    """The bytes as text when they have the fast path's shape: UTF-8, starting like a JSON
    object, without \\u escapes (Jackson turns a lone surrogate into '?'; Python rejects it)."""
    text = raw.cast("string")
    return F.when(F.is_valid_utf8(text) & text.startswith("{") & ~text.contains("\\u"), text)


def _no_null_elements(array: SqlColumn) -> SqlColumn:
    """A Connect schema array whose every element cast cleanly (else Python reads the schema)."""
    return F.coalesce(F.forall(array, lambda x: x.isNotNull()), F.lit(True))


def _member(doc: SqlColumn, text: SqlColumn, name: str) -> SqlColumn:
    """`_v(doc, "$.<name>")` of a document parsed from `text`, looked up only when the
    text holds `"<name>"`: a path Spark's variant_get does not find costs it a thrown
    exception (~30 % of the SQL pass's CPU samples when every bare key was probed for "schema").
    Exact: `_json_text` admits no \\u escapes, and no other escape spells a letter."""
    return F.when(text.contains(f'"{name}"'), _v(doc, f"$.{name}"))


def _wrapped(doc: SqlColumn, text: SqlColumn) -> SqlColumn:
    return _member(doc, text, "schema").isNotNull() & _member(doc, text, "payload").isNotNull()


@dataclass
class _Field:
    """One JSON field on its way to a typed column: the variant, then what it holds."""

    column: Column
    var: SqlColumn  # VARIANT, NULL when absent
    kind: SqlColumn  # schema_of_variant: BIGINT, DECIMAL(p,s), DOUBLE, STRING, BOOLEAN, VOID, OBJECT<...>
    text: SqlColumn  # the value as a string (meaningful when kind is STRING)
    hint_name: SqlColumn  # Connect schema `name` of the field (wrapped messages), else NULL
    hint_type: SqlColumn  # Connect schema `type`
    allow_placeholder: bool
    parts: dict[str, SqlColumn] = field(default_factory=dict)  # staged intermediates (decimal bytes)


@dataclass(frozen=True)
class _Converted:
    value: SqlColumn  # typed value, NULL when absent/null/placeholder
    ok: SqlColumn  # the SQL pass is sure (absent, null, placeholder, or converted exactly)
    placeholder: SqlColumn  # the TOAST placeholder was there


def _inspect(st: _Staging, column: Column, var: SqlColumn, hints: tuple[SqlColumn, SqlColumn] | None, allow_placeholder: bool) -> _Field:
    none = F.lit(None).cast("string")
    hint_name, hint_type = hints or (none, none)
    return _Field(
        column=column,
        var=var,
        kind=st.put(F.schema_of_variant(var)),
        text=F.lit(None).cast("string"),  # set by _stage_text, a level later
        hint_name=st.put(hint_name) if hints else none,
        hint_type=st.put(hint_type) if hints else none,
        allow_placeholder=allow_placeholder,
    )


def _stage_text(st: _Staging, field: _Field) -> None:
    """The string a STRING variant holds (only those: extracting costs, and most fields are not)."""
    field.text = st.put(F.when(field.kind == F.lit("STRING"), F.variant_get(field.var, "$", "string")))


def _convert(st: _Staging, field: _Field) -> _Converted:
    """SQL twin of `debezium.convert_value` for the shapes it can decide exactly."""
    present = _present(field.var)
    is_str = field.kind == F.lit("STRING")
    placeholder = (
        _true(present & is_str & (field.text == F.lit(dbz.UNAVAILABLE))) if field.allow_placeholder else F.lit(False)
    )
    value, valid = _typed(field, is_str)
    usable = present & ~placeholder
    return _Converted(
        value=st.put(F.when(usable, value)),
        ok=st.put(_true(~present) | placeholder | _true(valid & value.isNotNull())),
        placeholder=st.put(placeholder),
    )


def _typed(field: _Field, is_str: SqlColumn) -> tuple[SqlColumn, SqlColumn]:
    """(typed value, the JSON held a shape this type accepts exactly)."""
    f, kind, text, type_name = field.var, field.kind, field.text, field.column.type
    is_int = kind == F.lit("BIGINT")
    is_decimal = kind.startswith("DECIMAL(")
    if type_name in dbz.INT_RANGES:
        return F.try_variant_get(f, "$", type_name), is_int
    if type_name == "boolean":
        return F.try_variant_get(f, "$", "boolean"), kind == F.lit("BOOLEAN")
    if type_name == "string":
        return text, is_str
    if type_name in ("double", "float"):
        # Exactly-rounded in both worlds: integers below 2^53, decimals of at most 15 digits.
        as_long = F.try_variant_get(f, "$", "bigint")
        precision = F.regexp_extract(kind, r"^DECIMAL\((\d+),", 1).cast("int")
        valid = (is_int & (F.abs(as_long) <= F.lit(2**53))) | (is_decimal & (precision <= 15))
        value = F.try_variant_get(f, "$", "double")
        return (value.cast("float"), valid) if type_name == "float" else (value, valid)
    if type_name == "timestamp":
        return _timestamp(f, text, is_int, is_str, field.hint_name)
    if type_name == "date":
        days = F.try_variant_get(f, "$", "bigint")
        int_ok = is_int & days.between(dbz.MIN_DAYS, dbz.MAX_DAYS)
        str_ok = is_str & text.rlike(_ISO_DATE_FAST) & (F.substring(text, 1, 4) != F.lit("0000"))
        value = F.when(int_ok, F.date_from_unix_date(days.cast("int"))).when(str_ok, text.try_cast("date"))
        return value, int_ok | str_ok
    match = dbz.DECIMAL_TYPE.match(type_name)
    if match:
        return _decimal(field, is_int, is_decimal, is_str, int(match.group(1)), int(match.group(2)))
    raise CdcEnrichError(f"column {field.column.name}: unsupported type {type_name}")


def _timestamp(f: SqlColumn, text: SqlColumn, is_int: SqlColumn, is_str: SqlColumn, hint_name: SqlColumn) -> tuple[SqlColumn, SqlColumn]:
    n = F.try_variant_get(f, "$", "bigint")
    millis = _true(hint_name.isin(*dbz.MILLIS_TIMESTAMPS))
    nanos = _true(hint_name.isin(*dbz.NANOS_TIMESTAMPS))
    floor_div = ((n - F.pmod(n, F.lit(1000))) / F.lit(1000)).cast("bigint")  # exact: a multiple of 1000
    micros = (
        F.when(millis, F.when(n.between(-(-dbz.MIN_MICROS // 1000), dbz.MAX_MICROS // 1000), n * F.lit(1000)))
        .when(nanos, floor_div)
        .otherwise(n)
    )
    int_ok = is_int & micros.between(dbz.MIN_MICROS, dbz.MAX_MICROS)
    year = F.substring(text, 1, 4)
    str_ok = is_str & text.rlike(_ISO_TIMESTAMP_FAST) & (year >= F.lit("0002")) & (year <= F.lit("9998"))
    value = F.when(int_ok, F.timestamp_micros(micros)).when(str_ok, text.try_cast("timestamp"))
    return value, int_ok | str_ok


def _is_decimal_field(f: _Field) -> bool:
    return dbz.DECIMAL_TYPE.match(f.column.type) is not None


def _stage_decimal_bytes(st: _Staging, f: _Field, level: int) -> None:
    """Base64 two's-complement bytes (1..16) -> unscaled decimal(38,0), over three levels.

    `conv` reads at most 64 bits, so the bytes split into a signed high part (before the
    last 8 bytes) and an unsigned low part; decimal(38,0) arithmetic with try_* turns an
    overflow into NULL (and so into the Python pass, which names it). Staged because the
    same intermediates are used many times (one expression would outgrow a JVM method).
    """
    p = f.parts
    if level == 1:
        p["base64"] = st.put(_true(f.text.rlike(dbz.BASE64.pattern) & (F.length(f.text) > 0)))
        p["digits"] = st.put(F.hex(F.try_to_binary(f.text, F.lit("base64"))))
    elif level == 2:
        width = (F.length(p["digits"]) / 2).cast("int")
        high_width = F.greatest(width - F.lit(8), F.lit(0))
        p["width"] = st.put(width)
        p["high_width"] = st.put(high_width)
        p["negative"] = st.put(F.substring(p["digits"], 1, 1) >= F.lit("8"))
        # (only up to 16 bytes: `conv` of more than 64 bits overflows, an error under ANSI mode)
        fits = width.between(1, 16)
        p["low"] = st.put(F.when(fits, F.conv(F.substring(p["digits"], high_width * 2 + 1, 16), 16, 10).cast("decimal(20,0)")))
        p["high"] = st.put(F.when(fits, F.conv(F.substring(p["digits"], F.lit(1), high_width * 2), 16, 10).cast("decimal(20,0)")))
    else:
        pow2 = F.array(*[F.lit(v).cast("decimal(21,0)") for v in _POW2])
        small = F.when(p["negative"], p["low"] - F.element_at(pow2, p["width"] + 1)).otherwise(p["low"])
        high = F.when(p["negative"], p["high"] - F.element_at(pow2, p["high_width"] + 1)).otherwise(p["high"])
        large = F.try_add(F.try_multiply(high.cast("decimal(38,0)"), F.lit(Decimal(2**64)).cast("decimal(20,0)")), p["low"].cast("decimal(38,0)"))
        p["unscaled"] = st.put(F.when(p["high_width"] == 0, small.cast("decimal(38,0)")).otherwise(large))


def _decimal(f: _Field, is_int: SqlColumn, is_decimal: SqlColumn, is_str: SqlColumn, precision: int, scale: int) -> tuple[SqlColumn, SqlColumn]:
    text, p = f.text, f.parts
    target = f"decimal({precision},{scale})"
    number = F.try_variant_get(f.var, "$", target)  # JSON number: rounded half-up, NULL when too wide
    bytes_mode = _true(f.hint_name == F.lit(dbz.DECIMAL_LOGICAL))
    number_mode = _true(f.hint_type.isin(*dbz.STRING_TYPES, *dbz.NUMBER_TYPES))
    ambiguous_digits = F.lit(scale > 0) & text.rlike(dbz.DIGITS.pattern) & p["base64"]
    as_number = (
        F.when(bytes_mode, F.lit(False))
        .when(number_mode, F.lit(True))
        .otherwise(text.rlike(dbz.NUMERIC.pattern) & ~ambiguous_digits)
    )
    narrow = text.rlike(_NARROW_NUMBER)
    # At most 14 bytes (34 digits): some 16-byte values came out rounded to 34 significant
    # digits (found by the parity test's mutation fuzz; the step that rounds was not pinned
    # down), so wider ones go to Python. The JVM pass decodes them exactly.
    bytes_ok = p["base64"] & p["width"].between(1, 14)
    magnitude = F.abs(p["unscaled"]).cast("string")
    if scale > 0:
        padded = F.lpad(magnitude, F.greatest(F.length(magnitude), F.lit(scale + 1)), "0")  # lpad also truncates
        cut = F.length(padded) - scale
        magnitude = F.concat(padded.substr(F.lit(1), cut), F.lit("."), padded.substr(cut + 1, F.lit(scale)))
    from_bytes = F.concat(F.when(p["negative"], F.lit("-")).otherwise(F.lit("")), magnitude).try_cast(target)
    value = (
        F.when(is_int | is_decimal, number)
        .when(is_str & as_number & narrow, text.try_cast(target))
        .when(is_str & ~as_number & bytes_ok, from_bytes)
    )
    valid = is_int | is_decimal | (is_str & as_number & narrow) | (is_str & ~as_number & bytes_ok)
    return value, valid


def _first_named(fields: SqlColumn, name: str) -> SqlColumn:
    """The first Connect schema entry whose `field` is `name` (NULL when none).

    (A one-argument lambda: Spark reads a two-argument one as (element, index).)
    """
    def named(x: SqlColumn) -> SqlColumn:
        return x["field"] == F.lit(name)

    return F.get(F.filter(fields, named), 0)


def _field_hints(fields: SqlColumn, name: str) -> tuple[SqlColumn, SqlColumn]:
    """(Connect name, Connect type) of the first schema field called `name` (NULL when none)."""
    entry = _first_named(fields, name)
    return entry["name"], entry["type"]


_SOURCE_FIELDS = (("ts_ms", "bigint"), ("lsn", "bigint"), ("txId", "bigint"), ("file", "string"), ("pos", "bigint"), ("row", "int"))
_JSON_OPTIONS = {
    # Strict JSON, as Python's json module reads it; any field that does not fit its type
    # marks the record corrupt, which sends it to the Python pass.
    "mode": "PERMISSIVE",
    "columnNameOfCorruptRecord": "__corrupt",
    "allowNonNumericNumbers": "false",
    "allowSingleQuotes": "false",
    "allowUnquotedFieldNames": "false",
    "allowComments": "false",
    "allowNumericLeadingZeros": "false",
    "allowBackslashEscapingAnyCharacter": "false",
    "allowUnquotedControlChars": "false",
}
# Parsed by Jackson into their Spark type (strict: a JSON string or a fraction is a mismatch).
_PARSED_TYPES = {"bigint": LongType(), "int": IntegerType(), "smallint": ShortType(), "boolean": BooleanType(),
                 "double": DoubleType(), "float": DoubleType()}  # float: text -> double -> float, as Python


def _parse_type(column: Column) -> DataType:
    """How the value parse reads a column: typed when Jackson's check is exact, else VARIANT."""
    return _PARSED_TYPES.get(column.type, VariantType())


def _envelope_schema(source: Source) -> StructType:
    row = StructType([StructField(c.name, _parse_type(c)) for c in source.columns])
    src = StructType([
        StructField("ts_ms", LongType()), StructField("lsn", LongType()), StructField("txId", LongType()),
        StructField("snapshot", VariantType()), StructField("file", VariantType()),
        StructField("pos", LongType()), StructField("row", IntegerType()),
    ])
    return StructType([
        StructField("before", row), StructField("after", row), StructField("source", src),
        StructField("op", StringType()), StructField("ts_ms", LongType()),
    ])


def _value_schema(source: Source) -> StructType:
    """The value, bare or wrapped, in one parse: wrapper fields and envelope fields side by side."""
    envelope = _envelope_schema(source)
    hints = StructType([StructField("fields", _parse_datatype(_VALUE_SCHEMA_TYPE))])
    return StructType(
        [StructField("__corrupt", StringType()), StructField("schema", hints), StructField("payload", envelope)]
        + list(envelope.fields)
    )


def sql_pass(source: Source, headers: bool = True) -> SqlPass:
    """The SQL pass for `source` (Kafka rows with or without `headers`): applied, it gives the
    decoded columns, `_kafka_ts` and `_fast`. Rows with `_fast` false carry meaningless
    decoded columns; `decode_python` decides them. A record with the `__debezium.oldkey`
    header (a primary-key change, rare) is never fast: Python decodes the header like a key,
    and `_old_key_header` carries it to that pass.

    Built once per source and JVM, then reused by every run in the process (a scheduled
    stream's restarts, `cdc-enrich run`'s cycles): the build is thousands of py4j calls.
    """
    from pyspark import SparkContext

    return _build_sql_pass(source, headers, id(SparkContext._gateway))


@functools.lru_cache(maxsize=256)
def _build_sql_pass(source: Source, headers: bool, _jvm: int) -> SqlPass:
    """(`_jvm` keys the cache: the columns are objects of one JVM.)"""
    st = _Staging()
    st.levels.append((_old_key_header(headers).alias("_old_key_header"),))
    images = ("before", "after")
    # 1. parse: the value with a typed schema (one pass), the small key as VARIANT
    value_text = st.put(_json_text(F.col("value")))
    key_text = st.put(_json_text(F.col("key")))
    st.flush()
    kdoc = st.put(F.try_parse_json(key_text))
    parsed = st.put(F.from_json(value_text, _value_schema(source), _JSON_OPTIONS))
    # from_json reads the first JSON value only; Python rejects trailing data, so must we
    single_value = st.put(_true(F.json_array_length(F.concat(F.lit("["), value_text, F.lit("]"))) == F.lit(1)))
    st.flush()
    # 2. unwrap {"schema", "payload"}
    wrapped = parsed["schema"].isNotNull() & parsed["payload"].isNotNull()
    top_level = F.struct(*[parsed[f.name].alias(f.name) for f in _envelope_schema(source).fields])
    env = st.put(F.when(wrapped, parsed["payload"]).otherwise(top_level))
    vhints = st.put(F.when(wrapped, parsed["schema"]["fields"]))
    header_ok = st.put(value_text.isNotNull() & parsed["__corrupt"].isNull() & single_value)
    key_wrapped = _wrapped(kdoc, key_text)
    kenv = st.put(F.when(key_wrapped, _v(kdoc, "$.payload")).otherwise(kdoc))
    khints = st.put(F.when(key_wrapped, F.try_variant_get(kdoc, "$.schema.fields", _KEY_SCHEMA_TYPE)))
    st.flush()
    # 3. extract
    key_vars = {k: st.put(_v(kenv, f"$.{k}")) for k in source.primary_key}
    key_size = st.put(F.size(F.try_variant_get(kenv, "$", "map<string,variant>")))
    key_header_ok = st.put(_no_null_elements(khints))
    image_hints = {i: st.put(_first_named(vhints, i)["fields"]) for i in images}
    st.flush()
    # 4. inspect VARIANT fields: what each holds, and its Connect schema hints
    key_fields = {k: _inspect(st, source.column(k), var, _field_hints(khints, k), False) for k, var in key_vars.items()}
    image_fields = {
        (i, c.name): _inspect(st, c, env[i][c.name], _field_hints(image_hints[i], c.name), True)
        for i in images for c in source.columns if isinstance(_parse_type(c), VariantType)
    }
    snapshot_kind = st.put(F.schema_of_variant(env["source"]["snapshot"]))
    file_field = _inspect(st, Column("file", "string"), env["source"]["file"], None, False)
    op = st.put(env["op"])
    image_present = {i: st.put(env[i].isNotNull()) for i in images}
    st.flush()
    variant_fields = [*key_fields.values(), *image_fields.values(), file_field]
    for f in variant_fields:
        _stage_text(st, f)
    st.flush()
    for level in (1, 2, 3):
        for f in variant_fields:
            if _is_decimal_field(f):
                _stage_decimal_bytes(st, f, level)
        st.flush()
    # 5. convert
    keys = {k: _convert(st, f) for k, f in key_fields.items()}
    values = {name: _convert(st, f) for name, f in image_fields.items()}
    for i in images:
        for c in source.columns:
            if (i, c.name) not in values:
                values[(i, c.name)] = _parsed(st, env[i][c.name], c)
    file = _convert(st, file_field)
    st.flush()
    # 6. combine the per-field checks (staged, so no final expression grows deep)
    key_ok = st.put(_all([key_size == F.lit(len(source.primary_key)), key_header_ok]
                         + [keys[k].ok & keys[k].value.isNotNull() for k in source.primary_key]))
    check_key = op != F.lit("t")
    image_ok = {}
    for i in images:
        checks = [_no_null_elements(image_hints[i])] + [values[(i, c.name)].ok for c in source.columns]
        checks += [~check_key | _true(values[(i, k)].value == keys[k].value) for k in source.primary_key]
        image_ok[i] = st.put(~image_present[i] | _all(checks))
    st.flush()
    # 7. assemble
    src = {name: env["source"][name] for name, _ in _SOURCE_FIELDS}
    src["file"] = file.value
    key_struct = F.struct(*[keys[k].value.alias(k) for k in source.primary_key])
    image_structs = {
        i: F.when(image_present[i], F.struct(*[values[(i, c.name)].value.alias(c.name) for c in source.columns]))
        for i in images
    }
    unavailable = F.nullif(F.concat_ws(",", *[F.when(values[("after", c.name)].placeholder, F.lit(c.name)) for c in source.columns]), F.lit(""))
    snapshot_var = env["source"]["snapshot"]
    snapshot_ok = _true(~_present(snapshot_var)) | _true(snapshot_kind.isin("STRING", "BOOLEAN"))
    snapshot = F.when(snapshot_kind.isin("STRING", "BOOLEAN"), F.try_variant_get(snapshot_var, "$", "string"))
    sequence, sequence_ok = _sequence_sql(source, op, src["ts_ms"], src["lsn"], src["file"], src["pos"], src["row"])
    key_is_null = F.col("key").isNull()
    value_checks = [
        header_ok,
        op.isin(*dbz.OPS),
        file.ok,
        snapshot_ok,
        sequence_ok,
        image_ok["before"],
        image_ok["after"],
        F.when(op == F.lit("t"), key_is_null & ~image_present["before"] & ~image_present["after"]).otherwise(~key_is_null & key_ok),
        F.when(op.isin("c", "r", "u"), image_present["after"]).otherwise(F.lit(True)),
        F.when(op == F.lit("d"), image_present["before"]).otherwise(F.lit(True)),
    ]
    tombstone = F.col("value").isNull()
    fast = F.when(tombstone, ~key_is_null & key_ok).otherwise(_all(value_checks)) & F.col("_old_key_header").isNull()

    def change(c: SqlColumn) -> SqlColumn:
        return F.when(~tombstone, c)

    columns = {
        "_topic": F.col("topic"),
        "_partition": F.col("partition"),
        "_offset": F.col("offset"),
        "_raw_key": F.col("key"),
        "_raw_value": F.col("value"),
        "_op": F.when(tombstone, F.lit(dbz.TOMBSTONE)).otherwise(op),
        "_key": F.when(~key_is_null, key_struct),
        "_before": change(image_structs["before"]),
        "_after": change(image_structs["after"]),
        "_source_ts_ms": change(src["ts_ms"]),
        "_source_lsn": change(src["lsn"]),
        "_source_tx_id": change(src["txId"]),
        "_source_snapshot": change(snapshot),
        "_source_file": change(src["file"]),
        "_source_pos": change(src["pos"]),
        "_source_row": change(src["row"]),
        "_event_ts_ms": change(env["ts_ms"]),
        "_unavailable_columns": change(unavailable),
        "_sequence": change(sequence),
        "_old_key": F.lit(None),  # decided in Python: rows with the header are never fast
    }
    schema = bronze_schema(source)
    selected = [columns[c].cast(schema[c].dataType).alias(c) for c in dbz.DECODED_COLUMNS]
    return SqlPass(tuple(st.levels), (*selected, F.col("timestamp").alias("_kafka_ts"), _true(fast).alias("_fast"), F.col("_old_key_header")), headers)


def _old_key_header(headers: bool) -> SqlColumn:
    """The last `__debezium.oldkey` header's bytes (Kafka's `lastHeader`), or null."""
    if not headers:
        return F.lit(None).cast("binary")
    named = F.filter(F.col(HEADERS), lambda h: h["key"] == F.lit(dbz.OLD_KEY_HEADER))
    return F.try_element_at(named, F.lit(-1))["value"]


def _parsed(st: _Staging, value: SqlColumn, column: Column) -> _Converted:
    """A column Jackson already typed (a mismatch marked the record corrupt)."""
    if column.type == "double":
        ok = value.isNull() | (F.abs(value) <= F.lit(1.7976931348623157e308))  # 1e400 parses as Infinity
    elif column.type == "float":
        ok = value.isNull() | (F.abs(value) <= F.lit(dbz.FLOAT_MAX))
        value = value.cast("float")
    else:
        ok = F.lit(True)
    return _Converted(value=st.put(value), ok=st.put(_true(ok)), placeholder=F.lit(False))


def _sequence_sql(source: Source, op: SqlColumn, ts_ms: SqlColumn, lsn: SqlColumn, file: SqlColumn, pos: SqlColumn, row: SqlColumn) -> tuple[SqlColumn, SqlColumn]:
    """SQL twin of `lakehouse.sequence` within ranges where both compute the same decimal(38,0)."""
    d38 = "decimal(38,0)"
    if source.sequence == "postgres":
        position = F.when(op == F.lit("d"), F.lit(0)).otherwise(F.lit(1))
        return lsn.cast(d38) * F.lit(10) + position, _true(lsn >= 0)
    if source.sequence == "mysql":
        number = F.regexp_extract(file, r"([0-9]+)$", 1)
        ok = (
            _true(file.rlike(_PRINTABLE_ASCII) & file.rlike(r"[0-9]$"))
            & _true(F.length(number).between(1, 17))
            & _true(pos.between(0, 10**14 - 1))
            & _true(row.between(0, 10**6 - 1))
        )
        value = number.cast(d38) * F.lit(Decimal(10**20)).cast("decimal(21,0)") + pos.cast(d38) * F.lit(10**6) + row.cast(d38)
        return value, ok
    value = (
        ts_ms.cast(d38) * F.lit(Decimal(10**24)).cast("decimal(25,0)")
        + F.col("partition").cast(d38) * F.lit(Decimal(10**18)).cast("decimal(19,0)")
        + F.col("offset").cast(d38)
    )
    return value, _true(ts_ms.between(0, 10**13 - 1) & (F.col("partition") < 10**6) & (F.col("offset") >= 0))


# --------------------------------------------------------------------------- the JVM pass

DECODER_CLASS = "cdcenrich.DebeziumDecoder"
# The decoder's result struct, in its field order (see DebeziumDecoder.java), -> bronze columns.
_JVM_FIELDS = (
    ("fast", None), ("op", "_op"), ("key", "_key"), ("before", "_before"), ("after", "_after"),
    ("source_ts_ms", "_source_ts_ms"), ("source_lsn", "_source_lsn"), ("source_tx_id", "_source_tx_id"),
    ("source_snapshot", "_source_snapshot"), ("source_file", "_source_file"), ("source_pos", "_source_pos"),
    ("source_row", "_source_row"), ("event_ts_ms", "_event_ts_ms"),
    ("unavailable_columns", "_unavailable_columns"), ("sequence", "_sequence"),
)


def _jvm_result_schema(source: Source) -> StructType:
    schema = bronze_schema(source)
    return StructType([
        StructField(name, BooleanType() if column is None else schema[column].dataType, True)
        for name, column in _JVM_FIELDS
    ])


def decoder_available(spark: SparkSession) -> bool:
    """Whether the JVM decoder's class is on the session's classpath (`make setup` builds
    its jar; on Databricks the bundle attaches it as a library)."""
    return _decoder_loaded(id(spark.sparkContext._gateway))


@functools.lru_cache(maxsize=8)
def _decoder_loaded(_jvm: int) -> bool:
    """(per JVM: its classpath does not change while it runs)"""
    from py4j.java_gateway import JavaClass
    from pyspark import SparkContext

    try:
        return isinstance(SparkContext._jvm.cdcenrich.DebeziumDecoder, JavaClass)
    except Exception:  # noqa: BLE001 - py4j answers a missing class with a package or an error
        return False


@dataclass(frozen=True)
class JvmPass:
    """The JVM fast pass of one source: `DebeziumDecoder` as a Java UDF over key, value,
    partition and offset. Same output as `SqlPass.apply`. Its columns are built once per
    source and JVM (`jvm_pass`) and reused by every DataFrame it is applied to."""

    decode: tuple[SqlColumn, ...]
    final: tuple[SqlColumn, ...]
    headers: bool

    def apply(self, kafka: DataFrame) -> DataFrame:
        """Kafka rows -> decoded rows (rows without a `headers` column are read as header-less)."""
        return _with_headers(kafka, self.headers).select(*self.decode).select(*self.final)


def jvm_pass(source: Source, headers: bool = True) -> JvmPass:
    """`source`'s JVM pass (Kafka rows with or without `headers`); needs the decoder's jar."""
    from pyspark import SparkContext

    return _build_jvm_pass(source, headers, id(SparkContext._gateway))


@functools.lru_cache(maxsize=256)
def _build_jvm_pass(source: Source, headers: bool, _jvm: int) -> JvmPass:
    """(`_jvm` keys the cache: the columns are objects of one JVM.)"""
    decode = (
        *[F.col(c) for c in KAFKA_COLUMNS],
        _old_key_header(headers).alias("_old_key_header"),
        _decoder_call(source).alias("_d"),
    )
    columns = {c: F.col(k) for k, c in zip(("topic", "partition", "offset", "key", "value"), _COORDINATES)}
    columns.update({column: F.col(f"_d.{name}") for name, column in _JVM_FIELDS if column is not None})
    columns["_old_key"] = F.lit(None)  # decided in Python: rows with the header are never fast
    schema = bronze_schema(source)
    fast = _true(F.col("_d.fast")) & F.col("_old_key_header").isNull()
    final = (
        *[columns[c].cast(schema[c].dataType).alias(c) for c in dbz.DECODED_COLUMNS],
        F.col("timestamp").alias("_kafka_ts"),
        fast.alias("_fast"),
        F.col("_old_key_header"),
    )
    return JvmPass(decode, final, headers)


def _decoder_call(source: Source) -> SqlColumn:
    """A column calling a new `DebeziumDecoder` for `source` on key, value, partition, offset."""
    from pyspark import SparkContext
    from pyspark.sql.classic.column import Column as ClassicColumn
    from pyspark.sql.classic.column import _to_java_column

    sc = SparkContext._active_spark_context
    gateway, jvm = sc._gateway, sc._jvm

    def strings(values: Iterable[str]) -> Any:
        values = list(values)
        array = gateway.new_array(jvm.java.lang.String, len(values))
        for i, v in enumerate(values):
            array[i] = v
        return array

    result_type = jvm.org.apache.spark.sql.types.DataType.fromJson(_jvm_result_schema(source).json())
    jcol = jvm.cdcenrich.DebeziumDecoder.column(
        strings(f"{c.name}:{c.type}" for c in source.columns), strings(source.primary_key), source.sequence,
        result_type, *[_to_java_column(F.col(c)) for c in ("key", "value", "partition", "offset")],
    )
    return ClassicColumn(jcol)


def fast_pass(spark: SparkSession, source: Source, parser: str = "hybrid") -> SqlPass | JvmPass:
    """The fast pass `parser` asks for: the JVM pass for "hybrid" when the decoder is on the
    classpath (else the SQL pass, with a warning once), the SQL pass for "sql"."""
    if parser == "hybrid":
        if decoder_available(spark):
            return jvm_pass(source)
        _warn_no_decoder()
    return sql_pass(source)


@functools.lru_cache(maxsize=1)
def _warn_no_decoder() -> None:
    log.warning("bronze: the JVM decoder (%s) is not on the classpath; decoding with the SQL pass, "
                "which is correct but slower. Run `make setup` (locally) or attach the bundle's decoder jar.", DECODER_CLASS)


# --------------------------------------------------------------------------- the Python pass


_COORDINATES = ("_topic", "_partition", "_offset", "_raw_key", "_raw_value")
_PAYLOAD_COLUMNS = tuple(c for c in dbz.DECODED_COLUMNS if c not in _COORDINATES)


def _python_schema(source: Source) -> StructType:
    """What the Python UDF returns: the decoded payload columns (all nullable) and `_reason`."""
    schema = bronze_schema(source)
    fields = [StructField(c, schema[c].dataType, True) for c in _PAYLOAD_COLUMNS]
    return StructType(fields + [StructField("_reason", StringType(), True)])


def _python_decoder(source: Source) -> Callable[..., tuple[Any, ...]]:
    """A picklable function: Kafka record -> payload tuple + reason, via `decode_record`."""
    nested = {"_key": source.primary_key, "_before": source.column_names, "_after": source.column_names, "_old_key": source.primary_key}

    def decode(key, value, topic, partition, offset, old_key_header):  # type: ignore[no-untyped-def]  # (hints would make Spark look for a pandas UDF)
        headers = [(dbz.OLD_KEY_HEADER, old_key_header)] if old_key_header is not None else None
        row, reason = dbz.decode_record(source, key, value, topic, partition, offset, headers)
        if row is None:
            return (None,) * len(_PAYLOAD_COLUMNS) + (reason,)
        out = []
        for name in _PAYLOAD_COLUMNS:
            item = row[name]
            if name in nested and item is not None:
                item = tuple(item[c] for c in nested[name])
            out.append(item)
        return tuple(out) + (None,)

    return decode


def decode_python(source: Source, kafka: DataFrame) -> DataFrame:
    """Every row through `decode_record`: decoded columns, `_kafka_ts`, `_reason` (NULL = bronze)."""
    udf = F.udf(_python_decoder(source), _python_schema(source)).asNondeterministic()
    decoded = kafka.select(
        *KAFKA_COLUMNS,
        udf(F.col("key"), F.col("value"), F.col("topic"), F.col("partition"), F.col("offset"), _old_key_header(HEADERS in kafka.columns)).alias("_d"),
    )
    columns = {c: F.col(k) for k, c in zip(("topic", "partition", "offset", "key", "value"), _COORDINATES)}
    columns.update({c: F.col(f"_d.{c}") for c in _PAYLOAD_COLUMNS})
    return decoded.select(
        *[columns[c].alias(c) for c in dbz.DECODED_COLUMNS],
        F.col("timestamp").alias("_kafka_ts"),
        F.col("_d._reason").alias("_reason"),
    )


def _as_kafka(decoded: DataFrame) -> DataFrame:
    """Decoded rows back to the Kafka columns (to re-decode the SQL pass's leftovers in Python)."""
    return decoded.select(
        F.col("_raw_key").alias("key"),
        F.col("_raw_value").alias("value"),
        F.col("_topic").alias("topic"),
        F.col("_partition").alias("partition"),
        F.col("_offset").alias("offset"),
        F.col("_kafka_ts").alias("timestamp"),
        F.when(
            F.col("_old_key_header").isNotNull(),
            F.array(F.struct(F.lit(dbz.OLD_KEY_HEADER).alias("key"), F.col("_old_key_header").alias("value"))),
        ).alias(HEADERS),
    )


def _rows_where(df: DataFrame, condition: SqlColumn) -> DataFrame:
    """The rows where `condition` holds, selected without a Filter.

    A Filter over the SQL pass gets pushed below its projections, and the optimizer then
    inlines every staged column into one predicate that re-evaluates the parse for each
    reference (minutes for a batch). Exploding a one-row array (or null) keeps the rows
    where they are computed.
    """
    return df.select(_exploded_where(condition, df.columns)).select("_r.*")


def _exploded_where(condition: SqlColumn, columns: list[str]) -> SqlColumn:
    """`columns` as one struct `_r`, in a row for each input row where `condition` holds."""
    return F.explode(F.when(condition, F.array(F.struct(*[F.col(c) for c in columns])))).alias("_r")


def fast_bronze_rows(source: Source, decoded: DataFrame) -> DataFrame:
    """The fast pass's rows in exactly bronze's layout: `_fast_rows` then `bronze_rows` in two
    projections of columns built once per source (each DataFrame step and each column is
    py4j work; a stream pays it in every micro-batch, five streams at once)."""
    from pyspark import SparkContext

    exploded, carried = _fast_bronze_columns(source, id(SparkContext._gateway))
    now = write_time().alias("_ingested_at")
    return decoded.select(exploded).select(*[now if c is None else c for c in carried])


@functools.lru_cache(maxsize=256)
def _fast_bronze_columns(source: Source, _jvm: int) -> tuple[SqlColumn, tuple[SqlColumn | None, ...]]:
    """(the exploded fast rows, bronze's columns in order with None for `_ingested_at`)."""
    schema = bronze_schema(source)
    names = [c for c in schema.fieldNames() if c != "_ingested_at"]
    exploded = _exploded_where(F.col("_fast"), names)  # (see `_rows_where`)
    return exploded, tuple(
        None if f.name == "_ingested_at" else F.col(f"_r.{f.name}").cast(f.dataType).alias(f.name) for f in schema.fields
    )


def _fast_rows(sql: DataFrame) -> DataFrame:
    return _rows_where(sql, F.col("_fast")).drop("_fast", "_old_key_header").withColumn("_reason", F.lit(None).cast("string"))


def _slow_input(sql: DataFrame) -> DataFrame:
    return _as_kafka(_rows_where(sql, ~F.col("_fast")))


def parse_source(source: Source, kafka: DataFrame, parser: str = "hybrid") -> DataFrame:
    """Kafka rows of one source's topic -> decoded columns, `_kafka_ts`, `_reason` (NULL = bronze)."""
    _check_choice("parser", parser, PARSERS)
    if parser == "python":
        return decode_python(source, kafka)
    decoded = fast_pass(kafka.sparkSession, source, parser).apply(kafka)
    return _fast_rows(decoded).unionByName(decode_python(source, _slow_input(decoded)))


def bronze_rows(source: Source, parsed: DataFrame) -> DataFrame:
    """The decoded rows that belong in bronze, in exactly `tables.bronze_schema(source)`."""
    schema = bronze_schema(source)
    values = {c: F.col(c) for c in dbz.DECODED_COLUMNS}
    values["_kafka_ts"] = F.col("_kafka_ts")
    values["_ingested_at"] = write_time()
    good = parsed.where(F.col("_reason").isNull())
    return good.select(*[values[f.name].cast(f.dataType).alias(f.name) for f in schema.fields])


def quarantine_rows(source: Source | None, parsed: DataFrame) -> DataFrame:
    """The rejected rows, in exactly `tables.quarantine_schema()`."""
    bad = parsed.where(F.col("_reason").isNotNull())
    return _to_quarantine(
        bad,
        source=F.lit(source.name if source else None),
        topic="_topic", partition="_partition", offset="_offset", kafka_ts="_kafka_ts",
        raw_key="_raw_key", raw_value="_raw_value", reason=F.col("_reason"),
    )


def unknown_topic_rows(pipeline: Pipeline, kafka: DataFrame) -> DataFrame:
    """Records on topics no source declares -> quarantine rows (same reason text as `debezium`)."""
    undeclared = kafka.where(~F.col("topic").isin(*pipeline.topics))
    reason = F.concat(F.lit("topic '"), F.col("topic"), F.lit(f"' is declared by no source of pipeline '{pipeline.name}'"))
    return _to_quarantine(
        undeclared, source=F.lit(None), topic="topic", partition="partition", offset="offset",
        kafka_ts="timestamp", raw_key="key", raw_value="value", reason=reason,
    )


def _to_quarantine(df: DataFrame, *, source: SqlColumn, topic: str, partition: str, offset: str, kafka_ts: str,
                   raw_key: str, raw_value: str, reason: SqlColumn) -> DataFrame:
    values = {
        "source": source, "topic": F.col(topic), "partition": F.col(partition), "offset": F.col(offset),
        "kafka_ts": F.col(kafka_ts), "raw_key": F.col(raw_key), "raw_value": F.col(raw_value),
        "reason": reason, "quarantined_at": write_time(),
    }
    return df.select(*[values[f.name].cast(f.dataType).alias(f.name) for f in quarantine_schema().fields])


def parse_batch(pipeline: Pipeline, kafka: DataFrame, parser: str = "hybrid") -> tuple[dict[str, DataFrame], DataFrame]:
    """A batch of Kafka rows of any topics -> ({source: bronze rows}, quarantine rows). No caching."""
    bronze: dict[str, DataFrame] = {}
    quarantine = unknown_topic_rows(pipeline, kafka)
    for source in pipeline.sources.values():
        parsed = parse_source(source, kafka.where(F.col("topic") == F.lit(source.topic)), parser)
        bronze[source.name] = bronze_rows(source, parsed)
        quarantine = quarantine.unionByName(quarantine_rows(source, parsed))
    return bronze, quarantine


def _check_choice(what: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise CdcEnrichError(f"unknown {what} {value!r}; expected one of {', '.join(choices)}")


# --------------------------------------------------------------------------- tables


def ensure_bronze_tables(spark: SparkSession, pipeline: Pipeline) -> None:
    """Create the pipeline's schemas, one bronze table per source and the quarantine table.

    Tables are append-only (`delta.appendOnly`). A source that gained declared columns gets
    them added to its row structs; any other difference is an error naming the table, since
    rewriting bronze is never something to do silently. Tables this process has checked
    already are only looked for (one `SHOW TABLES` per schema), not checked again.
    """
    wanted = [
        (bronze_table(pipeline, s), bronze_schema(s), f"bronze of Kafka topic {s.topic}", BRONZE_STATS_COLUMNS)
        for s in pipeline.sources.values()
    ] + [(quarantine_table(pipeline), quarantine_schema(), "records that could not be parsed or validated", QUARANTINE_STATS_COLUMNS)]
    keys = [_checked_key(spark, name, schema, stats) for name, schema, _, stats in wanted]
    if all(k in _CHECKED for k in keys) and _all_exist(spark, [name for name, *_ in wanted]):
        return
    ensure_schemas(spark, pipeline)
    for (name, schema, comment, stats), key in zip(wanted, keys):
        _ensure_table(spark, name, schema, comment, stats)
        _CHECKED.add(key)


def _all_exist(spark: SparkSession, names: list[str]) -> bool:
    """Whether every `[catalog.]schema.table` exists: one `SHOW TABLES` per schema."""
    by_schema: dict[str, set[str]] = {}
    for name in names:
        schema, _, table = name.rpartition(".")
        by_schema.setdefault(schema, set()).add(table.lower())
    for schema, tables in by_schema.items():
        try:
            found = {r["tableName"].lower() for r in spark.sql(f"SHOW TABLES IN {schema}").collect()}
        except Exception:  # noqa: BLE001 - a missing schema: the full check creates it
            return False
        if not tables <= found:
            return False
    return True


#: Columns Delta keeps min/max statistics for. By default it takes the first 32 leaf columns,
#: which here means every field of the row images and the raw bytes: collecting those cost
#: about three quarters of a bronze append (measured: 3.4s -> 0.8s for 64k rows). Bronze is
#: read by offset, sequence, time and key, so those keep their statistics.
BRONZE_STATS_COLUMNS = ("_topic", "_partition", "_offset", "_kafka_ts", "_op", "_key", "_source_ts_ms", "_source_lsn", "_sequence", "_ingested_at")
QUARANTINE_STATS_COLUMNS = ("source", "topic", "partition", "offset", "kafka_ts", "quarantined_at")
STATS_PROPERTY = "delta.dataSkippingStatsColumns"


# Tables whose layout and properties this process has checked (or made), per JVM: a scheduled
# stream's later runs then ask the catalog only whether the tables still exist instead of
# reading their properties and schemas again (~0.8 s for the shop's six tables).
_CHECKED: set[tuple[int, str, str, str]] = set()


def _checked_key(spark: SparkSession, name: str, schema: StructType, stats_columns: tuple[str, ...]) -> tuple[int, str, str, str]:
    return (id(spark.sparkContext._gateway), name, schema.json(), ",".join(stats_columns))


def _ensure_table(spark: SparkSession, name: str, schema: StructType, comment: str, stats_columns: tuple[str, ...]) -> None:
    from delta.tables import DeltaTable

    stats = ",".join(stats_columns)
    if not spark.catalog.tableExists(name):
        (
            DeltaTable.createIfNotExists(spark)
            .tableName(name)
            .addColumns(schema)
            .property("delta.appendOnly", "true")
            .property(STATS_PROPERTY, stats)
            .comment(comment)
            .execute()
        )
        return
    properties = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {name}").collect()}
    if properties.get(STATS_PROPERTY) != stats:  # a table made by an earlier version
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('{STATS_PROPERTY}' = '{stats}')")
    existing = spark.table(name).schema
    missing, conflicts = _schema_diff(existing, schema, "")
    if conflicts:
        raise CdcEnrichError(
            f"table {name} exists with a different layout than the pipeline declares: {'; '.join(conflicts)}. "
            "Bronze is append-only: write to new table names (tables.bronze_schema) or migrate it by hand."
        )
    for path, data_type in missing:
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({path} {data_type.simpleString()})")


def _schema_diff(existing: StructType, wanted: StructType, prefix: str) -> tuple[list[tuple[str, DataType]], list[str]]:
    """(fields to add, conflicts) turning `existing` into `wanted`; nested structs recurse."""
    missing: list[tuple[str, DataType]] = []
    conflicts: list[str] = []
    have = {f.name: f for f in existing.fields}
    for f in wanted.fields:
        path = f"{prefix}`{f.name}`"
        old = have.get(f.name)
        if old is None:
            missing.append((path, f.dataType))
        elif isinstance(f.dataType, StructType) and isinstance(old.dataType, StructType):
            sub_missing, sub_conflicts = _schema_diff(old.dataType, f.dataType, path + ".")
            missing += sub_missing
            conflicts += sub_conflicts
        elif old.dataType != f.dataType:
            conflicts.append(f"{path.replace('`', '')} is {old.dataType.simpleString()}, declared {f.dataType.simpleString()}")
    return missing, conflicts


# --------------------------------------------------------------------------- the streaming runner


@dataclass
class TableReport:
    """What one source's bronze table received in a run."""

    source: str
    table: str
    rows: int = 0  # rows appended to bronze (0 for a replayed batch Delta skipped)
    quarantined: int = 0  # this topic's records sent to quarantine
    batches: int = 0  # micro-batches that had records of this topic


@dataclass
class BronzeReport:
    """The outcome of one `run_bronze` call (per table, and quarantine)."""

    pipeline: str
    checkpoint: str
    trigger: str
    parser: str
    quarantine_table: str
    records: int = 0  # Kafka records read, all streams
    replayed_batches: int = 0  # batches Delta had already committed (restart after a crash)
    unknown_topic_records: int = 0  # quarantined because no source declares their topic
    seconds: float = 0.0
    tables: dict[str, TableReport] = field(default_factory=dict)

    @property
    def batches(self) -> int:
        """Micro-batches with records, summed over the source streams."""
        return sum(t.batches for t in self.tables.values())

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables.values())

    @property
    def quarantined(self) -> int:
        return sum(t.quarantined for t in self.tables.values()) + self.unknown_topic_records

    def render(self) -> str:
        """A small text table for the CLI."""
        lines = [
            f"bronze {self.pipeline}: {self.records} records in {self.batches} batches, {self.seconds:.1f}s "
            f"(parser {self.parser}, trigger {self.trigger}, checkpoints {self.checkpoint})"
        ]
        width = max([len(t.table) for t in self.tables.values()] + [len(self.quarantine_table)])
        lines.append(f"  {'table':<{width}}  {'rows':>9}  {'quarantined':>11}  {'batches':>7}")
        for t in self.tables.values():
            lines.append(f"  {t.table:<{width}}  {t.rows:>9}  {t.quarantined:>11}  {t.batches:>7}")
        lines.append(f"  {self.quarantine_table:<{width}}  {'':>9}  {self.quarantined:>11}  (undeclared topics: {self.unknown_topic_records})")
        if self.replayed_batches:
            lines.append(f"  {self.replayed_batches} replayed batch(es): Delta had committed them already; nothing written twice")
        return "\n".join(lines)


def undeclared_pattern(pipeline: Pipeline) -> str:
    """Topics `<prefix>.<schema>.<table>` that no source declares (Java regex, negative lookahead).

    Debezium names a captured table's topic this way; a table captured but not declared
    would otherwise be ignored silently. Its records go to quarantine instead.
    """
    declared = "|".join(re.escape(t) for t in pipeline.topics)
    family = re.escape(f"{pipeline.kafka.topic_prefix}.{pipeline.kafka.source_schema}.") + r"[^.]+"
    return f"^(?!(?:{declared})$){family}$"


def undeclared_topics_exist(bootstrap: str, pipeline: Pipeline) -> bool:
    """Whether Kafka holds a topic of `undeclared_pattern` (True when Kafka cannot be asked).

    The undeclared-topics stream is a whole query (its start, offsets and commit logs: about
    1.5 s of a run); with no such topic it would read nothing, and a topic created later is
    read from its start by the next run, so it is started only when there is one.
    """
    try:
        from confluent_kafka.admin import AdminClient

        topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    except Exception:  # noqa: BLE001 - unknown: run the stream, which reports what is wrong
        return True
    pattern = re.compile(undeclared_pattern(pipeline))
    return any(pattern.match(topic) for topic in topics)


def kafka_stream(
    spark: SparkSession,
    bootstrap: str,
    starting_offsets: str,
    max_offsets_per_trigger: int,
    *,
    topics: Iterable[str] = (),
    pattern: str | None = None,
) -> DataFrame:
    """Kafka topics (a list, or a pattern) as a streaming DataFrame of raw records.

    `failOnDataLoss` stays true: if offsets the checkpoint expects were deleted (retention,
    a recreated topic) the stream stops loudly rather than skipping records silently.
    `startingOffsets` applies to the first start only; restarts resume from the checkpoint.
    """
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("startingOffsets", starting_offsets)
        .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true")
    )
    reader = reader.option("subscribePattern", pattern) if pattern else reader.option("subscribe", ",".join(topics))
    return reader.load()


def counted(decoded: DataFrame, name: str) -> tuple[DataFrame, Observation]:
    """The SQL pass's rows with an Observation that counts, as they are written, the records
    (`records`) and those left for the Python pass (`slow`); read it with `_observed`."""
    observation = Observation(f"{name}_{uuid.uuid4().hex[:8]}")
    return decoded.observe(observation, F.count(F.lit(1)).alias("records"), F.count_if(~F.col("_fast")).alias("slow")), observation


def _observed(observation: Observation) -> dict[str, int] | None:
    """The metrics an Observation collected, or None when its query did not run (Delta
    skipped a replayed append without executing it)."""
    try:
        metrics = observation.get
    except Exception:  # noqa: BLE001 - no metrics: py4j raises an AssertionError from the JVM
        return None
    return {k: int(v) for k, v in metrics.items()} if metrics else None


def _append(spark: SparkSession, rows: DataFrame, table: str, app_id: str, batch_id: int, replay_check: bool) -> bool:
    """Append `rows`, tagged `<app_id>:<batch_id>`; False (nothing written) when `replay_check`
    finds that tag already committed to `table`: the batch is a replay after a crash.

    Only a batch the previous run planned but did not commit can be a replay
    (`uncommitted_batch`), so only then is the history read.
    """
    tag = f"{app_id}:{batch_id}"
    if replay_check and _committed(spark, table, tag):
        return False
    rows.write.format("delta").mode("append").option("userMetadata", tag).saveAsTable(table)
    return True


def _committed(spark: SparkSession, table: str, tag: str) -> bool:
    """Whether a commit of `table` carries `tag` (its whole history: a replay is rare, and
    other streams may have committed to a shared table, quarantine, since)."""
    return bool(spark.sql(f"DESCRIBE HISTORY {table}").where(F.col("userMetadata") == F.lit(tag)).limit(1).count())


def _batch_ids(folder: Path) -> set[int]:
    """The batch ids a streaming checkpoint's `offsets` or `commits` folder holds (its files
    are named by id; Hadoop's hidden `.N.crc` and temporary files are not ids)."""
    try:
        return {int(p.name) for p in folder.iterdir() if p.name.isdigit()}
    except FileNotFoundError:
        return set()


def uncommitted_batch(checkpoint: Path) -> int | None:
    """The batch a stream's previous run planned but did not commit, which its next run
    replays first (Spark's offset log is written before a batch runs, its commit log after);
    None when every planned batch was committed, as after a clean stop."""
    planned = _batch_ids(checkpoint / "offsets")
    if not planned:
        return None
    last = max(planned)
    return None if last in _batch_ids(checkpoint / "commits") else last


class _Stream:
    """The foreachBatch function of one stream; subclasses write one micro-batch."""

    name = ""

    def __init__(self, pipeline: Pipeline, report: BronzeReport, lock: threading.Lock, say: Callable[[str], None]) -> None:
        self.pipeline = pipeline
        self.report = report
        self.lock = lock
        self.say = say
        self.app_id: str | None = None
        self._bound = threading.Event()
        self._replayable: int | None = None

    def bind(self, query_id: str) -> None:
        """The commit tags' app id: the query id, kept in the checkpoint (a new checkpoint gets a new one)."""
        self.app_id = f"cdc-enrich-bronze-{query_id}"
        self._bound.set()

    def reset(self, replayable: int | None) -> None:
        """Before a (re)start: unbound; `replayable` is the batch id the previous run left
        uncommitted (the only one this run can replay), or None."""
        self._bound.clear()
        self._replayable = replayable

    def may_replay(self, batch_id: int) -> bool:
        return batch_id == self._replayable

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        if not self._bound.wait(timeout=300):
            raise CdcEnrichError(f"stream {self.name}: batch started before the query id was known")
        started = time.monotonic()
        cached: list[DataFrame] = []
        try:
            summary = self.write(batch_df.sparkSession, batch_df, batch_id, cached)
        finally:
            for df in cached:
                df.unpersist()
        if summary:
            self.say(f"bronze {self.pipeline.name}/{self.name} batch {batch_id}: {summary} ({time.monotonic() - started:.1f}s)")

    def write(self, spark: SparkSession, batch: DataFrame, batch_id: int, cached: list[DataFrame]) -> str:
        raise NotImplementedError


class _SourceStream(_Stream):
    """One source's topic -> its bronze table (+ quarantine for what does not decode)."""

    def __init__(self, pipeline: Pipeline, source: Source, parser: str, report: BronzeReport, lock: threading.Lock, say: Callable[[str], None]) -> None:
        super().__init__(pipeline, report, lock, say)
        self.source = source
        self.parser = parser
        self.name = source.name
        self.fast: SqlPass | JvmPass | None = None

    def frame(self, kafka: DataFrame) -> DataFrame:
        """What the query feeds `write`: the fast pass over the Kafka stream (analysed once, when
        the query starts, rather than for every micro-batch), or the raw records for Python."""
        if self.parser != "python":
            self.fast = fast_pass(kafka.sparkSession, self.source, self.parser)
        return kafka if self.fast is None else self.fast.apply(kafka)

    def write(self, spark: SparkSession, batch: DataFrame, batch_id: int, cached: list[DataFrame]) -> str:
        """One micro-batch (decoded by the fast pass): fast rows straight to bronze, then the rest through Python.

        The decoded batch is never cached (building the cache cost as much as decoding): its
        fast rows go to bronze in one decode-and-write pass (the stream's plan decodes), which
        also counts (an `Observation`) the records and those the pass left for Python; only
        when there are some does the Python pass run (rare).
        """
        started = time.monotonic()
        if self.fast is None:
            return self._write_python(spark, batch, batch_id, cached, started)
        first = self.may_replay(batch_id)
        table = bronze_table(self.pipeline, self.source)
        decoded, observation = counted(batch, f"bronze_{self.source.name}_{batch_id}")
        wrote_fast = _append(spark, fast_bronze_rows(self.source, decoded), table, self.app_id, batch_id, first)
        counts = _observed(observation) if wrote_fast else None
        fast_done = time.monotonic()
        # No counts: a replay after a crash (Delta had the fast rows already); the Python pass
        # then decides what is left, and its own idempotent writes skip what it wrote before.
        total = counts["records"] if counts else batch.count()
        if not total:
            return ""
        slow_n = counts["slow"] if counts else None
        good_slow = bad_n = 0
        wrote_slow = wrote_bad = True
        if slow_n != 0:
            slow = decode_python(self.source, _slow_input(batch)).persist()
            cached.append(slow)
            tally = {bool(r["ok"]): int(r["count"]) for r in slow.groupBy(F.col("_reason").isNull().alias("ok")).count().collect()}
            good_slow, bad_n = tally.get(True, 0), tally.get(False, 0)
            if good_slow:
                wrote_slow = _append(spark, bronze_rows(self.source, slow), table, f"{self.app_id}-python", batch_id, first)
            if bad_n:
                wrote_bad = _append(spark, quarantine_rows(self.source, slow), quarantine_table(self.pipeline), self.app_id, batch_id, first)
        fast_written = total - good_slow - bad_n if wrote_fast else 0
        rows = fast_written + (good_slow if wrote_slow else 0)
        quarantined = bad_n if wrote_bad else 0
        replayed = first and not (wrote_fast and wrote_slow and wrote_bad) and rows + quarantined < total
        note = self._record(total, rows, quarantined, replayed)
        timing = f"fast pass + write {fast_done - started:.1f}s, {good_slow + bad_n} by Python {time.monotonic() - fast_done:.1f}s"
        return f"{total} records, +{rows} rows, +{quarantined} quarantined{note}; {timing}"

    def _record(self, records: int, rows: int, quarantined: int, replayed: bool) -> str:
        """Count one batch in the run's report; the progress line's note about a replay."""
        with self.lock:
            entry = self.report.tables[self.source.name]
            entry.batches += 1
            entry.rows += rows
            entry.quarantined += quarantined
            self.report.records += records
            self.report.replayed_batches += 1 if replayed else 0
        return " (replayed batch: Delta had it already, nothing written twice)" if replayed else ""

    def _write_python(self, spark: SparkSession, batch: DataFrame, batch_id: int, cached: list[DataFrame], started: float) -> str:
        """parser="python": every record through `decode_record` (the benchmark's comparison)."""
        decoded = decode_python(self.source, batch).persist()
        cached.append(decoded)
        counts = {bool(r["ok"]): int(r["count"]) for r in decoded.groupBy(F.col("_reason").isNull().alias("ok")).count().collect()}
        good_n, bad_n = counts.get(True, 0), counts.get(False, 0)
        if good_n + bad_n == 0:
            return ""
        wrote_rows = wrote_bad = True
        if good_n:
            wrote_rows = _append(spark, bronze_rows(self.source, decoded), bronze_table(self.pipeline, self.source), self.app_id, batch_id, self.may_replay(batch_id))
        if bad_n:
            wrote_bad = _append(spark, quarantine_rows(self.source, decoded), quarantine_table(self.pipeline), self.app_id, batch_id, self.may_replay(batch_id))
        note = self._record(good_n + bad_n, good_n if wrote_rows else 0, bad_n if wrote_bad else 0, not (wrote_rows and wrote_bad))
        return f"{good_n + bad_n} records, +{good_n if wrote_rows else 0} rows, +{bad_n if wrote_bad else 0} quarantined{note}; {time.monotonic() - started:.1f}s"


class _UndeclaredStream(_Stream):
    """Topics of the connector's family that no source declares -> quarantine."""

    name = "_undeclared"

    def write(self, spark: SparkSession, batch: DataFrame, batch_id: int, cached: list[DataFrame]) -> str:
        raw = batch.select(*KAFKA_COLUMNS).persist()
        cached.append(raw)
        per_topic = {r["topic"]: int(r["count"]) for r in raw.groupBy("topic").count().collect()}
        total = sum(per_topic.values())
        if not total:
            return ""
        wrote = _append(spark, unknown_topic_rows(self.pipeline, raw), quarantine_table(self.pipeline), self.app_id, batch_id, self.may_replay(batch_id))
        with self.lock:
            self.report.unknown_topic_records += total if wrote else 0
            self.report.records += total
            self.report.replayed_batches += 0 if wrote else 1
        return f"{total} records on undeclared topics {', '.join(sorted(per_topic))} -> quarantine" + ("" if wrote else " (replayed, skipped)")


def run_bronze(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    bootstrap: str,
    trigger: str = "available_now",
    max_offsets_per_trigger: int | None = None,
    progress: Callable[[str], None] | None = None,
    *,
    parser: str = "hybrid",
    undeclared_topics: bool = True,
    timeout_s: float | None = None,
    checkpoint: Path | None = None,
) -> BronzeReport:
    """Ingest the pipeline's Debezium topics into bronze: one streaming query per source.

    Why one stream per source: each writes one table with its own fast pass (built once per
    source and process, not through py4j every micro-batch), and the queries run concurrently, so a 2-core
    machine works on two topics at once. A further query reads
    `<prefix>.<schema>.*` topics no source declares and quarantines them, when Kafka holds
    any (`undeclared_topics=False` skips it, for a connector that captures tables other
    pipelines own). Checkpoints: `<checkpoint>/<source>` (default base:
    `checkpoint_dir(lake, pipeline.name, "bronze")`).

    `available_now` drains what Kafka holds at start, in batches of at most
    `max_offsets_per_trigger` (default: the pipeline's) per stream, and returns;
    `processing_time` runs every `options.processing_time` until `timeout_s` (or forever).
    Restarting on the same checkpoints resumes after the last committed batch; a batch
    replayed after a crash is not written twice (commit tags, see the module docstring).
    """
    _check_choice("trigger", trigger, TRIGGERS)
    _check_choice("parser", parser, PARSERS)
    lake = Path(lake)
    base = Path(checkpoint) if checkpoint else checkpoint_dir(lake, pipeline.name, STREAM)
    max_offsets = max_offsets_per_trigger or pipeline.kafka.max_offsets_per_trigger
    starting = pipeline.kafka.starting_offsets

    def say(message: str) -> None:
        log.info(message)
        if progress is not None:
            progress(message)

    ensure_bronze_tables(spark, pipeline)
    report = BronzeReport(
        pipeline=pipeline.name, checkpoint=str(base), trigger=trigger, parser=parser,
        quarantine_table=quarantine_table(pipeline),
        tables={s.name: TableReport(s.name, bronze_table(pipeline, s)) for s in pipeline.sources.values()},
    )
    lock = threading.Lock()

    def plan(source: Source) -> tuple[_Stream, DataFrame]:
        handler = _SourceStream(pipeline, source, parser, report, lock, say)
        return handler, handler.frame(kafka_stream(spark, bootstrap, starting, max_offsets, topics=[source.topic]))

    # A source's SQL pass is thousands of py4j calls (about a second) when first built, the
    # JVM pass a few dozen: built side by side, since each thread waits on its own JVM connection.
    with ThreadPoolExecutor(max_workers=max(1, len(pipeline.sources))) as pool:
        plans: list[tuple[_Stream, DataFrame]] = list(pool.map(plan, pipeline.sources.values()))
    if undeclared_topics and undeclared_topics_exist(bootstrap, pipeline):
        raw = kafka_stream(spark, bootstrap, starting, max_offsets, pattern=undeclared_pattern(pipeline))
        plans.append((_UndeclaredStream(pipeline, report, lock, say), raw))
    say(
        f"bronze {pipeline.name}: {len(pipeline.sources)} source streams"
        f"{' + 1 for undeclared ' + pipeline.kafka.topic_prefix + '.' + pipeline.kafka.source_schema + '.* topics' if undeclared_topics else ''} "
        f"from {bootstrap}, trigger {trigger}, at most {max_offsets} records per batch, checkpoints {base}"
    )
    started = time.monotonic()
    runs = [_Run(handler, frame, base, pipeline, trigger) for handler, frame in plans]
    try:
        for run in runs:
            run.start()
        _await(runs, None if trigger == "available_now" else timeout_s, say)
    except Exception as exc:
        raise CdcEnrichError(
            f"bronze ingest of pipeline {pipeline.name!r} failed: {_short(exc)}. Nothing of an uncommitted batch "
            f"is lost: rerun to resume from the checkpoints under {base}."
        ) from exc
    finally:
        for run in runs:
            run.stop()
        report.seconds = time.monotonic() - started
    say(
        f"bronze {pipeline.name}: done, {report.records} records, {report.rows} rows to bronze, "
        f"{report.quarantined} to quarantine ({report.seconds:.1f}s)"
    )
    return report


# Spark 4.1.1's Kafka source throws this NPE while reporting progress for the first batch
# after a restart when that batch is a replay of one the crashed run left uncommitted
# (apache/spark SPARK-55271 / SPARK-57438: `Some(null)` in KafkaMicroBatchStream.metrics).
# It happens after the batch is written and committed, so restarting the query is safe.
_KAFKA_METRICS_NPE = ('"scala.Option.get()" is null', "IterableOps.map")
_MAX_RESTARTS = 3


@dataclass
class _Run:
    """One stream's query, restartable on the known Spark bug above."""

    handler: _Stream
    frame: DataFrame
    base: Path
    pipeline: Pipeline
    trigger: str
    query: Any = None
    restarts: int = 0

    def start(self) -> None:
        writer = (
            self.frame.writeStream.foreachBatch(self.handler)
            .option("checkpointLocation", str(self.base / self.handler.name))
            .queryName(f"bronze_{self.pipeline.name}_{self.handler.name}")
        )
        if self.trigger == "available_now":
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=self.pipeline.options.processing_time)
        self.handler.reset(uncommitted_batch(self.base / self.handler.name))
        self.query = writer.start()
        self.handler.bind(str(self.query.id))

    def stop(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()

    def restartable(self, exc: BaseException) -> bool:
        """The known bug: its message, raised from KafkaMicroBatchStream.metrics (JVM stack trace)."""
        text = f"{exc}\n{getattr(exc, '_stackTrace', '') or ''}\n{getattr(exc, '_cause', '') or ''}"
        known = all(marker in text for marker in _KAFKA_METRICS_NPE)
        return self.restarts < _MAX_RESTARTS and known


def _short(exc: BaseException) -> str:
    """An exception's first line (Spark's carry whole plans)."""
    lines = str(exc).strip().splitlines()
    return lines[0][:500] if lines else type(exc).__name__


def _await(runs: list[_Run], timeout_s: float | None, say: Callable[[str], None]) -> None:
    """Wait for every query (or until the timeout); a failure other than the known bug stops the wait."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pending = list(runs)
    while pending:
        for run in list(pending):
            if deadline is not None and time.monotonic() >= deadline:
                return
            try:
                done = run.query.awaitTermination(1)
            except Exception as exc:  # noqa: BLE001 - StreamingQueryException
                if not run.restartable(exc):
                    raise
                run.restarts += 1
                say(f"bronze {run.pipeline.name}/{run.handler.name}: restarting after Spark's Kafka metrics NPE "
                    f"(SPARK-55271; the replayed batch is already committed)")
                run.start()
                continue
            if done:
                pending.remove(run)
