"""The declaration's model: immutable, validated objects for sources, foreign keys, views and options."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator, Mapping

from lakehouse.errors import UnknownNameError
from lakehouse.ordering import RULES
from lakehouse.streaming import TRIGGERS  # noqa: F401 (the pipeline file's `options.trigger` values)

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
SIMPLE_TYPES = ("bigint", "int", "smallint", "string", "double", "float", "boolean", "date", "timestamp")
SEQUENCE_RULES = tuple(RULES)  # lakehouse.ordering: the one registry of ordering rules
SOURCE_KINDS = ("table", "events", "global")  # global: a small table, joined by broadcast on a key expression
REPLICA_IDENTITIES = ("default", "full")
JOIN_TYPES = ("inner", "left")
PK_JOIN_TYPES = ("inner", "left", "outer")
EXPRESSION_JOIN_TYPES = ("inner", "left")  # a global table joined on a key expression
WINDOW_JOIN_TYPES = ("inner", "left", "outer")  # two events sources paired within a time bound
STARTING_OFFSETS = ("earliest", "latest")


# --------------------------------------------------------------------------- config objects


@dataclass(frozen=True)
class Column:
    """A declared source column and its Spark SQL type (`bigint`, `decimal(10,2)`, ...)."""

    name: str
    type: str
    description: str | None = None  # for analysts: a Delta column comment, the data dictionary

    @property
    def decimal_scale(self) -> int | None:
        match = DECIMAL.match(self.type)
        return int(match.group(2)) if match else None


@dataclass(frozen=True)
class ForeignKey:
    """Columns of one source that reference another source's primary key."""

    name: str
    columns: tuple[str, ...]
    references: str


#: The kinds of rule a pipeline file may declare on a source or a view (`expectations:`).
RULE_KINDS = ("not_null", "unique", "accepted_values", "range", "regex", "row_condition", "row_count", "sql")
#: What a failed rule does: `warn` is reported, `fail` fails the quality run.
RULE_SEVERITIES = ("warn", "fail", "quarantine")
#: The kinds a `quarantine` rule may have: judged on one change at a time (`lakehouse.silver.held`).
ROW_RULE_KINDS = ("not_null", "accepted_values", "range", "regex", "row_condition")


@dataclass(frozen=True)
class Rule:
    """A user-declared expectation on a source's live silver rows or a view's gold rows
    (`lakehouse.quality.rules` turns it into a great-expectations expectation)."""

    name: str
    kind: str  # one of RULE_KINDS
    severity: str = "fail"  # warn (reported), fail (fails the quality run), quarantine (a source's changes held out of silver)
    columns: tuple[str, ...] = ()  # not_null, accepted_values, range, regex: one; unique: one or more
    values: tuple[Any, ...] = ()  # accepted_values
    minimum: float | None = None  # range, row_count
    maximum: float | None = None
    pattern: str | None = None  # regex
    condition: str | None = None  # row_condition: Spark SQL every row must satisfy
    query: str | None = None  # sql: offending rows; {table} is this table, other tables by name
    description: str | None = None

    @property
    def summary(self) -> str:
        """What the rule asks, in words: its description, or one made from its kind."""
        if self.description:
            return self.description
        cols = ", ".join(self.columns)
        lo, hi = self.minimum, self.maximum
        bounds = (f"between {lo:g} and {hi:g}" if lo is not None and hi is not None
                  else f"at least {lo:g}" if lo is not None else f"at most {hi:g}" if hi is not None else "")
        return {
            "not_null": f"{cols} is set",
            "unique": f"({cols}) is unique",
            "accepted_values": f"{cols} is one of {', '.join(map(str, self.values))}",
            "range": f"{cols} is {bounds}",
            "regex": f"{cols} matches {self.pattern}",
            "row_condition": f"every row satisfies {self.condition}",
            "row_count": f"the row count is {bounds}",
            "sql": "the rule's query finds no row",
        }[self.kind]


