"""Run the pipeline's expectation suites with great-expectations and keep the results in Delta.

`run_quality` validates every table the pipeline declares (bronze per source and quarantine,
silver current per source and late changes, gold per view), with suites built by
`lakehouse.quality.suites` from the declaration, and appends one row per expectation result to
`tables.quality_results_table(pipeline)` for dashboards.

GX is used the 1.x way, but kept in memory: an *ephemeral* context (no `gx/` folder, no files
anywhere), one Spark datasource, and per table a dataframe asset, a whole-dataframe batch
definition and a ValidationDefinition. The ValidationDefinitions are run one by one rather than
through one Checkpoint: a Checkpoint passes the *same* batch parameters to all its
validations, and each table is a different DataFrame. Tables that do not exist yet are
reported as skipped, never as failures (stages are built and deployed independently).

Speed: GX turns each expectation into several metrics and each metric into Spark jobs. With
tiny tables the cost is per job, not per row, so the runner (1) caches each table once and
drops it after its validation, (2) asks for BASIC results with no unexpected-value samples
(samples cost an extra job per expectation; dashboards read counts), and (3) keeps one
validation per table, so the metrics of all its expectations resolve in one graph.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType, TimestampType

from lakehouse.declaration import Pipeline
from lakehouse.deltasql import add_columns_sql, create_table
from lakehouse.errors import UnknownNameError
from lakehouse.frames import local_frame
from lakehouse.tables import quality_results_table
from lakehouse.quality.suites import ERROR, WARNING, TableSuite, build_suites, sql_name

# GX's Spark query metrics (UnexpectedRowsExpectation) register the batch under this fixed temp
# view name, replacing any view of that name; the runner drops it afterwards so it does not
# linger in the caller's session. (The fixed name also means two validations must not run
# concurrently in one session: the runner runs them one after another.)
_GX_TEMP_VIEW = "tmp_view"
# BASIC counts without the sample of unexpected values: the samples cost one Spark job per
# expectation and the results table stores counts only.
RESULT_FORMAT: dict[str, Any] = {"result_format": "BASIC", "partial_unexpected_count": 0}
log = logging.getLogger("lakehouse.quality")

_OBSERVED_MAX = 500  # characters of an observed value or error message kept in the results table

RESULTS_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("run_at", TimestampType(), False),
        StructField("layer", StringType(), False),
        StructField("table_name", StringType(), False),
        StructField("suite", StringType(), False),
        StructField("expectation", StringType(), False),
        StructField("success", BooleanType(), False),
        StructField("severity", StringType(), False),
        StructField("observed_value", StringType(), True),
        StructField("unexpected_count", LongType(), True),
        StructField("element_count", LongType(), True),
        # added later (an older table gains them, null in its earlier rows): what dashboards group by
        StructField("pipeline", StringType(), True),
        StructField("check_name", StringType(), True),  # stable across versions, e.g. key_unique, base_not_stale
        StructField("description", StringType(), True),
        StructField("unexpected_percent", DoubleType(), True),
    ]
)


# --------------------------------------------------------------------------- report objects


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's result on one table: what the results table stores, plus the
    expectation type and check name kept apart for programmatic use (tests, alerts)."""

    layer: str
    table: str
    suite: str
    expectation_type: str
    check: str
    expectation: str  # type + kwargs summary, as stored in the results table
    success: bool
    severity: str  # 'error' | 'warning'
    observed_value: str | None
    unexpected_count: int | None
    element_count: int | None
    error: str | None = None  # set when GX raised while computing the expectation
    description: str | None = None  # what the check means, for people reading a dashboard

    @property
    def unexpected_percent(self) -> float | None:
        if self.unexpected_count is None or not self.element_count:
            return None
        return round(100.0 * self.unexpected_count / self.element_count, 4)

    def row(self, run_id: str, run_at: datetime, pipeline: str) -> tuple[Any, ...]:
        return (
            run_id,
            run_at,
            self.layer,
            self.table,
            self.suite,
            self.expectation,
            self.success,
            self.severity,
            self.observed_value,
            self.unexpected_count,
            self.element_count,
            pipeline,
            self.check,
            self.description,
            self.unexpected_percent,
        )


