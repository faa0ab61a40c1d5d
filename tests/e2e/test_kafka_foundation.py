"""Kafka -> Spark -> foreachBatch -> Delta round-trips through the real local broker."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Producer

from lakehouse.paths import checkpoint_dir


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


