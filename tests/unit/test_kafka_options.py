"""`kafka.options`: what the pipeline file may say, how references resolve, what each client gets,
and that no secret is ever repeated in an error."""

from __future__ import annotations

import pytest

from lakehouse.declaration import parse_pipeline
from lakehouse.errors import PipelineConfigError
from lakehouse.kafka import KafkaConnection, kafka_connection, librdkafka_security, option_problems
from lakehouse.secrets import redact
from tests.unit.test_config import GOOD

SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="${env:KAFKA_PW}";'


def _with_options(lines: str) -> str:
    return GOOD.replace("kafka:\n", "kafka:\n  options:\n" + lines, 1)


def test_options_are_kept_unresolved_in_the_declaration() -> None:
    pipeline = parse_pipeline(_with_options(
        f"    security.protocol: SASL_SSL\n    sasl.mechanism: SCRAM-SHA-512\n    sasl.jaas.config: '{SCRAM}'\n    request.timeout.ms: 30000\n"
    ))
    assert dict(pipeline.kafka.options) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM, "request.timeout.ms": "30000",
    }


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param("    bootstrap.servers: x:9092\n", "kafka.options.bootstrap.servers: bootstrap.servers is set by kafka.bootstrap_servers", id="managed-key"),
        pytest.param("    group.id: mine\n", "kafka.options.group.id: group.id is set by the service", id="group-id"),
        pytest.param("    Security_Protocol: SSL\n", "expected a Kafka client option name", id="bad-name"),
        pytest.param("    ssl.truststore.password: ${vault:x}\n", "unknown reference ${vault:...}", id="unknown-reference"),
        pytest.param("    ssl.truststore.password: ${env:1X}\n", "needs a variable name", id="bad-env-name"),
        pytest.param("    ssl.truststore.password: ${secret:onlyscope}\n", "needs a scope and a key", id="bad-secret-name"),
        pytest.param("    ssl.truststore.password: ${env:X\n", "unterminated", id="unterminated"),
        pytest.param("    ssl.truststore.password: [a]\n", "expected a text, number or boolean, got list", id="wrong-type"),
    ],
)
def test_a_bad_option_is_rejected_with_its_line(line: str, expected: str) -> None:
    with pytest.raises(PipelineConfigError) as exc:
        parse_pipeline(_with_options(line), "bad.yml")
    assert "bad.yml:4: kafka.options." in str(exc.value)
    assert expected in str(exc.value)


@pytest.mark.parametrize(
    "line",
    [
        "    ssl.keystore.password: hunter2-literal\n",
        "    sasl.jaas.config: 'org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" password=\"hunter2-literal\";'\n",
    ],
)
def test_a_secret_written_into_the_file_is_rejected_without_being_repeated(line: str) -> None:
    with pytest.raises(PipelineConfigError) as exc:
        parse_pipeline(_with_options(line), "bad.yml")
    assert "reference" in str(exc.value) and "hunter2" not in str(exc.value)


def test_references_resolve_from_the_environment_and_are_redacted_afterwards() -> None:
    options = (("sasl.jaas.config", SCRAM), ("sasl.mechanism", "SCRAM-SHA-512"), ("security.protocol", "SASL_SSL"))
    conn = kafka_connection("b:9096", options, environ={"KAFKA_PW": "pw-7f3a9c"})
    assert 'password="pw-7f3a9c"' in conn.options["sasl.jaas.config"]
    assert "pw-7f3a9c" not in repr(conn)
    assert redact("auth with pw-7f3a9c failed") == "auth with *** failed"
    with pytest.raises(PipelineConfigError, match=r"\$\{env:KAFKA_PW\}, which is not set: export KAFKA_PW"):
        kafka_connection("b:9096", options, environ={})
    secret = kafka_connection("b:9096", (("ssl.key.password", "${secret:scope/key}"),), secret=lambda s, k: f"{s}-{k}-value")
    assert secret.options["ssl.key.password"] == "scope-key-value"


def test_spark_gets_java_options_and_librdkafka_gets_them_translated() -> None:
    conn = KafkaConnection("b:9096", {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": SCRAM.replace("${env:KAFKA_PW}", 'p\\"w'),
        "ssl.truststore.location": "/t.p12", "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "",
        "request.timeout.ms": "30000",
    })
    spark = conn.spark_options()
    assert spark["kafka.bootstrap.servers"] == "b:9096" and spark["kafka.ssl.truststore.location"] == "/t.p12"
    assert "kafka.ssl.ca.location" not in spark and spark["kafka.request.timeout.ms"] == "30000"
    client = conn.client_config(**{"group.id": "g"})
    assert client == {
        "bootstrap.servers": "b:9096", "group.id": "g", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "svc", "sasl.password": 'p"w', "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "none",
    }
    assert KafkaConnection("b:9092").client_config() == {"bootstrap.servers": "b:9092"}


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"ssl.truststore.location": "/t.jks"}, "add kafka.options.ssl.ca.location"),
        ({"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": "x required;"}, "OAUTHBEARER"),
        ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": 'x required password="p";'}, 'no username="..."'),
        ({"ssl.keystore.location": "/k.jks"}, "PKCS12"),
    ],
)
def test_what_the_python_clients_cannot_follow_fails_before_any_job(options: dict[str, str], expected: str) -> None:
    with pytest.raises(PipelineConfigError, match=expected.replace(".", r"\.").replace("(", r"\(")):
        librdkafka_security(options)


def test_option_problems_never_quote_the_value() -> None:
    for key in ("ssl.key.password", "sasl.jaas.config", "Bad Key"):
        assert all("zz-secret-zz" not in p for p in option_problems(key, 'password="zz-secret-zz" zz-secret-zz'))


def _with_bootstrap(value: str) -> str:
    return GOOD.replace("kafka:\n", f"kafka:\n  bootstrap_servers: '{value}'\n", 1)


def test_the_bootstrap_servers_may_be_a_reference_resolved_when_a_job_starts(monkeypatch, tmp_path) -> None:
    from lakehouse.entry import resolve_bootstrap

    pipeline = parse_pipeline(_with_bootstrap("${env:KAFKA_BOOTSTRAP}"))
    assert pipeline.kafka.bootstrap_servers == "${env:KAFKA_BOOTSTRAP}"  # kept as written
    monkeypatch.delenv("CDC_ENRICH_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "b-1.example.com:9096,b-2.example.com:9096")
    assert resolve_bootstrap(None, pipeline, tmp_path).servers == "b-1.example.com:9096,b-2.example.com:9096"
    assert parse_pipeline(_with_bootstrap("${secret:cdc-enrich/kafka-bootstrap}")).kafka.bootstrap_servers.startswith("${secret:")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("${vault:x}", "unknown reference ${vault:...}"),
        ("broker:9092,${env:MORE}", "expected host:port[,host:port...] or a reference alone"),
        ("${env:X", "unterminated"),
        ("not a list", "expected host:port[,host:port...] or a ${env:NAME} / ${secret:scope/key} reference, got"),
    ],
)
def test_a_bad_bootstrap_reference_names_the_field(value: str, expected: str) -> None:
    with pytest.raises(PipelineConfigError) as exc:
        parse_pipeline(_with_bootstrap(value))
    assert "kafka.bootstrap_servers" in str(exc.value) and expected in str(exc.value), str(exc.value)
