"""Bronze's streams: one query per source, exactly-once appends by commit tags, the run's report."""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from lakehouse.bronze.fast_jvm import decoding_with, fast_pass
from lakehouse.bronze.parse import (
    _check_choice,
    _slow_input,
    bronze_rows,
    decode_python,
    fast_bronze_rows,
    quarantine_rows,
    unknown_topic_rows,
)
from lakehouse.bronze.fast_sql import KAFKA_COLUMNS, PARSERS, STREAM
from lakehouse.bronze.tables import ensure_bronze_tables
from lakehouse.declaration import Pipeline, Source
from lakehouse.errors import CdcEnrichError
from lakehouse.execution import observed_metrics
from lakehouse.kafka import KafkaConnection, as_connection, check_connection, kafka_connection
from lakehouse.checkpoints import query_id, uncommitted_batch
from lakehouse.metrics import recording_metrics
from lakehouse.outcomes import Mailbox, Outcome, PostOffice
from lakehouse.paths import Location, checkpoint_dir, location
from lakehouse.streaming import StreamSpec, check_trigger, first_line, run_streams
from lakehouse.tables import (
    bronze_table,
    quarantine_table,
)

log = logging.getLogger('lakehouse.bronze')


# --------------------------------------------------------------------------- the streaming runner


@dataclass
class TableReport:
    """What one source's bronze table received in a run."""

    source: str
    table: str
    rows: int = 0  # rows appended to bronze (0 for a replayed batch Delta skipped)
    quarantined: int = 0  # this topic's records sent to quarantine
    batches: int = 0  # micro-batches that had records of this topic


@dataclass
class BronzeReport:
    """The outcome of one `run_bronze` call (per table, and quarantine)."""

    pipeline: str
    checkpoint: str
    trigger: str
    parser: str
    quarantine_table: str
    decoding: str = ""  # which pass decodes and why (`decoding_with`)
    records: int = 0  # Kafka records read, all streams
    replayed_batches: int = 0  # batches Delta had already committed (restart after a crash)
    unknown_topic_records: int = 0  # quarantined because no source declares their topic
    seconds: float = 0.0
    tables: dict[str, TableReport] = field(default_factory=dict)

    @property
    def batches(self) -> int:
        """Micro-batches with records, summed over the source streams."""
        return sum(t.batches for t in self.tables.values())

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables.values())

    @property
    def quarantined(self) -> int:
        return sum(t.quarantined for t in self.tables.values()) + self.unknown_topic_records

    def render(self) -> str:
        """A small text table for the CLI."""
        lines = [
            f"bronze {self.pipeline}: {self.records} records in {self.batches} batches, {self.seconds:.1f}s "
            f"(parser {self.parser}: {self.decoding}, trigger {self.trigger}, checkpoints {self.checkpoint})"
        ]
        width = max([len(t.table) for t in self.tables.values()] + [len(self.quarantine_table)])
        lines.append(f"  {'table':<{width}}  {'rows':>9}  {'quarantined':>11}  {'batches':>7}")
        for t in self.tables.values():
            lines.append(f"  {t.table:<{width}}  {t.rows:>9}  {t.quarantined:>11}  {t.batches:>7}")
        lines.append(f"  {self.quarantine_table:<{width}}  {'':>9}  {self.quarantined:>11}  (undeclared topics: {self.unknown_topic_records})")
        if self.replayed_batches:
            lines.append(f"  {self.replayed_batches} replayed batch(es): Delta had committed them already; nothing written twice")
        return "\n".join(lines)


def undeclared_pattern(pipeline: Pipeline) -> str:
    """Topics `<prefix>.<schema>.<table>` that no source declares (Java regex, negative lookahead).

    Debezium names a captured table's topic this way; a table captured but not declared
    would otherwise be ignored silently. Its records go to quarantine instead.
    """
    declared = "|".join(re.escape(t) for t in pipeline.topics)
    family = re.escape(f"{pipeline.kafka.topic_prefix}.{pipeline.kafka.source_schema}.") + r"[^.]+"
    return f"^(?!(?:{declared})$){family}$"


