"""A local PostgreSQL cluster of our own, for the end-to-end test against a real Debezium connector.

Why a private cluster: the database is the truth the gold tables must equal, and Debezium's
PostgreSQL connector needs logical decoding (`wal_level=logical`, replication slots, a
REPLICATION role). A throwaway cluster under the lake gives all of that without touching any
system PostgreSQL, with the server binaries of Debian's `postgresql` package (no Docker).
Everything it owns lives under `<lake>/stack/postgres/`:

    data/             the cluster (initdb once; PG_VERSION marks it)
    data/cdc_enrich.conf  our settings, rewritten on every start (port may change), included
                      from postgresql.conf
    postgres.log      the server's stderr (truncated per start)
    postgres.pid      pid of the postmaster *we* started; the only process we ever stop
    postgres.json     port, database, role names and the generated password (mode 0600)

PostgreSQL refuses to run as root. As root we run it, in order of preference:
- in a user namespace (`unshare --user`) that maps root to the unprivileged `postgres` (or
  `nobody`) user: the server sees a non-root uid owning its data directory, files stay owned by
  the caller, and no ancestor directory needs opening up (pytest's temp dirs are 0700);
- else as the `postgres` (or `nobody`) user itself (setuid in the child), after chown-ing the
  cluster folder to it; every ancestor directory must then be enterable by that user.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack import procs
from lakehouse.errors import StackError

DEFAULT_PORT = 15432
PORT_ENV = "CDC_ENRICH_PG_PORT"
BIN_ENV = "CDC_ENRICH_PG_BIN"  # a directory holding initdb and postgres, when not Debian's
HOST = "127.0.0.1"
SUPERUSER = "postgres"
CDC_USER = "cdc_enrich"  # LOGIN REPLICATION, owns the database: what Debezium and the workload use
DEFAULT_DATABASE = "shop"  # the demo pipeline's database; postgres_up(database=...) for others
CONF_FILE = "cdc_enrich.conf"

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class PostgresStatus:
    """What a caller needs to use or debug the local PostgreSQL cluster."""

    running: bool
    pid: int | None
    host: str
    port: int
    database: str
    user: str
    data_dir: Path
    log_file: Path

    def describe(self) -> str:
        """One line for the CLI: is it up, where to connect, where to look when it is not."""
        where = f"{self.host}:{self.port}/{self.database} (user {self.user})"
        if self.running:
            return f"PostgreSQL running (pid {self.pid}) at {where}; data {self.data_dir}; log {self.log_file}"
        return f"PostgreSQL not running (configured for {where}); log {self.log_file}"


# --------------------------------------------------------------------------- files and state


def postgres_dir(lake: Path) -> Path:
    """The folder holding every file of the local cluster, inside the lake so `make clean` drops it."""
    return Path(lake) / "stack" / "postgres"


def _data_dir(lake: Path) -> Path:
    return postgres_dir(lake) / "data"


def _log_file(lake: Path) -> Path:
    return postgres_dir(lake) / "postgres.log"


def _pid_file(lake: Path) -> Path:
    return postgres_dir(lake) / "postgres.pid"


def _state_file(lake: Path) -> Path:
    return postgres_dir(lake) / "postgres.json"


def _read_state(lake: Path) -> dict[str, Any]:
    return procs.read_state(_state_file(lake))


def _write_state(lake: Path, state: dict[str, Any]) -> None:
    """Owner-only: the file holds the cluster's generated password."""
    procs.write_state(_state_file(lake), state, private=True)


def _env_port() -> int | None:
    return procs.env_port(PORT_ENV, _check_port)


def _check_port(port: int) -> int:
    if not 1024 <= port <= 65535:
        raise StackError(f"PostgreSQL port {port} is out of range: use 1024-65535")
    return port


def configured_port(lake: Path) -> int:
    """The remembered port, else CDC_ENRICH_PG_PORT, else 15432."""
    remembered = _read_state(lake).get("port")
    if isinstance(remembered, int):
        return remembered
    return _env_port() or DEFAULT_PORT


def dsn(lake: Path, database: str | None = None, superuser: bool = False) -> str:
    """libpq connection string of this lake's cluster (the REPLICATION role unless `superuser`)."""
    state = _read_state(Path(lake))
    if "password" not in state:
        raise StackError(f"no local PostgreSQL cluster in {postgres_dir(Path(lake))}: run postgres_up first")
    user = SUPERUSER if superuser else state.get("user", CDC_USER)
    dbname = database or (SUPERUSER if superuser else state.get("database", DEFAULT_DATABASE))
    return f"host={HOST} port={state['port']} dbname={dbname} user={user} password={state['password']}"


