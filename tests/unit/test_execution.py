"""Which batches run with the settings for a few rows (`lakehouse.execution.is_small_work`)."""

from __future__ import annotations

from lakehouse.execution import SMALL_WORK_MAX_BYTES, SMALL_WORK_MAX_ROWS, is_small_work


def test_a_few_changes_over_small_tables_are_small_work():
    assert is_small_work(3, [40_000, 90_000])
    assert is_small_work(SMALL_WORK_MAX_ROWS, [SMALL_WORK_MAX_BYTES])


def test_one_large_table_or_many_changes_are_not():
    assert not is_small_work(3, [10, SMALL_WORK_MAX_BYTES + 1])
    assert not is_small_work(SMALL_WORK_MAX_ROWS + 1, [10])


def test_a_table_of_unknown_size_is_not_small():
    assert not is_small_work(1, [None])
