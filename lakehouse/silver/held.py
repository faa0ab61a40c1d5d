"""Quarantine rules: a source's changes that break a rule of severity `quarantine` are held out of
silver, recorded in `silver._held_<source>` with the rule's name and why, and let through again
when they pass.

- **Held, nothing lost.** Each change of a batch is judged before it is applied (`first_failing_rule`,
  a pure column over the change row). A change that fails is written to the held table (the
  change itself, the rule, a reason, the batch) and left out of the batch: silver (and so gold)
  never sees it. A delete is never held (it carries no values to judge). A column whose value
  Debezium did not send (a TOAST placeholder) is not judged: silver takes its previous value.
- **Corrected upstream.** A later change of the same key that passes is applied as usual: silver
  moves on and the held change stays held (its version never enters history while it fails).
- **Rule fixed.** When a stage starts, `release_held` judges every held change against the
  rules the pipeline file declares now and applies those that pass, through the same path as a
  bronze batch (`apply_changes`): an older change than the key's current one lands in history
  only, exactly as a late change would have. Released rows keep their record (`_released_at`).

Judging one change at a time is what a quarantine rule can do: unique, row counts and queries
over a table are checks of a table's state (`warn` or `fail`, run by the quality stage).

The judging and holding live in `lakehouse.silver.holding` (silver's batch calls it); the
release, which applies changes through silver's batch, lives here.
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline, Source
from lakehouse.deltasql import last_commit, matched_update, merge
from lakehouse.silver.apply import BatchClock, SilverStats, StreamState, apply_changes
from lakehouse.silver.holding import first_failing_rule
from lakehouse.silver.layout import history_facts
from lakehouse.spark import write_time
from lakehouse.sqltext import quote
from lakehouse.tables import delta_txn, held_changes_table

log = logging.getLogger("lakehouse.silver")


def release_held(spark: SparkSession, pipeline: Pipeline, source: Source, app_id: str) -> int:
    """Apply the held changes that pass the rules declared now, and mark them released; how
    many. Idempotent: applying a change twice changes nothing, and a release interrupted
    between the two is finished by the next one."""
    name = held_changes_table(pipeline, source)
    if not spark.catalog.tableExists(name):
        return 0
    version = int(last_commit(spark, name)["version"])
    waiting = spark.table(name).where(F.col("_released_at").isNull())
    free = waiting.withColumn("_still", first_failing_rule(source.quarantine_rules)).where(F.col("_still").isNull())
    keys = [*source.primary_key, "_sequence"]
    # one row per (key, sequence): a change held twice (a replayed batch before its txn) is one change
    free = free.dropDuplicates(keys).localCheckpoint(eager=True)
    n = free.count()
    if not n:
        return 0
    changes = free.select(*[c.name for c in source.columns], "_sequence", "_source_ts", "_op", "_deleted", "_unavailable", "_old_key")
    moves = free.where(F.col("_old_key").isNotNull()).limit(1).count() > 0
    stats = SilverStats()
    facts = history_facts(spark, pipeline, source)
    state = StreamState()
    state.learn(spark, pipeline, source, facts)
    apply_changes(changes if moves else changes.drop("_old_key"), pipeline, source, app_id, version, state, stats,
                  BatchClock(f"silver {source.name} release at held version {version}"), known_truncates=state.truncates or [],
                  horizon=facts.compacted_before, moves=moves)
    on = " AND ".join(f"t.{quote(k)} <=> s.{quote(k)}" for k in keys) + " AND t._released_at IS NULL"
    with delta_txn(spark, f"{app_id}:released", version):
        merge(free.select(*keys).withColumn("_released_at", write_time()), name, on, [matched_update({"_released_at": "s._released_at"})])
    log.info("silver %s: %d held change(s) pass the rules now and were applied", source.name, n)
    return n
