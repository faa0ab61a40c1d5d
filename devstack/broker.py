"""A local single-node Apache Kafka 4.1 broker (KRaft, combined broker+controller) for the demo and tests.

The broker runs from the jars `make setup` resolved from Maven Central, as a detached
`java -cp <jars> kafka.Kafka server.properties`, so there is no Docker and no Kafka download.
Everything it owns lives under `<lake>/stack/kafka/`:

    server.properties   the broker config we write on every start (port may change)
    log4j2.properties   keeps the broker's own log in broker.log instead of the console
    broker.log          stdout/stderr of the JVM plus its log4j output (truncated per start)
    broker.pid          pid of the broker *we* started; the only process we ever stop
    stack.json          port and cluster id, so status/down/other processes find the broker
    data/               log.dirs (formatted once with StorageTool; meta.properties marks it)
    tls/                with `secure=True`: the broker's key and certificate (made once with the
                        JDK's keytool), the CA as PEM and a trust store for clients, and
                        credentials.json (key store passwords, the SCRAM user's password; 0600)

`secure=True` adds a SASL_SSL listener on port+2 (SCRAM-SHA-512 over TLS, as managed Kafka
services offer), beside the PLAINTEXT one; `secure_listener(lake)` says how to reach it.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import signal
import subprocess
import time
import uuid
from typing import Any
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from devstack import procs
from lakehouse.entry import LOCAL_BROKER_DEFAULT_PORT as DEFAULT_PORT
from lakehouse.entry import LOCAL_BROKER_HOST as HOST
from lakehouse.entry import LOCAL_BROKER_PORT_ENV as PORT_ENV
from lakehouse.errors import StackError
from lakehouse.kafka import KafkaConnection, as_connection
from lakehouse.paths import jar_cache, jars, local_broker_state

HEAP = "-Xmx512m"  # the machine also runs Spark; a demo broker needs little
LOG_TAIL_LINES = 30
MAIN_CLASS = "kafka.Kafka"

# Started brokers of this Python process, kept so we can reap them (no zombies, no ResourceWarning).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class BrokerStatus:
    """What a caller needs to use or debug the local broker."""

    running: bool
    pid: int | None
    bootstrap: str
    data_dir: Path
    log_file: Path

    def describe(self) -> str:
        """One line for the CLI: is it up, where to connect, where to look when it is not."""
        if self.running:
            return (
                f"Kafka broker running (pid {self.pid}) at {self.bootstrap}; "
                f"data {self.data_dir}; log {self.log_file}"
            )
        return f"Kafka broker not running (configured for {self.bootstrap}); log {self.log_file}"


# --------------------------------------------------------------------------- files and state


def kafka_dir(lake: Path) -> Path:
    """The folder holding every file of the local broker, inside the lake so `make clean` drops it."""
    return Path(lake) / "stack" / "kafka"


def _pid_file(lake: Path) -> Path:
    return kafka_dir(lake) / "broker.pid"


def _log_file(lake: Path) -> Path:
    return kafka_dir(lake) / "broker.log"


def _data_dir(lake: Path) -> Path:
    return kafka_dir(lake) / "data"


def _props_file(lake: Path) -> Path:
    return kafka_dir(lake) / "server.properties"


def _state_file(lake: Path) -> Path:
    return local_broker_state(lake)


def _read_state(lake: Path) -> dict[str, object]:
    """stack.json: the broker's port and cluster id (empty when never configured)."""
    return procs.read_state(_state_file(lake))


def _write_state(lake: Path, state: dict[str, object]) -> None:
    procs.write_state(_state_file(lake), state)


def _env_port() -> int | None:
    """The port asked for through CDC_ENRICH_KAFKA_PORT (1024-65534)."""
    return procs.env_port(PORT_ENV, _check_port)


def _check_port(port: int) -> int:
    # port+1 is the controller listener and port+2 the SASL_SSL one, so the broker port leaves room.
    if not 1024 <= port <= 65533:
        raise StackError(f"Kafka port {port} is out of range: use 1024-65533 (port+1 is the controller, port+2 the SASL_SSL listener)")
    return port


