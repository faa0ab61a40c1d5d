"""Workload hints (`workload.yml` next to the pipeline file): value pools, weights, TOAST columns, validated with file and line."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any, Mapping

from lakehouse.declaration import (
    Column,
    ForeignKey,
    Located,
    Pipeline,
    Problems,
    Source,
)
from lakehouse.errors import PipelineConfigError
from lakehouse.verify.truth import read_truth, read_truth_frames, write_truth_files  # noqa: F401 (the simulator's truth API)
from testkit.simulator.records import _INT_RANGES, _OPS, WORKLOAD_FILE

# =========================================================================== workload hints


@dataclass(frozen=True)
class ColumnHint:
    """How to generate one column: a value pool, a numeric range or a text length range."""

    values: tuple[Any, ...] = ()
    minimum: Decimal | None = None
    maximum: Decimal | None = None
    length: tuple[int, int] | None = None


@dataclass(frozen=True)
class SourceHints:
    """Per-source simulator hints; defaults apply to sources the workload file does not name."""

    rows: int = 50
    weight: float = 1.0
    ops: tuple[tuple[str, float], ...] = (("insert", 3.0), ("update", 5.0), ("delete", 1.0))
    per_parent: tuple[str, int, int] | None = None  # (foreign key, min, max) children per parent
    toast: tuple[str, ...] = ()
    columns: Mapping[str, ColumnHint] = field(default_factory=dict)

    def key_pool(self, column: str) -> tuple[Any, ...]:
        """A key column's value pool (a global table's codes; empty: none). A new key takes the
        pool's values in order, the n-th row the n-th value, and there are no more keys after the last."""
        return self.columns[column].values if column in self.columns else ()


@dataclass(frozen=True)
class Workload:
    database: str
    sources: Mapping[str, SourceHints]

    def hints(self, source: Source) -> SourceHints:
        return self.sources[source.name]


def load_workload(pipeline: Pipeline, path: Path | None = None) -> Workload:
    """Read `workload.yml` (default: next to the pipeline file; missing there = defaults).

    An explicitly given path must exist. Every problem is reported at once, with its line.
    """
    file = Path(path) if path is not None else pipeline.path.parent / WORKLOAD_FILE
    if not file.is_file():
        if path is not None:
            raise PipelineConfigError(f"{file}: workload file not found; pass an existing file or none for defaults")
        return Workload(database=pipeline.name, sources={s.name: _default_hints(s) for s in pipeline.sources.values()})
    located = Located(file.read_text(encoding="utf-8"), str(file))
    problems = Problems(str(file), located)
    workload = _parse_workload(pipeline, located.value, problems)
    problems.raise_if_any()
    return workload


def _default_hints(source: Source, rows: int = 50) -> SourceHints:
    owned = _owning_foreign_key(source)
    ops = (("insert", 1.0),) if source.kind == "events" else SourceHints.ops
    return SourceHints(rows=rows, ops=ops, per_parent=(owned.name, 1, 4) if owned else None)


def _owning_foreign_key(source: Source) -> ForeignKey | None:
    """A foreign key inside the primary key (order_items.order): children created with their parent."""
    return next((fk for fk in source.foreign_keys if set(fk.columns) <= set(source.primary_key)), None)


def _parse_workload(pipeline: Pipeline, raw: Any, problems: Problems) -> Workload:
    top = raw if isinstance(raw, dict) else {}
    if raw is not None and not isinstance(raw, dict):
        problems.add("", "expected a mapping with `database` and `sources`")
    for key in top:
        if key not in ("database", "sources"):
            problems.add(str(key), f"unknown field {key!r}; expected one of: database, sources")
    database = top.get("database", pipeline.name)
    if not isinstance(database, str) or not database:
        problems.add("database", "expected the database name as a string")
        database = pipeline.name
    raw_sources = top.get("sources") or {}
    if not isinstance(raw_sources, dict):
        problems.add("sources", "expected a mapping of source name to hints")
        raw_sources = {}
    declared = _declared_in_file(pipeline)
    for name in raw_sources:
        if name not in pipeline.sources and name not in declared:
            problems.add(f"sources.{name}", f"unknown source {name!r} (the pipeline declares: {', '.join(pipeline.sources)})")
    hints = {
        s.name: _parse_source_hints(s, raw_sources.get(s.name), f"sources.{s.name}", problems)
        for s in pipeline.sources.values()
    }
    return Workload(database=database, sources=hints)


def _declared_in_file(pipeline: Pipeline) -> set[str]:
    """The sources of the file `pipeline` was read from: hints may name a source a narrowed copy
    of it (a test's or a bench's, running part of the database) leaves out; those are unused."""
    try:
        raw = Located(pipeline.path.read_text(encoding="utf-8"), str(pipeline.path)).value
    except (OSError, PipelineConfigError):
        return set()
    sources = raw.get("sources") if isinstance(raw, dict) else None
    return set(sources) if isinstance(sources, dict) else set()


def _parse_source_hints(source: Source, raw: Any, path: str, problems: Problems) -> SourceHints:
    default = _default_hints(source)
    if raw is None:
        return default
    if not isinstance(raw, dict):
        problems.add(path, "expected a mapping of hints (rows, weight, ops, per_parent, toast, columns)")
        return default
    for key in raw:
        if key not in ("rows", "weight", "ops", "per_parent", "toast", "columns"):
            problems.add(f"{path}.{key}", f"unknown field {key!r}; expected one of: rows, weight, ops, per_parent, toast, columns")
    return SourceHints(
        rows=_whole(raw.get("rows", default.rows), f"{path}.rows", problems, default.rows),
        weight=float(_number(raw.get("weight", default.weight), f"{path}.weight", problems, default.weight)),
        ops=_parse_ops(source, raw.get("ops"), f"{path}.ops", problems, default.ops),
        per_parent=_parse_per_parent(source, raw.get("per_parent"), f"{path}.per_parent", problems, default.per_parent),
        toast=_parse_toast(source, raw.get("toast", []), f"{path}.toast", problems),
        columns=_parse_columns(source, raw.get("columns") or {}, f"{path}.columns", problems),
    )


