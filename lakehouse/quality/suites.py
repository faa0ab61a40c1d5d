"""Expectation suites derived from the pipeline declaration, one per table.

Nothing here names a particular schema: every check follows from what the pipeline file says
(sources, primary keys, views, join types) and from the table layouts fixed in
`lakehouse.tables`. A new source or view gets its checks without a line of code.

The functions are pure: they build `gx.ExpectationSuite` objects and touch neither Spark nor a
GX context, so they can be unit-tested and reviewed as data (the runner attaches them to an
ephemeral context and runs them).

Every expectation carries `meta`:
  * `check`    -- a stable short name for dashboards and tests (`pk_unique`, `base_key_live`...),
                  independent of GX's renderings and of the SQL text of cross-table checks;
  * `severity` -- `error` (a broken guarantee; fails the run) or `warning` (informational, e.g.
                  the quarantine row count; reported, never fails the run). GX's own
                  `severity` field is set to match (critical / warning) so GX-side tooling agrees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import great_expectations as gx
from great_expectations.expectations.metadata_types import FailureSeverity
from great_expectations.expectations.row_conditions import Column as Col
from great_expectations.expectations.row_conditions import Condition

from lakehouse.declaration import Pipeline, Source, View
from lakehouse.quality.rules import rule_expectations
from lakehouse.sqltext import quote, quote_qualified
from lakehouse.tables import (
    bronze_table,
    gold_table,
    held_changes_table,
    late_changes_table,
    quarantine_table,
    silver_current_table,
)

ERROR = "error"
WARNING = "warning"

# Debezium ops plus the tombstone marker bronze writes for the null-valued record after a delete.
BRONZE_OPS: tuple[str, ...] = ("r", "c", "u", "d", "t", "tombstone")
KAFKA_COORDINATES: tuple[str, ...] = ("_topic", "_partition", "_offset")


@dataclass(frozen=True)
class TableSuite:
    """One table to validate: where it lives, which layer it belongs to, and its suite.

    `name` is the short, layer-qualified label used on the command line and in reports
    (`bronze.customers`, `gold.orders_enriched`); `table` is the catalog name to read.
    """

    layer: str
    name: str
    table: str
    suite: gx.ExpectationSuite

    @property
    def expectation_count(self) -> int:
        return len(self.suite.expectations)


# --------------------------------------------------------------------------- small builders


def _meta(check: str, severity: str = ERROR, **extra: Any) -> dict[str, Any]:
    return {"check": check, "severity": severity, **extra}


def _gx_severity(severity: str) -> FailureSeverity:
    return FailureSeverity.CRITICAL if severity == ERROR else FailureSeverity.WARNING


def _not_null(column: str, check: str, row_condition: Condition | None = None, description: str | None = None) -> gx.expectations.Expectation:
    return gx.expectations.ExpectColumnValuesToNotBeNull(
        column=column,
        row_condition=row_condition,
        meta=_meta(check),
        description=description,
        severity=_gx_severity(ERROR),
    )


def _unique(columns: Sequence[str], check: str, row_condition: Condition | None = None, description: str | None = None) -> gx.expectations.Expectation:
    """Uniqueness of a (possibly compound) key.

    GX's compound-columns expectation refuses fewer than two columns, so a single-column key
    uses the column-values uniqueness expectation; both count every row taking part in a
    duplicate as unexpected.
    """
    if len(columns) == 1:
        return gx.expectations.ExpectColumnValuesToBeUnique(
            column=columns[0], row_condition=row_condition, meta=_meta(check), description=description
        )
    return gx.expectations.ExpectCompoundColumnsToBeUnique(
        column_list=list(columns), row_condition=row_condition, meta=_meta(check), description=description
    )


def _row_count_is_zero(check: str, description: str) -> gx.expectations.Expectation:
    """An informational count: the observed value is the table's row count; warns when > 0."""
    return gx.expectations.ExpectTableRowCountToEqual(
        value=0,
        meta=_meta(check, WARNING, informational=True),
        description=description,
        severity=_gx_severity(WARNING),
    )


