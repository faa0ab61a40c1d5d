"""A local Spark Connect server, for running the pipeline the way serverless compute runs it.

Started from pyspark's own jars (its wheel bundles `spark-connect_2.13-<version>.jar`) with the
same settings as a local session (`lakehouse.spark.local_spark_conf`: Delta, the warehouse and
metastore under the lake); its client is any `cdc-enrich` command with `SPARK_REMOTE` set to the
server's `sc://127.0.0.1:<port>`. The JVM decoder's jar is left off the server on purpose: a
Connect client cannot use it, and bronze must choose its SQL pass there by itself. Like the rest
of the local stack it is owned by this process: a log under the lake, stopped with its group.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from devstack.procs import HOST, error_with_log, free_port
from lakehouse.errors import StackError
from lakehouse.spark import local_spark_conf

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 120.0


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def server_jar() -> Path:
    """The Connect server jar pyspark's wheel ships."""
    found = sorted((_pyspark_home() / "jars").glob("spark-connect_*.jar"))
    if not found:
        raise StackError(f"pyspark's wheel has no spark-connect jar under {_pyspark_home() / 'jars'}: reinstall pyspark (make setup)")
    return found[-1]


def server_command(lake: Path, port: int, cores: int = 2, conf: Mapping[str, str] | None = None) -> list[str]:
    """spark-submit of the Connect server over `lake` on `port`, without the decoder jar;
    `conf` overrides `local_spark_conf` (as `build_local_spark`'s does)."""
    conf = {**local_spark_conf(lake), **(conf or {})}
    conf["spark.jars"] = ",".join(j for j in conf["spark.jars"].split(",") if "decoder" not in Path(j).name)
    conf["spark.connect.grpc.binding.port"] = str(port)
    conf["spark.connect.grpc.binding.address"] = HOST
    command = [str(_pyspark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", f"local[{cores}]"]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return command + [str(server_jar())]


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((HOST, port)) == 0


@contextmanager
def connect_server(lake: Path, cores: int = 2, conf: Mapping[str, str] | None = None) -> Iterator[str]:
    """Run a Spark Connect server over `lake` for the block (`conf` over the local settings);
    yields its `sc://` URL."""
    lake = Path(lake).resolve()
    folder = lake / "stack" / "spark-connect"
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "server.log"
    port = free_port()
    env = dict(os.environ, SPARK_HOME=str(_pyspark_home()), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP=HOST)
    env.pop("SPARK_REMOTE", None)
    with open(log, "ab") as out:
        process = subprocess.Popen(server_command(lake, port, cores, conf), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _listening(port):
            if process.poll() is not None:
                raise error_with_log(f"the Spark Connect server exited with {process.returncode}", log)
            if time.monotonic() > deadline:
                raise error_with_log(f"the Spark Connect server did not listen on {port} within {START_TIMEOUT_S:.0f}s", log)
            time.sleep(0.5)
        yield f"sc://{HOST}:{port}"
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left after 30 s."""
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
