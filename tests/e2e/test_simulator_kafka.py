"""The simulator's records produced to the real broker and consumed back unchanged."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from lakehouse.declaration import parse_pipeline
from testkit.simulator import produce, simulate

# --------------------------------------------------------------------------- independent decoding


# --------------------------------------------------------------------------- fixtures


# --------------------------------------------------------------------------- determinism


# --------------------------------------------------------------------------- envelope fidelity


# --------------------------------------------------------------------------- truth = replay


# --------------------------------------------------------------------------- chaos


# --------------------------------------------------------------------------- a pipeline that is not the shop


# --------------------------------------------------------------------------- workload file


# --------------------------------------------------------------------------- truth files


# --------------------------------------------------------------------------- a real broker


@pytest.mark.kafka
def test_produce_and_consume_back(kafka_bootstrap: str, shop_pipeline_path: Path) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    prefix = f"sim{uuid.uuid4().hex[:8]}"
    text = shop_pipeline_path.read_text().replace("topic_prefix: shop", f"topic_prefix: {prefix}")
    pipeline = parse_pipeline(text, filename=str(shop_pipeline_path))  # keeps the shop's workload.yml
    sim = simulate(pipeline, seed=1, events=200, chaos="some", partitions=2)
    seen: list[int] = []
    assert produce(sim.records, kafka_bootstrap, progress=seen.append) == len(sim.records)
    assert seen[-1] == len(sim.records)

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": prefix, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    # explicit offsets: no committed-offset lookup, so no wait for the group coordinator
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in sorted({(r.topic, r.partition) for r in sim.records})])
    got: Counter[str] = Counter()
    tombstones = with_headers = 0
    deadline = time.monotonic() + 60
    while sum(got.values()) < len(sim.records) and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            continue
        got[msg.topic()] += 1
        tombstones += msg.value() is None
        with_headers += bool(msg.headers())
    consumer.close()
    assert got == Counter(r.topic for r in sim.records)
    assert tombstones == sum(r.value is None for r in sim.records) > 0
    assert with_headers == sum(bool(r.headers) for r in sim.records) > 0
