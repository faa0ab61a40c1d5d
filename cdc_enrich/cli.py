"""`cdc-enrich`: one entry point dispatching to documented tasks.

Spark is started lazily, only by the subcommands that need it, so `stack` and `simulate`
answer in a second. Every subcommand takes `--lake DIR` (default ./.lake, env
CDC_ENRICH_LAKE), the root of every local table, checkpoint and broker file.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from lakehouse.entry import STAGES, TRIGGERS, exit_code
from lakehouse.errors import CdcEnrichError, PipelineConfigError
from lakehouse.paths import REPO_ROOT, lake_root
from cdc_enrich.render import render_rows, show_query  # noqa: F401 (part of the CLI's API)

DEFAULT_PIPELINE = REPO_ROOT / "schemas" / "shop" / "pipeline.yml"
#: The checkout's packages that the wheel leaves out; `stack`, `simulate`, `bench` and `demo` use them.
DEV_PACKAGES = ("devstack", "testkit")


_QUIET = False  # -q: progress lines off (results, reports and errors still print)


def _say(message: str) -> None:
    print(message, flush=True)


def _progress(message: str) -> None:
    """A stage's progress line (one per micro-batch), indented under the command's own lines."""
    if not _QUIET:
        print(f"  {message}", flush=True)


# --------------------------------------------------------------------------- shared pieces


def _pipeline(args: argparse.Namespace):
    from lakehouse.entry import load

    return load(args.pipeline)


def _spark(args: argparse.Namespace):
    from lakehouse.spark import get_spark

    return get_spark(args.lake)


def _bootstrap(args: argparse.Namespace, pipeline: Any) -> str:
    """Kafka to read, by the entry layer's precedence; the local stack's broker must be running."""
    from lakehouse.entry import resolve_bootstrap

    lake = lake_root(args.lake)
    chosen = resolve_bootstrap(getattr(args, "bootstrap", None), pipeline, lake)
    if chosen.origin == "local stack":
        from devstack.broker import broker_status

        if not broker_status(lake).running:
            raise CdcEnrichError(
                "no Kafka broker to talk to: start the local one with `cdc-enrich stack up`, or pass "
                "--bootstrap HOST:PORT (or set CDC_ENRICH_KAFKA_BOOTSTRAP)"
            )
    return chosen.servers


# --------------------------------------------------------------------------- subcommands


def cmd_stack(args: argparse.Namespace) -> int:
    """Start, stop or report the local stack: a single-node Kafka broker (KRaft), and with
    --with-postgres a PostgreSQL cluster plus Debezium's connector (Kafka Connect standalone)."""
    from devstack import broker as stack

    lake = lake_root(args.lake)
    if args.action == "up":
        status = stack.broker_up(lake, port=args.port, secure=args.secure)
        _say(f"kafka: {status.describe()}")
        listener = stack.secure_listener(lake) if args.secure else None
        if listener is not None:
            _say(
                f"kafka: SASL_SSL (SCRAM-SHA-512) listener at {listener.bootstrap}, user {listener.tls.username}; "
                f"password, CA ({listener.tls.ca_pem.name}) and trust store in {listener.tls.ca_pem.parent}"
            )
        if args.with_postgres:
            _postgres_up(args, lake, status.bootstrap)
        return 0
    if args.action == "down":
        if args.with_postgres or (lake / "stack" / "postgres").exists():
            from devstack.connect import connect_down
            from devstack.postgres import postgres_down

            _say("connect: stopped" if connect_down(lake) else "connect: was not running")
            _say("postgres: stopped" if postgres_down(lake) else "postgres: was not running")
        stopped = stack.broker_down(lake)
        _say("kafka: stopped" if stopped else "kafka: was not running (nothing started by `stack up` here)")
        return 0
    status = stack.broker_status(lake)
    _say(f"kafka: {status.describe()}")
    running = status.running
    if args.with_postgres or (lake / "stack" / "postgres").exists():
        from devstack.connect import connect_status
        from devstack.postgres import postgres_status

        pg, connect = postgres_status(lake), connect_status(lake)
        _say(f"postgres: {pg.describe()}")
        _say(f"connect: {connect.describe()}")
        running = running and pg.running and connect.running
    return 0 if running else 3


