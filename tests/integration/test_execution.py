"""A batch's settings (`lakehouse.execution`): small work gets `SMALL_WORK_SETTINGS` from its
tables' sizes, anything else none, and a batch's settings end with it."""

from __future__ import annotations

import uuid

from pyspark.sql import functions as F

from lakehouse.execution import SMALL_WORK_MAX_ROWS, SMALL_WORK_SETTINGS, session_settings, small_work_settings


def _table(spark, rows: int) -> str:
    name = f"execution_{uuid.uuid4().hex[:8]}"
    # sha2 of the id: incompressible text, so the bytes follow the rows
    spark.range(rows).select("id", F.sha2(F.col("id").cast("string"), 256).alias("v")).write.format("delta").saveAsTable(name)
    return name


def test_small_tables_and_few_changes_get_the_small_work_settings_and_a_large_table_none(spark):
    small, large = _table(spark, 10), _table(spark, 60_000)  # ~2 MiB of hashes
    assert small_work_settings(spark, 3, [small]) == SMALL_WORK_SETTINGS
    assert small_work_settings(spark, 3, [small, large]) == {}
    assert small_work_settings(spark, SMALL_WORK_MAX_ROWS + 1, [small]) == {}


def test_settings_hold_inside_the_block_and_are_restored_after_it(spark):
    key = "spark.sql.shuffle.partitions"
    before = spark.conf.get(key)
    spark.conf.set(key, "7")
    try:
        with session_settings(spark, SMALL_WORK_SETTINGS):
            assert spark.conf.get(key) == SMALL_WORK_SETTINGS[key]
        assert spark.conf.get(key) == "7"
    finally:
        spark.conf.set(key, before)
