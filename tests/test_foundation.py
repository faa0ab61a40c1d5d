"""The local stack works as a user meets it: tables persist by name across processes, time travel
answers, and Kafka -> Spark -> foreachBatch -> Delta round-trips through a real broker."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka import Producer

from cdc_enrich.cli import render_rows
from lakehouse.paths import checkpoint_dir

CLI = [sys.executable, "-m", "cdc_enrich.cli"]


def run_cli(*args: str, lake: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.run([*CLI, "--lake", str(lake), *args], capture_output=True, text=True, env=env, timeout=300)


def test_a_table_written_in_one_process_is_found_by_name_in_the_next_and_time_travels(tmp_path: Path):
    """Two separate processes (the embedded metastore allows one per lake at a time)."""
    lake = tmp_path / "lake"
    created = subprocess.run(
        [sys.executable, "-c", (
            "import sys; from lakehouse.spark import build_local_spark; from pathlib import Path\n"
            f"s = build_local_spark(Path({str(lake)!r}))\n"
            "s.sql('CREATE SCHEMA IF NOT EXISTS demo_db')\n"
            "s.sql('CREATE TABLE demo_db.t USING DELTA AS SELECT id, id * 10 AS v FROM range(3)')\n"
            "s.sql('INSERT INTO demo_db.t VALUES (3, 30), (4, 40)')\n"
        )],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
    )
    assert created.returncode == 0, created.stderr[-2000:]
    now = run_cli("sql", "SELECT count(*) AS n FROM demo_db.t", lake=lake)
    assert now.returncode == 0, now.stderr[-2000:]
    assert now.stdout.splitlines()[2].strip() == "5"
    then = run_cli("sql", "SELECT count(*) AS n, max(v) AS top FROM demo_db.t VERSION AS OF 0", lake=lake)
    assert then.returncode == 0, then.stderr[-2000:]
    assert then.stdout.splitlines()[2].split("|")[0].strip() == "3"
    assert then.stdout.splitlines()[2].split("|")[1].strip() == "20"


def test_kafka_to_delta_round_trip_through_foreach_batch(spark, kafka_bootstrap: str, lake: Path):
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(100):
        producer.produce(topic, key=str(i).encode(), value=f'{{"n": {i}}}'.encode())
    assert producer.flush(30) == 0

    spark.sql("CREATE SCHEMA IF NOT EXISTS foundation")
    target = "foundation.roundtrip"

    def write(batch_df, batch_id: int) -> None:
        (batch_df.selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "offset")
         .write.format("delta").mode("append")
         .option("txnAppId", "roundtrip").option("txnVersion", batch_id)
         .saveAsTable(target))

    def drain() -> None:
        stream = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", kafka_bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 40)
            .load()
            .writeStream.foreachBatch(write)
            .option("checkpointLocation", str(checkpoint_dir(lake, "foundation", topic)))
            .trigger(availableNow=True)
            .start()
        )
        stream.awaitTermination(180)
        assert stream.exception() is None

    drain()
    drain()  # the same checkpoint again: nothing new, nothing twice
    rows = spark.table(target).collect()
    assert len(rows) == 100
    assert sorted(int(r.k) for r in rows) == list(range(100))
    assert len({r.offset for r in rows}) == 100


def test_render_rows_prints_a_readable_table():
    text = render_rows(["id", "name"], [(1, "ann"), (2, None)])
    assert text.splitlines() == ["id | name", "---+-----", "1  | ann ", "2  | NULL", "(2 rows)"]
