"""Bronze: Debezium topics -> one append-only Delta table per source, plus the quarantine.

Pure planning (`debezium`, `fast_sql`, `fast_jvm`, `parse`) apart from Delta (`tables`) and the streams (`runner`).

Bronze: Debezium topics -> one append-only Delta table per source, plus one quarantine table.

Parsing is two-tier, and `lakehouse.bronze.debezium.decode_record` is the single source of truth:

1. a fast pass decodes every record whose shape is common and unambiguous (what Debezium
   sends) and flags it `_fast`. It is deliberately conservative: anything unusual (a TOAST
   placeholder in a numeric column, a truncate, a wrapped tombstone, any malformed
   record...) is left unflagged. Two implementations, held to `decode_record` by the same
   differential test:
   - the JVM pass (`JvmPass`): `lakehouse/jvm/cdcenrich/DebeziumDecoder.java`, a Java UDF
     compiled by `make setup` against pyspark's own jars (Jackson, one compiled class for
     every source). Used whenever its jar is on the session's classpath;
   - the SQL pass (`SqlPass`): one strict `from_json` of the value with a typed schema
     (integers, booleans and doubles typed by Jackson, where a mismatch marks the record
     corrupt; strings, decimals, timestamps and dates as VARIANT so their JSON type is
     known), the small key as VARIANT. Pure Spark SQL: it needs no jar, so it serves where
     the decoder jar is not installed (`parser="sql"` forces it);
2. every unflagged record goes through `decode_record` in a Python UDF, which either decodes
   it exactly or names the specific reason for quarantine.

So malformed records get precise reasons, and clean traffic never pays for Python.
`parser="python"` sends every record through Python (kept for the benchmark's comparison).

Streams: one streaming query per source (plus one for undeclared topics), each with its own
checkpoint, started together, so concurrent queries keep both cores busy (one query would
decode one topic-partition at a time). Each source's fast pass is built once per run and
applied to the stream (analysed when the query starts, not per micro-batch). A batch is
decoded and written in one pass, never cached: counts taken during that write (an
`Observation`) say whether the Python pass has anything to do.

Exactly-once: each table write of a micro-batch is tagged (Delta's commit `userMetadata`)
with the query id (stable across restarts from the same checkpoint, new for a new checkpoint;
with `-python` for the Python pass's bronze rows, a second write to the same table) and the
batch id. Only the batch a crashed run planned but did not commit can be replayed
(`uncommitted_batch`); for that one batch a restart looks for its tags in the tables' history
and skips the writes that are there, so nothing is written twice. Every other batch writes
without a look-up: Delta's idempotent-writer options (txnAppId/txnVersion) would have each
append reconstruct the table's state (three Spark jobs per append, measured), the largest
fixed cost of a small drain.
"""

from __future__ import annotations

from lakehouse.bronze.fast_sql import (  # noqa: F401
    PARSERS,
    KAFKA_COLUMNS,
    HEADERS,
    STREAM,
    SqlPass,
    sql_pass,
)
from lakehouse.bronze.fast_jvm import (  # noqa: F401
    DECODER_CLASS,
    decoder_available,
    JvmPass,
    jvm_pass,
    fast_pass,
)
from lakehouse.bronze.parse import (  # noqa: F401
    decode_python,
    fast_bronze_rows,
    parse_source,
    bronze_rows,
    quarantine_rows,
    unknown_topic_rows,
    parse_batch,
)
from lakehouse.bronze.tables import (  # noqa: F401
    ensure_bronze_tables,
    BRONZE_STATS_COLUMNS,
    QUARANTINE_STATS_COLUMNS,
    STATS_PROPERTY,
)
from lakehouse.checkpoints import uncommitted_batch  # noqa: F401
from lakehouse.bronze.runner import (  # noqa: F401
    TableReport,
    BronzeReport,
    undeclared_pattern,
    undeclared_topics_exist,
    kafka_stream,
    counted,
    run_bronze,
    bronze_streams,
)
