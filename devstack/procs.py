"""Process plumbing shared by the local stack's services (Kafka broker, PostgreSQL, Kafka Connect).

Each service lives in its own folder under `<lake>/stack/`: a pid file, a JSON state file, a
log and a lock. These helpers are the parts that do not depend on which service it is: telling
our process from a reused pid, reaping children, atomic state files, the lock that serialises
up/down across processes, the log tail that goes into every error, and stopping by signals.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from lakehouse.errors import StackError

HOST = "127.0.0.1"
LOG_TAIL_LINES = 30


def read_state(path: Path) -> dict[str, Any]:
    """A service's state file as a dict; empty when never written (or damaged)."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def write_state(path: Path, state: dict[str, Any], private: bool = False) -> None:
    """Atomic (other processes read it to find the service); `private`: owner-only (secrets)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def env_port(variable: str, check: Callable[[int], int]) -> int | None:
    """The port asked for through `variable`, validated by `check` so a typo fails clearly."""
    raw = os.environ.get(variable)
    if not raw:
        return None
    try:
        return check(int(raw))
    except ValueError:
        raise StackError(f"{variable}={raw!r} is not a port number") from None


def cmdline(pid: int) -> str:
    """The command line of a process ("" when gone or a zombie), to tell ours from a reused pid."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return ""
    except OSError:
        pass
    try:  # no /proc (macOS)
        out = subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True, check=False)
    except OSError:
        return ""
    return out.stdout.strip()


def reap(pid: int, children: dict[int, subprocess.Popen[bytes]]) -> None:
    """Collect the exit status of a child we started, so its zombie does not look alive."""
    child = children.get(pid)
    if child is not None:
        if child.poll() is not None:
            children.pop(pid, None)
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: init reaps it


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def port_free(port: int) -> bool:
    """True when we could listen on 127.0.0.1:port (SO_REUSEADDR: a TIME_WAIT socket is no obstacle)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log, appended to errors because that is where the cause is."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else "(the log is empty)"


def error_with_log(message: str, log: Path, lines: int = LOG_TAIL_LINES) -> StackError:
    return StackError(f"{message}\n--- last lines of {log} ---\n{log_tail(log, lines)}")


@contextmanager
def file_lock(folder: Path) -> Iterator[None]:
    """Serialise up/down across processes, so two `up` never start two servers."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def stop(
    pid: int,
    is_ours: Callable[[], bool],
    steps: tuple[tuple[signal.Signals, float], ...],
    children: dict[int, subprocess.Popen[bytes]],
) -> None:
    """Send each (signal, seconds to wait) in turn until the process is gone, then reap it.
    `is_ours` re-checks ownership before every signal: a pid reused meanwhile is left alone."""
    for sig, wait_s in steps:
        if not is_ours():
            break
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and is_ours():
            time.sleep(0.1)
        if not is_ours():
            break
    reap(pid, children)
    children.pop(pid, None)
