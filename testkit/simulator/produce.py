"""Producing simulated records to Kafka (topics created first), paced if asked."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from lakehouse.errors import StackError
from lakehouse.kafka import KafkaConnection, as_connection
from lakehouse.verify.truth import read_truth, read_truth_frames, write_truth_files  # noqa: F401 (the simulator's truth API)
from testkit.simulator.records import KafkaRecord

# --------------------------------------------------------------------------- producing


def produce(
    records: Iterable[KafkaRecord],
    kafka: str | KafkaConnection,
    rate: float | None = None,
    progress: Callable[[int], None] | None = None,
    sent: list[float] | None = None,
) -> int:
    """Produce records in order (idempotent producer, acks=all), creating topics first; returns
    the count. `rate` caps records per second; `progress` gets the running count now and then;
    `sent` gets each record's send time (epoch seconds), in order. `kafka`: bootstrap servers,
    or a connection with security options."""
    from confluent_kafka import KafkaException, Producer

    batch = list(records)
    connection = as_connection(kafka)
    bootstrap = connection.servers
    _create_topics(connection, batch)
    producer = Producer(connection.client_config(**{"enable.idempotence": True, "acks": "all", "linger.ms": 5, "log_level": 0}))
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    started = time.monotonic()
    try:
        for count, rec in enumerate(batch, start=1):
            _produce_one(producer, rec, delivered)
            if sent is not None:
                sent.append(time.time())
            _pace(started, count, rate)
            if progress and count % 1000 == 0:
                progress(count)
        left = producer.flush(60)
    except KafkaException as exc:
        raise StackError(f"producing to Kafka at {bootstrap} failed: {exc}") from None
    if left or failures:
        raise StackError(f"producing to Kafka at {bootstrap}: {left} record(s) undelivered, errors: {failures[:3]}")
    if progress:
        progress(len(batch))
    return len(batch)


def _produce_one(producer: Any, rec: KafkaRecord, delivered: Callable[[Any, Any], None]) -> None:
    while True:
        try:
            producer.produce(rec.topic, value=rec.value, key=rec.key, partition=rec.partition,
                             headers=list(rec.headers) or None, on_delivery=delivered)
            break
        except BufferError:  # local queue full: let deliveries drain
            producer.poll(0.1)
    producer.poll(0)


def _pace(started: float, count: int, rate: float | None) -> None:
    if rate:
        ahead = started + count / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


def _create_topics(kafka: KafkaConnection, records: list[KafkaRecord]) -> None:
    """Create every topic with enough partitions for the records (stack.create_topics if present)."""
    partitions: dict[str, int] = {}
    for rec in records:
        partitions[rec.topic] = max(partitions.get(rec.topic, 1), rec.partition + 1)
    by_count: dict[int, list[str]] = {}
    for topic, count in partitions.items():
        by_count.setdefault(count, []).append(topic)
    from devstack.broker import create_topics

    for count, topics in sorted(by_count.items()):
        create_topics(kafka, topics, count)
