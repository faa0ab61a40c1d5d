"""`lakehouse.frames.local_frame` builds the same DataFrame as `createDataFrame` from the same rows."""

from __future__ import annotations

import time
from datetime import date, datetime, timezone
from decimal import Decimal

from pyspark.sql import Row
from pyspark.sql.types import StructType

from lakehouse.frames import local_frame

DDL = (
    "id BIGINT, name STRING, amount DECIMAL(38,0), at TIMESTAMP, day DATE, raw BINARY, ok BOOLEAN, "
    "tags ARRAY<STRING>, attrs MAP<STRING, INT>, inner STRUCT<k: INT, seen: TIMESTAMP, deep: STRUCT<v: DOUBLE>>"
)
ROWS = [
    (1, "a", Decimal(10**30), datetime(2026, 1, 2, 3, 4, 5, 6), date(2026, 1, 2), b"\x00\x01", True,
     ["x", None], {"k": 1}, Row(k=1, seen=datetime(2026, 5, 6, 7, 8, 9, tzinfo=timezone.utc), deep=Row(v=1.5))),
    Row(id=2, name=None, amount=None, at=datetime(2026, 7, 1, tzinfo=timezone.utc), day=None, raw=None, ok=None,
        tags=[], attrs={}, inner=None),
    {"id": 3, "name": "c", "inner": {"k": 3, "seen": None, "deep": {"v": None}}},
]


def test_local_frame_equals_create_data_frame_for_every_kind_of_value(spark, monkeypatch) -> None:
    """In a Python process whose local time is not UTC (the session's is), so that a naive
    timestamp read as anything but local time shows."""
    schema = StructType.fromDDL(DDL)
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        expected = spark.createDataFrame(ROWS, schema).collect()
        got = local_frame(spark, ROWS, schema)
        assert got.select("*").schema == schema  # as the JVM has it (`got.schema` is the one handed in)
        assert got.collect() == expected
    finally:
        monkeypatch.undo()
        time.tzset()
    assert local_frame(spark, [], schema).count() == 0
