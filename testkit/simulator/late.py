"""One Debezium record written after the fact: a version of a row committed at an earlier time
and LSN than the records already delivered (a connector catching up, a replayed topic). The demo
uses it to show an as-of view correcting the events that version was valid for, and a windowed
view recording an event that arrived after its window closed; each goes into the truth too (it
was committed then, only delivered late)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Mapping

from lakehouse.declaration import Pipeline, Source
from lakehouse.verify.truth import write_truth_files  # noqa: F401 (the format this file edits)
from testkit.debezium_format import EnvelopeCodec, source_info
from testkit.simulator.emitter import schema_and_table
from testkit.simulator.records import KafkaRecord

LATE_TX_ID = 1  # the source block's txId of a late record (any; silver orders by LSN)


def late_record(pipeline: Pipeline, source: Source, row: Mapping[str, Any], lsn: int, commit_us: int, op: str = "u") -> KafkaRecord:
    """An update (`op: u`; `op="c"`: an insert) of `row` committed at `commit_us` (epoch
    microseconds) at WAL position `lsn`, encoded as the simulator encodes its own records (no
    schemas, partition 0)."""
    schema, table = schema_and_table(pipeline, source)
    codec = EnvelopeCodec(source, f"{pipeline.kafka.topic_prefix}.{schema}.{table}", schemas_enabled=False)
    info = source_info(server=pipeline.kafka.topic_prefix, db="demo", schema=schema, table=table, commit_us=commit_us,
                       snapshot="false", lsn=lsn, last_commit_lsn=lsn - 32, tx_id=LATE_TX_ID)
    value = codec.value(op, None, dict(row), info, commit_us, commit_us * 1000)
    return KafkaRecord(source.topic, codec.key(dict(row)), value)


def add_row_to_truth(directory: Path, source: Source, row: Mapping[str, Any], commit_us: int) -> None:
    """A row inserted at `commit_us` and never changed since (a late event): into the final rows
    (`<source>.jsonl`, kept sorted by key) and the version log."""
    path = Path(directory) / f"{source.name}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    rows.append({c: _as_truth(row[c]) for c in source.column_names})
    rows.sort(key=lambda r: [r[k] for k in source.primary_key])
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    add_version_to_truth(directory, source, row, commit_us)


def add_version_to_truth(directory: Path, source: Source, row: Mapping[str, Any], commit_us: int) -> None:
    """Put `row`, committed at `commit_us`, into `<source>.history.jsonl` between its key's
    neighbours (the one before now ends there; it ends where the next one starts)."""
    path = Path(directory) / f"{source.name}.history.jsonl"
    versions = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    at = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=commit_us // 1000)
    key = [row[k] for k in source.primary_key]
    mine = sorted((v for v in versions if [v[k] for k in source.primary_key] == key), key=lambda v: v["_valid_from"])
    before = [v for v in mine if datetime.fromisoformat(v["_valid_from"]) <= at]
    after = [v for v in mine if datetime.fromisoformat(v["_valid_from"]) > at]
    new = {c: _as_truth(v) for c, v in row.items()} | {
        "_valid_from": at.isoformat(timespec="microseconds"), "_valid_to": after[0]["_valid_from"] if after else None, "_deleted": False}
    if before:
        before[-1]["_valid_to"] = new["_valid_from"]
    versions.append(new)
    path.write_text("".join(json.dumps(v, ensure_ascii=False) + "\n" for v in versions), encoding="utf-8")


def _as_truth(value: Any) -> Any:
    from lakehouse.verify.truth import _truth_json

    return _truth_json(value)
