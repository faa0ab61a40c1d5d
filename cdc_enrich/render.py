"""Printing query results as plain-text tables, the way psql does (the CLI and the demo share it)."""

from __future__ import annotations

from typing import Any, Sequence


def render_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], max_width: int = 40) -> str:
    """A plain-text table, as psql prints one: readable in a terminal and in CI logs."""

    def cell(value: Any) -> str:
        text = "NULL" if value is None else str(value)
        return text if len(text) <= max_width else text[: max_width - 1] + "…"

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "-+-".join("-" * w for w in widths)
    out = [" | ".join(c.ljust(w) for c, w in zip(columns, widths)), line]
    out += [" | ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def show_query(spark: Any, query: str, limit: int = 50) -> str:
    df = spark.sql(query)
    rows = df.limit(limit).collect()
    return render_rows(df.columns, [tuple(r) for r in rows])
