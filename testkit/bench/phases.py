"""What each phase of a gold batch ran: Spark jobs, and files and rows its table scans read.

The engine records each phase's wall-clock span (`lakehouse.gold.clock.PhaseClock`); the bench
reads the Spark UI's REST API after the run (its jobs, and its SQL executions with their plans'
scan metrics) and counts each job or execution in the phase during which it was submitted. Only
one view runs at a time in a bench, so everything submitted in a span is that phase's.

Scans are Parquet file scans (Delta tables): "number of files read" and "number of output rows"
of each `Scan parquet <table>` node. A MERGE's scans inside Delta's command are executions of
their own in the UI, so they count too (a gold MERGE's phase shows gold read three times); a
local checkpoint read back is not a Parquet scan and is not counted. An eager checkpoint's own
scans are counted; a lazy one's (`localCheckpoint(eager=False)`) may not be: on the as-of bench
(2026-12-06) the events' read vanished from the counts when its frame was checkpointed lazily
inside the chain's eager checkpoint, while the gold key walk's lazily checkpointed lookups are
counted. Treat a phase's rows as a lower bound. Each phase also gets the seconds during which a
Spark job was running (`job_seconds`): what is left of its span is the driver's own work.
"""

from __future__ import annotations

import json
import re
import urllib.request
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

from pyspark.sql import SparkSession

Span = tuple[str, float, float]  # phase, start, end (epoch seconds)

SCAN_PREFIX = "Scan parquet "


