"""Every stage at once, in one Spark application: bronze from Kafka, silver from bronze, gold from
silver's change feeds, each query on its own processing-time interval (`options.intervals`).

The drain-and-stop stages (`run_bronze`, `run_silver`, `run_gold` with `available_now`) suit a
scheduled job; this is the long-running job beside it. Nothing here is new semantics: each
query is the same StreamSpec its stage runs alone (same checkpoints, same exactly-once writes),
so a continuous run and scheduled drains can take turns on the same lake. What it adds is the
lifecycle: a failed query is started again (`CONTINUOUS_POLICY`: any failure but the project's
own errors, with backoff), and a stop request (SIGTERM, Ctrl-C, `stop.set()`) stops every query
between micro-batches, so nothing is lost and nothing is written twice.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import SparkSession

from lakehouse.declaration import Pipeline
from lakehouse.metrics import recording_metrics
from lakehouse.streaming import CONTINUOUS_POLICY, PROCESSING_TIME, RestartPolicy, run_streams


@dataclass
class ContinuousReport:
    """What a continuous run did: each stage's report, the queries' restarts, the wall time."""

    bronze: Any
    silver: Any
    gold: Any
    seconds: float = 0.0
    restarts: dict[str, int] = field(default_factory=dict)  # query name -> restarts (only those with any)

    def render(self) -> str:
        lines = [f"continuous run: {self.seconds:.1f}s"]
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
    """Run every stage's queries together until `stop` is set or `timeout_s` passes (None: until
    stopped), then stop them between batches and return what they did.

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
    report = ContinuousReport(bronze_report, silver_report, gold_report)
    say(
        f"continuous {pipeline.name}: {len(bronze_specs)} bronze, {len(silver_specs)} silver, {len(gold_specs)} gold "
        f"queries; intervals bronze {pipeline.options.interval('bronze')}, silver {pipeline.options.interval('silver')}, "
        f"gold {pipeline.options.interval('gold')}; "
        + (f"stopping after {timeout_s:.0f}s" if timeout_s is not None else "until stopped (SIGTERM or Ctrl-C)")
    )
    started = time.monotonic()
    try:
        with recording_metrics(spark, pipeline) as metrics:
            streams = run_streams(
                [*bronze_specs, *silver_specs, *gold_specs], PROCESSING_TIME, pipeline.options.processing_time,
                timeout_s=timeout_s, say=say, policy=policy, stop=stop, metrics=metrics,
            )
    finally:
        report.seconds = bronze_report.seconds = time.monotonic() - started
    report.restarts = {s.spec.query_name: s.total_restarts for s in streams if s.total_restarts}
    say(f"continuous {pipeline.name}: stopped cleanly after {report.seconds:.1f}s")
    return report
