"""The one streaming runner bronze, silver and gold use: trigger, start, await, restart, timeout, stop.

A stage describes each of its queries as a `StreamSpec` (how to build its writer, its
checkpoint and query name, what to do before the first start and after every start) and hands
them to `run_streams`. Queries handed over together run concurrently; a stage that must run
its queries one after another calls `run_streams` once per query.

Only DataStreamWriter and StreamingQuery calls (no sparkContext, no py4j, no caching), so it
runs on Databricks serverless as well as locally.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from lakehouse.paths import Location
from lakehouse.errors import CdcEnrichError, PipelineConfigError, StreamError, TableLayoutError, UnknownNameError
from lakehouse.secrets import redact

log = logging.getLogger("lakehouse.streaming")

AVAILABLE_NOW = "available_now"
PROCESSING_TIME = "processing_time"
TRIGGERS = (AVAILABLE_NOW, PROCESSING_TIME)

# Spark 4.1.1's Kafka source throws this NPE while reporting progress for the first batch
# after a restart when that batch is a replay of one the crashed run left uncommitted
# (apache/spark SPARK-55271 / SPARK-57438: `Some(null)` in KafkaMicroBatchStream.metrics).
# It happens after the batch is written and committed, so restarting the query is safe.
KAFKA_METRICS_NPE = ('"scala.Option.get()" is null', "IterableOps.map")
MAX_RESTARTS = 3
# Spark Connect starts a Python process for a foreachBatch query and waits a fixed 10 s for it
# to connect back (PythonWorkerFactory, not configurable in Spark 4.1); a busy server misses it.
# Nothing has started then, so starting the query again is safe. The waits double (2, 4, 8,
# 16 s): three tries 2 s apart all missed it at a busy suite's start (stop 34's CI).
WORKER_CONNECT_TIMEOUT = "Python worker failed to connect back"
START_ATTEMPTS = 5
START_RETRY_WAIT_S = 2.0  # before the second attempt; doubled before each later one
STOP_GRACE_S = 120.0  # how long a graceful stop waits for a running micro-batch to finish


class GarbageRelease:
    """Python's cyclic collection at most every `every_s`, called while queries run.

    A py4j proxy pins its JVM object (a DataFrame's plans, with their broadcast relations and
    generated code) until Python frees the proxy, and a proxy caught in a reference cycle is
    freed only by a full collection, which a process that allocates little between micro-batches
    seldom runs. A continuous run at 500 changes/s on a 4 GB driver filled the heap in minutes
    and spent its time in full GCs (silver's batches 6-10x slower by the tenth minute) until its
    proxies were collected every 15 s (docs/performance.md, "Continuous runs"). Shared by every run of queries
    in the process, so a chained run's short drains do not each restart the clock."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.every_s:
                return
            self._last = now
        gc.collect()


#: Collected while any queries of this process run (`await_streams`).
RELEASE_GARBAGE = GarbageRelease(every_s=15.0)


def doubling_wait(first_s: float, n: int, cap_s: float = 60.0) -> float:
    """The n-th wait (from 0) of a backoff that starts at `first_s` and doubles, capped at `cap_s`:
    a restart's and a retried start's."""
    return min(cap_s, first_s * 2**n)


@dataclass(frozen=True)
class RestartPolicy:
    """Which failed queries are started again, and how often.

    The default restarts only the known Spark bug (a drain must fail loudly); a continuous run
    restarts any failure except the project's own errors (a bad pipeline or table will not heal),
    waiting `backoff_s * 2**n` (capped at `max_backoff_s`) and giving up after `max_restarts`
    failures in a row; a batch that completes after a restart resets the count.
    """

    any_failure: bool = False
    max_restarts: int = MAX_RESTARTS
    backoff_s: float = 0.0
    max_backoff_s: float = 60.0

    def allows(self, exc: BaseException, restarts: int) -> bool:
        if restarts >= self.max_restarts:
            return False
        if is_known_spark_bug(exc):
            return True
        return self.any_failure and not isinstance(exc, CdcEnrichError) and not _project_error_inside(exc)

    def wait_s(self, restarts: int) -> float:
        return doubling_wait(self.backoff_s, restarts, self.max_backoff_s)


DRAIN_POLICY = RestartPolicy()
CONTINUOUS_POLICY = RestartPolicy(any_failure=True, max_restarts=5, backoff_s=2.0)


def _project_error_inside(exc: BaseException) -> bool:
    """Whether a foreachBatch failure wraps a project error that a restart cannot heal (a bad
    pipeline or table layout). Spark rewraps the batch function's Python exception; its class
    name survives in the message."""
    text = str(exc)
    return any(cls.__name__ in text for cls in (PipelineConfigError, UnknownNameError, TableLayoutError))

Say = Callable[[str], None]


def _quiet(message: str) -> None:
    """The default `say`: progress lines go nowhere."""


def _nothing(*_args: Any) -> None:
    """The default hooks of a StreamSpec: nothing to prepare, nothing to bind."""


def _none_arrived() -> int:
    """The default `collect` of a StreamSpec: outcomes arrive directly."""
    return 0


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
    """An exception's first line (Spark's carry whole plans), secrets redacted."""
    lines = redact(str(exc)).strip().splitlines()
    return lines[0][:500] if lines else type(exc).__name__


def is_worker_start_timeout(exc: BaseException) -> bool:
    """Whether starting a query failed because its foreachBatch Python worker did not connect
    back in time (Spark Connect under load, above): a start worth trying again."""
    return WORKER_CONNECT_TIMEOUT in str(exc)


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
    `started` after every start, with the query id; `failure` words the error of a failed query;
    `collect` reads back the batch outcomes that came by table (`lakehouse.outcomes`: Spark
    Connect), while the query runs and once it has stopped.
    """

    name: str  # for messages: "bronze shop/orders", "silver products", "gold orders_enriched"
    query_name: str
    checkpoint: Location
    build: Callable[[], Any]
    prepare: Callable[[], None] = _nothing
    started: Callable[[str], None] = _nothing
    failure: Callable[[BaseException], str] | None = None
    processing_time: str | None = None  # this query's interval (processing_time); None: the run's
    collect: Callable[[], int] = _none_arrived
    # Tables by name, for a chained continuous run (`lakehouse.continuous`): a query drains only
    # when a table it reads was written in the cycle. None: not known (`reads`: it drains when
    # the cycle wrote anything; `writes`: a query that read rows makes every later one drain).
    reads: tuple[str, ...] | None = None
    writes: tuple[str, ...] | None = None

    def failed(self, exc: BaseException) -> StreamError:
        """The project's error for a query of this stream that failed with `exc`."""
        if self.failure is not None:
            return StreamError(self.failure(exc))
        return StreamError(
            f"{self.name} failed: {first_line(exc)}. Nothing of an uncommitted batch is lost: "
            f"rerun to resume from the checkpoint {self.checkpoint}."
        )


class Stream:
    """One running query of a StreamSpec, restarted after a failure when its RestartPolicy allows."""

    def __init__(self, spec: StreamSpec, trigger: str, processing_time: str, policy: RestartPolicy = DRAIN_POLICY) -> None:
        self.spec = spec
        self.trigger = trigger
        self.processing_time = spec.processing_time or processing_time
        self.policy = policy
        self.query: Any = None
        self.replaced: list[Any] = []  # queries a restart replaced (their progress is still read)
        self.restarts = 0  # failures in a row (a completed batch after a restart resets it)
        self.total_restarts = 0
        self.restarted_at_batch: int | None = None

    def start(self) -> None:
        """Build the writer, set checkpoint, name and trigger, start it, tell the handler its id.
        A start whose foreachBatch worker missed Spark Connect's connect-back timeout is tried
        again (up to START_ATTEMPTS in all, after START_RETRY_WAIT_S, then twice as long each time)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                writer = (
                    self.spec.build()
                    .option("checkpointLocation", str(self.spec.checkpoint))
                    .queryName(self.spec.query_name)
                )
                self.query = apply_trigger(writer, self.trigger, self.processing_time).start()
                break
            except CdcEnrichError:
                raise
            except Exception as exc:  # noqa: BLE001 - Spark's analysis and start errors, reworded
                if attempt == START_ATTEMPTS or not is_worker_start_timeout(exc):
                    raise self.spec.failed(exc) from exc
                log.warning("%s: starting again (attempt %d of %d): %s",
                            self.spec.name, attempt + 1, START_ATTEMPTS, first_line(exc))
                time.sleep(doubling_wait(START_RETRY_WAIT_S, attempt - 1))
        self.spec.started(str(self.query.id))

    def stop(self) -> None:
        """Stop the query; for one that already ended, join its execution thread (Spark's stop is
        idempotent): `awaitTermination` can return before the session's list of active queries
        drops it, and a query started under the same name right after would be refused."""
        if self.query is not None:
            self.query.stop()

    def restartable(self, exc: BaseException) -> bool:
        """Whether the policy starts this query again after `exc`."""
        return self.policy.allows(exc, self.restarts)

    def batch_id(self) -> int | None:
        """The last completed batch's id (None before the first, or for a fake query)."""
        progress = getattr(self.query, "lastProgress", None)
        return progress.get("batchId") if isinstance(progress, dict) else None

    def busy(self) -> bool:
        """Whether a micro-batch is running now (a graceful stop waits for it)."""
        status = getattr(self.query, "status", None)
        return bool(status.get("isTriggerActive")) if isinstance(status, dict) else False

    def poll(self, say: Say, wait_s: float = 1.0) -> bool:
        """Wait up to `wait_s`: True once the query has terminated; restarts it when the policy
        allows (after its backoff); any other failure raises the project's error."""
        try:
            done = bool(self.query.awaitTermination(wait_s))
        except Exception as exc:  # noqa: BLE001 - StreamingQueryException
            if not self.restartable(exc):
                raise self.spec.failed(exc) from exc
            self._restart(exc, say)
            return False
        if self.restarts and self.batch_id() not in (None, self.restarted_at_batch):
            self.restarts = 0  # it made progress since its last restart
        return done

    def _restart(self, exc: BaseException, say: Say) -> None:
        wait = self.policy.wait_s(self.restarts)
        self.restarts += 1
        self.total_restarts += 1
        why = ("Spark's Kafka metrics NPE (SPARK-55271; the replayed batch is already committed)"
               if is_known_spark_bug(exc) else first_line(exc))
        say(f"{self.spec.name}: restarting (attempt {self.restarts} of {self.policy.max_restarts}"
            f"{f', in {wait:.0f}s' if wait else ''}) after {why}")
        if wait:
            time.sleep(wait)
        self.replaced.append(self.query)
        self.start()
        self.restarted_at_batch = self.batch_id()

    def queries(self) -> list[Any]:
        """Every query this stream ran, the current one last."""
        return [*self.replaced, *([self.query] if self.query is not None else [])]

    def rows_read(self) -> int | None:
        """Input rows over the batches its queries still report (`recentProgress`, the last 100
        each); None when a query's progress is missing or cannot be read (nothing known: assume rows)."""
        total = 0
        for query in self.queries():
            try:
                updates = getattr(query, "recentProgress", None)
                if updates is None:
                    return None
                total += sum(int(progress.numInputRows or 0) for progress in updates)
            except Exception:  # noqa: BLE001 - a progress that cannot be read: as if it read rows
                log.debug("%s: could not read the query's progress", self.spec.name, exc_info=True)
                return None
        return total


def _deadline(trigger: str, timeout_s: float | None) -> float | None:
    """When to stop waiting: never for available_now (each query ends when drained)."""
    if trigger == AVAILABLE_NOW or timeout_s is None:
        return None
    return time.monotonic() + timeout_s


def await_streams(
    streams: Sequence[Stream], deadline: float | None, say: Say = _quiet, stop: threading.Event | None = None
) -> None:
    """Wait for every query to terminate, until `deadline`, or until `stop` is set; a failure
    raises (restarts aside). Each query is polled for a fraction of a second in turn, so one
    query's failure is seen within about a second whatever the number of queries."""
    pending = list(streams)
    wait_s = max(0.1, 1.0 / max(1, len(pending)))
    while pending:
        RELEASE_GARBAGE()
        for stream in list(pending):
            if deadline is not None and time.monotonic() >= deadline:
                return
            if stop is not None and stop.is_set():
                return
            if stream.poll(say, wait_s):
                pending.remove(stream)


def stop_gracefully(streams: Sequence[Stream], grace_s: float = STOP_GRACE_S, say: Say = _quiet) -> None:
    """Stop every query between micro-batches: wait (up to `grace_s` in all) for running batches
    to finish, then stop. A batch cut short anyway is replayed from the checkpoint on the next
    start, and its writes' Delta txn ids make the replay write nothing twice."""
    deadline = time.monotonic() + grace_s
    for stream in streams:
        while stream.query is not None and stream.query.isActive and stream.busy() and time.monotonic() < deadline:
            time.sleep(0.2)
        if stream.busy():
            say(f"{stream.spec.name}: stopping mid-batch after {grace_s:.0f}s (the batch is replayed on restart)")
    stop_streams(streams)


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
    policy: RestartPolicy = DRAIN_POLICY,
    stop: threading.Event | None = None,
    metrics: Any | None = None,
) -> list[Stream]:
    """Start `specs` together (in order, each prepared just before its start), wait, stop them all.

    available_now: returns when every query has drained what its source held at start.
    processing_time: runs until `timeout_s`, or until `stop` is set (a signal handler sets it),
    then stops every query between batches (`stop_gracefully`; so does available_now when `stop`
    is set before the queries have drained); each spec may carry its own
    interval. A query that fails and that `policy` does not restart stops every other and
    raises its StreamError; KeyboardInterrupt stops them all and propagates. `say` gets the
    restart lines. `metrics` (a `lakehouse.metrics.MetricsRecorder`) watches the streams and
    reads every batch's progress (while they run, and once more when they have stopped).
    Returns the streams (their restart counts), all stopped.
    """
    check_trigger(trigger)
    streams: list[Stream] = []
    if metrics is not None:
        metrics.watch(streams)
    try:
        return _run_streams(streams, specs, trigger, processing_time, timeout_s, say, policy, stop)
    finally:
        try:
            collect_outcomes(streams)
        except Exception:  # noqa: BLE001 - the report misses some counts; the data is written
            log.warning("could not read back the batch outcomes of %d stream(s)", len(streams), exc_info=True)
        if metrics is not None:
            metrics.collect()
            metrics.forget(streams)  # stopped: a run of many drains (a chained continuous run) reads only the live ones


def collect_outcomes(streams: Sequence[Stream]) -> int:
    """Read back the batch outcomes of `streams` that came by table (each stage's collector once)."""
    return sum(collect() for collect in dict.fromkeys(s.spec.collect for s in streams))


def _run_streams(
    streams: list[Stream],
    specs: Sequence[StreamSpec],
    trigger: str,
    processing_time: str,
    timeout_s: float | None,
    say: Say | None,
    policy: RestartPolicy,
    stop: threading.Event | None,
) -> list[Stream]:
    try:
        for spec in specs:
            spec.prepare()
            stream = Stream(spec, trigger, processing_time, policy)
            streams.append(stream)
            stream.start()
        await_streams(streams, _deadline(trigger, timeout_s), say or _quiet, stop)
    except BaseException:
        _stop_after_failure(streams)
        raise
    if trigger == AVAILABLE_NOW and not (stop is not None and stop.is_set()):
        stop_streams(streams)  # drained: each query has ended
    else:
        stop_gracefully(streams, say=say or _quiet)
    return streams


def _stop_after_failure(streams: Sequence[Stream]) -> None:
    """Stop the others of a failed run; an error stopping them must not hide the failure itself."""
    try:
        stop_streams(streams)
    except StreamError:
        pass
