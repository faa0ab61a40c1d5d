"""The shared streaming runner without Spark: trigger mapping, the known-bug detection, and
`run_streams`' start/await/restart/stop rules, driven by tiny fake writers and queries."""

from __future__ import annotations

import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from lakehouse.errors import CdcEnrichError, PipelineConfigError, StreamError
from lakehouse.streaming import (
    CONTINUOUS_POLICY,
    KAFKA_METRICS_NPE,
    MAX_RESTARTS,
    START_ATTEMPTS,
    START_RETRY_WAIT_S,
    WORKER_CONNECT_TIMEOUT,
    RestartPolicy,
    StreamSpec,
    apply_trigger,
    first_line,
    is_known_spark_bug,
    run_streams,
)


class FakeQuery:
    """A StreamingQuery whose `awaitTermination(1)` answers from a script (True, False or an exception)."""

    def __init__(self, script: list[Any], name: str, log: list[str]) -> None:
        self.id = f"id-{name}"
        self.script = list(script)
        self.name = name
        self.log = log
        self.isActive = True

    def awaitTermination(self, timeout: float) -> bool:  # noqa: N802 - Spark's name
        step = self.script.pop(0) if self.script else False
        if isinstance(step, BaseException):
            self.isActive = False
            raise step
        if step:
            self.isActive = False
        return bool(step)

    def stop(self) -> None:
        """Like Spark's: stopping a query that already ended changes nothing (it only joins its thread)."""
        if self.isActive:
            self.log.append(f"stop {self.name}")
        self.isActive = False


class FakeWriter:
    """A DataStreamWriter that records what it was told and starts a FakeQuery."""

    def __init__(self, query: Callable[[], FakeQuery]) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.query = query

    def option(self, key: str, value: str) -> FakeWriter:
        self.calls.append(("option", (key, value)))
        return self

    def queryName(self, name: str) -> FakeWriter:  # noqa: N802 - Spark's name
        self.calls.append(("queryName", name))
        return self

    def trigger(self, **kwargs: Any) -> FakeWriter:
        self.calls.append(("trigger", kwargs))
        return self

    def start(self) -> FakeQuery:
        return self.query()


def fake_spec(name: str, scripts: list[list[Any]], log: list[str], **hooks: Any) -> StreamSpec:
    """A spec whose n-th start gets the n-th script (a restart starts the next one)."""
    starts = iter(scripts)

    def build() -> FakeWriter:
        log.append(f"build {name}")
        return FakeWriter(lambda: FakeQuery(next(starts), name, log))

    return StreamSpec(name=name, query_name=f"q_{name}", checkpoint=Path("/cp") / name, build=build, **hooks)


# --------------------------------------------------------------------------- trigger mapping


def test_available_now_maps_to_the_available_now_trigger() -> None:
    writer = apply_trigger(FakeWriter(lambda: None), "available_now", "10 seconds")
    assert writer.calls == [("trigger", {"availableNow": True})]


def test_processing_time_maps_to_the_pipelines_interval() -> None:
    writer = apply_trigger(FakeWriter(lambda: None), "processing_time", "7 seconds")
    assert writer.calls == [("trigger", {"processingTime": "7 seconds"})]


@pytest.mark.parametrize("trigger", ["once", "availableNow", "", "PROCESSING_TIME"])
def test_an_unknown_trigger_is_a_configuration_error(trigger: str) -> None:
    with pytest.raises(PipelineConfigError, match="available_now, processing_time"):
        apply_trigger(FakeWriter(lambda: None), trigger, "10 seconds")


def test_an_unknown_trigger_fails_before_anything_is_prepared_or_started() -> None:
    log: list[str] = []
    spec = fake_spec("a", [[True]], log, prepare=lambda: log.append("prepare a"))
    with pytest.raises(PipelineConfigError):
        run_streams([spec], "continuous", "1 second")
    assert log == []


# --------------------------------------------------------------------------- the known Spark bug


class JvmError(Exception):
    """Like pyspark's captured exceptions: the JVM stack trace on `_stackTrace`."""

    def __init__(self, message: str, stack: str = "") -> None:
        super().__init__(message)
        self._stackTrace = stack


