"""What the engine reads from (and keeps in) a streaming query's checkpoint folder.

One module, so the rules about checkpoints live in one place: which batch a crashed run left
uncommitted (bronze replays only that one), which query a checkpoint belongs to (the commit
tags' app id: a new checkpoint, a new id) and silver's own app-id marker. Plain file reads:
checkpoints live under the lake (a local folder, or a Unity Catalog volume, which Databricks
mounts as files for the driver and for a Spark Connect batch function's worker alike).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

SILVER_APP_ID_FILE = "_silver_app_id"


def _batch_ids(folder: Path) -> set[int]:
    """The batch ids a streaming checkpoint's `offsets` or `commits` folder holds (its files
    are named by id; Hadoop's hidden `.N.crc` and temporary files are not ids)."""
    try:
        return {int(p.name) for p in folder.iterdir() if p.name.isdigit()}
    except FileNotFoundError:
        return set()


def uncommitted_batch(checkpoint: Path) -> int | None:
    """The batch a stream's previous run planned but did not commit, which its next run
    replays first (Spark's offset log is written before a batch runs, its commit log after);
    None when every planned batch was committed, as after a clean stop."""
    checkpoint = Path(checkpoint)
    planned = _batch_ids(checkpoint / "offsets")
    if not planned:
        return None
    last = max(planned)
    return None if last in _batch_ids(checkpoint / "commits") else last


def query_id(checkpoint: Path) -> str:
    """The id of the query a checkpoint belongs to: Spark writes `<checkpoint>/metadata` when
    the query is created and keeps it across restarts. Read by the batch function itself, so
    it needs nothing from the process that started the query."""
    metadata = Path(checkpoint) / "metadata"
    try:
        return str(json.loads(metadata.read_text().splitlines()[0])["id"])
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise RuntimeError(f"cannot read the query id from {metadata}: {exc}") from exc


def silver_app_id(checkpoint: Path) -> str:
    """The txn appId of one silver stream: a uuid kept inside its checkpoint.

    Delta skips a write whose (appId, version) is not above the last recorded; batch ids
    restart at 0 with a new checkpoint, so the appId must change with the checkpoint, or a
    reset stream would silently write nothing.
    """
    checkpoint = Path(checkpoint)
    checkpoint.mkdir(parents=True, exist_ok=True)
    marker = checkpoint / SILVER_APP_ID_FILE
    if not marker.exists():
        marker.write_text(f"silver-{uuid.uuid4()}\n")
    return marker.read_text().strip()
