"""How a MERGE writes (`lakehouse.deltasql.merge`): a small table has its touched files
rewritten, a large one gets deletion vectors; the rows are the same either way."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql import functions as F

import lakehouse.deltasql as deltasql
from lakehouse.deltasql import PERSISTENT_DELETION_VECTORS, matched_update, merge


def _table_of(spark, rows: int) -> str:
    name = f"merge_strategy_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING) USING DELTA TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.range(rows).select("id", F.lit("a").alias("v")).coalesce(1).write.format("delta").mode("append").saveAsTable(name)
    return name


def _update_two_rows(spark, name: str) -> dict[str, str]:
    updates = spark.range(10, 12).select("id", F.lit("b").alias("v"))
    assert merge(updates, name, "t.id = s.id", [matched_update({"v": "s.v"})])["updated"] == 2
    assert sorted(r.id for r in spark.table(name).where("v = 'b'").collect()) == [10, 11]
    return spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()["operationMetrics"]


def test_a_small_table_has_its_touched_file_rewritten(spark):
    metrics = _update_two_rows(spark, _table_of(spark, 1000))
    assert (metrics["numTargetFilesRemoved"], metrics["numTargetDeletionVectorsAdded"]) == ("1", "0")
    assert spark.conf.get(PERSISTENT_DELETION_VECTORS, None) is None  # the session is left as it was


def test_a_table_over_the_threshold_gets_deletion_vectors(spark, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(deltasql, "REWRITE_BELOW_BYTES", 0)  # every table is "large"
    metrics = _update_two_rows(spark, _table_of(spark, 1000))
    assert (metrics["numTargetFilesRemoved"], metrics["numTargetDeletionVectorsAdded"]) == ("0", "1")
