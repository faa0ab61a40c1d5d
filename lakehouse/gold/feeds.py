"""A view's input: the change feeds of the silver tables it reads, as one tagged stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType


@dataclass(frozen=True)
class Feed:
    """One silver table's change feed in a view's stream: whose it is, the table, the columns
    read (typed) and where a new query starts reading it (Delta's `startingVersion`)."""

    source: str
    table: str
    fields: tuple[StructField, ...]
    starting_version: str = "0"  # or FROM_FEED_START


#: A feed's start when its table may have had no change feed at first (turned on later, e.g. an
#: as-of view's history tables): the version of the commit that turned it on.
FROM_FEED_START = "feed_start"


def feed_start(spark: SparkSession, table: str) -> int:
    """The version at which `table`'s change feed was last turned on (0 when it always was).

    Delta refuses a change-feed read that begins before that version; starting at `latest`
    instead skips a table's changes for good when a query's first drain reads nothing (its
    offset is not recorded, so every later start is at a newer `latest`)."""
    rows = spark.sql(f"DESCRIBE HISTORY {table}").select("version", "operationParameters").collect()
    for row in sorted(rows, key=lambda r: -r["version"]):
        if "delta.enableChangeDataFeed" in str((row["operationParameters"] or {}).get("properties", "")):
            return int(row["version"])
    return 0


def feed_fields(schema: StructType, columns: Sequence[str]) -> tuple[StructField, ...]:
    """`columns` of a table's `schema`, nullable (a feed's struct is null for other sources)."""
    by_name = {f.name: f for f in schema.fields}
    return tuple(StructField(c, by_name[c].dataType, True) for c in columns)


def change_stream(spark: SparkSession, feeds: Sequence[Feed], max_files_per_trigger: int | None = None) -> DataFrame:
    """One stream: the union of the feeds' change rows, tagged with their source.

    Each feed's rows sit in their own struct column (`_s<i>`, null for other feeds), so the
    union keeps exact types without serialising to JSON. `max_files_per_trigger` caps each
    feed's files per batch (Delta's default: 1,000).
    """
    structs = [StructType(list(feed.fields)) for feed in feeds]
    union: DataFrame | None = None
    for i, feed in enumerate(feeds):
        start = str(feed_start(spark, feed.table)) if feed.starting_version == FROM_FEED_START else feed.starting_version
        reader = spark.readStream.format("delta").option("readChangeFeed", "true").option("startingVersion", start)
        if max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
        stream = reader.table(feed.table)
        cols = [
            F.lit(feed.source).alias("_source"),
            F.col("_change_type"),
            F.col("_commit_version").cast("long").alias("_commit_version"),
        ]
        for j, struct in enumerate(structs):
            if j == i:
                cols.append(F.struct(*[F.col(c) for c in struct.fieldNames()]).alias(f"_s{j}"))
            else:
                cols.append(F.lit(None).cast(struct).alias(f"_s{j}"))
        part = stream.select(*cols)
        union = part if union is None else union.unionByName(part)
    assert union is not None
    return union


def decode_changes(feeds: Sequence[Feed], batch: DataFrame, present: Sequence[str]) -> dict[str, DataFrame]:
    """Per source present in the batch: its change rows as flat columns."""
    return {
        feed.source: batch.where(F.col("_source") == feed.source).select("_change_type", "_commit_version", f"_s{i}.*")
        for i, feed in enumerate(feeds)
        if feed.source in present
    }
