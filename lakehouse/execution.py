"""How Spark runs a micro-batch: small work (a few changes against small tables) runs with the
settings that suit a few rows, everything else with the session's own.

A micro-batch over small tables spends its time planning and compiling, not reading: with the
production settings a three-change silver batch into a five-row table ran 49 Spark jobs in 8.65 s
(median of 11, alternated in one process, 2026-12-03), with `SMALL_WORK_SETTINGS` 27 jobs in
5.69 s. The same settings cost twice the time where there are rows to read (a 100-change batch
into 100k- and 1M-row tables: 16.9 s against 12.6 s, 21.1 s against 11.4 s), and broke even at
20k rows, so they apply only below `SMALL_WORK_MAX_BYTES` of every table the batch reads and
`SMALL_WORK_MAX_ROWS` changes. Results never depend on them (Spark's contract for each).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, Sequence

from pyspark.sql import Column, DataFrame, Observation, SparkSession

from lakehouse.deltasql import session_setting, table_facts

#: Spark's settings for a few rows: no adaptive re-planning (which submits every shuffle stage as
#: a job of its own), expressions interpreted instead of compiled per new plan (whole stages, and
#: projections: `codegen.factoryMode`, an internal setting that Spark's own suites run with;
#: a session that refuses it runs compiled), one shuffle partition (one task a stage).
SMALL_WORK_SETTINGS: Mapping[str, str] = MappingProxyType(
    {
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        "spark.sql.shuffle.partitions": "1",
    }
)
#: At most this many change rows in the batch...
SMALL_WORK_MAX_ROWS = 1_000
#: ...and at most this many bytes of live files in each table it reads or writes (a twentieth of
#: the 20k-row table where the settings broke even: about 1k-5k rows of a typical table).
SMALL_WORK_MAX_BYTES = 1 << 20


#: A materialized frame of at most this many rows, worked on alone (no table read), is small work
#: whatever the batch: the settings broke even at 20k rows of a table read (above).
SMALL_FRAME_MAX_ROWS = 20_000


def is_small_frame(rows: int) -> bool:
    """Whether work over a materialized frame of `rows` rows alone runs best with the settings for
    a few rows.

    >>> is_small_frame(2_701), is_small_frame(50_000)
    (True, False)
    """
    return rows <= SMALL_FRAME_MAX_ROWS


def is_small_work(change_rows: int, table_bytes: Sequence[int | None]) -> bool:
    """Whether a batch of `change_rows` changes over tables of `table_bytes` (None: unknown) is
    small work.

    >>> is_small_work(3, [40_000, 90_000]), is_small_work(3, [40_000, 2 << 20]), is_small_work(5_000, [10])
    (True, False, False)
    >>> is_small_work(3, [None]), is_small_work(0, [])
    (False, True)
    """
    return change_rows <= SMALL_WORK_MAX_ROWS and all(b is not None and b <= SMALL_WORK_MAX_BYTES for b in table_bytes)


@contextmanager
def session_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Each of `settings` in place for the statements inside, then as it was before (a refused
    one is skipped: `deltasql.session_setting`). A foreachBatch's session is its stream's own,
    so one stream's settings never reach another's batches."""
    with ExitStack() as stack:
        for key, value in settings.items():
            stack.enter_context(session_setting(spark, key, value))
        yield


def small_work_settings(spark: SparkSession, change_rows: int, tables: Sequence[str]) -> Mapping[str, str]:
    """`SMALL_WORK_SETTINGS` when a batch of `change_rows` changes that reads and writes the
    Delta tables `tables` (all existing) is small work, else none. Reads the tables' sizes
    (`deltasql.table_facts`: once a minute per table, which MERGEs read anyway)."""
    if change_rows > SMALL_WORK_MAX_ROWS:
        return {}
    sizes = [table_facts(spark, name).size_bytes for name in tables]
    return SMALL_WORK_SETTINGS if is_small_work(change_rows, sizes) else {}


def observed_metrics(observation: Observation) -> dict[str, Any] | None:
    """The metrics an `Observation` collected, or None when its query did not run (Delta skipped
    a replayed write without executing it) or brought none back (a Spark Connect checkpoint)."""
    try:
        metrics = observation.get
    except Exception:  # noqa: BLE001 - none: Connect's PySparkAssertionError, py4j's AssertionError from the JVM
        return None
    return metrics or None


def checkpoint_observing(
    df: DataFrame, metrics: Sequence[Column], then: Callable[[DataFrame], DataFrame] = lambda d: d
) -> tuple[DataFrame, dict[str, Any]]:
    """`then(df)` materialized (`localCheckpoint`), and the aggregates `metrics` (aliased) over
    every row of `df`, computed by the same Spark job (an `Observation` on `df`, which `then`'s
    filters do not reach below) instead of an aggregation of its own that reads `df` again.
    Where the checkpoint brings no metrics back, they are computed by that aggregation.

    >>> kept, m = checkpoint_observing(spark.range(5), [F.count(F.lit(1)).alias("n")], lambda d: d.filter("id > 2"))
    >>> kept.count(), m["n"]
    (2, 5)
    """
    observation = Observation()
    done = then(df.observe(observation, *metrics)).localCheckpoint(eager=True)
    found = observed_metrics(observation)
    return done, found if found is not None else df.select(*metrics).first().asDict(recursive=False)
