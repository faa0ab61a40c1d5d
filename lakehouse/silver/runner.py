"""Silver's streams: one query per source over bronze, each batch applied once."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import DataFrame, SparkSession

from lakehouse.declaration import Pipeline, Source
from lakehouse.errors import CdcEnrichError
from lakehouse.checkpoints import silver_app_id
from lakehouse.metrics import recording_metrics
from lakehouse.outcomes import Mailbox, Outcome, PostOffice
from lakehouse.paths import Location, checkpoint_dir
from lakehouse.silver.apply import SilverReport, SilverStats, StreamState, apply_batch
from lakehouse.silver.held import release_held
from lakehouse.silver.layout import ensure_silver_tables
from lakehouse.streaming import StreamSpec, run_streams
from lakehouse.tables import (
    bronze_table,
    silver_current_table,
    silver_store_table,
)

# --------------------------------------------------------------------------- runner


def silver_checkpoint(pipeline: Pipeline, source: Source, lake: Path) -> Location:
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

    Example::

        lake, pipeline = Path(".lake"), load_pipeline("schemas/shop/pipeline.yml")
        spark = get_spark(lake)                                     # lakehouse.spark
        ensure_schemas(spark, pipeline)
        report = run_silver(spark, pipeline, lake)                  # every source, drained
        run_silver(spark, pipeline, lake, sources=["customers"], progress=print)
        print(report.render())
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

    def receive(outcome: Outcome) -> None:
        report.add(outcome.subject, SilverStats(**outcome.stats))
        if progress is not None and outcome.line:
            progress(outcome.line)

    post = PostOffice(spark, pipeline, receive)
    names = sources or list(pipeline.sources)
    return [
        _silver_stream(spark, pipeline, lake, pipeline.source(name), report, post, progress, max_files_per_trigger) for name in names
    ], report


def _silver_stream(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    source: Source,
    report: SilverReport,
    post: PostOffice,
    progress: Callable[[str], None] | None,
    max_files_per_trigger: int | None = None,
) -> StreamSpec:
    """One source's query for the shared runner: bronze's Delta table -> `apply_batch`, once per batch id."""
    bronze = bronze_table(pipeline, source)
    checkpoint = silver_checkpoint(pipeline, source, lake)
    query_name = f"silver_{pipeline.tables.silver_schema}_{source.name}"

    kept: dict[str, SilverBatches] = {}  # the batch function, made by `prepare`: its StreamState lives across starts

    def prepare() -> None:
        """Tables, the stream's app id, held changes a fixed rule lets through: once per run of
        queries (a continuous run prepares once per process, `lakehouse.continuous`)."""
        if not spark.catalog.tableExists(bronze):
            raise CdcEnrichError(f"bronze table {bronze} does not exist: run the bronze job for {source.name!r} first")
        ensure_silver_tables(spark, pipeline, source)
        app_id = silver_app_id(checkpoint, spark)
        report.sources.setdefault(source.name, SilverStats())
        released = release_held(spark, pipeline, source, f"{app_id}:release")  # what a fixed rule lets through
        if released:
            report.add(source.name, SilverStats(released=released))
            if progress is not None:
                progress(f"silver {source.name}: {released} held change(s) pass the quarantine rules now and were applied")
        kept.setdefault("batches", SilverBatches(pipeline, source, app_id, query_name, post.mailbox))

    def build() -> Any:
        reader = spark.readStream.format("delta")
        if max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
        return reader.table(bronze).writeStream.foreachBatch(kept["batches"])

    return StreamSpec(
        name=f"silver {source.name}",
        query_name=query_name,
        checkpoint=checkpoint,
        build=build,
        prepare=prepare,
        processing_time=pipeline.options.interval("silver"),
        collect=post.collect,
        reads=(bronze,),
        writes=(silver_store_table(pipeline, source),),
    )


class SilverBatches:
    """The foreachBatch function of one source's query: each batch applied by `apply_batch`,
    its outcome mailed to the run. Picklable (declarations, strings, a mailbox) for Spark
    Connect; the stream's state lives where the function runs."""

    def __init__(self, pipeline: Pipeline, source: Source, app_id: str, query_name: str, mailbox: Mailbox) -> None:
        self.pipeline, self.source, self.app_id, self.query_name, self.mailbox = pipeline, source, app_id, query_name, mailbox
        self.state = StreamState()

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        stats = apply_batch(batch_df, batch_id, self.pipeline, self.source, self.app_id, self.state)
        self.mailbox.send(batch_df.sparkSession, Outcome(
            self.query_name, batch_id, self.source.name, asdict(stats),
            f"silver {self.source.name} batch {batch_id}: {stats.describe()}",
            stats.changes_read, stats.current_upserted, stats.held,
        ))
