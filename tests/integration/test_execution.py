"""A batch's settings (`lakehouse.execution`): small work gets `SMALL_WORK_SETTINGS` from its
tables' sizes, anything else none, and a batch's settings end with it; a frame materialized with
aggregates over it (`checkpoint_observing`) costs one Spark job, not two."""

from __future__ import annotations

import uuid

from pyspark.sql import functions as F

from lakehouse.execution import (
    SMALL_WORK_MAX_ROWS,
    SMALL_WORK_SETTINGS,
    checkpoint_observing,
    session_settings,
    small_work_settings,
)


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


def test_observed_metrics_count_every_row_of_the_frame_not_only_the_rows_kept(spark):
    frame = spark.range(10).withColumn("even", F.col("id") % 2 == 0)
    kept, metrics = checkpoint_observing(
        frame,
        [F.count(F.lit(1)).alias("rows"), F.count(F.when(F.col("even"), 1)).alias("even"), F.max("id").alias("top")],
        lambda df: df.filter("id >= 7"),
    )
    assert sorted(r["id"] for r in kept.collect()) == [7, 8, 9]
    assert metrics == {"rows": 10, "even": 5, "top": 9}


def test_observed_metrics_of_an_empty_frame_are_the_aggregates_of_no_rows(spark):
    kept, metrics = checkpoint_observing(spark.range(0), [F.count(F.lit(1)).alias("rows"), F.min("id").alias("least")])
    assert kept.count() == 0
    assert metrics == {"rows": 0, "least": None}


def test_the_metrics_come_from_the_job_that_materializes_the_frame(spark):
    sc, group = spark.sparkContext, f"observe-{uuid.uuid4().hex[:8]}"
    sc.setJobGroup(group, "checkpoint_observing")
    try:
        kept, metrics = checkpoint_observing(spark.range(1_000), [F.sum("id").alias("total")], lambda df: df.filter("id < 3"))
        jobs = sc.statusTracker().getJobIdsForGroup(group)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert metrics["total"] == 499_500
    assert len(jobs) == 1  # an aggregation of its own would be a second job reading the frame again