@dataclass(frozen=True)
class Source:
    """One captured table: its topic, primary key, columns and how its changes are ordered."""

    name: str
    topic: str
    primary_key: tuple[str, ...]
    columns: tuple[Column, ...]
    sequence: str = "postgres"
    kind: str = "table"
    replica_identity: str = "default"
    foreign_keys: tuple[ForeignKey, ...] = ()
    description: str | None = None
    rules: tuple[Rule, ...] = ()

    @property
    def is_event_stream(self) -> bool:
        """An `events` source (payments, clicks): facts in time; a view based on one is an as-of
        view (`View.temporal`), each event joined with the versions valid at its time."""
        return self.kind == "events"

    @property
    def quarantine_rules(self) -> tuple[Rule, ...]:
        """The rules a change must pass to enter silver (`lakehouse.silver.held`)."""
        return tuple(r for r in self.rules if r.severity == "quarantine")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def value_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.name not in self.primary_key)

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise UnknownNameError(f"source {self.name!r} has no column {name!r}")

    def foreign_key(self, name: str) -> ForeignKey:
        for fk in self.foreign_keys:
            if fk.name == name:
                return fk
        raise UnknownNameError(f"source {self.name!r} has no foreign key {name!r}")


@dataclass(frozen=True)
class Window:
    """A windowed join's bound (seed 002's KStream-KStream join): a joined event pairs with a
    base event of the same key when `base time - before <= joined time <= base time + after`
    (both inclusive). `grace` is how long after the latest event time seen a late event is
    still accepted; an unmatched event's row (left, outer) is written once its window plus the
    grace has closed (`lakehouse.gold.windowed`)."""

    on: tuple[tuple[str, str], ...]  # (joined column, base column) pairs: the join key
    before: timedelta
    after: timedelta
    grace: timedelta
    base_time: str | None = None  # a timestamp column of the base; None = the event's source commit time
    time: str | None = None  # a timestamp column of the joined source; None = its source commit time


@dataclass(frozen=True)
class Join:
    """One join of a gold view.

    A foreign-key join (`via: alias.fk`) looks up the referenced table's primary key from the
    columns of an earlier alias (KIP-213); a primary-key join (`on: primary_key`) matches the
    base table's key 1:1 (KIP-77) and may be outer; a key-expression join (`key: <expression>`)
    matches a global table's key to an expression of one earlier alias (KIP-99), no foreign key
    declared, inner or left.
    """

    alias: str
    table: str
    type: str
    parent_alias: str  # a key expression's: the one earlier alias it reads
    foreign_key: str | None = None  # None for a primary-key or key-expression join
    key: str | None = None  # a join on a global table: Spark SQL over `parent_alias` columns, = its primary key
    window: Window | None = None  # a windowed join of two events sources

    @property
    def kind(self) -> str:
        """`foreign_key`, `primary_key`, `expression` (a global table's key = an expression of an
        earlier alias) or `window` (two events sources within a time bound): how the join
        matches, hence how gold maintains it. The one test of a join's kind."""
        if self.window is not None:
            return "window"
        return "foreign_key" if self.foreign_key else "expression" if self.key is not None else "primary_key"

    @property
    def is_primary_key_join(self) -> bool:
        return self.kind == "primary_key"

    @property
    def is_foreign_key_join(self) -> bool:
        return self.kind == "foreign_key"

    @property
    def is_outer(self) -> bool:
        """A FULL OUTER (primary-key) join: its rows may lack the base side."""
        return self.type == "outer"


@dataclass(frozen=True)
class ViewColumn:
    name: str
    alias: str
    column: str
    description: str | None = None


