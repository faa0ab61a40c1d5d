"""A micro-batch's outcome on its way from the batch function to the run that started the query.

On a classic session a foreachBatch function runs in the driver's process: the outcome (the
stage's stats, its progress line, its metrics note) is handed to the run directly. Under Spark
Connect (Databricks serverless, Standard access mode clusters) the function is pickled and runs
in a Python worker beside the server, where the run's report is a copy nobody reads; there the
outcome is appended to a small Delta table, `<quality_schema>.batch_outcomes`, that the run
reads back while its queries run and once they stop. A batch function holds only a `Mailbox`
(picklable: no lock, no report, no session) and sends through the batch's own session.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping, Protocol

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from lakehouse.declaration import Pipeline
from lakehouse.deltasql import create_table, sql_literal
from lakehouse.frames import local_frame
from lakehouse.metrics import note_batch
from lakehouse.spark import is_connect, write_time


OUTCOMES_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("stream", StringType(), False),
        StructField("batch_id", LongType(), False),
        StructField("subject", StringType(), False),
        StructField("stats", StringType(), False),
        StructField("line", StringType(), True),
        StructField("rows_in", LongType(), False),
        StructField("rows_out", LongType(), False),
        StructField("quarantined", LongType(), False),
    ]
)
TABLE_SCHEMA = StructType(OUTCOMES_SCHEMA.fields + [StructField("written_at", TimestampType(), False)])


@dataclass(frozen=True)
class Outcome:
    """What one batch did: `subject` names the report entry (a source, a view), `stats` is
    JSON-able, `line` the progress line ("" for none); rows in/out feed the metrics row."""

    stream: str
    batch_id: int
    subject: str
    stats: Mapping[str, Any]
    line: str = ""
    rows_in: int = 0
    rows_out: int = 0
    quarantined: int = 0


class Mailbox(Protocol):
    def send(self, session: SparkSession, outcome: Outcome) -> None: ...


@dataclass
class DirectMailbox:
    """Classic session: the batch function runs in this process; hand the outcome over."""

    receive: Callable[[Outcome], None]

    def send(self, session: SparkSession, outcome: Outcome) -> None:
        deliver(outcome, self.receive)


@dataclass(frozen=True)
class TableMailbox:
    """Spark Connect: append the outcome to `table` under this run's id."""

    table: str
    run_id: str

    def send(self, session: SparkSession, outcome: Outcome) -> None:
        row = (
            self.run_id, outcome.stream, int(outcome.batch_id), outcome.subject, json.dumps(dict(outcome.stats), default=str),
            outcome.line, int(outcome.rows_in), int(outcome.rows_out), int(outcome.quarantined),
        )
        frame = local_frame(session, [row], OUTCOMES_SCHEMA).withColumn("written_at", write_time())
        frame.write.format("delta").mode("append").saveAsTable(self.table)


def deliver(outcome: Outcome, receive: Callable[[Outcome], None]) -> None:
    """The run's side of an outcome: its metrics note, then the stage's own bookkeeping."""
    note_batch(outcome.stream, outcome.batch_id, outcome.rows_in, outcome.rows_out, outcome.quarantined)
    receive(outcome)


def outcomes_table(pipeline: Pipeline) -> str:
    """`<quality_schema>.batch_outcomes`, beside the stream metrics."""
    return pipeline.tables.qualified("quality", "batch_outcomes")


@dataclass
class PostOffice:
    """The run's end: a `mailbox` for its batch functions, and `collect` to read back what
    arrived by table (a no-op on a classic session, where outcomes arrive directly)."""

    spark: SparkSession
    pipeline: Pipeline
    receive: Callable[[Outcome], None]
    mailbox: Mailbox = field(init=False)
    _seen: set[tuple[str, int]] = field(default_factory=set, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        if not is_connect(self.spark):
            self.mailbox = DirectMailbox(self.receive)
            return
        table = outcomes_table(self.pipeline)
        self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {table.rsplit('.', 1)[0]}")
        create_table(self.spark, table, TABLE_SCHEMA, comment="what each micro-batch did, from batch functions that run beside a Spark Connect server")
        self.mailbox = TableMailbox(table, f"run-{uuid.uuid4()}")

    def collect(self) -> int:
        """Deliver the outcomes that arrived by table since the last call; how many."""
        if not isinstance(self.mailbox, TableMailbox):
            return 0
        with self._lock:
            rows = (
                self.spark.table(self.mailbox.table).where(F.col("run_id") == self.mailbox.run_id)
                .orderBy("written_at").collect()
            )
            fresh = [r for r in rows if (r["stream"], int(r["batch_id"])) not in self._seen]
            for r in fresh:
                self._seen.add((r["stream"], int(r["batch_id"])))
                outcome = Outcome(
                    r["stream"], int(r["batch_id"]), r["subject"], json.loads(r["stats"]), r["line"] or "",
                    int(r["rows_in"]), int(r["rows_out"]), int(r["quarantined"]),
                )
                deliver(outcome, self.receive)
        return len(fresh)



def prune_outcomes(spark: SparkSession, pipeline: Pipeline, keep_days: int, now: datetime | None = None) -> int:
    """Drop batch outcomes older than `keep_days` (a run reads only its own, while it runs); how many."""
    cutoff = (now or datetime.now(timezone.utc)) - timedelta(days=keep_days)
    rows = spark.sql(f"DELETE FROM {outcomes_table(pipeline)} WHERE written_at < {sql_literal(cutoff)}").collect()
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0
