"""Benchmark: how stale is gold? Changes at a steady rate into a continuous run, per change the
time from its source commit to the gold commit that shows it.

For each rate: an isolated pipeline (own topics, schemas, checkpoints), the simulator's initial
snapshot produced and taken in by a continuous run (`lakehouse.continuous`, untimed), then the
simulator's change records produced at `rate` records per second for `duration_s`, each
stamped with its send time (the moment the change "commits": the local stand-in for Debezium's
`source.ts_ms`, so the connector's own capture delay is not included). When the producer stops,
the run gets `drain_s` to catch up, then stops.

Matching, after the run (so the measuring adds no load to it): every gold row a commit writes
carries, per alias, the silver `_sequence` of the version it was built from (`_<alias>_seq`);
a change record's sequence is computed from its Debezium source fields by the ordering rule
(`lakehouse.ordering`). A change is *visible* at the commit timestamp of the first gold version
whose change feed carries its sequence: Delta's own commit times, what a poller of
`DESCRIBE HISTORY` would see. Changes never seen in gold are counted, not timed: a delete (no
gold row carries it), a change a later one overtook before gold ran, a change of columns no
view reads (gold is not rewritten for it), a parent with no children.

Lag is *bounded* at a rate when the p95 of the changes sent in the run's last third is at most
1.5x the p95 of its first third plus 10 s, the share of the last third's changes seen in gold
by the end of the drain is at least 90 % of the first third's, and gold's last sighting came
before 80 % of the drain had passed (`catch_up_s`: the producer's last send -> the last gold
commit carrying a sent change): a growing backlog shows as rising latency, as changes still
unseen when the run stops, or as a catch-up that fills the whole drain.

With `postgres_stack` (`--with-postgres`) the changes come from a real PostgreSQL through Debezium's connector
(`testkit.pg_workload` at `rate` transactions per second, the local stack's cluster and Kafka
Connect): each change is timed from its transaction's commit (`source.ts_ms`, as bronze stores
it in `_source_ts_ms`; PostgreSQL and the bench share this machine's clock), so the connector's
capture delay is included, which the simulator's send time leaves out.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Sequence

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import CONTINUOUS_SCHEDULES, Pipeline
from lakehouse.errors import CdcEnrichError, PipelineConfigError
from lakehouse.gold import view_plan
from lakehouse.ordering import rule
from lakehouse.paths import checkpoint_dir
from lakehouse.spark import ensure_schemas
from lakehouse.tables import bronze_table, gold_table
from testkit.bench import markdown_table
from testkit.bench.ingest import _clean, isolated_pipeline
from testkit.bench.phases import phase_resources

RATES = (100, 500, 2000)
INTERVALS = {"bronze": "1 second", "silver": "1 second", "gold": "1 second"}


def record_sequence(pipeline: Pipeline, topic: str, value: bytes | None, partition: int, offset: int = 0) -> tuple[str, Decimal] | None:
    """(source name, silver `_sequence`) of one Debezium change record; None for a tombstone,
    a snapshot read or a record whose source fields give no sequence."""
    payload = _payload(value)
    op = payload.get("op")
    if op not in ("c", "u", "d"):
        return None
    source = pipeline.source_for_topic(topic)
    ordering = rule(source.sequence)
    fields = payload.get("source") or {}
    try:
        return source.name, ordering.python(fields, op, partition, offset)
    except (KeyError, TypeError, ValueError):
        return None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0..1) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def latency_summary(
    sent: dict[tuple[str, Decimal], float], seen: dict[tuple[str, Decimal], float], drain_s: float | None = None
) -> dict[str, Any]:
    """Per-change latency statistics: p50/p95/p99 over the changes seen in gold, the same per
    third of the sending period (by send time), the catch-up after the last send, and whether
    the lag stayed bounded (`drain_s`: how long the run went on after the last send)."""
    latencies = [(t, seen[k] - t) for k, t in sent.items() if k in seen]
    if not latencies:
        return {"changes_sent": len(sent), "changes_seen": 0, "bounded": False}
    start, end = min(sent.values()), max(sent.values())
    third = (end - start) / 3 or 1.0

    def part(t: float) -> int:
        return min(2, int((t - start) / third))

    thirds: list[list[float]] = [[], [], []]
    sent_per_third = [0, 0, 0]
    for t in sent.values():
        sent_per_third[part(t)] += 1
    for t, lat in latencies:
        thirds[part(t)].append(lat)
    seen_share = [len(thirds[i]) / sent_per_third[i] if sent_per_third[i] else 0.0 for i in range(3)]
    p95_first, p95_last = percentile(thirds[0], 0.95), percentile(thirds[2], 0.95)
    values = [lat for _, lat in latencies]
    catch_up = max(seen[k] for k in sent if k in seen) - end
    bounded = (
        p95_first is not None and p95_last is not None and p95_last <= 1.5 * p95_first + 10
        and seen_share[2] >= 0.9 * seen_share[0]
        and (drain_s is None or catch_up <= 0.8 * drain_s)
    )
    return {
        "changes_sent": len(sent),
        "changes_seen": len(latencies),
        "p50_s": round(percentile(values, 0.5), 2),
        "p95_s": round(percentile(values, 0.95), 2),
        "p99_s": round(percentile(values, 0.99), 2),
        "max_s": round(max(values), 2),
        "p95_by_third_s": [round(p, 2) if p is not None else None for p in (percentile(t, 0.95) for t in thirds)],
        "seen_share_by_third": [round(x, 3) for x in seen_share],
        "catch_up_s": round(catch_up, 1),
        "bounded": bounded,
    }


def _gold_sightings(spark: SparkSession, pipeline: Pipeline) -> dict[tuple[str, Decimal], float]:
    """(source, sequence) -> epoch seconds of the first gold commit carrying it, over every view
    whose rows carry their sources' sequences (a windowed view's rows name their events by key,
    `_pair`, and are not matched)."""
    seen: dict[tuple[str, Decimal], float] = {}
    for name in pipeline.views:
        plan = view_plan(pipeline, name)
        feed = (
            spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
            .table(gold_table(pipeline, name))
            .where(F.col("_change_type").isin("insert", "update_postimage"))
        )
        for alias in (a for a in plan.aliases if a.gold_seq in feed.columns):
            rows = (
                feed.where(F.col(alias.gold_seq).isNotNull())
                .groupBy(F.col(alias.gold_seq).alias("seq"))
                .agg((F.min(F.unix_micros("_commit_timestamp")) / 1e6).alias("at"))
                .collect()
            )
            for row in rows:
                key = (alias.source.name, Decimal(row["seq"]))
                seen[key] = min(seen.get(key, row["at"]), row["at"])
    return seen


def _wait_for_gold(spark: SparkSession, pipeline: Pipeline, timeout_s: float) -> bool:
    """Wait until every view's gold table holds rows (the snapshot went through)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if all(spark.table(gold_table(pipeline, v)).limit(1).count() for v in pipeline.views):
                return True
        except Exception:  # noqa: BLE001 - the tables may not exist yet
            pass
        time.sleep(2)
    return False


