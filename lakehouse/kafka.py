"""How the service talks to Kafka: bootstrap servers plus the pipeline's `kafka.options`
(security.protocol, sasl.*, ssl.*), with secrets resolved at the edge and never shown.

The options are written as Spark's Kafka source takes them (Java client names, without the
`kafka.` prefix). The service's own Python clients (librdkafka: the topic check, the PostgreSQL
catch-up, the simulator) get the same connection translated by `client_config`. A value may hold
references, resolved when a job starts, never stored resolved anywhere:

    ${env:KAFKA_PASSWORD}         an environment variable (locally; on Databricks the job's
                                  spark_env_vars may fill it from a secret scope)
    ${secret:cdc-enrich/kafka}    a Databricks secret (scope/key), read with dbutils

Example, a managed Kafka with SASL/SCRAM over TLS:

    kafka:
      bootstrap_servers: broker-1.example.com:9096
      options:
        security.protocol: SASL_SSL
        sasl.mechanism: SCRAM-SHA-512
        sasl.jaas.config: >-
          org.apache.kafka.common.security.scram.ScramLoginModule required
          username="${env:KAFKA_USER}" password="${secret:cdc-enrich/kafka-password}";

Every value a reference yields is remembered by `lakehouse.secrets`, whose `redact` every error
and report passes through before it is shown.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from lakehouse.errors import CdcEnrichError, PipelineConfigError
from lakehouse.secrets import redact, remember

REFERENCE = re.compile(r"\$\{([a-z]+):([^}]*)\}")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRET_NAME = re.compile(r"^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$")
OPTION_KEY = re.compile(r"^[a-z][a-z0-9]*(\.[a-z0-9-]+)*$")

# Set by the service itself (or refused by Spark's Kafka source): never from the file.
MANAGED_KEYS = (
    "bootstrap.servers", "group.id", "auto.offset.reset", "enable.auto.commit", "key.deserializer",
    "value.deserializer", "key.serializer", "value.serializer", "interceptor.classes",
)
# Options whose value is a secret: they must reference one, never hold it.
SECRET_KEYS = ("ssl.keystore.password", "ssl.key.password", "ssl.truststore.password", "sasl.client.callback.handler.secret")
JAAS_KEY = "sasl.jaas.config"
# For the service's Python clients only (librdkafka reads PEM, not Java key stores).
PYTHON_ONLY_KEYS = ("ssl.ca.location",)


class KafkaConnectionError(CdcEnrichError):
    """Kafka refused the connection (credentials, TLS); the message says what to check and
    carries no secret."""


# --------------------------------------------------------------------------- validation (the loader's)


def option_problems(key: str, value: str) -> list[str]:
    """What is wrong with one `kafka.options` entry (empty when fine). Messages never repeat the
    value: it may be a secret written in by mistake."""
    if not OPTION_KEY.match(key):
        return ["expected a Kafka client option name such as security.protocol"]
    if key in MANAGED_KEYS:
        where = "kafka.bootstrap_servers" if key == "bootstrap.servers" else "the service"
        return [f"{key} is set by {where}, not by kafka.options"]
    problems = reference_problems(value)
    if key in SECRET_KEYS and not only_references(value):
        problems.append(f"{key} holds a secret: reference it (${{env:NAME}} or ${{secret:scope/key}}) instead of writing it in the file")
    if key == JAAS_KEY:
        for secret in re.findall(r'password\s*=\s*"([^"]*)"', value):
            if not only_references(secret):
                problems.append('the password in sasl.jaas.config must be a reference (password="${env:NAME}" or "${secret:scope/key}")')
    return problems


def reference_problems(value: str) -> list[str]:
    """What is wrong with the `${env:NAME}` / `${secret:scope/key}` references in `value`."""
    problems = []
    for kind, name in REFERENCE.findall(value):
        if kind not in ("env", "secret"):
            problems.append(f"unknown reference ${{{kind}:...}}: expected ${{env:NAME}} or ${{secret:scope/key}}")
        elif kind == "env" and not ENV_NAME.match(name):
            problems.append("an ${env:NAME} reference needs a variable name (letters, digits, _)")
        elif kind == "secret" and not SECRET_NAME.match(name):
            problems.append("a ${secret:scope/key} reference needs a scope and a key")
    if "${" in REFERENCE.sub("", value):
        problems.append("an unterminated ${...} reference")
    return problems


def only_references(value: str) -> bool:
    """Whether `value` is nothing but references (no literal text beside them)."""
    return bool(REFERENCE.search(value)) and not REFERENCE.sub("", value).strip()


# --------------------------------------------------------------------------- resolution


def databricks_secret(scope: str, key: str) -> str:
    """A secret from a Databricks secret scope (the runtime's dbutils; no sparkContext)."""
    try:
        from databricks.sdk.runtime import dbutils  # type: ignore[import-not-found]
    except ImportError:
        raise PipelineConfigError(
            f"kafka.options references ${{secret:{scope}/{key}}}, which is read from a Databricks secret "
            "scope, and this is not a Databricks runtime: locally, use ${env:NAME} instead"
        ) from None
    return str(dbutils.secrets.get(scope=scope, key=key))


def resolve_value(
    template: str,
    where: str,
    environ: Mapping[str, str] | None = None,
    secret: Callable[[str, str], str] = databricks_secret,
) -> str:
    """`template` with its references replaced; each value a reference yields is remembered
    for `redact`. An unset variable is a PipelineConfigError naming it (not its value)."""
    env = os.environ if environ is None else environ

    def value(match: re.Match[str]) -> str:
        kind, name = match.group(1), match.group(2)
        if kind == "env":
            if name not in env:
                raise PipelineConfigError(f"{where} references ${{env:{name}}}, which is not set: export {name} before the job starts")
            resolved = env[name]
        else:
            scope, _, key = name.partition("/")
            resolved = secret(scope, key)
        remember(resolved)
        return resolved

    return REFERENCE.sub(value, template)


@dataclass(frozen=True)
class KafkaConnection:
    """A Kafka cluster as every client of the service reaches it: servers and resolved options.

    Its repr shows option names only. Build it with `kafka_connection`."""

    servers: str
    options: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"KafkaConnection(servers={self.servers!r}, options={sorted(self.options)})"

    @property
    def secured(self) -> str:
        """The security protocol in use (PLAINTEXT when none is set)."""
        return self.options.get("security.protocol", "PLAINTEXT").upper()

    def spark_options(self) -> dict[str, str]:
        """Options for Spark's Kafka source/sink (`kafka.`-prefixed Java client settings)."""
        opts = {"kafka.bootstrap.servers": self.servers}
        opts |= {f"kafka.{k}": v for k, v in self.options.items() if k not in PYTHON_ONLY_KEYS}
        return opts

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """A librdkafka (confluent-kafka) configuration for the same cluster, plus `extra`."""
        return {"bootstrap.servers": self.servers, **librdkafka_security(self.options), **extra}


def as_connection(kafka: "str | KafkaConnection") -> KafkaConnection:
    """A connection from bootstrap servers alone (an unsecured cluster, e.g. the local stack), or as given."""
    return kafka if isinstance(kafka, KafkaConnection) else KafkaConnection(kafka)


def kafka_connection(
    servers: str,
    options: Iterable[tuple[str, str]] = (),
    environ: Mapping[str, str] | None = None,
    secret: Callable[[str, str], str] = databricks_secret,
) -> KafkaConnection:
    """The connection for `servers` with the pipeline's `kafka.options` templates resolved."""
    resolved = {key: resolve_value(template, f"kafka.options.{key}", environ, secret) for key, template in options}
    librdkafka_security(resolved)  # a setting the Python clients cannot follow fails here, before any job
    return KafkaConnection(servers, resolved)


# --------------------------------------------------------------------------- the Python clients


_PASS_THROUGH = ("security.protocol", "sasl.mechanism", "ssl.ca.location", "ssl.key.password")
_JAAS_FIELD = r'{}\s*=\s*"((?:[^"\\]|\\.)*)"'


def librdkafka_security(options: Mapping[str, str]) -> dict[str, str]:
    """The security settings of Java-style `options`, as librdkafka names them.

    sasl.jaas.config (PLAIN and SCRAM login modules) becomes sasl.username/sasl.password;
    ssl.endpoint.identification.algorithm "" becomes "none"; a PKCS12 key store passes as is.
    A Java trust store cannot be read by librdkafka: give the CA as PEM in ssl.ca.location too.
    """
    out = {k: options[k] for k in _PASS_THROUGH if k in options}
    jaas = options.get(JAAS_KEY)
    if jaas is not None:
        mechanism = options.get("sasl.mechanism", "GSSAPI").upper()
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise PipelineConfigError(
                f"kafka.options: sasl.mechanism {mechanism} with sasl.jaas.config is not supported by the service's "
                "Python clients (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 are)"
            )
        for name, target in (("username", "sasl.username"), ("password", "sasl.password")):
            found = re.search(_JAAS_FIELD.format(name), jaas)
            if found is None:
                raise PipelineConfigError(f'kafka.options.sasl.jaas.config has no {name}="..." (the login module needs one)')
            out[target] = found.group(1).replace('\\"', '"').replace("\\\\", "\\")
    if "ssl.endpoint.identification.algorithm" in options:
        out["ssl.endpoint.identification.algorithm"] = options["ssl.endpoint.identification.algorithm"] or "none"
    if "ssl.truststore.location" in options and "ssl.ca.location" not in options:
        raise PipelineConfigError(
            "kafka.options.ssl.truststore.location is read by Spark only; the service's Python clients need the same "
            "CA certificate as PEM: add kafka.options.ssl.ca.location"
        )
    if "ssl.keystore.location" in options:
        if options.get("ssl.keystore.type", "JKS").upper() != "PKCS12":
            raise PipelineConfigError("kafka.options.ssl.keystore.location: the service's Python clients read PKCS12 key stores only (set ssl.keystore.type: PKCS12)")
        out["ssl.keystore.location"] = options["ssl.keystore.location"]
        if "ssl.keystore.password" in options:
            out["ssl.keystore.password"] = options["ssl.keystore.password"]
    return out


AUTH_ERRORS = ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL")


def check_connection(connection: KafkaConnection, timeout_s: float = 20.0) -> set[str] | None:
    """The cluster's topics, or None when it did not answer within `timeout_s` (the streams then
    report what is wrong). A refused login or TLS handshake raises KafkaConnectionError at once:
    a job must not start against a cluster that will never let it read."""
    import time

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    refused: list[str] = []

    def on_error(err: Any) -> None:
        if err.name() in AUTH_ERRORS or "authentication" in err.str().lower():
            refused.append(err.str())

    admin = AdminClient(connection.client_config(error_cb=on_error, log_level=0))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return set(admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic()))).topics)
        except KafkaException as exc:
            if not refused and any(name in str(exc) for name in AUTH_ERRORS):
                refused.append(str(exc))
        admin.poll(0)
        if refused:
            break
    if refused:
        mechanism = connection.options.get("sasl.mechanism", "")
        raise KafkaConnectionError(
            redact(
                f"Kafka at {connection.servers} refused the connection ({connection.secured}{' ' + mechanism if mechanism else ''}): "
                f"{refused[0]}. Check kafka.options in the pipeline file (sasl.jaas.config, ssl.*) and the secrets they reference"
            )
        )
    return None
