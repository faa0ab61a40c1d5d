"""The Debezium workload simulator: an OLTP database in memory, captured as Debezium would capture it.

Why: every guarantee of the service (convergence, no regression, exactly-once effect) is tested
against input that looks like production, including production's accidents, with the exact
database state known. The simulator is generic over the pipeline declaration: it derives values
from declared column types and column names, foreign keys from `Source.foreign_keys`, and takes
anything domain-specific (value pools, weights, TOAST columns) from an optional `workload.yml`
next to the pipeline file.

The model (a small PostgreSQL):
- tables hold rows by primary key; a transaction mutates them and emits one change per row
  touched, in order, each at its own WAL position (LSN); a primary-key update is one WAL record,
  so its delete and create share an LSN (as `lakehouse.ordering` expects);
- foreign keys behave as DEFERRABLE INITIALLY DEFERRED constraints checked at commit: a parent
  is deleted only after its children (in the same transaction), or is deleted and re-created
  with the same key in one transaction (chaos); rows of `kind: events` sources are never deleted,
  so a parent they reference is never deleted for good. Under heavy chaos some foreign keys
  dangle on purpose, as in databases where that constraint is not declared;
- the truth is the final content of every table, which is what PostgreSQL would hold.

Chaos (`none`, `some`, `heavy`) adds what production brings; see `CHAOS_PLANS`.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from lakehouse.declaration import Column, ForeignKey, Pipeline, Source, Located, Problems
from lakehouse.verify.truth import read_truth, read_truth_frames, write_truth_files  # noqa: F401 (the simulator's truth API)
from testkit.debezium_format import (
    CONNECTOR,
    NEW_KEY_HEADER,
    OLD_KEY_HEADER,
    UNAVAILABLE_VALUE,
    EnvelopeCodec,
    default_partition,
    source_info,
)
from lakehouse.errors import PipelineConfigError, StackError


Row = dict[str, Any]
Key = tuple[Any, ...]

WORKLOAD_FILE = "workload.yml"
TRUTH_FORMAT = 1
START = datetime(2026, 1, 5, 9, 0, 0, tzinfo=timezone.utc)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_OPS = ("insert", "update", "delete")
_INT_RANGES = {"smallint": 32_767, "int": 2_147_483_647, "bigint": 9_223_372_036_854_775_807}


# =========================================================================== public records


@dataclass(frozen=True)
class KafkaRecord:
    """One record as the connector hands it to Kafka (value None = tombstone)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int = 0


@dataclass
class Simulation:
    """What a run produced.

    records: in production order (global, across topics; per topic the order Kafka keeps).
    truth: source name -> final rows, sorted by primary key. Values are int, str, bool, float,
      Decimal (at the declared scale), date, and timezone-aware UTC datetimes, or None.
    stats: counts per source and op, chaos applied, LSNs and times (JSON-serialisable).
    """

    records: list[KafkaRecord]
    truth: dict[str, list[dict[str, Any]]]
    stats: dict[str, Any]


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
    for name in raw_sources:
        if name not in pipeline.sources:
            problems.add(f"sources.{name}", f"unknown source {name!r} (the pipeline declares: {', '.join(pipeline.sources)})")
    hints = {
        s.name: _parse_source_hints(s, raw_sources.get(s.name), f"sources.{s.name}", problems)
        for s in pipeline.sources.values()
    }
    return Workload(database=database, sources=hints)


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


# =========================================================================== chaos


@dataclass(frozen=True)
class ChaosPlan:
    """What one chaos level does. Rates are per transaction (per foreign-key value for null/dangling).

    Every feature with a non-zero rate happens at least once per run (forced when chance has
    not produced it by a random point of the run), so short runs still exercise it.
    """

    fk_move: float = 0.0  # update a row's foreign key to another parent (or null/dangling)
    null_fk: float = 0.0  # a new foreign-key value is null
    dangling_fk: float = 0.0  # a new foreign-key value names no parent (undeclared FK constraint)
    recreate: float = 0.0  # delete a referenced parent and re-create it, same key, one transaction
    pk_change: float = 0.0  # UPDATE of a primary key: delete + tombstone + create
    noop_update: float = 0.0  # UPDATE that changes nothing (still an event)
    restarts: int = 0  # connector restarts: a range of records re-delivered (same key and value bytes)
    lags_s: tuple[float, ...] = ()  # one topic per entry produced this many seconds late
    snapshot_replays: int = 0  # topics whose old snapshot is re-sent mid-stream (-1: all)


CHAOS_PLANS: dict[str, ChaosPlan] = {
    "none": ChaosPlan(),
    "some": ChaosPlan(
        fk_move=0.05, null_fk=0.04, recreate=0.015, pk_change=0.015, noop_update=0.01,
        restarts=1, lags_s=(30.0,), snapshot_replays=1,
    ),
    "heavy": ChaosPlan(
        fk_move=0.12, null_fk=0.08, dangling_fk=0.03, recreate=0.04, pk_change=0.04, noop_update=0.03,
        restarts=3, lags_s=(60.0, 20.0), snapshot_replays=-1,
    ),
}
_CHAOS_OPS = ("fk_move", "recreate", "pk_change", "noop_update")


# =========================================================================== values


_FIRST = ("Ada", "Björn", "Chloé", "Dmitri", "Emeka", "Fatima", "Grace", "Hiroshi", "Inès", "José", "Kwame", "Lena",
          "Mateo", "Nadia", "Øyvind", "Priya", "Quentin", "Rosa", "Sven", "Tomás", "Uma", "Wei", "Yara", "Zoë")
_LAST = ("Abara", "Becker", "Castillo", "Dubois", "Eriksen", "Fujita", "García", "Haddad", "Ivanova", "Jensen",
         "Kowalski", "Lindqvist", "Müller", "Nakamura", "O'Brien", "Petrov", "Quinn", "Rossi", "Silva", "Tanaka")
