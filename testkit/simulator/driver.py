"""The workload: initial rows, then transactions of inserts, updates, deletes, key and fk changes, with chaos."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta
from typing import Any

from lakehouse.declaration import (
    Column,
    ForeignKey,
    Pipeline,
    Source,
)
from lakehouse.verify.truth import read_truth, read_truth_frames, write_truth_files  # noqa: F401 (the simulator's truth API)
from testkit.debezium_format import (
    NEW_KEY_HEADER,
    OLD_KEY_HEADER,
)
from testkit.simulator.chaos import _CHAOS_OPS, ChaosPlan
from testkit.simulator.database import _Database, _fk_value, _key
from testkit.simulator.emitter import _Change, _Emitter, _Tx
from testkit.simulator.records import _EPOCH, _INT_RANGES, START, Key, Row
from testkit.simulator.values import _scaled, _Values
from testkit.simulator.workload import Workload

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
        self.chaos = {
            k: 0
            for k in ("fk_moves", "null_fks", "dangling_fks", "parent_recreates", "pk_changes", "noop_updates",
                      "resnapshots", "records_lost_in_outages")
        }
        self._deadline = {k: self.rng.uniform(0.1, 0.5) for k in _CHAOS_OPS + ("null_fk", "dangling_fk")}
        self.progress = 0.0
        self.clock_us = _micros(START)
        self._outage_rng = random.Random(f"{seed}:outages")  # its own stream: choosing outages draws nothing from the workload's

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
        outages = self._outages(events)
        lost_from: int | None = None  # first item of the running outage
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
                if outages and lost_from is None and emitted >= outages[0][0]:
                    lost_from = len(self.emitter.items)
                elif outages and lost_from is not None and emitted >= outages[0][1]:
                    self._resnapshot(lost_from)
                    outages.pop(0)
                    lost_from = None
        if lost_from is not None:
            self._resnapshot(lost_from)
        return transactions

    def _outages(self, events: int) -> list[tuple[int, int]]:
        """(first, end) emitted-event counts of each outage: a few percent of the run, apart."""
        count = self.plan.resnapshots
        if not count or events < 50:
            return []
        starts = sorted(self._outage_rng.uniform(0.2, 0.8) for _ in range(count))
        return [(int(events * s), int(events * s) + max(5, int(events * self._outage_rng.uniform(0.02, 0.05)))) for s in starts]

    def _resnapshot(self, lost_from: int) -> None:
        """The connector was down with its offsets lost: what it would have sent since
        `lost_from` is never sent; it comes back with a new snapshot of every table."""
        lost = len(self.emitter.items) - lost_from
        del self.emitter.items[lost_from:]
        self.chaos["resnapshots"] += 1
        self.chaos["records_lost_in_outages"] += lost
        self.clock_us += 3_000_000
        self.clock_us = self.emitter.snapshot(self.db, self.clock_us, phase="resnapshot") + 1_000_000

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
        if src.is_event_stream or key is None or not columns:
            return False
        old = self.db.row(src, key)
        new = dict(old)
        for column in self.rng.sample(columns, k=min(len(columns), self.rng.choice((1, 1, 2)))):
            new[column.name] = self.values.changed(src, column, old[column.name], tx.commit_us)
        self._update(tx, src, old, new)
        return True

    def _op_delete(self, tx: _Tx, src: Source) -> bool:
        if src.is_event_stream:
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
            hints = self.workload.hints(src)
            for c in free:
                pool = hints.key_pool(c)
                if pool and n > len(pool):
                    return None
                key[c] = pool[n - 1] if pool else _key_value(src.column(c), n)
        if tuple(key[c] for c in src.primary_key) in self.db.tables[src.name].rows:
            return None
        return key

    def _update(self, tx: _Tx, src: Source, old: Row, new: Row) -> None:
        self.db.put(src, new)
        tx.changes.append(_Change(src, "u", old, new))

    # ---------------------------------------------------------------- chaos operations

    def _op_fk_move(self, tx: _Tx) -> bool:
        """Point a row at another parent (orders moving between customers), or at null/nothing."""
        candidates = [(s, fk) for s in self.sources if not s.is_event_stream for fk in s.foreign_keys
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
        parents = [s for s in self.sources if not s.is_event_stream and self.db.referencing[s.name] and self.db.tables[s.name].rows]
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
        tables = [s for s in self.sources if not s.is_event_stream and self.db.tables[s.name].rows]
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
        tables = [s for s in self.sources if not s.is_event_stream and self.db.tables[s.name].rows]
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