def configured_port(lake: Path) -> int:
    """The port the broker of this lake uses: the remembered one, else env, else 19092."""
    remembered = _read_state(lake).get("port")
    if isinstance(remembered, int):
        return remembered
    return _env_port() or DEFAULT_PORT


def bootstrap_servers(lake: Path) -> str:
    """"127.0.0.1:<port>" of this lake's broker, for producers, consumers and Spark's Kafka source."""
    return f"{HOST}:{configured_port(lake)}"


# --------------------------------------------------------------------------- processes


def _is_our_broker(pid: int, lake: Path) -> bool:
    """Alive *and* a kafka.Kafka running this lake's server.properties: a reused pid is never ours."""
    procs.reap(pid, _CHILDREN)
    cmd = procs.cmdline(pid)
    return MAIN_CLASS in cmd.split() and str(_props_file(lake)) in cmd


def _running_pid(lake: Path) -> int | None:
    """The pid of this lake's broker when it is running, else None."""
    pid = procs.read_pid(_pid_file(lake))
    return pid if pid is not None and _is_our_broker(pid, lake) else None


def _stop(pid: int, lake: Path, timeout_s: float) -> None:
    """SIGTERM (clean shutdown: flushes logs, closes the KRaft quorum), then SIGKILL if it hangs."""
    procs.stop(pid, lambda: _is_our_broker(pid, lake), ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)), _CHILDREN)


def _locked(lake: Path) -> AbstractContextManager[None]:
    """Serialise up/down across processes, so two `stack up` never start two brokers."""
    return procs.file_lock(kafka_dir(lake))


# --------------------------------------------------------------------------- preconditions


def _log_tail(lake: Path, lines: int = LOG_TAIL_LINES) -> str:
    return procs.log_tail(_log_file(lake), lines)


def _error(lake: Path, message: str) -> StackError:
    return procs.error_with_log(message, _log_file(lake), LOG_TAIL_LINES)


def _java() -> str:
    """The java binary: $JAVA_HOME/bin/java when set, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise StackError(
            "java is not on PATH: the Kafka broker needs Java 17+ "
            "(e.g. apt-get install openjdk-17-jre-headless, or set JAVA_HOME)"
        )
    return found


def _classpath() -> list[Path]:
    """The broker's jars; missing when `make setup` has not run (or is still running)."""
    found = jars("kafka")
    if not any(j.name.startswith("kafka_2.13-") for j in found):
        raise StackError(
            f"the Kafka broker jars are missing from {jar_cache('kafka')}: run `make setup` "
            "(it resolves org.apache.kafka:kafka_2.13 from Maven Central)"
        )
    return found


def _logging_note(classpath: list[Path]) -> str | None:
    """Say so in broker.log when slf4j cannot reach log4j2, because then Kafka logs nothing at all."""
    names = [j.name for j in classpath]
    api1 = any(n.startswith("slf4j-api-1.") for n in names)
    binding2 = any(n.startswith("log4j-slf4j2-impl-") for n in names)
    if api1 and binding2:
        return (
            "note: slf4j-api 1.x with log4j-slf4j2-impl on the classpath: SLF4J falls back to NOP and the "
            "broker's own log is silent (use log4j-slf4j-impl or declare slf4j-api 2.x in tools/jvm/kafka/pom.xml)"
        )
    return None


def _ensure_ports_free(port: int, secure: bool) -> None:
    for what, p in (("broker", port), ("controller", port + 1), *((("SASL_SSL", port + 2),) if secure else ())):
        if not procs.port_free(p):
            raise StackError(
                f"port {p} ({HOST}:{p}, the Kafka {what} listener) is already in use by another process, "
                f"not by a broker this lake started: stop it, or pick another port with {PORT_ENV} "
                "(the controller uses port+1)"
            )


# --------------------------------------------------------------------------- configuration


def _escape(value: str) -> str:
    """Java .properties escaping of a value (backslash is the only character paths need escaped)."""
    return value.replace("\\", "\\\\")