@dataclass(frozen=True)
class TableOutcome:
    """The validation of one table (or why it was not validated)."""

    layer: str
    table: str
    suite: str
    outcomes: tuple[ExpectationOutcome, ...] = ()
    skipped: str | None = None  # reason, when the table was not validated
    seconds: float = 0.0

    @property
    def failed(self) -> tuple[ExpectationOutcome, ...]:
        return tuple(o for o in self.outcomes if not o.success)


@dataclass(frozen=True)
class QualityReport:
    """The outcome of one quality run. `ok` is False only for failed error-severity checks."""

    run_id: str
    run_at: datetime
    results_table: str
    tables: tuple[TableOutcome, ...] = field(default_factory=tuple)
    seconds: float = 0.0
    data_docs: str | None = None  # GX Data Docs of this run (index.html), when built

    @property
    def outcomes(self) -> tuple[ExpectationOutcome, ...]:
        return tuple(o for t in self.tables for o in t.outcomes)

    @property
    def skipped(self) -> tuple[str, ...]:
        return tuple(t.table for t in self.tables if t.skipped)

    @property
    def validated(self) -> tuple[str, ...]:
        return tuple(t.table for t in self.tables if not t.skipped)

    @property
    def evaluated(self) -> int:
        return len(self.outcomes)

    @property
    def passed(self) -> int:
        return sum(1 for o in self.outcomes if o.success)

    @property
    def errors(self) -> tuple[ExpectationOutcome, ...]:
        """Failed expectations of severity error: the ones that make the run not ok."""
        return tuple(o for o in self.outcomes if not o.success and o.severity == ERROR)

    @property
    def warnings(self) -> tuple[ExpectationOutcome, ...]:
        return tuple(o for o in self.outcomes if not o.success and o.severity == WARNING)

    @property
    def failed(self) -> tuple[ExpectationOutcome, ...]:
        return tuple(o for o in self.outcomes if not o.success)

    @property
    def ok(self) -> bool:
        return not self.errors

    def render(self) -> str:
        """A compact table: per table its expectation count, failures and the failed checks."""
        status = "OK" if self.ok else "FAILED"
        head = (
            f"quality {status}: run {self.run_id}, {len(self.validated)} tables, {self.evaluated} expectations, "
            f"{len(self.errors)} failed, {_plural(len(self.warnings), 'warning')}, {len(self.skipped)} skipped "
            f"({self.seconds:.1f}s)"
        )
        rows = [("table", "expectations", "failed", "failed expectations")]
        for t in self.tables:
            if t.skipped:
                rows.append((t.table, "-", "-", f"skipped: {t.skipped}"))
                continue
            names = []
            for o in t.failed:
                note = "" if o.severity == ERROR else " [warning]"
                if o.error:
                    seen = f" -> {o.observed_value}"
                elif o.unexpected_count is not None:
                    seen = f" -> {o.unexpected_count} unexpected"
                else:
                    seen = f" -> observed {o.observed_value}" if o.observed_value is not None else ""
                names.append(f"{o.expectation}{note}{seen}")
            errors = sum(1 for o in t.failed if o.severity == ERROR)
            warned = len(t.failed) - errors
            failed = str(errors) + (f" (+{warned}w)" if warned else "")
            rows.append((t.table, str(len(t.outcomes)), failed, "; ".join(names)))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [head] + [
            f"  {r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}".rstrip() for r in rows
        ]
        lines.append(f"  results: {self.evaluated} rows in {self.results_table} (run_id {self.run_id})")
        if self.data_docs:
            lines.append(f"  data docs: {self.data_docs}")
        return "\n".join(lines)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


# --------------------------------------------------------------------------- GX plumbing


def quiet_gx() -> None:
    """Keep CLI output readable: GX logs at INFO/WARNING for routine things (and py4j chatters)."""
    for name in ("great_expectations", "py4j"):
        logging.getLogger(name).setLevel(logging.ERROR)