def _unexpected_rows(query: str, check: str, description: str) -> gx.expectations.Expectation:
    return gx.expectations.UnexpectedRowsExpectation(
        unexpected_rows_query=query,
        meta=_meta(check),
        description=description,
        severity=_gx_severity(ERROR),
    )


def _informational_suite(pipeline: Pipeline, layer: str, table: str, check: str, description: str) -> TableSuite:
    """A table whose row count is only reported (a warning when it is not 0)."""
    suite = gx.ExpectationSuite(name=_suite_name(pipeline, layer, _short(table)), expectations=[_row_count_is_zero(check, description)])
    return TableSuite(layer=layer, name=f"{layer}.{_short(table)}", table=table, suite=suite)


def sql_name(qualified: str) -> str:
    """`a.b.c` -> `` `a`.`b`.`c` ``: a table name safe inside Spark SQL whatever its spelling."""
    return quote_qualified(*qualified.split("."))


def _suite_name(pipeline: Pipeline, layer: str, name: str) -> str:
    return f"{pipeline.name}.{layer}.{name}"


def _short(qualified: str) -> str:
    return qualified.rsplit(".", 1)[-1]


# --------------------------------------------------------------------------- bronze


def bronze_suite(pipeline: Pipeline, source: Source) -> TableSuite:
    """bronze.<source>: the append-only record of what Kafka delivered.

    * `_op` is a known Debezium op or `tombstone` (anything else means the parser let through
      a record it should have quarantined);
    * `_sequence` is set on every record but tombstones (a change without a sequence cannot be
      ordered, so silver could neither apply nor reject it correctly);
    * (`_topic`, `_partition`, `_offset`) is unique: each Kafka record lands once (a duplicate
      means a non-idempotent write after a restart, not a Debezium re-delivery, which has a new
      offset).
    """
    table = bronze_table(pipeline, source)
    suite = gx.ExpectationSuite(
        name=_suite_name(pipeline, "bronze", source.name),
        expectations=[
            gx.expectations.ExpectColumnValuesToBeInSet(
                column="_op",
                value_set=list(BRONZE_OPS),
                meta=_meta("op_known"),
                description="_op is a Debezium op (r, c, u, d, t) or tombstone",
            ),
            _not_null(
                "_sequence",
                "sequence_not_null",
                row_condition=Col("_op") != "tombstone",
                description="every change but a tombstone carries its source sequence",
            ),
            _unique(
                KAFKA_COORDINATES,
                "kafka_record_once",
                description="each Kafka record (topic, partition, offset) is stored once",
            ),
        ],
    )
    return TableSuite(layer="bronze", name=f"bronze.{source.name}", table=table, suite=suite)


def quarantine_suite(pipeline: Pipeline) -> TableSuite:
    """bronze._quarantine: informational; its row count is the observed value (a warning if > 0).

    Quarantined records are kept on purpose ("nothing dropped silently"), so a non-empty
    quarantine is something to look at, not a failed run.
    """
    return _informational_suite(pipeline, "bronze", quarantine_table(pipeline), "quarantined_records", "records quarantined (informational)")


# --------------------------------------------------------------------------- silver


def held_changes_suite(pipeline: Pipeline, source: Source) -> TableSuite:
    """silver._held_<source>: informational; the changes a quarantine rule still holds (a warning
    if any): kept on purpose, let through when they pass (`lakehouse.silver.held`)."""
    table = held_changes_table(pipeline, source)
    still_held = gx.expectations.UnexpectedRowsExpectation(
        unexpected_rows_query="SELECT * FROM {batch} WHERE _released_at IS NULL",
        meta=_meta("held_changes", WARNING, informational=True),
        description=f"changes of {source.name} held out of silver by a quarantine rule (informational)",
        severity=_gx_severity(WARNING),
    )
    suite = gx.ExpectationSuite(name=_suite_name(pipeline, "silver", _short(table)), expectations=[still_held])
    return TableSuite(layer="silver", name=f"silver.{_short(table)}", table=table, suite=suite)