def _server_properties(lake: Path, port: int, tls: "TlsFiles | None" = None) -> str:
    controller = port + 1
    listeners, advertised, protocols = [f"PLAINTEXT://{HOST}:{port}", f"CONTROLLER://{HOST}:{controller}"], [f"PLAINTEXT://{HOST}:{port}"], ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    secured: dict[str, str] = {}
    if tls is not None:
        listeners.append(f"SECURE://{HOST}:{port + 2}")
        advertised.append(f"SECURE://{HOST}:{port + 2}")
        protocols.append("SECURE:SASL_SSL")
        secured = {
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "listener.name.secure.scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "listener.name.secure.ssl.keystore.type": "PKCS12",
            "listener.name.secure.ssl.keystore.location": _escape(str(tls.keystore)),
            "listener.name.secure.ssl.keystore.password": tls.keystore_password,
            "listener.name.secure.ssl.key.password": tls.keystore_password,
        }
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(advertised),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": ",".join(protocols),
        **secured,
        "controller.quorum.bootstrap.servers": f"{HOST}:{controller}",
        "log.dirs": _escape(str(_data_dir(lake))),
        # single node: every internal topic must make do with one replica
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",  # consumers in tests join at once
        "auto.create.topics.enable": "true",
    }
    lines = ["# Written by devstack.broker on every `stack up`; edits are overwritten."]
    lines += [f"{key}={value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_USER = "cdc-enrich"


@dataclass(frozen=True)
class TlsFiles:
    """The secure listener's key material and secrets (made once per lake by `_ensure_tls`)."""

    keystore: Path  # the broker's key and self-signed certificate (PKCS12)
    keystore_password: str
    truststore: Path  # the certificate, for Java clients (Spark's Kafka source)
    truststore_password: str
    ca_pem: Path  # the certificate as PEM, for librdkafka clients
    username: str
    password: str  # the SCRAM user's


@dataclass(frozen=True)
class SecureListener:
    """How a client reaches this lake's SASL_SSL listener."""

    bootstrap: str
    tls: TlsFiles

    def kafka_options(self, password: str | None = None) -> dict[str, str]:
        """`kafka.options` for a pipeline file (Java names); `password` replaces the real one
        (e.g. a ${env:NAME} reference)."""
        secret = self.tls.password if password is None else password
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.jaas.config": (
                'org.apache.kafka.common.security.scram.ScramLoginModule required '
                f'username="{self.tls.username}" password="{secret}";'
            ),
            "ssl.truststore.location": str(self.tls.truststore),
            "ssl.truststore.type": "PKCS12",
            "ssl.ca.location": str(self.tls.ca_pem),
        }


def _tls_dir(lake: Path) -> Path:
    return kafka_dir(lake) / "tls"


def _keytool() -> str:
    java = Path(_java())
    found = java.with_name("keytool")
    if found.exists():
        return str(found)
    return shutil.which("keytool") or "keytool"


def _ensure_tls(lake: Path) -> TlsFiles:
    """The broker's certificate (self-signed, for 127.0.0.1 and localhost) and the SCRAM user's
    password: made once with the JDK's keytool, kept under tls/ (credentials.json is 0600)."""
    folder = _tls_dir(lake)
    secrets_file = folder / "credentials.json"
    state = procs.read_state(secrets_file)
    files = {"keystore": folder / "broker.p12", "truststore": folder / "truststore.p12", "ca_pem": folder / "ca.pem"}
    if not (state and all(p.exists() for p in files.values())):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        state = {
            "keystore_password": secrets.token_urlsafe(18),
            "truststore_password": secrets.token_urlsafe(18),
            "username": SCRAM_USER,
            "password": secrets.token_urlsafe(18),
        }
        keytool, ks, ts = _keytool(), str(files["keystore"]), str(files["truststore"])
        steps = [
            [keytool, "-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650",
             "-dname", f"CN={HOST}", "-ext", f"SAN=ip:{HOST},dns:localhost", "-storetype", "PKCS12",
             "-keystore", ks, "-storepass", state["keystore_password"], "-keypass", state["keystore_password"]],
            [keytool, "-exportcert", "-rfc", "-alias", "broker", "-keystore", ks, "-storepass", state["keystore_password"],
             "-file", str(files["ca_pem"])],
            [keytool, "-importcert", "-noprompt", "-alias", "broker", "-file", str(files["ca_pem"]), "-storetype", "PKCS12",
             "-keystore", ts, "-storepass", state["truststore_password"]],
        ]  # fmt: skip
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise StackError(f"keytool failed making the broker's certificate ({step[1]}): {done.stderr.strip() or done.stdout.strip()}")
        procs.write_state(secrets_file, state, private=True)
    return TlsFiles(
        keystore=files["keystore"], keystore_password=state["keystore_password"],
        truststore=files["truststore"], truststore_password=state["truststore_password"],
        ca_pem=files["ca_pem"], username=state["username"], password=state["password"],
    )  # fmt: skip


