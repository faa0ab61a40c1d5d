"""Silver: versioned current + history tables per source, from bronze by foreachBatch MERGE.

Pure planning (`plan`, `snapshots`) apart from tables (`layout`), side effects (`apply`), streams (`runner`) and reads (`reads`).

Versioned silver tables: current state per key plus full per-key history (seed 001, KIP-914).

A streaming job reads `bronze.<source>` and, per micro-batch, MERGEs into two tables whose
layout is fixed by `lakehouse.tables`:

- `silver.<source>` (current): one row per primary key silver has seen live, the latest
  version by `_sequence` (a deleted key as a `_deleted` marker). Change Data Feed is enabled;
  gold streams it.
- `silver.<source>_history`: every version per key with `[_valid_from, _valid_to)` in source
  time and `_valid_to_sequence`, the next version's sequence.

How a batch is applied (all decisions are pure DataFrame functions below, side effects at the
edges in `apply_batch`):

1. `changes_from_bronze` turns bronze rows into changes (key, payload, sequence, source time,
   op, TOAST placeholders). Tombstones (`_op='tombstone'`) are ignored: Debezium always emits
   the delete event before its tombstone, the delete carries the sequence, and a tombstone has
   none of its own. `dedupe_changes` keeps one change per (key, sequence): several changes to
   one key in one batch are ordered by sequence, never by arrival order.
2. The existing history of the keys touched by the batch (and only those; a truncate touches
   every key alive at its sequence) is read, and `build_timeline` recomputes those keys'
   timelines: the stored versions plus the new ones, plus a derived delete version (`_op='t'`)
   at every truncate for a key alive just before it; TOAST placeholders resolved from the
   previous version by sequence; `_valid_to` from the next version. Because the timeline is a
   function of the *set* of changes, the result is the same for any arrival order or batching.
3. `plan_history` diffs the recomputed timeline against what is stored (insert, update of a
   neighbour's `_valid_to`, removal of a derived truncate version a late delete made moot);
   `plan_current` takes each key's last version and keeps it only if it is newer than the
   stored current row (or the same version with a different hash: a TOAST value corrected by a
   late predecessor). An out-of-order change (older than the key's current version) therefore
   only lands in history, and a duplicate (same key and sequence) changes nothing anywhere.

Semantics downstream readers rely on:

- **Deletes in the change feed: a delete is an UPDATE to `_deleted = true`** (CDF
  `update_preimage` = the live row, `update_postimage` = the marker: key columns, payload
  null, the delete's sequence). Silver never issues a CDF `delete`, and never an insert or
  update whose both sides are deleted: current's feed is exactly insert (a key appears),
  update live->live, live->marker (deleted), marker->live (re-created). A key created and
  deleted before silver saw it live gets no row at all. A deleted key's marker stays forever
  (one small row per deleted key, no retention window to tune), and an older update arriving
  later, however late, never resurrects it: it is placed in history (which is read for every
  touched key) behind the delete. Analysts query `<source>_live`.
- **Truncates** (`_op='t'`, no key): every current row alive with a smaller sequence becomes a
  marker at the truncate's sequence (`_op='t'`), history gets a delete version per key alive
  at that point. Truncates are recorded in `silver._truncates`; a key's timeline always
  includes them, so a change older than a truncate arriving later goes to history (followed by
  the truncate's delete version) and never resurrects the key in current. Whether a source ever
  recorded one (or a TOAST placeholder) its history table says (`layout.history_facts`), so a
  stream starting anew reads those tables only when they may hold something.
- **A new snapshot deletes what it no longer holds** (`snapshots`): a connector restarted
  without a streaming offset re-snapshots, and rows deleted while it was down have no delete
  event. When a batch holds a table's snapshot end record, every key alive just before the
  snapshot and absent from it gets a delete at the snapshot's position, an ordinary change from
  then on (a replayed old snapshot deletes nothing). PostgreSQL's ordering rule only.
- **No-op rewrites never reach the change feed**: the MERGE into current updates only when the
  incoming sequence is greater, or equal with a different row hash, and never a marker by a
  marker; out-of-order and duplicate changes produce no CDF rows.
- **TOAST**: a column listed in `_unavailable_columns` keeps the key's previous version's value
  (by sequence), in current and history. Which columns were placeholders is remembered in the
  small side table `silver._toast_<source>` (only versions that had placeholders), so a late
  predecessor re-resolves them; that is the one case where an out-of-order change can update
  the current row (same version, corrected value).
  A primary-key change's create (Debezium sends the placeholder there too, with the old key in
  the `__debezium.oldkey` header, bronze `_old_key`) takes the value from the old key's last
  live version instead (`inherit_moved_values`); once taken it is stored as a plain value, so
  a predecessor of the *old* key arriving after the move is not carried over again. A create
  whose key's previous version is live (a snapshot that read past its LSN already holds the
  moved row) resolves from that version instead.
- **Late changes**: a change older than its key's current version by more than
  `options.late_grace_days` (source time) is applied as usual (history only) and recorded in
  `silver._late_changes` with reason `late`; one older than the history compaction horizon
  (`compact_history`) is still placed and recorded with reason `beyond_retention`.
- **Exactly-once**: every write of a batch carries Delta's `txnAppId`/`txnVersion` (appId per
  stream checkpoint and target table, version = batch id): a replayed batch writes nothing
  twice. Independently, planning from the tables' state makes a replay a no-op for current and
  history.

Tables besides the two of `lakehouse.tables`: `silver._truncates` (source, sequence, source
time), `silver._toast_<source>` (key, sequence, placeholder columns; one row per version that
had placeholders; made by the source's first placeholder), `silver._late_changes`
(`late_changes_schema`), the `<source>_live` view, and a history table property holding the
compaction horizon.

Cost per batch: the stored history and current rows of the batch's keys are read (a broadcast
semi-join, plus min/max key predicates so Delta skips files when keys are clustered), and
the MERGEs join on the key (and sequence) with the same predicates. Only changed rows are
written; once a table is past 16 MB, deletion vectors (`DELETION_VECTORS_WHEN_LARGE`) make
an update mark the old row instead of rewriting its file. A truncate is the exception: it touches every key alive at it.
"""

from __future__ import annotations

from lakehouse.silver.plan import (  # noqa: F401
    COMPACTED_BEFORE_PROPERTY,
    CHANGE_OPS,
    TRUNCATE_OP,
    TOMBSTONE_OP,
    BROADCAST_KEYS_LIMIT,
    Truncate,
    changes_from_bronze,
    dedupe_changes,
    truncates_from_bronze,
    batch_summary,
    derive_truncate_versions,
    row_hash,
    resolve_placeholders,
    inherit_moved_values,
    build_timeline,
    plan_history,
    replaces_current,
    plan_current,
    classify_changes,
    late_records,
    history_as_of,
    key_bounds_condition,
    keys_in,
)
from lakehouse.silver.layout import (  # noqa: F401
    truncates_table,
    toast_table,
    live_view,
    late_changes_schema,
    truncates_schema,
    toast_schema,
    ensure_silver_tables,
    read_truncates,
    compacted_before,
)
from lakehouse.silver.apply import (  # noqa: F401
    SilverStats,
    SilverReport,
    plan_batch,
    StreamState,
    apply_batch,
)
from lakehouse.silver.runner import (  # noqa: F401
    silver_checkpoint,
    run_silver,
    silver_streams,
)
from lakehouse.silver.reads import (  # noqa: F401
    as_of,
    compact_history,
    late_changes,
)
