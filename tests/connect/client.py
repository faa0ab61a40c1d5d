"""The pipeline as a Spark Connect client runs it: bronze (SQL pass), silver, gold, verify and
quality through one `get_spark()` session, which `SPARK_REMOTE` makes a Connect session.

Run as its own process by tests/connect/test_spark_connect.py (a process is either a Connect
client or a classic driver: pyspark picks its column implementation process-wide). Prints one
JSON line with what each stage reported.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from lakehouse.bronze import run_bronze
from lakehouse.declaration import Pipeline, load_pipeline
from lakehouse.gold import run_gold
from lakehouse.outcomes import prune_outcomes
from lakehouse.quality.runner import run_quality
from lakehouse.silver import run_silver
from lakehouse.spark import ensure_schemas, get_spark, is_connect
from lakehouse.verify.views import verify_pipeline
from testkit.bench.ingest import isolated_pipeline
from tests.shop_views import narrowed

#: One view and its two sources: every stage, and few queries to start. (With the as-of view
#: `payments_enriched` too, measured once: it passes, verify --truth checking it against the
#: simulator's version log, but the test takes 168 s instead of 131 s in the suite, which the
#: 20-minute budget cannot pay; tests/integration/test_gold_as_of.py covers it in the slow tier.)
VIEWS = ("orders_enriched",)


def connect_pipeline(path: Path, tag: str) -> Pipeline:
    """The shop pipeline under its own names (`tag`), narrowed to `VIEWS` and the sources they read."""
    return narrowed(isolated_pipeline(load_pipeline(path), tag), *VIEWS)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipeline", type=Path, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--lake", type=Path, required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--truth", type=Path, required=True)
    args = parser.parse_args()

    assert os.environ.get("SPARK_REMOTE"), "set SPARK_REMOTE to the server's sc:// URL"
    seconds: dict[str, float] = {}  # per step, so that the test's report says where its minutes go
    clock = time.monotonic()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.monotonic()
        seconds[step] = round(now - clock, 1)
        clock = now

    spark = get_spark(args.lake)
    pipeline = connect_pipeline(args.pipeline, args.tag)
    ensure_schemas(spark, pipeline)
    lap("session")
    lines: list[str] = []
    bronze = run_bronze(spark, pipeline, args.lake, args.bootstrap, progress=lines.append)
    lap("bronze")
    silver = run_silver(spark, pipeline, args.lake, progress=lines.append)
    lap("silver")
    gold = run_gold(spark, pipeline, args.lake, progress=lines.append)
    lap("gold")
    again = run_bronze(spark, pipeline, args.lake, args.bootstrap)  # resumes from its checkpoints
    lap("bronze again")
    verify = verify_pipeline(spark, pipeline, args.truth)
    lap("verify")
    quality = run_quality(spark, pipeline)  # no lake: no Data Docs (HTML rendering, not Connect)
    lap("quality")
    pruned = prune_outcomes(spark, pipeline, keep_days=0)  # upkeep's step: the outcomes were read back
    lap("prune")
    print(json.dumps({
        "connect": is_connect(spark),
        "bronze": {"records": bronze.records, "rows": bronze.rows, "quarantined": bronze.quarantined,
                   "batches": bronze.batches, "decoding": bronze.decoding, "again": again.records},
        "silver": silver.as_dict(),
        "gold": {name: {"batches": run.batches, "changes_read": run.changes_read, "inserted": run.inserted}
                 for name, run in gold.views.items()},
        "verify_ok": verify.ok,
        "verify": verify.render(),
        "quality": {"evaluated": quality.evaluated, "validated": len(quality.validated), "ok": quality.ok},
        "outcomes_pruned": pruned,
        "progress_lines": lines,
        "seconds": seconds,
    }))


if __name__ == "__main__":
    main()
