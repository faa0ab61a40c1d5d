"""The Spark session: the active one on Databricks, a local Delta-enabled one everywhere else.

Locally the jars resolved once by `make setup` are passed as files (nothing is resolved at
run time), and the warehouse and Derby metastore live under the lake root, so a table
written in one run is found by name in the next.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Iterator, Mapping

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline
from lakehouse.errors import SetupError
from lakehouse.paths import jars, jvm_class_archive, lake_root

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
LOCAL_JVM_OPTIONS = "-XX:+UseParallelGC -XX:ReservedCodeCacheSize=512m"
#: More JVM options for every local Spark driver (the jobs, a local session, the local Spark
#: Connect server), after `LOCAL_JVM_OPTIONS`: a heap dump path, a JIT tier (the test suite's).
JVM_OPTIONS_ENV = "CDC_ENRICH_JVM_OPTIONS"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def get_spark(lake: str | os.PathLike[str] | None = None, app_name: str = "cdc-enrich", ui: bool = False) -> SparkSession:
    """The active session if there is one (Databricks, tests); a Spark Connect session when
    `SPARK_REMOTE` names a server (`sc://host:port`, Spark's own variable); else a local one."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if os.environ.get("SPARK_REMOTE"):
        return SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).getOrCreate()
    return build_local_spark(lake_root(lake), app_name=app_name, ui=ui)