def silver_current_suite(pipeline: Pipeline, source: Source) -> TableSuite:
    """silver.<source>: one row per key ever seen, the latest version by sequence.

    * every primary key column is set, and the key is unique (the MERGE is keyed by it: a
      duplicate means two writers raced or the merge condition is wrong);
    * `_sequence` is set (ordering depends on it);
    * live rows (`NOT _deleted`) carry `_row_hash` (gold's hash check compares it); deleted
      keys keep a payload-less row whose hash may be null.
    """
    table = silver_current_table(pipeline, source)
    expectations = [
        _not_null(col, f"pk_not_null:{col}", description=f"primary key column {col} is set")
        for col in source.primary_key
    ]
    expectations += [
        _unique(source.primary_key, "pk_unique", description="one current row per primary key"),
        _not_null("_sequence", "sequence_not_null", description="every current row has its sequence"),
        _not_null(
            "_row_hash",
            "live_row_hash_not_null",
            row_condition=Col("_deleted") == False,  # noqa: E712 - a GX Condition, not a Python test
            description="live rows carry their row hash",
        ),
    ]
    expectations += rule_expectations(source.rules, live_only=True)  # the pipeline file's own rules
    suite = gx.ExpectationSuite(name=_suite_name(pipeline, "silver", source.name), expectations=expectations)
    return TableSuite(layer="silver", name=f"silver.{source.name}", table=table, suite=suite)


def late_changes_suite(pipeline: Pipeline) -> TableSuite:
    """silver._late_changes: informational count of changes that arrived beyond the grace."""
    return _informational_suite(pipeline, "silver", late_changes_table(pipeline), "late_changes", "changes later than the grace period (informational)")


# --------------------------------------------------------------------------- gold


def gold_suite(pipeline: Pipeline, view: View) -> TableSuite:
    """gold.<view>: the join result, keyed by the base table's primary key.

    * the base key is set and unique (gold is MERGEd by it);
    * every inner-joined alias -- and the base itself, which every gold row is built from --
      has its lineage hash `_<alias>_hash` (a null would mean an inner join result was written
      without its right side);
    * referential, against silver current by name: no gold row for a base key that is not live
      in silver (a delete that did not reach gold);
    * no stale gold row: the recorded base sequence `_<base>_seq` is never newer than silver's
      `_sequence`, and where it is older the base columns gold shows must equal silver's. (Gold
      deliberately does not rewrite a row when a newer version brings the same content -- a
      snapshot replay, a change to a column the view does not read -- so an older recorded
      sequence alone is legitimate; an older sequence *with different content* is a missed
      update.)

    Views with an outer join have rows without a base side (their key is the coalesce of both
    sides): the base checks apply to rows whose `_<base>_seq` is set.
    """
    table = gold_table(pipeline, view.name)
    base = pipeline.source(view.base)
    silver = sql_name(silver_current_table(pipeline, base))
    keys = view.key_pairs(base)
    outer = view.has_outer
    base_seq = f"_{view.base}_seq"
    base_present = f" AND g.{quote(base_seq)} IS NOT NULL" if outer else ""
    on = " AND ".join(f"g.{quote(out)} = s.{quote(pk)}" for out, pk in keys)

    expectations: list[gx.expectations.Expectation] = [
        _not_null(out, f"key_not_null:{out}", description=f"gold key column {out} is set") for out, _ in keys
    ]
    expectations.append(_unique([out for out, _ in keys], "key_unique", description="one gold row per base key"))
    inner_aliases = ([] if outer else [view.base]) + [j.alias for j in view.joins if j.type == "inner"]
    for alias in inner_aliases:
        expectations.append(
            _not_null(
                f"_{alias}_hash",
                f"inner_hash_not_null:{alias}",
                description=f"inner-joined {alias} is present in every gold row",
            )
        )

    live_query = (
        f"SELECT g.* FROM {{batch}} AS g LEFT ANTI JOIN {silver} AS s ON {on} AND NOT s.`_deleted`"
        + (f" WHERE g.{quote(base_seq)} IS NOT NULL" if outer else "")
    )
    expectations.append(
        _unexpected_rows(
            live_query,
            "base_key_live",
            f"every gold row's base key is live in {silver_current_table(pipeline, base)}",
        )
    )

    same_content = " AND ".join(
        [f"g.{quote(c.name)} <=> s.{quote(c.column)}" for c in view.columns if c.alias == view.base]
    )
    stale_query = (
        f"SELECT g.* FROM {{batch}} AS g JOIN {silver} AS s ON {on} "
        f"WHERE NOT s.`_deleted`{base_present} AND ("
        f"g.{quote(base_seq)} > s.`_sequence` "
        f"OR (g.{quote(base_seq)} < s.`_sequence` AND NOT ({same_content})))"
    )
    expectations.append(
        _unexpected_rows(
            stale_query,
            "base_not_stale",
            f"no gold row is built from a {view.base} version other than silver's current one",
        )
    )
    expectations += rule_expectations(view.rules, live_only=False)  # the pipeline file's own rules
    suite = gx.ExpectationSuite(name=_suite_name(pipeline, "gold", view.name), expectations=expectations)
    return TableSuite(layer="gold", name=f"gold.{view.name}", table=table, suite=suite)