def secure_listener(lake: Path) -> SecureListener | None:
    """The SASL_SSL listener of this lake's broker, when it was started with `secure=True`."""
    if not _read_state(lake).get("secure"):
        return None
    return SecureListener(f"{HOST}:{configured_port(lake) + 2}", _ensure_tls(lake))


def _ensure_scram_user(lake: Path, bootstrap: str, listener: SecureListener, timeout_s: float) -> None:
    """Create (or reset) the SCRAM user through the PLAINTEXT listener, then wait until the
    SASL_SSL listener accepts it (credentials reach the broker through the metadata log)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient(_probe_config(bootstrap))
    upsert = UserScramCredentialUpsertion(
        listener.tls.username, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), listener.tls.password.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    secure = AdminClient(_probe_config(KafkaConnection(listener.bootstrap, listener.kafka_options())))
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if secure.list_topics(timeout=2).brokers:
                return
        except KafkaException:
            pass
        if time.monotonic() > deadline:
            raise _error(lake, f"the broker's SASL_SSL listener {listener.bootstrap} did not accept the SCRAM user within {timeout_s:g} s")
        time.sleep(0.2)


def _log4j2_properties(lake: Path) -> str:
    """Warnings and the start/stop lines only, appended to broker.log next to the JVM's stderr."""
    log = _escape(str(_log_file(lake)))
    return "\n".join(
        [
            "status = warn",
            "name = cdc-enrich-kafka",
            "shutdownHook = disable",  # appenders flush per event; the late hook only prints a warning
            "appender.file.type = File",
            "appender.file.name = FILE",
            f"appender.file.fileName = {log}",
            "appender.file.append = true",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "rootLogger.level = WARN",
            "rootLogger.appenderRef.file.ref = FILE",
            "logger.raft.name = kafka.server.KafkaRaftServer",
            "logger.raft.level = INFO",
            "",
        ]
    )


def _new_cluster_id() -> str:
    """A Kafka Uuid in its base64url form, made here to spare a JVM start (same rules as Uuid.randomUuid)."""
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        # Kafka reserves the all-zero and the metadata-topic ids, and rejects ids starting with "-"
        if int.from_bytes(raw, "big") > 1 and not text.startswith("-"):
            return text


def _jvm_command(java: str, classpath: list[Path], lake: Path, main: str, *args: str) -> list[str]:
    return [
        java,
        HEAP,
        "-Xms64m",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={kafka_dir(lake) / 'log4j2.properties'}",
        "-cp",
        os.pathsep.join(str(j) for j in classpath),
        main,
        *args,
    ]


def _format_storage(java: str, classpath: list[Path], lake: Path, cluster_id: str) -> None:
    """Format log.dirs once (KRaft refuses to start on an unformatted dir); meta.properties marks it done."""
    if (_data_dir(lake) / "meta.properties").exists():
        return
    cmd = _jvm_command(
        java, classpath, lake, "kafka.tools.StorageTool",
        "format", "--standalone", "-t", cluster_id, "-c", str(_props_file(lake)),
    )  # fmt: skip
    with open(_log_file(lake), "ab") as log:
        log.write(b"--- kafka.tools.StorageTool format ---\n")
        log.flush()
        try:
            done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=kafka_dir(lake), timeout=120)
        except subprocess.TimeoutExpired:
            raise _error(lake, "formatting the Kafka storage did not finish within 120 s") from None
    if done.returncode != 0:
        raise _error(lake, f"formatting the Kafka storage in {_data_dir(lake)} failed (exit {done.returncode})")


