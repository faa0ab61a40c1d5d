"""Moving a source's silver from the earlier layout (two Delta tables, `silver.<source>` and
`silver.<source>_history`) into its store (`lakehouse.silver.store`), in place.

Per source: the store is made with the history table's recorded facts (compaction horizon,
truncates and TOAST placeholders recorded), both tables' rows are copied into it in one commit,
the two tables are renamed `<name>__before_store` (kept until their owner drops them), and the
views take the old names. Gold's queries read the change feed of the tables they started on:
the checkpoints of the views that read a moved source are removed, so their next run reads the
store's feed from its first version and writes only what differs from gold (gold's rows are
compared by hash, `lakehouse.gold`); a checkpoint at a URI is listed for its owner to remove.
Run it with no stream running; run again after a crash, it finishes what the first run began
(the rows are copied in one commit, and not again once the store holds them).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession

from lakehouse.declaration import Pipeline, Source
from lakehouse.paths import checkpoint_dir
from lakehouse.silver.layout import ensure_silver_tables, ensure_store, is_earlier_layout
from lakehouse.sqltext import quote, string_literal
from lakehouse.tables import (
    CURRENT_KIND,
    HISTORY_KIND,
    KIND_COLUMN,
    silver_current_schema,
    silver_current_table,
    silver_history_schema,
    silver_history_table,
    silver_store_schema,
    silver_store_table,
)

#: What a moved table is renamed to: `<name>` + this.
KEPT_SUFFIX = "__before_store"


@dataclass
class Migration:
    """What `migrate_silver` did: sources moved (with their rows), tables kept under new names,
    gold checkpoints removed, and those it could not remove (a URI)."""

    moved: dict[str, int] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)
    checkpoints_removed: list[str] = field(default_factory=list)
    checkpoints_to_remove: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"silver {name}: {rows} rows moved into its store" for name, rows in self.moved.items()] or [
            "silver: every source is in the store layout already; nothing moved"]
        lines += [f"kept (drop it when you no longer need it): {name}" for name in self.kept]
        lines += [f"gold checkpoint removed (the view's next run reads the store): {c}" for c in self.checkpoints_removed]
        lines += [f"remove this gold checkpoint before the view runs again: {c}" for c in self.checkpoints_to_remove]
        return "\n".join(lines)


def migrate_silver(spark: SparkSession, pipeline: Pipeline, lake: Path) -> Migration:
    """Move every source of `pipeline` whose silver is in the earlier layout into its store.

    >>> print(migrate_silver(spark, pipeline, lake).render())    # doctest: +SKIP
    silver orders: 1210 rows moved into its store
    kept (drop it when you no longer need it): shop_silver.orders__before_store
    ...
    """
    done = Migration()
    for source in pipeline.sources.values():
        current, history = silver_current_table(pipeline, source), silver_history_table(pipeline, source)
        if not (is_earlier_layout(spark, current) or is_earlier_layout(spark, history)):
            continue
        done.moved[source.name] = _move(spark, pipeline, source)
        done.kept += [f"{current}{KEPT_SUFFIX}", f"{history}{KEPT_SUFFIX}"]
    for view in pipeline.views.values():
        if not any(view.table_of(alias) in done.moved for alias in view.aliases):
            continue
        checkpoint = checkpoint_dir(lake, pipeline.name, f"gold_{view.name}")
        if isinstance(checkpoint, Path):
            if checkpoint.exists():
                shutil.rmtree(checkpoint)
                done.checkpoints_removed.append(str(checkpoint))
        else:
            done.checkpoints_to_remove.append(str(checkpoint))
    return done


def _move(spark: SparkSession, pipeline: Pipeline, source: Source) -> int:
    """One source: the store made and filled in one commit, the tables renamed, the views made."""
    current, history = silver_current_table(pipeline, source), silver_history_table(pipeline, source)
    store = silver_store_table(pipeline, source)
    facts = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {history}").collect()
             if r["key"].startswith("cdc_enrich.")}
    ensure_store(spark, pipeline, source, lambda: facts)
    names = [f.name for f in silver_store_schema(source).fields]

    def rows_of(table: str, kind: str, columns: list[str]) -> str:
        """The table's rows in the store's columns: the kind's columns it has (a column declared
        since it was made reads null), null for the rest."""
        present = set(spark.table(table).columns) & set(columns)
        values = [quote(n) if n in present else f"NULL AS {quote(n)}" for n in names if n != KIND_COLUMN]
        return f"SELECT {string_literal(kind)} AS {KIND_COLUMN}, {', '.join(values)} FROM {table}"

    # one commit: a store that holds rows already got them from a run that stopped before the renames
    if spark.table(store).limit(1).count() == 0:
        spark.sql(f"INSERT INTO {store} ({', '.join(quote(n) for n in names)}) "
                  f"{rows_of(history, HISTORY_KIND, silver_history_schema(source).fieldNames())} UNION ALL "
                  f"{rows_of(current, CURRENT_KIND, silver_current_schema(source).fieldNames())}")
    moved = spark.table(store).count()
    for name in (current, history):
        spark.sql(f"ALTER TABLE {name} RENAME TO {name}{KEPT_SUFFIX}")
    ensure_silver_tables(spark, pipeline, source)
    return moved