def test_the_kafka_metrics_npe_is_recognised_by_message_and_stack() -> None:
    message, frame = KAFKA_METRICS_NPE
    assert is_known_spark_bug(JvmError(f"Cannot invoke {message}", f"at scala.collection.{frame}(x)"))
    assert not is_known_spark_bug(JvmError(f"Cannot invoke {message}"))  # not raised from the metrics
    assert not is_known_spark_bug(JvmError("some other NPE", f"at {frame}"))


def test_first_line_keeps_one_line_of_a_long_message() -> None:
    assert first_line(RuntimeError("boom\n== Physical Plan ==\n...")) == "boom"
    assert first_line(RuntimeError("x" * 900)) == "x" * 500
    assert first_line(KeyboardInterrupt()) == "KeyboardInterrupt"


# --------------------------------------------------------------------------- run_streams


def test_every_stream_is_prepared_started_and_drained_in_order() -> None:
    log: list[str] = []
    ids: list[str] = []
    specs = [
        fake_spec(n, [[False, True]], log, prepare=lambda n=n: log.append(f"prepare {n}"), started=ids.append)
        for n in ("a", "b")
    ]
    run_streams(specs, "available_now", "1 second")
    assert log == ["prepare a", "build a", "prepare b", "build b"]  # b's tables after a started
    assert ids == ["id-a", "id-b"]


def test_checkpoint_query_name_and_trigger_are_set_on_the_writer() -> None:
    writers: list[FakeWriter] = []

    def build() -> FakeWriter:
        writers.append(FakeWriter(lambda: FakeQuery([True], "a", [])))
        return writers[-1]

    run_streams([StreamSpec("a", "q_a", Path("/cp/a"), build)], "processing_time", "3 seconds")
    assert writers[0].calls == [
        ("option", ("checkpointLocation", "/cp/a")),
        ("queryName", "q_a"),
        ("trigger", {"processingTime": "3 seconds"}),
    ]


def _npe() -> JvmError:
    message, frame = KAFKA_METRICS_NPE
    return JvmError(f"Cannot invoke {message}", f"at {frame}")


def test_a_query_that_died_of_the_known_bug_is_restarted() -> None:
    log: list[str] = []
    said: list[str] = []
    ids: list[str] = []
    spec = fake_spec("bronze p/orders", [[_npe()], [True]], log, started=ids.append)
    run_streams([spec], "available_now", "1 second", say=said.append)
    assert log == ["build bronze p/orders", "build bronze p/orders"]  # rebuilt: the handler is reset
    assert ids == ["id-bronze p/orders"] * 2
    assert said == ["bronze p/orders: restarting (attempt 1 of 3) after Spark's Kafka metrics NPE "
                    "(SPARK-55271; the replayed batch is already committed)"]


def test_restarts_are_limited() -> None:
    log: list[str] = []
    spec = fake_spec("a", [[_npe()]] * (MAX_RESTARTS + 1), log)
    with pytest.raises(StreamError, match="a failed: Cannot invoke"):
        run_streams([spec], "available_now", "1 second")
    assert log.count("build a") == MAX_RESTARTS + 1


def test_a_failure_stops_the_others_and_is_the_projects_error() -> None:
    log: list[str] = []
    boom = RuntimeError("batch 3 failed\nJVM stack ...")
    specs = [fake_spec("a", [[False] * 100], log), fake_spec("b", [[False, boom]], log)]
    with pytest.raises(StreamError) as caught:
        run_streams(specs, "processing_time", "1 second")
    assert "stop a" in log and "stop b" not in log  # b had already terminated
    assert str(caught.value).startswith("b failed: batch 3 failed. Nothing of an uncommitted batch is lost")
    assert caught.value.__cause__ is boom


def test_a_stage_words_its_own_failure() -> None:
    spec = fake_spec("a", [[ValueError("bad\nplan")]], [], failure=lambda exc: f"stage x failed: {first_line(exc)}")
    with pytest.raises(StreamError, match="^stage x failed: bad$"):
        run_streams([spec], "available_now", "1 second")


