"""Job entry point: upkeep of every table the pipeline owns (Databricks task or local):
silver history compaction, OPTIMIZE, VACUUM (`lakehouse.upkeep`)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from lakehouse.entry import load, run_main
from lakehouse.upkeep import STEPS


def build_parser() -> argparse.ArgumentParser:
    """`maintain --pipeline P [--lake L] [--step compact|optimize|vacuum ...]`."""
    parser = argparse.ArgumentParser(prog="maintain", description=build_parser.__doc__)
    parser.add_argument("--pipeline", required=True, help="pipeline declaration (YAML)")
    parser.add_argument("--lake", default=None, help="local lake root (ignored where a session exists)")
    parser.add_argument("--catalog", default=None, help="Unity Catalog catalog of every schema (default: $CDC_ENRICH_CATALOG, then the pipeline file's)")
    parser.add_argument("--step", action="append", choices=STEPS, default=None, help="only this step (repeatable; default: all)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the upkeep; 0 when every step succeeded, 1 when one failed (the others still ran), 2 on a configuration error."""
    args = build_parser().parse_args(argv)
    return run_main("maintain", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from lakehouse.spark import get_spark
    from lakehouse.upkeep import maintain

    pipeline = load(args.pipeline, args.catalog)
    spark = get_spark(args.lake, app_name="maintain")
    report = maintain(spark, pipeline, tuple(args.step or STEPS), progress=lambda message: print(f"  {message}", flush=True))
    print(report.render(), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
