"""The local Kafka broker (devstack.broker) against a real KRaft broker from the Maven jars; no mocks.

One broker per module (start-up costs a few seconds), on a free port pair rather than 19092, so a
developer's own broker is never touched. Teardown always stops what the module started.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from devstack.broker import (
    BrokerStatus,
    bootstrap_servers,
    broker_down,
    broker_status,
    broker_up,
    create_topics,
)
from lakehouse.errors import StackError

# one worker runs the module (`make test`: --dist loadgroup): its broker starts once
pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("stack")]


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair() -> int:
    """A port p with p+1 also free (the controller listener), never the developer default 19092."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in (19091, 19092, 19093) and port < 65534 and _bindable(port) and _bindable(port + 1):
            return port
    raise RuntimeError("no free port pair found")


def broker_pids_for(lake: Path) -> list[int]:
    """Every kafka.Kafka process running this lake's server.properties (should be 0 or 1)."""
    props = str(lake / "stack" / "kafka" / "server.properties")
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "kafka.Kafka" in cmd.split() and props in cmd:
            pids.append(int(entry.name))
    return pids


@pytest.fixture(scope="module")
def stack_lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    """A lake and port for this module's broker; stops it at the end whatever the tests did."""
    lake = tmp_path_factory.mktemp("lake")
    port = free_port_pair()
    try:
        yield lake, port
    finally:
        broker_down(lake)
        assert broker_pids_for(lake) == []


@pytest.fixture()
def broker(stack_lake: tuple[Path, int]) -> BrokerStatus:
    """The module's broker, started on first use; idempotent `up` makes every test order-independent."""
    lake, port = stack_lake
    return broker_up(lake, port=port, timeout_s=60)


def test_up_starts_a_broker_that_round_trips_a_message(broker: BrokerStatus, stack_lake: tuple[Path, int]) -> None:
    lake, port = stack_lake
    assert broker.running and broker.pid is not None
    assert broker.bootstrap == f"127.0.0.1:{port}" == bootstrap_servers(lake)
    assert json.loads((lake / "stack" / "kafka" / "stack.json").read_text())["port"] == port
    assert (broker.data_dir / "meta.properties").exists()

    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topics(broker.bootstrap, [topic], partitions=2)
    create_topics(broker.bootstrap, [topic], partitions=2)  # already exists: no error

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, key=b"k1", value=b'{"id": 1}')
    assert producer.flush(10) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        msg = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.error() is None, "no message consumed within 30 s"
        assert (msg.key(), msg.value()) == (b"k1", b'{"id": 1}')
    finally:
        consumer.close()


def test_up_twice_leaves_one_broker(broker: BrokerStatus, stack_lake: tuple[Path, int]) -> None:
    lake, port = stack_lake
    again = broker_up(lake, port=port)
    assert again.pid == broker.pid
    assert broker_pids_for(lake) == [broker.pid]


def test_up_on_another_port_while_running_is_refused(broker: BrokerStatus, stack_lake: tuple[Path, int]) -> None:
    lake, port = stack_lake
    with pytest.raises(StackError, match=str(port)):
        broker_up(lake, port=port + 10)
    assert broker_status(lake).pid == broker.pid


def test_status_reports_running(broker: BrokerStatus, stack_lake: tuple[Path, int]) -> None:
    lake, _ = stack_lake
    status = broker_status(lake)
    assert status == broker
    assert "running" in status.describe() and status.bootstrap in status.describe()


def test_down_stops_it_and_down_again_is_a_no_op(broker: BrokerStatus, stack_lake: tuple[Path, int]) -> None:
    lake, port = stack_lake
    pid = broker.pid
    assert pid is not None
    assert broker_down(lake) is True
    assert broker_pids_for(lake) == []
    status = broker_status(lake)
    assert not status.running and status.pid is None
    assert "not running" in status.describe()
    assert not (lake / "stack" / "kafka" / "broker.pid").exists()
    assert broker_down(lake) is False
    # the port is remembered for other processes even while the broker is down
    assert bootstrap_servers(lake) == f"127.0.0.1:{port}"


def test_port_taken_by_another_listener_is_reported(tmp_path: Path) -> None:
    port = free_port_pair()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(StackError, match=f"port {port}"):
            broker_up(tmp_path, port=port, timeout_s=20)
    assert broker_pids_for(tmp_path) == []
    assert not (tmp_path / "stack" / "kafka" / "broker.pid").exists()


def test_missing_jars_say_run_make_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "jars"
    empty.mkdir()
    monkeypatch.setenv("CDC_ENRICH_JARS", str(empty))
    with pytest.raises(StackError, match="make setup"):
        broker_up(tmp_path / "lake", port=free_port_pair(), timeout_s=20)
    assert broker_pids_for(tmp_path / "lake") == []


def test_create_topics_needs_a_partition() -> None:
    with pytest.raises(StackError, match="partition"):
        create_topics("127.0.0.1:1", ["x"], partitions=0)