_WORDS = ("amber", "basalt", "cedar", "delta", "ember", "fjord", "granite", "harbor", "indigo", "juniper", "kelp",
          "lumen", "meadow", "nimbus", "onyx", "prairie", "quartz", "russet", "sierra", "tundra", "umber", "velvet",
          "willow", "xenon", "yarrow", "zephyr")
_STATUSES = ("new", "pending", "active", "on_hold", "closed")
_CATEGORY_SUFFIXES = ("segment", "type", "kind", "category", "method", "tier", "level", "channel", "region",
                      "country", "currency", "status", "state")


def _string_style(name: str) -> str:
    """A generic guess from a column name; workload hints override it."""
    n = name.lower()
    if "email" in n:
        return "email"
    if n in ("name", "full_name") or n.endswith("_name"):
        return "person"
    if n in ("sku", "code") or n.endswith(("_code", "_sku", "_ref", "_number")):
        return "code"
    if n in ("title", "label", "subject", "headline"):
        return "title"
    if n in ("description", "body", "text", "content", "notes", "comment", "details") or n.endswith(("_description", "_text", "_notes")):
        return "text"
    if n in ("status", "state"):
        return "status"
    if n.endswith(_CATEGORY_SUFFIXES):
        return "category"
    return "word"


class _Values:
    """Generates column values from types, names and hints (deterministic given the rng)."""

    def __init__(self, rng: random.Random, workload: Workload) -> None:
        self.rng = rng
        self.workload = workload
        self._serial = 0

    def new(self, source: Source, column: Column, when_us: int) -> Any:
        hint = self.workload.hints(source).columns.get(column.name, ColumnHint())
        if hint.values:
            return self.rng.choice(hint.values)
        if column.decimal_scale is not None:
            return self._decimal(column, hint)
        if column.type in _INT_RANGES:
            return self._int(column, hint)
        if column.type in ("double", "float"):
            return self._float(column, hint)
        if column.type == "boolean":
            return self.rng.random() < 0.5
        if column.type == "timestamp":
            return _EPOCH + timedelta(microseconds=when_us)
        if column.type == "date":
            return (_EPOCH + timedelta(microseconds=when_us)).date()
        toast = column.name in self.workload.hints(source).toast
        return self._string(column, hint, toast)

    def changed(self, source: Source, column: Column, old: Any, when_us: int) -> Any:
        """A new value for an UPDATE, different from the old one where the type allows."""
        if column.type == "timestamp":
            new = _EPOCH + timedelta(microseconds=when_us)
            return new if new != old else new + timedelta(microseconds=1)
        if column.type == "date":
            new = (_EPOCH + timedelta(microseconds=when_us)).date()
            return new if new != old else new + timedelta(days=1)
        if column.type == "boolean":
            return not old if old is not None else True
        value = old
        for _ in range(8):
            value = self.new(source, column, when_us)
            if value != old:
                break
        return value

    def _decimal(self, column: Column, hint: ColumnHint) -> Decimal:
        """Drawn as an unscaled integer within the hint and the declared precision (exact, no context rounding)."""
        scale = column.decimal_scale or 0
        precision = int(column.type[column.type.index("(") + 1 : column.type.index(",")])
        top = 10**precision - 1
        lo = int(hint.minimum * 10**scale) if hint.minimum is not None else 1
        hi = int(hint.maximum * 10**scale) if hint.maximum is not None else 1000 * 10**scale
        return _scaled(self.rng.randint(max(lo, -top), min(hi, top)), scale)

    def _int(self, column: Column, hint: ColumnHint) -> int:
        limit = _INT_RANGES[column.type]
        name = column.name.lower()
        default_hi = 10 if any(w in name for w in ("quantity", "qty", "count")) else 1000
        lo = int(hint.minimum) if hint.minimum is not None else 1
        hi = int(hint.maximum) if hint.maximum is not None else default_hi
        return self.rng.randint(max(lo, -limit - 1), min(hi, limit))

    def _float(self, column: Column, hint: ColumnHint) -> float:
        # quarters for `float` (exact in 32 bits), cents for `double`: the JSON text is then exact too
        steps = 4 if column.type == "float" else 100
        lo = float(hint.minimum) if hint.minimum is not None else 0.0
        hi = float(hint.maximum) if hint.maximum is not None else 1000.0
        return self.rng.randint(int(lo * steps), int(hi * steps)) / steps

    def _string(self, column: Column, hint: ColumnHint, toast: bool) -> str:
        if hint.length or toast:
            lo, hi = hint.length or (300, 1500)
            return self._text(self.rng.randint(lo, hi))
        style = _string_style(column.name)
        self._serial += 1
        rng = self.rng
        if style == "email":
            return f"{rng.choice(_WORDS)}.{rng.choice(_WORDS)}{self._serial}@example.{rng.choice(('com', 'org', 'net'))}"
        if style == "person":
            return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        if style == "code":
            return f"{column.name[:3].upper()}-{self._serial:06d}"
        if style == "title":
            return " ".join(rng.choice(_WORDS).capitalize() for _ in range(rng.randint(2, 4)))
        if style == "text":
            return self._text(rng.randint(60, 300))
        if style == "status":
            return rng.choice(_STATUSES)
        if style == "category":
            return f"{column.name}_{rng.randint(1, 5)}"
        return rng.choice(_WORDS)

    def _text(self, length: int) -> str:
        words: list[str] = []
        size = 0
        while size < length:
            word = self.rng.choice(_WORDS)
            words.append(word)
            size += len(word) + 1
        return " ".join(words)[:length].rstrip() or "x"


# =========================================================================== the database


def _key(source: Source, row: Mapping[str, Any]) -> Key:
    return tuple(row[c] for c in source.primary_key)


def _fk_value(fk: ForeignKey, row: Mapping[str, Any]) -> Key | None:
    value = tuple(row.get(c) for c in fk.columns)
    return None if any(v is None for v in value) else value


