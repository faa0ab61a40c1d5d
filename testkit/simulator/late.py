"""One Debezium record written after the fact: a version of a row committed at an earlier time
and LSN than the records already delivered (a connector catching up, a replayed topic). The demo
uses it to show an as-of view correcting the events that version was valid for."""

from __future__ import annotations

from typing import Any, Mapping

from lakehouse.declaration import Pipeline, Source
from testkit.debezium_format import EnvelopeCodec, source_info
from testkit.simulator.emitter import schema_and_table
from testkit.simulator.records import KafkaRecord

LATE_TX_ID = 1  # the source block's txId of a late record (any; silver orders by LSN)


def late_update_record(pipeline: Pipeline, source: Source, row: Mapping[str, Any], lsn: int, commit_us: int) -> KafkaRecord:
    """An update (`op: u`) of `row` committed at `commit_us` (epoch microseconds) at WAL position
    `lsn`, encoded as the simulator encodes its own records (no schemas, partition 0)."""
    schema, table = schema_and_table(pipeline, source)
    codec = EnvelopeCodec(source, f"{pipeline.kafka.topic_prefix}.{schema}.{table}", schemas_enabled=False)
    info = source_info(server=pipeline.kafka.topic_prefix, db="demo", schema=schema, table=table, commit_us=commit_us,
                       snapshot="false", lsn=lsn, last_commit_lsn=lsn - 32, tx_id=LATE_TX_ID)
    value = codec.value("u", None, dict(row), info, commit_us, commit_us * 1000)
    return KafkaRecord(source.topic, codec.key(dict(row)), value)