def _postgres_up(args: argparse.Namespace, lake: Path, bootstrap: str) -> None:
    """PostgreSQL with the pipeline's schema, then Debezium capturing it into the broker."""
    from devstack import connect, postgres
    from testkit import pg_workload

    pipeline = _pipeline(args)
    pg = postgres.postgres_up(lake, database=pipeline.name)
    _say(f"postgres: {pg.describe()}")
    dsn = postgres.dsn(lake, database=pipeline.name)
    pg_workload.create_schema(dsn, pipeline)
    status = connect.connect_up(lake, pipeline, bootstrap, dsn)
    _say(f"connect: {status.describe()}")
    connect.wait_until_streaming(dsn, pipeline, lake)
    _say("connect: Debezium snapshot done, streaming")


def cmd_simulate(args: argparse.Namespace) -> int:
    """Produce a Debezium-faithful OLTP workload to Kafka and record the source truth."""
    from testkit import simulator

    pipeline = _pipeline(args)
    started = time.monotonic()
    if args.target == "postgres":
        return _simulate_postgres(args, pipeline)
    sim = simulator.simulate(
        pipeline,
        seed=args.seed,
        scale=args.scale,
        events=args.events,
        chaos=args.chaos,
        schemas_enabled=args.schemas_enabled,
        partitions=args.partitions,
    )
    truth_dir = Path(args.truth) if args.truth else lake_root(args.lake) / "truth" / pipeline.name
    simulator.write_truth(sim, truth_dir)
    if args.dry_run:
        _say(f"simulate: {len(sim.records)} records generated (dry run, nothing produced); truth in {truth_dir}")
        return 0
    bootstrap = _bootstrap(args, pipeline)
    count = simulator.produce(
        sim.records, bootstrap, rate=args.rate, progress=lambda n: _say(f"simulate: produced {n} records")
    )
    took = time.monotonic() - started
    _say(f"simulate: produced {count} records to {bootstrap} in {took:.1f}s (seed {args.seed}, chaos {args.chaos})")
    for table, rows in sorted(sim.truth.items()):
        _say(f"  truth {table}: {len(rows)} rows")
    _say(f"  truth written to {truth_dir}")
    return 0


def _simulate_postgres(args: argparse.Namespace, pipeline: Any) -> int:
    """Real DML against the stack's PostgreSQL (Debezium captures it; no truth file needed)."""
    from devstack import postgres
    from testkit import pg_workload

    dsn = postgres.dsn(lake_root(args.lake), database=pipeline.name)
    if args.initial:
        _say(pg_workload.seed_database(dsn, pipeline, args.seed, scale=args.scale).render())
    stats = pg_workload.run_workload(dsn, pipeline, args.events, args.seed, rate=args.rate)
    _say(stats.render())
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run pipeline stages: bronze ingest, silver apply, gold refresh, quality checks; or, with
    --continuous, bronze, silver and gold together until SIGTERM or Ctrl-C."""
    pipeline = _pipeline(args)
    if args.continuous and args.stage != "all":
        raise PipelineConfigError("--continuous runs every streaming stage together; drop --stage")
    stages = STAGES if args.stage == "all" else (args.stage,)
    bootstrap = _bootstrap(args, pipeline) if args.continuous else None
    spark = _spark(args)
    from lakehouse.spark import ensure_schemas

    ensure_schemas(spark, pipeline)
    lake = lake_root(args.lake)
    if args.continuous:
        from lakehouse.entry import run_continuously

        report = run_continuously(
            spark, pipeline, lake, bootstrap=bootstrap, timeout_s=args.timeout, progress=_progress
        )
        _say(report.render())
        return 0
    failed = []
    for stage in stages:
        started = time.monotonic()
        report = run_stage(stage, spark, pipeline, lake, args)
        _say(f"{stage}: done in {time.monotonic() - started:.1f}s")
        if report is not None and hasattr(report, "render"):
            _say(report.render())
        if getattr(report, "ok", True) is False:
            failed.append(stage)
    if failed:
        _say(f"run: {', '.join(failed)} reported failures (see above)")
    return 1 if failed else 0


def run_stage(stage: str, spark: Any, pipeline: Any, lake: Path, args: argparse.Namespace) -> Any:
    """One stage through the entry layer, with the CLI's --bootstrap/--trigger and progress lines."""
    from lakehouse.entry import run_stage as run_one

    bootstrap = _bootstrap(args, pipeline) if stage == "bronze" else None
    progress: Callable[[str], None] = _progress
    return run_one(stage, spark, pipeline, lake, bootstrap=bootstrap, trigger=getattr(args, "trigger", None), progress=progress)


