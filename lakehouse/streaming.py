"""The one streaming runner bronze, silver and gold use: trigger, start, await, restart, timeout, stop.

A stage describes each of its queries as a `StreamSpec` (how to build its writer, its
checkpoint and query name, what to do before the first start and after every start) and hands
them to `run_streams`. Queries handed over together run concurrently; a stage that must run
its queries one after another calls `run_streams` once per query.

Only DataStreamWriter and StreamingQuery calls (no sparkContext, no py4j, no caching), so it
runs on Databricks serverless as well as locally.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from lakehouse.errors import CdcEnrichError, PipelineConfigError, StreamError

AVAILABLE_NOW = "available_now"
PROCESSING_TIME = "processing_time"
TRIGGERS = (AVAILABLE_NOW, PROCESSING_TIME)

# Spark 4.1.1's Kafka source throws this NPE while reporting progress for the first batch
# after a restart when that batch is a replay of one the crashed run left uncommitted
# (apache/spark SPARK-55271 / SPARK-57438: `Some(null)` in KafkaMicroBatchStream.metrics).
# It happens after the batch is written and committed, so restarting the query is safe.
KAFKA_METRICS_NPE = ('"scala.Option.get()" is null', "IterableOps.map")
MAX_RESTARTS = 3

Say = Callable[[str], None]


def _quiet(message: str) -> None:
    """The default `say`: progress lines go nowhere."""


def _nothing(*_args: Any) -> None:
    """The default hooks of a StreamSpec: nothing to prepare, nothing to bind."""


def check_trigger(trigger: str) -> None:
    """Fail before anything starts when `trigger` is not one the runner knows."""
    if trigger not in TRIGGERS:
        raise PipelineConfigError(f"unknown trigger {trigger!r}; expected one of {', '.join(TRIGGERS)}")


def apply_trigger(writer: Any, trigger: str, processing_time: str) -> Any:
    """`writer` with its trigger set: the only place the trigger names are interpreted."""
    check_trigger(trigger)
    if trigger == AVAILABLE_NOW:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=processing_time)


def first_line(exc: BaseException) -> str:
    """An exception's first line (Spark's carry whole plans)."""
    lines = str(exc).strip().splitlines()
    return lines[0][:500] if lines else type(exc).__name__


def is_known_spark_bug(exc: BaseException) -> bool:
    """Whether `exc` is the Kafka metrics NPE above: its message, raised from
    KafkaMicroBatchStream.metrics (JVM stack trace and cause included)."""
    text = f"{exc}\n{getattr(exc, '_stackTrace', '') or ''}\n{getattr(exc, '_cause', '') or ''}"
    return all(marker in text for marker in KAFKA_METRICS_NPE)


@dataclass(frozen=True)
class StreamSpec:
    """One streaming query as a stage declares it; `run_streams` does the rest.

    `build` returns the DataStreamWriter (source + foreachBatch handler) and is called before
    every (re)start; `prepare` once, just before the first start (create tables, check inputs);
    `started` after every start, with the query id; `failure` words the error of a failed query.
    """

    name: str  # for messages: "bronze shop/orders", "silver products", "gold orders_enriched"
    query_name: str
    checkpoint: Path
    build: Callable[[], Any]
    prepare: Callable[[], None] = _nothing
    started: Callable[[str], None] = _nothing
    failure: Callable[[BaseException], str] | None = None

    def failed(self, exc: BaseException) -> StreamError:
        """The project's error for a query of this stream that failed with `exc`."""
        if self.failure is not None:
            return StreamError(self.failure(exc))
        return StreamError(
            f"{self.name} failed: {first_line(exc)}. Nothing of an uncommitted batch is lost: "
            f"rerun to resume from the checkpoint {self.checkpoint}."
        )


