"""Judging a batch's changes by its source's quarantine rules, and holding back those that fail
(`hold_changes`, which silver's batch calls before it plans). What holding means, and how held
changes are let through again, is `lakehouse.silver.held`'s story."""

from __future__ import annotations

import logging
from typing import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline, Rule, Source
from lakehouse.deltasql import create_table
from lakehouse.spark import write_time
from lakehouse.tables import held_changes_schema, held_changes_table, key_struct

log = logging.getLogger("lakehouse.silver")


def rule_passes(rule: Rule) -> Column:
    """Whether a change row passes `rule` (a row kind): a null value passes every kind but
    not_null and row_condition (as in the quality suites); an unsent (TOAST) column passes."""
    if rule.kind == "row_condition":
        return F.coalesce(F.expr(str(rule.condition)), F.lit(False))
    column = rule.columns[0]
    value = F.col(column)
    if rule.kind == "not_null":
        ok = value.isNotNull()
    elif rule.kind == "accepted_values":
        ok = value.isNull() | value.isin(*rule.values)
    elif rule.kind == "range":
        inside = F.lit(True)
        if rule.minimum is not None:
            inside = inside & (value >= F.lit(rule.minimum))
        if rule.maximum is not None:
            inside = inside & (value <= F.lit(rule.maximum))
        ok = value.isNull() | inside
    elif rule.kind == "regex":
        ok = value.isNull() | value.rlike(str(rule.pattern))
    else:
        raise ValueError(f"rule {rule.name!r}: a quarantine rule cannot be of kind {rule.kind}")  # the loader refuses it
    return F.array_contains(F.coalesce(F.col("_unavailable"), F.array().cast("array<string>")), column) | F.coalesce(ok, F.lit(False))


def first_failing_rule(rules: Sequence[Rule]) -> Column:
    """The name of the first rule (in declared order) a change fails, null when it passes them
    all or is a delete."""
    failing = F.lit(None).cast("string")
    for rule in reversed(rules):
        failing = F.when(~rule_passes(rule), F.lit(rule.name)).otherwise(failing)
    return F.when(F.col("_deleted"), F.lit(None).cast("string")).otherwise(failing)


def reason_of(rules: Sequence[Rule]) -> Column:
    """Why a change was held, from its `_rule` column: `<name>: <what the rule asks>`."""
    reason = F.lit(None).cast("string")
    for rule in rules:
        reason = F.when(F.col("_rule") == rule.name, F.lit(f"{rule.name}: {rule.summary}")).otherwise(reason)
    return reason


def _held_rows(changes: DataFrame, source: Source, batch_id: int | None) -> DataFrame:
    """Judged changes (with `_rule`) in the held table's layout."""
    old_key = F.col("_old_key") if "_old_key" in changes.columns else F.lit(None).cast(key_struct(source))
    cols = {f.name: F.col(f.name) for f in held_changes_schema(source).fields if f.name in changes.columns}
    cols |= {"_old_key": old_key, "_reason": reason_of(source.quarantine_rules), "_batch_id": F.lit(batch_id).cast("long"),
             "_held_at": write_time(), "_released_at": F.lit(None).cast("timestamp")}
    return changes.select(*[cols[f.name].cast(f.dataType).alias(f.name) for f in held_changes_schema(source).fields])


def ensure_held_table(spark: SparkSession, pipeline: Pipeline, source: Source) -> str:
    name = held_changes_table(pipeline, source)
    if not spark.catalog.tableExists(name):
        create_table(spark, name, held_changes_schema(source),
                     comment=f"Changes of source {source.name!r} held out of silver by a quarantine rule (_released_at: let through again)")
    return name


def hold_changes(pipeline: Pipeline, source: Source, changes: DataFrame, app_id: str, batch_id: int) -> tuple[DataFrame, int]:
    """Split a batch's changes: (those that pass every quarantine rule, how many were held).
    The held ones are appended to the held table under Delta txn (`app_id`, `batch_id`), so a
    replayed batch records them once."""
    spark = changes.sparkSession
    judged = changes.withColumn("_rule", first_failing_rule(source.quarantine_rules)).localCheckpoint(eager=True)
    held = judged.where(F.col("_rule").isNotNull())
    n = held.count()
    if n:
        table = ensure_held_table(spark, pipeline, source)
        (_held_rows(held, source, batch_id).write.format("delta").mode("append")
         .option("txnAppId", app_id).option("txnVersion", batch_id).saveAsTable(table))
        log.info("silver %s: %d change(s) held by quarantine rules (%s)", source.name, n, table)
    return judged.where(F.col("_rule").isNull()).drop("_rule"), n
