"""The shared streaming runner on a real SparkSession: available_now drains a Delta table and
stops, processing_time stops at the timeout, a failing batch is the project's error and the
other queries of the run are stopped."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from lakehouse.errors import StreamError
from lakehouse.streaming import StreamSpec, run_streams


def _tag() -> str:
    return uuid.uuid4().hex[:8]


def _active(spark: Any, names: set[str]) -> set[str]:
    return {q.name for q in spark.streams.active} & names


def _delta_table(spark: Any, rows: int) -> str:
    """A small Delta table of `rows` ids, appended in two commits."""
    table = f"default.streaming_{_tag()}"
    spark.range(0, rows // 2).write.format("delta").saveAsTable(table)
    spark.range(rows // 2, rows).write.format("delta").mode("append").saveAsTable(table)
    return table


def _rate_spec(spark: Any, tmp_path: Path, name: str, handler: Any) -> StreamSpec:
    return StreamSpec(
        name=name,
        query_name=name,
        checkpoint=tmp_path / name,
        build=lambda: spark.readStream.format("rate").option("rowsPerSecond", 5).load().writeStream.foreachBatch(handler),
    )


def test_available_now_drains_a_delta_table_and_stops(spark: Any, tmp_path: Path) -> None:
    table = _delta_table(spark, 40)
    seen: list[int] = []
    batches: list[int] = []
    ids: list[str] = []
    name = f"drain_{_tag()}"

    def on_batch(batch: Any, batch_id: int) -> None:
        seen.extend(r["id"] for r in batch.collect())
        batches.append(batch_id)

    spec = StreamSpec(
        name=name,
        query_name=name,
        checkpoint=tmp_path / "drain",
        build=lambda: spark.readStream.format("delta").option("maxFilesPerTrigger", 1).table(table).writeStream.foreachBatch(on_batch),
        started=ids.append,
    )
    run_streams([spec], "available_now", "1 second")
    assert sorted(seen) == list(range(40)) and len(batches) >= 2  # one file per batch
    assert len(ids) == 1 and not _active(spark, {name})
    run_streams([spec], "available_now", "1 second")  # the same checkpoint: nothing new
    assert sorted(seen) == list(range(40))


def test_processing_time_runs_until_the_timeout_then_stops(spark: Any, tmp_path: Path) -> None:
    names = {f"tick_{_tag()}", f"tock_{_tag()}"}
    calls: dict[str, int] = {n: 0 for n in names}
    lock = threading.Lock()

    def counter(name: str) -> Any:
        def on_batch(batch: Any, batch_id: int) -> None:
            with lock:
                calls[name] += 1

        return on_batch

    started = time.monotonic()
    run_streams([_rate_spec(spark, tmp_path, n, counter(n)) for n in sorted(names)], "processing_time", "1 second", timeout_s=8)
    elapsed = time.monotonic() - started
    assert 8 <= elapsed < 60
    assert all(c >= 1 for c in calls.values()), calls  # both ran, together
    assert not _active(spark, names)


def test_a_failing_batch_is_the_projects_error_and_the_others_are_stopped(spark: Any, tmp_path: Path) -> None:
    fine, bad = f"fine_{_tag()}", f"bad_{_tag()}"

    def ok(batch: Any, batch_id: int) -> None:
        pass

    def boom(batch: Any, batch_id: int) -> None:
        if batch_id >= 1:
            raise RuntimeError(f"no batch {batch_id} today")

    specs = [_rate_spec(spark, tmp_path, fine, ok), _rate_spec(spark, tmp_path, bad, boom)]
    with pytest.raises(StreamError, match=f"^{bad} failed: .*Nothing of an uncommitted batch is lost") as caught:
        run_streams(specs, "processing_time", "1 second", timeout_s=120)
    assert "no batch 1 today" in str(caught.value.__cause__)
    assert not _active(spark, {fine, bad})
