"""The one entry layer under every job and the CLI: pipeline, Kafka bootstrap, trigger, exit codes.

A rule that every entry point must apply the same way lives here once: which Kafka to read
(flag > env > pipeline file > the local stack), which trigger (flag > pipeline file), which
stage function runs a stage, and how an error becomes an exit code (configuration 2, failure 1).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from lakehouse.declaration import Pipeline, load_pipeline
from lakehouse.errors import CdcEnrichError, PipelineConfigError
from lakehouse.kafka import resolve_value
from lakehouse.paths import local_broker_state
from lakehouse.secrets import redact
from lakehouse.streaming import TRIGGERS, check_trigger  # noqa: F401 (TRIGGERS: the entry points' --trigger choices)

BOOTSTRAP_ENV = "CDC_ENRICH_KAFKA_BOOTSTRAP"
LOCAL_BROKER_HOST = "127.0.0.1"
LOCAL_BROKER_PORT_ENV = "CDC_ENRICH_KAFKA_PORT"
LOCAL_BROKER_DEFAULT_PORT = 19092
STAGES = ("bronze", "silver", "gold", "quality")

EXIT_OK = 0
EXIT_FAILED = 1  # the run failed (a stage, a broker, a table): what to do is in the message
EXIT_CONFIG = 2  # the pipeline file or an argument is wrong: nothing ran


@dataclass(frozen=True)
class Bootstrap:
    """Kafka bootstrap servers and where they came from (`flag`, `env`, `pipeline`, `local stack`)."""

    servers: str
    origin: str


def local_broker_bootstrap(lake: Path) -> str:
    """The local stack's broker for this lake: the port it recorded, else CDC_ENRICH_KAFKA_PORT, else 19092."""
    try:
        port = json.loads(local_broker_state(lake).read_text(encoding="utf-8")).get("port")
    except (OSError, ValueError):
        port = None
    if not isinstance(port, int):
        port = int(os.environ.get(LOCAL_BROKER_PORT_ENV) or LOCAL_BROKER_DEFAULT_PORT)
    return f"{LOCAL_BROKER_HOST}:{port}"


def resolve_bootstrap(flag: str | None, pipeline: Pipeline, lake: Path) -> Bootstrap:
    """Which Kafka to read: --bootstrap, then $CDC_ENRICH_KAFKA_BOOTSTRAP (the bundle's secret),
    then `kafka.bootstrap_servers` in the pipeline file, then this lake's local broker."""
    if flag:
        return Bootstrap(flag, "flag")
    if os.environ.get(BOOTSTRAP_ENV):
        return Bootstrap(os.environ[BOOTSTRAP_ENV], "env")
    if pipeline.kafka.bootstrap_servers:  # may reference ${env:...} or ${secret:...} (serverless: no env vars)
        return Bootstrap(resolve_value(pipeline.kafka.bootstrap_servers, "kafka.bootstrap_servers"), "pipeline")
    return Bootstrap(local_broker_bootstrap(lake), "local stack")


def resolve_trigger(flag: str | None, pipeline: Pipeline) -> str:
    """The streams' trigger: --trigger, else the pipeline's `options.trigger`."""
    trigger = flag or pipeline.options.trigger
    check_trigger(trigger)
    return trigger


def load(path: str | os.PathLike[str], catalog: str | None = None) -> Pipeline:
    """The validated pipeline (PipelineConfigError, exit code 2, names file, line and field);
    `catalog`: a job's --catalog (else CDC_ENRICH_CATALOG, else the file's)."""
    return load_pipeline(path, catalog)


def check_with_spark(spark: Any, pipeline: Pipeline) -> None:
    """What the loader cannot check without Spark's analyzer (a key expression's SQL and type),
    reported like the loader's problems (file, line, field)."""
    from lakehouse.gold.expression_join import check_key_types

    for view in pipeline.views.values():
        check_key_types(spark, pipeline, view)


def run_stage(
    stage: str,
    spark: Any,
    pipeline: Pipeline,
    lake: Path,
    *,
    bootstrap: str | None = None,
    trigger: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """Run one stage of the flow and return its report (the CLI's `run` and the demo call this).
    The views' key expressions are checked first (`check_with_spark`): a bad one stops every stage."""
    check_with_spark(spark, pipeline)
    chosen = resolve_trigger(trigger, pipeline)
    if stage == "bronze":
        from lakehouse.bronze import run_bronze

        servers = bootstrap or resolve_bootstrap(None, pipeline, lake).servers
        return run_bronze(spark, pipeline, lake, servers, trigger=chosen, progress=progress)
    if stage == "silver":
        from lakehouse.silver import run_silver

        return run_silver(spark, pipeline, lake, trigger=chosen, progress=progress)
    if stage == "gold":
        from lakehouse.gold import run_gold

        return run_gold(spark, pipeline, lake, trigger=chosen, progress=progress)
    if stage == "quality":
        from lakehouse.quality.runner import run_quality

        return run_quality(spark, pipeline, lake)
    raise PipelineConfigError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")


@contextlib.contextmanager
def stop_on_signals(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> Iterator[threading.Event]:
    """An event that SIGTERM (what Databricks and systemd send to stop a job) or Ctrl-C sets, for
    a continuous run to stop between micro-batches; a second signal does not wait (it raises
    KeyboardInterrupt: every query is stopped at once, and its batch is replayed on the next
    start). The previous handlers come back afterwards. Outside the main thread (where Python
    allows no handlers) the event is only set by hand."""
    stop = threading.Event()
    previous: dict[int, Any] = {}

    def handle(*_: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in signals:
            previous[sig] = signal.signal(sig, handle)
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_continuously(
    spark: Any,
    pipeline: Pipeline,
    lake: Path,
    *,
    bootstrap: str | None = None,
    timeout_s: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """Every stage's queries at once until SIGTERM, Ctrl-C or `timeout_s`, then a clean stop
    (`lakehouse.continuous`); returns its ContinuousReport. The CLI's `run --continuous` and the
    bundle's continuous job call this."""
    from lakehouse.continuous import run_continuous

    check_with_spark(spark, pipeline)
    servers = bootstrap or resolve_bootstrap(None, pipeline, lake).servers
    with stop_on_signals() as stop:
        return run_continuous(spark, pipeline, lake, servers, progress=progress, stop=stop, timeout_s=timeout_s)


def exit_code(exc: BaseException) -> int:
    """2 for a configuration error (nothing ran), 1 for any other failure."""
    return EXIT_CONFIG if isinstance(exc, PipelineConfigError) else EXIT_FAILED


def run_main(name: str, body: Callable[[], int]) -> int:
    """Run an entry point's body; print a project error as `<name>: error: ...` and map it to its exit code."""
    try:
        return int(body() or EXIT_OK)
    except CdcEnrichError as exc:
        print(f"{name}: error: {redact(str(exc))}", file=sys.stderr, flush=True)
        return exit_code(exc)
    except KeyboardInterrupt:
        return 130
