"""Where gold rows live: affected keys as a few key ranges (so Delta skips files by their
statistics), and writes laid out by key (so key-local changes touch few files).

Delta prunes files only for literal predicates on the target, never for a join with a set of
keys. A batch's affected keys, whatever their number, become at most `MAX_POINTS` points
(one literal `IN`, a hash lookup per row) or `MAX_RANGES` closed intervals on the key's first
column, split at the largest gaps: the newest 5 % of an append-mostly table is one interval,
a few scattered keys are a few points.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any, Iterable, Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from lakehouse.deltasql import sql_literal
from lakehouse.sqltext import quote

KeyRange = tuple[Any, Any]  # closed: lo <= key <= hi

#: At most this many intervals in a pruning predicate. Delta evaluates it against every file's
#: statistics, and Spark then against every row of the files it keeps, in each of a MERGE's
#: passes: a gold MERGE of ~2,500 scattered keys into 1M rows (26 files, none skipped; the
#: three warm runs after a process's first, one process per setting, 2 cores, 2026-12-01) took
#: 7.5-8.1 s with 64 intervals, 4.0-6.8 s with 16, 3.1-4.2 s with 4 and 3.4 s with none.
#: Eight still skip most files of a batch of recent keys and a few scattered ones, which is
#: where skipping pays.
MAX_RANGES = 8
#: Up to this many distinct keys are listed as points instead (an `IN` list: Spark looks each
#: row up in a hash set, so its length costs nothing per row).
MAX_POINTS = 64
#: Gold and subscription files written by a whole-table write hold about this many rows: small
#: enough that a key-local batch touches a few percent of a 10M-row table, large enough that a
#: table of 10M rows is a hundred files, not thousands.
ROWS_PER_FILE = 100_000

_ORDERED = (int, float, Decimal)


def _gap(a: Any, b: Any) -> float:
    """The distance between two neighbouring keys (0 when the type has no distance)."""
    if isinstance(a, _ORDERED) and isinstance(b, _ORDERED):
        return float(b) - float(a)
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return (b - a).total_seconds()
    if isinstance(a, dt.date) and isinstance(b, dt.date):
        return float((b - a).days)
    return 0.0


def _has_distance(value: Any) -> bool:
    return isinstance(value, _ORDERED + (dt.date,))


def key_ranges(values: Iterable[Any], max_ranges: int = MAX_RANGES, max_points: int | None = None) -> list[KeyRange]:
    """Cover `values` (nulls ignored) with at most `max_ranges` closed intervals, sorted; up to
    `max_points` distinct values (default `max_ranges`) are each a point of their own.

    >>> key_ranges([1, 2, 3, 100, 101, 7], max_ranges=2)
    [(1, 7), (100, 101)]
    >>> key_ranges([1, 2, 3, 100, 101, 7], max_ranges=2, max_points=6)
    [(1, 1), (2, 2), (3, 3), (7, 7), (100, 100), (101, 101)]

    Numbers, dates and timestamps are split at the largest gaps; other types (strings) at
    evenly spaced positions of the sorted values, which still covers every value.
    """
    assert max_ranges >= 1, max_ranges
    ordered = sorted({v for v in values if v is not None})
    if not ordered:
        return []
    if len(ordered) <= max(max_ranges, max_points or 0):
        return [(v, v) for v in ordered]
    gaps = [_gap(a, b) for a, b in zip(ordered, ordered[1:])]
    if _has_distance(ordered[0]):
        nothing_between = 1 if isinstance(ordered[0], int) else 0  # whole numbers 1 apart leave no gap
        worth = [i for i, g in enumerate(gaps) if g > nothing_between]
        cuts = sorted(sorted(worth, key=lambda i: (-gaps[i], i))[: max_ranges - 1])
    else:  # no distance: even chunks of the sorted values
        step = len(ordered) / max_ranges
        cuts = sorted({math.ceil(step * (i + 1)) - 1 for i in range(max_ranges - 1)})
    return ranges_from_cuts(ordered[0], ordered[-1], [(ordered[i], ordered[i + 1]) for i in cuts])


def ranges_from_cuts(lo: Any, hi: Any, cuts: Sequence[tuple[Any, Any]]) -> list[KeyRange]:
    """Intervals from the smallest and largest key and the gaps to cut at, each gap given as
    (the key before it, the key after it).

    >>> ranges_from_cuts(1, 20, [(3, 10), (12, 18)])
    [(1, 3), (10, 12), (18, 20)]
    """
    out: list[KeyRange] = []
    start = lo
    for before, after in sorted(cuts):
        out.append((start, before))
        start = after
    out.append((start, hi))
    return out


def key_ranges_of(keys: DataFrame, column: str, max_ranges: int = MAX_RANGES) -> list[KeyRange]:
    """`key_ranges` of a DataFrame column computed in Spark (for more keys than are worth
    collecting): the `max_ranges - 1` widest gaps between neighbouring distinct values (two
    jobs: the bounds, then the gaps)."""
    values = keys.select(F.col(column).alias("_k")).where(F.col("_k").isNotNull()).distinct()
    neighbours = values.withColumn("_prev", F.lag("_k").over(Window.orderBy("_k")))
    bounds = values.agg(F.min("_k").alias("lo"), F.max("_k").alias("hi")).first()
    if bounds is None or bounds["lo"] is None:
        return []
    gap = F.col("_k") - F.col("_prev")
    if not isinstance(bounds["lo"], _ORDERED):  # dates, strings: no subtraction in SQL terms
        return [(bounds["lo"], bounds["hi"])]
    worth_cutting = gap > 1 if isinstance(bounds["lo"], int) else gap > 0  # 1 apart: nothing between
    cuts = (
        neighbours.where(F.col("_prev").isNotNull() & worth_cutting)
        .orderBy(gap.desc(), F.col("_k"))
        .limit(max_ranges - 1)
        .collect()
    )
    return ranges_from_cuts(bounds["lo"], bounds["hi"], [(r["_prev"], r["_k"]) for r in cuts])


def count_and_ranges(keys: DataFrame, column: str, collect_limit: int) -> tuple[int, list[KeyRange]]:
    """How many rows `keys` holds and `key_ranges` of its `column`: collected when at most
    `collect_limit` rows (one job), else counted and computed in Spark."""
    rows = keys.select(column).limit(collect_limit + 1).collect()
    if len(rows) <= collect_limit:
        return len(rows), key_ranges((r[0] for r in rows), max_points=MAX_POINTS)
    return keys.count(), key_ranges_of(keys, column)


def range_predicate_sql(column: str, ranges: Sequence[KeyRange]) -> str:
    """`column` (SQL text) within any of `ranges`: the literal form Delta's data skipping understands."""
    if not ranges:
        return "FALSE"
    points = [lo for lo, hi in ranges if lo == hi]
    terms = [f"{column} IN ({', '.join(sql_literal(p) for p in points)})"] if points else []
    terms += [f"({column} >= {sql_literal(lo)} AND {column} <= {sql_literal(hi)})" for lo, hi in ranges if lo != hi]
    return " OR ".join(terms)


def range_predicate(column: str, ranges: Sequence[KeyRange]) -> Column:
    """`range_predicate_sql` over the column named `column`, for a DataFrame filter."""
    return F.expr(range_predicate_sql(quote(column), ranges))


def clustered(df: DataFrame, columns: Sequence[str], rows: int, rows_per_file: int = ROWS_PER_FILE) -> DataFrame:
    """`df` laid out for a whole-table write: ranges of `columns`, one per file of about
    `rows_per_file` rows, sorted inside, so each file's min/max statistics cover a narrow key range."""
    files = max(1, math.ceil(rows / rows_per_file))
    cols = [F.col(c) for c in columns]
    return df.repartitionByRange(files, *cols).sortWithinPartitions(*cols)
