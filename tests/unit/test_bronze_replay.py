"""Bronze's replay rule, pure: only the batch a crash left planned but uncommitted can be a replay."""

from __future__ import annotations

from pathlib import Path

from lakehouse import bronze

# --------------------------------------------------------------------------- random valid rows for any source


# --------------------------------------------------------------------------- the SQL pass vs decode_record


# --------------------------------------------------------------------------- idempotent micro-batches


def test_only_a_batch_planned_but_not_committed_can_be_a_replay(tmp_path: Path) -> None:
    """Spark logs a batch's offsets before running it and its commit after: the gap is the replay."""
    checkpoint = tmp_path / "orders"
    assert bronze.uncommitted_batch(checkpoint) is None  # a new stream
    for folder, ids in (("offsets", ("0", "1", "2", ".2.crc")), ("commits", ("0", "1", ".1.crc"))):
        (checkpoint / folder).mkdir(parents=True)
        for name in ids:
            (checkpoint / folder / name).write_text("v1")
    assert bronze.uncommitted_batch(checkpoint) == 2  # crashed in batch 2
    (checkpoint / "commits" / "2").write_text("v1")
    assert bronze.uncommitted_batch(checkpoint) is None  # a clean stop: the next batch is new


# --------------------------------------------------------------------------- through Kafka


# --------------------------------------------------------------------------- kill -9 and restart


# --------------------------------------------------------------------------- the simulator, end to end


