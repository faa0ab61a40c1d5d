"""Entry point: run the pipeline's great-expectations suites and record the results in Delta.

Thin on purpose (the logic lives in `lakehouse.quality.runner`): load the pipeline, get the session
(Databricks' own, or a local Delta session under --lake), run, print the summary table, and
exit 1 when an error-severity expectation failed so the job task shows red. Warnings (such as
a non-empty quarantine) are printed but do not fail the task.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from lakehouse.entry import load, run_main


def build_parser() -> argparse.ArgumentParser:
    """The task's arguments (the bundle's parameters are checked against this in tests)."""
    parser = argparse.ArgumentParser(prog="quality_check", description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", required=True, help="the pipeline declaration (YAML)")
    parser.add_argument("--lake", default=None, help="local lake root (ignored on Databricks)")
    parser.add_argument("--catalog", default=None, help="Unity Catalog catalog of every schema (default: $CDC_ENRICH_CATALOG, then the pipeline file's)")
    parser.add_argument(
        "--table",
        action="append",
        default=None,
        help="validate only this table (catalog name or layer.name, e.g. gold.orders_enriched); repeatable",
    )
    parser.add_argument(
        "--run-id",
        default=None,
        help="id of this run; re-running with the same id replaces its rows (e.g. {{job.run_id}})",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the quality suites; 0 when they pass, 1 when a check fails, 2 on a configuration error."""
    args = build_parser().parse_args(argv)
    return run_main("quality_check", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from lakehouse.paths import lake_root
    from lakehouse.spark import get_spark
    from lakehouse.quality.runner import run_quality, select_suites
    from lakehouse.quality.suites import build_suites

    pipeline = load(args.pipeline, args.catalog)
    select_suites(build_suites(pipeline), args.table)  # a misspelt --table fails before Spark starts
    spark = get_spark(args.lake)
    report = run_quality(spark, pipeline, lake_root(args.lake), tables=args.table, run_id=args.run_id)
    print(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
