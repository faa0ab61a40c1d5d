"""`cdc-enrich demo`: the whole service on the local stack, printing what a user wants to see.

Each step says what it does and what came of it in a line or two of words and counts; then the
tables it made, one verdict and where to look next. `cdc-enrich -v demo` (`make demo V=1`) adds
the details under each step: every stage's progress and report, each table's counts, sample
rows, one key's history, the late records before and after, the full verify and quality reports.
The wording is `cdc_enrich.demo_lines` (pure, unit-tested).

The demo works in its own lake (`<lake>/demo`), wiped at the start, so a second run shows
the same story instead of piling events onto the last one. It knows no schema: it reads the
pipeline file and shows whatever sources and views are declared there.

Two sources of changes: the Debezium simulator (default; verified against its source truth),
or with `--with-postgres` a real PostgreSQL with Debezium's connector, killed and restarted
half-way through the transactions (verified against the database itself).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable

from cdc_enrich import demo_lines as say
from lakehouse.paths import lake_root

#: A late record's LSN is its predecessor's plus one WAL step (the simulator's WAL positions are 8-byte aligned).
WAL_STEP = 8
CLI = ".venv/bin/cdc-enrich"


class _Out:
    """The demo's two voices: each step's heading and result lines, always; its details
    (`detail`, indented under it) only with -v."""

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose
        self.steps = 0

    def step(self, title: str) -> None:
        """A numbered heading: what the step does, printed as it starts."""
        self.steps += 1
        print(f"\n{self.steps}. {title}", flush=True)

    def result(self, *lines: str) -> None:
        for line in lines:
            print(f"   {line}", flush=True)

    def detail(self, *texts: str) -> None:
        if self.verbose:
            for text in texts:
                for line in text.splitlines() or [""]:
                    print(f"      {line}", flush=True)

    def progress(self, message: str) -> None:
        self.detail(message)


def run_demo(args: argparse.Namespace) -> int:
    """The demo end to end; 0 when verify found gold equal to what it is checked against.
    `args.verbose` (the CLI's global -v) turns the details on."""
    from devstack import broker as stack
    from testkit import simulator
    from cdc_enrich.render import render_rows, show_query
    from lakehouse.declaration import load_pipeline
    from lakehouse.spark import build_local_spark, ensure_schemas
    from lakehouse.metrics import metrics_table
    from lakehouse.tables import (bronze_table, gold_table, late_changes_table, quality_results_table, quarantine_table,
                                  silver_current_table, silver_history_table)
    from lakehouse.gold.analyst import analyst_view

    out = _Out(bool(getattr(args, "verbose", False)))
    started = time.monotonic()
    pipeline = load_pipeline(args.pipeline)
    lake = lake_root(args.lake) / "demo"
    _stop_all(lake)
    shutil.rmtree(lake, ignore_errors=True)
    lake.mkdir(parents=True)
    print(f"cdc-enrich demo: pipeline {pipeline.name} ({say.count(len(pipeline.sources), 'source')}, "
          f"{say.count(len(pipeline.views), 'view')}), in {lake}" + ("" if out.verbose else "; -v for the details"), flush=True)

    out.step("Local stack: a single-node Kafka broker")
    status = stack.broker_up(lake)
    out.result(f"running at {status.bootstrap}")
    out.detail(f"kafka: {status.describe()}")

    truth_dir = lake / "truth" / pipeline.name
    with_postgres = bool(getattr(args, "with_postgres", False))
    if with_postgres:
        dsn = _postgres_workload(args, pipeline, lake, status.bootstrap, out)
    else:
        out.step(f"Changes: a simulated Debezium workload (seed {args.seed}, {args.events:,} changes, chaos {args.chaos!r})")
        sim = simulator.simulate(pipeline, seed=args.seed, scale=1, events=args.events, chaos=args.chaos)
        simulator.write_truth(sim, truth_dir)
        produced = simulator.produce(sim.records, status.bootstrap)
        out.result(*say.simulation_lines(sim.stats, produced))
        out.detail(f"source truth (what verify compares gold with): {truth_dir}", *say.simulation_details(sim.stats))

    spark = build_local_spark(lake, app_name="cdc-enrich-demo")
    ensure_schemas(spark, pipeline)
    if with_postgres:
        # Drains bronze -> silver -> gold until caught up with the database's LSN (the stage
        # runs below then have nothing left to read and only report), then compares.
        from lakehouse.verify.postgres import verify_against_postgres

        pg_report = verify_against_postgres(spark, pipeline, dsn, lake, bootstrap=status.bootstrap, progress=out.progress)
        caught = pg_report.catch_up
        out.result(f"caught up with the database: LSN {caught.target_lsn}, bronze, silver and gold drained in "
                   f"{say.count(caught.rounds, 'round')} ({say.took(caught.drain_s)})")
        out.detail(caught.render())

    out.step("Bronze: Kafka records into append-only Delta tables, undecodable ones to quarantine")
    _, took = _run("bronze", spark, pipeline, lake, status.bootstrap, out)
    bronze = {src.name: spark.table(bronze_table(pipeline, src)).count() for src in pipeline.sources.values()}
    quarantined = spark.table(quarantine_table(pipeline)).count()
    out.detail(render_rows(["table", "bronze rows"], [*bronze.items(), ("(quarantine)", quarantined)]))
    out.result(say.bronze_line(bronze, quarantined, took))

    out.step("Silver: each key's current state and full history, whatever order its changes arrive in")
    silver, took = _run("silver", spark, pipeline, lake, status.bootstrap, out)
    rows = []
    for src in pipeline.sources.values():
        current = spark.table(silver_current_table(pipeline, src))
        rows.append((src.name, current.where("NOT _deleted").count(), current.where("_deleted").count(),
                     spark.table(silver_history_table(pipeline, src)).count()))
    out.detail(render_rows(["table", "live rows", "deleted keys", "history versions"], rows))
    out.result(say.silver_line(rows, _summed(silver), took))
    busiest = _show_one_history(spark, pipeline, out)
    if busiest is not None:
        out.result(say.history_line(busiest[0], busiest[1], busiest[3]))

    report = None
    lates: list[_Late] = []
    if pipeline.views:
        out.step("Gold: the views, kept equal to their joins by incremental batches")
        _, took = _run("gold", spark, pipeline, lake, status.bootstrap, out)
        counts = {}
        for view in pipeline.views.values():
            clean = analyst_view(pipeline, view.name)
            counts[view.name] = spark.table(clean).count()
            if out.verbose:
                out.detail(f"{clean} (analyst view of {gold_table(pipeline, view.name)}): {counts[view.name]} rows",
                           show_query(spark, f"SELECT * FROM {clean} ORDER BY 1 LIMIT 5"))
        out.result(say.gold_line(counts, took))
        stories = [_window_story(spark, pipeline, view.name, not with_postgres, out) for view in pipeline.views.values() if view.windowed]
        stories += [_as_of_story(spark, pipeline, view.name, not with_postgres, out) for view in pipeline.views.values() if view.temporal]
        lates = [late for late in stories if late is not None]
        if lates:
            out.step("Late data: records committed earlier, delivered after the first pass; bronze, silver and gold again")
            _late_round(spark, pipeline, lake, status.bootstrap, lates, truth_dir, out)

        if with_postgres:
            out.step("Verify: gold and silver against the same joins and tables inside PostgreSQL")
            out.detail(pg_report.render())
            out.result(say.postgres_verify_line(pg_report))
        else:
            out.step("Verify: gold against the SQL join over the source truth")
            from lakehouse.verify.views import verify_pipeline

            report = verify_pipeline(spark, pipeline, truth_dir=truth_dir)
            out.detail(report.render())
            out.result(say.verify_line(report, "the source truth"))

        out.step("Data quality: Great Expectations suites over every table")
        quality, took = _run("quality", spark, pipeline, lake, status.bootstrap, out)
        out.result(say.quality_line(quality, took))
    elif with_postgres:
        out.detail(pg_report.render())
        out.result(say.postgres_verify_line(pg_report))

    verified = pg_report.ok if with_postgres else (report.ok if report is not None else True)
    from lakehouse.dictionary import data_dictionary
    from lakehouse.quality.dashboard import write_dashboard

    dictionary = lake / f"{pipeline.name}-data-dictionary.md"
    dictionary.write_text(data_dictionary(pipeline), encoding="utf-8")
    board = write_dashboard(spark, pipeline, lake)
    out.detail(board.render())

    sources = list(pipeline.sources.values())
    print(f"\nTables made (in {lake}):")
    made = [
        ("bronze", say.grouped([bronze_table(pipeline, s) for s in sources] + [quarantine_table(pipeline)])),
        ("silver", say.grouped([silver_current_table(pipeline, s) for s in sources] + [late_changes_table(pipeline)])
         + f" (each source's history in {silver_history_table(pipeline, sources[0]).rpartition('.')[2]} and the like)"),
    ]
    if pipeline.views:
        made += [("gold", say.grouped(gold_table(pipeline, v) for v in pipeline.views)),
                 ("analysts", say.grouped(analyst_view(pipeline, v) for v in pipeline.views) + " (gold without its lineage columns)")]
    made.append(("operations", say.grouped([metrics_table(pipeline), quality_results_table(pipeline)])
                 + " (one row per micro-batch; one per expectation checked)"))
    print("\n".join(say.aligned(made)))

    if with_postgres:
        proof = "gold and silver equal PostgreSQL's own joins and tables, through a connector killed mid-stream"
    elif pipeline.views:
        proof = ("gold equals the SQL join over the source truth"
                 + (f", through chaos {args.chaos!r}" if args.chaos != "none" else "") + (" and late data" if lates else ""))
    else:
        proof = "bronze and silver built (the pipeline declares no view to verify)"
    print("\n" + say.verdict(verified, proof, quality if pipeline.views else None, time.monotonic() - started), flush=True)

    lake_arg = shlex.quote(str(lake))
    nexts = [("dashboard", str(board.path)), ("data dictionary", str(dictionary))]
    first_view = next(iter(pipeline.views), None)
    if first_view:
        query = f"SELECT * FROM {gold_table(pipeline, first_view)} VERSION AS OF 1 LIMIT 5"
        nexts.append(("time travel", f"{CLI} --lake {lake_arg} sql {shlex.quote(query)}"))
    if busiest is not None:
        nexts.append(("a key's history", f"{CLI} --lake {lake_arg} history {busiest[0]} --key {shlex.quote(busiest[2])}"))
    if not out.verbose:
        nexts.append(("every detail", f"{CLI} -v demo" + (" --with-postgres" if with_postgres else "") + "   (make demo V=1)"))
    down = " --with-postgres" if with_postgres else ""
    nexts.append(("stop the stack", f"{CLI} --lake {lake_arg} stack down{down}"))
    print("\nLook next:\n" + "\n".join(say.aligned(nexts)), flush=True)
    return 0 if verified else 1


def _summed(report: Any) -> dict[str, int]:
    """Silver's stats summed over its sources (`SilverReport`), by counter."""
    total: dict[str, int] = {}
    for stats in getattr(report, "sources", {}).values():
        for f in fields(stats):
            total[f.name] = total.get(f.name, 0) + getattr(stats, f.name)
    return total


def _stop_all(lake: Path) -> None:
    """Stop whatever a previous demo left running in its lake (before the lake is wiped)."""
    from devstack import broker as stack, connect, postgres

    connect.connect_down(lake)
    postgres.postgres_down(lake)
    stack.broker_down(lake)


def _postgres_workload(args: argparse.Namespace, pipeline: Any, lake: Path, bootstrap: str, out: _Out) -> str:
    """PostgreSQL + Debezium, the initial rows, then `args.events` transactions from two
    connections with the connector SIGKILLed and restarted half-way. Returns the DSN."""
    from devstack import connect
    from testkit import pg_workload

    out.step(f"Changes: PostgreSQL and Debezium's connector, {args.events:,} real transactions, the connector killed half-way")
    captured = pg_workload.capture_seeded_database(lake, pipeline, bootstrap, args.seed)
    dsn, rest_port = captured.dsn, captured.rest_port
    out.detail(f"postgres: {captured.postgres.describe()}", captured.seeded.render(), f"connect: {captured.connect.describe()}",
               "connect: snapshot done, streaming")
    half = args.events // 2
    first = pg_workload.run_workload(dsn, pipeline, half, seed=args.seed + 1)
    out.detail(first.render())
    connect.connect_down(lake, kill=True)
    out.detail("connect: killed (SIGKILL); the replication slot keeps what comes next")
    second = pg_workload.run_workload(dsn, pipeline, args.events - half, seed=args.seed + 2)
    out.detail(second.render())
    restarted = connect.connect_up(lake, pipeline, bootstrap, dsn, rest_port=rest_port)
    out.detail(f"connect: restarted, resumes from its offsets: {restarted.describe()}")
    out.result(*say.postgres_workload_lines(_operations(captured.seeded), first.transactions, second.transactions,
                                            first.aborted + second.aborted))
    return dsn


def _operations(stats: Any) -> int:
    """Every operation a workload's stats count (the seeded rows, for the initial load)."""
    return sum(n for ops in stats.operations.values() for n in ops.values())


def _run(stage: str, spark: Any, pipeline: Any, lake: Path, bootstrap: str, out: _Out) -> tuple[Any, float]:
    """One stage through the entry layer (drain what is there): its report and its seconds; its
    progress lines and report are details."""
    from lakehouse.entry import run_stage

    began = time.monotonic()
    report = run_stage(stage, spark, pipeline, lake, bootstrap=bootstrap, trigger="available_now", progress=out.progress)
    took = time.monotonic() - began
    if report is not None and hasattr(report, "render"):
        out.detail(report.render())
    out.detail(f"{stage} finished in {took:.1f}s")
    return report, took


@dataclass(frozen=True)
class _Late:
    """A record the demo delivers late, after the first pass: what it says (a detail), how the
    truth learns of it (it was committed then), and what came of it once bronze, silver and gold
    have run again (`show`: its line, after printing its details)."""

    record: Any
    intro: str
    into_truth: Callable[[Path], None]
    show: Callable[[], str]


def _late_round(spark: Any, pipeline: Any, lake: Path, bootstrap: str, lates: list[_Late], truth_dir: Path, out: _Out) -> None:
    """Send the late records, add them to the truth, run bronze, silver and gold again, show each."""
    from testkit.simulator import produce

    began = time.monotonic()
    produce([late.record for late in lates], bootstrap)
    for late in lates:
        late.into_truth(truth_dir)
        out.detail(late.intro)
    for stage in ("bronze", "silver", "gold"):
        _run(stage, spark, pipeline, lake, bootstrap, out)
    out.result(*[late.show() for late in lates])
    out.result(f"{say.count(len(lates), 'late record')} sent; bronze, silver and gold ran again in {say.took(time.monotonic() - began)}")


def _as_of_story(spark: Any, pipeline: Any, view: str, late: bool, out: _Out) -> _Late | None:
    """An as-of view's rows next to the same join as of now; with `late` (simulator only) one
    dimension version to deliver late, with the events it re-enriches."""
    from pyspark.sql import functions as F

    from cdc_enrich.render import render_rows
    from lakehouse.gold import join_view, live_rows, view_plan
    from lakehouse.tables import gold_table

    plan = view_plan(pipeline, view)
    keys = list(plan.key_columns)
    joined = [c.name for c in plan.view.columns if c.alias != plan.view.base]
    then = spark.table(gold_table(pipeline, view))
    now = join_view(plan, {s.name: live_rows(spark, pipeline, s) for s in plan.sources})  # the same joins, as of now
    differs = F.lit(False)
    for c in joined:
        differs = differs | ~then[c].eqNullSafe(now[c])
    rows = then.join(now, keys).where(differs).select(
        *[then[k] for k in keys], *[x for c in joined for x in (then[c].alias(f"{c} (then)"), now[c].alias(f"{c} (now)"))]
    ).orderBy(*keys)
    differ, total = rows.count(), then.count()
    out.result(say.as_of_line(view, plan.base.source.name, differ, total))
    if out.verbose:
        out.detail(f"{view}: each row joined as of its event's time; {differ} of {total} differ from the same join as of now, e.g.:",
                   render_rows(rows.columns, [tuple(r) for r in rows.limit(5).collect()]))
    if not late:
        return None
    found = _late_version(spark, pipeline, plan)
    if found is None:
        out.detail(f"{view}: no version of a joined row has a successor and an event inside it to correct late")
        return None
    record, source, key_text, column, shown_as, old, new, moment, event = found
    width = len(plan.view.columns)
    before = then.where(_equal(keys, event)).collect()[0][:width] if out.verbose else ()

    def into_truth(truth_dir: Path) -> None:
        from testkit.simulator.late import add_version_to_truth

        values = {c: (new if c == column else event[c]) for c in source.column_names}
        add_version_to_truth(truth_dir, source, values, _epoch_micros(moment))

    def show() -> str:
        after = spark.table(gold_table(pipeline, view)).where(_equal(keys, event)).collect()[0][:width]
        if out.verbose:  # `before` was read only then
            out.detail(f"{view}, the event that version was valid for:",
                       render_rows(["", *then.columns[:width]], [("before", *before), ("after", *after)]))
        reads = after[then.columns.index(shown_as)]
        return say.late_correction_line(view, f"{source.name} {key_text}", shown_as, new, reads)

    intro = (f"a late correction: {source.name} {key_text} had {column} = {new!r} (not {old!r}) from {moment}, a change "
             f"that reaches Kafka only now (an older LSN than the records already read)")
    return _Late(record, intro, into_truth, show)


def _window_story(spark: Any, pipeline: Any, view: str, late: bool, out: _Out) -> _Late | None:
    """A windowed view's events by outcome: paired, closed without a partner, still inside their
    window (no row yet: one comes when it closes), and late (recorded, joined to nothing); with
    `late` (simulator only) one joined event to deliver after its window closed."""
    from pyspark.sql import functions as F

    from lakehouse.gold import view_plan
    from lakehouse.gold.windowed import LATE, event_table, grace_us, sides, watermark
    from lakehouse.tables import gold_table

    plan = view_plan(pipeline, view)
    base, joined = sides(plan)
    key = pipeline.view_key(view)
    base_key, joined_key = key[: len(base.source.primary_key)], key[len(base.source.primary_key):]
    gold = spark.table(gold_table(pipeline, view))
    counts = gold.select(
        F.count_if(F.col(base_key[0]).isNotNull() & F.col(joined_key[0]).isNotNull()).alias("pairs"),
        F.count_if(F.col(joined_key[0]).isNull()).alias("base_alone"),
        F.count_if(F.col(base_key[0]).isNull()).alias("joined_alone"),
    ).first()
    events = {side.name: spark.table(event_table(pipeline, plan, side)) for side in (base, joined)}
    shown = gold.select(*[F.col(k).alias(pk) for k, pk in zip(base_key, base.source.primary_key)]).distinct()
    waiting = events["base"].where(~F.col(LATE)).join(shown, list(base.source.primary_key), "left_anti").count() if base.emits_unmatched else None
    late_now = {name: frame.where(F.col(LATE)).count() for name, frame in events.items()}
    names = (base.source.name, joined.source.name) if base.source.name != joined.source.name else (base.alias.alias, joined.alias.alias)
    mark = watermark(spark, pipeline, plan)
    out.result(say.window_line(view, names, counts["pairs"], (counts["base_alone"], counts["joined_alone"] if joined.emits_unmatched else None),
                               waiting, (late_now["base"], late_now["joined"])))
    out.detail(f"{view}: watermark {mark} (the latest event time less {grace_us(plan) // 1_000_000} s of grace); "
               "an event still inside its window gets its row when the window closes; a late one is recorded in _late_changes")
    if not late or mark is None:
        return None
    return _late_partner(spark, pipeline, plan, base, joined, mark, events["base"], out)


def _late_partner(spark: Any, pipeline: Any, plan: Any, base: Any, joined: Any, mark: Any, base_events: Any, out: _Out) -> _Late | None:
    """A new joined event for a base event whose window has closed, timed inside that window (so
    on time it would have paired) but below the watermark: it arrives late, is recorded, pairs
    with nothing. None when the joined source's key is not one whole number, or no event fits."""
    from datetime import timedelta

    from pyspark.sql import functions as F

    from cdc_enrich.render import render_rows
    from lakehouse.gold.windowed import AT, LATE
    from lakehouse.ordering import postgres_lsn
    from lakehouse.sqltext import COMMIT_TIME
    from lakehouse.tables import gold_table, late_changes_table, silver_current_table
    from testkit.simulator.late import late_record

    source = joined.source
    pk = source.primary_key
    if len(pk) != 1 or source.column(pk[0]).type not in ("smallint", "int", "bigint") or source.sequence != "postgres":
        return None
    span = timedelta(microseconds=base.span_us)
    closed = (base_events.where(~F.col(LATE) & (F.col(AT) + F.expr(f"INTERVAL {base.span_us} MICROSECONDS") < F.lit(mark)))
              .orderBy(F.desc(AT)).first())
    # one read of the joined source: its highest key (deleted ones too: a new key is unused) and a live row to copy
    found = spark.table(silver_current_table(pipeline, source)).agg(
        F.max(pk[0]).alias("top"),
        F.min_by(F.struct(*source.column_names), F.when(~F.col("_deleted"), F.col(pk[0]))).alias("template"),
    ).first()
    top, template = found["top"], found["template"]
    if closed is None or template is None:
        return None
    moment = closed[AT] + span / 2
    moment = moment - timedelta(microseconds=moment.microsecond % 1000)
    row = {c: template[c] for c in source.column_names} | {pk[0]: int(top) + 1}
    row |= {j: closed[b] for j, b in zip(joined.on, base.on)}
    if joined.time != COMMIT_TIME:
        row[joined.time] = moment
    commit_us = _epoch_micros(moment)
    record = late_record(pipeline, source, row, postgres_lsn(closed["_sequence"]) + WAL_STEP, commit_us, op="c")
    view = plan.view.name
    base_text = ", ".join(f"{k}={closed[k]}" for k in base.source.primary_key)

    def into_truth(truth_dir: Path) -> None:
        from testkit.simulator.late import add_row_to_truth

        add_row_to_truth(truth_dir, source, row, commit_us)

    def show() -> str:
        key_json = F.to_json(F.struct(F.lit(row[pk[0]]).alias(pk[0])))
        found = spark.table(late_changes_table(pipeline)).where((F.col("source") == source.name) & (F.col("key") == key_json))
        recorded = found.select("source", "key", "source_ts", "late_by_ms", "reason").collect()
        paired = spark.table(gold_table(pipeline, view)).where(F.col(pipeline.view_key(view)[len(base.source.primary_key)]) == row[pk[0]]).count()
        out.detail(f"{view}: the late {source.name} event, in _late_changes; gold rows pairing it: {paired}",
                   render_rows(["source", "key", "source_ts", "late_by_ms", "reason"], [tuple(r) for r in recorded]))
        return say.late_event_line(view, f"{source.name} {pk[0]}={row[pk[0]]}", f"{base.source.name} {base_text}", len(recorded), paired)

    intro = (f"a late event: {source.name} {pk[0]}={row[pk[0]]} for {base.source.name} {base_text}, committed at {moment} "
             f"(inside that event's window, which closed at {closed[AT] + span}; watermark now {mark}), reaches Kafka only now")
    return _Late(record, intro, into_truth, show)


def _epoch_micros(moment: Any) -> int:
    """Epoch microseconds of a timestamp a collected row holds (naive, in the Python process's
    local time, as PySpark returns them)."""
    return int(moment.timestamp() * 1_000_000)


def _equal(columns: list[str], row: Any) -> Any:
    from pyspark.sql import functions as F

    condition = F.lit(True)
    for c in columns:
        condition = condition & (F.col(c) == row[c])
    return condition


def _late_version(spark: Any, pipeline: Any, plan: Any) -> Any:
    """A version of the deepest joined row some event was enriched with, which has a successor:
    a record of a new value for one of its columns the view shows, committed halfway between that
    version's start and the event's time, at an LSN between it and its successor. None when
    there is no such version (or the source is not ordered by PostgreSQL LSNs)."""
    from datetime import timedelta

    from pyspark.sql import functions as F

    from lakehouse.gold.as_of import index_table, row_key
    from lakehouse.ordering import postgres_lsn, postgres_sequence
    from lakehouse.sqltext import time_column
    from lakehouse.tables import gold_table, silver_current_table, silver_history_table
    from testkit.simulator.late import late_record

    for alias in reversed(plan.aliases[1:]):
        source = alias.source
        shown = [c for c in plan.view.columns if c.alias == alias.alias and source.column(c.column).type == "string"
                 and c.column not in source.primary_key]
        if source.sequence != "postgres" or not shown:
            continue
        base = plan.base.source
        as_keys = [F.col(p).alias(k) for p, k in zip(base.primary_key, plan.key_columns)]
        gold = spark.table(gold_table(pipeline, plan.view.name)).select(*plan.key_columns, F.col(alias.gold_seq).alias("_used"))
        events = spark.table(silver_current_table(pipeline, base)).select(*as_keys, F.col(time_column(plan.view)).alias("_event_time"))
        looked_up = spark.table(index_table(pipeline, plan.view.name)).where(F.col("_alias") == alias.alias).select(*as_keys, "_key")
        history = (spark.table(silver_history_table(pipeline, source)).where("_valid_to_sequence IS NOT NULL AND NOT _deleted")
                   .withColumn("_version_key", row_key(source)))
        candidates = (gold.join(events, list(plan.key_columns)).join(looked_up, list(plan.key_columns))
                      .join(history, (F.col("_used") == F.col("_sequence")) & (F.col("_key") == F.col("_version_key")))
                      .where(F.col("_event_time") > F.col("_valid_from") + F.expr("INTERVAL 2 MILLISECONDS"))
                      .where(F.col("_event_time") < F.col("_valid_to"))
                      .orderBy(*plan.key_columns).limit(20).collect())
        for row in candidates:
            lsn = postgres_lsn(row["_sequence"]) + WAL_STEP
            if postgres_sequence(lsn, "u") >= row["_valid_to_sequence"]:  # not before the successor
                continue
            column = shown[0].column
            moment = row["_valid_from"] + (row["_event_time"] - row["_valid_from"]) / 2
            moment = moment - timedelta(microseconds=moment.microsecond % 1000)
            values = {c: row[c] for c in source.column_names}
            old = values[column]
            values[column] = f"{old} (corrected late)"
            commit_us = _epoch_micros(moment)
            record = late_record(pipeline, source, values, lsn, commit_us)
            key_text = ", ".join(f"{k}={row[k]}" for k in source.primary_key)
            return record, source, key_text, column, shown[0].name, old, values[column], moment, row
    return None


def _show_one_history(spark: Any, pipeline: Any, out: _Out) -> tuple[str, str, str, int] | None:
    """The key with the most versions in the first versioned source: (source, the key as text,
    the key as `history --key` takes it, its versions); its life and an as-of query are details."""
    from pyspark.sql import functions as F

    from cdc_enrich.render import render_rows
    from lakehouse.silver import as_of
    from lakehouse.tables import silver_history_table

    source = next((s for s in pipeline.sources.values() if s.kind == "table"), None)
    if source is None:
        return None
    history = spark.table(silver_history_table(pipeline, source))
    busiest = history.groupBy(*source.primary_key).count().orderBy(F.desc("count"), *source.primary_key).first()
    if busiest is None:
        return None
    condition = _equal(list(source.primary_key), busiest)
    shown = list(source.column_names) + ["_op", "_deleted", "_valid_from", "_valid_to"]
    versions = history.where(condition).orderBy("_sequence").select(*shown).collect()
    key_text = ", ".join(f"{c}={busiest[c]}" for c in source.primary_key)
    out.detail(f"history of {source.name} {key_text} ({len(versions)} versions):", render_rows(shown, [tuple(r) for r in versions]))
    if out.verbose and len(versions) >= 2 and versions[1]["_valid_from"] is not None:
        moment = versions[1]["_valid_from"]
        past = as_of(spark, pipeline, source, str(moment)).where(condition)
        out.detail(f"{source.name} {key_text} as of source time {moment}:", render_rows(past.columns, [tuple(r) for r in past.collect()]))
    return source.name, key_text, ",".join(str(busiest[c]) for c in source.primary_key), len(versions)
