"""What the local connector's offsets file says about a restart (devstack.connect)."""

from pathlib import Path

from devstack.connect import offsets_file, snapshot_pending, stored_offset


def _write(lake: Path, value: bytes) -> None:
    path = offsets_file(lake)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the shape of Connect's FileOffsetBackingStore: a Java-serialized map of byte arrays
    path.write_bytes(b"\xac\xed\x00\x05sr\x00\x11java.util.HashMap" + b'ur\x00\x02[B["pge",{"server":"pge"}]uq\x00~' + value + b"x")


def test_no_file_means_a_restart_snapshots(tmp_path: Path) -> None:
    assert stored_offset(tmp_path) is None
    assert snapshot_pending(stored_offset(tmp_path))


def test_an_offset_written_during_the_snapshot_means_a_restart_snapshots_again(tmp_path: Path) -> None:
    _write(tmp_path, b'{"last_snapshot_record":false,"lsn":100,"txId":7,"ts_usec":1,"snapshot":true}')
    assert stored_offset(tmp_path) == {"last_snapshot_record": False, "lsn": 100, "txId": 7, "ts_usec": 1, "snapshot": True}
    assert snapshot_pending(stored_offset(tmp_path))


def test_the_last_snapshot_record_or_a_streaming_offset_means_a_restart_streams(tmp_path: Path) -> None:
    _write(tmp_path, b'{"last_snapshot_record":true,"lsn":100,"txId":7,"ts_usec":1,"snapshot":true}')
    assert not snapshot_pending(stored_offset(tmp_path))
    _write(tmp_path, b'{"lsn_proc":120,"messageType":"INSERT","lsn_commit":120,"lsn":120,"txId":8,"ts_usec":2}')
    assert not snapshot_pending(stored_offset(tmp_path))