class _SimulatorFeed:
    """The simulator's records produced to Kafka: the snapshot untimed, then the changes at a
    steady rate, each timed from its send."""

    unit = "records"

    def __init__(self, bench: Pipeline, bootstrap: str, seed: int) -> None:
        self.bench, self.bootstrap, self.seed = bench, bootstrap, seed
        self.snapshot: list[Any] = []
        self.changes: list[Any] = []
        self.sent_times: list[float] = []

    def prepare(self, rate: float, duration_s: float) -> str:
        from testkit.simulator import simulate
        from testkit.simulator.produce import produce

        events = int(rate * duration_s)
        for record in simulate(self.bench, seed=self.seed, events=events).records:
            (self.snapshot if _payload(record.value).get("op") == "r" else self.changes).append(record)
        self.changes = self.changes[:events]
        produce(self.snapshot, self.bootstrap)
        return f"snapshot of {len(self.snapshot)} records"

    def send(self, rate: float, duration_s: float) -> str:
        from testkit.simulator.produce import produce

        produce(self.changes, self.bootstrap, rate=rate, sent=self.sent_times)
        return f"{len(self.changes)} records sent"

    def sent(self, spark: SparkSession) -> dict[tuple[str, Decimal], float]:
        sent: dict[tuple[str, Decimal], float] = {}
        for record, at in zip(self.changes, self.sent_times):
            found = record_sequence(self.bench, record.topic, record.value, record.partition)
            if found is not None:
                sent.setdefault(found, at)
        return sent

    def records(self) -> int:
        return len(self.changes)

    def close(self) -> None:
        pass


