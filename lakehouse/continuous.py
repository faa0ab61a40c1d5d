"""Every stage at once, in one Spark application: bronze from Kafka, silver from bronze, gold from
silver's change feeds, each query on its own processing-time interval (`options.intervals`).

The drain-and-stop stages (`run_bronze`, `run_silver`, `run_gold` with `available_now`) suit a
scheduled job; this is the long-running job beside it. Nothing here is new semantics: each
query is the same StreamSpec its stage runs alone (same checkpoints, same exactly-once writes),
so a continuous run and scheduled drains can take turns on the same lake. What it adds is the
lifecycle: a failed query is started again (`CONTINUOUS_POLICY`: any failure but the project's
own errors, with backoff), and a stop request (SIGTERM, Ctrl-C, `stop.set()`) stops every query
between micro-batches, so nothing is lost and nothing is written twice.

Two schedules (`options.continuous`):
- `chained` (the default): cycles of drains in flow order (every bronze query drains what Kafka
  holds, then every silver query, then every gold query), a cycle starting at most every bronze
  interval. A change that arrives during a cycle reaches gold at the end of the next one: its
  latency is one to two cycles, and a cycle costs what each stage's batches cost together.
  After bronze, a query drains only when a table it reads was written earlier in the cycle
  (each still drains at least every five minutes), so an idle run costs bronze's drain alone.
- `concurrent`: every query runs at once, each on its interval. The stages overlap, but on a
  small machine each batch waits for every other query's, bronze's cheap queries batch far more
  often than silver's (each batch paying its fixed cost), and a change waits for a batch of each
  stage in turn: its latency is several batch times of the busiest stage. At 500 changes/s on
  2 cores it spent 3.2x the chained schedule's batch time and its p50 freshness was 2x
  (docs/performance.md, "Continuous runs").
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from pyspark.sql import SparkSession

from lakehouse.declaration import Pipeline
from lakehouse.metrics import CONTINUOUS_FLUSH_S, MetricsRecorder, recording_metrics
from lakehouse.streaming import AVAILABLE_NOW, CONTINUOUS_POLICY, PROCESSING_TIME, RestartPolicy, Say, Stream, StreamSpec, run_streams


DRAINS_KEPT = 1000  # a continuous run's report keeps its latest drains: a long run's would grow without end


@dataclass
class ContinuousReport:
    """What a continuous run did: each stage's report, the queries' restarts, the wall time."""

    bronze: Any
    silver: Any
    gold: Any
    seconds: float = 0.0
    restarts: dict[str, int] = field(default_factory=dict)  # query name -> restarts (only those with any)
    schedule: str = "concurrent"
    cycles: int = 0  # chained: cycles begun
    # chained: each stage's drain of the latest cycles (cycle, stage, began, ended wall-clock, queries started)
    drains: list[tuple[int, str, float, float, int]] = field(default_factory=list)

    def record_drain(self, stage: str, began: float, ended: float, queries: int) -> None:
        """One stage's drain in the current cycle (the latest DRAINS_KEPT are kept)."""
        self.drains = [*self.drains[-(DRAINS_KEPT - 1):], (self.cycles, stage, began, ended, queries)]

    def count_restarts(self, streams: Sequence[Stream]) -> None:
        """Add the restarts of `streams` (one run of queries; a chained run has one per drain)."""
        for stream in streams:
            if stream.total_restarts:
                self.restarts[stream.spec.query_name] = self.restarts.get(stream.spec.query_name, 0) + stream.total_restarts

    def render(self) -> str:
        lines = [f"continuous run ({self.schedule}{f', {self.cycles} cycle(s)' if self.schedule == 'chained' else ''}): {self.seconds:.1f}s"]
        lines += [self.bronze.render(), self.silver.render(), self.gold.render()]
        if self.restarts:
            lines.append("restarts: " + ", ".join(f"{name} {n}" for name, n in sorted(self.restarts.items())))
        return "\n".join(lines)


