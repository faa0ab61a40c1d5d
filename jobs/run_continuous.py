"""Job: every stage at once (bronze from Kafka, silver, gold), until the job is stopped.

The bundle's continuous job runs this; the scheduled job runs the four drain tasks instead.
Thin on purpose: arguments, the validated pipeline, the session, `lakehouse.entry.run_continuously`
(which stops every query between micro-batches on SIGTERM), then the report. Rerunning resumes
every query from its checkpoint.

    python -m jobs.run_continuous --pipeline schemas/shop/pipeline.yml [--timeout 600]
"""

from __future__ import annotations

import argparse
import logging
from typing import Sequence

from lakehouse.entry import BOOTSTRAP_ENV, load, run_main


def build_parser() -> argparse.ArgumentParser:
    """The task's arguments (the bundle's parameters are checked against this in tests)."""
    parser = argparse.ArgumentParser(prog="run_continuous", description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", required=True, help="pipeline declaration (YAML)")
    parser.add_argument("--lake", default=None, help="local lake root (tables, checkpoints); default .lake or $CDC_ENRICH_LAKE")
    parser.add_argument("--catalog", default=None, help="Unity Catalog catalog of every schema (default: $CDC_ENRICH_CATALOG, then the pipeline file's)")
    parser.add_argument("--bootstrap", default=None,
                        help=f"Kafka bootstrap servers; default: ${BOOTSTRAP_ENV}, then the pipeline's, then the local stack's broker")
    parser.add_argument("--timeout", type=float, default=None, help="stop cleanly after this many seconds (default: run until stopped)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run every stage until stopped; 0 after a clean stop, 2 on a configuration error, 1 on a failure."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_main("run_continuous", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from lakehouse.entry import run_continuously
    from lakehouse.paths import lake_root
    from lakehouse.spark import ensure_schemas, get_spark

    pipeline = load(args.pipeline, args.catalog)
    lake = lake_root(args.lake)
    spark = get_spark(lake, app_name="cdc-enrich-continuous")
    ensure_schemas(spark, pipeline)
    report = run_continuously(
        spark, pipeline, lake, bootstrap=args.bootstrap, timeout_s=args.timeout, progress=lambda m: print(m, flush=True)
    )
    print(report.render(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
