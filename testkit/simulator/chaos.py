"""Chaos plans (`none`, `some`, `heavy`): what production brings, as probabilities."""

from __future__ import annotations

from dataclasses import dataclass

from lakehouse.verify.truth import read_truth, read_truth_frames, write_truth_files  # noqa: F401 (the simulator's truth API)

# =========================================================================== chaos


@dataclass(frozen=True)
class ChaosPlan:
    """What one chaos level does. Rates are per transaction (per foreign-key value for null/dangling).

    Every feature with a non-zero rate happens at least once per run (forced when chance has
    not produced it by a random point of the run), so short runs still exercise it.
    """

    fk_move: float = 0.0  # update a row's foreign key to another parent (or null/dangling)
    null_fk: float = 0.0  # a new foreign-key value is null
    dangling_fk: float = 0.0  # a new foreign-key value names no parent (undeclared FK constraint)
    recreate: float = 0.0  # delete a referenced parent and re-create it, same key, one transaction
    pk_change: float = 0.0  # UPDATE of a primary key: delete + tombstone + create
    noop_update: float = 0.0  # UPDATE that changes nothing (still an event)
    restarts: int = 0  # connector restarts: a range of records re-delivered (same key and value bytes)
    lags_s: tuple[float, ...] = ()  # one topic per entry produced this many seconds late
    snapshot_replays: int = 0  # topics whose old snapshot is re-sent mid-stream (-1: all)
    # connector outages with lost offsets: the changes committed while it was down are never
    # sent; it comes back with a new snapshot of every table (deleted rows: no event at all)
    resnapshots: int = 0


CHAOS_PLANS: dict[str, ChaosPlan] = {
    "none": ChaosPlan(),
    "some": ChaosPlan(
        fk_move=0.05, null_fk=0.04, recreate=0.015, pk_change=0.015, noop_update=0.01,
        restarts=1, lags_s=(30.0,), snapshot_replays=1,
    ),
    "heavy": ChaosPlan(
        fk_move=0.12, null_fk=0.08, dangling_fk=0.03, recreate=0.04, pk_change=0.04, noop_update=0.03,
        restarts=3, lags_s=(60.0, 20.0), snapshot_replays=-1, resnapshots=1,
    ),
}
_CHAOS_OPS = ("fk_move", "recreate", "pk_change", "noop_update")


