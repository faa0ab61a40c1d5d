"""Where things live on the local machine: the lake root and the jar cache made by `make setup`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Union

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LAKE = Path(".lake")


def lake_root(lake: str | os.PathLike[str] | None = None) -> Path:
    """The directory rooting every local table, checkpoint and broker file (absolute)."""
    chosen = lake or os.environ.get("CDC_ENRICH_LAKE") or DEFAULT_LAKE
    return Path(chosen).expanduser().resolve()


def _jar_root() -> Path:
    """`make setup`'s jar folder (`CDC_ENRICH_JARS` moves it); the class archive lives beside it."""
    return Path(os.environ.get("CDC_ENRICH_JARS") or str(REPO_ROOT / ".cache" / "jars"))


def jar_cache(kind: str) -> Path:
    """The folder holding the resolved jars of one kind ("spark" or "kafka")."""
    return _jar_root() / kind


def jvm_class_archive() -> Path:
    """Where `make setup` keeps the local Spark driver's class archive (`devstack.class_archive`):
    Spark's, Scala's and Delta's classes already parsed and verified, which a driver JVM maps at
    start instead of loading them one by one from the jars."""
    return _jar_root().parent / "jvm" / "spark-classes.jsa"


def jars(kind: str) -> list[Path]:
    """The resolved jar files of one kind, sorted; empty when `make setup` has not run."""
    folder = jar_cache(kind)
    return sorted(folder.glob("*.jar")) if folder.is_dir() else []


@dataclass(frozen=True)
class Uri:
    """A location with a scheme (`s3://`, `abfss://`, `gs://`, `dbfs:/`, `file:/`), kept as text
    (pathlib would fold its `//`) and read through Spark, that is Hadoop's filesystems
    (`lakehouse.checkpoints`)."""

    text: str

    def __truediv__(self, part: str) -> "Uri":
        return Uri(self.text.rstrip("/") + "/" + part) if part else self

    def __str__(self) -> str:
        return self.text

    @property
    def name(self) -> str:
        return self.text.rstrip("/").rsplit("/", 1)[-1]


Location = Union[Path, Uri]
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")


def location(text: str | os.PathLike[str]) -> Location:
    """A URI as a `Uri`, anything else as a local (or FUSE-mounted: `/Volumes/...`) path."""
    raw = os.fspath(text)
    return Uri(raw) if _SCHEME.match(raw) else Path(raw)


def checkpoint_dir(lake: Path, pipeline_name: str, stream: str) -> Location:
    """One checkpoint per stream; CDC_ENRICH_CHECKPOINTS moves them (a UC volume, or any URI
    Spark can write: `s3://bucket/checkpoints`)."""
    base = location(os.environ["CDC_ENRICH_CHECKPOINTS"]) if os.environ.get("CDC_ENRICH_CHECKPOINTS") else lake / "checkpoints"
    return base / pipeline_name / stream


def local_broker_state(lake: Path) -> Path:
    """The local stack's broker record (port, cluster id) for this lake: written by the stack,
    read by the entry layer to find the broker when nothing else names one."""
    return Path(lake) / "stack" / "kafka" / "stack.json"
