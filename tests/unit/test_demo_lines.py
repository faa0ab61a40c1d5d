"""What `cdc-enrich demo` says (`cdc_enrich.demo_lines`): each step in a line or two of plain words
and counts, never a raw dict; every fact the simulator records said in words behind -v; one
verdict. Pure: no Spark, no stack."""

from __future__ import annotations

from datetime import datetime

import pytest

from cdc_enrich import demo_lines as say
from lakehouse.declaration import Pipeline
from lakehouse.quality.runner import ERROR, WARNING, ExpectationOutcome, QualityReport, TableOutcome
from lakehouse.verify.postgres import CatchUp, PostgresVerifyReport, TableDiff
from lakehouse.verify.views import FrameDiff, VerifyReport, ViewCheck
from testkit.simulator import simulate


@pytest.fixture(scope="module")
def stats(shop_pipeline: Pipeline) -> dict:
    return simulate(shop_pipeline, seed=7, events=200, chaos="some").stats


# --------------------------------------------------------------------------- words and numbers


def test_a_count_says_its_word_in_the_singular_or_plural_with_thousands_separated():
    assert say.count(1, "row") == "1 row"
    assert say.count(0, "row") == "0 rows"
    assert say.count(4215, "Kafka record") == "4,215 Kafka records"
    assert say.count(2, "key", "keys held") == "2 keys held"


def test_a_duration_reads_in_tenths_under_a_minute_then_in_minutes_and_seconds():
    assert say.took(0.04) == "0.0 s"
    assert say.took(12.34) == "12.3 s"
    assert say.took(125.4) == "2 min 05 s"


def test_a_series_joins_its_last_item_with_and():
    assert say.series([]) == ""
    assert say.series(["a"]) == "a"
    assert say.series(["a", "", "b", "c"]) == "a, b and c"


# --------------------------------------------------------------------------- 2. the changes


def test_the_simulated_changes_are_two_lines_of_words_and_counts_never_a_dict(stats: dict):
    counts, chaos = say.simulation_lines(stats, produced=740)
    snapshot = sum(stats["snapshot"]["rows"].values())
    assert counts == (f"a simulated Debezium capture of 7 tables: a snapshot of {snapshot} rows, then 200 changes in "
                      f"{stats['transactions']} transactions; 740 Kafka records on 7 topics")
    assert chaos.startswith("chaos 'some': in the delivery, ") and "; in the rows, " in chaos
    assert "shop.public.payments 30 s late" in chaos
    assert not any(mark in line for line in (counts, chaos) for mark in "{}[]")


def test_chaos_says_each_counter_that_moved_delivery_first_and_only_the_moved_ones_unless_asked():
    applied = {"fk_moves": 3, "null_fks": 0, "redelivered": [{"from_ts_ms": 0, "to_ts_ms": 1, "records": 2}],
               "redelivered_records": 2, "snapshot_replays": {"t.a": 4, "t.b": 1}, "lagging_topics": {"t.c": 30.0}, "new_trick": 1}
    delivery, rows = say.chaos_words(applied)
    assert delivery == ["2 records delivered again", "5 snapshot records replayed mid-stream", "t.c 30 s late"]
    assert rows == ["3 foreign keys moved", "new trick 1"]  # a counter nobody worded yet is still said
    assert "0 foreign keys set to null" in say.chaos_words(applied, zeros=True)[1]
    assert say.chaos_line("none", {}) == "chaos 'none': none applied"


def test_behind_v_every_fact_the_simulator_records_is_said_in_words_or_one_table(stats: dict):
    text = "\n".join(say.simulation_details(stats))
    assert "seed 7, scale 1, 200 changes, 1 partition per topic, schemas in the records: no; pipeline shop, truth format 1" in text
    assert f"snapshot at LSN 0/{stats['snapshot']['lsn']:X} (transaction {stats['snapshot']['tx_id']})" in text
    assert f"its commit ending at 0/{stats['final_commit_end_lsn']:X} (transaction {stats['final_tx_id']})" in text
    ops, rows = stats["ops"]["order_items"], stats["rows"]["order_items"]
    row = next(line for line in text.splitlines() if line.startswith("order_items "))
    assert [cell.strip() for cell in row.split("|")] == [
        "order_items", "table", "order_id, line_no", "shop.public.order_items", str(ops["r"]), str(ops["c"]), str(ops["u"]),
        str(ops["d"]), str(ops["tombstone"]), str(rows)]
    assert "refunds columns: id bigint, payment_id bigint, amount decimal(12,2), reason string" in text
    assert "0 connector outages ended by a new snapshot" in text  # every counter, the zeros too
    assert "re-delivered: " in text and "snapshot replayed: 5 records of shop.public.payment_methods" in text
    assert "{" not in text


def test_postgres_and_debezium_say_the_seeded_rows_the_transactions_and_the_kill():
    seeded, kill = say.postgres_workload_lines(486, 1500, 1500, 12)
    assert seeded == "486 rows seeded and snapshotted by the connector, then 3,000 transactions committed from two connections (12 more aborted)"
    assert kill.startswith("the connector killed (SIGKILL) after 1,500 of them and restarted from its offsets")


# --------------------------------------------------------------------------- 3-5. the stages


def test_bronze_silver_and_gold_each_say_their_tables_rows_and_time():
    assert say.bronze_line({"a": 4000, "b": 215}, 0, 12.34) == "4,215 rows in 2 append-only tables, 0 records quarantined (12.3 s)"
    tables = [("a", 10, 2, 30), ("b", 5, 0, 5)]
    assert say.silver_line(tables, {"duplicates": 0}, 8.0) == "15 live rows and 2 deleted keys in 2 tables, 35 versions in their history (8.0 s)"
    assert say.silver_line(tables, {"duplicates": 145, "out_of_order": 1, "batches": 3}, 8.0).endswith(
        "35 versions in their history; 145 duplicates dropped and 1 out-of-order change put in its place (8.0 s)")
    assert say.gold_line({"v": 1211, "w": 3}, 20.06) == "2 views, 1,214 rows: v 1,211, w 3 (20.1 s)"
    assert say.history_line("customers", "id=12", 9) == "one key's life: customers id=12 has 9 versions in history"