def cmd_verify(args: argparse.Namespace) -> int:
    """Recompute every gold view as a plain SQL join and compare it with gold."""
    from lakehouse.verify.views import verify_pipeline

    pipeline = _pipeline(args)
    if args.against == "postgres":
        from devstack import postgres
        from lakehouse.verify.postgres import verify_against_postgres

        lake = lake_root(args.lake)
        pg_report = verify_against_postgres(
            _spark(args), pipeline, postgres.dsn(lake, database=pipeline.name), lake,
            timeout_s=args.timeout, bootstrap=_bootstrap(args, pipeline), progress=_say,
        )
        _say(pg_report.render())
        return 0 if pg_report.ok else 1
    truth = Path(args.truth) if args.truth else None
    if truth is None and not args.from_silver:
        default = lake_root(args.lake) / "truth" / pipeline.name
        truth = default if default.is_dir() else None
    report = verify_pipeline(_spark(args), pipeline, truth_dir=truth, views=args.view or None)
    _say(report.render())
    return 0 if report.ok else 1


def cmd_sql(args: argparse.Namespace) -> int:
    """Run a Spark SQL query (Delta time travel included) and print the result as a table."""
    spark = _spark(args)
    if args.pipeline_schemas:
        from lakehouse.spark import ensure_schemas

        ensure_schemas(spark, _pipeline(args))
    _say(show_query(spark, args.query, limit=args.limit))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """Show one key's versions from silver history, or the table as of a source time."""
    from lakehouse.silver import as_of
    from lakehouse.tables import silver_history_table

    pipeline = _pipeline(args)
    source = pipeline.source(args.source)
    spark = _spark(args)
    if args.as_of:
        df = as_of(spark, pipeline, source, args.as_of)
    else:
        df = spark.table(silver_history_table(pipeline, source)).orderBy(*source.primary_key, "_sequence")
    if args.key:
        from pyspark.sql import functions as F

        values = args.key.split(",")
        for col, value in zip(source.primary_key, values):
            df = df.where(F.col(col) == F.lit(value).cast(source.column(col).type))
    rows = df.limit(args.limit).collect()
    _say(render_rows(df.columns, [tuple(r) for r in rows]))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Benchmarks, each against a baseline run side by side on this machine."""
    import json

    from lakehouse.spark import get_spark

    pipeline = _pipeline(args)
    spark = get_spark(args.lake, ui=True)  # the bench counts Spark jobs through the UI's REST API
    lake = lake_root(args.lake) / "bench"
    results: dict[str, Any] = {}
    which = ("ingest", "silver", "gold") if args.which == "all" else (args.which,)
    for name in which:
        _say(f"bench {name}: running")
        if name == "pipeline":
            from testkit.bench.pipeline import BATCH_SIZES, bench_pipeline
            from testkit.bench.pipeline import render_table as pipeline_table

            sizes = tuple(int(b) for b in args.batch_sizes.split(",")) if args.batch_sizes else BATCH_SIZES
            results[name] = bench_pipeline(spark, pipeline, lake, _bootstrap(args, pipeline), events=args.events or 100_000,
                                           batch_sizes=sizes, progress=_say)
            _say(pipeline_table(results[name]))
        elif name == "freshness":
            from testkit.bench.freshness import RATES, bench_freshness, render_cycles
            from testkit.bench.freshness import render_table as freshness_table

            rates = tuple(float(r) for r in args.rates.split(",")) if args.rates else RATES
            results[name] = bench_freshness(spark, pipeline, lake, _bootstrap(args, pipeline), rates,
                                            duration_s=args.duration, drain_s=args.drain, postgres_stack=lake_root(args.lake) if args.with_postgres else None,
                                            progress=_say,
                                            schedules=tuple(x.strip() for x in args.schedules.split(",") if x.strip()) if args.schedules else None,
                                            intervals=_intervals(args.intervals) if args.intervals else None)
            _say(freshness_table(results[name]))
            _say(render_cycles(results[name]))
        elif name == "ingest":
            from testkit.bench.ingest import bench_ingest

            parsers = tuple(p.strip() for p in args.parsers.split(",") if p.strip())
            results[name] = bench_ingest(spark, pipeline, lake, _bootstrap(args, pipeline), events=args.events or 200_000,
                                         parsers=parsers, progress=_say)
        elif name == "as_of":
            from testkit.bench.as_of import bench_as_of
            from testkit.bench.as_of import render_table as as_of_table

            options: dict[str, Any] = {"events": args.rows} if args.rows else {}
            if args.fractions:
                options["fractions"] = tuple(float(f) for f in args.fractions.split(","))
            if args.workloads:
                options["workloads"] = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
            results[name] = bench_as_of(spark, lake, progress=_say, **options)
            _say(as_of_table(results[name]))
        elif name == "global_row":
            from testkit.bench.global_row import bench_global_row
            from testkit.bench.global_row import render_table as global_table

            results[name] = bench_global_row(spark, lake, progress=_say, **({"rows": args.rows} if args.rows else {}))
            _say(global_table(results[name]))
        elif name == "silver":
            from testkit.bench.silver import bench_silver

            kwargs = {"changes": args.events} if args.events else {}
            results[name] = bench_silver(spark, pipeline, lake, **kwargs)
        else:
            from testkit.bench.gold import bench_gold

            from testkit.bench.gold import render_cells, render_phase_reads, render_table

            kwargs: dict[str, Any] = {"fact_rows": args.rows} if args.rows else {}
            if args.repeats:
                kwargs["repeats"] = args.repeats
            if args.fractions:
                kwargs["fractions"] = tuple(float(f) for f in args.fractions.split(","))
            if args.workloads:
                kwargs["workloads"] = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
            if args.refresh:
                kwargs["refresh"] = tuple(m.strip() for m in args.refresh.split(",") if m.strip())
            results[name] = bench_gold(spark, pipeline, lake, progress=_say, **kwargs)
            _say(render_table(results[name]))
            _say(render_phase_reads(results[name]))
            if results[name]["repeats"] > 1:
                _say(render_cells(results[name]))
        _say(json.dumps(results[name], indent=2, default=str))
    if args.out:  # one bench's result (for `python -m testkit.bench.plot`); `all`: each bench's, by name
        Path(args.out).write_text(json.dumps(results if args.which == "all" else results[which[0]], indent=2, default=str))
    return 0


def _intervals(text: str) -> dict[str, str]:
    """`--intervals bronze=5,silver=1` as `options.intervals` ({"bronze": "5 seconds", ...}).

    >>> _intervals("bronze=5, gold=1")
    {'bronze': '5 seconds', 'gold': '1 seconds'}
    """
    pairs = (item.split("=", 1) for item in text.split(",") if item.strip())
    return {stage.strip(): f"{float(seconds):g} seconds" for stage, seconds in pairs}


def cmd_maintain(args: argparse.Namespace) -> int:
    """Upkeep of every table the pipeline owns: silver history compacted by
    options.history_retention_days, OPTIMIZE, VACUUM keeping options.time_travel_days."""
    pipeline = _pipeline(args)
    spark = _spark(args)
    from lakehouse.upkeep import maintain

    report = maintain(spark, pipeline, tuple(args.step or ("compact", "optimize", "vacuum")), progress=_progress)
    _say(report.render())
    return 0 if report.ok else 1


def cmd_migrate_silver(args: argparse.Namespace) -> int:
    """Move each source's silver from the earlier layout (two Delta tables) into its store, in
    place (lakehouse.silver.migrate); the old tables are kept, renamed. Stop the streams first."""
    pipeline = _pipeline(args)
    spark = _spark(args)
    from lakehouse.silver.migrate import migrate_silver

    _say(migrate_silver(spark, pipeline, lake_root(args.lake)).render())
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    """Write the pipeline's data dictionary (Markdown, no Spark): every table, column, key,
    join and rule, with the file's descriptions."""
    from lakehouse.dictionary import data_dictionary

    pipeline = _pipeline(args)
    text = data_dictionary(pipeline)
    if args.out == "-":
        print(text, end="")
        return 0
    out = Path(args.out or lake_root(args.lake) / f"{pipeline.name}-data-dictionary.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    _say(f"docs: data dictionary of {pipeline.name!r} written to {out}")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Write the operators' page: one self-contained HTML file of quality runs, failing checks,
    quarantine, gold freshness and stream throughput and lag, with plots and a link to the Data Docs."""
    from lakehouse.quality.dashboard import write_dashboard

    pipeline = _pipeline(args)
    spark = _spark(args)
    board = write_dashboard(spark, pipeline, lake_root(args.lake), Path(args.out) if args.out else None)
    _say(board.render())
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Check a pipeline file without Spark: every problem with its file, line and field (exit 2)."""
    pipeline = _pipeline(args)
    _say(f"{pipeline.path}: valid pipeline {pipeline.name!r}: {len(pipeline.sources)} source(s) "
         f"({', '.join(pipeline.sources)}), {len(pipeline.views)} view(s) ({', '.join(pipeline.views) or 'none'})")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Everything that works, end to end on the local stack, with what a user wants to see."""
    from cdc_enrich.demo import run_demo

    return run_demo(args)


# --------------------------------------------------------------------------- argument parsing


def _at_least_one(text: str) -> int:
    """A count of runs given on the command line: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--lake", default=argparse.SUPPRESS, help="root of local tables, checkpoints and broker files (default ./.lake, env CDC_ENRICH_LAKE)"
    )
    with_pipeline = argparse.ArgumentParser(add_help=False)
    with_pipeline.add_argument("--pipeline", default=str(DEFAULT_PIPELINE), help="pipeline declaration (YAML); default: the shop demo")
    kafka = argparse.ArgumentParser(add_help=False)
    kafka.add_argument("--bootstrap", help="Kafka bootstrap servers (default: env CDC_ENRICH_KAFKA_BOOTSTRAP, the pipeline file, or the local stack)")

    parser = argparse.ArgumentParser(
        prog="cdc-enrich",
        description="Keep Delta gold tables equal to the SQL join of Debezium-captured source tables.",
    )
    # Its own --lake (not the shared parent's action): a subcommand's --lake, when given, wins.
    parser.add_argument("--lake", default=None, help=common._actions[0].help)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument("-q", "--quiet", action="store_true", help="no progress lines (results, reports and errors still print)")
    loudness.add_argument("-v", "--verbose", action="store_true", help="debug logging of the engine (per-phase timings of every batch)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("stack", parents=[common], help="start/stop/report the local Kafka broker", description=cmd_stack.__doc__)
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--port", type=int, help="broker port on 127.0.0.1 (controller uses port+1; default 19092 or CDC_ENRICH_KAFKA_PORT)")
    p.add_argument("--with-postgres", action="store_true", help="also PostgreSQL (port 15432) and Debezium's connector")
    p.add_argument("--secure", action="store_true", help="also a SASL_SSL listener (SCRAM-SHA-512 over TLS) on port+2, as managed Kafka services offer")
    p.add_argument("--pipeline", default=str(DEFAULT_PIPELINE), help="pipeline whose tables Debezium captures (with --with-postgres)")
    p.set_defaults(func=cmd_stack)

    p = sub.add_parser("simulate", parents=[common, with_pipeline, kafka], help="produce a Debezium workload", description=cmd_simulate.__doc__)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale", type=int, default=1, help="initial snapshot size multiplier")
    p.add_argument("--events", type=int, default=2000, help="change events after the snapshot")
    p.add_argument("--rate", type=float, help="events per second (default: as fast as possible)")
    p.add_argument("--chaos", choices=("none", "some", "heavy"), default="none")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--schemas-enabled", action="store_true", help="JSON converter with schemas.enable=true")
    p.add_argument("--truth", help="where to write the source truth (default <lake>/truth/<pipeline>)")
    p.add_argument("--dry-run", action="store_true", help="generate and record the truth, produce nothing")
    p.add_argument("--target", choices=("kafka", "postgres"), default="kafka",
                   help="kafka: simulated Debezium records; postgres: real transactions (--events of them) on the stack's database")
    p.add_argument("--initial", action="store_true", help="with --target postgres: insert the initial rows first")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("run", parents=[common, with_pipeline, kafka], help="run pipeline stages", description=cmd_run.__doc__)
    p.add_argument("--stage", choices=("all",) + STAGES, default="all")
    p.add_argument("--trigger", choices=TRIGGERS, help="default: the pipeline's options.trigger")
    p.add_argument("--continuous", action="store_true",
                   help="bronze, silver and gold queries together, each on its interval (options.intervals), until SIGTERM or Ctrl-C")
    p.add_argument("--timeout", type=float, help="with --continuous: stop cleanly after this many seconds")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("verify", parents=[common, with_pipeline], help="compare gold with the oracle join", description=cmd_verify.__doc__)
    p.add_argument("--truth", help="simulator truth directory (default <lake>/truth/<pipeline> if present)")
    p.add_argument("--from-silver", action="store_true", help="use silver current as the source state, not the simulator truth")
    p.add_argument("--view", action="append", help="only this view (repeatable)")
    p.add_argument("--against", choices=("truth", "postgres"), default="truth",
                   help="postgres: wait until caught up with the database's LSN, then compare gold and silver with joins run inside PostgreSQL")
    p.add_argument("--timeout", type=float, default=600, help="with --against postgres: seconds to wait for catch-up")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (with --against postgres)")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("sql", parents=[common, with_pipeline], help="run a SQL query, print a table", description=cmd_sql.__doc__)
    p.add_argument("query", help="e.g. \"SELECT * FROM shop_gold.orders_enriched VERSION AS OF 1 LIMIT 5\"")
    p.add_argument("--limit", type=int, default=50, help="rows to print (default 50)")
    p.add_argument("--pipeline-schemas", action="store_true", help="create the pipeline's schemas first")
    p.set_defaults(func=cmd_sql)

    p = sub.add_parser("history", parents=[common, with_pipeline], help="a key's silver history, or state as of a source time", description=cmd_history.__doc__)
    p.add_argument("source")
    p.add_argument("--key", help="primary key value(s), comma-separated for compound keys")
    p.add_argument("--as-of", help="source time, e.g. '2026-01-01 12:00:00' (UTC)")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("bench", parents=[common, with_pipeline, kafka], help="benchmarks against a side-by-side baseline", description=cmd_bench.__doc__)
    p.add_argument("which", choices=("ingest", "silver", "gold", "as_of", "global_row", "pipeline", "freshness", "all"))
    p.add_argument("--events", type=int, help="ingest: events produced; silver: changes per batch; pipeline: simulated changes (default 100000)")
    p.add_argument("--batch-sizes", help="pipeline: comma list of records per trigger (default 1000,10000,100000)")
    p.add_argument("--rows", type=int, help="gold: fact table rows; as_of: events (default 1000000)")
    p.add_argument("--fractions", help="gold: comma list of changed shares of the fact table (default 0.0001,0.001,0.01,0.1,0.25)")
    p.add_argument("--workloads", help="gold: comma list of uniform, oltp, hot_parent (default all three); "
                                       "as_of: new_events, late_versions (default both)")
    p.add_argument("--refresh", help="gold: comma list of options.gold_refresh modes to time side by side in every cell "
                                     "(auto, incremental, recompute; default auto): calibrates the cost model")
    p.add_argument("--repeats", type=_at_least_one, help="gold: batches timed per cell, each a fresh batch of the same shape; "
                                                "the summary gives each cell's medians (default 1)")
    p.add_argument("--out", help="also write the result as JSON to this file (for testkit.bench.plot)")
    p.add_argument("--rates", help="freshness: comma list of records per second (default 100,500,2000)")
    p.add_argument("--schedules", help="freshness: comma list of continuous schedules, each run at every rate "
                   "(chained, concurrent; default: the pipeline's options.continuous)")
    p.add_argument("--intervals", help="freshness: the stages' processing-time intervals in seconds, e.g. "
                   "'bronze=5,silver=1,gold=1' (default 1 second each)")
    p.add_argument("--duration", type=float, default=180, help="freshness: seconds of changes sent at each rate (default 180)")
    p.add_argument("--drain", type=float, default=120, help="freshness: seconds the run goes on after the last send (default 120)")
    p.add_argument("--with-postgres", action="store_true",
                   help="freshness: changes from a real PostgreSQL through Debezium's connector (the local stack's; "
                        "--rates in transactions per second), timed from each transaction's commit")
    p.add_argument("--parsers", default="hybrid",
                   help="ingest: comma list of bronze parsers to time side by side (hybrid = the JVM decoder, "
                        "sql = the SQL pass, python); the first one's ratio is the headline")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("maintain", parents=[common, with_pipeline], help="compact history, OPTIMIZE and VACUUM every table", description=cmd_maintain.__doc__)
    p.add_argument("--step", action="append", choices=("compact", "optimize", "vacuum"), help="only these steps (repeatable; default: all three)")
    p.set_defaults(func=cmd_maintain)

    p = sub.add_parser("migrate-silver", parents=[common, with_pipeline], help="move silver of the earlier two-table layout into the store",
                       description=cmd_migrate_silver.__doc__)
    p.set_defaults(func=cmd_migrate_silver)

    p = sub.add_parser("docs", parents=[common, with_pipeline], help="write the pipeline's data dictionary (Markdown)", description=cmd_docs.__doc__)
    p.add_argument("--out", help="file to write ('-': standard output; default <lake>/<pipeline>-data-dictionary.md)")
    p.set_defaults(func=cmd_docs)

    p = sub.add_parser("dashboard", parents=[common, with_pipeline], help="write the operators' page (one HTML file)", description=cmd_dashboard.__doc__)
    p.add_argument("--out", help="file to write (default <lake>/quality/dashboard/<pipeline>.html)")
    p.set_defaults(func=cmd_dashboard)

    p = sub.add_parser("validate", parents=[common, with_pipeline], help="check a pipeline file (no Spark)", description=cmd_validate.__doc__)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("demo", parents=[common, with_pipeline], help="the whole service end to end on the local stack", description=cmd_demo.__doc__)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--events", type=int, default=3000)
    p.add_argument("--chaos", choices=("none", "some", "heavy"), default="some")
    p.add_argument("--with-postgres", action="store_true",
                   help="real PostgreSQL + Debezium instead of the simulator: --events transactions, verified against the database")
    p.set_defaults(func=cmd_demo)
    return parser


def _version() -> str:
    """The installed distribution's version (a checkout that was never installed says so)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cdc-enrich")
    except PackageNotFoundError:
        return "(not installed)"


def _loudness(args: argparse.Namespace) -> None:
    """-q silences progress lines; -v turns on the engine's debug log (phase timings)."""
    global _QUIET
    _QUIET = bool(getattr(args, "quiet", False))
    if getattr(args, "verbose", False):
        import logging

        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("lakehouse").setLevel(logging.DEBUG)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _loudness(args)
    try:
        return int(args.func(args) or 0)
    except CdcEnrichError as exc:
        print(f"cdc-enrich {args.command}: error: {exc}", file=sys.stderr)
        return exit_code(exc)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in DEV_PACKAGES:
            raise
        print(f"cdc-enrich {args.command}: error: this command needs the local stack and test kit of a checkout "
              f"({exc.name} is not in the installed wheel): run it from a clone after `make setup`", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
