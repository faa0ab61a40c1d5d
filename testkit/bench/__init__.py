"""Benchmarks (`cdc-enrich bench ...`): each against a baseline measured side by side in the same run."""

from typing import Any, Iterable, Sequence


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Rows as a Markdown table (the README's and the CLI's bench summaries)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
