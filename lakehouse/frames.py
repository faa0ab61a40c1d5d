"""DataFrames of driver-side rows, built without a Python worker: the one way the engine and
the test kit turn Python rows into a DataFrame.

`SparkSession.createDataFrame(list, schema)` on a classic session re-pickles the rows in a Python
worker before the JVM reads them (an empty list too, once per partition): every call runs Spark
tasks that start or reuse a `pyspark.daemon` process. In the suite's CI that worker held 180 s of
CPU (7 % of what the run used), and a five-row frame took 0.30-0.37 s to build and collect
against 0.03-0.05 s from an Arrow table, which `createDataFrame` hands to the JVM directly (and
which Spark Connect sends anyway).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, DataType, MapType, StructType, TimestampType


def local_frame(spark: SparkSession, rows: Iterable[Any], schema: StructType) -> DataFrame:
    """The rows (tuples and `Row`s by position, dicts by name, as `createDataFrame` reads them)
    as a DataFrame of `schema`, sent to Spark as one Arrow table. A naive `datetime` means the
    Python process's local time, as `createDataFrame` takes it."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    records = [_arrow_value(row, schema) for row in rows]
    return spark.createDataFrame(pa.Table.from_pylist(records, schema=to_arrow_schema(schema)), schema)


def _arrow_value(value: Any, data_type: DataType) -> Any:
    """A Python value as pyarrow takes it for `data_type`: structs as dicts, maps as pairs,
    naive timestamps made aware in local time."""
    if value is None:
        return None
    if isinstance(data_type, StructType):
        if isinstance(value, dict):
            return {f.name: _arrow_value(value.get(f.name), f.dataType) for f in data_type.fields}
        return {f.name: _arrow_value(v, f.dataType) for f, v in zip(data_type.fields, value)}
    if isinstance(data_type, ArrayType):
        return [_arrow_value(v, data_type.elementType) for v in value]
    if isinstance(data_type, MapType):
        return [(_arrow_value(k, data_type.keyType), _arrow_value(v, data_type.valueType)) for k, v in value.items()]
    if isinstance(data_type, TimestampType) and isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone()
    return value
