"""The in-memory database: tables by primary key, foreign keys, the truth."""

from __future__ import annotations

import random
from typing import Any, Mapping

from lakehouse.declaration import (
    ForeignKey,
    Pipeline,
    Source,
)
from lakehouse.verify.truth import read_truth, read_truth_frames, write_truth_files  # noqa: F401 (the simulator's truth API)
from testkit.simulator.records import Key, Row

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