class _PostgresFeed:
    """A real PostgreSQL (the lake's local cluster, a database per bench pipeline) captured by
    Debezium's connector: the seeded rows are the untimed snapshot, then `testkit.pg_workload`
    runs at `rate` transactions per second; each change is timed from its commit time
    (`_source_ts_ms` in bronze, read after the run so that measuring adds no load)."""

    unit = "transactions"

    def __init__(self, lake: Path, bench: Pipeline, bootstrap: str, seed: int) -> None:
        self.lake, self.bench, self.bootstrap, self.seed = lake, bench, bootstrap, seed
        self.dsn = ""
        self.owns_connect = False  # set once no other connector was found running: close() stops only its own
        self.started_ms = 0
        self.operations = 0

    def prepare(self, rate: float, duration_s: float) -> str:
        from devstack import connect
        from testkit import pg_workload

        running = connect.connect_status(self.lake)
        if running.running:
            raise CdcEnrichError(
                f"the local stack's Kafka Connect already runs {running.connector}; the freshness bench runs its own "
                "connector per rate: stop the stack (`cdc-enrich stack down --with-postgres`), start the broker alone "
                "(`cdc-enrich stack up`) and run the bench again (it starts PostgreSQL itself)"
            )
        self.owns_connect = True
        captured = pg_workload.capture_seeded_database(self.lake, self.bench, self.bootstrap, self.seed)
        self.dsn = captured.dsn
        return f"PostgreSQL seeded ({captured.seeded.transactions} transactions) and captured by Debezium's connector"

    def send(self, rate: float, duration_s: float) -> str:
        from testkit import pg_workload

        self.started_ms = int(time.time() * 1000)
        stats = pg_workload.run_workload(self.dsn, self.bench, int(rate * duration_s), seed=self.seed + 1, rate=rate)
        self.operations = sum(n for ops in stats.operations.values() for n in ops.values())
        return f"{stats.transactions} transactions committed ({stats.aborted} aborted, {self.operations} operations) in {stats.elapsed_s:.0f}s"

    def sent(self, spark: SparkSession) -> dict[tuple[str, Decimal], float]:
        sent: dict[tuple[str, Decimal], float] = {}
        for source in self.bench.sources.values():
            rows = (
                spark.table(bronze_table(self.bench, source))
                .where(F.col("_op").isin("c", "u", "d") & (F.col("_source_ts_ms") >= self.started_ms) & F.col("_sequence").isNotNull())
                .groupBy("_sequence").agg(F.min("_source_ts_ms").alias("ts"))
                .collect()
            )
            for row in rows:
                sent[(source.name, Decimal(row["_sequence"]))] = row["ts"] / 1000
        return sent

    def records(self) -> int:
        return self.operations

    def close(self) -> None:
        """Stop the connector, drop its slot (a forgotten one keeps WAL forever) and the bench's database."""
        import psycopg
        from psycopg import sql

        from devstack import connect, postgres

        if not self.owns_connect:
            return
        connect.connect_down(self.lake)
        if not self.dsn:
            return
        connect.drop_replication(self.dsn, self.bench)
        with psycopg.connect(postgres.dsn(self.lake, superuser=True), autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.bench.name)))


