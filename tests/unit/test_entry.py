"""The entry layer: one precedence for Kafka and the trigger, one mapping of errors to exit codes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from lakehouse.declaration import Pipeline
from lakehouse.entry import (
    Bootstrap,
    EXIT_CONFIG,
    EXIT_FAILED,
    local_broker_bootstrap,
    resolve_bootstrap,
    resolve_trigger,
    run_main,
)
from lakehouse.errors import CdcEnrichError, PipelineConfigError, StackError, UnknownNameError
from lakehouse.paths import local_broker_state


def with_file_bootstrap(pipeline: Pipeline, servers: str | None) -> Pipeline:
    return dataclasses.replace(pipeline, kafka=dataclasses.replace(pipeline.kafka, bootstrap_servers=servers))


@pytest.fixture()
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("CDC_ENRICH_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("CDC_ENRICH_KAFKA_PORT", raising=False)
    return tmp_path


def test_bootstrap_precedence_is_flag_then_env_then_file_then_local_stack(shop_pipeline, lake, monkeypatch):
    in_file = with_file_bootstrap(shop_pipeline, "file:9092")
    monkeypatch.setenv("CDC_ENRICH_KAFKA_BOOTSTRAP", "env:9092")
    assert resolve_bootstrap("flag:9092", in_file, lake) == Bootstrap("flag:9092", "flag")
    assert resolve_bootstrap(None, in_file, lake) == Bootstrap("env:9092", "env")  # the bundle's secret wins over the file
    monkeypatch.delenv("CDC_ENRICH_KAFKA_BOOTSTRAP")
    assert resolve_bootstrap(None, in_file, lake) == Bootstrap("file:9092", "pipeline")
    assert resolve_bootstrap(None, with_file_bootstrap(shop_pipeline, None), lake) == Bootstrap("127.0.0.1:19092", "local stack")


def test_the_local_stack_is_found_by_the_port_it_recorded(lake, monkeypatch):
    monkeypatch.setenv("CDC_ENRICH_KAFKA_PORT", "23000")
    assert local_broker_bootstrap(lake) == "127.0.0.1:23000"
    state = local_broker_state(lake)
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"port": 24000}), encoding="utf-8")
    assert local_broker_bootstrap(lake) == "127.0.0.1:24000"


def test_the_local_stack_writes_its_record_where_the_entry_layer_reads_it(lake):
    from devstack import broker

    assert broker._state_file(lake) == local_broker_state(lake)


def test_trigger_is_the_flag_else_the_pipelines(shop_pipeline):
    assert resolve_trigger("processing_time", shop_pipeline) == "processing_time"
    assert resolve_trigger(None, shop_pipeline) == shop_pipeline.options.trigger
    with pytest.raises(PipelineConfigError, match="trigger 'sometimes'"):
        resolve_trigger("sometimes", shop_pipeline)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (PipelineConfigError("bad file"), EXIT_CONFIG),
        (UnknownNameError("no view 'nope'"), EXIT_CONFIG),
        (StackError("broker down"), EXIT_FAILED),
        (CdcEnrichError("a stage failed"), EXIT_FAILED),
    ],
)
def test_configuration_errors_exit_2_and_failures_exit_1(error, code, capsys):
    def body() -> int:
        raise error

    assert run_main("some_job", body) == code
    assert capsys.readouterr().err == f"some_job: error: {error}\n"


def test_an_unknown_name_is_a_key_error_that_prints_its_message():
    error = UnknownNameError("pipeline 'shop' has no source 'nope'")
    assert isinstance(error, KeyError) and str(error) == "pipeline 'shop' has no source 'nope'"


def test_sigterm_asks_a_continuous_run_to_stop_instead_of_killing_the_process() -> None:
    """What Databricks and systemd send to stop a job: inside `stop_on_signals` it only sets the
    event the run waits on; afterwards the previous handler is back."""
    import os
    import signal
    import time

    from lakehouse.entry import stop_on_signals

    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals() as stop:
        assert not stop.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
        with pytest.raises(KeyboardInterrupt):  # a second one does not wait for running batches
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert signal.getsignal(signal.SIGTERM) is before
