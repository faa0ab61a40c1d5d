"""How a MERGE writes (`lakehouse.deltasql.merge`): a small table has its touched files
rewritten, a large one gets deletion vectors (turned on by the first MERGE past the threshold
when the table was made to get them once large); the rows are the same either way."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql import functions as F

import lakehouse.deltasql as deltasql
from lakehouse.deltasql import DELETION_VECTORS_WHEN_LARGE, PERSISTENT_DELETION_VECTORS, matched_update, merge, not_matched_insert
from lakehouse.sqltext import string_literal
from lakehouse.tables import TXN_APP_ID, delta_txn


def _table_of(spark, rows: int, properties: dict[str, str] | None = None) -> str:
    name = f"merge_strategy_{uuid.uuid4().hex[:8]}"
    props = ", ".join(f"{string_literal(k)} = {string_literal(v)}" for k, v in (properties or {"delta.enableDeletionVectors": "true"}).items())
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING) USING DELTA TBLPROPERTIES ({props})")
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


def _has_deletion_vectors(spark, name: str) -> bool:
    return "deletionVectors" in (spark.sql(f"DESCRIBE DETAIL {name}").first()["tableFeatures"] or [])


def test_a_table_made_to_get_deletion_vectors_once_large_has_none_while_small(spark):
    name = _table_of(spark, 1000, DELETION_VECTORS_WHEN_LARGE)
    metrics = _update_two_rows(spark, name)
    assert (metrics["numTargetFilesRemoved"], metrics["numTargetDeletionVectorsAdded"]) == ("1", "0")
    assert not _has_deletion_vectors(spark, name)  # its scans and MERGEs skip the vectors' planning


def test_the_first_merge_past_the_threshold_turns_deletion_vectors_on_and_keeps_its_own_txn_tag(spark, monkeypatch: pytest.MonkeyPatch):
    """The feature is turned on by a commit of its own, outside the MERGE's txn tag: the MERGE
    still writes, and a replay of the same tag is still skipped."""
    name = _table_of(spark, 1000, DELETION_VECTORS_WHEN_LARGE)
    monkeypatch.setattr(deltasql, "REWRITE_BELOW_BYTES", 0)  # every table is "large"
    updates = spark.range(10, 12).select("id", F.lit("b").alias("v"))
    with delta_txn(spark, "merge-strategy-app", 7):
        assert merge(updates, name, "t.id = s.id", [matched_update({"v": "s.v"})])["updated"] == 2
    assert _has_deletion_vectors(spark, name)
    history = spark.sql(f"DESCRIBE HISTORY {name}").orderBy("version").collect()
    assert [h["operation"] for h in history[-2:]] == ["SET TBLPROPERTIES", "MERGE"]
    assert history[-1]["operationMetrics"]["numTargetDeletionVectorsAdded"] == "1"
    with delta_txn(spark, "merge-strategy-app", 7):  # a replay
        assert merge(updates.select("id", F.lit("c").alias("v")), name, "t.id = s.id", [matched_update({"v": "s.v"})])["updated"] == 0
    assert sorted(r.id for r in spark.table(name).where("v = 'b'").collect()) == [10, 11]
    assert spark.conf.get(TXN_APP_ID, None) is None  # the session is left as it was


def test_a_merge_that_grows_a_table_past_the_threshold_turns_deletion_vectors_on_in_the_same_batch(
    spark, monkeypatch: pytest.MonkeyPatch
):
    """A large insert into a table known small reads the table's size again at once: the batch
    that grew it past the threshold pays the feature's commit, and the next MERGE marks rows in
    deletion vectors without a commit of its own first."""
    name = _table_of(spark, 100, DELETION_VECTORS_WHEN_LARGE)
    size = spark.sql(f"DESCRIBE DETAIL {name}").first()["sizeInBytes"]
    monkeypatch.setattr(deltasql, "REWRITE_BELOW_BYTES", size)  # small now, large after the insert
    monkeypatch.setattr(deltasql, "GROWN_ROWS", 10)
    rows = spark.range(1000, 1100).select("id", F.lit("a").alias("v")).coalesce(1)
    assert merge(rows, name, "t.id = s.id", [not_matched_insert({"id": "s.id", "v": "s.v"})])["inserted"] == 100
    assert _has_deletion_vectors(spark, name)  # turned on by the batch that grew it
    history = spark.sql(f"DESCRIBE HISTORY {name}").orderBy("version").collect()
    assert [h["operation"] for h in history[-2:]] == ["MERGE", "SET TBLPROPERTIES"]
    metrics = _update_two_rows(spark, name)
    assert metrics["numTargetDeletionVectorsAdded"] == "1"
    history = spark.sql(f"DESCRIBE HISTORY {name}").orderBy("version").collect()
    assert [h["operation"] for h in history[-3:]] == ["MERGE", "SET TBLPROPERTIES", "MERGE"]  # no commit of its own first
