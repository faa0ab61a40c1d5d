"""An OLTP workload against a real PostgreSQL, derived from the pipeline declaration.

Why: the simulator (`testkit.simulator`) models what Debezium would emit; this drives the
real thing, so that the end-to-end test can hold gold against the database itself. It is generic
over the pipeline file: tables, column types and primary keys come from `sources`, REAL foreign
key constraints from `Source.foreign_keys`, REPLICA IDENTITY from `Source.replica_identity`, and
value pools, weights, operation mixes, children-per-parent and TOAST columns from the simulator's
optional `workload.yml` hints (`testkit.simulator.load_workload`).

What the transactions do, on purpose (each is a case the pipeline must get right):
- inserts, value updates, deletes, multi-row transactions (a parent with its children, or
  several unrelated changes), from two connections at once (interleaved commits);
- foreign-key changes (a child moves to another parent, or to NULL);
- primary-key changes (`UPDATE ... SET id = <new>`): Debezium emits delete + tombstone + create,
  and `ON UPDATE CASCADE` re-keys the children in the same transaction;
- parent deletes: `ON DELETE SET NULL` (the child's foreign key is outside its primary key) or
  `ON DELETE CASCADE` (inside it, e.g. order_items.order_id);
- rows of `kind: events` sources are only ever inserted: their foreign keys are plain
  `NO ACTION` constraints, and parents they reference are never deleted or re-keyed;
- TOAST columns (hint `toast:`) get values of 3-6 kB of random letters: incompressible, so
  PostgreSQL stores them out of line, and an UPDATE that leaves them alone makes Debezium send
  `__debezium_unavailable_value` (REPLICA IDENTITY DEFAULT). Most updates leave them alone.

Conflicts between the two connections (a foreign key whose parent was just deleted, a deadlock)
roll the transaction back; it is counted as `aborted` and the workload goes on.
"""

from __future__ import annotations

import random
import string
import threading
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, Callable, Iterable, Sequence

from lakehouse.declaration import Column, ForeignKey, Pipeline, Source
from lakehouse.errors import CdcEnrichError

Key = tuple[Any, ...]
Row = dict[str, Any]

PG_TYPES = {
    "bigint": "bigint",
    "int": "integer",
    "smallint": "smallint",
    "string": "text",
    "double": "double precision",
    "float": "real",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "timestamp(6) without time zone",  # Debezium: io.debezium.time.MicroTimestamp
}
TOAST_LENGTH = (3000, 6000)  # > 2 kB after (failed) compression: stored out of line
REFRESH_EVERY = 200  # transactions between reloads of the key registry from the database
PROGRESS_EVERY = 100  # transactions between calls of run_workload's progress callback
_ALPHABET = string.ascii_letters + string.digits
_INT_LIMITS = {"smallint": 32_767, "int": 2_147_483_647, "bigint": 9_223_372_036_854_775_807}
_TX_SIZES = (1, 1, 1, 1, 2, 2, 3, 4, 6)  # operations per transaction


class WorkloadError(CdcEnrichError):
    """The workload could not run (no database, a schema that cannot be created)."""