def test_a_project_error_while_preparing_passes_through_and_stops_the_started() -> None:
    log: list[str] = []

    def missing() -> None:
        raise CdcEnrichError("bronze table t does not exist: run the bronze job for 'b' first")

    specs = [fake_spec("a", [[False] * 100], log), fake_spec("b", [[True]], log, prepare=missing)]
    with pytest.raises(CdcEnrichError, match="does not exist") as caught:
        run_streams(specs, "available_now", "1 second")
    assert not isinstance(caught.value, StreamError)
    assert log == ["build a", "stop a"]


def test_processing_time_stops_every_query_at_the_timeout() -> None:
    log: list[str] = []
    specs = [fake_spec(n, [[False] * 10_000], log) for n in ("a", "b")]
    started = time.monotonic()
    run_streams(specs, "processing_time", "1 second", timeout_s=0.05)
    assert time.monotonic() - started < 5
    assert sorted(entry for entry in log if entry.startswith("stop")) == ["stop a", "stop b"]


def test_available_now_ignores_the_timeout() -> None:
    log: list[str] = []
    run_streams([fake_spec("a", [[False, False, True]], log)], "available_now", "1 second", timeout_s=0)
    assert "stop a" not in log  # drained: it ended by itself


def test_keyboard_interrupt_stops_every_query_and_propagates() -> None:
    log: list[str] = []
    specs = [fake_spec("a", [[False] * 100], log), fake_spec("b", [[False, KeyboardInterrupt()]], log)]
    with pytest.raises(KeyboardInterrupt):
        run_streams(specs, "processing_time", "1 second")
    assert "stop a" in log


def _failing_starts(name: str, errors: list[BaseException], log: list[str]) -> StreamSpec:
    """A spec whose first starts raise `errors` (as DataStreamWriter.start would), then drains."""
    pending = list(errors)

    def start() -> FakeQuery:
        if pending:
            raise pending.pop(0)
        return FakeQuery([True], name, log)

    def build() -> FakeWriter:
        log.append(f"build {name}")
        return FakeWriter(start)

    return StreamSpec(name=name, query_name=f"q_{name}", checkpoint=Path("/cp") / name, build=build)


def _worker_timeout() -> JvmError:
    return JvmError(f"[PYTHON_WORKER] {WORKER_CONNECT_TIMEOUT}.", "Caused by: java.net.SocketTimeoutException")


def test_a_start_whose_foreach_batch_worker_missed_the_connect_back_is_tried_again_waiting_longer_each_time(monkeypatch) -> None:
    import threading

    waits: list[float] = []
    real_sleep, this_thread = time.sleep, threading.current_thread()

    def sleep(seconds: float) -> None:
        """This thread's waits recorded (not slept); another thread's (a library's, sharing the
        `time` module in this worker process) slept as usual, so it neither spins nor shows here."""
        if threading.current_thread() is this_thread:
            waits.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr("lakehouse.streaming.time.sleep", sleep)
    log: list[str] = []
    run_streams([_failing_starts("a", [_worker_timeout()] * (START_ATTEMPTS - 1), log)], "available_now", "1 second")
    assert log == ["build a"] * START_ATTEMPTS  # started on the last attempt and drained
    assert waits == [START_RETRY_WAIT_S * 2**i for i in range(START_ATTEMPTS - 1)]  # 2, 4, 8, 16 s


def test_start_attempts_are_limited_and_other_start_errors_are_not_retried(monkeypatch) -> None:
    monkeypatch.setattr("lakehouse.streaming.START_RETRY_WAIT_S", 0.0)
    log: list[str] = []
    with pytest.raises(StreamError, match=f"a failed: \\[PYTHON_WORKER\\] {WORKER_CONNECT_TIMEOUT}"):
        run_streams([_failing_starts("a", [_worker_timeout()] * START_ATTEMPTS, log)], "available_now", "1 second")
    assert log == ["build a"] * START_ATTEMPTS
    log.clear()
    with pytest.raises(StreamError, match="a failed: checkpoint is not writable"):
        run_streams([_failing_starts("a", [RuntimeError("checkpoint is not writable")], log)], "available_now", "1 second")
    assert log == ["build a"]