class _Table:
    """Rows by primary key, plus an O(1) random pick (deterministic: no set iteration anywhere)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.rows: dict[Key, Row] = {}
        self._keys: list[Key] = []
        self._pos: dict[Key, int] = {}

    def put(self, key: Key, row: Row) -> None:
        if key not in self.rows:
            self._pos[key] = len(self._keys)
            self._keys.append(key)
        self.rows[key] = row

    def remove(self, key: Key) -> Row:
        row = self.rows.pop(key)
        index = self._pos.pop(key)
        last = self._keys.pop()
        if last != key:
            self._keys[index] = last
            self._pos[last] = index
        return row

    def pick(self, rng: random.Random) -> Key | None:
        return self._keys[rng.randrange(len(self._keys))] if self._keys else None


class _Database:
    """Tables plus a reverse foreign-key index (parent key -> referencing child keys)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.tables = {name: _Table(src) for name, src in pipeline.sources.items()}
        self.referencing: dict[str, list[tuple[Source, ForeignKey]]] = {name: [] for name in pipeline.sources}
        for src in pipeline.sources.values():
            for fk in src.foreign_keys:
                if fk.references in self.referencing:
                    self.referencing[fk.references].append((src, fk))
        self._index: dict[tuple[str, str], dict[Key, dict[Key, None]]] = {
            (src.name, fk.name): {} for src in pipeline.sources.values() for fk in src.foreign_keys
        }
        self._serials: dict[tuple[Any, ...], int] = {}

    def serial(self, scope: tuple[Any, ...]) -> int:
        """Next value of a sequence (a `serial` column, or line numbers per parent)."""
        value = self._serials.get(scope, 0) + 1
        self._serials[scope] = value
        return value

    def put(self, source: Source, row: Row) -> None:
        key = _key(source, row)
        old = self.tables[source.name].rows.get(key)
        if old is not None:
            self._unindex(source, key, old)
        self.tables[source.name].put(key, row)
        for fk in source.foreign_keys:
            parent = _fk_value(fk, row)
            if parent is not None:
                self._index[(source.name, fk.name)].setdefault(parent, {})[key] = None

    def delete(self, source: Source, key: Key) -> Row:
        row = self.tables[source.name].remove(key)
        self._unindex(source, key, row)
        return row

    def _unindex(self, source: Source, key: Key, row: Row) -> None:
        for fk in source.foreign_keys:
            parent = _fk_value(fk, row)
            children = self._index[(source.name, fk.name)].get(parent) if parent is not None else None
            if children is not None:
                children.pop(key, None)
                if not children:
                    del self._index[(source.name, fk.name)][parent]

    def children(self, source: Source, key: Key) -> list[tuple[Source, Key]]:
        """Every row that references this one, in a deterministic order."""
        found = []
        for child, fk in self.referencing[source.name]:
            for child_key in self._index[(child.name, fk.name)].get(key, {}):
                found.append((child, child_key))
        return found

    def row(self, source: Source, key: Key) -> Row:
        return self.tables[source.name].rows[key]


# =========================================================================== transactions and emission


@dataclass
class _Change:
    """One row change of a transaction, before Debezium's encoding."""

    source: Source
    op: str  # c, u, d
    old: Row | None  # for the create half of a primary-key change: the row under its old key
    new: Row | None
    headers: tuple[tuple[str, bytes], ...] = ()
    shares_lsn: bool = False  # the create half of a primary-key update: same WAL record as the delete


@dataclass
class _Tx:
    commit_us: int
    changes: list[_Change] = field(default_factory=list)


@dataclass
class _Item:
    """A record on the production timeline (time in simulated microseconds, seq breaks ties)."""

    record: KafkaRecord
    time_us: int
    seq: int
    phase: str  # snapshot | stream
    run: int = 0  # which run of the connector produced it (a restart starts a new one)


