"""verify --against postgres, its pure pieces: a view rendered for PostgreSQL, and the row comparison with checksums."""

from __future__ import annotations

import pytest

from lakehouse.declaration import Pipeline

pytestmark = pytest.mark.kafka


# --------------------------------------------------------------------------- preconditions and fixtures


# --------------------------------------------------------------------------- pure pieces (no database)


def test_view_sql_for_postgres_follows_the_declared_joins(shop_pipeline: Pipeline) -> None:
    """The view's join as PostgreSQL runs it: left-deep, ON referenced pk = parent fk column."""
    from lakehouse.verify.postgres import postgres_view_sql, view_key_columns

    sql = postgres_view_sql(shop_pipeline, "order_items_enriched")
    assert 'FROM "public"."order_items" AS "order_items"' in sql
    assert 'JOIN "public"."orders" AS "ord" ON "ord"."id" = "order_items"."order_id"' in sql
    assert 'LEFT JOIN "public"."customers" AS "customer" ON "customer"."id" = "ord"."customer_id"' in sql
    assert 'LEFT JOIN "public"."products" AS "product" ON "product"."id" = "order_items"."product_id"' in sql
    assert sql.index('"ord"') < sql.index('"customer"')  # a chain joins after its parent alias
    assert not sql.split("FROM")[1].lstrip().startswith("LEFT")
    assert view_key_columns(shop_pipeline, shop_pipeline.views["order_items_enriched"]) == ("order_id", "line_no")


def test_compare_rows_reports_both_directions_values_and_checksums() -> None:
    """Missing, extra and different rows are all reported; equal data gives equal checksums
    whatever the row order and the value representation (Decimal scale, datetime vs micros)."""
    from datetime import datetime
    from decimal import Decimal

    from lakehouse.declaration import Column
    from lakehouse.verify.postgres import compare_rows

    cols = [Column("id", "bigint"), Column("price", "decimal(10,2)"), Column("at", "timestamp")]
    pg = [(1, Decimal("1.5"), datetime(2026, 1, 1, 0, 0, 0, 1)), (2, Decimal("2.00"), None)]
    same = compare_rows("t", cols, ("id",), pg, [(2, Decimal("2"), None), (1, Decimal("1.50"), 1767225600000001)])
    assert same.ok and same.pg_checksum == same.lake_checksum, same.render()
    diff = compare_rows("t", cols, ("id",), pg + [(3, None, None)], [(1, Decimal("1.49"), 1767225600000001), (2, Decimal("2"), None), (4, None, None)])
    assert not diff.ok
    assert diff.missing == [(3,)] and diff.extra == [(4,)]
    assert diff.different == [((1,), {"price": (Decimal("1.50"), Decimal("1.49"))})]
    assert "1 missing from the lake" in diff.render() and "1 rows differ" in diff.render()


# --------------------------------------------------------------------------- lifecycle


# --------------------------------------------------------------------------- real records vs the simulator


# --------------------------------------------------------------------------- the end-to-end run




def test_an_as_of_view_is_joined_in_the_database_over_trigger_kept_histories(shop_pipeline: Pipeline) -> None:
    """`history_statements` keeps, per table an as-of view reads, every version with its
    transaction id; the as-of statement times each version by its commit (ms, never before the
    capture began) and joins each payment's live version as of its own commit time."""
    from datetime import datetime, timezone

    from lakehouse.verify.postgres import as_of_sources, history_statements, postgres_as_of_sql

    assert [s.name for s in as_of_sources(shop_pipeline)] == ["customers", "orders", "payments", "payment_methods"]
    ddl = "\n".join(history_statements(shop_pipeline))
    assert 'CREATE TABLE IF NOT EXISTS "public"."orders__history" AS SELECT "id", "customer_id"' in ddl
    assert "INSERT INTO \"public\".\"orders__history\" (\"id\", _xid, _deleted) VALUES (OLD.\"id\", txid_current(), true)" in ddl
    assert 'OLD."id" IS DISTINCT FROM NEW."id"' in ddl  # a key change: the old key's deletion, then the new key
    assert 'CREATE TRIGGER cdc_enrich_history AFTER INSERT OR UPDATE OR DELETE ON "public"."payments"' in ddl
    sql = postgres_as_of_sql(shop_pipeline, "payments_enriched", datetime(2026, 1, 5, 9, tzinfo=timezone.utc))
    assert "GREATEST(date_trunc('milliseconds', pg_xact_commit_timestamp((_xid % 4294967296)::text::xid)), '2026-01-05T09:00:00+00:00'::timestamptz)" in sql
    assert 'LEAD(_valid_from) OVER (PARTITION BY "id" ORDER BY _ord) AS _valid_to' in sql
    assert 'WHERE _valid_to IS NULL AND NOT _deleted) AS "payments"' in sql  # the payments' live versions
    assert 'AND NOT "customer"."_deleted" AND "customer"."_valid_from" <= "payments"."_source_ts"' in sql
    assert "'-infinity'::timestamptz" in postgres_as_of_sql(shop_pipeline, "payments_enriched", None)
    # the global table too, on its key expression, as of the payment's time
    assert ('AS "method" ON "method"."code" = (upper("payments"."method")) AND NOT "method"."_deleted" '
            'AND "method"."_valid_from" <= "payments"."_source_ts"') in sql
