"""Job: Debezium topics -> bronze Delta tables (exactly-once, malformed records to quarantine).

Thin on purpose: parse arguments, load and validate the pipeline file, get the Spark session
(Databricks' own, or a local Delta-enabled one), run `lakehouse.bronze.run_bronze`, print the
progress lines and the report. Rerunning resumes from the stream's checkpoint.

    python -m jobs.bronze_ingest --pipeline schemas/shop/pipeline.yml --trigger available_now
"""

from __future__ import annotations

import argparse
import logging
import sys

from lakehouse.entry import BOOTSTRAP_ENV, TRIGGERS, load, resolve_bootstrap, resolve_trigger, run_main


def build_parser() -> argparse.ArgumentParser:
    """The task's arguments (the bundle's parameters are checked against this in tests)."""
    parser = argparse.ArgumentParser(prog="bronze_ingest", description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", required=True, help="pipeline declaration (YAML)")
    parser.add_argument("--lake", default=None, help="local lake root (tables, checkpoints); default .lake or $CDC_ENRICH_LAKE")
    parser.add_argument("--catalog", default=None, help="Unity Catalog catalog of every schema (default: $CDC_ENRICH_CATALOG, then the pipeline file's)")
    parser.add_argument("--bootstrap", default=None,
                        help=f"Kafka bootstrap servers; default: ${BOOTSTRAP_ENV}, then the pipeline's, then the local stack's broker")
    parser.add_argument("--trigger", choices=TRIGGERS, default=None,
                        help="available_now: drain what is there and stop; processing_time: run continuously (default: the pipeline's)")
    parser.add_argument("--max-offsets", type=int, default=None, help="records per micro-batch (default: the pipeline's)")
    parser.add_argument("--parser", choices=("hybrid", "python"), default="hybrid", help="decoding path (python: every record through Python)")
    parser.add_argument("--only-declared-topics", action="store_true",
                        help="do not subscribe to <prefix>.<schema>.* (undeclared topics would otherwise go to quarantine)")
    parser.add_argument("--timeout", type=float, default=None, help="with processing_time: stop after this many seconds")
    return parser


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_offsets is not None and args.max_offsets < 1:
        parser.error("--max-offsets must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the bronze stage; 0 on success, 2 on a configuration error, 1 on a failure."""
    args = _args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_main("bronze_ingest", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from lakehouse.bronze import run_bronze
    from lakehouse.paths import lake_root
    from lakehouse.spark import get_spark

    pipeline = load(args.pipeline, args.catalog)
    lake = lake_root(args.lake)
    bootstrap = resolve_bootstrap(args.bootstrap, pipeline, lake).servers
    trigger = resolve_trigger(args.trigger, pipeline)
    spark = get_spark(lake, app_name=f"bronze-{pipeline.name}")
    report = run_bronze(
        spark,
        pipeline,
        lake,
        bootstrap,
        trigger=trigger,
        max_offsets_per_trigger=args.max_offsets,
        progress=lambda message: print(message, flush=True),
        parser=args.parser,
        undeclared_topics=not args.only_declared_topics,
        timeout_s=args.timeout,
    )
    print(report.render(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