@dataclass
class WorkloadStats:
    """What a run did: committed and aborted transactions, operations per source, WAL range."""

    transactions: int = 0
    aborted: int = 0
    operations: dict[str, dict[str, int]] = field(default_factory=dict)
    elapsed_s: float = 0.0
    lsn_start: str | None = None
    lsn_end: str | None = None
    abort_reasons: dict[str, int] = field(default_factory=dict)

    def count(self, source: str, op: str, n: int = 1) -> None:
        per = self.operations.setdefault(source, {})
        per[op] = per.get(op, 0) + n

    def merge(self, other: "WorkloadStats") -> None:
        self.transactions += other.transactions
        self.aborted += other.aborted
        for source, ops in other.operations.items():
            for op, n in ops.items():
                self.count(source, op, n)
        for reason, n in other.abort_reasons.items():
            self.abort_reasons[reason] = self.abort_reasons.get(reason, 0) + n

    @property
    def rate(self) -> float:
        return self.transactions / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def render(self) -> str:
        lines = [
            f"workload: {self.transactions} transactions committed, {self.aborted} aborted, "
            f"{self.elapsed_s:.1f}s ({self.rate:.0f} tx/s); WAL {self.lsn_start} -> {self.lsn_end}"
        ]
        for source, ops in sorted(self.operations.items()):
            lines.append(f"  {source}: " + ", ".join(f"{op} {n}" for op, n in sorted(ops.items())))
        if self.abort_reasons:
            lines.append("  aborted: " + ", ".join(f"{r} {n}" for r, n in sorted(self.abort_reasons.items())))
        return "\n".join(lines)


# --------------------------------------------------------------------------- schema


def pg_type(column: Column) -> str:
    """The PostgreSQL type of a declared column (what Debezium maps back to the declared type)."""
    if column.decimal_scale is not None:
        return column.type.replace("decimal", "numeric")
    return PG_TYPES[column.type]


def parents_first(pipeline: Pipeline) -> list[Source]:
    """Sources ordered so that referenced tables come before the tables referencing them."""
    order: list[Source] = []
    seen: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in seen or name in path:
            return
        for fk in pipeline.sources[name].foreign_keys:
            if fk.references != name:
                visit(fk.references, path + (name,))
        seen.add(name)
        order.append(pipeline.sources[name])

    for name in pipeline.sources:
        visit(name, ())
    return order


def fk_actions(child: Source, fk: ForeignKey) -> tuple[str, str]:
    """(ON DELETE, ON UPDATE) of a real constraint; see the module docstring for why."""
    if child.kind == "events":
        return "NO ACTION", "NO ACTION"
    on_delete = "CASCADE" if set(fk.columns) & set(child.primary_key) else "SET NULL"
    return on_delete, "CASCADE"


def constraint_name(child: Source, fk: ForeignKey) -> str:
    return f"fk_{child.name}__{fk.name}"[:63]


def schema_statements(pipeline: Pipeline) -> list[Any]:
    """CREATE TABLE / foreign keys / REPLICA IDENTITY, each idempotent, parents first."""
    from psycopg import sql

    schema = pipeline.kafka.source_schema
    statements: list[Any] = [sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))]
    for src in parents_first(pipeline):
        table = sql.Identifier(schema, src.name)
        columns = [
            sql.SQL("{} {}{}").format(
                sql.Identifier(c.name), sql.SQL(pg_type(c)), sql.SQL(" NOT NULL" if c.name in src.primary_key else "")
            )
            for c in src.columns
        ]
        columns.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, src.primary_key))))
        statements.append(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(table, sql.SQL(", ").join(columns)))
        identity = "FULL" if src.replica_identity == "full" else "DEFAULT"
        statements.append(sql.SQL("ALTER TABLE {} REPLICA IDENTITY " + identity).format(table))
    for src in parents_first(pipeline):
        for fk in src.foreign_keys:
            target = pipeline.source(fk.references)
            on_delete, on_update = fk_actions(src, fk)
            statements.append(
                sql.SQL(
                    "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = {name}) THEN "
                    "ALTER TABLE {table} ADD CONSTRAINT {ident} FOREIGN KEY ({cols}) REFERENCES {target} ({pk}) "
                    "ON DELETE " + on_delete + " ON UPDATE " + on_update + "; END IF; END $$"
                ).format(
                    name=sql.Literal(constraint_name(src, fk)),
                    table=sql.Identifier(schema, src.name),
                    ident=sql.Identifier(constraint_name(src, fk)),
                    cols=sql.SQL(", ").join(map(sql.Identifier, fk.columns)),
                    target=sql.Identifier(schema, target.name),
                    pk=sql.SQL(", ").join(map(sql.Identifier, target.primary_key)),
                )
            )
            # the referencing side is looked up on every parent delete and key change
            statements.append(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                    sql.Identifier(f"ix_{src.name}__{fk.name}"[:63]),
                    sql.Identifier(schema, src.name),
                    sql.SQL(", ").join(map(sql.Identifier, fk.columns)),
                )
            )
    return statements


