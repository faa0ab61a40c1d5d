"""Rules declared in the pipeline file (`expectations:`): what may be written, and each mistake
reported with file, line and field before any job starts."""

from __future__ import annotations

import re

import pytest

from lakehouse.declaration import parse_pipeline
from lakehouse.errors import PipelineConfigError
from lakehouse.quality.rules import rule_expectation
from tests.unit.test_config import GOOD


def _with(rules: str, where: str = "      name: string\n") -> str:
    assert where in GOOD
    return GOOD.replace(where, where + "    expectations:\n" + rules, 1)


def test_every_kind_of_rule_parses_and_becomes_an_expectation() -> None:
    p = parse_pipeline(_with(
        "      - {name: a, not_null: name}\n"
        "      - {name: b, unique: [id, name], severity: warn}\n"
        "      - {name: c, accepted_values: {column: name, values: [x, y]}}\n"
        "      - {name: d, range: {column: id, min: 1}}\n"
        "      - {name: e, regex: {column: name, pattern: '^[A-Z]'}}\n"
        "      - {name: f, row_condition: 'id > 0', description: ids are positive}\n"
        "      - {name: g, row_count: {max: 10}}\n"
        "      - {name: h, sql: 'SELECT * FROM {table} WHERE id = 0'}\n"
    ))
    rules = p.source("customers").rules
    assert [(r.name, r.kind, r.severity) for r in rules][:2] == [("a", "not_null", "fail"), ("b", "unique", "warn")]
    kinds = [type(rule_expectation(r, live_only=True)).__name__ for r in rules]
    assert kinds == [
        "ExpectColumnValuesToNotBeNull", "ExpectCompoundColumnsToBeUnique", "ExpectColumnValuesToBeInSet",
        "ExpectColumnValuesToBeBetween", "ExpectColumnValuesToMatchRegex", "UnexpectedRowsExpectation",
        "UnexpectedRowsExpectation", "UnexpectedRowsExpectation",
    ]
    sql = rule_expectation(rules[-1], live_only=True).unexpected_rows_query
    assert sql == "SELECT * FROM (SELECT * FROM {batch} WHERE NOT `_deleted`) WHERE id = 0"
    assert rule_expectation(rules[0], live_only=True).meta == {"check": "rule:a", "severity": "error", "declared": True}


def test_a_view_rule_names_the_views_output_columns() -> None:
    p = parse_pipeline(_with("      - {name: named, not_null: customer_name}\n", where="      customer_name: c.name\n"))
    assert p.view("orders_enriched").rules[0].columns == ("customer_name",)


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("      - {name: a, not_null: nope}\n", "expectations[0].not_null: expected a column of this table (id, name)"),
        ("      - {name: a}\n", "expected exactly one of not_null, unique"),
        ("      - {name: a, not_null: name, unique: [id]}\n", "got not_null, unique"),
        ("      - {name: a, not_null: name, severity: loud}\n", "severity: expected one of warn, fail"),
        ("      - {name: a, unique: [name], severity: quarantine}\n",
         "expectations[0].severity: a quarantine rule judges one change at a time: its kind must be one of not_null, accepted_values"),
        ("      - {name: a, not_null: name}\n      - {name: a, not_null: id}\n", "rule 'a' is declared twice"),
        ("      - {name: 1a, not_null: name}\n", "rule name must be a plain identifier"),
        ("      - {name: a, range: {column: id, min: 5, max: 1}}\n", "min 5 is above max 1"),
        ("      - {name: a, range: {column: id}}\n", "expected min, max or both"),
        ("      - {name: a, regex: {column: name, pattern: '('}}\n", "not a valid regular expression"),
        ("      - {name: a, accepted_values: {column: name, values: []}}\n", "expected a non-empty list of values"),
        ("      - {name: a, sql: 'SELECT 1'}\n", "must read this table as {table}"),
        ("      - {name: a, not_null: name, colour: red}\n", "unknown field 'colour'"),
        ("      {name: a}\n", "expected a list of rules"),
    ],
)
def test_a_bad_rule_is_rejected_with_file_line_and_field(rules: str, expected: str) -> None:
    with pytest.raises(PipelineConfigError, match=re.escape(expected)) as exc:
        parse_pipeline(_with(rules), "bad.yml")
    assert "bad.yml:" in str(exc.value) and "sources.customers.expectations" in str(exc.value)


def test_quarantine_is_a_sources_severity_not_a_views() -> None:
    p = parse_pipeline(_with("      - {name: known, accepted_values: {column: name, values: [x]}, severity: quarantine}\n"))
    assert [r.name for r in p.source("customers").quarantine_rules] == ["known"]
    from lakehouse.quality.suites import build_suites

    held = [s for s in build_suites(p) if s.name == "silver._held_customers"]
    assert len(held) == 1 and held[0].suite.expectations[0].meta["check"] == "held_changes"  # what is still held, reported
    with pytest.raises(PipelineConfigError, match=re.escape("views.orders_enriched.expectations[0].severity: quarantine holds a source's changes")):
        parse_pipeline(_with("      - {name: named, not_null: customer_name, severity: quarantine}\n", where="      customer_name: c.name\n"), "bad.yml")
