"""User-declared rules (`expectations:` of a source or a view in the pipeline file) as
great-expectations expectations, run beside the derived suites.

On a source they apply to its silver current table's live rows (a deleted key's marker row is
not data); on a view, to its gold rows. Each result row carries the check name `rule:<name>`,
the rule's severity (`warn` is reported, `fail` fails the quality run) and its description.
`row_condition`, `row_count` and `sql` run as queries for the offending rows (`{table}` in a
`sql` rule is this table; other tables are read by name).
"""

from __future__ import annotations

from typing import Sequence

import great_expectations as gx
from great_expectations.expectations.metadata_types import FailureSeverity
from great_expectations.expectations.row_conditions import Column as Col
from great_expectations.expectations.row_conditions import Condition

from lakehouse.declaration import Rule

ERROR, WARNING = "error", "warning"  # the runner's severities (lakehouse.quality.suites)
RULE_PREFIX = "rule:"


def _severity(rule: Rule) -> str:
    return ERROR if rule.severity == "fail" else WARNING


def rule_expectation(rule: Rule, live_only: bool) -> gx.expectations.Expectation:
    """One rule as a GX expectation; `live_only`: rows of a silver current table that are not
    delete markers."""
    common = {
        "meta": {"check": RULE_PREFIX + rule.name, "severity": _severity(rule), "declared": True},
        "description": rule.summary,
        "severity": FailureSeverity.CRITICAL if rule.severity == "fail" else FailureSeverity.WARNING,
    }
    live: Condition | None = (Col("_deleted") == False) if live_only else None  # noqa: E712 - a GX Condition
    rows = "(SELECT * FROM {batch} WHERE NOT `_deleted`)" if live_only else "{batch}"
    column = rule.columns[0] if rule.columns else ""
    if rule.kind == "not_null":
        return gx.expectations.ExpectColumnValuesToNotBeNull(column=column, row_condition=live, **common)
    if rule.kind == "unique":
        if len(rule.columns) == 1:
            return gx.expectations.ExpectColumnValuesToBeUnique(column=column, row_condition=live, **common)
        return gx.expectations.ExpectCompoundColumnsToBeUnique(column_list=list(rule.columns), row_condition=live, **common)
    if rule.kind == "accepted_values":
        return gx.expectations.ExpectColumnValuesToBeInSet(column=column, value_set=list(rule.values), row_condition=live, **common)
    if rule.kind == "range":
        return gx.expectations.ExpectColumnValuesToBeBetween(
            column=column, min_value=rule.minimum, max_value=rule.maximum, row_condition=live, **common
        )
    if rule.kind == "regex":
        return gx.expectations.ExpectColumnValuesToMatchRegex(column=column, regex=rule.pattern, row_condition=live, **common)
    if rule.kind == "row_condition":
        query = f"SELECT * FROM {rows} AS t WHERE NOT ({rule.condition}) OR ({rule.condition}) IS NULL"
    elif rule.kind == "row_count":
        bounds = [f"n < {rule.minimum}" if rule.minimum is not None else "", f"n > {rule.maximum}" if rule.maximum is not None else ""]
        query = f"SELECT n FROM (SELECT count(*) AS n FROM {rows} AS t) WHERE {' OR '.join(b for b in bounds if b)}"
    else:  # sql
        query = (rule.query or "").replace("{table}", rows)
    return gx.expectations.UnexpectedRowsExpectation(unexpected_rows_query=query, **common)


def rule_expectations(rules: Sequence[Rule], live_only: bool) -> list[gx.expectations.Expectation]:
    """Every declared rule of one table, in declared order."""
    return [rule_expectation(r, live_only) for r in rules]