@contextmanager
def _query_error_logs_muted() -> Iterator[None]:
    """PySpark 4 logs every failing SQL/DataFrame query at ERROR, with the whole JVM stack, to
    its query-context loggers, even when the caller handles the exception. GX catches a failing
    check's exception and this runner reports it (first line, in the results table), so the
    log would only bury the summary; it is muted for the run and restored afterwards."""
    from pyspark.logger import PySparkLogger

    loggers = [PySparkLogger.getLogger(n) for n in ("SQLQueryContextLogger", "DataFrameQueryContextLogger")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _gx_context() -> Any:
    """An ephemeral context with progress bars off (they would write to stderr per table)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return context


def _condition_text(value: Any) -> str:
    from great_expectations.expectations.row_conditions import deserialize_row_condition

    try:
        return repr(deserialize_row_condition(value))
    except Exception:  # an unknown shape: still say something useful
        return str(value)


def expectation_summary(expectation_type: str, kwargs: dict[str, Any], meta: dict[str, Any]) -> str:
    """`type(arg=value, ...)`: readable in a dashboard cell, stable across runs.

    The SQL of an unexpected-rows check is long and not what a reader needs, so it is replaced
    by the check's name; `batch_id` is GX bookkeeping.
    """
    parts = []
    if expectation_type == "unexpected_rows_expectation":
        parts.append(f"check={meta.get('check', '?')}")
    else:
        for key, value in kwargs.items():
            if key in ("batch_id", "condition_parser") or value is None:
                continue
            if key == "row_condition":
                value = _condition_text(value)
            elif isinstance(value, (list, tuple)):
                value = "[" + ",".join(str(v) for v in value) + "]"
            parts.append(f"{key}={value}")
    return f"{expectation_type}({', '.join(parts)})"


def _severity(config: Any) -> str:
    meta = config.meta or {}
    if meta.get("severity") in (ERROR, WARNING):
        return meta["severity"]
    gx_severity = str(getattr(config, "severity", "critical")).lower()
    return ERROR if gx_severity.endswith("critical") else WARNING


def _as_int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _observed(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:_OBSERVED_MAX]


def _outcome(ts: TableSuite, result: Any, table_rows: int | None) -> ExpectationOutcome:
    config = result.expectation_config
    meta = dict(config.meta or {})
    kwargs = dict(config.kwargs)
    body = dict(result.result or {})
    error = None
    info = result.exception_info or {}
    # GX reports an exception either flat ({raised_exception, exception_message}) or keyed by
    # the metric that raised it ({metric_id: {...}}).
    candidates = [info] + [v for v in info.values() if isinstance(v, dict)]
    for candidate in candidates:
        if candidate.get("raised_exception"):
            message = str(candidate.get("exception_message") or "exception while computing the expectation")
            error = message.strip().splitlines()[0]  # Spark appends the whole plan; the first line says it
            break
    unexpected = _as_int(body.get("unexpected_count"))
    element = _as_int(body.get("element_count"))
    observed = body.get("observed_value")
    if config.type == "unexpected_rows_expectation":
        unexpected = _as_int(observed)  # its observed value is the number of offending rows
    if element is None and table_rows is not None and config.type != "expect_table_row_count_to_equal":
        element = table_rows  # table-level checks: the rows they looked at
    return ExpectationOutcome(
        layer=ts.layer,
        table=ts.table,
        suite=ts.suite.name,
        expectation_type=config.type,
        check=str(meta.get("check", config.type)),
        expectation=expectation_summary(config.type, kwargs, meta),
        success=bool(result.success) and error is None,
        severity=_severity(config),
        observed_value=_observed(f"ERROR: {error}" if error else observed),
        unexpected_count=unexpected,
        element_count=element,
        error=error,
        description=getattr(config, "description", None),
    )


def _errored(ts: TableSuite, exc: BaseException) -> tuple[ExpectationOutcome, ...]:
    """When a whole validation raised (not one metric): every expectation failed with the error."""
    message = f"{type(exc).__name__}: {exc}".splitlines()[0][:_OBSERVED_MAX]
    out = []
    for exp in ts.suite.expectations:
        meta = dict(exp.meta or {})
        kwargs = exp.configuration.kwargs
        out.append(
            ExpectationOutcome(
                layer=ts.layer,
                table=ts.table,
                suite=ts.suite.name,
                expectation_type=exp.expectation_type,
                check=str(meta.get("check", exp.expectation_type)),
                expectation=expectation_summary(exp.expectation_type, dict(kwargs), meta),
                success=False,
                severity=_severity(exp),
                observed_value=f"ERROR: {message}",
                unexpected_count=None,
                element_count=None,
                error=message,
                description=exp.description,
            )
        )
    return tuple(out)


# --------------------------------------------------------------------------- selection


def select_suites(suites: Sequence[TableSuite], tables: Iterable[str] | None) -> list[TableSuite]:
    """The suites for `tables`, named either as catalog tables (`shop_silver.orders`) or by
    layer label (`silver.orders`); an unknown name is an error listing the known ones."""
    if tables is None:
        return list(suites)
    wanted = list(tables)
    by_name = {s.table: s for s in suites} | {s.name: s for s in suites}
    unknown = [t for t in wanted if t not in by_name]
    if unknown:
        known = ", ".join(s.name for s in suites)
        raise UnknownNameError(f"unknown table(s) for quality checks: {', '.join(unknown)}; known: {known}")
    chosen = {by_name[t].table for t in wanted}
    return [s for s in suites if s.table in chosen]


# --------------------------------------------------------------------------- the run


def new_run_id(now: datetime | None = None) -> str:
    """A sortable, unique run id: UTC timestamp plus a random suffix."""
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def run_quality(
    spark: SparkSession,
    pipeline: Pipeline,
    lake: Path | None = None,
    tables: list[str] | None = None,
    run_id: str | None = None,
) -> QualityReport:
    """Validate the pipeline's tables and append the results to the quality results table.

    `lake` is accepted for symmetry with the other stages; tables are addressed by catalog
    name, so it is not needed here. `tables` restricts the run (see `select_suites`).
    `run_id` defaults to a fresh id; re-running with the same id replaces that run's rows
    (a retried job task writes its results once). With `lake`, GX's own Data Docs of the run
    are built under `<lake>/quality/data_docs/<pipeline>/` (`data_docs_folder`).
    """
    quiet_gx()
    started = time.monotonic()
    # Timezone-aware on purpose: PySpark converts a naive datetime with the Python process's
    # local zone, an aware one exactly.
    run_at = datetime.now(timezone.utc)
    fresh_id = run_id is None
    run_id = run_id or new_run_id()
    suites = select_suites(build_suites(pipeline), tables)

    import great_expectations as gx

    context = _gx_context()
    datasource = context.data_sources.add_spark(name=f"{pipeline.name}_lake", persist=False)
    table_outcomes: list[TableOutcome] = []
    try:
        with _query_error_logs_muted():
            for ts in suites:
                table_outcomes.append(_validate_table(spark, context, datasource, gx, ts))
    finally:
        spark.catalog.dropTempView(_GX_TEMP_VIEW)  # session-local, no metastore call

    report = QualityReport(
        run_id=run_id,
        run_at=run_at,
        results_table=quality_results_table(pipeline),
        tables=tuple(table_outcomes),
    )
    write_results(spark, pipeline, report, replace=not fresh_id)
    docs = build_data_docs(context, data_docs_folder(Path(lake), pipeline)) if lake is not None else None
    return QualityReport(
        run_id=report.run_id,
        run_at=report.run_at,
        results_table=report.results_table,
        tables=report.tables,
        seconds=time.monotonic() - started,
        data_docs=str(docs) if docs else None,
    )


def data_docs_folder(lake: Path, pipeline: Pipeline) -> Path:
    """Where a pipeline's Data Docs site lives: under the lake (on Databricks, the state volume)."""
    return lake / "quality" / "data_docs" / pipeline.name


def build_data_docs(context: Any, folder: Path) -> Path | None:
    """GX's Data Docs site for the validations this context ran (this run's suites and results);
    its index.html, or None when GX could not build it (logged: the results table has it all)."""
    site = {
        "class_name": "SiteBuilder",
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(folder)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
    }
    try:
        context.add_data_docs_site(site_name="cdc_enrich", site_config=site)
        context.build_data_docs(site_names=["cdc_enrich"])
    except Exception:  # noqa: BLE001 - docs are a view of results already stored
        log.warning("quality: GX Data Docs could not be built in %s", folder, exc_info=True)
        return None
    index = folder / "index.html"
    return index if index.exists() else None


_MISSING_TABLE_CONDITIONS = ("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND")


def _validate_table(spark: SparkSession, context: Any, datasource: Any, gx: Any, ts: TableSuite) -> TableOutcome:
    """Read, cache and validate one table.

    Existence is learnt from reading the table rather than from `catalog.tableExists` first:
    each metastore round trip costs (Hive/Derby locally, Unity Catalog remotely), and the
    read needs one anyway. A table that exists but cannot be read is an error, not a skip.
    """
    from pyspark.errors import AnalysisException

    began = time.monotonic()
    try:
        df: DataFrame = spark.table(ts.table)
    except AnalysisException as exc:
        if (exc.getCondition() or "") in _MISSING_TABLE_CONDITIONS:
            return TableOutcome(ts.layer, ts.table, ts.suite.name, skipped="table not found")
        return TableOutcome(ts.layer, ts.table, ts.suite.name, outcomes=_errored(ts, exc), seconds=time.monotonic() - began)
    # Read once (a local checkpoint, not a cache: Spark Connect and serverless refuse caching):
    # GX runs several actions per table and each would otherwise list and read the Delta files again.
    df = df.localCheckpoint(eager=False)
    rows = df.count()  # fills the checkpoint
    asset = datasource.add_dataframe_asset(name=ts.name)
    batch_definition = asset.add_batch_definition_whole_dataframe("all")
    suite = context.suites.add(ts.suite)
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name=ts.name, data=batch_definition, suite=suite)
    )
    try:
        result = validation.run(batch_parameters={"dataframe": df}, result_format=RESULT_FORMAT)
        outcomes = tuple(_outcome(ts, r, rows) for r in result.results)
    except Exception as exc:  # a table whose layout broke the whole validation: report, go on
        outcomes = _errored(ts, exc)
    return TableOutcome(ts.layer, ts.table, ts.suite.name, outcomes=outcomes, seconds=time.monotonic() - began)