class _Emitter:
    """Turns committed changes into Debezium records: LSNs, txIds, source blocks, images, tombstones."""

    def __init__(self, pipeline: Pipeline, workload: Workload, rng: random.Random, schemas_enabled: bool, partitions: int) -> None:
        self.pipeline = pipeline
        self.rng = rng
        self.partitions = partitions
        self.db_name = workload.database
        self.names = {s.name: _schema_and_table(pipeline, s) for s in pipeline.sources.values()}
        self.codecs = {
            s.name: EnvelopeCodec(s, f"{pipeline.kafka.topic_prefix}.{'.'.join(self.names[s.name])}", schemas_enabled)
            for s in pipeline.sources.values()
        }
        self.toast = {s.name: workload.hints(s).toast if s.replica_identity == "default" else () for s in pipeline.sources.values()}
        self.items: list[_Item] = []
        self.wal = 24_000_000 + rng.randrange(0, 8_000_000, 8)
        self.tx_id = 700 + rng.randrange(300)
        self.last_commit_end: int | None = None
        self.last_lsn = 0
        self.last_proc_us = 0  # the connector handles one event at a time: processing time never goes back
        self.ops: dict[str, dict[str, int]] = {s: {"r": 0, "c": 0, "u": 0, "d": 0, "tombstone": 0} for s in pipeline.sources}
        self.snapshot_lsn = 0
        self.snapshot_tx_id = 0

    # ---------------------------------------------------------------- snapshot

    def snapshot(self, db: _Database, start_us: int) -> int:
        """All rows at one LSN in one transaction; returns the end time.

        As Debezium 3.6.3 does it (seen against PostgreSQL 15): tables in `table.include.list`
        order (the pipeline's source order), and one `source.ts_ms` (the snapshot's start) on
        every snapshot record of every table.
        """
        self.tx_id += 1
        self.snapshot_lsn, self.snapshot_tx_id = self.wal, self.tx_id
        tables = list(self.pipeline.sources.values())
        clock = start_us
        for t_index, src in enumerate(tables):
            rows = list(db.tables[src.name].rows.values())
            table_ts = start_us
            for r_index, row in enumerate(rows):
                clock += self.rng.randrange(20, 400)
                marker = _snapshot_marker(t_index == 0, t_index == len(tables) - 1, r_index == 0, r_index == len(rows) - 1)
                info = self._info(src, table_ts, marker, self.snapshot_lsn, None, self.snapshot_tx_id)
                self._add(src, "r", None, row, (), info, clock, "snapshot")
            clock += self.rng.randrange(2_000, 30_000)
        self.wal += self.rng.randrange(200, 4_000, 8)
        self.last_proc_us = clock
        return clock

    # ---------------------------------------------------------------- streaming

    def commit(self, tx: _Tx) -> None:
        """Assign WAL positions in change order, then encode every change (plus tombstones)."""
        self.tx_id += self.rng.choice((1, 1, 1, 2, 3))
        self.wal += self.rng.choice((0, 0, 0, self.rng.randrange(8, 4_000, 8)))  # other sessions' WAL
        proc_us = max(tx.commit_us + self.rng.randrange(2_000, 150_000), self.last_proc_us + 50)
        lsn = self.wal
        for change in tx.changes:
            if not change.shares_lsn:
                lsn = self.wal
                self.wal += self.rng.randrange(48, 640, 8)
            proc_us += self.rng.randrange(10, 300)
            self._emit(change, lsn, tx.commit_us, proc_us)
            self.last_lsn, self.last_proc_us = lsn, proc_us
        self.last_commit_end = self.wal + 32  # the COMMIT record, then the next free position
        self.wal = self.last_commit_end

    def _emit(self, change: _Change, lsn: int, commit_us: int, proc_us: int) -> None:
        src = change.source
        before, after = self._images(change)
        info = self._info(src, commit_us, "false", lsn, self.last_commit_end, self.tx_id)
        self._add(src, change.op, before, after, change.headers, info, proc_us, "stream", change.old if change.op == "d" else change.new)

    def _images(self, change: _Change) -> tuple[Row | None, Row | None]:
        """`before`/`after` as the replica identity and TOAST storage make them."""
        src = change.source
        full = src.replica_identity == "full"
        if change.op == "c" and change.old is None:
            return None, change.new
        if change.op == "d":
            assert change.old is not None
            return (change.old if full else {k: change.old[k] for k in src.primary_key}), None
        assert change.old is not None and change.new is not None
        # PostgreSQL logs an unchanged out-of-line (TOASTed) value of the new tuple by
        # reference, so Debezium sends the placeholder: on updates, and (seen with Debezium
        # 3.6.3) on the create half of a primary-key change too.
        after = dict(change.new)
        for column in self.toast[src.name]:
            if after[column] == change.old[column]:
                after[column] = UNAVAILABLE_VALUE
        if change.op == "c":
            return None, after
        return (change.old if full else None), after

    def _info(self, src: Source, commit_us: int, marker: str, lsn: int, last_commit: int | None, tx_id: int) -> dict[str, Any]:
        schema, table = self.names[src.name]
        return source_info(
            server=self.pipeline.kafka.topic_prefix, db=self.db_name, schema=schema, table=table,
            commit_us=commit_us, snapshot=marker, lsn=lsn, last_commit_lsn=last_commit, tx_id=tx_id,
        )

    def _add(self, src: Source, op: str, before: Row | None, after: Row | None, headers: tuple[tuple[str, bytes], ...],
             info: dict[str, Any], proc_us: int, phase: str, key_row: Row | None = None) -> None:
        codec = self.codecs[src.name]
        key = codec.key(key_row if key_row is not None else after or before or {})
        value = codec.value(op, before, after, info, proc_us, proc_us * 1000 + self.rng.randrange(1000))
        partition = default_partition(key, self.partitions) if self.partitions > 1 else 0
        self._append(KafkaRecord(src.topic, key, value, headers, partition), proc_us, phase)
        self.ops[src.name][op] += 1
        if op == "d":  # the tombstone copies the delete's key and headers
            self._append(KafkaRecord(src.topic, key, None, headers, partition), proc_us, phase)
            self.ops[src.name]["tombstone"] += 1

    def _append(self, record: KafkaRecord, time_us: int, phase: str) -> None:
        self.items.append(_Item(record, time_us, len(self.items), phase))


def _schema_and_table(pipeline: Pipeline, source: Source) -> tuple[str, str]:
    """The PostgreSQL schema and table behind a topic `<prefix>.<schema>.<table>`."""
    prefix = pipeline.kafka.topic_prefix + "."
    rest = source.topic[len(prefix):] if source.topic.startswith(prefix) else ""
    if rest.count(".") == 1:
        schema, table = rest.split(".")
        return schema, table
    return pipeline.kafka.source_schema, source.name


def _snapshot_marker(first_table: bool, last_table: bool, first_row: bool, last_row: bool) -> str:
    """Debezium's `source.snapshot` for a snapshot record (RelationalSnapshotChangeEventSource)."""
    if last_row and last_table:
        return "last"
    if first_row and first_table:
        return "first"
    if last_row:
        return "last_in_data_collection"
    if first_row:
        return "first_in_data_collection"
    return "true"


# =========================================================================== the workload