def create_schema(dsn: str, pipeline: Pipeline) -> None:
    """Create the pipeline's tables in PostgreSQL (idempotent), and the trigger-kept history of
    each table an as-of view reads (`verify --against postgres` joins as of each event's time there)."""
    import psycopg

    from lakehouse.verify.postgres import history_statements

    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            for statement in [*schema_statements(pipeline), *history_statements(pipeline)]:
                conn.execute(statement)
    except psycopg.Error as exc:
        raise WorkloadError(f"could not create the schema of pipeline {pipeline.name!r}: {exc}") from None


# --------------------------------------------------------------------------- values


class Values:
    """Column values from declared types and the simulator's hints (pools, ranges, lengths)."""

    def __init__(self, pipeline: Pipeline, rng: random.Random) -> None:
        from testkit.simulator import load_workload

        self.rng = rng
        self.workload = load_workload(pipeline)

    def hints(self, source: Source) -> Any:
        return self.workload.hints(source)

    def new(self, source: Source, column: Column) -> Any:
        hint = self.hints(source).columns.get(column.name)
        if hint is not None and hint.values:
            return self.rng.choice(hint.values)
        if column.name in self.hints(source).toast:
            return "".join(self.rng.choices(_ALPHABET, k=self.rng.randint(*TOAST_LENGTH)))
        low = hint.minimum if hint is not None else None
        high = hint.maximum if hint is not None else None
        if column.decimal_scale is not None:
            return self._decimal(column, low, high)
        if column.type in _INT_LIMITS:
            return self.rng.randint(int(low) if low is not None else 1, int(high) if high is not None else 1000)
        if column.type in ("double", "float"):
            steps = 4 if column.type == "float" else 100  # exact in binary and in decimal text
            return self.rng.randint(int((low or 0) * steps), int((high or 1000) * steps)) / steps
        if column.type == "boolean":
            return self.rng.random() < 0.5
        if column.type == "date":
            return date(2020, 1, 1) + timedelta(days=self.rng.randint(0, 2500))
        if column.type == "timestamp":
            return datetime(2024, 1, 1) + timedelta(seconds=self.rng.randint(0, 10**8), microseconds=self.rng.randint(0, 999_999))
        length = hint.length if hint is not None and hint.length else (4, 16)
        return " ".join(self._word() for _ in range(max(1, self.rng.randint(*length) // 8)))[: length[1]]

    def _word(self) -> str:
        return "".join(self.rng.choices(string.ascii_lowercase, k=self.rng.randint(3, 9)))

    def _decimal(self, column: Column, low: Decimal | None, high: Decimal | None) -> Decimal:
        scale = column.decimal_scale or 0
        precision = int(column.type[column.type.index("(") + 1 : column.type.index(",")])
        top = 10**precision - 1
        lo = int((low if low is not None else Decimal(1)) * 10**scale)
        hi = int((high if high is not None else Decimal(1000)) * 10**scale)
        return Decimal(f"{self.rng.randint(max(lo, -top), min(hi, top))}E-{scale}")


# --------------------------------------------------------------------------- the key registry


class KeySet:
    """Keys of one table: O(1) add, remove and random choice (a list plus an index)."""

    def __init__(self, keys: Iterable[Key] = ()) -> None:
        self._items: list[Key] = []
        self._index: dict[Key, int] = {}
        for key in keys:
            self.add(key)

    def __len__(self) -> int:
        return len(self._items)

    def add(self, key: Key) -> None:
        if key not in self._index:
            self._index[key] = len(self._items)
            self._items.append(key)

    def discard(self, key: Key) -> None:
        at = self._index.pop(key, None)
        if at is None:
            return
        last = self._items.pop()
        if at < len(self._items):
            self._items[at] = last
            self._index[last] = at

    def choice(self, rng: random.Random) -> Key | None:
        return self._items[rng.randrange(len(self._items))] if self._items else None


class Registry:
    """What the workers believe exists: keys per table and the next free number per key column.

    Shared by the two workers under a lock. It can be stale (a concurrent delete, a cascade):
    a statement that finds no row forgets the key, and the registry is reloaded from the
    database every REFRESH_EVERY transactions.
    """

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.lock = threading.Lock()
        self.keys: dict[str, KeySet] = {name: KeySet() for name in pipeline.sources}
        self.counters: dict[tuple[str, str], int] = {}

    def load(self, conn: Any) -> None:
        from psycopg import sql

        schema = self.pipeline.kafka.source_schema
        fresh: dict[str, KeySet] = {}
        tops: dict[tuple[str, str], int] = {}
        for src in self.pipeline.sources.values():
            cols = sql.SQL(", ").join(map(sql.Identifier, src.primary_key))
            rows = conn.execute(sql.SQL("SELECT {} FROM {}").format(cols, sql.Identifier(schema, src.name))).fetchall()
            fresh[src.name] = KeySet(tuple(r) for r in rows)
            for i, col in enumerate(src.primary_key):
                if src.column(col).type in _INT_LIMITS:
                    tops[(src.name, col)] = max((r[i] for r in rows), default=0)
        with self.lock:
            self.keys = fresh
            for slot, top in tops.items():
                self.counters[slot] = max(self.counters.get(slot, 0), top)

    def next_number(self, source: str, column: str) -> int:
        with self.lock:
            value = self.counters.get((source, column), 0) + 1
            self.counters[(source, column)] = value
            return value

    def choice(self, source: str, rng: random.Random) -> Key | None:
        with self.lock:
            return self.keys[source].choice(rng)

    def size(self, source: str) -> int:
        with self.lock:
            return len(self.keys[source])

    def apply(self, added: Sequence[tuple[str, Key]], removed: Sequence[tuple[str, Key]]) -> None:
        with self.lock:
            for source, key in removed:
                self.keys[source].discard(key)
            for source, key in added:
                self.keys[source].add(key)


# --------------------------------------------------------------------------- one transaction


class _Conflict(Exception):
    """The transaction met a concurrent change; roll back and count it."""


class Transaction:
    """Builds and runs the statements of one transaction on one connection.

    Keys inserted earlier in the same transaction are preferred as parents of later inserts,
    which gives the parent-and-children-in-one-transaction case.
    """

    def __init__(self, worker: "Worker") -> None:
        self.w = worker
        self.added: list[tuple[str, Key]] = []
        self.removed: list[tuple[str, Key]] = []
        self.ops: list[tuple[str, str]] = []

    # ------------------------------------------------------------ helpers

    @property
    def pipeline(self) -> Pipeline:
        return self.w.pipeline

    def table(self, src: Source) -> Any:
        from psycopg import sql

        return sql.Identifier(self.pipeline.kafka.source_schema, src.name)

    def where_key(self, src: Source, key: Key) -> tuple[Any, list[Any]]:
        from psycopg import sql

        parts = [sql.SQL("{} = %s").format(sql.Identifier(c)) for c in src.primary_key]
        return sql.SQL(" AND ").join(parts), list(key)

    def run(self, statement: Any, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        cur = self.w.conn.execute(statement, params)
        return cur.fetchall() if cur.description else []

    def parent_key(self, fk: ForeignKey) -> Key | None:
        fresh = [k for s, k in self.added if s == fk.references]
        if fresh and self.w.rng.random() < 0.5:
            return self.w.rng.choice(fresh)
        return self.w.registry.choice(fk.references, self.w.rng)

    def events_children(self, src: Source) -> list[tuple[Source, ForeignKey]]:
        return [
            (child, fk)
            for child in self.pipeline.sources.values()
            if child.kind == "events"
            for fk in child.foreign_keys
            if fk.references == src.name
        ]

    def not_referenced_by_events(self, src: Source) -> Any:
        """`AND NOT EXISTS (...)` per events table referencing `src`: those parents stay forever."""
        from psycopg import sql

        clauses = []
        for child, fk in self.events_children(src):
            target = self.pipeline.source(fk.references)
            match = sql.SQL(" AND ").join(
                sql.SQL("c.{} = t.{}").format(sql.Identifier(col), sql.Identifier(pk))
                for col, pk in zip(fk.columns, target.primary_key)
            )
            clauses.append(sql.SQL(" AND NOT EXISTS (SELECT 1 FROM {} c WHERE {})").format(self.table(child), match))
        return sql.SQL("").join(clauses)

    # ------------------------------------------------------------ operations

    def insert(self, src: Source, with_children: bool = True) -> Key | None:
        """A new row (parents picked among existing keys), plus its per-parent children."""
        from psycopg import sql

        row: Row = {}
        for fk in src.foreign_keys:
            parent = self.parent_key(fk)
            if parent is None and set(fk.columns) & set(src.primary_key):
                return None  # a child that needs a parent, and there is none yet
            null_fk = parent is None or (not set(fk.columns) & set(src.primary_key) and self.w.rng.random() < 0.05)
            for col, value in zip(fk.columns, parent or (None,) * len(fk.columns)):
                row[col] = None if null_fk else value
        for col in src.primary_key:
            if col not in row:
                row[col] = self.w.new_key_value(src, src.column(col))
                if row[col] is None:
                    return None  # a key pool used up: no more rows of this table
        for column in src.columns:
            if column.name not in row:
                row[column.name] = self.w.values.new(src, column)
        names = list(row)
        self.run(
            sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                self.table(src),
                sql.SQL(", ").join(map(sql.Identifier, names)),
                sql.SQL(", ").join(sql.Placeholder() * len(names)),
            ),
            [row[n] for n in names],
        )
        key = tuple(row[c] for c in src.primary_key)
        self.added.append((src.name, key))
        self.ops.append((src.name, "insert"))
        if with_children:
            self.insert_children(src)
        return key

    def insert_children(self, parent: Source) -> None:
        for child in self.pipeline.sources.values():
            per_parent = self.w.values.hints(child).per_parent
            if per_parent is None or child.foreign_key(per_parent[0]).references != parent.name:
                continue
            for _ in range(self.w.rng.randint(per_parent[1], per_parent[2])):
                self.insert(child, with_children=False)

    def update_values(self, src: Source) -> None:
        """Change one or two ordinary columns; TOAST columns are left alone most of the time."""
        from psycopg import sql

        key = self.w.registry.choice(src.name, self.w.rng)
        if key is None:
            return
        fixed = set(src.primary_key) | {c for fk in src.foreign_keys for c in fk.columns}
        toast = set(self.w.values.hints(src).toast)
        plain = [c for c in src.columns if c.name not in fixed and c.name not in toast]
        chosen = self.w.rng.sample(plain, k=min(len(plain), self.w.rng.choice((1, 1, 2))))
        if toast and (not chosen or self.w.rng.random() < 0.15):
            chosen.append(src.column(self.w.rng.choice(sorted(toast))))
        if not chosen:
            return
        sets = sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(c.name)) for c in chosen)
        where, params = self.where_key(src, key)
        found = self.run(
            sql.SQL("UPDATE {} SET {} WHERE {} RETURNING 1").format(self.table(src), sets, where),
            [self.w.values.new(src, c) for c in chosen] + params,
        )
        self.note(src, key, found, "update" if not toast or toast.isdisjoint(c.name for c in chosen) else "update_toast")

    def change_foreign_key(self, src: Source) -> bool:
        """Move a row to another parent (or to NULL); False when the table has no movable foreign key."""
        from psycopg import sql

        movable = [fk for fk in src.foreign_keys if not set(fk.columns) & set(src.primary_key)]
        if not movable:
            return False
        fk = self.w.rng.choice(movable)
        key = self.w.registry.choice(src.name, self.w.rng)
        if key is None:
            return False
        parent = None if self.w.rng.random() < 0.1 else self.parent_key(fk)
        values = list(parent) if parent is not None else [None] * len(fk.columns)
        sets = sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(c)) for c in fk.columns)
        where, params = self.where_key(src, key)
        found = self.run(sql.SQL("UPDATE {} SET {} WHERE {} RETURNING 1").format(self.table(src), sets, where), values + params)
        self.note(src, key, found, "fk_change")
        return True

    def change_primary_key(self, src: Source) -> bool:
        """Re-key a row (its children follow through ON UPDATE CASCADE); not for parents of events."""
        from psycopg import sql

        owned = {c for fk in src.foreign_keys for c in fk.columns} & set(src.primary_key)
        free = [c for c in src.primary_key if c not in owned and src.column(c).type in _INT_LIMITS]
        if not free:
            return False
        key = self.w.registry.choice(src.name, self.w.rng)
        if key is None:
            return False
        col = self.w.rng.choice(free)
        new_value = self.w.new_key_value(src, src.column(col))
        where, params = self.where_key(src, key)
        found = self.run(
            sql.SQL("UPDATE {} t SET {} = %s WHERE {}{} RETURNING 1").format(
                self.table(src), sql.Identifier(col), where, self.not_referenced_by_events(src)
            ),
            [new_value] + params,
        )
        if found:
            new_key = tuple(new_value if c == col else v for c, v in zip(src.primary_key, key))
            self.added.append((src.name, new_key))
        self.note(src, key, found, "pk_change", moved=True)
        return True

    def delete(self, src: Source) -> None:
        from psycopg import sql

        key = self.w.registry.choice(src.name, self.w.rng)
        if key is None:
            return
        where, params = self.where_key(src, key)
        found = self.run(
            sql.SQL("DELETE FROM {} t WHERE {}{} RETURNING 1").format(self.table(src), where, self.not_referenced_by_events(src)),
            params,
        )
        self.note(src, key, found, "delete", moved=True)

    def note(self, src: Source, key: Key, found: list[Any], op: str, moved: bool = False) -> None:
        """Record an operation that hit its row; forget a key that is gone (or moved away)."""
        if found:
            self.ops.append((src.name, op))
            if moved:
                self.removed.append((src.name, key))
        elif not moved or not self.events_children(src):
            self.removed.append((src.name, key))  # stale: deleted or re-keyed by someone else

    def random_operation(self) -> None:
        src = self.w.pick_source()
        if src.kind == "events":
            self.insert(src)
            return
        op = self.w.pick_op(src)
        if op == "insert":
            self.insert(src)
        elif op == "delete":
            self.delete(src)
        else:
            roll = self.w.rng.random()
            if roll < 0.12 and self.change_primary_key(src):
                return
            if roll < 0.40 and self.change_foreign_key(src):
                return
            self.update_values(src)