def is_connect(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect session (serverless, Standard access mode clusters,
    Databricks Connect, a local Connect server): no sparkContext, no py4j, and a foreachBatch
    function runs in a Python worker beside the server, not in this process."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def build_local_spark(
    lake: Path, app_name: str = "cdc-enrich", ui: bool = False, cores: int | None = None, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A `local[*]` session with Delta's extension and catalog, tuned for a small machine;
    `conf` overrides `local_spark_conf` at start (static settings such as the catalog too)."""
    builder = SparkSession.builder.appName(app_name).master(f"local[{cores}]" if cores else "local[*]")
    for key, value in {**local_spark_conf(lake, ui=ui), **(conf or {})}.items():
        builder = builder.config(key, value)
    with jvm_deaf_to_sigterm():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("CDC_ENRICH_SPARK_LOG_LEVEL", "ERROR"))
    from lakehouse.py4j_cache import remember_lookups  # py4j: a local driver's, not a Connect client's

    remember_lookups(spark.sparkContext._jvm)
    return spark


@contextmanager
def jvm_deaf_to_sigterm() -> Iterator[None]:
    """SIGTERM ignored while a local Spark JVM is launched, so the JVM inherits its ignoring
    (HotSpot leaves a signal ignored at its start ignored, as `nohup` relies on for SIGHUP).

    systemd's default KillMode and a Kubernetes pod stop send SIGTERM to the whole process
    group: the JVM, a child in this process's group, died first and the run printed py4j
    tracebacks and exited 1 while its own handler (`entry.stop_on_signals`) was stopping the
    queries between batches. Now only this process hears it; the JVM exits when this process
    closes the gateway, or when it dies (SIGKILL: the JVM's stdin closes). Outside the main
    thread signals cannot be set, and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def local_spark_conf(lake: Path, ui: bool = False) -> dict[str, str]:
    """The settings of a local Spark application over `lake`: the jars `make setup` resolved,
    Delta's extension and catalog, a metastore and warehouse under the lake, tuned for a small
    machine. A local session and the local Spark Connect server (devstack) both start from them."""
    spark_jars = jars("spark")
    if not any(j.name.startswith("delta-spark") for j in spark_jars):
        raise SetupError("Delta and Kafka jars are missing from .cache/jars/spark; run `make setup` first")
    spark_jars += jars("decoder")  # bronze's JVM fast pass (lakehouse/jvm); without it the SQL pass serves
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode: never bind a public interface
    lake.mkdir(parents=True, exist_ok=True)
    warehouse = lake / "warehouse"
    metastore = lake / "metastore_db"
    return {
        "spark.jars": ",".join(str(j) for j in spark_jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.warehouse.dir": str(warehouse),
        "spark.sql.catalogImplementation": "hive" if _has_hive() else "in-memory",
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={metastore};create=true",
        # The throughput collector and room for JIT code (the two flags measured together, not
        # apart): a local Spark driver on two cores is CPU bound by planning, code generation and
        # Delta's log work. The silver test file on two pytest workers: 399 s with these, 456 s with G1.
        "spark.driver.extraJavaOptions": " ".join(filter(None, [
            f"-Dderby.system.home={lake} -Duser.timezone=UTC -Dlog4j2.configurationFile={LOG_CONFIG}",
            LOCAL_JVM_OPTIONS, class_archive_option(), os.environ.get(JVM_OPTIONS_ENV, "").strip(),
        ])),
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        # A stream plans every micro-batch anew; its generated classes are found here instead
        # of compiled again (the default 100 entries did not hold one bronze run's classes).
        "spark.sql.codegen.cache.maxEntries": "1000",
        "spark.default.parallelism": "4",
        # Memory pages of 4 MB instead of the 32 MB Spark sizes for this heap: Spark 4.1's sort
        # keeps each task's sorter in a thread-local of the pooled task threads (SortExec's
        # `rowSorter`, SPARK-52609), so sorters long finished pin their pages: three minutes into a
        # continuous run the driver held 19 sorters (`jmap -histo:live`) and 588 MB of long arrays,
        # the sampled ones 32 MB pages pinned that way (JFR's old-object samples).
        "spark.buffer.pageSize": "4m",
        "spark.sql.adaptive.enabled": "true",
        # Runtime bloom filters build a filter in a subquery job before a join whose other side is
        # filtered: on a micro-batch of a few keys that job costs more than it saves (a silver
        # batch of two changes, interleaved in one session: median 8.8 s without, 9.7 s with).
        "spark.sql.optimizer.runtime.bloomFilter.enabled": "false",
        # PySpark's DataFrame debugging captures the Python call site of every Column function
        # (a stack walk and several py4j calls each, ~330 calls per silver batch); query errors
        # then lack that call site, which the project's errors do not show anyway. A two-change
        # silver batch, interleaved in one session: median 7.53 s with it, 7.24 s without.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": os.environ.get("CDC_ENRICH_DRIVER_MEMORY", "4g"),
        "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "false",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
    }


def class_archive_option() -> str:
    """The JVM option that maps `make setup`'s class archive (`lakehouse.paths.jvm_class_archive`)
    into a local driver, or "" without one. A fresh driver then starts and runs its first Delta
    commands sooner (a session, a table created and a MERGE on 2 cores: 39-40 s -> 30-33 s with the
    tiered JIT, 33-35 s -> 22-23 s with C1 only); an archive the JVM cannot use (another JDK, other
    jars) is ignored by the JVM itself."""
    archive = jvm_class_archive()
    return f"-XX:SharedArchiveFile={archive}" if archive.is_file() else ""


def column_cache_key() -> int:
    """What a process-wide cache of built Columns is keyed by: on a classic session Columns are
    objects of one JVM (its py4j gateway); a Spark Connect client has no JVM (the key of None),
    and its Columns are plain expressions."""
    from pyspark import SparkContext

    return id(SparkContext._gateway)


def application_id(spark: SparkSession) -> str:
    """The Spark application behind `spark` (classic or Connect): what a process-wide cache of
    checked tables is keyed by, since a new application may see another catalog."""
    return spark.conf.get("spark.app.id", "") or ""


def write_time() -> Column:
    """Now, as one timestamp for every row of a write (bronze `_ingested_at`, silver `_updated_at`...).

    Not `current_timestamp()`: Spark folds that into a timestamp literal and its code
    generator inlines the value, so every micro-batch's plan becomes new Java source that
    Janino and then the JVM's JIT compile again (measured: ten classes compiled anew on each
    bronze run of the shop's five topics, none with this). A decimal constant is passed by
    reference instead, and adding a non-deterministic zero keeps the optimizer from folding it.
    """
    micros = Decimal((datetime.now(timezone.utc) - _EPOCH) // timedelta(microseconds=1))
    return F.timestamp_micros((F.lit(micros) + F.spark_partition_id() * F.lit(0)).cast("bigint"))


def _has_hive() -> bool:
    """The pyspark wheel ships Hive classes; a persistent Derby metastore needs them."""
    try:
        import pyspark

        jar_dir = Path(pyspark.__file__).parent / "jars"
        return any(p.name.startswith("spark-hive_") for p in jar_dir.glob("*.jar"))
    except Exception:  # pragma: no cover - defensive
        return False


def ensure_schemas(spark: SparkSession, pipeline: Pipeline) -> None:
    """Create the pipeline's bronze/silver/gold/quality schemas (databases) if missing."""
    for schema in pipeline.tables.schemas():
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")


def table_exists(spark: SparkSession, name: str) -> bool:
    """Whether a table exists, by its (catalog.)schema.table name."""
    return spark.catalog.tableExists(name)


def tables_exist(spark: SparkSession, names: list[str]) -> bool:
    """Whether every `[catalog.]schema.table` (or view) exists: one `SHOW TABLES` per schema,
    the cheap check of a stage that prepared its tables earlier in this process."""
    by_schema: dict[str, set[str]] = {}
    for name in names:
        schema, _, table = name.rpartition(".")
        by_schema.setdefault(schema, set()).add(table.lower())
    for schema, tables in by_schema.items():
        try:
            found = {r["tableName"].lower() for r in spark.sql(f"SHOW TABLES IN {schema}").collect()}
        except Exception:  # noqa: BLE001 - a missing schema
            return False
        if not tables <= found:
            return False
    return True
