"""A view's input: the change feeds of the silver tables it reads, as one tagged stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from lakehouse.declaration import Pipeline, Source
from lakehouse.tables import KIND_COLUMN, silver_store_table


@dataclass(frozen=True)
class Feed:
    """One silver table's change feed in a view's stream: whose it is, the table, the columns
    read (typed), where a new query starts reading it (Delta's `startingVersion`) and, for a
    source's store, the kind of row it follows (`_kind`; None: every row of the table)."""

    source: str
    table: str
    fields: tuple[StructField, ...]
    starting_version: str = "0"
    kind: str | None = None


def silver_feed(pipeline: Pipeline, source: Source, kind: str, fields: tuple[StructField, ...]) -> Feed:
    """The change feed of a source's silver rows of `kind` (`current` or `history`): its store's
    feed, filtered to that kind (Delta pushes the partition filter into the feed's scan)."""
    return Feed(source.name, silver_store_table(pipeline, source), fields, kind=kind)


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
        reader = spark.readStream.format("delta").option("readChangeFeed", "true").option("startingVersion", feed.starting_version)
        if max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
        stream = reader.table(feed.table)
        if feed.kind is not None:
            stream = stream.where(F.col(KIND_COLUMN) == feed.kind)
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
