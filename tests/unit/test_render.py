"""Query results print as plain-text tables, the way psql prints them."""

from __future__ import annotations

from cdc_enrich.cli import render_rows


def test_render_rows_prints_a_readable_table():
    text = render_rows(["id", "name"], [(1, "ann"), (2, None)])
    assert text.splitlines() == ["id | name", "---+-----", "1  | ann ", "2  | NULL", "(2 rows)"]
