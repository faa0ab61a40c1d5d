"""Analyst views: each gold view offered as a SQL view of its declared columns and freshness
(`_source_ts`, `_updated_at`), so analysts never see the lineage columns the hash check needs.

The view lives in the analyst schema (`tables.analyst_schema`, default `<gold_schema>_analyst`)
under the gold view's name and carries the same table and column comments as gold.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from lakehouse.comments import gold_comments
from lakehouse.declaration import Pipeline
from lakehouse.gold.plan import FRESHNESS_COLUMNS, ViewPlan
from lakehouse.sqltext import quote, string_literal
from lakehouse.tables import gold_table


def analyst_view(pipeline: Pipeline, view: str) -> str:
    """The analyst view's name: `[catalog.]<analyst schema>.<view>`."""
    return pipeline.tables.qualified("analyst", view)


def analyst_view_sql(pipeline: Pipeline, plan: ViewPlan) -> str:
    """`CREATE OR REPLACE VIEW` of the analyst view over the view's gold table (pure).

    >>> analyst_view_sql(shop, view_plan(shop, "orders_enriched"))  # doctest: +SKIP
    "CREATE OR REPLACE VIEW shop_gold_analyst.orders_enriched (`order_id` COMMENT 'orders.id', ...)
     COMMENT 'Gold view ...' AS SELECT `order_id`, ..., `_source_ts`, `_updated_at` FROM shop_gold.orders_enriched"
    """
    comment, columns = gold_comments(pipeline, plan.view, plan.lineage)
    shown = plan.output_columns + FRESHNESS_COLUMNS
    spec = ", ".join(f"{quote(c)} COMMENT {string_literal(columns[c])}" for c in shown)
    table = gold_table(pipeline, plan.view.name)
    comment += f" Lineage columns stay on {table}."
    return (
        f"CREATE OR REPLACE VIEW {analyst_view(pipeline, plan.view.name)} ({spec}) COMMENT {string_literal(comment)} "
        f"AS SELECT {', '.join(quote(c) for c in shown)} FROM {table}"
    )


def ensure_analyst_view(spark: SparkSession, pipeline: Pipeline, plan: ViewPlan) -> str:
    """(Re)create the view's analyst view (cheap: catalog metadata only); returns its name."""
    name = analyst_view(pipeline, plan.view.name)
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {name.rsplit('.', 1)[0]}")
    spark.sql(analyst_view_sql(pipeline, plan))
    return name
