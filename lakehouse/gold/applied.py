"""Subscription moves this process has written, so that a second view following the same
relation skips a MERGE that would change nothing.

Every view that follows a relation (`orders.customer` is followed by `orders_enriched` and by
`order_items_enriched`) reads the same left changes and writes the same moves to one
subscription table. The second MERGE of identical rows changes no row, yet costs what the first
did (a Delta MERGE reads and rewrites every file a source row matches, then commits). Within one
process the writes of a table are serialized here, and the rows each one committed are
remembered; a batch whose moves were all committed already skips its MERGE.

Why that is safe: a subscription row only ever gives way to a newer one (the MERGE's clauses
compare `_sequence`), so once a move is in the table, writing it again changes nothing, whoever
wrote it. Only small batches are remembered (a larger one is written as before), and a table
created anew in this process forgets what was remembered of its name.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Iterator

from pyspark.sql import DataFrame

#: Batches of at most this many moves are collected to the driver and remembered.
REMEMBERED_BATCH_ROWS = 5_000
#: Moves remembered per table, the oldest forgotten first: ten of the largest batches remembered,
#: enough for the other views' batches of the same changes.
REMEMBERED_ROWS_PER_TABLE = 50_000

_Move = tuple


class AppliedMoves:
    """Per (Spark application, subscription table): a lock for its writes and the moves written.

    >>> moves = AppliedMoves()
    >>> moves.record("app", "t", [(1, 10)]); moves.missing("app", "t", [(1, 10), (2, 20)])
    [(2, 20)]
    >>> moves.forget("t"); moves.missing("app", "t", [(1, 10)])
    [(1, 10)]
    """

    def __init__(self, rows_per_table: int = REMEMBERED_ROWS_PER_TABLE) -> None:
        self.rows_per_table = rows_per_table
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._moves: dict[tuple[str, str], OrderedDict[_Move, None]] = {}

    @contextmanager
    def writing(self, app: str, table: str) -> Iterator[None]:
        """Hold the table's lock while checking, writing and recording its moves."""
        with self._guard:
            lock = self._locks.setdefault((app, table), threading.Lock())
        with lock:
            yield

    def missing(self, app: str, table: str, moves: list[_Move]) -> list[_Move]:
        """The `moves` not written to `table` by this process (all of them if it knows none)."""
        with self._guard:
            known = self._moves.get((app, table))
            return list(moves) if not known else [m for m in moves if m not in known]

    def record(self, app: str, table: str, moves: list[_Move]) -> None:
        """Remember `moves` as committed to `table` (its write returned)."""
        with self._guard:
            known = self._moves.setdefault((app, table), OrderedDict())
            for move in moves:
                known[move] = None
                known.move_to_end(move)
            while len(known) > self.rows_per_table:
                known.popitem(last=False)

    def forget(self, table: str) -> None:
        """Forget every move remembered for `table` (it was just created: it holds none)."""
        with self._guard:
            for key in [k for k in self._moves if k[1] == table]:
                del self._moves[key]


#: The process's record (a foreachBatch body runs in the driver, or in one Connect worker).
APPLIED = AppliedMoves()


def collected_moves(updates: DataFrame, bound: int | None = None) -> list[_Move] | None:
    """The batch's moves as tuples when they are few enough to remember (one Spark job), else
    None; without a job when `bound` (the batch's change rows, at least its moves) says too many."""
    if bound is not None and bound > REMEMBERED_BATCH_ROWS:
        return None
    rows = updates.limit(REMEMBERED_BATCH_ROWS + 1).collect()
    return [tuple(r) for r in rows] if len(rows) <= REMEMBERED_BATCH_ROWS else None