# --------------------------------------------------------------------------- workers


class Worker:
    """One connection running transactions; two of them run at once."""

    def __init__(self, dsn: str, pipeline: Pipeline, registry: Registry, seed: int, index: int) -> None:
        import psycopg

        self.pipeline = pipeline
        self.registry = registry
        self.rng = random.Random(seed * 1000 + index)
        self.values = Values(pipeline, self.rng)
        self.conn = psycopg.connect(dsn, connect_timeout=10, autocommit=True)  # transaction() = BEGIN..COMMIT
        self.stats = WorkloadStats()
        self.weights = [(s, max(self.values.hints(s).weight, 0.0)) for s in pipeline.sources.values()]

    def close(self) -> None:
        self.conn.close()

    def new_key_value(self, src: Source, column: Column) -> Any:
        """The next key value of `column`: a number, its pool's next value (None: the pool is used
        up), or `<source>-<n>` for a string."""
        number = self.registry.next_number(src.name, column.name)
        pool = self.values.hints(src).key_pool(column.name)
        if pool:
            return pool[number - 1] if number <= len(pool) else None
        if column.type in _INT_LIMITS:
            return number
        if column.type == "string":
            return f"{src.name}-{number:08d}"
        raise WorkloadError(f"{src.name}.{column.name}: cannot generate primary-key values of type {column.type}")

    def pick_source(self) -> Source:
        sources, weights = zip(*self.weights)
        return self.rng.choices(sources, weights=weights)[0]

    def pick_op(self, src: Source) -> str:
        ops, weights = zip(*self.values.hints(src).ops)
        return self.rng.choices(ops, weights=weights)[0]

    def transaction(self, build: Callable[[Transaction], None]) -> bool:
        """Run one transaction; True when committed, False when rolled back after a conflict."""
        import psycopg

        tx = Transaction(self)
        try:
            with self.conn.transaction():
                build(tx)
        except (
            psycopg.errors.IntegrityError,
            psycopg.errors.TransactionRollback,
            psycopg.errors.DeadlockDetected,  # SQLSTATE 40P01; psycopg 3 makes it an OperationalError
            psycopg.errors.SerializationFailure,
        ) as exc:
            # a concurrent delete or re-key (foreign key violation), a deadlock: rolled back, counted
            reason = type(exc).__name__
            self.stats.aborted += 1
            self.stats.abort_reasons[reason] = self.stats.abort_reasons.get(reason, 0) + 1
            return False
        self.registry.apply(tx.added, tx.removed)
        self.stats.transactions += 1
        for source, op in tx.ops:
            self.stats.count(source, op)
        return True

    def run(self, transactions: int, rate: float | None, stop: threading.Event, tick: Callable[[], None]) -> None:
        started = time.monotonic()
        done = 0
        while done < transactions and not stop.is_set():
            size = self.rng.choice(_TX_SIZES)
            self.transaction(lambda tx: [tx.random_operation() for _ in range(size)])
            done += 1
            tick()
            if done % REFRESH_EVERY == 0:
                self.registry.load(self.conn)
            if rate:
                delay = started + done / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)


