"""One ordering rule, three implementations, the same records (`lakehouse.ordering.RULES`).

For each rule, every record's sequence from the Python value (`decode_record`, the
specification), from the rule's SQL column evaluated by Spark, from the SQL fast pass and from
the JVM decoder (`DebeziumDecoder`): wherever a fast implementation takes the record it gives
Python's value, and all of them take exactly the records the case expects (the rest is
Python's to decide, usually to quarantine).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse import bronze, ordering
from lakehouse.bronze.debezium import decode_record
from lakehouse.declaration import Column, Source

KAFKA_SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
FIELDS_SCHEMA = "op string, lsn bigint, file string, pos bigint, row int, ts_ms bigint, partition int, offset bigint"
TS_MS = 1_767_225_600_000


@dataclass(frozen=True)
class Case:
    """One change: its op, `value.source` fields, Kafka coordinates, and whether the fast passes take it."""

    op: str
    block: dict[str, Any]
    fast: bool
    partition: int = 0
    offset: int = 0
    fields: dict[str, Any] = field(default_factory=dict)


def _pg(lsn: int | None, op: str = "c", fast: bool = True) -> Case:
    return Case(op, {"ts_ms": TS_MS, "lsn": lsn}, fast)


def _my(file: str | None, pos: int | None, row: int | None, fast: bool = True) -> Case:
    return Case("c", {"ts_ms": TS_MS, "file": file, "pos": pos, "row": row}, fast)


def _ts(ts_ms: int | None, partition: int, offset: int, fast: bool = True) -> Case:
    return Case("c", {"ts_ms": ts_ms}, fast, partition, offset)


CASES: dict[str, list[Case]] = {
    "postgres": [
        _pg(0), _pg(700, "d"), _pg(700, "c"), _pg(700, "u"), _pg(700, "r"), _pg(2**63 - 1),
        _pg(-4, fast=False), _pg(None, fast=False),
    ],
    "mysql": [
        _my("mysql-bin.000003", 154, 2), _my("binlog.1", 0, 0), _my("b." + "9" * 17, 10**14 - 1, 999_999),
        _my("b." + "9" * 18, 154, 2, fast=False), _my("mysql-bin.000003", 10**14, 0, fast=False),
        _my("mysql-bin.000003", 154, 10**6, fast=False), _my("mysql-bin.000003", -1, 0, fast=False),
        _my("bin-é.3", 154, 2, fast=False), _my("mysql-bin", 154, 2, fast=False), _my(None, 154, 2, fast=False),
    ],
    "ts_ms": [
        _ts(77, 3, 11), _ts(TS_MS, 0, 0), _ts(10**13 - 1, 999_999, 10**17),
        _ts(10**13, 0, 0, fast=False), _ts(-1, 0, 0, fast=False), _ts(TS_MS, 10**6, 0, fast=False),
        _ts(None, 0, 0, fast=False),
    ],
}


def _source(rule: str) -> Source:
    return Source(name="o", topic="t.o", primary_key=("id",), columns=(Column("id", "bigint"),), sequence=rule)


def _record(case: Case) -> tuple[bytes, bytes]:
    """(key, value) as Debezium writes the change of row id=1 (the fields a case leaves None are absent)."""
    block = {k: v for k, v in case.block.items() if v is not None}
    image = {"id": 1}
    envelope = {"before": image if case.op == "d" else None, "after": None if case.op == "d" else image,
                "source": block, "op": case.op, "ts_ms": TS_MS + 5}
    return json.dumps(image).encode(), json.dumps(envelope, ensure_ascii=False).encode()


def _python(source: Source, case: Case) -> Decimal | None:
    row, _ = decode_record(source, *_record(case), source.topic, case.partition, case.offset)
    return None if row is None else row["_sequence"]


def _kafka(spark: SparkSession, source: Source, cases: list[Case]) -> DataFrame:
    ts = datetime(2026, 1, 1)
    rows = [(*_record(c), source.topic, c.partition, c.offset, ts) for c in cases]
    return spark.createDataFrame(rows, KAFKA_SCHEMA)


def _taken(df: DataFrame, value: str, taken: str) -> list[tuple[bool, Decimal | None]]:
    """(taken, value when taken) per row, in the cases' order (the frame keeps it: no shuffle)."""
    return [(r[taken], r[value] if r[taken] else None) for r in df.select(value, taken).collect()]


def _expected(source: Source, cases: list[Case]) -> list[tuple[bool, Decimal | None]]:
    return [(c.fast, _python(source, c) if c.fast else None) for c in cases]


@pytest.mark.parametrize("name", list(ordering.RULES))
def test_every_rule_has_cases(name: str) -> None:
    cases = CASES[name]
    assert any(c.fast for c in cases) and any(not c.fast for c in cases)
    assert all(_python(_source(name), c) is not None for c in cases if c.fast)


@pytest.mark.parametrize("name", list(ordering.RULES))
def test_the_sql_column_gives_the_python_value(spark: SparkSession, name: str) -> None:
    rule, source, cases = ordering.rule(name), _source(name), CASES[name]
    rows = [(c.op, c.block.get("lsn"), c.block.get("file"), c.block.get("pos"), c.block.get("row"),
             c.block.get("ts_ms"), c.partition, c.offset) for c in cases]
    df = spark.createDataFrame(rows, FIELDS_SCHEMA)
    value, ok = rule.sql({f: F.col(f) for f in rule.fields}, F.col("op"), F.col("partition"), F.col("offset"))
    assert _taken(df.select(value.alias("v"), ok.alias("ok")), "v", "ok") == _expected(source, cases)


@pytest.mark.parametrize("kind", ["sql", "jvm"])
@pytest.mark.parametrize("name", list(ordering.RULES))
def test_the_fast_passes_give_the_python_value(spark: SparkSession, name: str, kind: str) -> None:
    """The SQL pass (the rule's column in place) and the JVM decoder, on the same Kafka records."""
    if kind == "jvm" and not bronze.decoder_available(spark):
        pytest.skip("the JVM decoder jar is not on the classpath (`make setup` builds it)")
    source, cases = _source(name), CASES[name]
    fast = bronze.jvm_pass(source) if kind == "jvm" else bronze.sql_pass(source)
    decoded = fast.apply(_kafka(spark, source, cases))
    assert _taken(decoded, "_sequence", "_fast") == _expected(source, cases)