# --------------------------------------------------------------------------- results table


def ensure_results_table(spark: SparkSession, pipeline: Pipeline) -> str:
    """Create the quality schema and results table if missing; return the table name."""
    name = quality_results_table(pipeline)
    schema = name.rsplit(".", 1)[0]
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {sql_name(schema)}")
    create_table(spark, sql_name(name), RESULTS_SCHEMA)
    have = {f.name for f in spark.table(sql_name(name)).schema.fields}
    missing = [f for f in RESULTS_SCHEMA.fields if f.name not in have]  # a table an earlier version made
    if missing:
        spark.sql(add_columns_sql(sql_name(name), missing))
    return name


def write_results(spark: SparkSession, pipeline: Pipeline, report: QualityReport, replace: bool = True) -> int:
    """Write the run's rows in one Delta commit; with `replace`, earlier rows of the same run_id
    are replaced (a retried task with the same id writes its results once).

    `replaceWhere` makes delete-and-append one atomic commit, so a dashboard never sees a run
    half-replaced. A run id minted by `run_quality` itself is new by construction: a plain
    append then does the same job without scanning the table for the predicate.
    """
    name = ensure_results_table(spark, pipeline)
    rows = [o.row(report.run_id, report.run_at, pipeline.name) for o in report.outcomes]
    writer = local_frame(spark, rows, RESULTS_SCHEMA).coalesce(1).write.format("delta")
    if replace:
        literal = report.run_id.replace("'", "''")
        writer = writer.mode("overwrite").option("replaceWhere", f"run_id = '{literal}'")
    else:
        writer = writer.mode("append")
    writer.saveAsTable(name)
    return len(rows)
