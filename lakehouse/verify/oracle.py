"""The oracle: a gold view as the plain SQL join a user would write, over the latest state.

Gold is maintained incrementally (`lakehouse.gold`); this module states what it must equal,
independently of that machinery: one readable SQL statement over one relation per source
(`oracle_sql`), run over any state (`oracle_view`): the simulator's truth, silver current's
live rows, or a test's hand-made rows.

The statement's text comes from `lakehouse.sqltext.render_view` (Spark dialect); the PostgreSQL
check (`lakehouse.verify.postgres`) runs the same text in PostgreSQL's. The reference silver
maintainer that drives gold in tests lives in `testkit.reference_silver`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterable, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline, View
from lakehouse.deltasql import sql_with_frames
from lakehouse.errors import CdcEnrichError
from lakehouse.sqltext import COMMIT_TIME, SPARK, render_view
from lakehouse.tables import (
    silver_current_table,
    silver_history_table,
)


def oracle_sql(pipeline: Pipeline, view: View | str, relations: Mapping[str, str], watermark: datetime | None = None) -> str:
    """The view as one Spark SQL statement; `relations[source]` names the relation holding that source.

    The plain left-deep join of `lakehouse.sqltext.render_view` (a null fk matches nothing; after a
    FULL OUTER primary-key join the key is COALESCE(base key, joined key), as in KIP-77); a
    windowed view's unmatched rows are those whose window closed below `watermark`.
    """
    mark = None if watermark is None else f"timestamp_micros({_micros(watermark)})"
    return render_view(pipeline, view, relations, SPARK, mark)


def _micros(at: datetime) -> int:
    """A timestamp as µs since the epoch (naive: UTC), exact."""
    at = at if at.tzinfo else at.replace(tzinfo=timezone.utc)
    delta = at - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def oracle_view(
    spark: SparkSession,
    pipeline: Pipeline,
    view: View | str,
    state: Mapping[str, DataFrame],
    history: Mapping[str, DataFrame] | None = None,
    watermark: datetime | None = None,
) -> DataFrame:
    """The view's rows over `state` (live rows per source): `oracle_sql` with the state's frames
    as the statement's parameters (no temp views: the result is read lazily under Spark Connect).

    An as-of view reads its joined sources from `history` (every version: the source columns,
    `_valid_from`, `_valid_to`, `_deleted`) and, unless it declares `as_of`, its events' commit
    time (`_source_ts`) from `state`. A windowed view reads both events sources from `state`
    (the events gold accepted) with their commit times, and closes windows below `watermark`."""
    view = pipeline.view(view)
    frames: dict[str, DataFrame] = {}
    for alias in view.aliases:
        source = pipeline.source(view.table_of(alias))
        if source.name in frames:
            continue
        if view.temporal and alias != view.base:
            if history is None or source.name not in history:
                raise CdcEnrichError(f"view {view.name!r} is joined as of each event's time: its oracle needs the history "
                                     f"of {source.name!r} (every version with its valid_from/valid_to)")
            frames[source.name] = history[source.name].select(*source.column_names, *HISTORY_COLUMNS)
        else:
            extra = (COMMIT_TIME,) if (view.temporal and not view.as_of) or view.windowed else ()
            frames[source.name] = state[source.name].select(*source.column_names, *extra)
    return sql_with_frames(spark, lambda names: oracle_sql(pipeline, view, names, watermark), frames)


#: What an as-of view's oracle reads of a joined source's history, beside its columns.
HISTORY_COLUMNS = ("_valid_from", "_valid_to", "_deleted")


def silver_history_state(spark: SparkSession, pipeline: Pipeline, sources: Iterable[str]) -> dict[str, DataFrame]:
    """Every version of each source's silver history: source columns and `HISTORY_COLUMNS`."""
    out: dict[str, DataFrame] = {}
    for name in sorted(sources):
        source = pipeline.source(name)
        out[name] = spark.read.table(silver_history_table(pipeline, source)).select(*source.column_names, *HISTORY_COLUMNS)
    return out


def silver_live_state(spark: SparkSession, pipeline: Pipeline, sources: Iterable[str] | None = None) -> dict[str, DataFrame]:
    """Live rows (`NOT _deleted`) of each silver current table: source columns and the version's
    commit time (`_source_ts`, an as-of view's default time).

    By default, of every source some view reads (events sources have no current table).
    """
    if sources is None:
        sources = {pipeline.views[v].table_of(a) for v in pipeline.views for a in pipeline.views[v].aliases}
    out: dict[str, DataFrame] = {}
    for name in sorted(sources):
        source = pipeline.source(name)
        df = spark.read.table(silver_current_table(pipeline, source)).where(~F.col("_deleted"))
        out[name] = df.select(*source.column_names, COMMIT_TIME)
    return out