# --------------------------------------------------------------------------- entry points


def _current_lsn(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        return str(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])


def seed_database(dsn: str, pipeline: Pipeline, seed: int, scale: int = 1, batch: int = 50) -> WorkloadStats:
    """The initial rows (hint `rows` x scale per source, children with their parents), before
    the connector starts, so that its snapshot has something to read. Idempotent only in the
    sense that it adds rows: call it once on an empty database."""
    import psycopg

    create_schema(dsn, pipeline)
    started = time.monotonic()
    registry = Registry(pipeline)
    stats = WorkloadStats(lsn_start=_current_lsn(dsn))
    worker = Worker(dsn, pipeline, registry, seed, 0)
    try:
        registry.load(worker.conn)
        for src in parents_first(pipeline):
            hints = worker.values.hints(src)
            if hints.per_parent is not None:
                continue  # created with their parents
            remaining = hints.rows * scale
            while remaining > 0:
                n = min(batch, remaining)
                worker.transaction(lambda tx, n=n, src=src: [tx.insert(src) for _ in range(n)])
                remaining -= n
    except psycopg.Error as exc:
        raise WorkloadError(f"seeding the database failed: {exc}") from None
    finally:
        worker.close()
    stats.merge(worker.stats)
    stats.elapsed_s = time.monotonic() - started
    stats.lsn_end = _current_lsn(dsn)
    return stats