# --------------------------------------------------------------------------- processes


def _error(lake: Path, message: str) -> StackError:
    return procs.error_with_log(message, _log_file(lake))


def _is_our_server(pid: int, lake: Path) -> bool:
    """Alive *and* a postmaster serving this lake's data directory: a reused pid is never ours."""
    procs.reap(pid, _CHILDREN)
    args = procs.cmdline(pid).split()
    return bool(args) and args[0].endswith("/postgres") and str(_data_dir(lake)) in args


def _running_pid(lake: Path) -> int | None:
    pid = procs.read_pid(_pid_file(lake))
    return pid if pid is not None and _is_our_server(pid, lake) else None


# --------------------------------------------------------------------------- binaries and identity


def _bin_dir() -> Path:
    """Where initdb and postgres are: CDC_ENRICH_PG_BIN, Debian's newest /usr/lib/postgresql/N/bin, or PATH."""
    env = os.environ.get(BIN_ENV)
    candidates = [Path(env)] if env else []
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _major(p.parent.name), reverse=True)
    candidates += debian
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "postgres").is_file():
            return folder
    raise StackError(
        "PostgreSQL server binaries (initdb, postgres) were not found in /usr/lib/postgresql/*/bin, on PATH, "
        f"or in {BIN_ENV}: run `make setup` (as root it installs Debian's postgresql package), or "
        "apt-get install postgresql"
    )


def _major(name: str) -> int:
    return int(name) if name.isdigit() else -1


@dataclass(frozen=True)
class _RunAs:
    """How to run PostgreSQL's programs: as ourselves, in a user namespace, or as another user."""

    mode: str  # "self" | "userns" | "setuid"
    uid: int
    gid: int

    def prefix(self) -> list[str]:
        if self.mode == "userns":
            return ["unshare", "--user", f"--map-user={self.uid}", f"--map-group={self.gid}"]
        return []

    def popen_kwargs(self) -> dict[str, Any]:
        if self.mode == "setuid":
            return {"user": self.uid, "group": self.gid, "extra_groups": []}
        return {}


def _unprivileged_user() -> tuple[int, int]:
    """The `postgres` system user when it exists (Debian's package creates it), else `nobody`."""
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    raise StackError("running as root, and neither a `postgres` nor a `nobody` user exists to run PostgreSQL as")


