"""What the engine reads from (and keeps in) a streaming query's checkpoint folder.

One module, so the rules about checkpoints live in one place: which batch a crashed run left
uncommitted (bronze replays only that one), which query a checkpoint belongs to (the commit
tags' app id: a new checkpoint, a new id) and silver's own app-id marker. A checkpoint is a
local folder (or a Unity Catalog volume, which Databricks mounts as files for the driver and for
a Spark Connect batch function's worker alike), read with file calls; or a URI (`s3://...`,
`abfss://...`, `file:/...`: `lakehouse.paths.Uri`), read and written through Spark, that is
Hadoop's filesystem, which works from a Connect client too.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from lakehouse.paths import Location, Uri

SILVER_APP_ID_FILE = "_silver_app_id"  # in a local checkpoint
SILVER_APP_ID_DIR = "silver_app_id"  # in a URI checkpoint: one text file Spark writes and reads


def _names(folder: Location, session: Any) -> list[str]:
    """The names of the files in `folder` (none when it does not exist yet). Through Spark for
    a URI: its file listing leaves out hidden (`.N.crc`) and temporary files, as the caller must."""
    if isinstance(folder, Path):
        try:
            return [p.name for p in folder.iterdir()]
        except FileNotFoundError:
            return []
    rows = _read_or_none(lambda: session.read.format("binaryFile").load(str(folder)).select("path").collect())
    return [str(r[0]).rstrip("/").rsplit("/", 1)[-1] for r in rows or []]


def _read_or_none(read: Any) -> Any:
    """`read()`, or None when Spark says the path does not exist (an AnalysisException on a
    classic session; a Connect client may get it under another class, so the condition decides)."""
    try:
        return read()
    except Exception as exc:  # noqa: BLE001 - re-raised unless it is the missing path
        if "PATH_NOT_FOUND" in str(exc):
            return None
        raise


def _batch_ids(folder: Location, session: Any = None) -> set[int]:
    """The batch ids a streaming checkpoint's `offsets` or `commits` folder holds (its files
    are named by id; Hadoop's hidden `.N.crc` and temporary files are not ids)."""
    return {int(name) for name in _names(folder, session) if name.isdigit()}


def uncommitted_batch(checkpoint: Location, session: Any = None) -> int | None:
    """The batch a stream's previous run planned but did not commit, which its next run
    replays first (Spark's offset log is written before a batch runs, its commit log after);
    None when every planned batch was committed, as after a clean stop. (`session` reads a URI.)"""
    planned = _batch_ids(checkpoint / "offsets", session)
    if not planned:
        return None
    last = max(planned)
    return None if last in _batch_ids(checkpoint / "commits", session) else last


def query_id(checkpoint: Location, session: Any = None) -> str:
    """The id of the query a checkpoint belongs to: Spark writes `<checkpoint>/metadata` when
    the query is created and keeps it across restarts. Read by the batch function itself (with
    its batch's session for a URI), so it needs nothing from the process that started the query."""
    metadata = checkpoint / "metadata"
    try:
        if isinstance(metadata, Path):
            text = metadata.read_text().splitlines()[0]
        else:
            text = session.read.text(str(metadata)).first()[0]
        return str(json.loads(text)["id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise RuntimeError(f"cannot read the query id from {metadata}: {exc}") from exc


def silver_app_id(checkpoint: Location, session: Any = None) -> str:
    """The txn appId of one silver stream: a uuid kept inside its checkpoint.

    Delta skips a write whose (appId, version) is not above the last recorded; batch ids
    restart at 0 with a new checkpoint, so the appId must change with the checkpoint, or a
    reset stream would silently write nothing.
    """
    if isinstance(checkpoint, Uri):
        return _uri_marker(checkpoint / SILVER_APP_ID_DIR, session)
    checkpoint.mkdir(parents=True, exist_ok=True)
    marker = checkpoint / SILVER_APP_ID_FILE
    if not marker.exists():
        marker.write_text(f"silver-{uuid.uuid4()}\n")
    return marker.read_text().strip()


def _uri_marker(marker: Uri, session: Any) -> str:
    """The text kept at `marker` (a folder Spark writes with one line), written first if missing."""
    rows = _read_or_none(lambda: session.read.text(str(marker)).collect())
    if not rows:
        fresh = f"silver-{uuid.uuid4()}"
        try:
            session.createDataFrame([(fresh,)], "value string").coalesce(1).write.mode("error").text(str(marker))
        except Exception as exc:  # noqa: BLE001 - another start wrote it first: read theirs
            if "PATH_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                raise
        rows = session.read.text(str(marker)).collect()
    return str(rows[0][0]).strip()
