"""The metrics table's pure parts: which stage a query is, Kafka lag from a batch's offsets,
one row from a progress event (with the batch function's own counts)."""

from __future__ import annotations

from types import SimpleNamespace

from lakehouse.metrics import METRICS_SCHEMA, kafka_lag, note_batch, progress_row, stage_of


def test_stage_comes_from_the_query_name() -> None:
    assert [stage_of(n) for n in ("bronze_shop_orders", "silver_shop_silver_orders", "gold_shop_v", "other", None)] == [
        "bronze", "silver", "gold", "other", "other",
    ]


def test_kafka_lag_is_latest_minus_end_per_topic_and_none_for_delta_sources() -> None:
    latest = '{"shop.public.orders": {"0": 120, "1": 50}, "shop.public.items": {"0": 7}}'
    end = '{"shop.public.orders": {"0": 100, "1": 50}}'
    assert kafka_lag(latest, end) == {"shop.public.orders": 20, "shop.public.items": 7}
    assert kafka_lag(latest, latest) == {"shop.public.orders": 0, "shop.public.items": 0}
    delta = '{"sourceVersion": 1, "reservoirId": "x", "reservoirVersion": 5, "index": -1, "isStartingVersion": false}'
    assert kafka_lag(delta, delta) is None
    assert kafka_lag(None, None) is None and kafka_lag("not json", "{}") is None
    # PySpark's recentProgress hands offsets as str() of the parsed JSON
    assert kafka_lag(str({"t": {"0": 5}}), str({"t": {"0": 2}})) == {"t": 3}


def _progress(name: str, batch: int, rows: int) -> SimpleNamespace:
    source = SimpleNamespace(description="KafkaV2[Subscribe[t]]", latestOffset='{"t": {"0": 9}}', endOffset='{"t": {"0": 9}}')
    return SimpleNamespace(
        id="q-1", runId="r-1", name=name, batchId=batch, timestamp="2026-11-26T01:02:03.456Z", numInputRows=rows,
        inputRowsPerSecond=float("nan"), processedRowsPerSecond=12.5,
        durationMs={"triggerExecution": 900, "addBatch": 700}, sources=[source],
    )


def test_a_progress_event_becomes_one_row_with_the_batch_functions_counts() -> None:
    note_batch("bronze_p_orders", 3, rows_in=10, rows_out=8, quarantined=2)
    row = dict(zip(METRICS_SCHEMA.fieldNames(), progress_row("p", _progress("bronze_p_orders", 3, rows=20))))
    assert (row["stage"], row["stream"], row["batch_id"], row["input_rows"], row["rows_out"], row["quarantined"]) == (
        "bronze", "bronze_p_orders", 3, 10, 8, 2,
    )  # Spark's 20 counted the batch twice; the batch function's 10 wins
    assert row["input_rows_per_s"] is None and row["processed_rows_per_s"] == 12.5  # NaN is no rate
    assert row["batch_ms"] == 900 and row["durations_ms"]["addBatch"] == 700 and row["kafka_lag"] == {"t": 0}
    assert row["at"].isoformat() == "2026-11-26T01:02:03.456000"
    again = dict(zip(METRICS_SCHEMA.fieldNames(), progress_row("p", _progress("bronze_p_orders", 4, rows=5))))
    assert (again["input_rows"], again["rows_out"], again["quarantined"]) == (5, None, None)  # nothing noted: Spark's count