def run_continuous(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    bootstrap: str,
    *,
    progress: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
    timeout_s: float | None = None,
    policy: RestartPolicy = CONTINUOUS_POLICY,
    parser: str = "hybrid",
) -> ContinuousReport:
    """Run every stage's queries, on the pipeline's schedule (`options.continuous`), until `stop`
    is set or `timeout_s` passes (None: until stopped), then stop them between batches and
    return what they did.

    Queries start in flow order (bronze, silver, gold), each creating its tables just before it
    starts, so a fresh lake works: silver's queries find bronze's tables, gold's find silver's.
    A query that keeps failing (more than the policy's restarts in a row) stops the run with
    its StreamError; rerunning resumes every query from its checkpoint.
    """
    from lakehouse.bronze import bronze_streams
    from lakehouse.gold import gold_streams
    from lakehouse.silver import silver_streams

    bronze_specs, bronze_report, say = bronze_streams(
        spark, pipeline, lake, bootstrap, progress=progress, parser=parser, trigger=PROCESSING_TIME
    )
    silver_specs, silver_report = silver_streams(spark, pipeline, lake, progress=progress)
    gold_specs, gold_report = gold_streams(spark, pipeline, lake, progress=progress, wait_for_silver=True)
    options = pipeline.options
    report = ContinuousReport(bronze_report, silver_report, gold_report, schedule=options.continuous)
    how = (
        f"chained cycles (drains in flow order, at most one cycle every {options.interval('bronze')})"
        if options.continuous == "chained" else
        f"intervals bronze {options.interval('bronze')}, silver {options.interval('silver')}, gold {options.interval('gold')}"
    )
    say(
        f"continuous {pipeline.name}: {len(bronze_specs)} bronze, {len(silver_specs)} silver, {len(gold_specs)} gold "
        f"queries; {how}; "
        + (f"stopping after {timeout_s:.0f}s" if timeout_s is not None else "until stopped (SIGTERM or Ctrl-C)")
    )
    started = time.monotonic()
    try:
        with recording_metrics(spark, pipeline, CONTINUOUS_FLUSH_S) as metrics:
            if options.continuous == "chained":
                run_cycles(
                    [("bronze", bronze_specs), ("silver", silver_specs), ("gold", gold_specs)],
                    options.interval_seconds("bronze"), options.processing_time,
                    report, timeout_s=timeout_s, say=say, policy=policy, stop=stop, metrics=metrics,
                )
            else:
                report.count_restarts(run_streams(
                    [*bronze_specs, *silver_specs, *gold_specs], PROCESSING_TIME, options.processing_time,
                    timeout_s=timeout_s, say=say, policy=policy, stop=stop, metrics=metrics,
                ))
    finally:
        report.seconds = bronze_report.seconds = time.monotonic() - started
    say(f"continuous {pipeline.name}: stopped cleanly after {report.seconds:.1f}s")
    return report


FULL_CYCLE_EVERY_S = 300.0  # a query drains at least this often, even when nothing it reads was written (an idle
# drain of every query costs ~5-12 s on two cores: once in five minutes, not every minute)
EVERYTHING = None  # what `written_tables` returns when it cannot tell which tables a drain wrote


