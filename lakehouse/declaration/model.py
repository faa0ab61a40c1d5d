"""The declaration's model: immutable, validated objects for sources, foreign keys, views and options."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
SIMPLE_TYPES = ("bigint", "int", "smallint", "string", "double", "float", "boolean", "date", "timestamp")
SEQUENCE_RULES = ("postgres", "mysql", "ts_ms")
SOURCE_KINDS = ("table", "events")
REPLICA_IDENTITIES = ("default", "full")
JOIN_TYPES = ("inner", "left")
PK_JOIN_TYPES = ("inner", "left", "outer")
TRIGGERS = ("available_now", "processing_time")
STARTING_OFFSETS = ("earliest", "latest")


# --------------------------------------------------------------------------- config objects


@dataclass(frozen=True)
class Column:
    """A declared source column and its Spark SQL type (`bigint`, `decimal(10,2)`, ...)."""

    name: str
    type: str

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
        raise KeyError(f"source {self.name!r} has no column {name!r}")

    def foreign_key(self, name: str) -> ForeignKey:
        for fk in self.foreign_keys:
            if fk.name == name:
                return fk
        raise KeyError(f"source {self.name!r} has no foreign key {name!r}")


@dataclass(frozen=True)
class Join:
    """One join of a gold view.

    A foreign-key join (`via: alias.fk`) looks up the referenced table's primary key from the
    columns of an earlier alias (KIP-213); a primary-key join (`on: primary_key`) matches the
    base table's key 1:1 (KIP-77) and may be outer.
    """

    alias: str
    table: str
    type: str
    parent_alias: str
    foreign_key: str | None = None  # None for a primary-key join

    @property
    def is_primary_key_join(self) -> bool:
        return self.foreign_key is None


@dataclass(frozen=True)
class ViewColumn:
    name: str
    alias: str
    column: str


@dataclass(frozen=True)
class View:
    """A gold view: the base (left, many) table, its joins, and the selected columns."""

    name: str
    base: str
    joins: tuple[Join, ...]
    columns: tuple[ViewColumn, ...]

    def table_of(self, alias: str) -> str:
        if alias == self.base:
            return self.base
        for join in self.joins:
            if join.alias == alias:
                return join.table
        raise KeyError(f"view {self.name!r} has no alias {alias!r}")

    @property
    def aliases(self) -> tuple[str, ...]:
        return (self.base,) + tuple(j.alias for j in self.joins)


@dataclass(frozen=True)
class KafkaSettings:
    topic_prefix: str
    source_schema: str = "public"
    bootstrap_servers: str | None = None  # None: the local stack's broker or CDC_ENRICH_KAFKA_BOOTSTRAP
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = 200_000


@dataclass(frozen=True)
class TableNames:
    """Where each layer's tables live, so the same code runs locally and under Unity Catalog."""

    catalog: str | None
    bronze_schema: str
    silver_schema: str
    gold_schema: str
    quality_schema: str

    def qualified(self, layer: str, table: str) -> str:
        """`[catalog.]<layer schema>.<table>` for layer bronze, silver, gold or quality."""
        schema = {
            "bronze": self.bronze_schema,
            "silver": self.silver_schema,
            "gold": self.gold_schema,
            "quality": self.quality_schema,
        }[layer]
        return ".".join(p for p in (self.catalog, schema, table) if p)

    def schemas(self) -> tuple[str, ...]:
        prefix = f"{self.catalog}." if self.catalog else ""
        return tuple(
            prefix + s for s in (self.bronze_schema, self.silver_schema, self.gold_schema, self.quality_schema)
        )


@dataclass(frozen=True)
class Options:
    history_retention_days: int = 3650
    late_grace_days: int = 30
    trigger: str = "available_now"
    processing_time: str = "10 seconds"


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

    def source(self, name: str) -> Source:
        try:
            return self.sources[name]
        except KeyError:
            raise KeyError(f"pipeline {self.name!r} has no source {name!r}") from None

    def source_for_topic(self, topic: str) -> Source:
        for src in self.sources.values():
            if src.topic == topic:
                return src
        raise KeyError(f"pipeline {self.name!r} reads no topic {topic!r}")

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(s.topic for s in self.sources.values())



def iter_foreign_key_relations(pipeline: Pipeline) -> Iterator[tuple[Source, ForeignKey]]:
    """Every (left source, foreign key) pair used by some gold view: one subscription table each."""
    seen: set[tuple[str, str]] = set()
    for view in pipeline.views.values():
        for join in view.joins:
            if join.foreign_key is None:
                continue
            left = pipeline.sources[view.table_of(join.parent_alias)]
            if (left.name, join.foreign_key) not in seen:
                seen.add((left.name, join.foreign_key))
                yield left, left.foreign_key(join.foreign_key)