@dataclass(frozen=True)
class CapturedDatabase:
    """A seeded PostgreSQL database with Debezium's connector streaming it (`capture_seeded_database`)."""

    dsn: str
    rest_port: int  # Kafka Connect's REST port: a restart of the connector reuses it
    postgres: Any  # devstack.postgres.PostgresStatus
    seeded: WorkloadStats
    connect: Any  # devstack.connect.ConnectStatus


def capture_seeded_database(lake: Any, pipeline: Pipeline, bootstrap: str, seed: int) -> CapturedDatabase:
    """The lake's PostgreSQL up (on a free port when not running) with the pipeline's database
    seeded, then Debezium's connector started and its snapshot done, in the order the connector
    needs: its publication is built from the tables, and a write before its snapshot finished
    could be lost to a restart (`connect.wait_until_streaming`)."""
    from devstack import connect, postgres
    from devstack.procs import free_port

    running = postgres.postgres_status(lake).running
    pg = postgres.postgres_up(lake, port=None if running else free_port(), database=pipeline.name)
    dsn = postgres.dsn(lake, database=pipeline.name)
    seeded = seed_database(dsn, pipeline, seed)
    rest_port = free_port()
    status = connect.connect_up(lake, pipeline, bootstrap, dsn, rest_port=rest_port)
    connect.wait_until_streaming(dsn, pipeline, lake)
    return CapturedDatabase(dsn, rest_port, pg, seeded, status)


