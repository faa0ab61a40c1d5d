"""Bronze's pure planning: Kafka rows -> bronze rows and quarantine rows (fast pass, then Python)."""

from __future__ import annotations

import functools
from typing import Any, Callable

from pyspark.sql import Column as SqlColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    StringType,
    StructField,
    StructType,
)

from lakehouse.bronze import debezium as dbz
from lakehouse.bronze.fast_jvm import fast_pass
from lakehouse.bronze.fast_sql import (
    _COORDINATES,
    HEADERS,
    KAFKA_COLUMNS,
    PARSERS,
    _old_key_header,
)
from lakehouse.declaration import Pipeline, Source
from lakehouse.errors import CdcEnrichError
from lakehouse.spark import column_cache_key, write_time
from lakehouse.tables import (
    bronze_schema,
    quarantine_schema,
)

# --------------------------------------------------------------------------- the Python pass


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
    exploded, carried = _fast_bronze_columns(source, column_cache_key())
    now = write_time().alias("_ingested_at")
    return decoded.select(exploded).select(*[now if c is None else c for c in carried])


@functools.lru_cache(maxsize=256)
def _fast_bronze_columns(source: Source, _columns_of: int) -> tuple[SqlColumn, tuple[SqlColumn | None, ...]]:
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


