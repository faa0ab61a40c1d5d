"""Which way a gold batch is refreshed: incrementally (the affected keys) or by a recompute of
the whole view diffed against gold, whichever costs less, as Databricks' Enzyme picks per refresh.

Both paths MERGE the same differing rows into the same gold files, so the choice turns on what
each reads to find them. The incremental path reads, per affected base key, its rows of the
base table (pruned by key ranges), the view's parent tables, and the key's gold row, and pays a
fixed cost the recompute does not (the subscription walk, the key count and ranges: Spark jobs
whatever the batch's size); the recompute reads every source row once and gold's narrow key
and hash columns. The parent tables are read whole by either path, so they weigh the same on
both sides and are neither weighed nor counted: what decides is the base table's rows and
gold's against the keys. Costs are in "source rows read" and the weights were measured with
`cdc-enrich bench gold` (docs/performance.md, "Gold incremental against recompute");
`options.gold_incremental_overhead_rows` sets the fixed cost for another machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakehouse.declaration import REFRESH_MODES, Options
from lakehouse.errors import PipelineConfigError

#: One affected key costs about this many source-row reads on the incremental path: its base
#: rows found by key (a range-pruned scan), joined, hashed, and its gold row looked up by the MERGE.
#: Measured at 1M fact rows (2 cores, 2026-11-25): incremental ~18 s + 0.25 ms per key, a
#: recompute diffed against gold ~35 s (on its own it put the crossing near 70k keys; the fixed
#: cost below moves views that small to the recompute whatever the keys).
KEY_WEIGHT = 22.0
#: Reading a gold row's key and hash columns (the recompute's diff) against reading a source row.
GOLD_SCAN_WEIGHT = 0.5
#: The incremental path's fixed cost beyond the recompute's, in source-row reads: the default of
#: `options.gold_incremental_overhead_rows` (where it was measured is said there).
INCREMENTAL_OVERHEAD_ROWS = Options.gold_incremental_overhead_rows


@dataclass(frozen=True)
class RefreshEstimate:
    """What a batch knows before it writes: its affected base keys and the tables' sizes (the
    parent tables' rows, read whole by either path, would add the same to both costs)."""

    affected_keys: int
    gold_rows: int
    base_rows: int  # rows of the base table's silver current (what the recompute reads beyond the parents)
    overhead_rows: float = INCREMENTAL_OVERHEAD_ROWS  # the incremental path's fixed cost

    @property
    def incremental_cost(self) -> float:
        return self.overhead_rows + KEY_WEIGHT * self.affected_keys

    @property
    def recompute_cost(self) -> float:
        return self.base_rows + GOLD_SCAN_WEIGHT * self.gold_rows


@dataclass(frozen=True)
class RefreshDecision:
    path: str  # "incremental" | "recompute" ("undecided": see `choose_refresh`)
    reason: str
    estimate: RefreshEstimate | None = None


def forced_refresh(mode: str) -> RefreshDecision | None:
    """The path `options.gold_refresh` fixes, or None when it is `auto` (the cost model picks)."""
    if mode not in REFRESH_MODES:
        raise PipelineConfigError(f"options.gold_refresh must be one of {', '.join(REFRESH_MODES)}, got {mode!r}")
    return None if mode == "auto" else RefreshDecision(mode, f"options.gold_refresh is {mode}")


def choose_refresh(estimate: RefreshEstimate, keys_are_a_lower_bound: bool = False) -> RefreshDecision:
    """The cheaper path for one batch; "undecided" when `keys_are_a_lower_bound` (the estimate
    counts only the batch's own base changes, before the subscriptions are walked: it can prove
    a recompute cheaper, never the reverse).

    >>> choose_refresh(RefreshEstimate(10, 10_000_000, 10_000_000)).path
    'incremental'
    >>> choose_refresh(RefreshEstimate(5_000_000, 10_000_000, 10_000_000)).path
    'recompute'
    >>> choose_refresh(RefreshEstimate(10, 20_000, 20_000)).path  # a small view: the fixed cost decides
    'recompute'
    """
    inc, full = estimate.incremental_cost, estimate.recompute_cost
    figures = (
        f"{estimate.affected_keys}{'+' if keys_are_a_lower_bound else ''} affected key(s) of {estimate.gold_rows} "
        f"gold row(s): incremental ~{inc:,.0f}, recompute ~{full:,.0f} row reads"
    )
    if inc > full:
        even = " even with no affected key" if keys_are_a_lower_bound and not estimate.affected_keys else ""
        return RefreshDecision("recompute", f"recompute is cheaper{even} ({figures})", estimate)
    if keys_are_a_lower_bound:
        return RefreshDecision("undecided", figures, estimate)
    return RefreshDecision("incremental", f"incremental is cheaper ({figures})", estimate)


def recompute_whatever_the_keys(gold_rows: int, base_rows: int, overhead_rows: float) -> RefreshDecision | None:
    """The recompute, when it is cheaper even with no affected key (a view small enough for the
    incremental path's fixed cost to decide), so the batch neither counts nor walks its keys;
    else None.

    >>> recompute_whatever_the_keys(20_000, 20_000, INCREMENTAL_OVERHEAD_ROWS).path
    'recompute'
    >>> recompute_whatever_the_keys(10_000_000, 10_000_000, INCREMENTAL_OVERHEAD_ROWS) is None
    True
    """
    decision = choose_refresh(RefreshEstimate(0, gold_rows, base_rows, overhead_rows), keys_are_a_lower_bound=True)
    return decision if decision.path == "recompute" else None


def counting_keys_may_pick_recompute(
    key_bound: int | None, gold_rows: int, base_rows: int, overhead_rows: float = INCREMENTAL_OVERHEAD_ROWS
) -> bool:
    """Whether counting a batch's own base keys (a Spark job) could prove a recompute cheaper,
    given `key_bound`, a bound from above on them (the batch's change rows; None: unknown): not
    when even that many keys keep the incremental path cheaper, as on every small batch.

    >>> counting_keys_may_pick_recompute(2, 10_000_000, 10_000_000)
    False
    >>> counting_keys_may_pick_recompute(1_000_000, 10_000_000, 10_000_000)
    True
    """
    if key_bound is None:
        return True
    return choose_refresh(RefreshEstimate(key_bound, gold_rows, base_rows, overhead_rows)).path == "recompute"
