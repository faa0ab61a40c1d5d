"""The process's record of subscription moves written (`lakehouse.gold.applied`): what a second
view's batch may skip, and what it must still write."""

from __future__ import annotations

import threading

from lakehouse.gold.applied import AppliedMoves


def test_only_moves_written_to_that_table_in_that_application_count_as_written():
    moves = AppliedMoves()
    moves.record("app", "silver._sub_orders__customer", [(10, 1, "h", 3, False)])
    assert moves.missing("app", "silver._sub_orders__customer", [(10, 1, "h", 3, False)]) == []
    # another version of the same key, another table, another application: not written
    assert moves.missing("app", "silver._sub_orders__customer", [(10, 2, "h", 5, False)]) == [(10, 2, "h", 5, False)]
    assert moves.missing("app", "silver._sub_items__order", [(10, 1, "h", 3, False)]) == [(10, 1, "h", 3, False)]
    assert moves.missing("other", "silver._sub_orders__customer", [(10, 1, "h", 3, False)]) == [(10, 1, "h", 3, False)]


def test_a_table_created_anew_forgets_what_was_written_under_its_name():
    moves = AppliedMoves()
    moves.record("app", "t", [(1,)])
    moves.forget("t")
    assert moves.missing("app", "t", [(1,)]) == [(1,)]


def test_the_oldest_moves_are_forgotten_first_beyond_the_limit():
    moves = AppliedMoves(rows_per_table=2)
    moves.record("app", "t", [(1,), (2,)])
    moves.record("app", "t", [(3,)])
    assert moves.missing("app", "t", [(1,), (2,), (3,)]) == [(1,)]


def test_writes_of_one_table_wait_for_each_other_and_other_tables_do_not():
    moves = AppliedMoves()
    holding, release = threading.Event(), threading.Event()
    entered: list[str] = []

    def first() -> None:
        with moves.writing("app", "t"):
            holding.set()
            release.wait(5)

    def write(table: str, name: str) -> None:
        with moves.writing("app", table):
            entered.append(name)

    a = threading.Thread(target=first)
    a.start()
    assert holding.wait(5)
    write("u", "other table")  # not blocked by t's write: returns at once in this thread
    b = threading.Thread(target=write, args=("t", "same table"))
    b.start()
    b.join(0.3)
    assert entered == ["other table"]  # the second write of t is still waiting
    release.set()
    a.join(5); b.join(5)
    assert entered == ["other table", "same table"]
