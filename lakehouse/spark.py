"""The Spark session: the active one on Databricks, a local Delta-enabled one everywhere else.

Locally the jars resolved once by `make setup` are passed as files (nothing is resolved at
run time), and the warehouse and Derby metastore live under the lake root, so a table
written in one run is found by name in the next.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from lakehouse.declaration import Pipeline
from lakehouse.errors import SetupError
from lakehouse.paths import jars, lake_root

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def get_spark(lake: str | os.PathLike[str] | None = None, app_name: str = "cdc-enrich", ui: bool = False) -> SparkSession:
    """Return the active session if there is one (Databricks, tests), else build a local one."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    return build_local_spark(lake_root(lake), app_name=app_name, ui=ui)


def build_local_spark(lake: Path, app_name: str = "cdc-enrich", ui: bool = False, cores: int | None = None) -> SparkSession:
    """A `local[*]` session with Delta's extension and catalog, tuned for a small machine."""
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
    master = f"local[{cores}]" if cores else "local[*]"
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.jars", ",".join(str(j) for j in spark_jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.catalogImplementation", "hive" if _has_hive() else "in-memory")
        .config("spark.hadoop.javax.jdo.option.ConnectionURL", f"jdbc:derby:;databaseName={metastore};create=true")
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dderby.system.home={lake} -Duser.timezone=UTC -Dlog4j2.configurationFile={LOG_CONFIG}",
        )
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        # A stream plans every micro-batch anew; its generated classes are found here instead
        # of compiled again (the default 100 entries did not hold one bronze run's classes).
        .config("spark.sql.codegen.cache.maxEntries", "1000")
        .config("spark.default.parallelism", "4")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", os.environ.get("CDC_ENRICH_DRIVER_MEMORY", "4g"))
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.databricks.delta.properties.defaults.enableChangeDataFeed", "false")
        .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", "2")
        .config("spark.databricks.delta.schema.autoMerge.enabled", "false")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("CDC_ENRICH_SPARK_LOG_LEVEL", "ERROR"))
    return spark


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