# --------------------------------------------------------------------------- continuous runs


def test_a_drain_does_not_restart_an_ordinary_failure() -> None:
    log: list[str] = []
    spec = fake_spec("a", [[RuntimeError("disk full")], [True]], log)
    with pytest.raises(StreamError, match="a failed: disk full"):
        run_streams([spec], "available_now", "1 second")
    assert log.count("build a") == 1


def test_a_continuous_run_restarts_any_failure_and_keeps_running() -> None:
    log: list[str] = []
    said: list[str] = []
    spec = fake_spec("a", [[RuntimeError("broker gone")], [False, True]], log)
    policy = RestartPolicy(any_failure=True, max_restarts=2)
    streams = run_streams([spec], "processing_time", "1 second", say=said.append, policy=policy, timeout_s=5)
    assert log.count("build a") == 2
    assert streams[0].total_restarts == 1
    assert said == ["a: restarting (attempt 1 of 2) after broker gone"]


def test_a_continuous_run_gives_up_after_failures_in_a_row() -> None:
    log: list[str] = []
    spec = fake_spec("a", [[RuntimeError("broker gone")]] * 3, log)
    with pytest.raises(StreamError, match="broker gone"):
        run_streams([spec], "processing_time", "1 second", policy=RestartPolicy(any_failure=True, max_restarts=2), timeout_s=5)
    assert log.count("build a") == 3


def test_the_projects_own_errors_are_not_restarted() -> None:
    """A bad pipeline or table layout does not heal by restarting; the run stops at once."""
    log: list[str] = []
    boom = RuntimeError("An exception was raised by the Python Proxy. PipelineConfigError: no such column")
    spec = fake_spec("a", [[boom], [False] * 100], log)
    with pytest.raises(StreamError, match="PipelineConfigError"):
        run_streams([spec], "processing_time", "1 second", policy=CONTINUOUS_POLICY, timeout_s=5)
    assert log.count("build a") == 1


def test_backoff_doubles_and_is_capped() -> None:
    policy = RestartPolicy(any_failure=True, max_restarts=10, backoff_s=2.0, max_backoff_s=10.0)
    assert [policy.wait_s(n) for n in range(5)] == [2.0, 4.0, 8.0, 10.0, 10.0]


def test_each_spec_may_carry_its_own_interval() -> None:
    log: list[str] = []
    writers: list[FakeWriter] = []

    def build() -> FakeWriter:
        writers.append(FakeWriter(lambda: FakeQuery([True], "a", log)))
        return writers[-1]

    spec = StreamSpec(name="a", query_name="q_a", checkpoint=Path("/cp/a"), build=build, processing_time="3 seconds")
    run_streams([spec], "processing_time", "10 seconds", timeout_s=5)
    assert ("trigger", {"processingTime": "3 seconds"}) in writers[0].calls


def test_a_stop_event_stops_every_query_between_batches() -> None:
    """What SIGTERM does in `run --continuous`: the await loop returns, each query is stopped
    once its running batch (if any) is done."""
    import threading

    log: list[str] = []
    stop = threading.Event()
    specs = [fake_spec(name, [[False] * 1000], log) for name in ("a", "b")]
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    run_streams(specs, "processing_time", "1 second", stop=stop)
    assert time.monotonic() - started < 5
    assert {"stop a", "stop b"} <= set(log)


def test_a_delta_commit_conflict_is_recognised_however_it_reaches_python() -> None:
    """delta-spark converts conflicts only once `delta.exceptions.captured` is imported; before
    that a classic session raises a bare Py4JJavaError. Both carry the error class."""
    from lakehouse.deltasql import is_commit_conflict

    raw = RuntimeError("An error occurred while calling o20012.execute.\n: io.delta.exceptions.ConcurrentAppendException: "
                       "[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] Transaction conflict detected.")
    assert is_commit_conflict(raw)
    assert not is_commit_conflict(RuntimeError("[DELTA_MERGE_MISSING_WHEN] at least one WHEN clause"))


