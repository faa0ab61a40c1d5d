"""Benchmarks (`cdc-enrich bench ...`): each against a baseline measured side by side in the same run."""

from typing import Any, Iterable, Sequence


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Rows as a Markdown table (the CLI's bench summaries, and docs/performance.md's)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def fresh_schemas(spark: Any, pipeline: Any) -> None:
    """The bench pipeline's silver and gold schemas dropped (with their tables) and created empty."""
    for schema in (pipeline.tables.silver_schema, pipeline.tables.gold_schema):
        spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        spark.sql(f"CREATE SCHEMA {schema}")


def check_workloads(asked: Sequence[str], known: Sequence[str], what: str = "workload") -> None:
    """A bench's workloads (or other choices, `what`) are among the ones it knows (ValueError naming them otherwise)."""
    unknown = [w for w in asked if w not in known]
    if unknown:
        raise ValueError(f"unknown {what}(s) {unknown}; choose from {', '.join(known)}")