def _whole(value: Any, path: str, problems: Problems, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        problems.add(path, f"expected a whole number >= 0, got {value!r}")
        return default
    return value


def _number(value: Any, path: str, problems: Problems, default: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        problems.add(path, f"expected a number >= 0, got {value!r}")
        return default
    return value


def _parse_ops(source: Source, raw: Any, path: str, problems: Problems, default: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    if raw is None:
        return default
    if not isinstance(raw, dict) or not raw:
        problems.add(path, "expected a mapping such as {insert: 3, update: 5, delete: 1}")
        return default
    ops = []
    for op, weight in raw.items():
        if op not in _OPS:
            problems.add(f"{path}.{op}", f"unknown operation {op!r}; expected one of: {', '.join(_OPS)}")
        elif source.kind == "events" and op != "insert":
            problems.add(f"{path}.{op}", f"{source.name!r} is an append-only event stream: inserts only")
        else:
            ops.append((op, float(_number(weight, f"{path}.{op}", problems, 0))))
    return tuple(ops) or default


def _parse_per_parent(source: Source, raw: Any, path: str, problems: Problems, default: tuple[str, int, int] | None) -> tuple[str, int, int] | None:
    if raw is None:
        return default
    if not isinstance(raw, dict) or len(raw) != 1:
        problems.add(path, "expected one foreign key with a [min, max] range, e.g. {order: [1, 4]}")
        return default
    (fk_name, bounds), = raw.items()
    if fk_name not in (fk.name for fk in source.foreign_keys):
        problems.add(f"{path}.{fk_name}", f"{source.name!r} declares no foreign key {fk_name!r}")
        return default
    lo_hi = _range(bounds, f"{path}.{fk_name}", problems, minimum=0)
    return (fk_name, *lo_hi) if lo_hi else default


def _range(value: Any, path: str, problems: Problems, minimum: int) -> tuple[int, int] | None:
    ok = isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if not ok or value[0] < minimum or value[0] > value[1]:
        problems.add(path, f"expected [min, max] whole numbers with {minimum} <= min <= max, got {value!r}")
        return None
    return value[0], value[1]


def _parse_toast(source: Source, raw: Any, path: str, problems: Problems) -> tuple[str, ...]:
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list):
        problems.add(path, "expected a list of large text columns")
        return ()
    good = []
    for i, name in enumerate(names):
        if name not in source.column_names:
            problems.add(f"{path}[{i}]", f"{source.name!r} has no column {name!r}")
        elif source.column(name).type != "string" or name in source.primary_key:
            problems.add(f"{path}[{i}]", f"a TOAST column must be a string column outside the primary key; {name!r} is not")
        else:
            good.append(name)
    return tuple(good)


def _parse_columns(source: Source, raw: Any, path: str, problems: Problems) -> dict[str, ColumnHint]:
    if not isinstance(raw, dict):
        problems.add(path, "expected a mapping of column name to hints (values, min, max, length)")
        return {}
    hints = {}
    for name, spec in raw.items():
        if name not in source.column_names:
            problems.add(f"{path}.{name}", f"{source.name!r} has no column {name!r}")
        elif not isinstance(spec, dict):
            problems.add(f"{path}.{name}", "expected a mapping with values, min, max or length")
        else:
            hints[name] = _parse_column_hint(source.column(name), spec, f"{path}.{name}", problems)
    return hints


def _parse_column_hint(column: Column, spec: dict[str, Any], path: str, problems: Problems) -> ColumnHint:
    for key in spec:
        if key not in ("values", "min", "max", "length"):
            problems.add(f"{path}.{key}", f"unknown field {key!r}; expected one of: values, min, max, length")
    numeric = column.type in _INT_RANGES or column.decimal_scale is not None or column.type in ("double", "float")
    values = spec.get("values", [])
    if not isinstance(values, list) or not all(_fits(column, v) for v in values):
        problems.add(f"{path}.values", f"expected a list of {column.type} values, got {values!r}")
        values = []
    bounds: dict[str, Decimal | None] = {}
    for key in ("min", "max"):
        raw = spec.get(key)
        if raw is not None and (not numeric or isinstance(raw, bool) or not isinstance(raw, (int, float))):
            problems.add(f"{path}.{key}", f"`{key}` needs a numeric column and a number; {column.name!r} is {column.type}")
            raw = None
        bounds[key] = Decimal(str(raw)) if raw is not None else None
    if bounds["min"] is not None and bounds["max"] is not None and bounds["min"] > bounds["max"]:
        problems.add(path, "min is greater than max")
    length = None
    if "length" in spec:
        if column.type != "string":
            problems.add(f"{path}.length", f"`length` needs a string column; {column.name!r} is {column.type}")
        else:
            length = _range(spec["length"], f"{path}.length", problems, minimum=1)
    return ColumnHint(tuple(values), bounds["min"], bounds["max"], length)


def _fits(column: Column, value: Any) -> bool:
    if column.type == "string":
        return isinstance(value, str)
    if column.type == "boolean":
        return isinstance(value, bool)
    if column.type in _INT_RANGES:
        return isinstance(value, int) and not isinstance(value, bool)
    if column.decimal_scale is not None or column.type in ("double", "float"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, date)