def bench_freshness(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path,
    bootstrap: str,
    rates: Sequence[float] = RATES,
    *,
    duration_s: float = 180,
    drain_s: float = 90,
    seed: int = 11,
    intervals: dict[str, str] | None = None,
    keep: bool = False,
    postgres_stack: Path | None = None,
    progress: Callable[[str], None] | None = None,
    schedules: Sequence[str] | None = None,
) -> dict[str, Any]:
    """For each rate, and each continuous schedule (`options.continuous`; default: the
    pipeline's), a fresh continuous run fed at that rate; per-change latency to gold.
    `postgres_stack`: the lake of the local stack whose PostgreSQL and Kafka Connect feed the
    run instead of the simulator (`rate` in transactions per second; started when not running)."""
    from lakehouse.continuous import run_continuous

    unknown = [s for s in schedules or () if s not in CONTINUOUS_SCHEDULES]
    if unknown:
        raise PipelineConfigError(f"bench freshness: unknown schedule(s) {', '.join(unknown)}; expected {', '.join(CONTINUOUS_SCHEDULES)}")
    say = progress or (lambda _m: None)
    results = []
    for rate, schedule in [(r, s) for r in rates for s in (schedules or (pipeline.options.continuous,))]:
        tag = "fresh" + uuid.uuid4().hex[:8]
        bench = isolated_pipeline(pipeline, tag)
        bench = bench.with_options(intervals={**INTERVALS, **(intervals or {})}, continuous=schedule)
        feed: _SimulatorFeed | _PostgresFeed = (
            _PostgresFeed(Path(postgres_stack), bench, bootstrap, seed) if postgres_stack else _SimulatorFeed(bench, bootstrap, seed)
        )
        ensure_schemas(spark, bench)
        checkpoints = checkpoint_dir(Path(lake), bench.name, "")
        stop = threading.Event()
        failure: list[BaseException] = []
        reports: list[Any] = []

        def run() -> None:
            try:
                reports.append(run_continuous(spark, bench, Path(lake), bootstrap, stop=stop))
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                failure.append(exc)
                stop.set()

        try:
            prepared = feed.prepare(rate, duration_s)
            runner = threading.Thread(target=run, name=f"continuous-{tag}", daemon=True)
            runner.start()
            try:
                if not _wait_for_gold(spark, bench, 600) or failure:
                    raise RuntimeError(f"bench freshness: the snapshot never reached gold: {failure[:1]}")
                say(f"bench freshness {rate:g} {feed.unit}/s, {schedule}: {prepared}, in gold; sending for {duration_s:.0f}s")
                sending_began = time.time()
                sent_line = feed.send(rate, duration_s)
                sent_seconds = time.time() - sending_began
                say(f"bench freshness {rate:g} {feed.unit}/s: {sent_line}; draining up to {drain_s:.0f}s")
                stop.wait(drain_s)
            finally:
                stop.set()
                runner.join(timeout=300)
            if failure:
                raise failure[0]
            summary = latency_summary(feed.sent(spark), _gold_sightings(spark, bench), drain_s)
        finally:
            feed.close()
        summary.update(rate=rate, schedule=schedule, unit=feed.unit, duration_s=duration_s, records_sent=feed.records(),
                       sent_seconds=round(sent_seconds, 1))
        if reports:
            summary["cycles"] = cycle_counts(reports[0].drains, phase_resources(spark, drain_spans(reports[0].drains), complete_only=True))
        say(f"bench freshness {rate:g} {feed.unit}/s, {schedule}: {_line(summary)}")
        results.append(summary)
        if not keep:
            _clean(spark, bench, checkpoints, bootstrap)
    held = [r["rate"] for r in results if r.get("bounded")]
    return {"rates": results, "highest_bounded_rate": max(held) if held else None, "intervals": {**INTERVALS, **(intervals or {})},
            "source": "postgres" if postgres_stack else "simulator"}


def drain_spans(drains: Sequence[tuple[int, str, float, float, int]]) -> list[tuple[str, float, float]]:
    """A chained run's drains (`ContinuousReport.drains`) as spans named `<cycle>:<stage>`."""
    return [(f"{cycle}:{stage}", began, ended) for cycle, stage, began, ended, _ in drains]


