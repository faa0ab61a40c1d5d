"""Job: bronze Delta tables -> versioned silver tables (current + history, exactly-once).

Thin on purpose: parse arguments, load and validate the pipeline file, get the Spark session
(Databricks' own, or a local Delta-enabled one), run `lakehouse.silver.run_silver`, print the
progress lines and the report. Rerunning resumes from each stream's checkpoint.

    python -m jobs.silver_apply --pipeline schemas/shop/pipeline.yml [--source customers ...]
"""

from __future__ import annotations

import argparse
import logging

from lakehouse.entry import TRIGGERS, load, resolve_trigger, run_main


def build_parser() -> argparse.ArgumentParser:
    """The task's arguments (the bundle's parameters are checked against this in tests)."""
    parser = argparse.ArgumentParser(prog="silver_apply", description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", required=True, help="pipeline declaration (YAML)")
    parser.add_argument("--lake", default=None, help="local lake root (tables, checkpoints); default .lake or $CDC_ENRICH_LAKE")
    parser.add_argument("--catalog", default=None, help="Unity Catalog catalog of every schema (default: $CDC_ENRICH_CATALOG, then the pipeline file's)")
    parser.add_argument("--source", action="append", default=None,
                        help="a source to apply (repeatable, or comma-separated); default: every declared source")
    parser.add_argument("--trigger", choices=TRIGGERS, default=None,
                        help="available_now: drain what is there and stop; processing_time: run continuously (default: the pipeline's)")
    return parser


def _args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the silver stage; 0 on success, 2 on a configuration error, 1 on a failure."""
    args = _args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_main("silver_apply", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from lakehouse.paths import lake_root
    from lakehouse.silver import run_silver
    from lakehouse.spark import ensure_schemas, get_spark

    pipeline = load(args.pipeline, args.catalog)
    sources = [s.strip() for arg in args.source for s in arg.split(",") if s.strip()] if args.source else None
    for name in sources or ():
        pipeline.source(name)  # unknown names fail here, before any stream starts
    trigger = resolve_trigger(args.trigger, pipeline)
    lake = lake_root(args.lake)
    spark = get_spark(lake, app_name="silver-apply")
    ensure_schemas(spark, pipeline)
    report = run_silver(spark, pipeline, lake, sources=sources, trigger=trigger, progress=lambda message: print(message, flush=True))
    print(report.render(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