def _userns_works(uid: int, gid: int) -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        probe = subprocess.run(
            [unshare, "--user", f"--map-user={uid}", f"--map-group={gid}", "true"],
            capture_output=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def _run_as(lake: Path) -> _RunAs:
    """Pick how to run the server (see the module docstring); the choice is remembered per lake."""
    if os.geteuid() != 0:
        return _RunAs("self", os.geteuid(), os.getegid())
    uid, gid = _unprivileged_user()
    remembered = _read_state(lake).get("run_as")  # the cluster's files were made one way: keep it
    if remembered == "userns" or (remembered is None and _userns_works(uid, gid)):
        return _RunAs("userns", uid, gid)
    _hand_over(lake, uid, gid)
    return _RunAs("setuid", uid, gid)


def _hand_over(lake: Path, uid: int, gid: int) -> None:
    """chown the cluster folder to the server's user and check that it can reach it."""
    folder = postgres_dir(lake)
    for path in [folder, *folder.rglob("*")]:
        os.lchown(path, uid, gid)
    probe = subprocess.run(["test", "-w", str(folder)], user=uid, group=gid, extra_groups=[], check=False)
    if probe.returncode != 0:
        name = pwd.getpwuid(uid).pw_name
        raise StackError(
            f"PostgreSQL refuses to run as root, user namespaces are not available here, and the user "
            f"{name!r} cannot enter {folder} (some ancestor directory is not searchable by it): put the lake "
            "under a directory other users can enter (chmod o+x on each ancestor), or run as a non-root user"
        )


# --------------------------------------------------------------------------- cluster set-up


def _initdb(lake: Path, bin_dir: Path, run_as: _RunAs, password: str) -> None:
    """Create the cluster once (UTF8, C locale, scram passwords over TCP; no Unix socket is used)."""
    data = _data_dir(lake)
    if (data / "PG_VERSION").exists():
        return
    if data.exists() and any(data.iterdir()):
        raise StackError(f"{data} exists but is not a PostgreSQL cluster (no PG_VERSION): remove it, then retry")
    pwfile = postgres_dir(lake) / ".pwfile"
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(password + "\n")
    if run_as.mode == "setuid":
        os.chown(pwfile, run_as.uid, run_as.gid)
    cmd = run_as.prefix() + [
        str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "-E", "UTF8", "--locale=C",
        "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", f"--pwfile={pwfile}",
    ]  # fmt: skip
    try:
        with open(_log_file(lake), "ab") as log:
            log.write(b"--- initdb ---\n")
            log.flush()
            done = subprocess.run(
                cmd, stdout=log, stderr=subprocess.STDOUT, cwd=postgres_dir(lake), timeout=180, check=False,
                **run_as.popen_kwargs(),
            )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise _error(lake, "initdb did not finish within 180 s") from None
    finally:
        pwfile.unlink(missing_ok=True)
    if done.returncode != 0:
        raise _error(lake, f"initdb of {data} failed (exit {done.returncode})")
    with open(data / "postgresql.conf", "a") as conf:
        conf.write(f"\n# cdc-enrich: our settings (rewritten on every start)\ninclude_if_exists = '{CONF_FILE}'\n")


def _settings(port: int) -> dict[str, str]:
    """What Debezium needs (logical decoding), where to listen, and a small, fast throwaway server."""
    return {
        "listen_addresses": f"'{HOST}'",
        "port": str(port),
        "unix_socket_directories": "''",  # TCP only: socket paths under a deep lake can exceed 107 bytes
        "wal_level": "logical",
        "track_commit_timestamp": "on",  # each version's commit time, for the as-of check (`history_statements`)
        "max_replication_slots": "10",
        "max_wal_senders": "10",
        "max_connections": "60",
        "shared_buffers": "64MB",
        "fsync": "off",  # a throwaway test cluster: no OS-crash durability needed, commits are cheap
        "full_page_writes": "off",
        "deadlock_timeout": "'100ms'",  # two workload connections may deadlock: resolve it quickly
        "timezone": "'UTC'",
        "log_timezone": "'UTC'",
        "log_checkpoints": "off",
        "log_min_messages": "warning",
        "log_line_prefix": "'%m [%p] '",
    }


def _write_conf(lake: Path, port: int, run_as: _RunAs) -> None:
    lines = ["# Written by devstack.postgres on every start; edits are overwritten."]
    lines += [f"{key} = {value}" for key, value in _settings(port).items()]
    target = _data_dir(lake) / CONF_FILE
    target.write_text("\n".join(lines) + "\n")
    if run_as.mode == "setuid":
        os.chown(target, run_as.uid, run_as.gid)


def _connect(conninfo: str, timeout_s: float = 5) -> Any:
    import psycopg

    return psycopg.connect(conninfo, connect_timeout=max(1, int(timeout_s)), autocommit=True)


def _wait_ready(proc: subprocess.Popen[bytes] | None, pid: int, lake: Path, conninfo: str, timeout_s: float) -> None:
    """Poll until the server accepts a connection; fail early when its process dies."""
    import psycopg

    deadline = time.monotonic() + timeout_s
    while True:
        alive = proc.poll() is None if proc is not None else _is_our_server(pid, lake)
        if not alive:
            code = proc.returncode if proc is not None else "unknown"
            raise _error(lake, f"PostgreSQL (pid {pid}) exited during start-up with code {code}")
        try:
            with _connect(conninfo, timeout_s=2):
                return
        except psycopg.OperationalError as exc:
            last = str(exc).strip()
        if time.monotonic() > deadline:
            raise _error(lake, f"PostgreSQL (pid {pid}) did not accept connections within {timeout_s:g} s: {last}")
        time.sleep(0.2)


def _provision(lake: Path, database: str) -> None:
    """The REPLICATION LOGIN role and the database it owns (idempotent; the password is re-applied)."""
    from psycopg import sql

    state = _read_state(lake)
    with _connect(dsn(lake, superuser=True)) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (CDC_USER,)).fetchone()
        verb = "ALTER" if exists else "CREATE"
        conn.execute(
            sql.SQL(verb + " ROLE {} LOGIN REPLICATION PASSWORD {}").format(
                sql.Identifier(CDC_USER), sql.Literal(state["password"])
            )
        )
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(CDC_USER)))


# --------------------------------------------------------------------------- public API