def ui_time(text: str) -> float:
    """Epoch seconds of a time as the UI's REST API writes it.

    >>> ui_time("1970-01-01T00:00:01.500GMT")
    1.5
    """
    return datetime.strptime(text.replace("GMT", ""), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()


def metric_number(value: str) -> int:
    """The first number of a UI metric value ("1,234", "1,234 (min, med, max ...)")."""
    found = re.search(r"\d[\d,]*", value or "")
    return int(found.group(0).replace(",", "")) if found else 0


#: Call sites that say what kind of job it was (a streaming batch's jobs all carry the query's
#: description, and a JVM call site names Spark's or Delta's machinery, not the engine's line).
JOB_SITES = (
    ("withThreadLocalCaptured", "query stage (adaptive execution, broadcast)"),
    ("recordDeltaOperation", "Delta operation"),
    ("clientserver.py", "action called from Python"),
    ("localCheckpoint", "local checkpoint"),
)


def job_kind(job: dict[str, Any]) -> str:
    """What kind of job it was, from the UI's REST entry: its call site mapped by `JOB_SITES`,
    else the action and the call site's file and line ("count at frames.py:131"); "in a Delta
    command" when Delta described it as its own (its description then starts with "Delta:")."""
    first = ((job.get("name") or "").strip().splitlines() or [""])[0]
    kind = next((name for site, name in JOB_SITES if site in first), None)
    if kind is None and " at " in first:
        action, site = first.split(" at ", 1)
        kind = f"{action} at {site.rsplit('/', 1)[-1]}"
    delta = (job.get("description") or "").startswith("Delta:")
    return (kind or first or "unnamed")[:80] + (", in a Delta command" if delta else "")


def scans_of(execution: dict[str, Any]) -> list[dict[str, Any]]:
    """The Parquet scans of one SQL execution (REST `sql?details=true`): table, files, rows."""
    scans = []
    for node in execution.get("nodes", []):
        name = node.get("nodeName", "")
        if not name.startswith(SCAN_PREFIX):
            continue
        metrics = {m["name"]: m["value"] for m in node.get("metrics", [])}
        scans.append({
            "table": name[len(SCAN_PREFIX):].strip(),
            "files": metric_number(metrics.get("number of files read", "")),
            "rows": metric_number(metrics.get("number of output rows", "")),
        })
    return scans


def phase_of(spans: Sequence[Span], at: float) -> str | None:
    """The phase whose span holds `at` (None: outside every span)."""
    for phase, start, end in spans:
        if start <= at <= end:
            return phase
    return None


def attribute(spans: Sequence[Span], jobs: Iterable[tuple[float, str]], executions: Iterable[tuple[float, list[dict[str, Any]]]]) -> dict[str, dict[str, Any]]:
    """Per phase (in the spans' order): Spark jobs submitted in it (`jobs`: submission time and
    what the job was, counted per kind in `job_kinds`), and the files and rows its executions'
    scans read, per table and in all.

    >>> spans = [("keys", 10.0, 12.0), ("merge", 12.0, 15.0)]
    >>> jobs = [(10.5, "collect"), (11.0, "collect"), (13.0, "Delta: Filtering files"), (99.0, "x")]
    >>> out = attribute(spans, jobs, [(11.5, [{"table": "t", "files": 2, "rows": 50}])])
    >>> out["keys"]["jobs"], out["keys"]["job_kinds"], out["keys"]["files_read"], out["keys"]["rows_read"], out["merge"]["jobs"]
    (2, {'collect': 2}, 2, 50, 1)
    >>> out["keys"]["sql_executions"], out["merge"]["sql_executions"]
    (1, 0)
    """
    out: dict[str, dict[str, Any]] = {}
    for phase, _, _ in spans:
        out.setdefault(phase, {"jobs": 0, "job_kinds": {}, "sql_executions": 0, "files_read": 0, "rows_read": 0, "tables": {}})
    for at, kind in jobs:
        phase = phase_of(spans, at)
        if phase is not None:
            out[phase]["jobs"] += 1
            out[phase]["job_kinds"][kind] = out[phase]["job_kinds"].get(kind, 0) + 1
    for at, scans in executions:
        phase = phase_of(spans, at)
        if phase is None:
            continue
        out[phase]["sql_executions"] += 1
        for scan in scans:
            entry = out[phase]
            entry["files_read"] += scan["files"]
            entry["rows_read"] += scan["rows"]
            table = entry["tables"].setdefault(scan["table"], {"files": 0, "rows": 0})
            table["files"] += scan["files"]
            table["rows"] += scan["rows"]
    return out


def job_seconds(spans: Sequence[Span], runs: Iterable[tuple[float, float]]) -> dict[str, float]:
    """Per phase, the seconds of its span during which at least one Spark job ran (`runs`:
    each job's submission and completion); the rest of the span the driver worked alone
    (planning, Delta's log and commits, Python) or waited.

    >>> job_seconds([("keys", 0.0, 4.0), ("merge", 4.0, 6.0)], [(0.5, 1.5), (1.0, 2.0), (3.5, 4.5), (9.0, 9.5)])
    {'keys': 2.0, 'merge': 0.5}
    """
    busy: dict[str, float] = {}
    ordered = sorted(runs)
    for phase, start, end in spans:  # a phase may have several spans (one per batch)
        reach = start  # the span covered so far
        for began, ended in ordered:
            if began >= end:
                break
            began, ended = max(began, reach), min(ended, end)
            if ended > began:
                busy[phase] = busy.get(phase, 0.0) + ended - began
                reach = ended
        busy.setdefault(phase, 0.0)
    return {phase: round(seconds, 2) for phase, seconds in busy.items()}


def ui_rest(spark: SparkSession, path: str) -> Any:
    """The Spark UI's REST API answer for `path` under this application (raises OSError when
    the UI does not answer; callers check `uiWebUrl` first)."""
    url = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/{path}", timeout=30) as r:
        return json.load(r)


def phase_resources(spark: SparkSession, spans: Sequence[Span], complete_only: bool = False) -> dict[str, dict[str, Any]] | None:
    """`attribute` over the jobs and SQL executions the UI holds (None without a UI). Call it
    right after the run: the UI keeps the latest 1,000 jobs and executions. `complete_only`
    leaves out the spans that began before the oldest job or execution the UI still holds
    (a long run's early spans, whose counts would be short)."""
    if not spans or not spark.sparkContext.uiWebUrl:
        return None
    try:
        jobs = [j for j in ui_rest(spark, "jobs") if "submissionTime" in j]
        executions = ui_rest(spark, "sql?details=true&planDescription=false&offset=0&length=100000")
    except OSError:
        return None
    timed = [(ui_time(e["submissionTime"]), e) for e in executions if "submissionTime" in e]
    submitted = [(ui_time(j["submissionTime"]), j) for j in jobs]
    if complete_only:
        oldest = max(min((t for t, _ in submitted), default=0.0), min((t for t, _ in timed), default=0.0))
        spans = [span for span in spans if span[1] >= oldest]
        if not spans:
            return {}
    first, last = min(s[1] for s in spans), max(s[2] for s in spans)
    out = attribute(spans, [(t, job_kind(j)) for t, j in submitted if first <= t <= last],
                    [(t, scans_of(e)) for t, e in timed if first <= t <= last])
    ran = [(t, ui_time(j["completionTime"])) for t, j in submitted if "completionTime" in j]
    for phase, seconds in job_seconds(spans, ran).items():
        out[phase]["job_s"] = seconds
    return out