# --------------------------------------------------------------------------- readiness


def _probe_config(kafka: str | KafkaConnection) -> dict[str, object]:
    # log_level 0: "connection refused" while the JVM starts is expected, not worth printing
    return as_connection(kafka).client_config(**{
        "log_level": 0,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 250,
        "socket.connection.setup.timeout.ms": 1000,
    })


def _wait_ready(proc: subprocess.Popen[bytes] | None, pid: int, lake: Path, bootstrap: str, timeout_s: float) -> None:
    """Poll until the broker answers; fail early when its process dies instead of waiting out the timeout."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(_probe_config(bootstrap))
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None:
            code = proc.poll()
            exited = None if code is None else str(code)
        else:  # a broker started by another process: we only see whether it is alive
            exited = None if _is_our_broker(pid, lake) else "unknown"
        if exited is not None:
            hint = ""
            if "UnsupportedClassVersionError" in _log_tail(lake):
                hint = " (the java on PATH is too old: Kafka 4 needs Java 17+)"
            raise _error(lake, f"the Kafka broker (pid {pid}) exited during start-up with code {exited}{hint}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _error(lake, f"the Kafka broker (pid {pid}) did not answer on {bootstrap} within {timeout_s:g} s")
        try:
            if admin.list_topics(timeout=min(1.0, max(remaining, 0.1))).brokers:
                return
        except KafkaException:
            pass
        time.sleep(0.1)


# --------------------------------------------------------------------------- public API


def broker_status(lake: Path) -> BrokerStatus:
    """Whether this lake's broker process is running (a process check only; cheap, no network)."""
    return BrokerStatus(
        running=(pid := _running_pid(lake)) is not None,
        pid=pid,
        bootstrap=bootstrap_servers(lake),
        data_dir=_data_dir(lake),
        log_file=_log_file(lake),
    )


def broker_up(lake: Path, port: int | None = None, timeout_s: float = 60, secure: bool = False) -> BrokerStatus:
    """Start this lake's broker, or return the one already running (idempotent).

    `port` (else CDC_ENRICH_KAFKA_PORT, else the port remembered in stack.json, else 19092) is the
    PLAINTEXT listener; port+1 is the KRaft controller; with `secure`, port+2 is a SASL_SSL
    listener (`secure_listener`). Raises StackError with the broker log's tail
    when it cannot start; a broker that fails to become ready is killed, never left half-started.
    """
    lake = Path(lake)
    wanted = _check_port(port) if port is not None else _env_port()
    with _locked(lake):
        pid = _running_pid(lake)
        if pid is not None:
            running_port = configured_port(lake)
            if wanted is not None and wanted != running_port:
                raise StackError(
                    f"this lake's Kafka broker is already running on port {running_port} (pid {pid}), "
                    f"not {wanted}: run `stack down` first to move it"
                )
            if secure and not _read_state(lake).get("secure"):
                raise StackError(f"this lake's Kafka broker (pid {pid}) runs without its SASL_SSL listener: run `stack down`, then `stack up --secure`")
            _wait_ready(None, pid, lake, bootstrap_servers(lake), timeout_s)
            return broker_status(lake)
        _pid_file(lake).unlink(missing_ok=True)  # stale: its process is gone or is not ours
        return _start(lake, wanted or configured_port(lake), timeout_s, secure)


