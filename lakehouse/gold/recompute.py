"""The full recompute of a view (the baseline and the rebuild) and subscription sizes."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from lakehouse.declaration import Pipeline
from lakehouse.gold.as_of import as_of_view
from lakehouse.gold.delta import live_rows
from lakehouse.gold.frames import join_view
from lakehouse.gold.plan import ViewPlan, view_plan
from lakehouse.gold.windowed import whole_view
from lakehouse.tables import (
    subscription_table,
)

# --------------------------------------------------------------------------- full recompute (baseline, rebuild)


def full_recompute(spark: SparkSession, pipeline: Pipeline, view: str | ViewPlan) -> DataFrame:
    """The whole view from silver: the batch join an incremental run must equal (an as-of view's
    from the events and the joined sources' history, `lakehouse.gold.as_of`; a windowed view's
    from its event state, `lakehouse.gold.windowed`). `view`: its name, or the plan a caller
    holds already (not built again)."""
    plan = view if isinstance(view, ViewPlan) else view_plan(pipeline, view)
    if plan.view.windowed:
        return whole_view(spark, pipeline, plan)
    if plan.view.temporal:
        return as_of_view(spark, pipeline, plan)
    live = {s.name: live_rows(spark, pipeline, s) for s in plan.sources}
    return join_view(plan, live)


def subscription_sizes(spark: SparkSession, pipeline: Pipeline) -> dict[str, dict[str, int]]:
    """Rows, files and bytes of every subscription table that exists."""
    from lakehouse.declaration import iter_foreign_key_relations

    out: dict[str, dict[str, int]] = {}
    for left, fk in iter_foreign_key_relations(pipeline):
        name = subscription_table(pipeline, left, fk.name)
        if not spark.catalog.tableExists(name):
            continue
        detail = spark.sql(f"DESCRIBE DETAIL {name}").collect()[0]
        out[name] = {
            "rows": spark.table(name).count(),
            "files": int(detail["numFiles"]),
            "bytes": int(detail["sizeInBytes"]),
        }
    return out