def undeclared_topics_exist(topics: Iterable[str] | None, pipeline: Pipeline) -> bool:
    """Whether Kafka's `topics` hold one of `undeclared_pattern` (True when Kafka could not be
    asked: None).

    The undeclared-topics stream is a whole query (its start, offsets and commit logs: about
    1.5 s of a run); with no such topic it would read nothing, and a topic created later is
    read from its start by the next run, so it is started only when there is one.
    """
    if topics is None:
        return True
    pattern = re.compile(undeclared_pattern(pipeline))
    return any(pattern.match(topic) for topic in topics)


def kafka_stream(
    spark: SparkSession,
    kafka: str | KafkaConnection,
    starting_offsets: str,
    max_offsets_per_trigger: int,
    *,
    topics: Iterable[str] = (),
    pattern: str | None = None,
) -> DataFrame:
    """Kafka topics (a list, or a pattern) as a streaming DataFrame of raw records.

    `failOnDataLoss` stays true: if offsets the checkpoint expects were deleted (retention,
    a recreated topic) the stream stops loudly rather than skipping records silently.
    `startingOffsets` applies to the first start only; restarts resume from the checkpoint.
    `kafka`: bootstrap servers, or a connection with the pipeline's security options.
    """
    reader = (
        spark.readStream.format("kafka")
        .options(**as_connection(kafka).spark_options())
        .option("startingOffsets", starting_offsets)
        .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true")
    )
    reader = reader.option("subscribePattern", pattern) if pattern else reader.option("subscribe", ",".join(topics))
    return reader.load()


def counted(decoded: DataFrame, name: str) -> tuple[DataFrame, Observation]:
    """The SQL pass's rows with an Observation that counts, as they are written, the records
    (`records`) and those left for the Python pass (`slow`); read it with `_observed`."""
    observation = Observation(f"{name}_{uuid.uuid4().hex[:8]}")
    return decoded.observe(observation, F.count(F.lit(1)).alias("records"), F.count_if(~F.col("_fast")).alias("slow")), observation


def _observed(observation: Observation) -> dict[str, int] | None:
    """The metrics an Observation collected, or None when its query did not run (Delta
    skipped a replayed append without executing it)."""
    metrics = observed_metrics(observation)
    return {k: int(v) for k, v in metrics.items()} if metrics else None


def _append(spark: SparkSession, rows: DataFrame, table: str, app_id: str, batch_id: int, replay_check: bool) -> bool:
    """Append `rows`, tagged `<app_id>:<batch_id>`; False (nothing written) when `replay_check`
    finds that tag already committed to `table`: the batch is a replay after a crash.

    Only a batch the previous run planned but did not commit can be a replay
    (`uncommitted_batch`), so only then is the history read.
    """
    tag = f"{app_id}:{batch_id}"
    if replay_check and _committed(spark, table, tag):
        return False
    rows.write.format("delta").mode("append").option("userMetadata", tag).saveAsTable(table)
    return True


def _committed(spark: SparkSession, table: str, tag: str) -> bool:
    """Whether a commit of `table` carries `tag` (its whole history: a replay is rare, and
    other streams may have committed to a shared table, quarantine, since)."""
    return bool(spark.sql(f"DESCRIBE HISTORY {table}").where(F.col("userMetadata") == F.lit(tag)).limit(1).count())


