"""Upkeep of every table a pipeline owns: history compaction, OPTIMIZE, VACUUM.

Two kinds of time travel, each with its own reach:
- silver history keeps every version of a row for `options.history_retention_days` (as-of
  queries, `lakehouse.silver.reads`); compaction drops versions that ended before it.
- Delta's own time travel (`VERSION AS OF`, `TIMESTAMP AS OF`, and a stream restarted from an
  old checkpoint) reaches back `options.time_travel_days`: VACUUM retains the files of that
  long, and every table's `delta.deletedFileRetentionDuration` / `delta.logRetentionDuration`
  say the same, so Delta's own clean-ups agree with it.

OPTIMIZE compacts small files (each micro-batch writes some) and, on liquid-clustered tables
(gold, subscriptions), clusters what was appended since. Run it from a job on its own schedule
(`cdc-enrich maintain`, `jobs/maintain.py`, the bundle's `cdc_enrich_maintain`), not between
micro-batches: OPTIMIZE commits concurrently with the streams, and Delta resolves that (a
conflicting OPTIMIZE fails and is reported; the next run retries it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from pyspark.sql import SparkSession

from lakehouse.declaration import Pipeline
from lakehouse.deltasql import is_commit_conflict
from lakehouse.outcomes import outcomes_table, prune_outcomes
from lakehouse.silver.reads import compact_history
from lakehouse.streaming import first_line
from lakehouse.tables import silver_store_table

STEPS = ("compact", "optimize", "vacuum")


@dataclass(frozen=True)
class UpkeepStep:
    """What one step did to one table."""

    table: str
    step: str  # compact | optimize | vacuum
    seconds: float
    detail: str  # e.g. "12 versions dropped", "8 files -> 1", "3 files and directories deleted"
    error: str | None = None


@dataclass
class UpkeepReport:
    """Every step of one upkeep run; `ok` is False when a step failed (the others still ran)."""

    steps: list[UpkeepStep] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.error is None for s in self.steps)

    def render(self) -> str:
        lines = [f"{s.step:8} {s.table}: {s.error and 'FAILED: ' + s.error or s.detail} ({s.seconds:.1f}s)" for s in self.steps]
        failed = sum(s.error is not None for s in self.steps)
        lines.append(f"upkeep: {len(self.steps)} steps, {failed} failed" if failed else f"upkeep: {len(self.steps)} steps, all done")
        return "\n".join(lines)


def pipeline_tables(spark: SparkSession, pipeline: Pipeline) -> list[str]:
    """Every Delta table in the pipeline's schemas (bronze, silver, gold, quality), by name."""
    names = []
    for schema in dict.fromkeys(pipeline.tables.schemas()):
        if not spark.catalog.databaseExists(schema):
            continue
        for row in spark.sql(f"SHOW TABLES IN {schema}").collect():
            if not row["isTemporary"] and _is_delta(spark, f"{schema}.{row['tableName']}"):
                names.append(f"{schema}.{row['tableName']}")
    return sorted(names)


def _is_delta(spark: SparkSession, table: str) -> bool:
    """Views and other formats are left alone."""
    try:
        return spark.sql(f"DESCRIBE DETAIL {table}").first()["format"] == "delta"
    except Exception:  # noqa: BLE001 - a view has no detail
        return False


def retention_properties(days: int) -> dict[str, str]:
    """The table properties that make Delta's own retention match `time_travel_days`."""
    return {
        "delta.deletedFileRetentionDuration": f"interval {days} days",
        "delta.logRetentionDuration": f"interval {max(days, 30)} days",  # the log may reach further than the files
    }


def maintain(
    spark: SparkSession,
    pipeline: Pipeline,
    steps: tuple[str, ...] = STEPS,
    *,
    now: datetime | None = None,
    progress: Callable[[str], None] | None = None,
) -> UpkeepReport:
    """Compact silver history by the declared retention, OPTIMIZE and VACUUM every table the
    pipeline owns; one step failing is reported and the others still run.

    >>> print(maintain(spark, pipeline, ("optimize", "vacuum")).render())    # doctest: +SKIP
    optimize shop_gold.orders_enriched: nothing to compact (0.1s)
    vacuum   shop_gold.orders_enriched: 0 files and directories deleted, 168 hours kept (1.4s)
    ...
    """
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise ValueError(f"unknown upkeep step(s) {unknown}; expected some of {', '.join(STEPS)}")
    report = UpkeepReport()
    say = progress or (lambda _m: None)

    def run(table: str, step: str, body: Callable[[], str]) -> None:
        started = time.monotonic()
        try:
            detail, error = body(), None
        except Exception as exc:  # noqa: BLE001 - one table's failure must not stop the upkeep of the others
            kind = "a concurrent commit won; the next run retries" if is_commit_conflict(exc) else type(exc).__name__
            detail, error = "", f"{kind}: {first_line(exc)}"
        report.steps.append(UpkeepStep(table, step, time.monotonic() - started, detail, error))
        say(f"upkeep {step} {table}: {error or detail}")

    if "compact" in steps:
        for source in pipeline.sources.values():
            if source.is_event_stream or not spark.catalog.tableExists(silver_store_table(pipeline, source)):
                continue  # an events source keeps no history; a source silver has not reached yet has none
            run(silver_store_table(pipeline, source), "compact",
                lambda s=source: f"{compact_history(spark, pipeline, s, now=now)} versions dropped, {pipeline.options.history_retention_days} days kept")
    if "compact" in steps and spark.catalog.tableExists(outcomes_table(pipeline)):  # made by Spark Connect runs
        days = pipeline.options.time_travel_days
        run(outcomes_table(pipeline), "compact",
            lambda: f"{prune_outcomes(spark, pipeline, days, now)} batch outcomes dropped, {days} days kept")
    tables = pipeline_tables(spark, pipeline)
    if "optimize" in steps:
        for table in tables:
            run(table, "optimize", lambda t=table: _optimize(spark, t))
    if "vacuum" in steps:
        days = pipeline.options.time_travel_days
        for table in tables:
            run(table, "vacuum", lambda t=table: _vacuum(spark, t, days))
    return report


def _optimize(spark: SparkSession, table: str) -> str:
    metrics = spark.sql(f"OPTIMIZE {table}").first()["metrics"]
    removed, added = metrics["numFilesRemoved"], metrics["numFilesAdded"]
    return f"{removed} files -> {added}" if removed else "nothing to compact"


def _vacuum(spark: SparkSession, table: str, days: int) -> str:
    wanted = retention_properties(days)
    current = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
    if any(current.get(k) != v for k, v in wanted.items()):
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({', '.join(f'{k!r} = {v!r}' for k, v in wanted.items())})")
    hours = days * 24
    # the dry run counts what goes (VACUUM itself does not say) and spares the real one when nothing
    # does; it lists paths, directories too (a current table's `_change_data` in the upkeep spec)
    doomed = spark.sql(f"VACUUM {table} RETAIN {hours} HOURS DRY RUN").count()
    if doomed:
        spark.sql(f"VACUUM {table} RETAIN {hours} HOURS")
    return f"{doomed} files and directories deleted, {hours} hours kept"