@dataclass(frozen=True)
class View:
    """A gold view: the base (left, many) table, its joins, and the selected columns."""

    name: str
    base: str
    joins: tuple[Join, ...]
    columns: tuple[ViewColumn, ...]
    description: str | None = None
    rules: tuple[Rule, ...] = ()
    #: An as-of (temporal) view: its base is an `events` source and every join reads the version
    #: of the joined row valid at the event's time (`lakehouse.gold.as_of`), not the current one.
    temporal: bool = False
    #: An as-of view's time: a timestamp column of the base; None = the event's source commit time.
    as_of: str | None = None

    def table_of(self, alias: str) -> str:
        if alias == self.base:
            return self.base
        for join in self.joins:
            if join.alias == alias:
                return join.table
        raise UnknownNameError(f"view {self.name!r} has no alias {alias!r}")

    @property
    def aliases(self) -> tuple[str, ...]:
        return (self.base,) + tuple(j.alias for j in self.joins)

    @property
    def lookup_time(self) -> str | None:
        """An as-of view's time, in words for comments and the dictionary (None: current state)."""
        if not self.temporal:
            return None
        return f"as of each {self.base} row's {self.as_of}" if self.as_of else f"as of each {self.base} row's source commit time"

    @property
    def has_outer(self) -> bool:
        """Some join is FULL OUTER: then a gold row's key may come from the joined side only."""
        return any(j.is_outer for j in self.joins)

    @property
    def windowed(self) -> bool:
        """A windowed view: its one join pairs two events sources within a time bound."""
        return any(j.kind == "window" for j in self.joins)

    def key_pairs(self, base: Source) -> tuple[tuple[str, str], ...]:
        """(output column, base primary key column) per key column of `base`, the view's base table.

        The first output column selecting each base key column: gold's key, in primary key order."""
        if base.name != self.base:
            raise UnknownNameError(f"view {self.name!r} is based on {self.base!r}, not {base.name!r}")
        return tuple((self._output_of(self.base, pk), pk) for pk in base.primary_key)

    def base_key_columns(self, base: Source) -> tuple[str, ...]:
        """The output columns selecting the base table's primary key (see `key_pairs`); gold's whole row
        key is `Pipeline.view_key` (a windowed view adds the joined events' key)."""
        return tuple(out for out, _ in self.key_pairs(base))

    def _output_of(self, alias: str, column: str) -> str:
        for col in self.columns:
            if col.alias == alias and col.column == column:
                return col.name
        raise UnknownNameError(f"view {self.name!r} selects no column {alias}.{column}; a view must select its base key")


@dataclass(frozen=True)
class KafkaSettings:
    topic_prefix: str
    source_schema: str = "public"
    bootstrap_servers: str | None = None  # None: the local stack's broker or CDC_ENRICH_KAFKA_BOOTSTRAP
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = 200_000
    # Kafka client options (Java names, as Spark's Kafka source takes them), values unresolved:
    # references such as ${env:NAME} are resolved when a job starts (lakehouse.kafka).
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TableNames:
    """Where each layer's tables live, so the same code runs locally and under Unity Catalog."""

    catalog: str | None
    bronze_schema: str
    silver_schema: str
    gold_schema: str
    quality_schema: str
    analyst_schema: str | None = None  # None: <gold_schema>_analyst (see `analyst`)

    @property
    def analyst(self) -> str:
        """The schema of the analyst views over gold (declared columns and freshness, no lineage)."""
        return self.analyst_schema or f"{self.gold_schema}_analyst"

    def qualified(self, layer: str, table: str) -> str:
        """`[catalog.]<layer schema>.<table>` for layer bronze, silver, gold, analyst or quality."""
        schema = {
            "bronze": self.bronze_schema,
            "silver": self.silver_schema,
            "gold": self.gold_schema,
            "analyst": self.analyst,
            "quality": self.quality_schema,
        }[layer]
        return ".".join(p for p in (self.catalog, schema, table) if p)

    def schemas(self) -> tuple[str, ...]:
        prefix = f"{self.catalog}." if self.catalog else ""
        return tuple(
            prefix + s for s in (self.bronze_schema, self.silver_schema, self.gold_schema, self.analyst, self.quality_schema)
        )


#: How gold batches are refreshed (`options.gold_refresh`; `lakehouse.gold.cost` picks under auto).
REFRESH_MODES = ("auto", "incremental", "recompute")
#: The stages whose queries take a processing-time interval of their own (`options.intervals`).
STREAM_STAGES = ("bronze", "silver", "gold")
#: How a continuous run schedules its stages (`options.continuous`; `lakehouse.continuous`):
#: `chained`, cycles of drains in flow order; `concurrent`, every query at once on its own interval.
CONTINUOUS_SCHEDULES = ("chained", "concurrent")