class _Stream:
    """The foreachBatch function of one stream; subclasses write one micro-batch and return its
    outcome. Picklable (declarations, paths, a mailbox) for Spark Connect, where it runs in a
    worker beside the server."""

    name = ""
    outputs: tuple[str, ...] = ()  # the tables it writes that later stages read

    def __init__(self, pipeline: Pipeline, checkpoint: Location, mailbox: Mailbox) -> None:
        self.pipeline = pipeline
        self.checkpoint = checkpoint
        self.mailbox = mailbox
        self._app_id: str | None = None
        self._replayable: int | None = None

    @property
    def query_name(self) -> str:
        """The streaming query's name (metrics rows and the Spark UI carry it)."""
        return f"bronze_{self.pipeline.name}_{self.name}"

    def app_id(self, spark: SparkSession) -> str:
        """The commit tags' app id: the query id, kept in the checkpoint (a new checkpoint gets a new one)."""
        if self._app_id is None:
            self._app_id = f"cdc-enrich-bronze-{query_id(self.checkpoint, spark)}"
        return self._app_id

    def reset(self, spark: SparkSession) -> None:
        """Before a (re)start: the batch id the previous run left uncommitted (the only one this
        run can replay), or None."""
        self._replayable = uncommitted_batch(self.checkpoint, spark)

    def may_replay(self, batch_id: int) -> bool:
        return batch_id == self._replayable

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        outcome = self.write(batch_df.sparkSession, batch_df, batch_id)
        if outcome is not None:
            line = f"bronze {self.pipeline.name}/{self.name} batch {batch_id}: {outcome.line} ({time.monotonic() - started:.1f}s)"
            self.mailbox.send(batch_df.sparkSession, replace(outcome, line=line))

    def outcome(self, batch_id: int, line: str, records: int, rows: int, quarantined: int, replayed: bool, undeclared: int = 0) -> Outcome:
        stats = {"records": records, "rows": rows, "quarantined": quarantined, "replayed": int(replayed), "undeclared": undeclared}
        return Outcome(self.query_name, batch_id, self.name, stats, line, records, rows, quarantined)

    def write(self, spark: SparkSession, batch: DataFrame, batch_id: int) -> Outcome | None:
        raise NotImplementedError


def _replay_note(replayed: bool) -> str:
    return " (replayed batch: Delta had it already, nothing written twice)" if replayed else ""


def _count_batch(report: BronzeReport, outcome: Outcome, say: Callable[[str], None]) -> None:
    """A batch's outcome into the run's report (and the progress line)."""
    stats = outcome.stats
    report.records += stats["records"]
    report.replayed_batches += stats["replayed"]
    report.unknown_topic_records += stats["undeclared"]
    entry = report.tables.get(outcome.subject)
    if entry is not None:
        entry.batches += 1
        entry.rows += stats["rows"]
        entry.quarantined += stats["quarantined"]
    say(outcome.line)


