"""Delta statements as text (`lakehouse.deltasql`): what silver and gold send to Spark, on a
classic session and under Spark Connect alike."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType

from lakehouse.deltasql import (
    DELETION_VECTORS_WHEN_LARGE,
    REWRITE_BELOW_BYTES,
    TableFacts,
    add_columns_sql,
    column_ddl,
    create_table_sql,
    enables_deletion_vectors,
    matched_delete,
    matched_update,
    merge_sql,
    not_matched_insert,
    rewrites_touched_files,
    source_values,
    sql_literal,
    type_ddl,
)
from lakehouse.gold.layout import range_predicate_sql
from lakehouse.silver.plan import key_bounds_sql, replaces_current


def test_a_merge_names_target_t_and_source_s_and_keeps_clause_order() -> None:
    values = source_values(["id", "odd name"])
    text = merge_sql(
        "main.gold.v", "t.`id` = s.`id`",
        [matched_delete("NOT s._present"), matched_update(values, "s._seq > t._seq"), not_matched_insert(values)],
        source="{frame_0}",
    )
    assert text == (
        "MERGE INTO main.gold.v AS t\nUSING {frame_0} AS s\nON t.`id` = s.`id`\n"
        "WHEN MATCHED AND (NOT s._present) THEN DELETE\n"
        "WHEN MATCHED AND (s._seq > t._seq) THEN UPDATE SET t.`id` = s.`id`, t.`odd name` = s.`odd name`\n"
        "WHEN NOT MATCHED THEN INSERT (`id`, `odd name`) VALUES (s.`id`, s.`odd name`)"
    )


def test_a_merge_needs_a_clause() -> None:
    with pytest.raises(ValueError, match="WHEN clause"):
        merge_sql("t", "TRUE", [])


def test_a_table_keeps_not_null_comments_clustering_and_properties() -> None:
    schema = StructType([
        StructField("id", LongType(), False, {"comment": "the key's 'id'"}),
        StructField("tags", ArrayType(StringType()), True),
        StructField("image", StructType([StructField("a b", LongType(), False)]), True),
        StructField("attrs", MapType(StringType(), LongType()), True),
    ])
    text = create_table_sql("s.t", schema, properties={"delta.enableChangeDataFeed": "true"}, cluster_by=["id"], comment="rows")
    assert text == (
        "CREATE TABLE IF NOT EXISTS s.t (\n"
        "  `id` bigint NOT NULL COMMENT 'the key\\'s \\'id\\'',\n"
        "  `tags` ARRAY<string>,\n"
        "  `image` STRUCT<`a b`: bigint NOT NULL>,\n"
        "  `attrs` MAP<string, bigint>\n"
        ") USING DELTA\nCLUSTER BY (`id`)\nCOMMENT 'rows'\nTBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    assert column_ddl(StructField("x", StringType())) == "`x` string"
    assert type_ddl(StructType([])) == "STRUCT<>"


def test_columns_added_to_an_older_table_are_quoted_nullable_and_keep_their_comments() -> None:
    fields = [StructField("odd `name`", LongType(), False), StructField("note", StringType(), True, {"comment": "why"})]
    assert add_columns_sql("s.t", fields) == "ALTER TABLE s.t ADD COLUMNS (`odd ``name``` bigint, `note` string COMMENT 'why')"


@pytest.mark.parametrize(
    "value, literal",
    [
        (None, "NULL"), (True, "TRUE"), (7, "7"), (2**40, "1099511627776L"), (-(2**31), "-2147483648"),
        (1.5, "1.5D"), (Decimal("1E+3"), "1000BD"), (Decimal("-0.25"), "-0.25BD"), ("it's", "'it\\'s'"),
        (dt.date(2026, 1, 2), "DATE '2026-01-02'"),
        (dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), "TIMESTAMP '2026-01-02 03:04:05.000000Z'"),
    ],
)
def test_literals_keep_their_type(value: object, literal: str) -> None:
    assert sql_literal(value) == literal


def test_a_literal_of_an_unknown_type_is_refused() -> None:
    with pytest.raises(TypeError, match="no SQL literal"):
        sql_literal(object())


def test_key_ranges_and_bounds_are_literal_predicates_delta_can_skip_files_with() -> None:
    assert range_predicate_sql("t.`id`", [(1, 1), (5, 9), ("a", "a")]) == "t.`id` IN (1, 'a') OR (t.`id` >= 5 AND t.`id` <= 9)"
    assert range_predicate_sql("x", []) == "FALSE"
    assert key_bounds_sql("t", {"id": (3, 8), "code": ("a", "z")}) == "t.`id` BETWEEN 3 AND 8 AND t.`code` BETWEEN 'a' AND 'z'"
    assert key_bounds_sql(None, {}) == "TRUE"


def test_the_replacement_rule_is_one_text_for_the_merge_and_the_plan() -> None:
    text = replaces_current("s.q", "s.h", "s.d", "t.q", "t.h", "t.d")
    assert text == "((s.q > t.q OR (s.q = t.q AND NOT (s.h <=> t.h))) AND NOT (s.d AND t.d))"


def test_a_small_table_is_rewritten_by_a_merge_and_a_large_one_gets_deletion_vectors() -> None:
    assert rewrites_touched_files(0)
    assert rewrites_touched_files(REWRITE_BELOW_BYTES)
    assert not rewrites_touched_files(REWRITE_BELOW_BYTES + 1)
    assert not rewrites_touched_files(None)  # size unknown: Delta's default for the table


def test_a_table_made_to_get_deletion_vectors_once_large_gets_them_past_the_rewrite_threshold_only() -> None:
    large, small = REWRITE_BELOW_BYTES + 1, REWRITE_BELOW_BYTES
    asks = TableFacts.of(large, DELETION_VECTORS_WHEN_LARGE)
    assert asks == TableFacts(large, deletion_vectors=False, vectors_when_large=True)
    assert enables_deletion_vectors(asks)
    assert not enables_deletion_vectors(TableFacts.of(small, DELETION_VECTORS_WHEN_LARGE))  # rewritten anyway
    assert not enables_deletion_vectors(TableFacts.of(None, DELETION_VECTORS_WHEN_LARGE))  # size unknown
    assert not enables_deletion_vectors(TableFacts.of(large, {"delta.enableDeletionVectors": "false"}))  # never asked
    on = TableFacts.of(large, {**DELETION_VECTORS_WHEN_LARGE, "delta.enableDeletionVectors": "true"})
    assert on.deletion_vectors and not enables_deletion_vectors(on)  # on already
    assert TableFacts.of(1, {"DELTA.enableDeletionVectors": "TRUE"}).deletion_vectors  # keys and values in any case