def run_cycles(
    stages: Sequence[tuple[str, Sequence[StreamSpec]]],
    period_s: float,
    processing_time: str,
    report: ContinuousReport,
    *,
    timeout_s: float | None,
    say: Say,
    policy: RestartPolicy,
    stop: threading.Event | None,
    metrics: MetricsRecorder | None,
    full_every_s: float = FULL_CYCLE_EVERY_S,
) -> None:
    """The chained schedule: each stage's queries (`stages`: name and specs, in flow order) drain
    together (available_now), stage after stage, cycle after cycle, a cycle starting at most every
    `period_s`, until `stop` is set or `timeout_s` passes (which sets `stop`). A stop during a
    drain stops its queries between micro-batches; the next run resumes from the checkpoints.

    After the first stage (which reads from outside the lake), a query drains only when a table it
    reads was written earlier in the cycle (`to_drain`): an idle run pays for bronze's drain
    alone, and a change to one table for the queries downstream of it. Cycles and restarts go to
    `report`."""
    stop = stop if stop is not None else threading.Event()
    stages = [(stage, prepared_once(specs)) for stage, specs in stages]
    timer: threading.Timer | None = None
    if timeout_s is not None:
        timer = threading.Timer(timeout_s, stop.set)  # a drain in progress is cut between batches too
        timer.daemon = True
        timer.start()
    last_drained: dict[str, float] = {}
    try:
        while not stop.is_set():
            began = time.monotonic()
            report.cycles += 1
            drains = []
            written: set[str] | None = EVERYTHING  # the first stage reads from outside: always drained
            for stage, specs in stages:
                if stop.is_set() or not specs:
                    continue
                now, wall = time.monotonic(), time.time()
                chosen = to_drain(specs, written, last_drained, now, full_every_s)
                if not chosen:
                    drains.append(f"{stage} skipped")
                    written = set()
                    continue
                streams = run_streams(chosen, AVAILABLE_NOW, processing_time, say=say, policy=policy, stop=stop, metrics=metrics)
                report.count_restarts(streams)
                report.record_drain(stage, wall, time.time(), len(chosen) + sum(s.total_restarts for s in streams))
                last_drained.update((spec.query_name, now) for spec in chosen)
                written = written_tables(streams)
                share = "" if len(chosen) == len(specs) else f" ({len(chosen)} of {len(specs)})"
                drains.append(f"{stage} {time.monotonic() - now:.1f}s{share}")
            say(f"continuous cycle {report.cycles}: {', '.join(drains)}")
            stop.wait(max(0.0, period_s - (time.monotonic() - began)))
    finally:
        if timer is not None:
            timer.cancel()


class _Once:
    """A `StreamSpec.prepare` that runs until it has succeeded once, then does nothing."""

    def __init__(self, prepare: Callable[[], None]) -> None:
        self.prepare, self.done = prepare, False

    def __call__(self) -> None:
        if not self.done:
            self.prepare()
            self.done = True


def prepared_once(specs: Sequence[StreamSpec]) -> list[StreamSpec]:
    """`specs` whose `prepare` (tables, checks, comments, views) runs in the first drain only: a
    chained run starts its queries again every cycle, but its process, and with it what the
    tables look like, stays. A declaration that changes needs a new process anyway.

    >>> calls = []
    >>> spec = StreamSpec("s", "q", Path("/tmp/c"), build=lambda: None, prepare=lambda: calls.append(1))
    >>> once = prepared_once([spec])[0]
    >>> once.prepare(); once.prepare(); calls
    [1]
    """
    return [replace(spec, prepare=_Once(spec.prepare)) for spec in specs]


def to_drain(
    specs: Sequence[StreamSpec], written: set[str] | None, last_drained: dict[str, float], now: float, full_every_s: float
) -> list[StreamSpec]:
    """The queries of a stage that drain this cycle: those reading a table the cycle's earlier
    drains wrote (`written`; EVERYTHING when not known), or whose reads are not declared, or
    that have not drained in this run yet (what the lake held before it), or whose last drain
    is `full_every_s` old (a safety net: a skip can only delay a change, never lose it)."""
    def needed(spec: StreamSpec) -> bool:
        last = last_drained.get(spec.query_name)
        if written is EVERYTHING or last is None or now - last >= full_every_s:
            return True
        return bool(written) if spec.reads is None else bool(written.intersection(spec.reads))

    return [spec for spec in specs if needed(spec)]


def written_tables(streams: Sequence[Stream]) -> set[str] | None:
    """The tables a drain may have written: those of every query that read rows; EVERYTHING when
    a query that read (or cannot tell whether it read) rows does not declare what it writes."""
    written: set[str] = set()
    for stream in streams:
        rows = stream.rows_read()
        if rows == 0:
            continue
        if stream.spec.writes is None:
            return EVERYTHING
        written.update(stream.spec.writes)
    return written
