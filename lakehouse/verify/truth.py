"""The source-truth files that `verify --truth DIR` reads: the final rows of every source table.

Whoever knows the truth (the simulator, a test) writes them with `write_truth_files`; `verify`
reads them back as one typed DataFrame per source and compares gold with the oracle over them.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from lakehouse.declaration import Pipeline
from lakehouse.errors import CdcEnrichError
from lakehouse.frames import local_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def write_truth_files(truth: Mapping[str, Sequence[Mapping[str, Any]]], stats: Mapping[str, Any], directory: Path,
                      history: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> None:
    """`<source>.jsonl` (one row per line, sorted by key, typed as below) plus `stats.json`, and
    with `history` `<source>.history.jsonl` (every version: its row, `_valid_from`, `_valid_to`,
    `_deleted`).

    Encoding per declared type: decimal -> string ("12.50"), date -> "YYYY-MM-DD", timestamp ->
    ISO-8601 UTC with microseconds ("2026-01-05T09:00:00.000000+00:00"), others as JSON values.
    `stats.json` holds the stats, including `sources` (key and column types) for decoding.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, rows in truth.items():
        lines = (json.dumps({c: _truth_json(v) for c, v in row.items()}, ensure_ascii=False) for row in rows)
        (directory / f"{name}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    for name, rows in (history or {}).items():
        lines = (json.dumps({c: _truth_json(v) for c, v in row.items()}, ensure_ascii=False) for row in rows)
        (directory / f"{name}.history.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    (directory / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read_truth(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """The truth written by `write_truth`, with Python values (Decimal, date, aware UTC datetime)."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / "stats.json").read_text(encoding="utf-8"))["sources"]
    except (OSError, ValueError, KeyError) as exc:
        raise CdcEnrichError(f"{directory}: no readable stats.json with `sources` ({exc}); write it with `simulate`") from None
    truth = {}
    for name, info in meta.items():
        types = dict(map(tuple, info["columns"]))
        path = directory / f"{name}.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        truth[name] = [{c: _truth_value(types[c], v) for c, v in json.loads(line).items()} for line in lines if line]
    return truth


def read_truth_frames(spark: "SparkSession", pipeline: Pipeline, directory: Path) -> dict[str, "DataFrame"]:
    """One DataFrame per pipeline source, typed by `lakehouse.tables.row_struct`, for the oracle."""
    from lakehouse.tables import row_struct

    truth = read_truth(directory)
    meta = json.loads((Path(directory) / "stats.json").read_text(encoding="utf-8"))["sources"]
    frames = {}
    for src in pipeline.sources.values():
        declared = [[c.name, c.type] for c in src.columns]
        if src.name in meta and meta[src.name]["columns"] != declared:
            raise CdcEnrichError(
                f"{directory}: the truth of {src.name!r} has columns {meta[src.name]['columns']}, "
                f"but {pipeline.path} declares {declared}; simulate again with this pipeline"
            )
        rows = [tuple(row.get(c) for c in src.column_names) for row in truth.get(src.name, [])]
        frames[src.name] = local_frame(spark, rows, row_struct(src))
    return frames


def truth_outages(directory: Path) -> int:
    """How many connector outages the simulated run had (each lost the records of the versions
    committed during it: a version log no CDC consumer can rebuild)."""
    stats = json.loads((Path(directory) / "stats.json").read_text(encoding="utf-8"))
    return int(stats.get("chaos_applied", {}).get("resnapshots", 0))


#: A history row's own columns beside the source's, with their types (`lakehouse.verify.oracle.HISTORY_COLUMNS`).
HISTORY_TYPES = {"_valid_from": "timestamp", "_valid_to": "timestamp", "_deleted": "boolean"}


def read_truth_history_frames(spark: "SparkSession", pipeline: Pipeline, directory: Path, sources: Sequence[str]) -> dict[str, "DataFrame"] | None:
    """Every version of each of `sources` from `<source>.history.jsonl`, typed (source columns,
    `_valid_from`, `_valid_to`, `_deleted`); None when the truth holds no history for one of them."""
    from pyspark.sql.types import BooleanType, StructField, TimestampType

    from lakehouse.tables import row_struct

    frames = {}
    for name in sources:
        path = Path(directory) / f"{name}.history.jsonl"
        if not path.exists():
            return None
        src = pipeline.source(name)
        types = {c.name: c.type for c in src.columns} | HISTORY_TYPES
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
        struct = row_struct(src)
        for column, kind in HISTORY_TYPES.items():
            struct = struct.add(StructField(column, BooleanType() if kind == "boolean" else TimestampType(), True))
        frames[name] = local_frame(
            spark,
            [tuple(_truth_value(types[c], row.get(c)) for c in struct.fieldNames()) for row in rows], struct)
    return frames


def _truth_json(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat(timespec="microseconds")
    if isinstance(value, date):
        return value.isoformat()
    return value


def _truth_value(column_type: str, value: Any) -> Any:
    if value is None:
        return None
    if column_type.startswith("decimal"):
        return Decimal(value)
    if column_type == "timestamp":
        return datetime.fromisoformat(value).astimezone(timezone.utc)
    if column_type == "date":
        return date.fromisoformat(value)
    if column_type in ("double", "float"):
        return float(value)
    return value