# --------------------------------------------------------------------------- chained continuous runs


def _cycles(stop_after: int, log: list[str], silver_script: list[Any] | None = None) -> tuple[list[tuple[str, list[StreamSpec]]], Any]:
    """Three stages of fake queries that drain at once (silver's as scripted); starting a
    bronze drain after `stop_after` of them sets `stop`. Each prepare is logged."""
    import threading

    stop = threading.Event()
    starts = {"n": 0}

    def count() -> None:
        starts["n"] += 1
        if starts["n"] > stop_after:
            stop.set()

    stages = [
        ("bronze", [fake_spec("bronze", [[True]] * 10, log, started=lambda _query_id: count(),
                              prepare=lambda: log.append("prepare bronze"))]),
        ("silver", [fake_spec("silver", [silver_script or [True]] * 10, log)]),
        ("gold", [fake_spec("gold_a", [[True]] * 10, log), fake_spec("gold_b", [[True]] * 10, log)]),
    ]
    return stages, stop


def test_a_chained_run_drains_the_stages_in_flow_order_cycle_after_cycle() -> None:
    from lakehouse.continuous import ContinuousReport, run_cycles

    class Recorder:
        """MetricsRecorder's part the runner calls: which stream lists it still reads."""

        def __init__(self) -> None:
            self.watched: list[Any] = []
            self.most = 0

        def watch(self, streams: Any) -> None:
            self.watched.append(streams)
            self.most = max(self.most, len(self.watched))

        def forget(self, streams: Any) -> None:
            self.watched.remove(streams)

        def collect(self) -> int:
            return 0

    log: list[str] = []
    stages, stop = _cycles(2, log)
    report, recorder, said = ContinuousReport(None, None, None, schedule="chained"), Recorder(), []
    run_cycles(stages, 0.0, "1 second", report, timeout_s=None, say=said.append, policy=CONTINUOUS_POLICY,
               stop=stop, metrics=recorder)
    assert re.fullmatch(r"continuous cycle 1: bronze [\d.]+s, silver [\d.]+s, gold [\d.]+s", said[0]), said
    builds = [line.split()[1] for line in log if line.startswith("build")]
    assert builds == ["bronze", "silver", "gold_a", "gold_b"] * 2 + ["bronze"]  # stopped in the third cycle's first drain
    assert log.count("prepare bronze") == 1  # tables are prepared once per process, not once a cycle
    assert report.cycles == 3 and report.restarts == {}
    assert [(cycle, stage, queries) for cycle, stage, _, _, queries in report.drains] == [
        (1, "bronze", 1), (1, "silver", 1), (1, "gold", 2), (2, "bronze", 1), (2, "silver", 1), (2, "gold", 2), (3, "bronze", 1)]
    assert recorder.most == 1 and recorder.watched == []  # each drain's queries are read while they run, then let go


def test_a_chained_run_stops_a_drain_between_batches_and_starts_no_later_stage() -> None:
    import threading

    from lakehouse.continuous import ContinuousReport, run_cycles

    log: list[str] = []
    stages, stop = _cycles(5, log, silver_script=[False] * 1000)  # silver's drain never ends by itself
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    run_cycles(stages, 0.0, "1 second", ContinuousReport(None, None, None), timeout_s=None, say=lambda _m: None,
               policy=CONTINUOUS_POLICY, stop=stop, metrics=None)
    assert time.monotonic() - started < 5
    assert "stop silver" in log and not any("gold" in line for line in log)


def test_a_chained_run_ends_at_its_timeout_and_waits_out_its_period() -> None:
    from lakehouse.continuous import ContinuousReport, run_cycles

    log: list[str] = []
    stages, _ = _cycles(1000, log)
    report = ContinuousReport(None, None, None)
    started = time.monotonic()
    run_cycles(stages, 0.4, "1 second", report, timeout_s=1.0, say=lambda _m: None, policy=CONTINUOUS_POLICY,
               stop=None, metrics=None)
    assert 0.9 < time.monotonic() - started < 5
    assert 2 <= report.cycles <= 3  # a cycle begins at most every 0.4 s