def run_workload(
    dsn: str,
    pipeline: Pipeline,
    transactions: int,
    seed: int,
    rate: float | None = None,
    connections: int = 2,
    progress: Callable[[int], None] | None = None,
) -> WorkloadStats:
    """Run `transactions` transactions (committed or aborted) from `connections` connections at once.

    `rate`: transactions per second over all connections (None: as fast as the database goes).
    `progress(n)` is called from a worker thread after every PROGRESS_EVERY transactions (n: done
    so far over all connections), e.g. to restart the connector in the middle of the run.
    The schema is created when missing; existing rows are picked up, so runs can follow each
    other (e.g. around a connector restart).
    """
    import psycopg

    if transactions < 0 or connections < 1:
        raise WorkloadError("transactions must be >= 0 and connections >= 1")
    create_schema(dsn, pipeline)
    started = time.monotonic()
    stats = WorkloadStats(lsn_start=_current_lsn(dsn))
    registry = Registry(pipeline)
    workers: list[Worker] = []
    try:
        for i in range(connections):
            workers.append(Worker(dsn, pipeline, registry, seed, i + 1))
    except psycopg.Error as exc:
        for worker in workers:
            worker.close()
        raise WorkloadError(f"cannot connect to PostgreSQL: {exc}") from None
    errors: list[BaseException] = []
    stop = threading.Event()
    done = [0]
    done_lock = threading.Lock()

    def tick() -> None:
        with done_lock:
            done[0] += 1
            report = progress is not None and done[0] % PROGRESS_EVERY == 0
            count = done[0]
        if report:
            progress(count)

    def body(worker: Worker, share: int) -> None:
        try:
            worker.run(share, rate / connections if rate else None, stop, tick)
        except BaseException as exc:  # surfaced below, after the other worker stopped
            errors.append(exc)
            stop.set()

    try:
        registry.load(workers[0].conn)
        shares = [transactions // connections + (1 if i < transactions % connections else 0) for i in range(connections)]
        threads = [threading.Thread(target=body, args=(w, n), name=f"pg-workload-{i}") for i, (w, n) in enumerate(zip(workers, shares))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for worker in workers:
            stats.merge(worker.stats)
            worker.close()
    if errors:
        raise WorkloadError(f"the workload failed: {errors[0]!r}") from errors[0]
    stats.elapsed_s = time.monotonic() - started
    stats.lsn_end = _current_lsn(dsn)
    return stats
