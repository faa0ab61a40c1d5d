"""The process's record of subscription moves written (`lakehouse.gold.applied`): what a second
view's batch may skip, and what it must still write."""

from __future__ import annotations

import threading
import time

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
    order: list[str] = []

    def write(table: str, name: str, hold_s: float) -> None:
        with moves.writing("app", table):
            order.append(f"{name} in")
            time.sleep(hold_s)
            order.append(f"{name} out")

    first = threading.Thread(target=write, args=("t", "a", 0.3))
    first.start()
    time.sleep(0.05)
    other = threading.Thread(target=write, args=("u", "c", 0.0))
    second = threading.Thread(target=write, args=("t", "b", 0.0))
    other.start(); other.join()
    second.start(); second.join(); first.join()
    assert order.index("c out") < order.index("a out")  # another table's write did not wait
    assert order.index("a out") < order.index("b in")  # the same table's did
