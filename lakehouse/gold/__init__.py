"""Gold: foreign-key join views kept equal to the SQL join of silver, incrementally (KIP-213).

The view's plan (`plan`), pure DataFrame steps (`frames`), key ranges and layout (`layout`), the
path's cost model (`cost`), Delta edges (`delta`), input feeds (`feeds`), streams (`runner`),
recompute. A view based on an events source is an as-of view, maintained by `as_of` (each event
joined with the versions valid at its time); `runner.view_kind` is the one place that picks.
What follows describes the current-state (foreign-key) views.

Gold views: foreign-key joins kept equal to the SQL join of silver, incrementally (KIP-213 on Delta).

How a view is maintained, and why each piece exists
---------------------------------------------------
One streaming query per view reads the Change Data Feed of every silver current table the view
touches (startingVersion 0, one checkpoint per view). Each micro-batch, inside foreachBatch:

1. **Subscriptions** (`silver._sub_<left>__<fk>`, one per (left source, foreign key) relation,
   KIP-213's subscription store): one row per left key: (fk columns, left pk columns,
   `_left_hash`, `_sequence` of the version that set this subscription). A foreign-key change
   moves the row to the new fk (KIP-213's DELETE_KEY_NO_PROPAGATE to the old fk + subscribe to
   the new); a delete or a null fk removes it (a null fk subscribes to nothing); only a newer
   `_sequence` wins, so a replay or a lagging second view can never take a subscription back in
   time. An update that keeps the fk writes nothing here (most changes: a status, a rename), nor
   does a batch whose moves another view of this process wrote already (`gold.applied`). A
   subscription exists whether or not the referenced parent exists, so a parent that arrives
   later finds its children. Tables are `CLUSTER BY` fk, and lookups of a few parents use a
   literal `IN`: "who subscribes to these parents" is KIP-213's prefix scan, pruned by file
   statistics. Every view that follows a relation maintains it from its own stream, so the
   subscriptions a view walks are never older than the changes that view has processed. A batch
   recomputed whatever its keys (step 5: a small view, or `gold_refresh: recompute`) walks none
   and writes none; gold's `cdc_enrich.subscriptions` property then says `behind`, and the next
   batch that walks them first MERGEs silver current's subscriptions of every relation (they
   hold every move since) and sets it to `maintained`. A new gold table starts without it.
2. **Affected base keys**: the base table's changed keys directly; for any other alias, its
   changed keys are walked back through the subscription tables hop by hop (a customer change
   finds orders through `_sub_orders__customer`, then order items through
   `_sub_order_items__order`); a primary-key join maps keys 1:1. Keys are gathered per alias
   from the leaves towards the base, so each relation is looked up once per batch (changed
   orders and the orders of changed customers share one scan of `_sub_order_items__order`).
3. **Recompute** the view's join for exactly those keys from silver current (live rows): the same
   left-deep join the SQL oracle runs, restricted to a few base keys.
4. **MERGE into gold**: insert new rows, update a row only when its content (`_row_hash`) or its
   lineage hashes differ, delete a row only when its key is affected, present in gold, and no
   longer in the join. The MERGE source carries explicit delete markers for affected keys that
   left the join (never `NOT MATCHED BY SOURCE`), so a delete of an absent row cannot happen and
   the gold change feed carries only real changes. Before it, the rows gold already holds
   unchanged are dropped on gold's key and hash columns (`frames.differing_rows`); into a large
   table the rest is written as a MERGE of the keys gold holds, then an append of the new ones
   (`delta.merge_into_gold`: a MERGE with an insert clause shuffles every row of the files it
   touches). When the gold table holds no file yet (a new
   view, a rebuild), steps 2-4 are one append of the whole view instead: there is nothing to
   diff against, and the first batch carries every source row anyway.

5. **Which path** (`cost.py`, per batch, `options.gold_refresh: auto`): when the affected keys
   are so many that recomputing the whole view costs less (Databricks' Enzyme makes the same
   choice per refresh), steps 3-4 become one recompute of the view, diffed against gold's key
   and hash columns (`frames.recompute_differences`), and the same guarded MERGE writes only the
   rows that differ: same rows, same change feed. The incremental path also has a fixed cost
   (the walk, the key count: Spark jobs whatever the batch), so a small view is recomputed
   whatever the batch, without walking its keys or writing its subscriptions (step 1). The batch's own base changes are a lower
   bound on the keys, so a batch that is large by itself skips the subscription walk. `layout.py`
   turns affected keys into a few key ranges that let Delta skip gold, silver and subscription
   files by their statistics, and writes whole tables (a first build) in key ranges.

Why recomputing from current silver (instead of shipping values through the subscription store
as KIP-213 does) converges for any arrival order: a change committed to silver is delivered by
the change feed after it is visible, and the keys whose result depends on it are recomputed then
(through subscriptions that are at least as new as the link, or, when the link's own change is
not yet processed, when that change is). Each recompute reads a state at least as new as every
change processed so far, so the last recompute of a key reads its final state.

The hash check (seed 000, "Joiner Propagation of Stale Data")
-------------------------------------------------------------
KIP-213 sends the hash of the left value with each subscription and, when the right side's
answer comes back, drops it if the left row's current hash differs: a result computed from a
left row that has since changed must never overwrite a newer one. Here every gold row records,
for each alias it was built from, `_<alias>_hash` (hash of the columns of that row the view
reads: key, selected columns, join columns) and `_<alias>_seq` (the silver `_sequence` of that
version), null where a left join found nothing, plus `_row_hash` over the output columns. The
gold MERGE applies an update or delete only when the incoming base sequence is not older than
the stored one: the Delta equivalent of "validate the hash against the current LHS value". With
one query per view reading monotone silver state this guard never fires in a healthy run; it
protects against a second writer (a backfill, a restarted job on another cluster, a replay of
an old batch) ever regressing a row. The guard covers the base alias only: a right alias's
sequence belongs to whichever parent the fk points at, and two different parents' sequences do
not order each other.

A change to a source column the view does not read, or a re-delivered version with a newer
sequence but the same content, produces the same `_row_hash` and lineage hashes: gold is not
rewritten (its `_<alias>_seq` then records the version the content was built from, which may be
older than silver's current `_sequence`; `verify` compares hashes, and only flags a recorded
sequence newer than silver's).

Exactly-once effect: every write in a batch sets Delta's `txnAppId`/`txnVersion` (app id =
pipeline, view, the query's persistent id and the target table; version = batch id), so a batch
replayed after a crash skips writes that already committed.
"""

