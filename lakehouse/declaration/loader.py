"""Loading and validating a pipeline file: every problem at once, with file, line and field."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from lakehouse.declaration.expressions import column_references
from lakehouse.declaration.located import Located, Problems
from lakehouse.declaration.model import (
    DECIMAL,
    IDENTIFIER,
    JOIN_TYPES,
    PK_JOIN_TYPES,
    EXPRESSION_JOIN_TYPES,
    WINDOW_JOIN_TYPES,
    REPLICA_IDENTITIES,
    SEQUENCE_RULES,
    SIMPLE_TYPES,
    SOURCE_KINDS,
    STARTING_OFFSETS,
    TRIGGERS,
    REFRESH_MODES,
    CONTINUOUS_SCHEDULES,
    STREAM_STAGES,
    RULE_KINDS,
    ROW_RULE_KINDS,
    RULE_SEVERITIES,
    Column,
    ForeignKey,
    Rule,
    Join,
    KafkaSettings,
    Options,
    Pipeline,
    Source,
    TableNames,
    View,
    ViewColumn,
    Window,
)
from lakehouse.errors import PipelineConfigError
from lakehouse.kafka import only_references, option_problems, reference_problems

# --------------------------------------------------------------------------- validation helpers


def _mapping(value: Any, path: str, problems: Problems, required: bool = True) -> dict[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        problems.add(path, f"expected a mapping, got {_kind(value)}")
        return {}
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number"}.get(
        type(value), type(value).__name__
    ) + (f" {value!r}" if isinstance(value, (str, int, float)) and not isinstance(value, bool) else "")


def _unknown_keys(values: dict[str, Any], allowed: tuple[str, ...], path: str, problems: Problems) -> None:
    for key in values:
        if key not in allowed:
            problems.add(_join(path, str(key)), f"unknown field {key!r}; expected one of: {', '.join(allowed)}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _identifier(value: Any, path: str, problems: Problems, what: str = "name") -> str | None:
    if not isinstance(value, str) or not IDENTIFIER.match(value):
        problems.add(path, f"{what} must be a plain identifier (letters, digits, _; not starting with a digit), got {_kind(value)}")
        return None
    return value


def _choice(values: dict[str, Any], key: str, choices: tuple[str, ...], default: str, path: str, problems: Problems) -> str:
    value = values.get(key, default)
    if value not in choices:
        problems.add(_join(path, key), f"expected one of {', '.join(choices)}, got {_kind(value)}")
        return default
    return value


def _int(values: dict[str, Any], key: str, default: int, path: str, problems: Problems, minimum: int = 0) -> int:
    value = values.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        problems.add(_join(path, key), f"expected a whole number >= {minimum}, got {_kind(value)}")
        return default
    return value


def _name_list(value: Any, path: str, problems: Problems, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        problems.add(path, f"expected a non-empty list of {what}, got {_kind(value)}")
        return ()
    names = [_identifier(v, f"{path}[{i}]", problems, what) for i, v in enumerate(value)]
    return tuple(n for n in names if n)


def _column_type(value: Any, path: str, problems: Problems) -> str | None:
    text = value.strip().lower() if isinstance(value, str) else None
    if text in SIMPLE_TYPES:
        return text
    match = DECIMAL.match(text or "")
    if match and 0 < int(match.group(1)) <= 38 and int(match.group(2)) <= int(match.group(1)):
        return f"decimal({int(match.group(1))},{int(match.group(2))})"
    problems.add(path, f"expected a column type ({', '.join(SIMPLE_TYPES)}, decimal(p,s)), got {_kind(value)}")
    return None


# --------------------------------------------------------------------------- sections


def _kafka(raw: Any, problems: Problems, pipeline_name: str) -> KafkaSettings:
    path = "kafka"
    values = _mapping(raw, path, problems, required=False)
    _unknown_keys(values, ("topic_prefix", "source_schema", "bootstrap_servers", "starting_offsets", "max_offsets_per_trigger", "options"), path, problems)
    prefix = values.get("topic_prefix", pipeline_name)
    if not isinstance(prefix, str) or not re.match(r"^[A-Za-z0-9._-]+$", prefix):
        problems.add(_join(path, "topic_prefix"), f"expected a Kafka topic prefix (letters, digits, . _ -), got {_kind(prefix)}")
        prefix = pipeline_name
    schema = _identifier(values.get("source_schema", "public"), _join(path, "source_schema"), problems, "source schema") or "public"
    bootstrap = values.get("bootstrap_servers")
    if isinstance(bootstrap, str) and "${" in bootstrap:  # a reference, resolved when a job starts
        wrong = reference_problems(bootstrap) or ([] if only_references(bootstrap) else ["expected host:port[,host:port...] or a reference alone"])
        for problem in wrong:
            problems.add(_join(path, "bootstrap_servers"), problem)
    elif bootstrap is not None and not (isinstance(bootstrap, str) and re.match(r"^[^\s,]+:\d+(,[^\s,]+:\d+)*$", bootstrap)):
        problems.add(_join(path, "bootstrap_servers"), f"expected host:port[,host:port...] or a ${{env:NAME}} / ${{secret:scope/key}} reference, got {_kind(bootstrap)}")
        bootstrap = None
    return KafkaSettings(
        topic_prefix=prefix,
        source_schema=schema,
        bootstrap_servers=bootstrap,
        starting_offsets=_choice(values, "starting_offsets", STARTING_OFFSETS, "earliest", path, problems),
        max_offsets_per_trigger=_int(values, "max_offsets_per_trigger", 200_000, path, problems, minimum=1),
        options=_kafka_options(values.get("options"), _join(path, "options"), problems),
    )


def _kafka_options(raw: Any, path: str, problems: Problems) -> tuple[tuple[str, str], ...]:
    """`kafka.options`: client option -> text (numbers and booleans as Kafka writes them).
    Problems never quote a value: it may be a secret written in by mistake."""
    values = _mapping(raw, path, problems, required=False)
    options = []
    for key, value in values.items():
        where = _join(path, str(key))
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, int):
            value = str(value)
        if not isinstance(value, str):
            problems.add(where, f"expected a text, number or boolean, got {type(value).__name__ if value is not None else 'nothing (null)'}")
            continue
        found = option_problems(str(key), value)
        for problem in found:
            problems.add(where, problem)
        if not found:
            options.append((str(key), value))
    return tuple(sorted(options))


def _tables(raw: Any, problems: Problems, pipeline_name: str) -> TableNames:
    path = "tables"
    values = _mapping(raw, path, problems, required=False)
    _unknown_keys(values, ("catalog", "bronze_schema", "silver_schema", "gold_schema", "analyst_schema", "quality_schema"), path, problems)
    catalog = values.get("catalog")
    if catalog is not None:
        catalog = _identifier(catalog, _join(path, "catalog"), problems, "catalog")
    names = {}
    for layer in ("bronze", "silver", "gold", "quality"):
        key = f"{layer}_schema"
        names[key] = _identifier(values.get(key, f"{pipeline_name}_{layer}"), _join(path, key), problems, "schema") or layer
    analyst = values.get("analyst_schema")
    if analyst is not None:
        analyst = _identifier(analyst, _join(path, "analyst_schema"), problems, "schema")
        if analyst in names.values():
            problems.add(_join(path, "analyst_schema"), f"the analyst views need a schema of their own, not {analyst!r} (another layer's)")
    return TableNames(catalog=catalog, analyst_schema=analyst, **names)


def _options(raw: Any, problems: Problems) -> Options:
    path = "options"
    values = _mapping(raw, path, problems, required=False)
    _unknown_keys(
        values,
        ("history_retention_days", "late_grace_days", "trigger", "processing_time", "gold_refresh",
         "gold_incremental_overhead_rows", "intervals", "continuous", "time_travel_days"),
        path, problems,
    )
    processing_time = _interval(values.get("processing_time", "10 seconds"), _join(path, "processing_time"), problems)
    stage_intervals = _mapping(values.get("intervals"), _join(path, "intervals"), problems, required=False)
    _unknown_keys(stage_intervals, STREAM_STAGES, _join(path, "intervals"), problems)
    intervals = {
        stage: _interval(value, _join(_join(path, "intervals"), stage), problems)
        for stage, value in stage_intervals.items() if stage in STREAM_STAGES
    }
    return Options(
        history_retention_days=_int(values, "history_retention_days", 3650, path, problems, minimum=1),
        late_grace_days=_int(values, "late_grace_days", 30, path, problems, minimum=0),
        trigger=_choice(values, "trigger", TRIGGERS, "available_now", path, problems),
        processing_time=processing_time,
        gold_refresh=_choice(values, "gold_refresh", REFRESH_MODES, "auto", path, problems),
        gold_incremental_overhead_rows=_int(
            values, "gold_incremental_overhead_rows", Options.gold_incremental_overhead_rows, path, problems, minimum=0
        ),
        intervals=intervals,
        continuous=_choice(values, "continuous", CONTINUOUS_SCHEDULES, Options.continuous, path, problems),
        # Delta refuses VACUUM below 7 days (a stream or reader may still need the files)
        time_travel_days=_int(values, "time_travel_days", 7, path, problems, minimum=7),
    )


def _interval(value: Any, where: str, problems: Problems) -> str:
    """A processing-time interval such as '10 seconds' (the default when it is not one)."""
    if not isinstance(value, str) or not re.match(r"^\d+\s+(second|seconds|minute|minutes)$", value):
        problems.add(where, f"expected an interval such as '10 seconds', got {_kind(value)}")
        return "10 seconds"
    return value


_SOURCE_FIELDS = ("topic", "primary_key", "columns", "sequence", "kind", "replica_identity", "foreign_keys", "description", "expectations")


def _rules(raw: Any, path: str, columns: tuple[str, ...], problems: Problems, on_source: bool) -> tuple[Rule, ...]:
    """`expectations:` of a source (its columns) or a view (its output columns): a list of
    `{name, <kind>: <argument>, severity: warn|fail|quarantine, description}` (quarantine: a
    source's rule judged on one change at a time)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.add(path, f"expected a list of rules such as {{name: email_set, not_null: email}}, got {_kind(raw)}")
        return ()
    rules: list[Rule] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        values = _mapping(item, where, problems)
        if not values:
            continue
        _unknown_keys(values, ("name", "severity", "description", *RULE_KINDS), where, problems)
        name = _identifier(values.get("name"), _join(where, "name"), problems, "rule name")
        if name in seen:
            problems.add(_join(where, "name"), f"rule {name!r} is declared twice on this table")
        kinds = [k for k in RULE_KINDS if k in values]
        if len(kinds) != 1:
            problems.add(where, f"expected exactly one of {', '.join(RULE_KINDS)}, got {', '.join(kinds) or 'none'}")
            continue
        severity = _choice(values, "severity", RULE_SEVERITIES, "fail", where, problems)
        if severity == "quarantine" and not on_source:
            problems.add(_join(where, "severity"), "quarantine holds a source's changes out of silver: on a view use warn or fail")
        elif severity == "quarantine" and kinds[0] not in ROW_RULE_KINDS:
            problems.add(_join(where, "severity"), f"a quarantine rule judges one change at a time: its kind must be one of "
                         f"{', '.join(ROW_RULE_KINDS)}, not {kinds[0]} (use warn or fail for it)")
        rule = _rule(kinds[0], values[kinds[0]], _join(where, kinds[0]), columns, problems)
        if rule is not None and name:
            seen.add(name)
            rules.append(replace(rule, name=name, severity=severity,
                                 description=_description(values.get("description"), _join(where, "description"), problems)))
    return tuple(rules)


def _rule(kind: str, arg: Any, where: str, columns: tuple[str, ...], problems: Problems) -> Rule | None:
    """One rule's argument, checked against the table's columns."""

    def column(value: Any, at: str) -> str | None:
        if not isinstance(value, str) or value not in columns:
            problems.add(at, f"expected a column of this table ({', '.join(columns)}), got {_kind(value)}")
            return None
        return value

    def number(value: Any, at: str) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.add(at, f"expected a number, got {_kind(value)}")
            return None
        return value

    if kind == "not_null":
        col = column(arg, where)
        return Rule("", kind, columns=(col,)) if col else None
    if kind == "unique":
        names = _name_list(arg, where, problems, "column names")
        found = [column(n, f"{where}[{i}]") for i, n in enumerate(names)]
        return Rule("", kind, columns=tuple(found)) if names and all(found) else None  # type: ignore[arg-type]
    if kind in ("accepted_values", "range", "regex", "row_count"):
        spec = _mapping(arg, where, problems)
        if not spec:
            return None
        allowed = {"accepted_values": ("column", "values"), "range": ("column", "min", "max"),
                   "regex": ("column", "pattern"), "row_count": ("min", "max")}[kind]
        _unknown_keys(spec, allowed, where, problems)
        col = column(spec.get("column"), _join(where, "column")) if "column" in allowed else None
        if kind == "accepted_values":
            values = spec.get("values")
            if not isinstance(values, list) or not values:
                problems.add(_join(where, "values"), f"expected a non-empty list of values, got {_kind(values)}")
                return None
            return Rule("", kind, columns=(col,), values=tuple(values)) if col else None
        if kind == "regex":
            pattern = spec.get("pattern")
            if not isinstance(pattern, str) or not pattern:
                problems.add(_join(where, "pattern"), f"expected a regular expression, got {_kind(pattern)}")
                return None
            try:
                re.compile(pattern)
            except re.error as exc:
                problems.add(_join(where, "pattern"), f"not a valid regular expression: {exc}")
                return None
            return Rule("", kind, columns=(col,), pattern=pattern) if col else None
        low, high = number(spec.get("min"), _join(where, "min")), number(spec.get("max"), _join(where, "max"))
        if low is None and high is None:
            problems.add(where, "expected min, max or both")
            return None
        if low is not None and high is not None and low > high:
            problems.add(where, f"min {low} is above max {high}")
            return None
        if kind == "range" and not col:
            return None
        return Rule("", kind, columns=(col,) if col else (), minimum=low, maximum=high)
    # row_condition, sql: Spark SQL, checked when the quality run asks Spark for the offending rows
    if not isinstance(arg, str) or not arg.strip():
        problems.add(where, f"expected Spark SQL text, got {_kind(arg)}")
        return None
    if kind == "sql" and "{table}" not in arg:
        problems.add(where, "the query must read this table as {table} (and may join others by name)")
        return None
    return Rule("", kind, condition=arg.strip()) if kind == "row_condition" else Rule("", kind, query=arg.strip())


def _long_form(value: Any, key: str, path: str, problems: Problems) -> tuple[Any, str | None]:
    """A column's value and description: the short form is the value alone, the long form
    `{<key>: value, description: ...}` (a source column's type, a view column's `from`)."""
    if not isinstance(value, dict):
        return value, None
    _unknown_keys(value, (key, "description"), path, problems)
    return value.get(key), _description(value.get("description"), f"{path}.description", problems)


def _description(value: Any, path: str, problems: Problems) -> str | None:
    """A description for analysts (a table or column comment): text, one paragraph."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        problems.add(path, f"expected a description (text), got {_kind(value)}")
        return None
    return " ".join(value.split())


def _source(name: str, raw: Any, kafka: KafkaSettings, problems: Problems) -> Source | None:
    path = f"sources.{name}"
    values = _mapping(raw, path, problems)
    if not values:
        return None
    _unknown_keys(values, _SOURCE_FIELDS, path, problems)
    columns: list[Column] = []
    declared: set[str] = set()  # names with a bad type still count, so one mistake reports once
    raw_columns = values.get("columns")
    if not isinstance(raw_columns, dict) or not raw_columns:
        problems.add(_join(path, "columns"), f"expected a mapping of column name to type, got {_kind(raw_columns)}")
    else:
        for col_name, col_type in raw_columns.items():
            col_path = f"{path}.columns.{col_name}"
            ident = _identifier(col_name, col_path, problems, "column name")
            col_type, description = _long_form(col_type, "type", col_path, problems)
            typ = _column_type(col_type, col_path, problems)
            if ident:
                declared.add(ident)
            if ident and typ:
                columns.append(Column(ident, typ, description))
    known = declared
    if "primary_key" not in values:
        problems.add(_join(path, "primary_key"), "missing: every source needs its primary key columns, e.g. [id]")
        primary_key: tuple[str, ...] = ()
    else:
        primary_key = _name_list(values["primary_key"], _join(path, "primary_key"), problems, "column names")
    for i, col in enumerate(primary_key):
        if known and col not in known:
            problems.add(f"{path}.primary_key[{i}]", f"primary key column {col!r} is not a column of {name!r} (columns: {', '.join(sorted(known))})")
    if len(set(primary_key)) != len(primary_key):
        problems.add(_join(path, "primary_key"), "a primary key column is listed twice")
    if values.get("kind") == "global" and len(primary_key) > 1:
        problems.add(_join(path, "primary_key"), "a global table is joined on one key expression: its primary key must be one column")
    topic = values.get("topic", f"{kafka.topic_prefix}.{kafka.source_schema}.{name}")
    if not isinstance(topic, str) or not re.match(r"^[A-Za-z0-9._-]+$", topic):
        problems.add(_join(path, "topic"), f"expected a Kafka topic name, got {_kind(topic)}")
    foreign_keys: list[ForeignKey] = []
    for fk_name, fk_raw in _mapping(values.get("foreign_keys"), _join(path, "foreign_keys"), problems, required=False).items():
        fk_path = f"{path}.foreign_keys.{fk_name}"
        ident = _identifier(fk_name, fk_path, problems, "foreign key name")
        fk_values = _mapping(fk_raw, fk_path, problems)
        if not fk_values:
            continue
        _unknown_keys(fk_values, ("columns", "references"), fk_path, problems)
        fk_columns = _name_list(fk_values.get("columns"), f"{fk_path}.columns", problems, "column names")
        for i, col in enumerate(fk_columns):
            if known and col not in known:
                problems.add(f"{fk_path}.columns[{i}]", f"foreign key column {col!r} is not a column of {name!r} (columns: {', '.join(sorted(known))})")
        references = _identifier(fk_values.get("references"), f"{fk_path}.references", problems, "referenced source")
        if ident and fk_columns and references:
            foreign_keys.append(ForeignKey(ident, fk_columns, references))
    return Source(
        name=name,
        topic=topic if isinstance(topic, str) else "",
        primary_key=primary_key,
        columns=tuple(columns),
        sequence=_choice(values, "sequence", SEQUENCE_RULES, "postgres", path, problems),
        kind=_choice(values, "kind", SOURCE_KINDS, "table", path, problems),
        replica_identity=_choice(values, "replica_identity", REPLICA_IDENTITIES, "default", path, problems),
        foreign_keys=tuple(foreign_keys),
        description=_description(values.get("description"), _join(path, "description"), problems),
        rules=_rules(values.get("expectations"), _join(path, "expectations"), tuple(c.name for c in columns), problems, on_source=True),
    )


def _check_references(sources: dict[str, Source], problems: Problems) -> None:
    """Every foreign key names a declared source and matches its primary key's arity and types."""
    for src in sources.values():
        for fk in src.foreign_keys:
            path = f"sources.{src.name}.foreign_keys.{fk.name}"
            target = sources.get(fk.references)
            if target is None:
                problems.add(f"{path}.references", f"references unknown source {fk.references!r} (declared: {', '.join(sorted(sources))})")
                continue
            if len(fk.columns) != len(target.primary_key):
                problems.add(f"{path}.columns", f"has {len(fk.columns)} column(s) but {target.name!r}'s primary key has {len(target.primary_key)} ({', '.join(target.primary_key)})")
                continue
            for col, pk_col in zip(fk.columns, target.primary_key):
                if col in src.column_names and pk_col in target.column_names:
                    left, right = src.column(col).type, target.column(pk_col).type
                    if left != right:
                        problems.add(f"{path}.columns", f"column {col!r} is {left} but {target.name}.{pk_col} is {right}; a join needs the same type")


def _view(name: str, raw: Any, sources: dict[str, Source], problems: Problems) -> View | None:
    path = f"views.{name}"
    values = _mapping(raw, path, problems)
    if not values:
        return None
    _unknown_keys(values, ("base", "joins", "columns", "description", "expectations", "as_of"), path, problems)
    base = _identifier(values.get("base"), _join(path, "base"), problems, "base source")
    if base is None:
        return None
    if base not in sources:
        problems.add(_join(path, "base"), f"unknown source {base!r} (declared: {', '.join(sorted(sources))})")
        return None
    windowed = any(isinstance(j, dict) and "window" in j for j in values.get("joins") or [] if isinstance(values.get("joins"), list))
    temporal = sources[base].is_event_stream and not windowed  # a windowed view times its events in `window`
    if windowed and "as_of" in values:
        problems.add(_join(path, "as_of"), "a windowed view times its events in its join's `window.time`, not `as_of`")
    as_of = _as_of_column(values, path, sources[base], temporal, problems) if not (windowed and "as_of" in values) else None
    alias_tables: dict[str, str] = {base: base}
    joins: list[Join] = []
    raw_joins = values.get("joins", [])
    if not isinstance(raw_joins, list):
        problems.add(_join(path, "joins"), f"expected a list of joins, got {_kind(raw_joins)}")
        raw_joins = []
    for i, raw_join in enumerate(raw_joins):
        if joins and joins[0].kind == "window":  # one declared before this one: the view's only join
            problems.add(f"{path}.joins[{i}]", f"a windowed join ({joins[0].alias}) pairs two events sources and must be "
                                               "the view's only join")
            break
        join = _view_join(f"{path}.joins[{i}]", raw_join, alias_tables, sources, problems)
        if join:
            joins.append(join)
            alias_tables[join.alias] = join.table
    columns: list[ViewColumn] = []
    raw_columns = values.get("columns")
    if not isinstance(raw_columns, dict) or not raw_columns:
        problems.add(_join(path, "columns"), f"expected a mapping of output column to alias.column, got {_kind(raw_columns)}")
    else:
        for out_name, ref in raw_columns.items():
            col_path = f"{path}.columns.{out_name}"
            if not _identifier(out_name, col_path, problems, "output column"):
                continue
            ref, description = _long_form(ref, "from", col_path, problems)
            if not isinstance(ref, str) or ref.count(".") != 1:
                problems.add(col_path, f"expected alias.column (e.g. {base}.{sources[base].primary_key[0] if sources[base].primary_key else 'id'}), got {_kind(ref)}")
                continue
            alias, column = ref.split(".")
            if alias not in alias_tables:
                problems.add(col_path, f"unknown alias {alias!r} (this view has: {', '.join(alias_tables)})")
            elif column not in sources[alias_tables[alias]].column_names:
                problems.add(col_path, f"{alias_tables[alias]!r} has no column {column!r} (columns: {', '.join(sources[alias_tables[alias]].column_names)})")
            else:
                columns.append(ViewColumn(out_name, alias, column, description))
    for pk_col in sources[base].primary_key:
        if not any(c.alias == base and c.column == pk_col for c in columns):
            problems.add(_join(path, "columns"), f"must select the base table's primary key column {base}.{pk_col} (gold rows are keyed by it)")
    for join in joins:
        if join.kind == "window":
            for pk_col in sources[join.table].primary_key:
                if not any(c.alias == join.alias and c.column == pk_col for c in columns):
                    problems.add(_join(path, "columns"), f"must select the joined events' primary key column {join.alias}.{pk_col} "
                                                         "(a windowed view's rows are keyed by both events)")
    if temporal:
        for i, join in enumerate(joins):
            if join.is_primary_key_join:
                problems.add(f"{path}.joins[{i}]", f"an as-of view (its base {base!r} is an events source) joins through foreign keys "
                                                   "or global keys, each as of the event's time; a primary-key join is not supported here")
    return View(
        name=name, base=base, joins=tuple(joins), columns=tuple(columns), temporal=temporal, as_of=as_of,
        description=_description(values.get("description"), _join(path, "description"), problems),
        rules=_rules(values.get("expectations"), _join(path, "expectations"), tuple(c.name for c in columns), problems, on_source=False),
    )


def _as_of_column(values: dict, path: str, base: Source, temporal: bool, problems: Problems) -> str | None:
    """`as_of: <timestamp column of the base>`: the time an as-of view looks its joins up at
    (default: the event's commit time). Only a view based on an events source has one."""
    if "as_of" not in values:
        return None
    where = _join(path, "as_of")
    if not temporal:
        problems.add(where, f"only a view based on an events source is joined as of a time; {base.name!r} is kind {base.kind}")
        return None
    return _event_time(values["as_of"], base, where, problems, "the as-of time")


def _view_join(path: str, raw: Any, alias_tables: dict[str, str], sources: dict[str, Source], problems: Problems) -> Join | None:
    values = _mapping(raw, path, problems)
    if not values:
        return None
    _unknown_keys(values, ("alias", "via", "table", "on", "key", "type", "window"), path, problems)
    alias = _identifier(values.get("alias"), f"{path}.alias", problems, "alias")
    if alias is None:
        return None
    if alias in alias_tables:
        problems.add(f"{path}.alias", f"alias {alias!r} is already used in this view")
        return None
    if "via" in values:
        via = values["via"]
        if not isinstance(via, str) or via.count(".") != 1:
            problems.add(f"{path}.via", f"expected <alias>.<foreign key name>, got {_kind(via)}")
            return None
        parent, fk_name = via.split(".")
        if parent not in alias_tables:
            problems.add(f"{path}.via", f"unknown alias {parent!r}; a join can follow the base or an earlier join ({', '.join(alias_tables)})")
            return None
        parent_source = sources[alias_tables[parent]]
        fk = next((f for f in parent_source.foreign_keys if f.name == fk_name), None)
        if fk is None:
            declared = ", ".join(f.name for f in parent_source.foreign_keys) or "none"
            problems.add(f"{path}.via", f"source {parent_source.name!r} declares no foreign key {fk_name!r} (declared: {declared})")
            return None
        if fk.references not in sources:
            return None  # reported on the source
        join_type = _choice(values, "type", JOIN_TYPES, "inner", path, problems)
        return Join(alias=alias, table=fk.references, type=join_type, parent_alias=parent, foreign_key=fk.name)
    if values.get("on") == "primary_key":
        table = _joined_table(values, path, sources, problems)
        if table is None:
            return None
        base = next(iter(alias_tables))
        if len(sources[table].primary_key) != len(sources[base].primary_key):
            problems.add(f"{path}.table", f"a primary-key join needs {table!r} and {base!r} to have keys of the same arity")
            return None
        types = [(sources[table].column(a).type, sources[base].column(b).type) for a, b in zip(sources[table].primary_key, sources[base].primary_key)
                 if a in sources[table].column_names and b in sources[base].column_names]
        if any(mine != theirs for mine, theirs in types):
            problems.add(f"{path}.table", f"a primary-key join needs keys of the same type: {table!r} has "
                                          f"{', '.join(t for t, _ in types)}, {base!r} has {', '.join(t for _, t in types)}")
            return None
        join_type = _choice(values, "type", PK_JOIN_TYPES, "inner", path, problems)
        return Join(alias=alias, table=table, type=join_type, parent_alias=base, foreign_key=None)
    if "key" in values:
        return _expression_join(path, values, alias, alias_tables, sources, problems)
    if "window" in values:
        return _window_join(path, values, alias, alias_tables, sources, problems)
    problems.add(path, "a join needs `via: <alias>.<foreign key>`, or `table: <source>` with `on: primary_key`, with "
                       "`key: <expression>` (a global table) or with `window:` (two events sources)")
    return None


def _expression_join(path: str, values: dict, alias: str, alias_tables: dict[str, str], sources: dict[str, Source],
                     problems: Problems) -> Join | None:
    """`{alias, table: <global source>, key: <expression of one earlier alias>, type: inner|left}`.
    The expression's type is checked against the key's when a job starts (it needs Spark's analyzer)."""
    table = _joined_table(values, path, sources, problems)
    if table is None:
        return None
    if sources[table].kind != "global":
        problems.add(f"{path}.table", f"a join on a key expression reads a global table (kind: global); {table!r} is kind {sources[table].kind}")
        return None
    key = values.get("key")
    if not isinstance(key, str) or not key.strip():
        problems.add(f"{path}.key", f"expected a Spark SQL expression of an earlier alias, e.g. upper(payments.method), got {_kind(key)}")
        return None
    refs = column_references(key)
    if not refs:
        problems.add(f"{path}.key", "the expression reads no column: name the columns it reads as <alias>.<column>")
        return None
    read = list(dict.fromkeys(a for a, _ in refs))
    for a, column in refs:
        if a not in alias_tables:
            problems.add(f"{path}.key", f"{a}.{column}: {a!r} is not an earlier alias of this view ({', '.join(alias_tables)})")
            return None
        if column not in sources[alias_tables[a]].column_names:
            problems.add(f"{path}.key", f"{a}.{column}: {alias_tables[a]!r} has no column {column!r} (columns: {', '.join(sources[alias_tables[a]].column_names)})")
            return None
    if len(read) > 1:
        problems.add(f"{path}.key", f"the expression reads {', '.join(read)}: a key expression reads one earlier alias")
        return None
    join_type = _choice(values, "type", EXPRESSION_JOIN_TYPES, "inner", path, problems)
    return Join(alias=alias, table=table, type=join_type, parent_alias=read[0], key=key)


_DURATION = re.compile(r"^(\d+)\s+(second|seconds|minute|minutes|hour|hours|day|days)$")
_DURATION_UNITS = {"second": "seconds", "minute": "minutes", "hour": "hours", "day": "days"}


def _duration(values: dict, key: str, path: str, problems: Problems) -> timedelta:
    """A window's duration such as '7 days' or '30 minutes' (0 when absent)."""
    value = values.get(key, "0 seconds")
    match = _DURATION.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        problems.add(_join(path, key), f"expected a duration such as '7 days', '2 hours' or '0 seconds', got {_kind(value)}")
        return timedelta(0)
    unit = match.group(2).rstrip("s") if match.group(2) != "seconds" else "second"
    return timedelta(**{_DURATION_UNITS[unit]: int(match.group(1))})


def _event_time(column: Any, source: Source, where: str, problems: Problems, what: str = "an event's time") -> str | None:
    """A timestamp column of an events source that times its events (None, reported, when bad)."""
    if not isinstance(column, str) or column not in source.column_names:
        problems.add(where, f"expected a timestamp column of {source.name!r} ({', '.join(source.column_names)}), got {_kind(column)}")
        return None
    if source.column(column).type != "timestamp":
        problems.add(where, f"{source.name}.{column} is {source.column(column).type}; {what} must be a timestamp column")
        return None
    return column


def _window_join(path: str, values: dict, alias: str, alias_tables: dict[str, str], sources: dict[str, Source],
                 problems: Problems) -> Join | None:
    """`{alias, table: <events source>, type: inner|left|outer, window: {on: {<joined column>: <base column>},
    before, after, grace, time: {<alias>: <timestamp column>}}}`: seed 002's windowed join."""
    table = _joined_table(values, path, sources, problems)
    if table is None:
        return None
    base = sources[next(iter(alias_tables))]
    joined = sources[table]
    if len(alias_tables) > 1:
        problems.add(path, "a windowed join pairs the base events with one other events source: it must be the view's only join")
        return None
    for source, where in ((base, "base"), (joined, "table")):
        if not source.is_event_stream:
            problems.add(f"{path}.{where}" if where == "table" else path,
                         f"a windowed join pairs two events sources; {source.name!r} is kind {source.kind}")
            return None
    if joined.name == base.name:
        problems.add(f"{path}.table", "a windowed join pairs two different events sources")
        return None
    where = _join(path, "window")
    window = _mapping(values.get("window"), where, problems)
    if not window:
        return None
    _unknown_keys(window, ("on", "before", "after", "grace", "time"), where, problems)
    on_raw = window.get("on")
    on: list[tuple[str, str]] = []
    if not isinstance(on_raw, dict) or not on_raw:
        problems.add(_join(where, "on"), f"expected a mapping of {table} column to {base.name} column, e.g. {{payment_id: id}}, got {_kind(on_raw)}")
        return None
    for mine, theirs in on_raw.items():
        at = _join(_join(where, "on"), str(mine))
        if mine not in joined.column_names:
            problems.add(at, f"{table!r} has no column {mine!r} (columns: {', '.join(joined.column_names)})")
        elif not isinstance(theirs, str) or theirs not in base.column_names:
            problems.add(at, f"expected a column of {base.name!r} ({', '.join(base.column_names)}), got {_kind(theirs)}")
        elif joined.column(mine).type != base.column(theirs).type:
            problems.add(at, f"{table}.{mine} is {joined.column(mine).type} but {base.name}.{theirs} is {base.column(theirs).type}: a join key needs one type")
        else:
            on.append((mine, theirs))
    times = _mapping(window.get("time"), _join(where, "time"), problems, required=False)
    _unknown_keys(times, (base.name, alias), _join(where, "time"), problems)
    bound = Window(
        on=tuple(on),
        before=_duration(window, "before", where, problems),
        after=_duration(window, "after", where, problems),
        grace=_duration(window, "grace", where, problems),
        base_time=_event_time(times[base.name], base, _join(_join(where, "time"), base.name), problems) if base.name in times else None,
        time=_event_time(times[alias], joined, _join(_join(where, "time"), alias), problems) if alias in times else None,
    )
    if len(on) != len(on_raw):
        return None
    join_type = _choice(values, "type", WINDOW_JOIN_TYPES, "inner", path, problems)
    return Join(alias=alias, table=table, type=join_type, parent_alias=base.name, window=bound)


def _joined_table(values: dict, path: str, sources: dict[str, Source], problems: Problems) -> str | None:
    """A join's `table:`, a declared source (None, reported, when it is not)."""
    table = _identifier(values.get("table"), f"{path}.table", problems, "table")
    if table is not None and table not in sources:
        problems.add(f"{path}.table", f"unknown source {table!r} (declared: {', '.join(sorted(sources))})")
        return None
    return table


# --------------------------------------------------------------------------- entry point


def load_pipeline(path: str | Path, catalog: str | None = None) -> Pipeline:
    """Read and validate a pipeline file; raise PipelineConfigError listing every problem.

    `catalog` (a job's --catalog, the bundle's job parameter), else `CDC_ENRICH_CATALOG`, when
    set, replaces `tables.catalog`: one file serves a local lake and each Unity Catalog target.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise PipelineConfigError(f"{file}: cannot read the pipeline file ({exc.strerror}); pass --pipeline with a valid path") from None
    pipeline = parse_pipeline(text, filename=str(file))
    origin = "--catalog" if catalog else "CDC_ENRICH_CATALOG"
    catalog = catalog or os.environ.get("CDC_ENRICH_CATALOG")
    if catalog:
        if not IDENTIFIER.match(catalog):
            raise PipelineConfigError(f"{origin}={catalog!r} is not a plain catalog name")
        pipeline = replace(pipeline, tables=replace(pipeline.tables, catalog=catalog))
    return pipeline


def parse_pipeline(text: str, filename: str = "<pipeline>") -> Pipeline:
    """Validate pipeline YAML text (see `schemas/shop/pipeline.yml` for a complete example)."""
    located = Located(text, filename)
    problems = Problems(filename, located)
    top = _mapping(located.value, "", problems)
    problems.raise_if_any()
    _unknown_keys(top, ("name", "kafka", "tables", "options", "sources", "views"), "", problems)
    name = _identifier(top.get("name"), "name", problems, "pipeline name") or "pipeline"
    kafka = _kafka(top.get("kafka"), problems, name)
    tables = _tables(top.get("tables"), problems, name)
    options = _options(top.get("options"), problems)
    raw_sources = _mapping(top.get("sources"), "sources", problems)
    if isinstance(top.get("sources"), dict) and not raw_sources:
        problems.add("sources", "declare at least one source")
    sources: dict[str, Source] = {}
    for src_name, raw in raw_sources.items():
        if _identifier(src_name, f"sources.{src_name}", problems, "source name"):
            src = _source(src_name, raw, kafka, problems)
            if src:
                sources[src_name] = src
    topics: dict[str, str] = {}
    for src in sources.values():
        if src.topic in topics:
            problems.add(f"sources.{src.name}.topic", f"topic {src.topic!r} is already read by source {topics[src.topic]!r}")
        topics[src.topic] = src.name
    _check_references(sources, problems)
    views: dict[str, View] = {}
    for view_name, raw in _mapping(top.get("views"), "views", problems, required=False).items():
        if _identifier(view_name, f"views.{view_name}", problems, "view name"):
            view = _view(view_name, raw, sources, problems)
            if view:
                views[view_name] = view
    problems.raise_if_any()
    return Pipeline(name=name, path=Path(filename), kafka=kafka, tables=tables, options=options, sources=sources, views=views)

