"""The oracle: a gold view as the plain SQL join a user would write, over the latest state.

Gold is maintained incrementally (`lakehouse.gold`); this module states what it must equal,
independently of that machinery: one readable SQL statement over one relation per source
(`oracle_sql`), run over any state (`oracle_view`): the simulator's truth, silver current's
live rows, or a test's hand-made rows.

It also holds `apply_silver_changes`, a reference "latest by sequence wins" maintainer of silver
current tables (deletes kept as `_deleted` rows). Tests and the gold benchmark use it to drive
gold without the streaming silver stage; it is the contract of `lakehouse.tables`, in ten lines
of MERGE, not a replacement for `lakehouse.silver`.
"""

from __future__ import annotations

import uuid
from typing import Iterable, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline, View
from lakehouse.tables import (
    silver_current_table,
)

_JOIN_KEYWORDS = {"inner": "JOIN", "left": "LEFT JOIN", "outer": "FULL OUTER JOIN"}


def _ident(name: str) -> str:
    return f"`{name}`"


def oracle_sql(pipeline: Pipeline, view: View | str, relations: Mapping[str, str]) -> str:
    """The view as one SQL statement; `relations[source]` names the relation holding that source.

    Joins are written in declared order (left-deep), each foreign-key join as
    `ON <referenced pk> = <parent alias>.<fk column>` (a null fk matches nothing), each
    primary-key join on the view's key; after a FULL OUTER primary-key join the key is
    `COALESCE(base key, joined key)` (a right-only key is still a row, as in KIP-77).
    """
    view = pipeline.views[view] if isinstance(view, str) else view
    base = pipeline.source(view.base)

    def ref(alias: str, column: str) -> str:
        return f"{_ident(alias)}.{_ident(column)}"

    keys = [ref(view.base, k) for k in base.primary_key]
    lines = [f"FROM {relations[base.name]} AS {_ident(view.base)}"]
    for join in view.joins:
        target = pipeline.source(join.table)
        if join.foreign_key is not None:
            fk = pipeline.source(view.table_of(join.parent_alias)).foreign_key(join.foreign_key)
            pairs = [(ref(join.alias, pk), ref(join.parent_alias, c)) for pk, c in zip(target.primary_key, fk.columns)]
        else:
            pairs = [(ref(join.alias, pk), key) for pk, key in zip(target.primary_key, keys)]
        on = " AND ".join(f"{right} = {left}" for right, left in pairs)
        lines.append(f"{_JOIN_KEYWORDS[join.type]} {relations[target.name]} AS {_ident(join.alias)} ON {on}")
        if join.type == "outer":
            keys = [f"COALESCE({key}, {ref(join.alias, pk)})" for key, pk in zip(keys, target.primary_key)]
    select = []
    for col in view.columns:
        if col.alias == view.base and col.column in base.primary_key:
            expr = keys[base.primary_key.index(col.column)]
        else:
            expr = ref(col.alias, col.column)
        select.append(f"  {expr} AS {_ident(col.name)}")
    return "SELECT\n" + ",\n".join(select) + "\n" + "\n".join(lines)


def oracle_view(spark: SparkSession, pipeline: Pipeline, view: View | str, state: Mapping[str, DataFrame]) -> DataFrame:
    """The view's rows over `state` (live rows per source): `oracle_sql` over temp views.

    The temp views are dropped once the statement is analysed; the DataFrame keeps its plan.
    """
    view = pipeline.views[view] if isinstance(view, str) else view
    token = uuid.uuid4().hex[:8]
    names: dict[str, str] = {}
    for alias in view.aliases:
        source = pipeline.source(view.table_of(alias))
        if source.name not in names:
            names[source.name] = f"oracle_{token}_{source.name}"
            state[source.name].select(*source.column_names).createOrReplaceTempView(names[source.name])
    try:
        return spark.sql(oracle_sql(pipeline, view, names))
    finally:
        for name in names.values():
            spark.catalog.dropTempView(name)


def silver_live_state(spark: SparkSession, pipeline: Pipeline, sources: Iterable[str] | None = None) -> dict[str, DataFrame]:
    """Live rows (`NOT _deleted`) of each silver current table, source columns only.

    By default, of every source some view reads (events sources have no current table).
    """
    if sources is None:
        sources = {pipeline.views[v].table_of(a) for v in pipeline.views for a in pipeline.views[v].aliases}
    out: dict[str, DataFrame] = {}
    for name in sorted(sources):
        source = pipeline.source(name)
        df = spark.read.table(silver_current_table(pipeline, source)).where(~F.col("_deleted"))
        out[name] = df.select(*source.column_names)
    return out