class _Driver:
    """Runs the OLTP workload: snapshot state, then transactions until enough change events."""

    def __init__(self, pipeline: Pipeline, workload: Workload, plan: ChaosPlan, seed: int, schemas_enabled: bool, partitions: int) -> None:
        self.pipeline = pipeline
        self.workload = workload
        self.plan = plan
        self.rng = random.Random(seed)
        self.db = _Database(pipeline)
        self.values = _Values(self.rng, workload)
        self.emitter = _Emitter(pipeline, workload, self.rng, schemas_enabled, partitions)
        self.sources = list(pipeline.sources.values())
        self.chaos = {k: 0 for k in ("fk_moves", "null_fks", "dangling_fks", "parent_recreates", "pk_changes", "noop_updates")}
        self._deadline = {k: self.rng.uniform(0.1, 0.5) for k in _CHAOS_OPS + ("null_fk", "dangling_fk")}
        self.progress = 0.0
        self.clock_us = _micros(START)

    # ---------------------------------------------------------------- snapshot

    def build_snapshot(self, scale: int) -> None:
        """The database as the connector finds it: parents first, children per parent or by count."""
        past = 365 * 86_400 * 1_000_000
        for src in _parents_first(self.pipeline):
            hints = self.workload.hints(src)
            if hints.per_parent:
                fk = src.foreign_key(hints.per_parent[0])
                for parent_key in list(self.db.tables[fk.references].rows):
                    for _ in range(self.rng.randint(hints.per_parent[1], hints.per_parent[2])):
                        self._insert(None, src, {fk.name: parent_key}, self.clock_us - self.rng.randrange(past))
            else:
                for _ in range(hints.rows * scale):
                    self._insert(None, src, {}, self.clock_us - self.rng.randrange(past))
        self.clock_us = self.emitter.snapshot(self.db, self.clock_us) + 2_000_000

    # ---------------------------------------------------------------- streaming

    def stream(self, events: int) -> int:
        """Commit transactions until `events` change events were emitted; returns the count."""
        emitted = transactions = idle = 0
        while emitted < events and idle < 200:  # idle: no operation possible (e.g. only children, no parents)
            self.progress = emitted / events
            self.clock_us += int(self.rng.expovariate(1 / 150_000)) + 1_000
            tx = _Tx(self.clock_us)
            self._fill(tx)
            idle = 0 if tx.changes else idle + 1
            if tx.changes:
                self.emitter.commit(tx)
                emitted += len(tx.changes)
                transactions += 1
        return transactions

    def _fill(self, tx: _Tx) -> None:
        chaos_op = self._chaos_op()
        if chaos_op and getattr(self, f"_op_{chaos_op}")(tx):
            self.chaos[_CHAOS_COUNTER[chaos_op]] += 1
            if self.rng.random() < 0.5:
                return
        for _ in range(self.rng.choices((1, 2, 3), weights=(70, 20, 10))[0]):
            self._regular_op(tx)

    def _chaos_op(self) -> str | None:
        for name in _CHAOS_OPS:
            rate = getattr(self.plan, name)
            if rate and (self.rng.random() < rate or self._overdue(name, _CHAOS_COUNTER[name])):
                return name
        return None

    def _overdue(self, name: str, counter: str) -> bool:
        return self.chaos[counter] == 0 and self.progress >= self._deadline[name]

    def _regular_op(self, tx: _Tx) -> None:
        weights = [self.workload.hints(s).weight for s in self.sources]
        if not any(weights):
            return
        for _ in range(6):
            src = self.rng.choices(self.sources, weights=weights)[0]
            names, op_weights = zip(*self.workload.hints(src).ops)
            if not any(op_weights):
                continue
            op = self.rng.choices(names, weights=op_weights)[0]
            if getattr(self, f"_op_{op}")(tx, src):
                return

    # ---------------------------------------------------------------- regular operations

    def _op_insert(self, tx: _Tx, src: Source) -> bool:
        return self._insert(tx, src, {}, tx.commit_us) is not None

    def _op_update(self, tx: _Tx, src: Source) -> bool:
        key = self.db.tables[src.name].pick(self.rng)
        columns = _mutable_columns(src)
        if src.kind != "table" or key is None or not columns:
            return False
        old = self.db.row(src, key)
        new = dict(old)
        for column in self.rng.sample(columns, k=min(len(columns), self.rng.choice((1, 1, 2)))):
            new[column.name] = self.values.changed(src, column, old[column.name], tx.commit_us)
        self._update(tx, src, old, new)
        return True

    def _op_delete(self, tx: _Tx, src: Source) -> bool:
        if src.kind != "table":
            return False
        for _ in range(5):
            key = self.db.tables[src.name].pick(self.rng)
            plan = self._cascade(src, key, [], set()) if key is not None else None
            if plan is not None:
                for victim, victim_key in plan:
                    tx.changes.append(_Change(victim, "d", self.db.delete(victim, victim_key), None))
                return True
        return False

    def _cascade(self, src: Source, key: Key, plan: list[tuple[Source, Key]], seen: set[tuple[str, Key]]) -> list[tuple[Source, Key]] | None:
        """Rows to delete, children first; None when an event row (never deleted) depends on it
        or the cascade grows beyond a plausible single transaction."""
        seen.add((src.name, key))
        for child, child_key in self.db.children(src, key):
            if child.kind == "events" or len(plan) > 40:
                return None
            if (child.name, child_key) not in seen and self._cascade(child, child_key, plan, seen) is None:
                return None
        plan.append((src, key))
        return plan

    def _insert(self, tx: _Tx | None, src: Source, parents: dict[str, Key], when_us: int) -> Row | None:
        """Insert one row (and its per-parent children, when streaming); None if impossible."""
        row: Row = {}
        kinds: list[str] = []
        for fk in src.foreign_keys:
            value, kind = (parents[fk.name], "parent") if fk.name in parents else self._choose_parent(src, fk, tx is not None)
            if kind == "impossible":
                return None
            kinds.append(kind)
            row.update(zip(fk.columns, value if value is not None else (None,) * len(fk.columns)))
        key = self._new_key(src, row)
        if key is None:
            return None
        row.update(key)
        for column in src.columns:
            if column.name not in row:
                row[column.name] = self.values.new(src, column, when_us)
        row = {c: row[c] for c in src.column_names}
        self.db.put(src, row)
        self._count_references(kinds)
        if tx is not None:
            tx.changes.append(_Change(src, "c", None, row))
            self._insert_children(tx, src, _key(src, row))
        return row

    def _insert_children(self, tx: _Tx, parent: Source, parent_key: Key) -> None:
        for child, fk in self.db.referencing[parent.name]:
            per_parent = self.workload.hints(child).per_parent
            if per_parent and per_parent[0] == fk.name and child.name != parent.name:
                for _ in range(self.rng.randint(per_parent[1], per_parent[2])):
                    self._insert(tx, child, {fk.name: parent_key}, tx.commit_us)

    def _choose_parent(self, src: Source, fk: ForeignKey, streaming: bool) -> tuple[Key | None, str]:
        """A referenced key and its kind: `parent` (an existing row), `null` or `dangling` (chaos),
        `root` (null in a self-reference with no rows yet) or `impossible` (no parent exists)."""
        in_key = set(fk.columns) <= set(src.primary_key)
        if streaming and not in_key:
            if self._roll("null_fk", self.plan.null_fk, "null_fks"):
                return None, "null"
            if self._roll("dangling_fk", self.plan.dangling_fk, "dangling_fks"):
                dangling = self._dangling(src, fk)
                if dangling is not None:
                    return dangling, "dangling"
        parent = self.db.tables[fk.references].pick(self.rng)
        if parent is None:
            return (None, "root") if fk.references == src.name and not in_key else (None, "impossible")
        return parent, "parent"

    def _roll(self, name: str, rate: float, counter: str) -> bool:
        return bool(rate) and (self.rng.random() < rate or self._overdue(name, counter))

    def _count_references(self, kinds: list[str]) -> None:
        for kind in kinds:
            if kind in ("null", "dangling"):
                self.chaos[f"{kind}_fks"] += 1

    def _dangling(self, src: Source, fk: ForeignKey) -> Key | None:
        """A key no parent has or will have (far above every serial), for int-typed keys only."""
        types = [src.column(c).type for c in fk.columns]
        if any(t not in ("int", "bigint") for t in types):
            return None
        n = self.db.serial(("dangling", fk.references))
        return tuple(1_000_000_000 + n for _ in types)

    def _new_key(self, src: Source, row: Row) -> Row | None:
        """Primary-key values: inherited from parents where the key contains a foreign key,
        the rest from a sequence (per parent for line numbers); None if the key is taken."""
        fixed = {c: row[c] for c in src.primary_key if c in row}
        free = [c for c in src.primary_key if c not in fixed]
        if any(v is None for v in fixed.values()):
            return None
        key = dict(fixed)
        if free:
            n = self.db.serial((src.name,) + tuple(fixed[c] for c in src.primary_key if c in fixed))
            key.update({c: _key_value(src.column(c), n) for c in free})
        if tuple(key[c] for c in src.primary_key) in self.db.tables[src.name].rows:
            return None
        return key

    def _update(self, tx: _Tx, src: Source, old: Row, new: Row) -> None:
        self.db.put(src, new)
        tx.changes.append(_Change(src, "u", old, new))

    # ---------------------------------------------------------------- chaos operations

    def _op_fk_move(self, tx: _Tx) -> bool:
        """Point a row at another parent (orders moving between customers), or at null/nothing."""
        candidates = [(s, fk) for s in self.sources if s.kind == "table" for fk in s.foreign_keys
                      if not set(fk.columns) & set(s.primary_key) and self.db.tables[s.name].rows]
        if not candidates:
            return False
        src, fk = self.rng.choice(candidates)
        old = self.db.row(src, self.db.tables[src.name].pick(self.rng))  # type: ignore[arg-type]
        value, kind = self._choose_parent(src, fk, streaming=True)
        if kind == "impossible" or value == _fk_value(fk, old):
            return False
        new = dict(old)
        new.update(zip(fk.columns, value if value is not None else (None,) * len(fk.columns)))
        self._update(tx, src, old, new)
        self._count_references([kind])
        return True

    def _op_recreate(self, tx: _Tx) -> bool:
        """Delete a referenced parent and insert it again with the same key, in one transaction
        (legal with deferred foreign keys: the children never dangle at commit)."""
        parents = [s for s in self.sources if s.kind == "table" and self.db.referencing[s.name] and self.db.tables[s.name].rows]
        if not parents:
            return False
        src = self.rng.choice(parents)
        key = self._pick_referenced(src)
        old = self.db.delete(src, key)
        tx.changes.append(_Change(src, "d", old, None))
        new = {c: old[c] for c in src.primary_key}
        for column in src.columns:
            if column.name not in new:
                new[column.name] = old[column.name] if column.name in _fk_columns(src) else self.values.new(src, column, tx.commit_us)
        new = {c: new[c] for c in src.column_names}
        self.db.put(src, new)
        tx.changes.append(_Change(src, "c", None, new))
        return True

    def _pick_referenced(self, src: Source) -> Key:
        """A row with children if one is found quickly, else any row."""
        table = self.db.tables[src.name]
        key = table.pick(self.rng)
        for _ in range(10):
            if self.db.children(src, key):  # type: ignore[arg-type]
                break
            key = table.pick(self.rng)
        return key  # type: ignore[return-value]

    def _op_pk_change(self, tx: _Tx) -> bool:
        """UPDATE ... SET <primary key> on a row nothing references: delete + tombstone + create."""
        tables = [s for s in self.sources if s.kind == "table" and self.db.tables[s.name].rows]
        self.rng.shuffle(tables)
        for src, _attempt in ((s, a) for s in tables for a in range(3)):
            key = self.db.tables[src.name].pick(self.rng)
            if key is None or self.db.children(src, key):
                continue
            old = self.db.row(src, key)
            new_key = self._new_key(src, {c: old[c] for c in _fk_columns(src) if c in src.primary_key})
            if new_key is None:
                continue
            new = {**old, **new_key}
            self.db.delete(src, key)
            self.db.put(src, new)
            codec = self.emitter.codecs[src.name]
            tx.changes.append(_Change(src, "d", old, None, ((NEW_KEY_HEADER, codec.key_header(new)),)))
            tx.changes.append(_Change(src, "c", old, new, ((OLD_KEY_HEADER, codec.key_header(old)),), shares_lsn=True))
            return True
        return False

    def _op_noop_update(self, tx: _Tx) -> bool:
        """UPDATE t SET x = x: an event whose after equals before."""
        tables = [s for s in self.sources if s.kind == "table" and self.db.tables[s.name].rows]
        if not tables:
            return False
        src = self.rng.choice(tables)
        old = self.db.row(src, self.db.tables[src.name].pick(self.rng))  # type: ignore[arg-type]
        self._update(tx, src, old, dict(old))
        return True


