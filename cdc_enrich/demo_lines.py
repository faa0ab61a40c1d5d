"""What `cdc-enrich demo` says: each step in a line or two of plain words and counts, and with
`-v` the details behind them, from the facts the demo gathers. Pure (no Spark, no stack), so
tests hold the wording (tests/unit/test_demo_lines.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Sequence

from cdc_enrich.render import render_rows

#: How each of the simulator's chaos counters reads (`testkit.simulator`'s `chaos_applied`): what
#: Kafka's delivery did, then what the workload did to the rows (a lagging topic is said apart).
DELIVERY_WORDS = {
    "redelivered_records": ("record delivered again", "records delivered again"),
    "snapshot_replays": ("snapshot record replayed mid-stream", "snapshot records replayed mid-stream"),
    "resnapshots": ("connector outage ended by a new snapshot", "connector outages ended by a new snapshot"),
    "records_lost_in_outages": ("change never sent (an outage)", "changes never sent (outages)"),
}
ROW_WORDS = {
    "fk_moves": ("foreign key moved", "foreign keys moved"),
    "null_fks": ("foreign key set to null", "foreign keys set to null"),
    "dangling_fks": ("foreign key naming no row", "foreign keys naming no row"),
    "parent_recreates": ("parent deleted and re-created", "parents deleted and re-created"),
    "pk_changes": ("primary key changed", "primary keys changed"),
    "noop_updates": ("update that changed nothing", "updates that changed nothing"),
}

#: What silver sorted out, from its summed stats (`SilverStats`), said when not zero.
SILVER_WORDS = {
    "duplicates": ("duplicate dropped", "duplicates dropped"),
    "out_of_order": ("out-of-order change put in its place", "out-of-order changes put in their place"),
    "late": ("late change recorded", "late changes recorded"),
    "snapshot_deletes": ("row a later snapshot no longer held deleted", "rows a later snapshot no longer held deleted"),
    "held": ("change held by a quarantine rule", "changes held by quarantine rules"),
    "released": ("held change let through", "held changes let through"),
}


def count(n: int, one: str, many: str | None = None) -> str:
    """`n` and the word, its plural when `n` is not 1 (`many`, else the word and an s); thousands
    separated."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def took(seconds: float) -> str:
    """A duration as a person reads it: tenths of a second under a minute, then minutes and seconds."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def series(parts: Iterable[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = [p for p in parts if p]
    if len(items) < 2:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


# --------------------------------------------------------------------------- 2. the changes


def chaos_words(applied: Mapping[str, Any], zeros: bool = False) -> tuple[list[str], list[str]]:
    """The chaos the simulator applied, a phrase per counter (`zeros`: those that stayed 0 too):
    (in the delivery, a lagging topic named with its lag; in the rows). A counter neither list
    knows is said by its name, with the rows'. The re-delivered ranges are `simulation_details`'."""

    def said(words: Mapping[str, tuple[str, str]]) -> list[str]:
        out = []
        for key, (one, many) in words.items():
            value = applied.get(key)
            n = sum(value.values()) if isinstance(value, Mapping) else value
            if isinstance(n, int) and (n or zeros):
                out.append(count(n, one, many))
        return out

    delivery = said(DELIVERY_WORDS) + [f"{topic} {lag:g} s late" for topic, lag in (applied.get("lagging_topics") or {}).items()]
    known = set(DELIVERY_WORDS) | set(ROW_WORDS) | {"lagging_topics", "redelivered"}
    rows = said(ROW_WORDS) + [f"{key.replace('_', ' ')} {value}" for key, value in applied.items() if key not in known and (value or zeros)]
    return delivery, rows


def chaos_line(name: str, applied: Mapping[str, Any]) -> str:
    """'chaos 'some': in the delivery, ...; in the rows, ...' (or that none was applied)."""
    delivery, rows = chaos_words(applied)
    parts = [f"in the delivery, {series(delivery)}" if delivery else "", f"in the rows, {series(rows)}" if rows else ""]
    return f"chaos {name!r}: " + ("; ".join(p for p in parts if p) or "none applied")


def simulation_lines(stats: Mapping[str, Any], produced: int) -> list[str]:
    """What the simulator sent: the tables, the snapshot, the changes and transactions, the Kafka
    records, and the chaos in words (from its `stats` and the records produced)."""
    snapshot = sum(stats["snapshot"]["rows"].values())
    return [
        f"a simulated Debezium capture of {count(len(stats['rows']), 'table')}: a snapshot of {count(snapshot, 'row')}, "
        f"then {count(stats['change_events'], 'change')} in {count(stats['transactions'], 'transaction')}; "
        f"{count(produced, 'Kafka record')} on {count(len(stats['topics']), 'topic')}",
        chaos_line(stats["chaos"], stats.get("chaos_applied", {})),
    ]


def simulation_details(stats: Mapping[str, Any]) -> list[str]:
    """Everything else the simulator recorded, in words and one table: how it was asked, the WAL
    positions and transaction ids, per source its kind, key, topic, operations and final rows,
    its columns, and every chaos counter with the re-delivered ranges."""
    from lakehouse.verify.postgres import lsn_text

    snap = stats["snapshot"]
    lines = [
        f"asked: seed {stats['seed']}, scale {stats['scale']}, {count(stats['events_requested'], 'change')}, "
        f"{count(stats['partitions'], 'partition')} per topic, schemas in the records: {'yes' if stats['schemas_enabled'] else 'no'}; "
        f"pipeline {stats['pipeline']}, truth format {stats['truth_format']}",
        f"WAL: snapshot at LSN {lsn_text(snap['lsn'])} (transaction {snap['tx_id']}), last change at "
        f"{lsn_text(stats['final_lsn'])}, its commit ending at {lsn_text(stats['final_commit_end_lsn'])} (transaction {stats['final_tx_id']})",
    ]
    rows = []
    for name, source in stats["sources"].items():
        ops = stats["ops"].get(name, {})
        rows.append((name, source["kind"], ", ".join(source["primary_key"]), stats["topics"][name], snap["rows"].get(name, 0),
                     ops.get("c", 0), ops.get("u", 0), ops.get("d", 0), ops.get("tombstone", 0), stats["rows"].get(name, 0)))
    lines.append(render_rows(["source", "kind", "key", "topic", "snapshot", "inserts", "updates", "deletes", "tombstones", "rows at the end"], rows))
    lines += [f"{name} columns: " + ", ".join(f"{c} {t}" for c, t in source["columns"]) for name, source in stats["sources"].items()]
    applied = stats.get("chaos_applied", {})
    delivery, rows_chaos = chaos_words(applied, zeros=True)
    lines.append("chaos, every counter: " + ", ".join(delivery + rows_chaos))
    for spell in applied.get("redelivered", []):
        lines.append(f"re-delivered: {count(spell['records'], 'record')} first sent between {_utc(spell['from_ts_ms'])} "
                     f"and {_utc(spell['to_ts_ms'])} (a connector restart)")
    for topic, n in (applied.get("snapshot_replays") or {}).items():
        lines.append(f"snapshot replayed: {count(n, 'record')} of {topic}")
    return lines


def _utc(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def postgres_workload_lines(seeded: int, first: int, second: int, aborted: int) -> list[str]:
    """What PostgreSQL and Debezium's connector went through: the rows seeded (its snapshot), the
    transactions committed (and aborted) from two connections, the kill half-way and the restart."""
    return [
        f"{count(seeded, 'row')} seeded and snapshotted by the connector, then {count(first + second, 'transaction')} "
        f"committed from two connections ({aborted:,} more aborted)",
        f"the connector killed (SIGKILL) after {first:,} of them and restarted from its offsets: the replication slot kept the rest",
    ]


# --------------------------------------------------------------------------- 3-5. the stages


def bronze_line(rows: Mapping[str, int], quarantined: int, seconds: float) -> str:
    """Bronze's tables: their rows, what went to quarantine, the stage's time."""
    return (f"{count(sum(rows.values()), 'row')} in {count(len(rows), 'append-only table')}, "
            f"{count(quarantined, 'record')} quarantined ({took(seconds)})")


def silver_line(tables: Sequence[tuple[str, int, int, int]], stats: Mapping[str, int], seconds: float) -> str:
    """Silver's tables (name, live rows, deleted keys, history versions), what it sorted out on
    the way (the summed stats' counters in `SILVER_WORDS`, when not zero), the stage's time."""
    live, deleted, versions = (sum(t[i] for t in tables) for i in (1, 2, 3))
    sorted_out = [count(stats[key], one, many) for key, (one, many) in SILVER_WORDS.items() if stats.get(key)]
    return (f"{count(live, 'live row')} and {count(deleted, 'deleted key')} in {count(len(tables), 'table')}, "
            f"{count(versions, 'version')} in their history" + (f"; {series(sorted_out)}" if sorted_out else "")
            + f" ({took(seconds)})")


def history_line(source: str, key: str, versions: int) -> str:
    return f"one key's life: {source} {key} has {count(versions, 'version')} in history"


def gold_line(views: Mapping[str, int], seconds: float) -> str:
    """Gold's views and their rows, the stage's time."""
    return (f"{count(len(views), 'view')}, {count(sum(views.values()), 'row')}: "
            + ", ".join(f"{name} {n:,}" for name, n in views.items()) + f" ({took(seconds)})")


def as_of_line(view: str, base: str, differ: int, rows: int) -> str:
    return f"{view}: each {base} row joined as of its own time; {differ:,} of {rows:,} differ from the same join as of now"


def window_line(view: str, names: tuple[str, str], pairs: int, alone: tuple[int, int | None], waiting: int | None,
                late: tuple[int, int]) -> str:
    """A windowed view's events by outcome: pairs, events whose window closed without a partner
    (the joined side's only when the view keeps them: None otherwise), base events still inside
    their window (None when the view keeps no unmatched base event), late ones of each side."""
    parts = [f"{count(pairs, 'pair')} of {names[0]} and {names[1]}"]
    parts.append(f"{alone[0]:,} {names[0]} alone when their window closed" + (f", {alone[1]:,} {names[1]}" if alone[1] is not None else ""))
    if waiting is not None:
        parts.append(f"{waiting:,} {names[0]} still inside their window")
    parts.append(f"late (recorded, joined to nothing): {late[0]:,} {names[0]}, {late[1]:,} {names[1]}")
    return f"{view}: " + "; ".join(parts)


def late_correction_line(view: str, what: str, column: str, new: Any, reads: Any) -> str:
    """What came of a version delivered late (`what`: its source and key) to an as-of view: the
    event it was valid for reads its new value (`reads`: what the event's row shows now)."""
    outcome = (f"{view} re-enriched the event it was valid for" if reads == new
               else f"{view}'s event still reads {reads!r} (verify checks it)")
    return f"a correction of {what} ({column} = {new!r}), delivered late: {outcome}"


def late_event_line(view: str, what: str, partner: str, recorded: int, paired: int) -> str:
    """What came of an event delivered after its window closed: recorded, paired with nothing."""
    return (f"a {what} event for {partner}, delivered after its window closed: {count(recorded, 'row')} in _late_changes, "
            f"{count(paired, 'gold row')} pairing it")


# --------------------------------------------------------------------------- 6-7. the checks


def verify_line(report: Any, against: str) -> str:
    """`verify`'s verdict in a line: every view equal to its SQL join over `against`, or which
    views differ and how (a `lakehouse.verify.views.VerifyReport`)."""
    if report.ok:
        rows = sum(check.diff.actual_rows for check in report.views)
        return f"OK: each of the {count(len(report.views), 'view')} equals its SQL join over {against} ({count(rows, 'row')})"
    return "DIFFERENCES FOUND: " + "; ".join(_view_problem(check) for check in report.views if not check.ok)


def _view_problem(check: Any) -> str:
    if check.error:
        return f"{check.view}: {check.error}"
    d = check.diff
    found = [(d.missing, "missing"), (d.extra, "extra"), (d.different, "different"), (d.duplicate_keys, "duplicate keys"),
             (check.stale_hashes, "stale hashes")]
    return f"{check.view}: " + ", ".join(f"{n:,} {what}" for n, what in found if n)


def postgres_verify_line(report: Any) -> str:
    """The verdict against PostgreSQL in a line (a `lakehouse.verify.postgres.PostgresVerifyReport`):
    how many gold views and silver tables equal the database's own joins and tables, or which differ."""
    if report.ok:
        line = (f"OK: {count(len(report.gold), 'gold view')} and {count(len(report.silver), 'silver table')} equal the same "
                f"joins and tables inside PostgreSQL, caught up to LSN {report.catch_up.target_lsn}")
        return line + (f"; {count(len(report.not_compared), 'view')} not comparable there (-v says why)" if report.not_compared else "")
    problems = []
    for d in report.gold + report.silver:
        if not d.ok:
            found = [(len(d.missing), "missing"), (len(d.extra), "extra"), (len(d.different), "different"), (len(d.duplicate_keys), "duplicate keys")]
            problems.append(f"{d.name}: " + (", ".join(f"{n:,} {what}" for n, what in found if n) or "checksums differ"))
    return "DIFFERENCES FOUND: " + "; ".join(problems)


def quality_line(report: Any, seconds: float) -> str:
    """The quality run in a line (a `lakehouse.quality.runner.QualityReport`)."""
    status = "OK" if report.ok else "FAILED"
    line = (f"{status}: {count(report.evaluated, 'expectation')} on {count(len(report.validated), 'table')}, "
            f"{len(report.errors):,} failed, {count(len(report.warnings), 'warning')}")
    if report.skipped:
        line += f", {count(len(report.skipped), 'table')} skipped"
    return line + f" ({took(seconds)})"


# --------------------------------------------------------------------------- the end


def verdict(verified: bool, proof: str, quality: Any | None, seconds: float) -> str:
    """The one verdict: OK with what the run showed (`proof`), or that verify found differences;
    failed quality expectations said beside it (they do not fail the demo); the run's time."""
    text = f"Verdict: OK, {proof}" if verified else "Verdict: DIFFERENCES FOUND (the Verify step says where; -v lists the rows)"
    if quality is not None and not quality.ok:
        text += f"; quality: {count(len(quality.errors), 'expectation')} failed"
    return text + f" ({took(seconds)} in all)"


def grouped(names: Iterable[str]) -> str:
    """Qualified names by schema, in order: 'shop_bronze: customers, orders; shop_silver: _late_changes'."""
    schemas: dict[str, list[str]] = {}
    for name in names:
        schema, _, table = name.rpartition(".")
        schemas.setdefault(schema, []).append(table)
    return "; ".join(f"{schema}: {', '.join(tables)}" if schema else ", ".join(tables) for schema, tables in schemas.items())


def aligned(rows: Sequence[tuple[str, str]], indent: str = "  ") -> list[str]:
    """Label and text in two columns, the labels padded to the longest."""
    width = max((len(label) for label, _ in rows), default=0)
    return [f"{indent}{label:<{width}}  {text}" for label, text in rows]