class Stream:
    """One running query of a StreamSpec, restartable on the known Spark bug."""

    def __init__(self, spec: StreamSpec, trigger: str, processing_time: str) -> None:
        self.spec = spec
        self.trigger = trigger
        self.processing_time = processing_time
        self.query: Any = None
        self.restarts = 0

    def start(self) -> None:
        """Build the writer, set checkpoint, name and trigger, start it, tell the handler its id."""
        try:
            writer = (
                self.spec.build()
                .option("checkpointLocation", str(self.spec.checkpoint))
                .queryName(self.spec.query_name)
            )
            self.query = apply_trigger(writer, self.trigger, self.processing_time).start()
        except CdcEnrichError:
            raise
        except Exception as exc:  # noqa: BLE001 - Spark's analysis and start errors, reworded
            raise self.spec.failed(exc) from exc
        self.spec.started(str(self.query.id))

    def stop(self) -> None:
        """Stop the query if it runs (a stopped or never started one is left alone)."""
        if self.query is not None and self.query.isActive:
            self.query.stop()

    def restartable(self, exc: BaseException) -> bool:
        """The known bug, and restarts left."""
        return self.restarts < MAX_RESTARTS and is_known_spark_bug(exc)

    def poll(self, say: Say) -> bool:
        """Wait up to a second: True once the query has terminated; restarts it after the known
        bug; any other failure raises the project's error."""
        try:
            return bool(self.query.awaitTermination(1))
        except Exception as exc:  # noqa: BLE001 - StreamingQueryException
            if not self.restartable(exc):
                raise self.spec.failed(exc) from exc
        self.restarts += 1
        say(f"{self.spec.name}: restarting after Spark's Kafka metrics NPE "
            f"(SPARK-55271; the replayed batch is already committed)")
        self.start()
        return False


def _deadline(trigger: str, timeout_s: float | None) -> float | None:
    """When to stop waiting: never for available_now (each query ends when drained)."""
    if trigger == AVAILABLE_NOW or timeout_s is None:
        return None
    return time.monotonic() + timeout_s


def await_streams(streams: Sequence[Stream], deadline: float | None, say: Say = _quiet) -> None:
    """Wait for every query to terminate, or until `deadline`; a failure raises (restarts aside)."""
    pending = list(streams)
    while pending:
        for stream in list(pending):
            if deadline is not None and time.monotonic() >= deadline:
                return
            if stream.poll(say):
                pending.remove(stream)


def stop_streams(streams: Sequence[Stream]) -> None:
    """Stop every query still running (each one tried even if another's stop fails)."""
    errors: list[BaseException] = []
    for stream in streams:
        try:
            stream.stop()
        except Exception as exc:  # noqa: BLE001 - keep stopping the others
            errors.append(exc)
    if errors:
        raise StreamError(f"could not stop {len(errors)} stream(s): {first_line(errors[0])}") from errors[0]


def run_streams(
    specs: Sequence[StreamSpec],
    trigger: str,
    processing_time: str,
    *,
    timeout_s: float | None = None,
    say: Say | None = None,
) -> None:
    """Start `specs` together (in order, each prepared just before its start), wait, stop them all.

    available_now: returns when every query has drained what its source held at start.
    processing_time: runs until `timeout_s` (None: until stopped, e.g. Ctrl-C). A query that
    fails (other than of the known Spark bug, restarted) stops every other and raises its
    StreamError; KeyboardInterrupt stops them all and propagates. `say` gets the restart lines.
    """
    check_trigger(trigger)
    streams: list[Stream] = []
    try:
        for spec in specs:
            spec.prepare()
            stream = Stream(spec, trigger, processing_time)
            streams.append(stream)
            stream.start()
        await_streams(streams, _deadline(trigger, timeout_s), say or _quiet)
    except BaseException:
        _stop_after_failure(streams)
        raise
    stop_streams(streams)


def _stop_after_failure(streams: Sequence[Stream]) -> None:
    """Stop the others of a failed run; an error stopping them must not hide the failure itself."""
    try:
        stop_streams(streams)
    except StreamError:
        pass