def windowed_gold_suite(pipeline: Pipeline, view: View) -> TableSuite:
    """gold.<windowed view>: one row per pair (`_pair` set and unique); each event a row holds is
    live in silver; an inner join's rows hold both events, a left join's the base event."""
    table = gold_table(pipeline, view.name)
    expectations: list[gx.expectations.Expectation] = [
        _not_null("_pair", "pair_not_null", description="every gold row names its pair of events"),
        _unique(["_pair"], "pair_unique", description="one gold row per pair of events"),
    ]
    join = view.joins[0]
    for alias, source in ((view.base, pipeline.source(view.base)), (join.alias, pipeline.source(join.table))):
        keys = [(view._output_of(alias, pk), pk) for pk in source.primary_key]
        silver = sql_name(silver_current_table(pipeline, source))
        on = " AND ".join(f"g.{quote(out)} = s.{quote(pk)}" for out, pk in keys)
        present = " AND ".join(f"g.{quote(out)} IS NOT NULL" for out, _ in keys)
        expectations.append(_unexpected_rows(
            f"SELECT g.* FROM {{batch}} AS g LEFT ANTI JOIN {silver} AS s ON {on} AND NOT s.`_deleted` WHERE {present}",
            f"event_live:{alias}", f"every {alias} event in gold is live in {silver_current_table(pipeline, source)}"))
        must_hold = join.type == "inner" or (alias == view.base and join.type == "left")
        if must_hold:
            expectations += [_not_null(out, f"event_not_null:{out}", description=f"every row of this {join.type} join holds its {alias} event")
                             for out, _ in keys]
    expectations += rule_expectations(view.rules, live_only=False)
    suite = gx.ExpectationSuite(name=_suite_name(pipeline, "gold", view.name), expectations=expectations)
    return TableSuite(layer="gold", name=f"gold.{view.name}", table=table, suite=suite)


# --------------------------------------------------------------------------- all of them


def build_suites(pipeline: Pipeline) -> list[TableSuite]:
    """Every table suite of a pipeline, in flow order (bronze, silver, gold)."""
    suites: list[TableSuite] = [bronze_suite(pipeline, s) for s in pipeline.sources.values()]
    suites.append(quarantine_suite(pipeline))
    suites += [silver_current_suite(pipeline, s) for s in pipeline.sources.values()]
    suites += [held_changes_suite(pipeline, s) for s in pipeline.sources.values() if s.quarantine_rules]
    suites.append(late_changes_suite(pipeline))
    suites += [windowed_gold_suite(pipeline, v) if v.windowed else gold_suite(pipeline, v) for v in pipeline.views.values()]
    return suites
