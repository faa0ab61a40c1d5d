"""Quality suites are derived from the declaration (pure: GX objects, no Spark): the shop's and another pipeline's."""

from __future__ import annotations

from lakehouse.declaration import parse_pipeline
from lakehouse.quality.suites import build_suites, gold_suite, silver_current_suite

# --------------------------------------------------------------------------- helpers


# --------------------------------------------------------------------------- fixtures


# --------------------------------------------------------------------------- suites (no Spark)


def checks(suite) -> list[tuple[str, str]]:
    return [(e.expectation_type, e.meta["check"]) for e in suite.suite.expectations]


def test_suites_follow_the_declaration(shop_pipeline):
    suites = {s.name: s for s in build_suites(shop_pipeline)}
    assert list(suites) == [
        "bronze.customers", "bronze.products", "bronze.orders", "bronze.order_items", "bronze.payments",
        "bronze.refunds", "bronze.payment_methods", "bronze._quarantine",
        "silver.customers", "silver.products", "silver.orders", "silver.order_items", "silver.payments",
        "silver.refunds", "silver.payment_methods", "silver._late_changes",
        "gold.orders_enriched", "gold.order_items_enriched", "gold.payments_enriched", "gold.payments_refunded",
    ]  # fmt: skip
    assert checks(suites["bronze.orders"]) == [
        ("expect_column_values_to_be_in_set", "op_known"),
        ("expect_column_values_to_not_be_null", "sequence_not_null"),
        ("expect_compound_columns_to_be_unique", "kafka_record_once"),
    ]
    assert checks(suites["silver.order_items"]) == [
        ("expect_column_values_to_not_be_null", "pk_not_null:order_id"),
        ("expect_column_values_to_not_be_null", "pk_not_null:line_no"),
        ("expect_compound_columns_to_be_unique", "pk_unique"),
        ("expect_column_values_to_not_be_null", "sequence_not_null"),
        ("expect_column_values_to_not_be_null", "live_row_hash_not_null"),
    ]
    assert ("expect_column_values_to_be_unique", "pk_unique") in checks(suites["silver.customers"])
    gold = suites["gold.order_items_enriched"]
    assert checks(gold) == [
        ("expect_column_values_to_not_be_null", "key_not_null:order_id"),
        ("expect_column_values_to_not_be_null", "key_not_null:line_no"),
        ("expect_compound_columns_to_be_unique", "key_unique"),
        ("expect_column_values_to_not_be_null", "inner_hash_not_null:order_items"),
        ("expect_column_values_to_not_be_null", "inner_hash_not_null:ord"),  # customer, product: left
        ("unexpected_rows_expectation", "base_key_live"),
        ("unexpected_rows_expectation", "base_not_stale"),
    ]
    live = gold.suite.expectations[-2].unexpected_rows_query
    assert "{batch}" in live and "LEFT ANTI JOIN `shop_silver`.`order_items`" in live and "NOT s.`_deleted`" in live
    quarantine = suites["bronze._quarantine"].suite.expectations[0]
    assert quarantine.meta["severity"] == "warning"


def test_suites_are_generic_for_another_declaration():
    """A different pipeline (composite keys, an outer primary-key join) gets its own checks."""
    p = parse_pipeline(
        """
name: crm
sources:
  accounts:
    primary_key: [tenant, acct]
    columns: {tenant: int, acct: bigint, owner: string}
  scores:
    primary_key: [tenant, acct]
    columns: {tenant: int, acct: bigint, score: double}
views:
  account_scores:
    base: accounts
    joins:
      - {alias: sc, table: scores, "on": primary_key, type: outer}  # "on" quoted: YAML 1.1 reads a bare on as true
    columns: {tenant: accounts.tenant, account: accounts.acct, score: sc.score}
"""
    )
    silver = silver_current_suite(p, p.source("accounts"))
    assert ("expect_compound_columns_to_be_unique", "pk_unique") in checks(silver)
    gold = gold_suite(p, p.views["account_scores"])
    assert [c for _, c in checks(gold)] == [
        "key_not_null:tenant", "key_not_null:account", "key_unique", "base_key_live", "base_not_stale",
    ]  # fmt: skip  (outer: no row needs a base side, so no hash is required)
    live = gold.suite.expectations[-2].unexpected_rows_query
    assert "g.`account` = s.`acct`" in live and "`_accounts_seq` IS NOT NULL" in live


# --------------------------------------------------------------------------- runs


