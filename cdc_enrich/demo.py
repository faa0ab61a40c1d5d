"""`cdc-enrich demo`: the whole service on the local stack, printing what a user wants to see.

The demo works in its own lake (`<lake>/demo`), wiped at the start, so a second run shows
the same story instead of piling events onto the last one. It knows no schema: it reads the
pipeline file and shows whatever sources and views are declared there.

Two sources of changes: the Debezium simulator (default; verified against its source truth),
or with `--with-postgres` a real PostgreSQL with Debezium's connector, killed and restarted
half-way through the transactions (verified against the database itself).
"""

from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lakehouse.paths import lake_root

#: A late record's LSN is its predecessor's plus one WAL step (the simulator's WAL positions are 8-byte aligned).
WAL_STEP = 8


def _banner(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 70 - len(title)), flush=True)


def run_demo(args: argparse.Namespace) -> int:
    from devstack import broker as stack
    from testkit import simulator
    from cdc_enrich.render import render_rows, show_query
    from lakehouse.declaration import load_pipeline
    from lakehouse.spark import build_local_spark, ensure_schemas
    from lakehouse.metrics import metrics_table
    from lakehouse.tables import bronze_table, gold_table, quality_results_table, quarantine_table, silver_current_table, silver_history_table
    from lakehouse.gold.analyst import analyst_view

    started = time.monotonic()
    pipeline = load_pipeline(args.pipeline)
    lake = lake_root(args.lake) / "demo"
    _stop_all(lake)
    shutil.rmtree(lake, ignore_errors=True)
    lake.mkdir(parents=True)

    _banner("1. local stack")
    status = stack.broker_up(lake)
    print(f"kafka: {status.describe()}")

    truth_dir = lake / "truth" / pipeline.name
    with_postgres = bool(getattr(args, "with_postgres", False))
    if with_postgres:
        dsn = _postgres_workload(args, pipeline, lake, status.bootstrap)
    else:
        _banner(f"2. simulate a Debezium workload (seed {args.seed}, {args.events} changes, chaos {args.chaos})")
        sim = simulator.simulate(pipeline, seed=args.seed, scale=1, events=args.events, chaos=args.chaos)
        simulator.write_truth(sim, truth_dir)
        produced = simulator.produce(sim.records, status.bootstrap)
        print(f"produced {produced} Kafka records to {len(pipeline.topics)} topics; source truth in {truth_dir}")
        for key, value in sorted(sim.stats.items()):
            print(f"  {key}: {value}")

    spark = build_local_spark(lake, app_name="cdc-enrich-demo")
    ensure_schemas(spark, pipeline)
    if with_postgres:
        # Drains bronze -> silver -> gold until caught up with the database's LSN (the stage
        # runs below then have nothing left to read and only print), then compares.
        from lakehouse.verify.postgres import verify_against_postgres

        pg_report = verify_against_postgres(spark, pipeline, dsn, lake, bootstrap=status.bootstrap, progress=print)
        if not pipeline.views:  # otherwise shown as step 6
            print(pg_report.render())

    _banner("3. bronze: Kafka -> append-only Delta, malformed records to quarantine")
    _run("bronze", spark, pipeline, lake, status.bootstrap)
    rows = [
        (src.name, spark.table(bronze_table(pipeline, src)).count())
        for src in pipeline.sources.values()
    ]
    rows.append(("(quarantine)", spark.table(quarantine_table(pipeline)).count()))
    print(render_rows(["table", "bronze rows"], rows))

    _banner("4. silver: current state + full per-key history (out-of-order safe)")
    _run("silver", spark, pipeline, lake, status.bootstrap)
    rows = []
    for src in pipeline.sources.values():
        current = spark.table(silver_current_table(pipeline, src))
        rows.append(
            (
                src.name,
                current.where("NOT _deleted").count(),
                current.where("_deleted").count(),
                spark.table(silver_history_table(pipeline, src)).count(),
            )
        )
    print(render_rows(["table", "live rows", "deleted keys", "history versions"], rows))
    _show_one_history(spark, pipeline)

    if pipeline.views:
        _banner("5. gold: incremental joins (foreign keys; as of each event's time; within a time window)")
        _run("gold", spark, pipeline, lake, status.bootstrap)
        for view in pipeline.views.values():
            clean = analyst_view(pipeline, view.name)
            print(f"\n{clean} (analyst view of {gold_table(pipeline, view.name)}): {spark.table(clean).count()} rows")
            print(show_query(spark, f"SELECT * FROM {clean} ORDER BY 1 LIMIT 5"))

        stories = [_window_story(spark, pipeline, view.name, late=not with_postgres) for view in pipeline.views.values() if view.windowed]
        stories += [_as_of_story(spark, pipeline, view.name, late=not with_postgres) for view in pipeline.views.values() if view.temporal]
        lates = [late for late in stories if late is not None]
        if lates:
            _late_round(spark, pipeline, lake, status.bootstrap, lates, truth_dir)

        if with_postgres:
            _banner("6. verify: gold and silver == the same joins and tables inside PostgreSQL")
            print(pg_report.render())
        else:
            _banner("6. verify: gold == SQL join over the source truth")
            from lakehouse.verify.views import verify_pipeline

            report = verify_pipeline(spark, pipeline, truth_dir=truth_dir)
            print(report.render())

        _banner("7. data quality (great-expectations)")
        _run("quality", spark, pipeline, lake, status.bootstrap)

    verified = pg_report.ok if with_postgres else (report.ok if pipeline.views else True)
    from lakehouse.dictionary import data_dictionary
    from lakehouse.quality.dashboard import write_dashboard

    dictionary = lake / f"{pipeline.name}-data-dictionary.md"
    dictionary.write_text(data_dictionary(pipeline), encoding="utf-8")
    board = write_dashboard(spark, pipeline, lake)
    _banner("done" if verified else "done: VERIFY FOUND DIFFERENCES (see above)")
    print(f"operators' dashboard (quality, quarantine, gold freshness, streams): {board.path}")
    print(f"data dictionary (every table, column, key, join and rule): {dictionary}")
    print(f"stream metrics, one row per micro-batch: {metrics_table(pipeline)}; quality results: {quality_results_table(pipeline)}")
    print(f"demo finished in {time.monotonic() - started:.0f}s. Try:")
    first_view = next(iter(pipeline.views), None)
    if first_view:
        print(f"  .venv/bin/cdc-enrich --lake {lake} sql \"SELECT * FROM {gold_table(pipeline, first_view)} VERSION AS OF 1 LIMIT 5\"")
    if with_postgres:
        print(f"  .venv/bin/cdc-enrich --lake {lake} stack down --with-postgres     # stop the demo's broker, PostgreSQL and Connect")
    else:
        print(f"  .venv/bin/cdc-enrich --lake {lake} stack down     # stop the demo's broker")
    return 0 if verified else 1


