"""Bronze's SQL fast pass: pure Spark SQL decoding of the common Debezium shapes (no jar needed)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Iterable

from pyspark.sql import Column as SqlColumn
from pyspark.sql import DataFrame
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
)
from pyspark.sql.types import (
    _parse_datatype_string as _parse_datatype,
)

from lakehouse import ordering
from lakehouse.bronze import debezium as dbz
from lakehouse.declaration import Column, Source
from lakehouse.errors import CdcEnrichError
from lakehouse.spark import column_cache_key
from lakehouse.tables import (
    bronze_schema,
)

PARSERS = ("hybrid", "sql", "python")  # hybrid: the JVM pass when its jar is there, else SQL
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
_COORDINATES = ("_topic", "_partition", "_offset", "_raw_key", "_raw_value")  # bronze's names for them
HEADERS = "headers"  # array<struct<key: string, value: binary>>, read with includeHeaders
STREAM = "bronze"

_VALUE_SCHEMA_TYPE = "array<struct<field:string,fields:array<struct<field:string,type:string,name:string>>>>"
_KEY_SCHEMA_TYPE = "array<struct<field:string,type:string,name:string>>"
_NARROW_NUMBER = r"^-?[0-9]+(\.[0-9]+)?$"
_ISO_TIMESTAMP_FAST = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|[+-](0[0-9]|1[0-7]):[0-5][0-9])$"
)
_ISO_DATE_FAST = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
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
    return _build_sql_pass(source, headers, column_cache_key())


@functools.lru_cache(maxsize=256)
def _build_sql_pass(source: Source, headers: bool, _columns_of: int) -> SqlPass:
    """(`_columns_of` keys the cache: `column_cache_key`.)"""
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
    sequence, sequence_ok = _sequence_sql(source, op, src)
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


def _sequence_sql(source: Source, op: SqlColumn, src: dict[str, SqlColumn]) -> tuple[SqlColumn, SqlColumn]:
    """The declared ordering rule's SQL column (`lakehouse.ordering`): (sequence, exact here)."""
    rule = ordering.rule(source.sequence)
    return rule.sql({name: src[name] for name in rule.fields}, op, F.col("partition"), F.col("offset"))
