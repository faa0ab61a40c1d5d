"""The command line as a user meets it, without Spark: `validate`, `--version`, `-q`, and clear
errors for names that do not exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_enrich.cli import main
from tests.unit.test_config import GOOD


def test_validate_checks_a_file_without_spark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "pipeline.yml"
    good.write_text(GOOD)
    assert main(["validate", "--pipeline", str(good)]) == 0
    assert "valid pipeline 'shop'" in capsys.readouterr().out


def test_validate_names_file_line_and_field_of_a_bad_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "pipeline.yml"
    bad.write_text(GOOD.replace("type: left", "type: sideways"))
    assert main(["validate", "--pipeline", str(bad)]) == 2
    assert f"{bad}:22: views.orders_enriched.joins[0].type" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("cdc-enrich ")


def test_quiet_and_verbose_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["-q", "-v", "validate"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_an_unknown_source_is_a_clear_error_that_lists_the_declared_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "pipeline.yml"
    good.write_text(GOOD)
    assert main(["history", "clients", "--pipeline", str(good), "--lake", str(tmp_path / "lake")]) == 2
    err = capsys.readouterr().err
    assert "has no source 'clients'; declared: customers, orders" in err
    assert "Traceback" not in err


def test_a_bench_repeat_count_below_one_is_refused_before_spark_starts(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("0", "-2", "three"):
        with pytest.raises(SystemExit) as done:
            main(["bench", "gold", "--repeats", bad])
        assert done.value.code == 2
        assert f"--repeats: {bad!r} is not a whole number of at least 1" in capsys.readouterr().err
