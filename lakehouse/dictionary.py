"""The data dictionary of a pipeline, as Markdown: every table, column, key, join and rule, with
the descriptions of the pipeline file (`cdc-enrich docs`). Built from the declaration alone
(no Spark), so it is current with the file it documents.
"""

from __future__ import annotations

from datetime import timedelta

from lakehouse.comments import GOLD_FRESHNESS, ROW_HASH_GOLD, SILVER_COLUMNS
from lakehouse.declaration import Join, Pipeline, Source, View
from lakehouse.metrics import metrics_table
from lakehouse.quality.suites import build_suites
from lakehouse.tables import (
    bronze_table,
    gold_table,
    late_changes_table,
    quality_results_table,
    quarantine_table,
    silver_current_table,
    silver_history_table,
    silver_store_table,
)

ORDERING = {
    "postgres": "PostgreSQL LSN (source.lsn, then the transaction's order)",
    "mysql": "MySQL binlog position (file, position, row)",
    "ts_ms": "the source's commit timestamp (ts_ms), ties by Kafka position",
}


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def _source(pipeline: Pipeline, source: Source) -> list[str]:
    lines = [f"### Source `{source.name}`", ""]
    if source.description:
        lines += [source.description, ""]
    lines += [
        f"- Topic `{source.topic}`; primary key ({', '.join(source.primary_key)}); kind: {source.kind}; "
        f"order of changes: {ORDERING.get(source.sequence, source.sequence)}; replica identity: {source.replica_identity}.",
        f"- Tables: bronze `{bronze_table(pipeline, source)}`, silver current `{silver_current_table(pipeline, source)}`, "
        f"silver history `{silver_history_table(pipeline, source)}` (views of the store `{silver_store_table(pipeline, source)}`, "
        "whose versions Delta's time travel and change feed read).",
    ]
    for fk in source.foreign_keys:
        lines.append(f"- Foreign key `{fk.name}`: ({', '.join(fk.columns)}) references `{fk.references}`.")
    lines += [""] + _table(
        ("column", "type", "description"),
        [(f"`{c.name}`" + (" (key)" if c.name in source.primary_key else ""), c.type, c.description or "") for c in source.columns],
    )
    return lines + [""]


def _view(pipeline: Pipeline, view: View) -> list[str]:
    lines = [f"### View `{view.name}`", ""]
    if view.description:
        lines += [view.description, ""]
    keys = pipeline.view_key(view)
    lines += [
        f"- Analyst view `{pipeline.tables.qualified('analyst', view.name)}`: the columns below plus `_source_ts` and `_updated_at`.",
        f"- Gold table `{gold_table(pipeline, view.name)}`, {_rows_of(view)}; key ({', '.join(keys)}).",
    ]
    for join in view.joins:
        on = {"foreign_key": f"foreign key `{join.parent_alias}.{join.foreign_key}`",
              "expression": f"its key = `{join.key}` (a global table, broadcast)",
              "primary_key": f"the primary key of `{join.parent_alias}`",
              }.get(join.kind) or _window_words(join)
        lines.append(f"- {join.type} join `{join.table}` as `{join.alias}` on {on}"
                     + (f", the version valid {view.lookup_time} (silver history)." if view.temporal else "."))
    rows = []
    for col in view.columns:
        source = pipeline.source(view.table_of(col.alias))
        column = source.column(col.column)
        rows.append((f"`{col.name}`", f"{col.alias}.{col.column}", column.type, col.description or column.description or ""))
    lines += [""] + _table(("column", "from", "type", "description"), rows)
    lines += [
        "",
        ("`_pair`, `_window_key` (gold table only): the pair's primary keys and join key as JSON; " if view.windowed else
         "Lineage columns (gold table only), per alias: `_<alias>_hash`, `_<alias>_seq` (the version a row was built from); ")
        + f"`_row_hash`: {ROW_HASH_GOLD}. Freshness: " + "; ".join(f"`{c}`: {t}" for c, t in GOLD_FRESHNESS.items()) + ".",
        "",
    ]
    return lines


def _rows_of(view: View) -> str:
    if view.windowed:
        return (f"one row per pair of `{view.base}` and `{view.joins[0].table}` events within the window "
                "(an unmatched event's row once its window and grace closed)")
    return f"one row per `{view.base}` row"


def _window_words(join: Join) -> str:
    window = join.window
    assert window is not None
    on = " and ".join(f"`{join.alias}.{mine}` = `{join.parent_alias}.{theirs}`" for mine, theirs in window.on)
    return (f"{on}, its time within {_duration(window.before)} before and {_duration(window.after)} after the base event's "
            f"(grace {_duration(window.grace)}; later events are recorded in `_late_changes`, not joined)")


def _duration(span: timedelta) -> str:
    """'2 days', '1 hour', '90 seconds': the largest unit that divides the span."""
    seconds = int(span.total_seconds())
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def data_dictionary(pipeline: Pipeline) -> str:
    """The pipeline's data dictionary (Markdown)."""
    o = pipeline.options
    lines = [
        f"# Data dictionary: pipeline `{pipeline.name}`",
        "",
        f"Generated by `cdc-enrich docs` from `{pipeline.path}`. Gold views are kept equal to the SQL join of the "
        "sources' latest state; silver keeps every version of every row.",
        "",
        "## Sources",
        "",
    ]
    for source in pipeline.sources.values():
        lines += _source(pipeline, source)
    lines += ["## Views", ""]
    for view in pipeline.views.values():
        lines += _view(pipeline, view)
    lines += ["## The service's own columns (silver)", ""]
    lines += _table(("column", "meaning"), [(f"`{c}`", text) for c, text in SILVER_COLUMNS.items()]) + [""]
    lines += [
        "## Rules",
        "",
        f"- Silver history keeps versions for {o.history_retention_days} days (`cdc-enrich maintain` compacts older ones); "
        f"Delta time travel reaches {o.time_travel_days} days back.",
        f"- A change more than {o.late_grace_days} days behind its key's latest version is applied and recorded in "
        f"`{late_changes_table(pipeline)}`.",
        f"- Records that cannot be decoded go to `{quarantine_table(pipeline)}` with the reason; nothing is dropped.",
        f"- Gold batches: `{o.gold_refresh}` (auto: a cost model picks incremental or recompute per batch; "
        f"an incremental batch's fixed cost counts as {o.gold_incremental_overhead_rows:,} source rows read).",
        f"- Trigger `{o.trigger}`; interval {o.processing_time}"
        + ("".join(f", {stage} {every}" for stage, every in sorted(o.intervals.items())) if o.intervals else "") + ".",
        f"- Quality results: `{quality_results_table(pipeline)}`; stream metrics: `{metrics_table(pipeline)}`.",
        "",
        "## Quality checks",
        "",
    ]
    rows = []
    for suite in build_suites(pipeline):
        for expectation in suite.suite.expectations:
            meta = expectation.meta or {}
            rows.append((suite.layer, f"`{suite.table}`", str(meta.get("check", "")), str(meta.get("severity", "")), expectation.description or type(expectation).__name__))
    lines += _table(("layer", "table", "check", "severity", "what"), rows)
    return "\n".join(lines) + "\n"