def _stop_all(lake: Path) -> None:
    """Stop whatever a previous demo left running in its lake (before the lake is wiped)."""
    from devstack import broker as stack, connect, postgres

    connect.connect_down(lake)
    postgres.postgres_down(lake)
    stack.broker_down(lake)


def _postgres_workload(args: argparse.Namespace, pipeline: Any, lake: Path, bootstrap: str) -> str:
    """PostgreSQL + Debezium, the initial rows, then `args.events` transactions from two
    connections with the connector SIGKILLed and restarted half-way. Returns the DSN."""
    from devstack import connect
    from testkit import pg_workload

    _banner(f"2. PostgreSQL + Debezium: {args.events} real transactions, the connector killed half-way")
    captured = pg_workload.capture_seeded_database(lake, pipeline, bootstrap, args.seed)
    dsn, rest_port = captured.dsn, captured.rest_port
    print(f"postgres: {captured.postgres.describe()}")
    print(captured.seeded.render())
    print(f"connect: {captured.connect.describe()}")
    print("connect: snapshot done, streaming")
    half = args.events // 2
    print(pg_workload.run_workload(dsn, pipeline, half, seed=args.seed + 1).render())
    connect.connect_down(lake, kill=True)
    print("connect: killed (SIGKILL); the replication slot keeps what comes next")
    print(pg_workload.run_workload(dsn, pipeline, args.events - half, seed=args.seed + 2).render())
    print(f"connect: restarted, resumes from its offsets: {connect.connect_up(lake, pipeline, bootstrap, dsn, rest_port=rest_port).describe()}")
    return dsn


def _run(stage: str, spark: Any, pipeline: Any, lake: Path, bootstrap: str) -> None:
    """One stage through the entry layer (drain what is there), its report and its time."""
    from lakehouse.entry import run_stage

    began = time.monotonic()
    report = run_stage(stage, spark, pipeline, lake, bootstrap=bootstrap, trigger="available_now", progress=lambda m: print(f"  {m}", flush=True))
    if report is not None and hasattr(report, "render"):
        print(report.render())
    print(f"{stage} finished in {time.monotonic() - began:.1f}s")


@dataclass(frozen=True)
class _Late:
    """A record the demo delivers late, after the first pass: what it says, how the truth learns of
    it (it was committed then), and what to show once bronze, silver and gold have run again."""

    record: Any
    intro: str
    into_truth: Callable[[Path], None]
    show: Callable[[], None]


def _late_round(spark: Any, pipeline: Any, lake: Path, bootstrap: str, lates: list[_Late], truth_dir: Path) -> None:
    """Send the late records, add them to the truth, run bronze, silver and gold again, show each."""
    from testkit.simulator import produce

    produce([late.record for late in lates], bootstrap)
    for late in lates:
        late.into_truth(truth_dir)
        print(f"\n{late.intro}")
    print("\nbronze, silver and gold again:")
    for stage in ("bronze", "silver", "gold"):
        _run(stage, spark, pipeline, lake, bootstrap)
    for late in lates:
        late.show()