_CHAOS_COUNTER = {"fk_move": "fk_moves", "recreate": "parent_recreates", "pk_change": "pk_changes", "noop_update": "noop_updates"}


def _fk_columns(src: Source) -> tuple[str, ...]:
    return tuple(c for fk in src.foreign_keys for c in fk.columns)


def _mutable_columns(src: Source) -> list[Column]:
    """Columns an ordinary UPDATE changes: not the key, not foreign keys, not creation stamps."""
    fixed = set(src.primary_key) | set(_fk_columns(src))
    return [c for c in src.columns if c.name not in fixed and not c.name.lower().startswith("created")]


def _key_value(column: Column, n: int) -> Any:
    """The n-th value of a key sequence, for any declared type."""
    if column.type in _INT_RANGES:
        return n
    if column.decimal_scale is not None:
        return _scaled(n * 10**column.decimal_scale, column.decimal_scale)
    if column.type in ("double", "float"):
        return float(n)
    if column.type == "date":
        return date(2000, 1, 1) + timedelta(days=n)
    if column.type == "timestamp":
        return START + timedelta(seconds=n)
    if column.type == "boolean":
        return n % 2 == 1
    return f"{column.name}-{n:06d}"


def _scaled(unscaled_value: int, scale: int) -> Decimal:
    """An exact Decimal with `scale` places (string construction never rounds)."""
    return Decimal(f"{unscaled_value}E-{scale}")