def _start(lake: Path, port: int, timeout_s: float, secure: bool = False) -> BrokerStatus:
    java = _java()
    classpath = _classpath()
    _ensure_ports_free(_check_port(port), secure)

    state = _read_state(lake)
    cluster_id = state.get("cluster_id")
    if not isinstance(cluster_id, str) or not (_data_dir(lake) / "meta.properties").exists():
        cluster_id = _new_cluster_id()  # a fresh data dir gets a fresh cluster
    _write_state(lake, {"port": port, "controller_port": port + 1, "cluster_id": cluster_id, "secure": secure})
    tls = _ensure_tls(lake) if secure else None
    _props_file(lake).write_text(_server_properties(lake, port, tls))
    if tls is not None:
        _props_file(lake).chmod(0o600)  # it holds the key store's password
    (kafka_dir(lake) / "log4j2.properties").write_text(_log4j2_properties(lake))

    note = _logging_note(classpath)
    _log_file(lake).write_text(f"--- cdc-enrich: starting Kafka on {HOST}:{port} ---\n" + (f"{note}\n" if note else ""))
    _format_storage(java, classpath, lake, cluster_id)

    cmd = _jvm_command(java, classpath, lake, MAIN_CLASS, str(_props_file(lake)))
    with open(_log_file(lake), "ab") as log:
        log.write(b"--- kafka.Kafka ---\n")
        log.flush()
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=kafka_dir(lake), start_new_session=True,  # survives our Ctrl-C and our exit
        )  # fmt: skip
    _CHILDREN[proc.pid] = proc
    _pid_file(lake).write_text(f"{proc.pid}\n")
    try:
        _wait_ready(proc, proc.pid, lake, f"{HOST}:{port}", timeout_s)
        if secure:
            listener = secure_listener(lake)
            assert listener is not None
            _ensure_scram_user(lake, f"{HOST}:{port}", listener, timeout_s)
    except BaseException:
        _stop(proc.pid, lake, timeout_s=5)
        _pid_file(lake).unlink(missing_ok=True)
        raise
    return broker_status(lake)


def broker_down(lake: Path, timeout_s: float = 30) -> bool:
    """Stop the broker in this lake's pid file (and nothing else); True when one was running."""
    lake = Path(lake)
    if not kafka_dir(lake).is_dir():
        return False
    with _locked(lake):
        pid = _running_pid(lake)
        if pid is not None:
            _stop(pid, lake, timeout_s)
            if _is_our_broker(pid, lake):
                raise _error(lake, f"the Kafka broker (pid {pid}) did not stop after SIGTERM and SIGKILL")
        _pid_file(lake).unlink(missing_ok=True)
        return pid is not None


def create_topics(kafka: str | KafkaConnection, topics: list[str], partitions: int = 1) -> None:
    """Create topics (replication 1) and wait until done; topics that already exist are fine.
    `kafka`: bootstrap servers, or a connection with security options."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    if partitions < 1:
        raise StackError(f"a topic needs at least 1 partition, not {partitions}")
    if not topics:
        return
    admin = AdminClient(_probe_config(kafka))
    bootstrap = as_connection(kafka).servers
    futures = admin.create_topics(
        [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics],
        operation_timeout=30,
        request_timeout=30,
    )
    failures = []
    for topic, future in futures.items():
        try:
            future.result(timeout=60)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            failures.append(f"{topic}: {err.str() if isinstance(err, KafkaError) else exc}")
        except Exception as exc:  # concurrent.futures.TimeoutError and friends
            failures.append(f"{topic}: {exc!r}")
    if failures:
        raise StackError(f"could not create Kafka topics on {bootstrap}: " + "; ".join(failures))
    _wait_until_listed(admin, topics, bootstrap)


def _wait_until_listed(admin: Any, topics: list[str], bootstrap: str, timeout_s: float = 15.0) -> None:
    """Wait until the broker's metadata lists `topics`: a created topic's future completes when
    the controller has it, a moment before the broker answers metadata requests with it (so a
    client asking right away, such as bronze's undeclared-topics check, would not see it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        listed = admin.list_topics(timeout=10).topics
        missing = [t for t in topics if t not in listed]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise StackError(f"topics {missing} were created on {bootstrap} but are not listed after {timeout_s:.0f} s")
        time.sleep(0.1)
