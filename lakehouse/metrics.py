"""Stream metrics for operators: one row per micro-batch of every query, in a Delta table.

The stream runner hands the recorder its streams (`run_streams(..., metrics=recorder)`); the
recorder reads each query's own progress (`recentProgress`: rows, rates, durations, Kafka lag
per topic from the source's latest and end offsets), every `flush_every_s` from a thread of its
own while queries run and once more when they have stopped, and appends the batches it had not
seen. No listener (no py4j callbacks, so Spark Connect works too), and no query waits for a
metrics write. Rows:

    pipeline, stage, stream, query_id, run_id, batch_id, at, input_rows, rows_out, quarantined,
    input_rows_per_s, processed_rows_per_s, batch_ms, durations_ms (map: addBatch,
    queryPlanning, walCommit...), kafka_lag (map topic -> records behind; null for Delta
    sources), source

`input_rows`, `rows_out` and `quarantined` come from the stage's own batch function
(`note_batch`: Kafka records, bronze rows and quarantined records; bronze rows read and silver
current rows upserted; change-feed rows read and gold rows inserted/updated/deleted): Spark's
progress does not know what a foreachBatch sink wrote, and counts its input once per action.
The rates and durations are Spark's.

A query keeps its last `spark.sql.streaming.numRecentProgressUpdates` (100) updates: a drain
longer than that between two reads (10 s) would lose the oldest; a metrics write that fails
is retried at the next flush and never fails the run.
"""

from __future__ import annotations

import ast
import json
import logging
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterator, Sequence

from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, LongType, MapType, StringType, StructField, StructType, TimestampType

from lakehouse.declaration import Pipeline
from lakehouse.frames import local_frame

log = logging.getLogger("lakehouse.metrics")

COLLECT_EVERY_S = 10.0  # how often a recorder reads its queries' progress, whatever its flush interval
#: A continuous run's metrics commit: at most one a minute (a bookkeeping commit per cycle would
#: cost more than a quiet cycle's work).
CONTINUOUS_FLUSH_S = 60.0

METRICS_SCHEMA = StructType(
    [
        StructField("pipeline", StringType(), False),
        StructField("stage", StringType(), False),
        StructField("stream", StringType(), False),
        StructField("query_id", StringType(), False),
        StructField("run_id", StringType(), False),
        StructField("batch_id", LongType(), False),
        StructField("at", TimestampType(), False),
        StructField("input_rows", LongType(), True),
        StructField("rows_out", LongType(), True),
        StructField("quarantined", LongType(), True),
        StructField("input_rows_per_s", DoubleType(), True),
        StructField("processed_rows_per_s", DoubleType(), True),
        StructField("batch_ms", LongType(), True),
        StructField("durations_ms", MapType(StringType(), LongType()), True),
        StructField("kafka_lag", MapType(StringType(), LongType()), True),
        StructField("source", StringType(), True),
    ]
)


def metrics_table(pipeline: Pipeline) -> str:
    """`<quality_schema>.stream_metrics`: beside the quality results, for the same dashboards."""
    return pipeline.tables.qualified("quality", "stream_metrics")


def stage_of(query_name: str | None) -> str:
    """The stage a query belongs to, from its name (`bronze_...`, `silver_...`, `gold_...`)."""
    head = (query_name or "").split("_", 1)[0]
    return head if head in ("bronze", "silver", "gold") else "other"


def kafka_lag(latest: str | None, end: str | None) -> dict[str, int] | None:
    """Records behind per topic: the source's latest offsets minus those the batch read to
    (Kafka's offsets JSON: {"topic": {"0": 42}}); None for a source that is not Kafka."""
    latest_offsets, end_offsets = _offsets(latest), _offsets(end)
    if not isinstance(latest_offsets, dict) or not isinstance(end_offsets, dict):
        return None
    lag: dict[str, int] = {}
    for topic, partitions in latest_offsets.items():
        if not isinstance(partitions, dict):
            return None  # a Delta source's offset is an object of another shape
        done = end_offsets.get(topic, {}) if isinstance(end_offsets.get(topic), dict) else {}
        lag[topic] = sum(max(0, int(v) - int(done.get(p, 0))) for p, v in partitions.items())
    return lag


_OUTCOMES: dict[tuple[str, int], tuple[int, int, int]] = {}
_OUTCOMES_LOCK = threading.Lock()
_OUTCOMES_KEPT = 10_000  # a stream whose progress is never recorded must not grow this forever


def note_batch(stream: str, batch_id: int, rows_in: int, rows_out: int, quarantined: int = 0) -> None:
    """What a stage's batch function read and wrote, for the metrics row of its query's batch
    (`stream`: the query's name). Spark's own input count is not used when this is known: it
    counts a source row once per action that reads the batch, and a batch function reads it
    several times. Cheap, and harmless when nothing records metrics."""
    with _OUTCOMES_LOCK:
        if len(_OUTCOMES) >= _OUTCOMES_KEPT:
            _OUTCOMES.pop(next(iter(_OUTCOMES)))
        _OUTCOMES[(stream, int(batch_id))] = (int(rows_in), int(rows_out), int(quarantined))


def _noted(stream: str, batch_id: int) -> bool:
    with _OUTCOMES_LOCK:
        return (stream, batch_id) in _OUTCOMES


def _outcome(stream: str, batch_id: int) -> tuple[int | None, int | None, int | None]:
    with _OUTCOMES_LOCK:
        return _OUTCOMES.pop((stream, batch_id), (None, None, None))


