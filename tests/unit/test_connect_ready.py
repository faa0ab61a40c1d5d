"""What lets the engine run under Spark Connect (serverless, Standard access mode clusters),
checked in the source: classic-only APIs appear only where a classic session is certain.

- `sparkContext`, `SparkContext` and py4j: the local session's builder and the Column cache key
  (`lakehouse/spark.py`), the local driver's remembered py4j lookups (`lakehouse/py4j_cache.py`,
  which only that builder installs), and bronze's JVM decoder (`lakehouse/bronze/fast_jvm.py`), which
  `decoding_with` never picks under Connect;
- no RDDs, `cache()`, `persist()` anywhere (serverless refuses them);
- no `DeltaTable` builder: Delta is written through SQL (`lakehouse/deltasql.py`), which a plain
  Connect server runs without Delta's Connect plugin.
The end-to-end proof is tests/connect/test_spark_connect.py.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = [p for d in ("lakehouse", "jobs", "cdc_enrich") for p in sorted((ROOT / d).rglob("*.py"))]
CLASSIC_ONLY = {"lakehouse/spark.py", "lakehouse/py4j_cache.py", "lakehouse/bronze/fast_jvm.py"}


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """Lines of code, comments and docstring lines dropped (a mention is not a call)."""
    out, in_doc = [], False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        quotes = stripped.count('"""')
        if in_doc or stripped.startswith('"""'):
            in_doc = (in_doc and quotes == 0) or (not in_doc and quotes == 1)
            continue
        out.append((n, line.split("#", 1)[0]))
    return out


def _uses(pattern: str, allowed: set[str] = frozenset()) -> list[str]:
    found = []
    for path in ENGINE:
        rel = path.relative_to(ROOT).as_posix()
        if rel in allowed:
            continue
        found += [f"{rel}:{n}: {text.strip()}" for n, text in _code_lines(path) if re.search(pattern, text)]
    return found


def test_sparkcontext_and_py4j_only_where_the_session_is_classic() -> None:
    assert _uses(r"sparkContext|SparkContext|(import|from) py4j|\b_jvm\b|\._jdf|_jsparkSession", CLASSIC_ONLY) == []


def test_no_caching_and_no_rdds() -> None:
    assert _uses(r"\.cache\(\)|\.persist\(|\.unpersist\(|\.rdd\b") == []


def test_delta_is_written_through_sql_not_deltatable_builders() -> None:
    assert _uses(r"\bDeltaTable\b") == []


def test_the_scan_sees_code_lines() -> None:
    """The checks above would pass on an empty scan: they do see the calls they look for."""
    assert _uses(r"localCheckpoint\(")
    assert [u for u in _uses(r"sparkContext") if u.startswith("lakehouse/spark.py:")]