def test_an_as_of_and_a_windowed_view_say_what_their_joins_did_in_counts():
    assert say.as_of_line("payments_enriched", "payments", 37, 367) == (
        "payments_enriched: each payments row joined as of its own time; 37 of 367 differ from the same join as of now")
    line = say.window_line("pr", ("payments", "refunds"), 120, (20, None), 5, (1, 0))
    assert line == ("pr: 120 pairs of payments and refunds; 20 payments alone when their window closed; 5 payments still inside "
                    "their window; late (recorded, joined to nothing): 1 payments, 0 refunds")
    assert "3 refunds" in say.window_line("pr", ("payments", "refunds"), 1, (0, 3), None, (0, 0))


def test_late_data_says_what_became_of_each_record():
    assert say.late_correction_line("pe", "products id=5", "title", "x (late)", "x (late)") == (
        "a correction of products id=5 (title = 'x (late)'), delivered late: pe re-enriched the event it was valid for")
    assert "pe's event still reads 'x' (verify checks it)" in say.late_correction_line("pe", "products id=5", "title", "x (late)", "x")
    assert say.late_event_line("pr", "refunds id=151", "payments id=42", 1, 0) == (
        "a refunds id=151 event for payments id=42, delivered after its window closed: 1 row in _late_changes, 0 gold rows pairing it")


# --------------------------------------------------------------------------- 6-7. the checks


def test_verify_is_one_line_ok_with_the_rows_or_which_views_differ_and_how():
    good = VerifyReport("source truth in x", [ViewCheck("a", FrameDiff(actual_rows=200, expected_rows=200)),
                                               ViewCheck("b", FrameDiff(actual_rows=11, expected_rows=11))])
    assert say.verify_line(good, "the source truth") == "OK: each of the 2 views equals its SQL join over the source truth (211 rows)"
    bad = VerifyReport("x", [ViewCheck("a", FrameDiff(missing=3, different=1)), ViewCheck("b", error="table(s) not found: g.b"),
                             ViewCheck("c")])
    assert say.verify_line(bad, "the source truth") == "DIFFERENCES FOUND: a: 3 missing, 1 different; b: table(s) not found: g.b"


def test_verify_against_postgres_counts_what_equals_the_database_and_names_what_differs():
    caught = CatchUp(target_lsn="0/1B2C3D8")
    good = PostgresVerifyReport(caught, silver=[TableDiff("s.a", ("id",))], gold=[TableDiff("g.v", ("id",))],
                                not_compared=["gold w: not compared (...)"])
    assert say.postgres_verify_line(good) == (
        "OK: 1 gold view and 1 silver table equal the same joins and tables inside PostgreSQL, caught up to LSN 0/1B2C3D8; "
        "1 view not comparable there (-v says why)")
    bad = PostgresVerifyReport(caught, gold=[TableDiff("g.v", ("id",), missing=[(1,), (2,)]), TableDiff("g.w", ("id",), pg_checksum="x")])
    assert say.postgres_verify_line(bad) == "DIFFERENCES FOUND: g.v: 2 missing; g.w: checksums differ"


def _quality(*outcomes: tuple[bool, str], skipped: bool = False) -> QualityReport:
    found = tuple(ExpectationOutcome("silver", "t", "s", "expect_x", f"e{i}", f"expect_x e{i}", ok, severity, None, None, None)
                  for i, (ok, severity) in enumerate(outcomes))
    tables = (TableOutcome("silver", "t", "s", outcomes=found),) + ((TableOutcome("gold", "g", "s", skipped="no table"),) if skipped else ())
    return QualityReport("r", datetime(2026, 1, 1), "q.results", tables)


def test_quality_is_one_line_of_expectations_tables_failures_and_warnings():
    assert say.quality_line(_quality((True, ERROR), (False, WARNING)), 5.0) == "OK: 2 expectations on 1 table, 0 failed, 1 warning (5.0 s)"
    assert say.quality_line(_quality((False, ERROR), skipped=True), 5.0) == (
        "FAILED: 1 expectation on 1 table, 1 failed, 0 warnings, 1 table skipped (5.0 s)")


# --------------------------------------------------------------------------- the end


def test_the_tables_made_are_grouped_by_schema_in_order():
    assert say.grouped(["s_bronze.a", "s_bronze.b", "s_silver._late", "s_bronze.c"]) == "s_bronze: a, b, c; s_silver: _late"
    assert say.grouped(["plain"]) == "plain"


def test_labels_and_texts_line_up_in_two_columns():
    assert say.aligned([("dashboard", "x.html"), ("data dictionary", "y.md")]) == [
        "  dashboard        x.html", "  data dictionary  y.md"]


def test_one_verdict_ok_with_what_was_shown_or_the_differences_and_quality_beside_it():
    passed, failed = _quality((True, ERROR)), _quality((False, ERROR))
    assert say.verdict(True, "gold equals the SQL join", passed, 133) == "Verdict: OK, gold equals the SQL join (2 min 13 s in all)"
    assert say.verdict(True, "gold equals the SQL join", failed, 1).endswith("; quality: 1 expectation failed (1.0 s in all)")
    assert say.verdict(False, "gold equals the SQL join", None, 1).startswith("Verdict: DIFFERENCES FOUND (the Verify step says where")