from __future__ import annotations

from lakehouse.gold.plan import (  # noqa: F401
    LITERAL_KEY_LIMIT,
    BROADCAST_ROW_LIMIT,
    ROW_HASH,
    JOIN_TYPES,
    AliasPlan,
    ViewPlan,
    view_plan,
    subscription_columns,
    subscription_schema,
)
from lakehouse.gold.frames import (  # noqa: F401
    content_hash,
    HASH_LENGTH,
    latest_changes,
    subscription_updates,
    walk_back,
    affected_base_keys,
    join_view,
    gold_merge_source,
    recompute_differences,
)
from lakehouse.gold.layout import (  # noqa: F401
    KeyRange,
    key_ranges,
    range_predicate,
)
from lakehouse.gold.cost import (  # noqa: F401
    RefreshDecision,
    RefreshEstimate,
    choose_refresh,
)
from lakehouse.gold.delta import (  # noqa: F401
    ensure_subscription_table,
    ensure_gold_table,
    merge_subscriptions,
    merge_into_gold,
    live_rows,
)
from lakehouse.deltasql import num_files  # noqa: F401
from lakehouse.gold.runner import (  # noqa: F401
    ViewRun,
    GoldReport,
    change_stream,
    decode_changes,
    process_changes,
    catch_up_subscriptions,
    append_to_empty_gold,
    prepare_view,
    start_view,
    run_gold,
    gold_streams,
)
from lakehouse.gold.recompute import (  # noqa: F401
    full_recompute,
    subscription_sizes,
)
