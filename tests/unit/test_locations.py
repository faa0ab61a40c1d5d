"""Where checkpoints live: a local path, or a URI kept as text (pathlib would fold `s3://`)."""

from __future__ import annotations

from pathlib import Path

from lakehouse.checkpoints import silver_app_id, uncommitted_batch
from lakehouse.paths import Uri, checkpoint_dir, location


def test_a_uri_keeps_its_scheme_and_a_path_stays_a_path() -> None:
    assert location("s3://bucket/ckpt") / "shop" / "bronze" == Uri("s3://bucket/ckpt/shop/bronze")
    assert str(location("abfss://c@acct.dfs.core.windows.net/x/") / "y") == "abfss://c@acct.dfs.core.windows.net/x/y"
    assert (location("dbfs:/x") / "y").name == "y" and location("file:///tmp/a") / "" == Uri("file:///tmp/a")
    assert location("/Volumes/main/cdc/state") == Path("/Volumes/main/cdc/state")
    assert location("relative/dir") == Path("relative/dir")


def test_checkpoints_move_to_a_uri_with_the_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CDC_ENRICH_CHECKPOINTS", raising=False)
    assert checkpoint_dir(tmp_path, "shop", "bronze") == tmp_path / "checkpoints" / "shop" / "bronze"
    monkeypatch.setenv("CDC_ENRICH_CHECKPOINTS", "s3://bucket/ckpt")
    assert checkpoint_dir(tmp_path, "shop", "gold_v") == Uri("s3://bucket/ckpt/shop/gold_v")


def test_a_local_checkpoint_keeps_silver_s_app_id_across_starts(tmp_path: Path) -> None:
    first = silver_app_id(tmp_path / "c")
    assert first.startswith("silver-") and silver_app_id(tmp_path / "c") == first
    assert silver_app_id(tmp_path / "other") != first  # a new checkpoint, a new id
    assert uncommitted_batch(tmp_path / "c") is None


def test_a_local_driver_maps_the_class_archive_only_once_setup_has_built_it(monkeypatch, tmp_path: Path) -> None:
    from lakehouse.paths import jvm_class_archive
    from lakehouse.spark import class_archive_option

    monkeypatch.setenv("CDC_ENRICH_JARS", str(tmp_path / "jars"))
    assert jvm_class_archive() == tmp_path / "jvm" / "spark-classes.jsa"
    assert class_archive_option() == ""  # no archive yet: the JVM loads classes from the jars
    jvm_class_archive().parent.mkdir()
    jvm_class_archive().write_bytes(b"archive")
    assert class_archive_option() == f"-XX:SharedArchiveFile={tmp_path / 'jvm' / 'spark-classes.jsa'}"