def _offsets(text: str | None) -> Any:
    """A source's offsets: JSON as Spark writes it, or a Python dict's repr (what PySpark's
    `recentProgress` turns them into: `str()` of the parsed JSON)."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None


def progress_row(pipeline: str, progress: Any) -> tuple:
    """One metrics row from a StreamingQueryProgress (and the batch's noted outcome)."""
    sources = list(progress.sources or [])
    lags = [kafka_lag(s.latestOffset, s.endOffset) for s in sources]
    lag = {t: n for found in lags if found for t, n in found.items()} if any(lags) else None
    durations = {k: int(v) for k, v in (progress.durationMs or {}).items()}
    at = datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).astimezone(timezone.utc).replace(tzinfo=None)
    stream = progress.name or str(progress.id)
    rows_in, rows_out, quarantined = _outcome(stream, int(progress.batchId))
    return (
        pipeline, stage_of(progress.name), stream, str(progress.id), str(progress.runId),
        int(progress.batchId), at, int(progress.numInputRows) if rows_in is None else rows_in, rows_out, quarantined,
        _rate(progress.inputRowsPerSecond),
        _rate(progress.processedRowsPerSecond), durations.get("triggerExecution"), durations, lag,
        ", ".join(s.description for s in sources)[:500] or None,
    )


def _rate(value: Any) -> float | None:
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return None
    return rate if rate == rate else None  # NaN when nothing was read


class MetricsRecorder:
    """Reads the watched streams' progress and appends each batch once, from its own thread."""

    def __init__(self, spark: SparkSession, pipeline: Pipeline, flush_every_s: float = 10.0) -> None:
        self.spark, self.pipeline, self.table = spark, pipeline, metrics_table(pipeline)
        self.flush_every_s = flush_every_s
        self.rows: list[tuple] = []
        self.written = 0
        self._watched: list[Sequence[Any]] = []
        self._seen: set[tuple[str, int]] = set()
        self._schema_ready = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cdc-enrich-metrics", daemon=True)

    def watch(self, streams: Sequence[Any]) -> None:
        """Read these streams (`lakehouse.streaming.Stream`, filled as they start) from now on."""
        with self._lock:
            self._watched.append(streams)

    def forget(self, streams: Sequence[Any]) -> None:
        """Stop reading `streams` (stopped, their batches collected)."""
        with self._lock:
            self._watched = [watched for watched in self._watched if watched is not streams]

    def collect(self) -> int:
        """Take the batches not seen yet from every watched query; how many."""
        from lakehouse.streaming import collect_outcomes

        with self._lock:
            watched = [stream for streams in self._watched for stream in list(streams)]
        try:
            collect_outcomes(watched)  # first: a batch's noted rows feed its metrics row
        except Exception:  # noqa: BLE001 - read again at the next flush
            log.debug("metrics: could not read the batch outcomes", exc_info=True)
        queries = [q for stream in watched for q in stream.queries()]
        found = []
        for query in queries:
            try:
                updates = query.recentProgress
            except Exception:  # noqa: BLE001 - a query being torn down; the next read gets it
                continue
            for progress in updates:
                if not progress.numInputRows and not _noted(progress.name or str(progress.id), int(progress.batchId)):
                    continue  # an idle update (no new data: no batch ran), not a batch
                key = (str(progress.runId), int(progress.batchId))
                with self._lock:
                    if key in self._seen:
                        continue
                    self._seen.add(key)
                try:
                    found.append(progress_row(self.pipeline.name, progress))
                except Exception:  # noqa: BLE001 - a metrics row must never fail a run
                    log.debug("metrics: could not read a progress update", exc_info=True)
        with self._lock:
            self.rows.extend(found)
        return len(found)

    def flush(self) -> int:
        """Append what was collected; the number of rows written."""
        with self._lock:
            rows, self.rows = self.rows, []
        if not rows:
            return 0
        try:
            if not self._schema_ready:
                self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {self.table.rsplit('.', 1)[0]}")
                self._schema_ready = True
            local_frame(self.spark, rows, METRICS_SCHEMA).write.format("delta").mode("append").saveAsTable(self.table)
        except Exception:  # noqa: BLE001 - kept for the next flush; a metrics table must not stop the service
            log.warning("metrics: appending %d rows to %s failed; retried at the next flush", len(rows), self.table, exc_info=True)
            with self._lock:
                self.rows[:0] = rows
            return 0
        self.written += len(rows)
        return len(rows)

    def _loop(self) -> None:
        """Collect every COLLECT_EVERY_S at most (a query keeps its latest 100 updates), write
        every `flush_every_s` (one commit)."""
        flushed = time.monotonic()
        while not self._stop.wait(min(COLLECT_EVERY_S, self.flush_every_s)):
            self.collect()
            if time.monotonic() - flushed >= self.flush_every_s:
                self.flush()
                flushed = time.monotonic()

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=120)
        self.collect()
        self.flush()


@contextmanager
def recording_metrics(spark: SparkSession, pipeline: Pipeline, flush_every_s: float = 10.0) -> Iterator[MetricsRecorder]:
    """A recorder for `run_streams(..., metrics=...)`, flushing every `flush_every_s` while the
    block runs and once more at its end (also after a failure: what ran is recorded)."""
    recorder = MetricsRecorder(spark, pipeline, flush_every_s)
    recorder.start()
    try:
        yield recorder
    finally:
        recorder.close()