def _reading_spec(name: str, rows: list[int], log: list[str], stop_at_last: Any = None, **tables: Any) -> StreamSpec:
    """A spec whose n-th drain's query reports `rows[n]` input rows; its last build sets
    `stop_at_last` (a threading.Event) when given. `tables`: its `reads` / `writes`."""
    reads = iter(rows)
    builds = {"n": 0}

    def build() -> FakeWriter:
        log.append(f"build {name}")
        builds["n"] += 1
        if stop_at_last is not None and builds["n"] == len(rows):
            stop_at_last.set()
        read = next(reads)

        def query() -> FakeQuery:
            fake = FakeQuery([True], name, log)
            fake.recentProgress = [SimpleNamespace(numInputRows=read)]  # type: ignore[attr-defined]
            return fake

        return FakeWriter(query)

    return StreamSpec(name=name, query_name=f"q_{name}", checkpoint=Path("/cp") / name, build=build, **tables)


def test_a_chained_run_skips_the_stages_whose_upstream_read_nothing() -> None:
    """Bronze reads rows in the first and third cycles only: silver and gold drain in those
    (the first because nothing is known of what the lake held before the run), not in the second."""
    import threading
    from lakehouse.continuous import ContinuousReport, run_cycles

    log: list[str] = []
    stop = threading.Event()
    stages = [
        ("bronze", [_reading_spec("bronze", [5, 0, 7, 0], log, stop)]),  # the last cycle's bronze drain is the last drain
        ("silver", [_reading_spec("silver", [5, 7, 0], log)]),
        ("gold", [_reading_spec("gold", [3, 4], log)]),
    ]
    said: list[str] = []
    run_cycles(stages, 0.0, "1 second", ContinuousReport(None, None, None), timeout_s=None, say=said.append,
               policy=CONTINUOUS_POLICY, stop=stop, metrics=None)
    builds = [line.split()[1] for line in log if line.startswith("build")]
    assert builds == ["bronze", "silver", "gold", "bronze", "bronze", "silver", "gold", "bronze"]
    assert said[1].endswith("silver skipped, gold skipped"), said


def test_a_chained_run_drains_only_the_queries_downstream_of_what_changed() -> None:
    """Two sources: in the second cycle only the first one's topic had records, so only its
    silver query drains, and the view that reads only the second source's silver table does not."""
    import threading
    from lakehouse.continuous import ContinuousReport, run_cycles

    log: list[str] = []
    stop = threading.Event()
    stages = [
        ("bronze", [_reading_spec("bronze_a", [5, 3, 0, 0], log, stop, reads=(), writes=("b.a",)),
                    _reading_spec("bronze_b", [5, 0, 0, 0], log, reads=(), writes=("b.b",))]),
        ("silver", [_reading_spec("silver_a", [5, 3], log, reads=("b.a",), writes=("s.a", "s.a_history")),
                    _reading_spec("silver_b", [5], log, reads=("b.b",), writes=("s.b",))]),
        ("gold", [_reading_spec("gold_b", [4], log, reads=("s.b",), writes=()),
                  _reading_spec("gold_ab", [4, 3], log, reads=("s.a", "s.b"), writes=())]),
    ]
    said: list[str] = []
    run_cycles(stages, 0.0, "1 second", ContinuousReport(None, None, None), timeout_s=None, say=said.append,
               policy=CONTINUOUS_POLICY, stop=stop, metrics=None)
    builds = [line.split()[1] for line in log if line.startswith("build")]
    assert builds == [
        "bronze_a", "bronze_b", "silver_a", "silver_b", "gold_b", "gold_ab",  # the first cycle drains everything
        "bronze_a", "bronze_b", "silver_a", "gold_ab",
        "bronze_a", "bronze_b",  # nothing read: no silver or gold query starts
        "bronze_a", "bronze_b",  # stopped while draining
    ]
    assert re.fullmatch(r"continuous cycle 2: bronze [\d.]+s, silver [\d.]+s \(1 of 2\), gold [\d.]+s \(1 of 2\)", said[1]), said
    assert said[2].endswith("silver skipped, gold skipped"), said


