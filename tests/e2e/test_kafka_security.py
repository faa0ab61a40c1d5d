"""Bronze against a secured Kafka: the local broker's SASL_SSL listener (SCRAM-SHA-512 over TLS,
certificate made by the JDK's keytool), credentials referenced from the environment.

- the pipeline file's `kafka.options` reach Spark's Kafka source and the service's own clients:
  bronze reads every record the simulator produced over the same secured listener;
- a wrong password fails before any query starts, with an error that says what to check and
  holds no secret;
- the password is nowhere: not in the output, the broker's log, any table the run wrote, any
  file of its checkpoints or tables.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.bronze import run_bronze
from lakehouse.declaration import Pipeline, parse_pipeline
from lakehouse.errors import PipelineConfigError
from lakehouse.kafka import KafkaConnectionError, kafka_connection
from lakehouse.metrics import metrics_table
from lakehouse.paths import checkpoint_dir
from lakehouse.secrets import redact
from lakehouse.tables import bronze_table, quarantine_table
from testkit.bench.ingest import isolated_pipeline
from tests.conftest import REPO
from tests.integration.test_bronze import _tag

PASSWORD_ENV, TRUSTSTORE_ENV = "CDC_TEST_KAFKA_PASSWORD", "CDC_TEST_TRUSTSTORE_PASSWORD"


def _secured_pipeline(secure_kafka, tag: str) -> Pipeline:
    """The shop pipeline as a user would write it for a managed Kafka: options in the file,
    secrets as ${env:...} references (parsed by the real loader)."""
    options = secure_kafka.kafka_options(password="${env:%s}" % PASSWORD_ENV)
    options["ssl.truststore.password"] = "${env:%s}" % TRUSTSTORE_ENV
    lines = "".join(f"    {key}: '{value}'\n" for key, value in options.items())
    text = (REPO / "schemas" / "shop" / "pipeline.yml").read_text().replace("kafka:\n", f"kafka:\n  options:\n{lines}", 1)
    return isolated_pipeline(parse_pipeline(text, "secured.yml"), tag)


@pytest.mark.kafka
def test_bronze_reads_a_sasl_ssl_kafka_and_no_secret_leaks(
    spark: SparkSession, secure_kafka, lake: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from testkit.simulator import produce, simulate

    secret = secure_kafka.tls.password
    monkeypatch.setenv(PASSWORD_ENV, secret)
    monkeypatch.setenv(TRUSTSTORE_ENV, secure_kafka.tls.truststore_password)
    pipeline = _secured_pipeline(secure_kafka, "sec" + _tag())
    assert secret not in repr(pipeline)  # the declaration holds references, never values

    connection = kafka_connection(secure_kafka.bootstrap, pipeline.kafka.options)
    assert secret not in repr(connection)
    sent = produce(simulate(pipeline, seed=5, events=120).records, connection)

    report = run_bronze(spark, pipeline, lake, secure_kafka.bootstrap, trigger="available_now", undeclared_topics=False)
    assert report.records == sent
    written = sum(spark.table(bronze_table(pipeline, s)).count() for s in pipeline.sources.values())
    assert written + report.quarantined == sent and written > 0

    # the run's metrics rows (lakehouse.metrics): every record counted once, Kafka lag drained to 0
    metrics = spark.table(metrics_table(pipeline)).where(F.col("pipeline") == pipeline.name).collect()
    assert {r.stage for r in metrics} == {"bronze"} and len({r.stream for r in metrics}) == len(pipeline.sources)
    assert sum(r.input_rows for r in metrics) == sent
    assert sum(r.rows_out for r in metrics) == written and sum(r.quarantined for r in metrics) == report.quarantined
    last = {}
    for r in sorted(metrics, key=lambda r: r.batch_id):
        last[r.stream] = r
    assert all(r.kafka_lag and set(r.kafka_lag.values()) == {0} for r in last.values()), [(r.stream, r.batch_id, r.kafka_lag) for r in metrics]

    # A wrong password: refused before any query starts, and the message names no secret.
    monkeypatch.setenv(PASSWORD_ENV, "wrong-" + secret[:8] + "-x")
    started = time.monotonic()
    with pytest.raises(KafkaConnectionError) as refused:
        run_bronze(spark, pipeline, lake, secure_kafka.bootstrap, trigger="available_now", undeclared_topics=False)
    assert time.monotonic() - started < 30
    message = str(refused.value)
    assert "refused" in message and "SCRAM-SHA-512" in message and "kafka.options" in message
    assert secret not in message and "wrong-" not in message

    # A reference to a variable that is not set names the variable, before anything runs.
    monkeypatch.delenv(PASSWORD_ENV)
    with pytest.raises(PipelineConfigError, match=PASSWORD_ENV):
        run_bronze(spark, pipeline, lake, secure_kafka.bootstrap, trigger="available_now", undeclared_topics=False)

    # Nowhere: output, the broker's log, the run's tables, the files of its tables and checkpoints.
    out, err = capfd.readouterr()
    assert secret not in out + err
    broker_log = lake / "stack" / "kafka" / "broker.log"
    assert secret not in broker_log.read_text(errors="replace")
    for table in [*(bronze_table(pipeline, s) for s in pipeline.sources.values()), quarantine_table(pipeline)]:
        df = spark.table(table)
        text = F.concat_ws("|", *[F.col(f"`{c}`").cast("string") for c in df.columns])
        assert df.filter(text.contains(secret)).count() == 0, table
    folders = [checkpoint_dir(lake, pipeline.name, "bronze"), *(lake / "warehouse").glob(f"{pipeline.tables.bronze_schema}.db")]
    files = [f for folder in folders for f in Path(folder).rglob("*") if f.is_file()]
    assert files and not [f for f in files if secret.encode() in f.read_bytes()]
    assert redact(f"x {secret} y") == "x *** y"
