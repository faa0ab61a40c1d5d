"""`verify`'s comparison of two keyed frames (`lakehouse.verify.views.diff_frames`): what it
counts, in one pass, and the samples it names."""

from __future__ import annotations

from lakehouse.verify.views import diff_frames

SCHEMA = "id bigint, name string"


def test_equal_frames_differ_in_nothing_and_nulls_compare_equal(spark):
    rows = [(1, "ann"), (2, None), (None, "nobody")]
    diff = diff_frames(spark.createDataFrame(rows, SCHEMA), spark.createDataFrame(rows, SCHEMA), ["id"], ["id", "name"])
    assert diff.ok and diff.samples == []
    assert (diff.expected_rows, diff.actual_rows) == (3, 3)


def test_missing_extra_different_and_duplicate_keys_are_each_counted_and_sampled(spark):
    expected = spark.createDataFrame([(1, "ann"), (2, "bob"), (3, "cy"), (4, "di")], SCHEMA)
    actual = spark.createDataFrame([(1, "ann"), (2, "BOB"), (4, "di"), (4, "di"), (5, "ed"), (6, "fi"), (6, "fi")], SCHEMA)
    diff = diff_frames(expected, actual, ["id"], ["id", "name"], samples=20)
    assert not diff.ok
    assert (diff.missing, diff.extra, diff.different, diff.duplicate_keys) == (1, 3, 1, 2)
    assert "missing (id=3)" in diff.samples and "extra (id=5)" in diff.samples
    assert "different (id=2): name: expected 'bob', gold 'BOB'" in diff.samples


def test_duplicate_keys_alone_make_the_frames_differ(spark):
    expected = spark.createDataFrame([(1, "ann")], SCHEMA)
    actual = spark.createDataFrame([(1, "ann"), (1, "ann")], SCHEMA)
    diff = diff_frames(expected, actual, ["id"], ["id", "name"])
    assert not diff.ok and diff.duplicate_keys == 1 and (diff.missing, diff.extra, diff.different) == (0, 0, 0)
