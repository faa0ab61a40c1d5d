"""Column values from declared types, column names and workload hints."""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal
from typing import Any

from lakehouse.declaration import (
    Column,
    Source,
)
from lakehouse.verify.truth import read_truth, read_truth_frames, write_truth_files  # noqa: F401 (the simulator's truth API)
from testkit.simulator.records import _EPOCH, _INT_RANGES
from testkit.simulator.workload import ColumnHint, Workload

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


def _scaled(unscaled_value: int, scale: int) -> Decimal:
    """An exact Decimal with `scale` places (string construction never rounds)."""
    return Decimal(f"{unscaled_value}E-{scale}")