def cycle_counts(drains: Sequence[tuple[int, str, float, float, int]], resources: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """What a chained run's busy cycles (those after the first in which gold drained: changes
    went through) cost: how many, their median seconds, and per stage the medians of its drains
    in them: seconds, queries started and (from `resources`, `phases.phase_resources` over
    `drain_spans`: the drains the UI still held) Spark jobs and SQL executions. `drains`: every
    drain of the stage after the first cycle, idle ones included.

    >>> drains = [(1, "bronze", 0.0, 9.0, 7), (2, "bronze", 10.0, 12.0, 7), (2, "gold", 12.0, 15.0, 4), (3, "bronze", 20.0, 21.0, 7)]
    >>> out = cycle_counts(drains, {"2:bronze": {"jobs": 8, "sql_executions": 20}, "3:bronze": {"jobs": 6, "sql_executions": 18}})
    >>> out["busy_cycles"], out["busy_cycle_s"], out["stages"]["bronze"]
    (1, 5.0, {'drains': 2, 'seconds': 2.0, 'queries_started': 7.0, 'jobs': 8.0, 'sql_executions': 20.0})
    >>> out["stages"]["gold"]["jobs"] is None  # the UI no longer held gold's drain
    True
    """
    first = min((cycle for cycle, *_ in drains), default=0)
    later = [d for d in drains if d[0] != first]
    busy = {cycle for cycle, stage, *_ in later if stage == "gold"}
    spans: dict[int, list[float]] = {}
    for cycle, _, began, ended, _ in later:
        if cycle in busy:
            spans.setdefault(cycle, []).extend((began, ended))
    stages: dict[str, Any] = {}
    for stage in dict.fromkeys(stage for _, stage, *_ in later):
        mine = [d for d in later if d[1] == stage and d[0] in busy]
        entry: dict[str, Any] = {
            "drains": sum(1 for d in later if d[1] == stage),
            "seconds": _median([ended - began for _, _, began, ended, _ in mine]),
            "queries_started": _median([started for *_, started in mine]),
        }
        if resources is not None:
            held = [resources[f"{cycle}:{stage}"] for cycle, *_ in mine if f"{cycle}:{stage}" in resources]
            for count in ("jobs", "sql_executions"):
                entry[count] = _median([r.get(count, 0) for r in held])
        stages[stage] = entry
    return {"busy_cycles": len(busy), "busy_cycle_s": _median([max(t) - min(t) for t in spans.values()]), "stages": stages}


def _median(values: Sequence[float]) -> float | None:
    """The median as a float (None for no values)."""
    return float(statistics.median(values)) if values else None


def _payload(value: bytes | None) -> dict[str, Any]:
    """A Debezium record's envelope (with or without the JSON converter's schema wrapper); {} for a tombstone."""
    if value is None:
        return {}
    payload = json.loads(value)
    return payload.get("payload", payload) if isinstance(payload, dict) else {}


def _line(summary: dict[str, Any]) -> str:
    if not summary.get("changes_seen"):
        return f"no change reached gold ({summary.get('changes_sent', 0)} sent)"
    return (
        f"{summary['changes_seen']} of {summary['changes_sent']} changes seen in gold; latency p50 {summary['p50_s']}s, "
        f"p95 {summary['p95_s']}s, p99 {summary['p99_s']}s (p95 by third {summary['p95_by_third_s']}, "
        f"catch-up {summary['catch_up_s']}s); "
        f"{'bounded' if summary['bounded'] else 'NOT bounded'}"
    )


def render_cycles(result: dict[str, Any]) -> str:
    """Per rate, schedule and stage, what a chained run's busy cycles cost (`cycle_counts`)."""
    rows = [
        (f"{r['rate']:g}", r.get("schedule", ""), f"{r['cycles']['busy_cycles']} / {_rounded(r['cycles']['busy_cycle_s'])}", stage,
         c["drains"], _rounded(c["seconds"]), c["queries_started"], c.get("jobs", "-"), c.get("sql_executions", "-"))
        for r in result["rates"] if r.get("cycles") for stage, c in r["cycles"]["stages"].items()
    ]
    return markdown_table(("rate", "schedule", "busy cycles / median s", "stage", "drains (all)", "s / busy drain",
                           "query starts / busy drain", "Spark jobs / busy drain", "SQL executions / busy drain"), rows) if rows else ""


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def render_table(result: dict[str, Any]) -> str:
    """The summary table (the CLI's, docs/performance.md's): one row per rate and schedule."""
    unit = result["rates"][0].get("unit", "records") if result["rates"] else "records"
    return markdown_table(
        (f"rate ({unit}/s)", "schedule", "changes sent", "seen in gold", "p50 s", "p95 s", "p99 s", "p95 by third s", "catch-up s", "lag"),
        (
            (f"{r['rate']:g}", r.get("schedule", "concurrent"), f"{r['changes_sent']:,}", f"{r.get('changes_seen', 0):,}", r.get("p50_s", "-"),
             r.get("p95_s", "-"), r.get("p99_s", "-"), " / ".join(str(p) for p in r.get("p95_by_third_s", [])),
             r.get("catch_up_s", "-"), "bounded" if r.get("bounded") else "not shown bounded")
            for r in result["rates"]
        ),
    )
