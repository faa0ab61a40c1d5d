"""The ordering registry (`lakehouse.ordering`): every rule complete, values ordered as documented."""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal

import pytest

from lakehouse import ordering
from lakehouse.declaration import SEQUENCE_RULES
from lakehouse.errors import CdcEnrichError
from tests.conftest import REPO

SOURCE_FIELDS = ("ts_ms", "lsn", "file", "pos", "row")  # value.source fields bronze decodes


def _pg(lsn: int, op: str = "c", partition: int = 0, offset: int = 0) -> Decimal:
    return ordering.rule("postgres").python({"lsn": lsn}, op, partition, offset)


def _mysql(file: str, pos: int, row: int) -> Decimal:
    return ordering.rule("mysql").python({"file": file, "pos": pos, "row": row}, "c", 0, 0)


def _ts(ts_ms: int, partition: int, offset: int) -> Decimal:
    return ordering.rule("ts_ms").python({"ts_ms": ts_ms}, "c", partition, offset)


def test_the_declaration_accepts_exactly_the_registered_rules() -> None:
    assert SEQUENCE_RULES == tuple(ordering.RULES) == ("postgres", "mysql", "ts_ms")


@pytest.mark.parametrize("name", list(ordering.RULES))
def test_every_rule_has_its_three_parts(name: str) -> None:
    rule = ordering.rule(name)
    assert rule.name == name
    assert rule.fields and set(rule.fields) <= set(SOURCE_FIELDS)
    assert callable(rule.python) and callable(rule.sql)
    assert rule.jvm.strip()


def test_an_undeclared_rule_is_a_project_error() -> None:
    with pytest.raises(CdcEnrichError, match="unknown ordering rule 'oracle'"):
        ordering.rule("oracle")


def test_postgres_delete_sorts_before_create_at_the_same_lsn() -> None:
    assert _pg(700, "d") < _pg(700, "c") == _pg(700, "u") == _pg(700, "r") < _pg(701, "d")
    assert _pg(700, "c") == Decimal(7001) and _pg(700, "d") == Decimal(7000)


def test_a_postgres_sequence_gives_back_its_lsn_whatever_the_op() -> None:
    for op in ("r", "c", "u", "d"):
        assert ordering.postgres_lsn(ordering.postgres_sequence(28_502_688, op)) == 28_502_688
    assert ordering.postgres_lsn(Decimal(7001)) == ordering.postgres_lsn(7000) == 700


def test_postgres_redelivery_is_the_same_change() -> None:
    assert _pg(700, "u", partition=0, offset=5) == _pg(700, "u", partition=1, offset=9)


def test_mysql_orders_by_file_then_position_then_row() -> None:
    assert _mysql("mysql-bin.000003", 154, 2) == Decimal(3 * 10**20 + 154 * 10**6 + 2)
    assert _mysql("mysql-bin.000002", 10**13, 999_999) < _mysql("mysql-bin.000003", 0, 0)
    assert _mysql("mysql-bin.000003", 154, 999_999) < _mysql("mysql-bin.000003", 155, 0)
    assert _mysql("mysql-bin.000003", 154, 1) < _mysql("mysql-bin.000003", 154, 2)


def test_ts_ms_orders_by_time_then_partition_then_offset() -> None:
    assert _ts(77, 3, 11) == Decimal(77 * 10**24 + 3 * 10**18 + 11)
    assert _ts(77, 999_999, 10**17) < _ts(78, 0, 0)
    assert _ts(77, 2, 10**17) < _ts(77, 3, 0) and _ts(77, 3, 10) < _ts(77, 3, 11)


@pytest.mark.parametrize(("name", "fields"), [
    ("postgres", {"lsn": -4}),
    ("mysql", {"file": "mysql-bin", "pos": 1, "row": 0}),
    ("ts_ms", {"ts_ms": 10**14}),
    ("ts_ms", {"ts_ms": -1}),
])
def test_no_valid_sequence_is_a_value_error(name: str, fields: dict) -> None:
    """debezium turns it into the quarantine reason `value.source: no valid <rule> sequence: ...`."""
    with pytest.raises(ValueError):
        ordering.rule(name).python(fields, "c", 0, 0)


def test_the_registry_and_the_declaration_import_without_spark() -> None:
    code = "import sys, lakehouse.ordering, lakehouse.declaration; assert 'pyspark' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