def _as_of_story(spark: Any, pipeline: Any, view: str, late: bool) -> _Late | None:
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
    print(f"\n{view}: each row joined as of its event's time; {rows.count()} of {then.count()} differ from the same join as of now, e.g.:")
    shown = rows.limit(5).collect()
    print(render_rows(rows.columns, [tuple(r) for r in shown]))
    if not late:
        return None
    found = _late_version(spark, pipeline, plan)
    if found is None:
        print("(no version of a joined row here has a successor and an event inside it to correct late)")
        return None
    record, source, key_text, column, old, new, moment, event = found
    width = len(plan.view.columns)
    before = then.where(_equal(keys, event)).collect()[0][:width]

    def into_truth(truth_dir: Path) -> None:
        from testkit.simulator.late import add_version_to_truth

        values = {c: (new if c == column else event[c]) for c in source.column_names}
        add_version_to_truth(truth_dir, source, values, _epoch_micros(moment))

    def show() -> None:
        after = spark.table(gold_table(pipeline, view)).where(_equal(keys, event)).collect()[0][:width]
        print(f"\n{view}, the event that version was valid for:")
        print(render_rows(["", *then.columns[:width]], [("before", *before), ("after", *after)]))

    intro = (f"a late correction: {source.name} {key_text} had {column} = {new!r} (not {old!r}) from {moment}, a change "
             f"that reaches Kafka only now (an older LSN than the records already read)")
    return _Late(record, intro, into_truth, show)


def _window_story(spark: Any, pipeline: Any, view: str, late: bool) -> _Late | None:
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
    waiting = events["base"].where(~F.col(LATE)).join(shown, list(base.source.primary_key), "left_anti").count() if base.emits_unmatched else 0
    late_now = {name: frame.where(F.col(LATE)).count() for name, frame in events.items()}
    names = base.alias.alias, joined.alias.alias
    mark = watermark(spark, pipeline, plan)
    print(f"\n{view}: watermark {mark} (the latest event time less {grace_us(plan) // 1_000_000} s of grace):")
    print(f"  {counts['pairs']} pair(s) of {names[0]} and {names[1]}; {counts['base_alone']} {names[0]} event(s) whose window closed "
          f"without a partner" + (f", {counts['joined_alone']} {names[1]} event(s) too" if joined.emits_unmatched else "")
          + (f"; {waiting} {names[0]} event(s) still inside their window (a row when it closes)" if base.emits_unmatched else "")
          + "; late, recorded in "
          f"_late_changes and joined to nothing: {late_now['base']} {names[0]}, {late_now['joined']} {names[1]}")
    if not late or mark is None:
        return None
    return _late_partner(spark, pipeline, plan, base, joined, mark, events["base"])


def _late_partner(spark: Any, pipeline: Any, plan: Any, base: Any, joined: Any, mark: Any, base_events: Any) -> _Late | None:
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

    def show() -> None:
        key_json = F.to_json(F.struct(F.lit(row[pk[0]]).alias(pk[0])))
        found = spark.table(late_changes_table(pipeline)).where((F.col("source") == source.name) & (F.col("key") == key_json))
        recorded = found.select("source", "key", "source_ts", "late_by_ms", "reason").collect()
        paired = spark.table(gold_table(pipeline, view)).where(F.col(pipeline.view_key(view)[len(base.source.primary_key)]) == row[pk[0]]).count()
        print(f"\n{view}: the late {source.name} event, in _late_changes; gold rows pairing it: {paired}")
        print(render_rows(["source", "key", "source_ts", "late_by_ms", "reason"], [tuple(r) for r in recorded]))

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
            return record, source, key_text, column, old, values[column], moment, row
    return None


def _show_one_history(spark: Any, pipeline: Any) -> None:
    """The key with the most versions in the first versioned source: its life, then an as-of query."""
    from pyspark.sql import functions as F

    from lakehouse.silver import as_of
    from lakehouse.tables import silver_history_table

    source = next(s for s in pipeline.sources.values() if s.kind == "table")
    history = spark.table(silver_history_table(pipeline, source))
    busiest = history.groupBy(*source.primary_key).count().orderBy(F.desc("count"), *source.primary_key).first()
    if busiest is None:
        return
    condition = _equal(list(source.primary_key), busiest)
    shown = list(source.column_names) + ["_op", "_deleted", "_valid_from", "_valid_to"]
    versions = history.where(condition).orderBy("_sequence").select(*shown).collect()
    key_text = ", ".join(f"{c}={busiest[c]}" for c in source.primary_key)
    print(f"\nhistory of {source.name} {key_text} ({len(versions)} versions):")
    from cdc_enrich.render import render_rows

    print(render_rows(shown, [tuple(r) for r in versions]))
    if len(versions) >= 2 and versions[1]["_valid_from"] is not None:
        moment = versions[1]["_valid_from"]
        past = as_of(spark, pipeline, source, str(moment)).where(condition)
        print(f"\n{source.name} {key_text} as of source time {moment}:")
        print(render_rows(past.columns, [tuple(r) for r in past.collect()]))
