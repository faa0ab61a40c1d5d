"""Bronze's JVM fast pass: the DebeziumDecoder Java UDF (lakehouse/jvm), built once per source and JVM."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Iterable

from pyspark.sql import Column as SqlColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    StructField,
    StructType,
)

from lakehouse.bronze import debezium as dbz
from lakehouse.bronze.fast_sql import (
    _COORDINATES,
    KAFKA_COLUMNS,
    SqlPass,
    _old_key_header,
    _true,
    _with_headers,
    sql_pass,
)
from lakehouse.declaration import Source
from lakehouse.spark import column_cache_key, is_connect
from lakehouse.tables import (
    bronze_schema,
)

log = logging.getLogger('lakehouse.bronze')


# --------------------------------------------------------------------------- the JVM pass

DECODER_CLASS = "cdcenrich.DebeziumDecoder"
# The decoder's result struct, in its field order (see DebeziumDecoder.java), -> bronze columns.
_JVM_FIELDS = (
    ("fast", None), ("op", "_op"), ("key", "_key"), ("before", "_before"), ("after", "_after"),
    ("source_ts_ms", "_source_ts_ms"), ("source_lsn", "_source_lsn"), ("source_tx_id", "_source_tx_id"),
    ("source_snapshot", "_source_snapshot"), ("source_file", "_source_file"), ("source_pos", "_source_pos"),
    ("source_row", "_source_row"), ("event_ts_ms", "_event_ts_ms"),
    ("unavailable_columns", "_unavailable_columns"), ("sequence", "_sequence"), ("old_key", "_old_key"),
)


def _jvm_result_schema(source: Source) -> StructType:
    schema = bronze_schema(source)
    return StructType([
        StructField(name, BooleanType() if column is None else schema[column].dataType, True)
        for name, column in _JVM_FIELDS
    ])


def decoder_available(spark: SparkSession) -> bool:
    """Whether the JVM decoder's class is on the session's classpath (`make setup` builds
    its jar; on Databricks the bundle attaches it as a library). Never under Spark Connect:
    a Java UDF is built through py4j, which a Connect client does not have."""
    if is_connect(spark):
        return False
    return _decoder_loaded(column_cache_key())


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
    partition, offset and the old-key header. Same rows as `SqlPass.apply` once the Python pass
    has decided what a pass leaves to it; unlike the SQL pass, it decodes a primary-key change's
    old-key header itself, so such a record is written in the batch's one fast commit instead
    of a second commit of the Python pass (which gave silver a batch of its own). Its columns
    are built once per source and JVM (`jvm_pass`) and reused by every DataFrame it is applied to."""

    header: tuple[SqlColumn, ...]
    decode: tuple[SqlColumn, ...]
    final: tuple[SqlColumn, ...]
    headers: bool

    def apply(self, kafka: DataFrame) -> DataFrame:
        """Kafka rows -> decoded rows (rows without a `headers` column are read as header-less).
        The old-key header is picked out in a projection of its own: the decoder and the output
        both read it, and a lambda over the headers array is not worth evaluating twice a record."""
        return _with_headers(kafka, self.headers).select(*self.header).select(*self.decode).select(*self.final)


def jvm_pass(source: Source, headers: bool = True) -> JvmPass:
    """`source`'s JVM pass (Kafka rows with or without `headers`); needs the decoder's jar."""
    return _build_jvm_pass(source, headers, column_cache_key())


@functools.lru_cache(maxsize=256)
def _build_jvm_pass(source: Source, headers: bool, _jvm: int) -> JvmPass:
    """(`_jvm` keys the cache: the columns are objects of one JVM.)"""
    header = (*[F.col(c) for c in KAFKA_COLUMNS], _old_key_header(headers).alias("_old_key_header"))
    decode = (
        *[F.col(c) for c in KAFKA_COLUMNS],
        F.col("_old_key_header"),
        _decoder_call(source, F.col("_old_key_header")).alias("_d"),
    )
    columns = {c: F.col(k) for k, c in zip(("topic", "partition", "offset", "key", "value"), _COORDINATES)}
    columns.update({column: F.col(f"_d.{name}") for name, column in _JVM_FIELDS if column is not None})
    schema = bronze_schema(source)
    fast = _true(F.col("_d.fast"))
    final = (
        *[columns[c].cast(schema[c].dataType).alias(c) for c in dbz.DECODED_COLUMNS],
        F.col("timestamp").alias("_kafka_ts"),
        fast.alias("_fast"),
        F.col("_old_key_header"),
    )
    return JvmPass(header, decode, final, headers)


def _decoder_call(source: Source, old_key_header: SqlColumn) -> SqlColumn:
    """A column calling a new `DebeziumDecoder` for `source` on key, value, partition, offset
    and `old_key_header` (the header's bytes, or null)."""
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
        _to_java_column(old_key_header),
    )
    return ClassicColumn(jcol)


def fast_pass(spark: SparkSession, source: Source, parser: str = "hybrid") -> SqlPass | JvmPass:
    """The fast pass `parser` asks for (`decoding_with`): the JVM pass for "hybrid" when the
    decoder can run, the SQL pass otherwise."""
    if decoding_with(spark, parser).startswith("JVM"):
        return jvm_pass(source)
    return sql_pass(source)


def decoding_with(spark: SparkSession, parser: str) -> str:
    """Which pass decodes bronze's records and why, for the run's report: the JVM decoder for
    "hybrid" on a classic session with its jar, else the SQL pass (same rows, slower)."""
    if parser == "python":
        return "Python decoder (parser python)"
    if parser == "sql":
        return "SQL pass (parser sql)"
    if is_connect(spark):
        return "SQL pass (Spark Connect: no JVM decoder)"
    if decoder_available(spark):
        return "JVM decoder"
    _warn_no_decoder()
    return "SQL pass (the decoder jar is not on the classpath)"


@functools.lru_cache(maxsize=1)
def _warn_no_decoder() -> None:
    log.warning("bronze: the JVM decoder (%s) is not on the classpath; decoding with the SQL pass, "
                "which is correct but slower. Run `make setup` (locally) or attach the bundle's decoder jar.", DECODER_CLASS)