class _SourceStream(_Stream):
    """One source's topic -> its bronze table (+ quarantine for what does not decode)."""

    def __init__(self, pipeline: Pipeline, source: Source, parser: str, checkpoint: Location, mailbox: Mailbox) -> None:
        super().__init__(pipeline, checkpoint, mailbox)
        self.source = source
        self.parser = parser
        self.name = source.name
        self.outputs = (bronze_table(pipeline, source),)  # its quarantine rows go nowhere downstream
        self.fast = parser != "python"  # the fast pass decodes in the query's plan (`frame`)

    def frame(self, kafka: DataFrame) -> DataFrame:
        """What the query feeds `write`: the fast pass over the Kafka stream (analysed once, when
        the query starts, rather than for every micro-batch), or the raw records for Python."""
        return fast_pass(kafka.sparkSession, self.source, self.parser).apply(kafka) if self.fast else kafka

    def write(self, spark: SparkSession, batch: DataFrame, batch_id: int) -> Outcome | None:
        """One micro-batch (decoded by the fast pass): fast rows straight to bronze, then the rest through Python.

        The decoded batch is never cached (building the cache cost as much as decoding): its
        fast rows go to bronze in one decode-and-write pass (the stream's plan decodes), which
        also counts (an `Observation`) the records and those the pass left for Python; only
        when there are some does the Python pass run (rare).
        """
        started = time.monotonic()
        if not self.fast:
            return self._write_python(spark, batch, batch_id, started)
        first = self.may_replay(batch_id)
        table = bronze_table(self.pipeline, self.source)
        decoded, observation = counted(batch, f"bronze_{self.source.name}_{batch_id}")
        wrote_fast = _append(spark, fast_bronze_rows(self.source, decoded), table, self.app_id(spark), batch_id, first)
        counts = _observed(observation) if wrote_fast else None
        fast_done = time.monotonic()
        # No counts: a replay after a crash (Delta had the fast rows already); the Python pass
        # then decides what is left, and its own idempotent writes skip what it wrote before.
        total = counts["records"] if counts else batch.count()
        if not total:
            return None
        slow_n = counts["slow"] if counts else None
        good_slow = bad_n = 0
        wrote_slow = wrote_bad = True
        if slow_n != 0:
            slow = decode_python(self.source, _slow_input(batch)).localCheckpoint(eager=False)  # kept by the tally
            tally = {bool(r["ok"]): int(r["count"]) for r in slow.groupBy(F.col("_reason").isNull().alias("ok")).count().collect()}
            good_slow, bad_n = tally.get(True, 0), tally.get(False, 0)
            if good_slow:
                wrote_slow = _append(spark, bronze_rows(self.source, slow), table, f"{self.app_id(spark)}-python", batch_id, first)
            if bad_n:
                wrote_bad = _append(spark, quarantine_rows(self.source, slow), quarantine_table(self.pipeline), self.app_id(spark), batch_id, first)
        fast_written = total - good_slow - bad_n if wrote_fast else 0
        rows = fast_written + (good_slow if wrote_slow else 0)
        quarantined = bad_n if wrote_bad else 0
        replayed = first and not (wrote_fast and wrote_slow and wrote_bad) and rows + quarantined < total
        timing = f"fast pass + write {fast_done - started:.1f}s, {good_slow + bad_n} by Python {time.monotonic() - fast_done:.1f}s"
        line = f"{total} records, +{rows} rows, +{quarantined} quarantined{_replay_note(replayed)}; {timing}"
        return self.outcome(batch_id, line, total, rows, quarantined, replayed)

    def _write_python(self, spark: SparkSession, batch: DataFrame, batch_id: int, started: float) -> Outcome | None:
        """parser="python": every record through `decode_record` (the benchmark's comparison)."""
        decoded = decode_python(self.source, batch).localCheckpoint(eager=False)  # kept by the counts
        counts = {bool(r["ok"]): int(r["count"]) for r in decoded.groupBy(F.col("_reason").isNull().alias("ok")).count().collect()}
        good_n, bad_n = counts.get(True, 0), counts.get(False, 0)
        if good_n + bad_n == 0:
            return None
        wrote_rows = wrote_bad = True
        if good_n:
            wrote_rows = _append(spark, bronze_rows(self.source, decoded), bronze_table(self.pipeline, self.source), self.app_id(spark), batch_id, self.may_replay(batch_id))
        if bad_n:
            wrote_bad = _append(spark, quarantine_rows(self.source, decoded), quarantine_table(self.pipeline), self.app_id(spark), batch_id, self.may_replay(batch_id))
        rows, quarantined, replayed = good_n if wrote_rows else 0, bad_n if wrote_bad else 0, not (wrote_rows and wrote_bad)
        line = f"{good_n + bad_n} records, +{rows} rows, +{quarantined} quarantined{_replay_note(replayed)}"
        return self.outcome(batch_id, line, good_n + bad_n, rows, quarantined, replayed)