def postgres_status(lake: Path) -> PostgresStatus:
    """Whether this lake's cluster is running (a process check only; cheap, no network)."""
    lake = Path(lake)
    state = _read_state(lake)
    return PostgresStatus(
        running=(pid := _running_pid(lake)) is not None,
        pid=pid,
        host=HOST,
        port=configured_port(lake),
        database=str(state.get("database", DEFAULT_DATABASE)),
        user=str(state.get("user", CDC_USER)),
        data_dir=_data_dir(lake),
        log_file=_log_file(lake),
    )


def postgres_up(lake: Path, port: int | None = None, database: str = DEFAULT_DATABASE, timeout_s: float = 60) -> PostgresStatus:
    """Start this lake's cluster, or return the one already running (idempotent).

    `port` (else CDC_ENRICH_PG_PORT, else the remembered port, else 15432) on 127.0.0.1. The
    first start runs initdb; every start makes sure the REPLICATION role and `database` exist.
    Raises StackError with the server log's tail when it cannot start; a server that fails to
    become ready is stopped, never left half-started.
    """
    lake = Path(lake)
    wanted = _check_port(port) if port is not None else _env_port()
    with procs.file_lock(postgres_dir(lake)):
        pid = _running_pid(lake)
        if pid is not None:
            running_port = configured_port(lake)
            if wanted is not None and wanted != running_port:
                raise StackError(
                    f"this lake's PostgreSQL is already running on port {running_port} (pid {pid}), not {wanted}: "
                    "run postgres_down (`stack down`) first to move it"
                )
            _wait_ready(None, pid, lake, dsn(lake, superuser=True), timeout_s)
        else:
            _pid_file(lake).unlink(missing_ok=True)  # stale: its process is gone or is not ours
            _start(lake, wanted or configured_port(lake), timeout_s)
        _write_state(lake, {**_read_state(lake), "database": database})
        _provision(lake, database)
        return postgres_status(lake)


def _start(lake: Path, port: int, timeout_s: float) -> None:
    bin_dir = _bin_dir()
    if not procs.port_free(port):
        raise StackError(
            f"port {port} ({HOST}:{port}) is already in use by another process, not by a PostgreSQL this lake "
            f"started: stop it, or pick another port with {PORT_ENV}"
        )
    state = _read_state(lake)
    password = state.get("password") or secrets.token_urlsafe(18)
    _log_file(lake).write_text(f"--- cdc-enrich: starting PostgreSQL on {HOST}:{port} ---\n")
    run_as = _run_as(lake)
    _write_state(lake, {**state, "port": port, "password": password, "user": CDC_USER, "run_as": run_as.mode})
    _initdb(lake, bin_dir, run_as, password)
    _write_conf(lake, port, run_as)
    cmd = run_as.prefix() + [str(bin_dir / "postgres"), "-D", str(_data_dir(lake))]
    with open(_log_file(lake), "ab") as log:
        log.write(b"--- postgres ---\n")
        log.flush()
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=postgres_dir(lake),
            start_new_session=True, **run_as.popen_kwargs(),  # survives our Ctrl-C and our exit
        )  # fmt: skip
    _CHILDREN[proc.pid] = proc
    _pid_file(lake).write_text(f"{proc.pid}\n")
    try:
        _wait_ready(proc, proc.pid, lake, dsn(lake, superuser=True), timeout_s)
    except BaseException:
        _stop(proc.pid, lake, timeout_s=10)
        _pid_file(lake).unlink(missing_ok=True)
        raise


def _stop(pid: int, lake: Path, timeout_s: float) -> None:
    """Fast shutdown (SIGINT: ends sessions, incl. Debezium's walsender), then immediate (SIGQUIT), then SIGKILL."""
    steps = ((signal.SIGINT, timeout_s), (signal.SIGQUIT, 10.0), (signal.SIGKILL, 10.0))
    procs.stop(pid, lambda: _is_our_server(pid, lake), steps, _CHILDREN)


def postgres_down(lake: Path, timeout_s: float = 30) -> bool:
    """Stop the server in this lake's pid file (and nothing else); True when one was running."""
    lake = Path(lake)
    if not postgres_dir(lake).is_dir():
        return False
    with procs.file_lock(postgres_dir(lake)):
        pid = _running_pid(lake)
        if pid is not None:
            _stop(pid, lake, timeout_s)
            if _is_our_server(pid, lake):
                raise _error(lake, f"PostgreSQL (pid {pid}) did not stop after SIGINT, SIGQUIT and SIGKILL")
        _pid_file(lake).unlink(missing_ok=True)
        return pid is not None
