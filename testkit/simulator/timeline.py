"""The production timeline: connector restarts, re-deliveries, lagging topics, snapshot replays."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from typing import Any

from lakehouse.verify.truth import read_truth, read_truth_frames, write_truth_files  # noqa: F401 (the simulator's truth API)
from testkit.debezium_format import (
    CONNECTOR,
)
from testkit.simulator.emitter import _Item
from testkit.simulator.records import KafkaRecord

# =========================================================================== the production timeline


class _Timeline:
    """Production order: commit order, then connector restarts, snapshot replays and lagging topics."""

    def __init__(self, items: list[_Item], rng: random.Random, server: str) -> None:
        self.items = items
        self.rng = rng
        self.server = server
        self.run_starts: list[int] = []  # when each connector run after the first began producing
        self.next_seq = len(items)
        self.applied: dict[str, Any] = {"redelivered": [], "redelivered_records": 0, "snapshot_replays": {}, "lagging_topics": {}}

    def _copy(self, item: _Item, time_us: int) -> _Item:
        self.next_seq += 1
        return replace(item, time_us=time_us, seq=self.next_seq)

    def _ordered(self, phase: str) -> list[_Item]:
        return sorted((it for it in self.items if it.phase == phase), key=lambda it: (it.time_us, it.seq))

    def restart(self) -> None:
        """A connector restart: records since the last flushed offset are produced again (same
        keys and values; the new run's context headers) after some downtime; everything later
        is produced after them."""
        stream = self._ordered("stream")
        if len(stream) < 20:
            return
        size = max(3, len(stream) // 25)
        start = self.rng.randrange(len(stream) // 10, len(stream) - size)
        low, high = stream[start].time_us, stream[start + size - 1].time_us
        shift = high - low + self.rng.randrange(2, 10) * 1_000_000
        copies = [self._copy(it, it.time_us + shift) for it in stream if low <= it.time_us <= high]
        for item in self.items:
            if item.time_us > high:
                item.time_us += shift
        self.run_starts = sorted([t + shift if t > high else t for t in self.run_starts] + [low + shift])
        self.items.extend(copies)
        self.applied["redelivered"].append({"from_ts_ms": low // 1000, "to_ts_ms": high // 1000, "records": len(copies)})
        self.applied["redelivered_records"] += len(copies)

    def assign_runs(self) -> None:
        """Tag every record with the connector run that produced it (after the restarts, before
        any lag moves records in time): runs follow each other in production time."""
        for item in self.items:
            item.run = sum(1 for start in self.run_starts if start <= item.time_us)

    def replay_snapshot(self, count: int) -> None:
        """Old snapshot records (same LSN, so older than live changes) re-sent mid-stream."""
        snapshot, stream = self._ordered("snapshot"), self._ordered("stream")
        topics = sorted({it.record.topic for it in snapshot})
        if not snapshot or not stream or not topics:
            return
        chosen = topics if count < 0 else self.rng.sample(topics, min(count, len(topics)))
        first, last = stream[0].time_us, stream[-1].time_us
        at = first + int((last - first) * self.rng.uniform(0.4, 0.8))
        base = snapshot[0].time_us
        run = max((it.run for it in stream if it.time_us <= at), default=0)
        for topic in chosen:
            copies = [replace(self._copy(it, at + it.time_us - base), run=run) for it in snapshot if it.record.topic == topic]
            self.items.extend(copies)
            self.applied["snapshot_replays"][topic] = len(copies)

    def lag(self, seconds: tuple[float, ...]) -> None:
        """Whole topics produced late (their own order kept), e.g. a slow partition leader."""
        topics = sorted({it.record.topic for it in self.items})
        chosen = self.rng.sample(topics, min(len(seconds), len(topics)))
        for topic, lag_s in zip(chosen, seconds):
            for item in self.items:
                if item.record.topic == topic:
                    item.time_us += int(lag_s * 1_000_000)
            self.applied["lagging_topics"][topic] = lag_s

    def records(self) -> list[KafkaRecord]:
        """The records in production order, each with the context headers of its connector run."""
        run_ids = [_run_id(self.rng) for _ in range(1 + len(self.run_starts))]
        out = []
        for it in sorted(self.items, key=lambda it: (it.time_us, it.seq)):
            context = (
                ("__debezium.context.connectorLogicalName", self.server.encode()),
                ("__debezium.context.taskId", b"0"),
                ("__debezium.context.connectorName", CONNECTOR.encode()),
                ("__debezium.context.runId", run_ids[it.run].encode()),
            )
            out.append(replace(it.record, headers=it.record.headers + context))
        return out


def _run_id(rng: random.Random) -> str:
    """A connector run's id as Debezium 3.6 writes it: a version-7 UUID (random bits here)."""
    bits = rng.getrandbits(128)
    bits = (bits & ~(0xF << 76)) | (0x7 << 76)  # version 7
    bits = (bits & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=bits))