class _UndeclaredStream(_Stream):
    """Topics of the connector's family that no source declares -> quarantine."""

    name = "_undeclared"

    def write(self, spark: SparkSession, batch: DataFrame, batch_id: int) -> Outcome | None:
        raw = batch.select(*KAFKA_COLUMNS).localCheckpoint(eager=False)  # kept by the count per topic
        per_topic = {r["topic"]: int(r["count"]) for r in raw.groupBy("topic").count().collect()}
        total = sum(per_topic.values())
        if not total:
            return None
        wrote = _append(spark, unknown_topic_rows(self.pipeline, raw), quarantine_table(self.pipeline), self.app_id(spark), batch_id, self.may_replay(batch_id))
        line = f"{total} records on undeclared topics {', '.join(sorted(per_topic))} -> quarantine" + ("" if wrote else " (replayed, skipped)")
        return self.outcome(batch_id, line, total, 0, total if wrote else 0, not wrote, undeclared=total if wrote else 0)


def run_bronze(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    bootstrap: str,
    trigger: str = "available_now",
    max_offsets_per_trigger: int | None = None,
    progress: Callable[[str], None] | None = None,
    *,
    parser: str = "hybrid",
    undeclared_topics: bool = True,
    timeout_s: float | None = None,
    checkpoint: Location | str | None = None,
) -> BronzeReport:
    """Ingest the pipeline's Debezium topics into bronze: one streaming query per source.

    Why one stream per source: each writes one table with its own fast pass (built once per
    source and process, not through py4j every micro-batch), and the queries run concurrently, so a 2-core
    machine works on two topics at once. A further query reads
    `<prefix>.<schema>.*` topics no source declares and quarantines them, when Kafka holds
    any (`undeclared_topics=False` skips it, for a connector that captures tables other
    pipelines own). Checkpoints: `<checkpoint>/<source>` (default base:
    `checkpoint_dir(lake, pipeline.name, "bronze")`).

    `available_now` drains what Kafka holds at start, in batches of at most
    `max_offsets_per_trigger` (default: the pipeline's) per stream, and returns;
    `processing_time` runs every `options.processing_time` until `timeout_s` (or forever).
    Restarting on the same checkpoints resumes after the last committed batch; a batch
    replayed after a crash is not written twice (commit tags, see the module docstring).

    Example::

        from pathlib import Path
        from lakehouse.bronze import run_bronze
        from lakehouse.declaration import load_pipeline
        from lakehouse.spark import get_spark

        lake, pipeline = Path(".lake"), load_pipeline("schemas/shop/pipeline.yml")
        report = run_bronze(get_spark(lake), pipeline, lake, "127.0.0.1:19092")  # drain Kafka, then return
        print(report.render())   # records, bronze rows and quarantined records per source
    """
    check_trigger(trigger)
    specs, report, say = bronze_streams(
        spark, pipeline, lake, bootstrap, max_offsets_per_trigger, progress,
        parser=parser, undeclared_topics=undeclared_topics, checkpoint=checkpoint, trigger=trigger,
    )
    started = time.monotonic()
    try:
        with recording_metrics(spark, pipeline) as metrics:
            run_streams(specs, trigger, pipeline.options.processing_time, timeout_s=timeout_s, say=say, metrics=metrics)
    finally:
        report.seconds = time.monotonic() - started
    say(
        f"bronze {pipeline.name}: done, {report.records} records, {report.rows} rows to bronze, "
        f"{report.quarantined} to quarantine ({report.seconds:.1f}s)"
    )
    return report


