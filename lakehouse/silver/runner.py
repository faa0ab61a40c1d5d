"""Silver's streams: one query per source over bronze, each batch applied once."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import DataFrame, SparkSession

from lakehouse.declaration import Pipeline, Source
from lakehouse.errors import CdcEnrichError
from lakehouse.metrics import note_batch, recording_metrics
from lakehouse.paths import checkpoint_dir
from lakehouse.silver.apply import SilverReport, SilverStats, StreamState, apply_batch
from lakehouse.silver.held import release_held
from lakehouse.silver.layout import ensure_silver_tables
from lakehouse.silver.plan import APP_ID_FILE
from lakehouse.streaming import StreamSpec, run_streams
from lakehouse.tables import (
    bronze_table,
    silver_current_table,
)

# --------------------------------------------------------------------------- runner


def stream_app_id(checkpoint: Path) -> str:
    """The txn appId of one stream: a uuid kept inside its checkpoint.

    Delta skips a write whose (appId, version) is not above the last recorded; batch ids
    restart at 0 with a new checkpoint, so the appId must change with the checkpoint, or a
    reset stream would silently write nothing.
    """
    checkpoint.mkdir(parents=True, exist_ok=True)
    marker = checkpoint / APP_ID_FILE
    if not marker.exists():
        marker.write_text(f"silver-{uuid.uuid4()}\n")
    return marker.read_text().strip()


def silver_checkpoint(pipeline: Pipeline, source: Source, lake: Path) -> Path:
    """One checkpoint per target table (catalog and schema included, so variants never share)."""
    return checkpoint_dir(lake, pipeline.name, f"silver__{silver_current_table(pipeline, source)}")


def run_silver(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    sources: list[str] | None = None,
    trigger: str = "available_now",
    progress: Callable[[str], None] | None = None,
    *,
    timeout_s: float | None = None,
    max_files_per_trigger: int | None = None,
) -> SilverReport:
    """Stream each source's bronze table into its silver tables (one query per source, all together).

    `trigger`: `available_now` (drain what is there, then return) or `processing_time`
    (`options.processing_time`; runs until stopped, or `timeout_s`). `progress(message)` gets
    one line per batch. Each source's tables are created just before its query starts.
    `max_files_per_trigger` caps the bronze files a batch reads (Delta's own default: 1,000).
    """
    specs, report = silver_streams(spark, pipeline, lake, sources, progress, max_files_per_trigger=max_files_per_trigger)
    with recording_metrics(spark, pipeline) as metrics:
        run_streams(specs, trigger, pipeline.options.processing_time, timeout_s=timeout_s, say=progress, metrics=metrics)
    return report


def silver_streams(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    sources: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    *,
    max_files_per_trigger: int | None = None,
) -> tuple[list[StreamSpec], SilverReport]:
    """Silver's queries (one per source, at silver's interval) and the report their batches
    fill, for `run_silver` or a continuous run of every stage."""
    report = SilverReport()
    names = sources or list(pipeline.sources)
    return [
        _silver_stream(spark, pipeline, lake, pipeline.source(name), report, progress, max_files_per_trigger) for name in names
    ], report


def _silver_stream(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    source: Source,
    report: SilverReport,
    progress: Callable[[str], None] | None,
    max_files_per_trigger: int | None = None,
) -> StreamSpec:
    """One source's query for the shared runner: bronze's Delta table -> `apply_batch`, once per batch id."""
    bronze = bronze_table(pipeline, source)
    checkpoint = silver_checkpoint(pipeline, source, lake)
    query_name = f"silver_{pipeline.tables.silver_schema}_{source.name}"

    def prepare() -> None:
        if not spark.catalog.tableExists(bronze):
            raise CdcEnrichError(f"bronze table {bronze} does not exist: run the bronze job for {source.name!r} first")
        ensure_silver_tables(spark, pipeline, source)

    def build() -> Any:
        app_id = stream_app_id(checkpoint)
        report.sources.setdefault(source.name, SilverStats())
        released = release_held(spark, pipeline, source, f"{app_id}:release")  # what a fixed rule lets through
        if released:
            report.add(source.name, SilverStats(released=released))
            if progress is not None:
                progress(f"silver {source.name}: {released} held change(s) pass the quarantine rules now and were applied")
        state = StreamState()

        def on_batch(batch_df: DataFrame, batch_id: int) -> None:
            stats = apply_batch(batch_df, batch_id, pipeline, source, app_id, state)
            report.add(source.name, stats)
            note_batch(query_name, batch_id, stats.changes_read, stats.current_upserted, stats.held)
            if progress is not None:
                progress(f"silver {source.name} batch {batch_id}: {stats.describe()}")

        reader = spark.readStream.format("delta")
        if max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
        return reader.table(bronze).writeStream.foreachBatch(on_batch)

    return StreamSpec(
        name=f"silver {source.name}",
        query_name=query_name,
        checkpoint=checkpoint,
        build=build,
        prepare=prepare,
        processing_time=pipeline.options.interval("silver"),
    )
