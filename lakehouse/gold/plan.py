"""A gold view's plan (pure): aliases, keys, relations and the columns each step needs."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from lakehouse.declaration import ForeignKey, Join, Pipeline, Source, View
from lakehouse.errors import PipelineConfigError, UnknownNameError
from lakehouse.gold import expression_join
from lakehouse.tables import (
    SEQUENCE_TYPE,
    spark_type,
)

#: Up to this many affected keys, MERGE and lookups also get a literal `IN (...)` on the first key
#: column: Delta prunes files by statistics only for literal predicates, not for joins.
LITERAL_KEY_LIMIT = 1000
#: Up to this many rows, a MERGE's source is broadcast: the join then streams the target's files
#: past it instead of shuffling every target row (measured: a 4k-row gold MERGE into 1M rows
#: 5.1-6.5 s as a shuffle join, 3.5-4.2 s broadcast).
BROADCAST_ROW_LIMIT = 200_000
#: Up to this many keys are collected to the driver to build pruning ranges (`layout.key_ranges`);
#: more are reduced to ranges in Spark.
KEY_COLLECT_LIMIT = 200_000
ROW_HASH = "_row_hash"
#: Freshness columns every gold row carries after its lineage: the latest source commit time among
#: the versions it was built from, and when the service wrote it (the analyst view shows both).
SOURCE_TS = "_source_ts"
UPDATED_AT = "_updated_at"
FRESHNESS_COLUMNS = (SOURCE_TS, UPDATED_AT)
JOIN_TYPES = {"inner": "inner", "left": "left", "outer": "full"}


# --------------------------------------------------------------------------- the view's plan (pure)


@dataclass(frozen=True)
class AliasPlan:
    """One alias of a view: where it joins, and which of its columns the view reads."""

    index: int
    alias: str
    source: Source
    join: Join | None  # None for the base
    parent: int | None
    used: tuple[str, ...]  # key + selected + outgoing join columns, in declared order

    def col(self, column: str) -> str:
        """The internal (collision-free) name of one of this alias's columns inside a join."""
        return f"_a{self.index}_{column}"

    @property
    def hash_col(self) -> str:
        return f"_a{self.index}__hash"

    @property
    def seq_col(self) -> str:
        return f"_a{self.index}__seq"

    @property
    def ts_col(self) -> str:
        return f"_a{self.index}__ts"

    @property
    def gold_hash(self) -> str:
        return f"_{self.alias}_hash"

    @property
    def gold_seq(self) -> str:
        return f"_{self.alias}_seq"


@dataclass(frozen=True)
class ViewPlan:
    """Everything about a view that gold needs, derived once from the declaration."""

    view: View
    aliases: tuple[AliasPlan, ...]
    key_columns: tuple[str, ...]  # gold's key (`Pipeline.view_key`): the output columns selecting the base primary key
    relations: tuple[tuple[Source, ForeignKey], ...]  # subscription relations this view follows
    sources: tuple[Source, ...]  # distinct silver tables the view reads, in alias order

    @property
    def base(self) -> AliasPlan:
        return self.aliases[0]

    def alias(self, name: str) -> AliasPlan:
        for plan in self.aliases:
            if plan.alias == name:
                return plan
        raise UnknownNameError(f"view {self.view.name!r} has no alias {name!r}")

    @property
    def lineage(self) -> dict[str, tuple[str, str]]:
        """alias -> (its gold hash column, its gold sequence column)."""
        return {a.alias: (a.gold_hash, a.gold_seq) for a in self.aliases}

    @property
    def lineage_columns(self) -> tuple[str, ...]:
        return tuple(c for a in self.aliases for c in (a.gold_hash, a.gold_seq))

    @property
    def output_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.view.columns)

    @property
    def gold_columns(self) -> tuple[str, ...]:
        return self.output_columns + self.lineage_columns + (ROW_HASH,) + FRESHNESS_COLUMNS

    def gold_schema(self) -> StructType:
        fields = [
            StructField(c.name, spark_type(self.alias(c.alias).source.column(c.column).type), True)
            for c in self.view.columns
        ]
        for a in self.aliases:
            fields.append(StructField(a.gold_hash, StringType(), True))
            fields.append(StructField(a.gold_seq, SEQUENCE_TYPE, True))
        fields.append(StructField(ROW_HASH, StringType(), True))
        fields += [StructField(c, TimestampType(), True) for c in FRESHNESS_COLUMNS]
        return StructType(fields)

    @property
    def has_outer(self) -> bool:
        """Some join is FULL OUTER (the declaration's `View.has_outer`)."""
        return self.view.has_outer


def view_plan(pipeline: Pipeline, view: View | str) -> ViewPlan:
    """Derive the aliases, gold key and subscription relations of a view."""
    view = pipeline.view(view)
    index = {a: i for i, a in enumerate(view.aliases)}
    outgoing: dict[str, set[str]] = {a: set() for a in view.aliases}
    for join in view.joins:
        if join.is_foreign_key_join:
            outgoing[join.parent_alias].update(pipeline.join_relation(view, join)[1].columns)
        elif join.kind == "expression":
            outgoing[join.parent_alias].update(expression_join.parent_columns(join))
    aliases: list[AliasPlan] = []
    for i, alias in enumerate(view.aliases):
        source = pipeline.source(view.table_of(alias))
        join = None if i == 0 else view.joins[i - 1]
        wanted = set(source.primary_key) | outgoing[alias] | {c.column for c in view.columns if c.alias == alias}
        if i == 0 and view.as_of:
            wanted.add(view.as_of)  # an as-of view's time
        used = tuple(c for c in source.column_names if c in wanted)
        aliases.append(AliasPlan(i, alias, source, join, None if join is None else index[join.parent_alias], used))
    relations: list[tuple[Source, ForeignKey]] = []
    for join in view.joins:  # an as-of view looks its joins up through its own index instead (lakehouse.gold.as_of)
        if join.is_foreign_key_join and not view.temporal:
            rel = pipeline.join_relation(view, join)
            if all((p.name, f.name) != (rel[0].name, rel[1].name) for p, f in relations):
                relations.append(rel)
    sources: list[Source] = []
    for a in aliases:
        if all(s.name != a.source.name for s in sources):
            sources.append(a.source)
    plan = ViewPlan(view, tuple(aliases), pipeline.view_key(view), tuple(relations), tuple(sources))
    clash = set(plan.output_columns) & (set(plan.lineage_columns) | {ROW_HASH, *FRESHNESS_COLUMNS, "_present", "_guard_seq"})
    if clash:
        raise PipelineConfigError(f"view {view.name!r}: output column(s) {sorted(clash)} clash with gold's metadata columns; rename them")
    return plan


def subscription_columns(source: Source, fk: ForeignKey) -> tuple[str, ...]:
    """fk columns then the left primary key (a column in both is kept once)."""
    return tuple(dict.fromkeys(fk.columns + source.primary_key))


def subscription_schema(source: Source, fk: ForeignKey) -> StructType:
    return StructType(
        [StructField(c, spark_type(source.column(c).type), True) for c in subscription_columns(source, fk)]
        + [StructField("_left_hash", StringType(), True), StructField("_sequence", SEQUENCE_TYPE, False)]
    )


