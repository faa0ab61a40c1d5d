"""SQL text from the declaration: identifier quoting and a gold view as one plain SQL join.

Pure Python (no Spark), so the oracle (Spark SQL over any state), the PostgreSQL check (the
same join run inside the database) and the quality suites (Spark SQL names) all write one text.
A `Dialect` says how that text differs between engines; today only the identifier quote does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Mapping

from lakehouse.declaration import Join, Pipeline, Source, View
from lakehouse.declaration.expressions import rewrite_references

#: How each declared join type is written; both dialects spell them alike.
JOIN_KEYWORDS: Mapping[str, str] = {"inner": "JOIN", "left": "LEFT JOIN", "outer": "FULL OUTER JOIN"}


@dataclass(frozen=True)
class Dialect:
    """What differs between the SQL engines a view is rendered for."""

    name: str
    quote_char: str
    join_keywords: Mapping[str, str]

    def join_keyword(self, join: Join) -> str:
        """The keyword introducing `join` (`JOIN`, `LEFT JOIN`, `FULL OUTER JOIN`)."""
        return self.join_keywords[join.type]


SPARK = Dialect("spark", "`", JOIN_KEYWORDS)
POSTGRES = Dialect("postgres", '"', JOIN_KEYWORDS)


def quote(name: str, dialect: Dialect = SPARK) -> str:
    """One identifier, quoted so any spelling is safe (the quote character is doubled)."""
    q = dialect.quote_char
    return q + name.replace(q, q + q) + q


def string_literal(text: str) -> str:
    """A Spark SQL string literal holding `text` exactly (backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_qualified(*names: str, dialect: Dialect = SPARK) -> str:
    """`a`, `b`, `c` -> `` `a`.`b`.`c` ``: each part of a qualified name quoted."""
    return ".".join(quote(n, dialect) for n in names)


def render_view(
    pipeline: Pipeline, view: View | str, relations: Mapping[str, str], dialect: Dialect, watermark: str | None = None
) -> str:
    """The view as one SQL statement; `relations[source]` is the SQL text naming that source's relation.

    Joins are written in declared order (left-deep), each foreign-key join as
    `ON <referenced pk> = <parent alias>.<fk column>` (a null fk matches nothing), each
    key-expression join as `ON <global pk> = (<expression>)`, each primary-key join on the view's key; after a FULL OUTER primary-key join the key is
    `COALESCE(base key, joined key)` (a right-only key is still a row, as in KIP-77).
    """
    view = pipeline.view(view)
    if view.windowed:
        return _render_window(pipeline, view, relations, dialect, watermark)
    base = pipeline.source(view.base)
    keys = [quote_qualified(view.base, k, dialect=dialect) for k in base.primary_key]
    lines = [f"FROM {relations[base.name]} AS {quote(view.base, dialect)}"]
    for join in view.joins:
        target = pipeline.source(join.table)
        if join.kind == "expression":  # a global table's key = an expression of an earlier alias
            on = f"{quote_qualified(join.alias, target.primary_key[0], dialect=dialect)} = {expression_sql(join, dialect)}"
        else:
            on = " AND ".join(f"{right} = {left}" for right, left in _join_pairs(pipeline, view, join, keys, dialect))
        if view.temporal:
            on = f"{on} AND {valid_at(join.alias, event_time(view, dialect), dialect)}"
        lines.append(f"{dialect.join_keyword(join)} {relations[target.name]} AS {quote(join.alias, dialect)} ON {on}")
        if join.is_outer:
            keys = _coalesced_keys(keys, join.alias, target, dialect)
    select = ",\n".join(f"  {expr} AS {quote(name, dialect)}" for name, expr in _select_items(view, base, keys, dialect))
    return "SELECT\n" + select + "\n" + "\n".join(lines)


#: The column of an as-of view's base relation holding the event's source commit time (silver's name).
COMMIT_TIME = "_source_ts"


def time_column(view: View) -> str:
    """The base column an as-of view's joins are timed by: the declared `as_of` column, or the
    event's source commit time (`COMMIT_TIME`, silver current's column)."""
    return view.as_of or COMMIT_TIME


def event_time(view: View, dialect: Dialect = SPARK) -> str:
    """An as-of view's time (`time_column`), qualified by its base alias."""
    return quote_qualified(view.base, time_column(view), dialect=dialect)


def valid_at(alias: str, time: str, dialect: Dialect = SPARK) -> str:
    """A history version of `alias` is the one valid at `time`: `_valid_from <= time <
    _valid_to` (an open end is null), and not a deletion. The one statement of KIP-914's
    timestamped lookup, for the oracle in both dialects (gold's join applies it in
    `lakehouse.gold.as_of`)."""
    a = lambda column: quote_qualified(alias, column, dialect=dialect)  # noqa: E731
    return (f"NOT {a('_deleted')} AND {a('_valid_from')} <= {time} "
            f"AND ({a('_valid_to')} IS NULL OR {time} < {a('_valid_to')})")


def window_times(view: View) -> tuple[str, str]:
    """A windowed view's event times: (base column, joined column), each the declared
    `window.time` column or the event's source commit time (`COMMIT_TIME`)."""
    window = view.joins[0].window
    assert window is not None
    return window.base_time or COMMIT_TIME, window.time or COMMIT_TIME


def _seconds(span: timedelta) -> str:
    return f"INTERVAL '{int(span.total_seconds())}' SECOND"


def _render_window(pipeline: Pipeline, view: View, relations: Mapping[str, str], dialect: Dialect, watermark: str | None) -> str:
    """A windowed view (seed 002's KStream-KStream join) as SQL: the base events joined with the
    joined events of the same key whose time lies in [base time - before, base time + after];
    a left (outer) row for an unmatched event only once its window has closed: its time plus
    its span (after for a base event, before for a joined one) is below `watermark` (the view's
    stream time less the grace, a SQL timestamp expression; null: nothing has closed). The
    relations hold the events gold accepted (late ones, recorded, are left out by the caller)."""
    join = view.joins[0]
    window = join.window
    assert window is not None
    base, joined = pipeline.source(view.base), pipeline.source(join.table)
    q = lambda alias, column: quote_qualified(alias, column, dialect=dialect)  # noqa: E731
    base_time = q(view.base, window_times(view)[0])
    joined_time = q(join.alias, window_times(view)[1])
    on = [f"{q(join.alias, mine)} = {q(view.base, theirs)}" for mine, theirs in window.on]
    on.append(f"{joined_time} BETWEEN {base_time} - {_seconds(window.before)} AND {base_time} + {_seconds(window.after)}")
    closed: list[str] = []
    mark = watermark or "CAST(NULL AS TIMESTAMP)"
    if join.type in ("left", "outer"):
        closed.append(f"({q(join.alias, joined.primary_key[0])} IS NOT NULL OR {base_time} + {_seconds(window.after)} < {mark})")
    if join.type == "outer":
        closed.append(f"({q(view.base, base.primary_key[0])} IS NOT NULL OR {joined_time} + {_seconds(window.before)} < {mark})")
    select = ",\n".join(f"  {q(c.alias, c.column)} AS {quote(c.name, dialect)}" for c in view.columns)
    return ("SELECT\n" + select + f"\nFROM {relations[base.name]} AS {quote(view.base, dialect)}\n"
            f"{dialect.join_keyword(join)} {relations[joined.name]} AS {quote(join.alias, dialect)} ON " + " AND ".join(on)
            + (f"\nWHERE {' AND '.join(closed)}" if closed else ""))


def expression_sql(join: Join, dialect: Dialect = SPARK) -> str:
    """A key expression with its `alias.column` references quoted for `dialect` (the rest is
    written as declared: Spark SQL, which PostgreSQL shares for common functions)."""
    assert join.key is not None
    return "(" + rewrite_references(join.key, lambda alias, column: quote_qualified(alias, column, dialect=dialect)) + ")"


def _join_pairs(pipeline: Pipeline, view: View, join: Join, keys: list[str], dialect: Dialect) -> list[tuple[str, str]]:
    """(joined column, what it equals) per key column: the parent's fk columns, or the view's key."""
    target = pipeline.source(join.table)
    if join.is_primary_key_join:
        lefts = keys
    else:
        _, fk = pipeline.join_relation(view, join)
        lefts = [quote_qualified(join.parent_alias, c, dialect=dialect) for c in fk.columns]
    return [(quote_qualified(join.alias, pk, dialect=dialect), left) for pk, left in zip(target.primary_key, lefts)]


def _coalesced_keys(keys: list[str], alias: str, target: Source, dialect: Dialect) -> list[str]:
    """After an outer join a row may come from either side: its key is the first one set."""
    return [f"COALESCE({key}, {quote_qualified(alias, pk, dialect=dialect)})" for key, pk in zip(keys, target.primary_key)]


def _select_items(view: View, base: Source, keys: list[str], dialect: Dialect) -> list[tuple[str, str]]:
    """(output column, expression): a base key column reads the (possibly coalesced) key."""
    items = []
    for col in view.columns:
        if col.alias == view.base and col.column in base.primary_key:
            expr = keys[base.primary_key.index(col.column)]
        else:
            expr = quote_qualified(col.alias, col.column, dialect=dialect)
        items.append((col.name, expr))
    return items