def _named(name: str, reads: tuple[str, ...] | None, writes: tuple[str, ...] | None = ()) -> StreamSpec:
    return StreamSpec(name=name, query_name=name, checkpoint=Path("/cp") / name, build=lambda: None, reads=reads, writes=writes)


def test_a_query_drains_when_a_table_it_reads_was_written_or_it_cannot_be_told() -> None:
    from lakehouse.continuous import EVERYTHING, to_drain

    specs = [_named("reads_a", ("a",)), _named("reads_b", ("b",)), _named("undeclared", None)]
    drained = {spec.query_name: 100.0 for spec in specs}

    def chosen(written: set[str] | None, last: dict[str, float] = drained, now: float = 110.0) -> list[str]:
        return [spec.name for spec in to_drain(specs, written, last, now, full_every_s=60.0)]

    assert chosen({"a"}) == ["reads_a", "undeclared"]  # a query without declared reads drains when anything was written
    assert chosen(set()) == []
    assert chosen(EVERYTHING) == ["reads_a", "reads_b", "undeclared"]
    assert chosen(set(), last={"reads_b": 100.0, "undeclared": 100.0}) == ["reads_a"]  # not drained yet in this run
    assert chosen(set(), last={**drained, "reads_b": 50.0}) == ["reads_b"]  # a minute since its last drain


def test_a_drain_wrote_the_tables_of_the_queries_that_read_rows() -> None:
    from lakehouse.continuous import EVERYTHING, written_tables

    def stream(rows: int | None, writes: tuple[str, ...] | None) -> Any:
        return SimpleNamespace(rows_read=lambda: rows, spec=_named("q", (), writes))

    assert written_tables([stream(3, ("a", "a_history")), stream(0, ("b",))]) == {"a", "a_history"}
    assert written_tables([stream(0, ("a",)), stream(0, None)]) == set()
    assert written_tables([stream(None, ("a",))]) == {"a"}  # could not tell: assume it read
    assert written_tables([stream(2, None)]) is EVERYTHING


def test_a_stream_counts_the_rows_its_queries_read_and_says_none_when_it_cannot_tell() -> None:
    from lakehouse.streaming import Stream

    class Unreadable:
        @property
        def recentProgress(self) -> list[Any]:  # noqa: N802 - Spark's name
            raise RuntimeError("the Connect session went away")

    stream = Stream(_named("q", ()), "available_now", "1 second")
    stream.replaced = [SimpleNamespace(recentProgress=[SimpleNamespace(numInputRows=2), SimpleNamespace(numInputRows=0)])]
    stream.query = SimpleNamespace(recentProgress=[SimpleNamespace(numInputRows=3)])
    assert stream.rows_read() == 5  # a restart's replaced query counts too
    stream.query = SimpleNamespace(recentProgress=[])
    assert stream.rows_read() == 2
    stream.query = Unreadable()
    assert stream.rows_read() is None
    stream.query = SimpleNamespace()  # no progress list at all (a fake)
    assert stream.rows_read() is None


def test_python_garbage_holding_jvm_objects_is_released_at_most_every_interval():
    """A py4j proxy in a reference cycle pins its JVM object until a full collection: runs of
    queries collect one at most every `every_s` (a continuous run's driver filled without)."""
    import gc
    import weakref

    from lakehouse.streaming import GarbageRelease

    class Proxy:
        pass

    def cycle() -> weakref.ref:
        proxy = Proxy()
        proxy.itself = proxy
        return weakref.ref(proxy)

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        pinned = cycle()
        GarbageRelease(every_s=3600)()  # the interval has not passed: nothing collected
        assert pinned() is not None
        GarbageRelease(every_s=0)()
        assert pinned() is None
    finally:
        if was_enabled:
            gc.enable()
