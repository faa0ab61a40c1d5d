"""The local Spark driver's class archive (Java's AppCDS), built by `make setup`.

A driver JVM loads some 30,000 classes (Spark, Scala, Delta, Hadoop) before its first MERGE,
each read from a jar, parsed and verified; a dynamic archive written at the exit of a JVM that
ran a representative workload holds them ready to map (some 20,000: lambdas and generated
classes are not kept). Every local driver then starts from it
(`lakehouse.spark.class_archive_option`): a fresh process's session, first table and first
MERGE take about 8 s less with the tiered JIT and 12 s less with C1 only (docs/performance.md,
"Local Spark and set-up", has the figures). Classes the workload did not touch load as usual; an
archive the JVM cannot use (another JDK, other jars) is ignored by the JVM, and set-up builds it
again whenever the JDK, the pinned packages or the jars change.

Run as `python -m devstack.class_archive` (set-up does); it writes `lakehouse.paths.jvm_class_archive()`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from lakehouse.errors import SetupError
from lakehouse.paths import jvm_class_archive
from lakehouse.spark import JVM_OPTIONS_ENV, build_local_spark

JVM_EXIT_TIMEOUT_S = 300.0


def exercise(spark) -> None:  # noqa: ANN001 - a classic SparkSession
    """What the pipeline's drivers do first, in miniature: a Delta table with a change feed, an
    append, a MERGE of every clause, a change-feed read, windows, joins (one broadcast),
    aggregates, a materialization, Kafka's source. Kept short: set-up runs it once, and the
    first Delta commands are where a fresh driver spends its start."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark.sql("CREATE TABLE archive_t (id BIGINT, fk BIGINT, name STRING, seq DECIMAL(38,0), ts TIMESTAMP) USING delta "
              "CLUSTER BY (id) TBLPROPERTIES (delta.enableChangeDataFeed = true, delta.enableDeletionVectors = true)")
    rows = spark.range(200).select(
        F.col("id"), (F.col("id") % 7).alias("fk"), F.concat(F.lit("n"), F.col("id").cast("string")).alias("name"),
        F.col("id").cast("decimal(38,0)").alias("seq"), F.timestamp_millis(F.col("id") * 1000).alias("ts"),
    )
    rows.write.format("delta").mode("append").option("txnAppId", "archive").option("txnVersion", 0).saveAsTable("archive_t")
    ranked = rows.withColumn("r", F.row_number().over(Window.partitionBy("fk").orderBy(F.col("seq").desc())))
    changes = ranked.where("r <= 3").withColumn("name", F.upper("name")).localCheckpoint(eager=True)
    changes.createOrReplaceTempView("archive_changes")
    spark.sql("MERGE INTO archive_t t USING archive_changes s ON t.id = s.id AND t.id BETWEEN 0 AND 1000 "
              "WHEN MATCHED AND s.fk = 0 THEN DELETE WHEN MATCHED AND s.seq >= t.seq THEN UPDATE SET * "
              "WHEN NOT MATCHED THEN INSERT *").collect()
    parents = spark.range(7).select(F.col("id").alias("fk"), F.lit("p").alias("label"))
    joined = spark.table("archive_t").join(F.broadcast(parents), "fk").join(changes.select("id", "r"), "id", "left")
    joined.groupBy("label").agg(F.count("*"), F.max("seq"), F.collect_list("name"), F.count_distinct("fk")).collect()
    spark.read.option("readChangeFeed", "true").option("startingVersion", 0).table("archive_t").groupBy("_change_type").count().collect()
    spark.sql("DESCRIBE DETAIL archive_t").collect()
    try:  # the Kafka source's classes (nothing is read: there is no broker to read from)
        spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9").option("subscribe", "none").load().schema
    except Exception:  # noqa: BLE001 - only loading its classes matters here
        pass


def build(target: Path) -> float:
    """Run `exercise` in a fresh local driver that writes its loaded classes to `target` at exit;
    returns the seconds it took. The archive is written next to `target` and moved into place."""
    started = time.monotonic()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)  # the driver below must not map an older archive
    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    os.environ[JVM_OPTIONS_ENV] = f"{os.environ.get(JVM_OPTIONS_ENV, '')} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=off -Xlog:cds+dynamic=off".strip()
    with tempfile.TemporaryDirectory(prefix="class-archive-lake-") as lake:
        spark = build_local_spark(Path(lake), app_name="cdc-enrich-class-archive", cores=2)
        gateway = spark.sparkContext._gateway
        try:
            exercise(spark)
        finally:
            spark.stop()
            process = getattr(gateway, "proc", None)
            if process is not None:  # the JVM writes the archive as it exits: wait for it
                process.stdin.close()
                process.wait(timeout=JVM_EXIT_TIMEOUT_S)
    if not partial.is_file() or partial.stat().st_size == 0:
        raise SetupError(f"the JVM wrote no class archive at {partial}; set-up goes on without one (drivers start slower)")
    partial.replace(target)
    return time.monotonic() - started


def main() -> int:
    target = jvm_class_archive()
    seconds = build(target)
    print(f"setup: JVM class archive {target} ({target.stat().st_size // 2**20} MB) built in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