def bronze_streams(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    bootstrap: str,
    max_offsets_per_trigger: int | None = None,
    progress: Callable[[str], None] | None = None,
    *,
    parser: str = "hybrid",
    undeclared_topics: bool = True,
    checkpoint: Location | str | None = None,
    trigger: str = "processing_time",
) -> tuple[list[StreamSpec], BronzeReport, Callable[[str], None]]:
    """Bronze's queries (one per source, one for undeclared topics; at bronze's interval), the
    report their batches fill, and the progress function they use: for `run_bronze` or a
    continuous run of every stage. Creates the bronze tables."""
    _check_choice("parser", parser, PARSERS)
    lake = Path(lake)
    base = location(checkpoint) if checkpoint else checkpoint_dir(lake, pipeline.name, STREAM)
    max_offsets = max_offsets_per_trigger or pipeline.kafka.max_offsets_per_trigger
    starting = pipeline.kafka.starting_offsets

    def say(message: str) -> None:
        log.info(message)
        if progress is not None:
            progress(message)

    connection = kafka_connection(bootstrap, pipeline.kafka.options)
    topics = check_connection(connection)  # a refused login fails here, before any table or query
    ensure_bronze_tables(spark, pipeline)
    report = BronzeReport(
        pipeline=pipeline.name, checkpoint=str(base), trigger=trigger, parser=parser,
        quarantine_table=quarantine_table(pipeline), decoding=decoding_with(spark, parser),
        tables={s.name: TableReport(s.name, bronze_table(pipeline, s)) for s in pipeline.sources.values()},
    )
    lock = threading.Lock()  # classic: batches of several queries report at once

    def receive(outcome: Outcome) -> None:
        with lock:
            _count_batch(report, outcome, say)

    post = PostOffice(spark, pipeline, receive)

    def plan(source: Source) -> tuple[_Stream, DataFrame]:
        handler = _SourceStream(pipeline, source, parser, base / source.name, post.mailbox)
        return handler, handler.frame(kafka_stream(spark, connection, starting, max_offsets, topics=[source.topic]))

    # A source's SQL pass is thousands of py4j calls (about a second) when first built, the
    # JVM pass a few dozen: built side by side, since each thread waits on its own JVM connection.
    with ThreadPoolExecutor(max_workers=max(1, len(pipeline.sources))) as pool:
        plans: list[tuple[_Stream, DataFrame]] = list(pool.map(plan, pipeline.sources.values()))
    undeclared = undeclared_topics and undeclared_topics_exist(topics, pipeline)
    if undeclared:
        raw = kafka_stream(spark, connection, starting, max_offsets, pattern=undeclared_pattern(pipeline))
        plans.append((_UndeclaredStream(pipeline, base / _UndeclaredStream.name, post.mailbox), raw))
    say(
        f"bronze {pipeline.name}: {len(pipeline.sources)} source streams"
        f"{' + 1 for undeclared ' + pipeline.kafka.topic_prefix + '.' + pipeline.kafka.source_schema + '.* topics' if undeclared else ''} "
        f"from {bootstrap}{'' if connection.secured == 'PLAINTEXT' else ' (' + connection.secured + ')'}, trigger {trigger}, at most {max_offsets} records per batch, decoding with the {report.decoding}, checkpoints {base}"
    )
    return [_bronze_stream(handler, frame, base, pipeline, post) for handler, frame in plans], report, say


def _bronze_stream(handler: _Stream, frame: DataFrame, base: Location, pipeline: Pipeline, post: PostOffice) -> StreamSpec:
    """One stream's query for the shared runner: `<base>/<stream>` checkpoint, commit tags bound to its id.

    Before every (re)start the handler learns which batch the previous run left uncommitted
    (the only one it may replay); after it, the query id its commit tags carry.
    """
    def build() -> Any:
        handler.reset(frame.sparkSession)
        return frame.writeStream.foreachBatch(handler)

    def failure(exc: BaseException) -> str:
        return (
            f"bronze ingest of pipeline {pipeline.name!r} failed: {first_line(exc)}. Nothing of an uncommitted batch "
            f"is lost: rerun to resume from the checkpoints under {base}."
        )

    return StreamSpec(
        name=f"bronze {pipeline.name}/{handler.name}",
        query_name=handler.query_name,
        checkpoint=handler.checkpoint,
        build=build,
        failure=failure,
        processing_time=pipeline.options.interval("bronze"),
        collect=post.collect,
        reads=(),  # Kafka: outside the lake
        writes=handler.outputs,
    )
