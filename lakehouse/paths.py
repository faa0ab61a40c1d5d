"""Where things live on the local machine: the lake root and the jar cache made by `make setup`."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LAKE = Path(".lake")


def lake_root(lake: str | os.PathLike[str] | None = None) -> Path:
    """The directory rooting every local table, checkpoint and broker file (absolute)."""
    chosen = lake or os.environ.get("CDC_ENRICH_LAKE") or DEFAULT_LAKE
    return Path(chosen).expanduser().resolve()


def jar_cache(kind: str) -> Path:
    """The folder holding the resolved jars of one kind ("spark" or "kafka")."""
    base = os.environ.get("CDC_ENRICH_JARS") or str(REPO_ROOT / ".cache" / "jars")
    return Path(base) / kind


def jars(kind: str) -> list[Path]:
    """The resolved jar files of one kind, sorted; empty when `make setup` has not run."""
    folder = jar_cache(kind)
    return sorted(folder.glob("*.jar")) if folder.is_dir() else []


def checkpoint_dir(lake: Path, pipeline_name: str, stream: str) -> Path:
    """One checkpoint per stream; CDC_ENRICH_CHECKPOINTS moves them (e.g. a UC volume)."""
    base = Path(os.environ["CDC_ENRICH_CHECKPOINTS"]) if os.environ.get("CDC_ENRICH_CHECKPOINTS") else lake / "checkpoints"
    return base / pipeline_name / stream


def local_broker_state(lake: Path) -> Path:
    """The local stack's broker record (port, cluster id) for this lake: written by the stack,
    read by the entry layer to find the broker when nothing else names one."""
    return Path(lake) / "stack" / "kafka" / "stack.json"