def _parents_first(pipeline: Pipeline) -> list[Source]:
    """Sources ordered so referenced tables come before referencing ones (cycles broken)."""
    order: list[Source] = []
    state: dict[str, str] = {}

    def visit(name: str) -> None:
        if state.get(name):
            return
        state[name] = "visiting"
        for fk in pipeline.sources[name].foreign_keys:
            if fk.references != name and fk.references in pipeline.sources:
                visit(fk.references)
        state[name] = "done"
        order.append(pipeline.sources[name])

    for source_name in pipeline.sources:
        visit(source_name)
    return order


def _micros(moment: datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


# =========================================================================== the production timeline


class _Timeline:
    """Production order: commit order, then connector restarts, snapshot replays and lagging topics."""

    def __init__(self, items: list[_Item], rng: random.Random, server: str) -> None:
        self.items = items
        self.rng = rng
        self.server = server
        self.run_starts: list[int] = []  # when each connector run after the first began producing
        self.next_seq = len(items)
        self.applied: dict[str, Any] = {"redelivered": [], "redelivered_records": 0, "snapshot_replays": {}, "lagging_topics": {}}

    def _copy(self, item: _Item, time_us: int) -> _Item:
        self.next_seq += 1
        return replace(item, time_us=time_us, seq=self.next_seq)

    def _ordered(self, phase: str) -> list[_Item]:
        return sorted((it for it in self.items if it.phase == phase), key=lambda it: (it.time_us, it.seq))

    def restart(self) -> None:
        """A connector restart: records since the last flushed offset are produced again (same
        keys and values; the new run's context headers) after some downtime; everything later
        is produced after them."""
        stream = self._ordered("stream")
        if len(stream) < 20:
            return
        size = max(3, len(stream) // 25)
        start = self.rng.randrange(len(stream) // 10, len(stream) - size)
        low, high = stream[start].time_us, stream[start + size - 1].time_us
        shift = high - low + self.rng.randrange(2, 10) * 1_000_000
        copies = [self._copy(it, it.time_us + shift) for it in stream if low <= it.time_us <= high]
        for item in self.items:
            if item.time_us > high:
                item.time_us += shift
        self.run_starts = sorted([t + shift if t > high else t for t in self.run_starts] + [low + shift])
        self.items.extend(copies)
        self.applied["redelivered"].append({"from_ts_ms": low // 1000, "to_ts_ms": high // 1000, "records": len(copies)})
        self.applied["redelivered_records"] += len(copies)

    def assign_runs(self) -> None:
        """Tag every record with the connector run that produced it (after the restarts, before
        any lag moves records in time): runs follow each other in production time."""
        for item in self.items:
            item.run = sum(1 for start in self.run_starts if start <= item.time_us)

    def replay_snapshot(self, count: int) -> None:
        """Old snapshot records (same LSN, so older than live changes) re-sent mid-stream."""
        snapshot, stream = self._ordered("snapshot"), self._ordered("stream")
        topics = sorted({it.record.topic for it in snapshot})
        if not snapshot or not stream or not topics:
            return
        chosen = topics if count < 0 else self.rng.sample(topics, min(count, len(topics)))
        first, last = stream[0].time_us, stream[-1].time_us
        at = first + int((last - first) * self.rng.uniform(0.4, 0.8))
        base = snapshot[0].time_us
        run = max((it.run for it in stream if it.time_us <= at), default=0)
        for topic in chosen:
            copies = [replace(self._copy(it, at + it.time_us - base), run=run) for it in snapshot if it.record.topic == topic]
            self.items.extend(copies)
            self.applied["snapshot_replays"][topic] = len(copies)

    def lag(self, seconds: tuple[float, ...]) -> None:
        """Whole topics produced late (their own order kept), e.g. a slow partition leader."""
        topics = sorted({it.record.topic for it in self.items})
        chosen = self.rng.sample(topics, min(len(seconds), len(topics)))
        for topic, lag_s in zip(chosen, seconds):
            for item in self.items:
                if item.record.topic == topic:
                    item.time_us += int(lag_s * 1_000_000)
            self.applied["lagging_topics"][topic] = lag_s

    def records(self) -> list[KafkaRecord]:
        """The records in production order, each with the context headers of its connector run."""
        run_ids = [_run_id(self.rng) for _ in range(1 + len(self.run_starts))]
        out = []
        for it in sorted(self.items, key=lambda it: (it.time_us, it.seq)):
            context = (
                ("__debezium.context.connectorLogicalName", self.server.encode()),
                ("__debezium.context.taskId", b"0"),
                ("__debezium.context.connectorName", CONNECTOR.encode()),
                ("__debezium.context.runId", run_ids[it.run].encode()),
            )
            out.append(replace(it.record, headers=it.record.headers + context))
        return out


def _run_id(rng: random.Random) -> str:
    """A connector run's id as Debezium 3.6 writes it: a version-7 UUID (random bits here)."""
    bits = rng.getrandbits(128)
    bits = (bits & ~(0xF << 76)) | (0x7 << 76)  # version 7
    bits = (bits & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=bits))


# =========================================================================== public API


def simulate(
    pipeline: Pipeline,
    seed: int = 0,
    scale: int = 1,
    events: int = 1000,
    chaos: str = "none",
    schemas_enabled: bool = False,
    partitions: int = 1,
    workload: Path | None = None,
) -> Simulation:
    """Run the workload over the pipeline's sources; the same arguments give the same bytes."""
    if chaos not in CHAOS_PLANS:
        raise ValueError(f"chaos must be one of {', '.join(CHAOS_PLANS)}, not {chaos!r}")
    if scale < 0 or events < 0 or partitions < 1:
        raise ValueError(f"need scale >= 0, events >= 0 and partitions >= 1 (got {scale}, {events}, {partitions})")
    plan = CHAOS_PLANS[chaos]
    hints = load_workload(pipeline, workload)
    driver = _Driver(pipeline, hints, plan, seed, schemas_enabled, partitions)
    driver.build_snapshot(scale)
    transactions = driver.stream(events)
    timeline = _Timeline(driver.emitter.items, random.Random(f"{seed}:timeline"), pipeline.kafka.topic_prefix)
    for _ in range(plan.restarts):
        timeline.restart()
    timeline.assign_runs()
    if plan.snapshot_replays:
        timeline.replay_snapshot(plan.snapshot_replays)
    timeline.lag(plan.lags_s)
    records = timeline.records()
    truth = _truth(pipeline, driver.db)
    stats = _stats(pipeline, driver, timeline, records, truth, transactions,
                   dict(seed=seed, scale=scale, events_requested=events, chaos=chaos, schemas_enabled=schemas_enabled, partitions=partitions))
    return Simulation(records=records, truth=truth, stats=stats)


def _truth(pipeline: Pipeline, db: _Database) -> dict[str, list[dict[str, Any]]]:
    return {
        name: [dict(db.tables[name].rows[k]) for k in sorted(db.tables[name].rows)]
        for name in pipeline.sources
    }


def _stats(pipeline: Pipeline, driver: _Driver, timeline: _Timeline, records: list[KafkaRecord],
           truth: dict[str, list[dict[str, Any]]], transactions: int, run: dict[str, Any]) -> dict[str, Any]:
    emitter = driver.emitter
    ops = emitter.ops
    return {
        "truth_format": TRUTH_FORMAT,
        "pipeline": pipeline.name,
        **run,
        "records": len(records),
        "change_events": sum(o["c"] + o["u"] + o["d"] for o in ops.values()),
        "transactions": transactions,
        "snapshot": {"lsn": emitter.snapshot_lsn, "tx_id": emitter.snapshot_tx_id, "rows": {s: o["r"] for s, o in ops.items()}},
        "final_lsn": emitter.last_lsn or emitter.snapshot_lsn,  # of the last change event
        "final_commit_end_lsn": emitter.last_commit_end,
        "final_tx_id": emitter.tx_id,
        "ops": ops,
        "rows": {name: len(rows) for name, rows in truth.items()},
        "topics": {s.name: s.topic for s in pipeline.sources.values()},
        "chaos_applied": {**driver.chaos, **timeline.applied},
        "sources": {
            s.name: {"kind": s.kind, "primary_key": list(s.primary_key), "columns": [[c.name, c.type] for c in s.columns]}
            for s in pipeline.sources.values()
        },
    }


# --------------------------------------------------------------------------- truth files


def write_truth(sim: Simulation, directory: Path) -> None:
    """The simulation's final rows and stats as the truth files `verify --truth` reads."""
    write_truth_files(sim.truth, sim.stats, directory)


# --------------------------------------------------------------------------- producing


def produce(
    records: Iterable[KafkaRecord],
    bootstrap: str,
    rate: float | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Produce records in order (idempotent producer, acks=all), creating topics first; returns
    the count. `rate` caps records per second; `progress` gets the running count now and then."""
    from confluent_kafka import KafkaException, Producer

    batch = list(records)
    _create_topics(bootstrap, batch)
    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 5, "log_level": 0,
    })
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    started = time.monotonic()
    try:
        for count, rec in enumerate(batch, start=1):
            _produce_one(producer, rec, delivered)
            _pace(started, count, rate)
            if progress and count % 1000 == 0:
                progress(count)
        left = producer.flush(60)
    except KafkaException as exc:
        raise StackError(f"producing to Kafka at {bootstrap} failed: {exc}") from None
    if left or failures:
        raise StackError(f"producing to Kafka at {bootstrap}: {left} record(s) undelivered, errors: {failures[:3]}")
    if progress:
        progress(len(batch))
    return len(batch)


def _produce_one(producer: Any, rec: KafkaRecord, delivered: Callable[[Any, Any], None]) -> None:
    while True:
        try:
            producer.produce(rec.topic, value=rec.value, key=rec.key, partition=rec.partition,
                             headers=list(rec.headers) or None, on_delivery=delivered)
            break
        except BufferError:  # local queue full: let deliveries drain
            producer.poll(0.1)
    producer.poll(0)


def _pace(started: float, count: int, rate: float | None) -> None:
    if rate:
        ahead = started + count / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


def _create_topics(bootstrap: str, records: list[KafkaRecord]) -> None:
    """Create every topic with enough partitions for the records (stack.create_topics if present)."""
    partitions: dict[str, int] = {}
    for rec in records:
        partitions[rec.topic] = max(partitions.get(rec.topic, 1), rec.partition + 1)
    by_count: dict[int, list[str]] = {}
    for topic, count in partitions.items():
        by_count.setdefault(count, []).append(topic)
    from devstack.broker import create_topics

    for count, topics in sorted(by_count.items()):
        create_topics(bootstrap, topics, count)
