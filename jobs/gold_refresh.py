"""Job entry point: bring gold views up to date with silver (Databricks task or local)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from lakehouse.entry import TRIGGERS, check_with_spark, load, resolve_trigger, run_main


def build_parser() -> argparse.ArgumentParser:
    """`gold_refresh --pipeline P [--lake L] [--view V ...] [--trigger available_now|processing_time]`."""
    parser = argparse.ArgumentParser(prog="gold_refresh", description=build_parser.__doc__)
    parser.add_argument("--pipeline", required=True, help="pipeline declaration (YAML)")
    parser.add_argument("--lake", default=None, help="local lake root (ignored where a session exists)")
    parser.add_argument("--catalog", default=None, help="Unity Catalog catalog of every schema (default: $CDC_ENRICH_CATALOG, then the pipeline file's)")
    parser.add_argument("--view", action="append", default=None, help="only this view (repeatable)")
    parser.add_argument("--trigger", choices=TRIGGERS, default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the gold stage; 0 on success, 2 on a configuration error, 1 on a failure."""
    args = build_parser().parse_args(argv)
    return run_main("gold_refresh", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from lakehouse.gold import run_gold
    from lakehouse.paths import lake_root
    from lakehouse.spark import ensure_schemas, get_spark

    pipeline = load(args.pipeline, args.catalog)
    trigger = resolve_trigger(args.trigger, pipeline)
    spark = get_spark(args.lake)
    ensure_schemas(spark, pipeline)
    check_with_spark(spark, pipeline)  # key expressions, before any query starts
    report = run_gold(
        spark,
        pipeline,
        lake_root(args.lake),
        views=args.view,
        trigger=trigger,
        progress=lambda message: print(f"  {message}", flush=True),
    )
    print(report.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