@dataclass(frozen=True)
class Options:
    history_retention_days: int = 3650
    late_grace_days: int = 30
    trigger: str = "available_now"
    processing_time: str = "10 seconds"
    gold_refresh: str = "auto"  # auto (a cost model picks per batch) | incremental | recompute
    # What an incremental gold batch costs beyond what its keys and the parent tables explain, in
    # source rows read (lakehouse.gold.cost). Fitted on 2 cores, 2026-11-28, both paths side by
    # side on 0.1 % OLTP batches: at 20k, 200k and 1M fact rows the incremental path cost 3.4,
    # 4.8 and 4.9 s more than a recompute diffed against gold (which cost ~4.3 us per row read),
    # so views under ~1.7M fact rows are recomputed whatever the batch (docs/performance.md, "Gold").
    gold_incremental_overhead_rows: int = 2_500_000
    intervals: Mapping[str, str] = field(default_factory=dict)  # stage -> its own processing_time
    # How `run --continuous` schedules the stages: chained | concurrent. Chained by default: at 500
    # changes/s on 2 cores its p50 freshness was half the concurrent schedule's
    # (docs/performance.md, "Continuous runs").
    continuous: str = "chained"
    time_travel_days: int = 7  # how far Delta's own time travel reaches (VACUUM retention; lakehouse.upkeep)

    def interval(self, stage: str) -> str:
        """A stage's processing-time interval: its own under `options.intervals`, else `processing_time`."""
        return self.intervals.get(stage, self.processing_time)

    def interval_seconds(self, stage: str) -> float:
        """`interval(stage)` in seconds (the loader admits only `<n> second(s)|minute(s)`).

        >>> Options(intervals={"bronze": "2 minutes"}).interval_seconds("bronze")
        120.0
        """
        count, unit = self.interval(stage).split()
        return float(count) * (60 if unit.startswith("minute") else 1)


@dataclass(frozen=True)
class Pipeline:
    """A validated pipeline declaration."""

    name: str
    path: Path
    kafka: KafkaSettings
    tables: TableNames
    options: Options
    sources: Mapping[str, Source] = field(default_factory=dict)
    views: Mapping[str, View] = field(default_factory=dict)

    def with_options(self, **changes: Any) -> "Pipeline":
        """The same pipeline (tables, checkpoints) with some `options` changed: a bench or a test
        running one declaration under another refresh mode or schedule."""
        return replace(self, options=replace(self.options, **changes))

    def source(self, name: str) -> Source:
        try:
            return self.sources[name]
        except KeyError:
            raise UnknownNameError(
                f"pipeline {self.name!r} has no source {name!r}; declared: {', '.join(self.sources) or '(none)'}"
            ) from None

    def source_for_topic(self, topic: str) -> Source:
        for src in self.sources.values():
            if src.topic == topic:
                return src
        raise UnknownNameError(f"pipeline {self.name!r} reads no topic {topic!r}")

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(s.topic for s in self.sources.values())

    def view(self, view: View | str) -> View:
        """A view by name (or the view itself): callers accept either."""
        if isinstance(view, View):
            return view
        try:
            return self.views[view]
        except KeyError:
            raise UnknownNameError(f"pipeline {self.name!r} has no view {view!r}") from None

    def view_key(self, view: View | str) -> tuple[str, ...]:
        """Gold's row key of a view: the output columns selecting its base's primary key and,
        in a windowed view (a row is one pair of events), the joined events' too."""
        view = self.view(view)
        key = view.base_key_columns(self.source(view.base))
        for join in view.joins:
            if join.kind == "window":
                key += tuple(view._output_of(join.alias, pk) for pk in self.source(join.table).primary_key)
        return key

    def join_relation(self, view: View, join: Join) -> tuple[Source, ForeignKey]:
        """(left source, foreign key) a foreign-key join follows: one subscription relation."""
        if join.foreign_key is None:
            raise UnknownNameError(f"view {view.name!r}: join {join.alias!r} is a {join.kind} join, it follows no foreign key")
        left = self.source(view.table_of(join.parent_alias))
        return left, left.foreign_key(join.foreign_key)


def iter_foreign_key_relations(pipeline: Pipeline) -> Iterator[tuple[Source, ForeignKey]]:
    """Every (left source, foreign key) pair used by some gold view: one subscription table each."""
    seen: set[tuple[str, str]] = set()
    for view in pipeline.views.values():
        for join in view.joins:
            if not join.is_foreign_key_join or view.temporal:  # an as-of view keeps its own index
                continue
            left, fk = pipeline.join_relation(view, join)
            if (left.name, fk.name) not in seen:
                seen.add((left.name, fk.name))
                yield left, fk
