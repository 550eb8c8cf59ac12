"""Build fr_otel's Grafana dashboards and data sources (run from the repository root).

    .venv/bin/python deploy/grafana/generate.py

writes ``deploy/grafana/dashboards/{job-overview,incident,archive}.json`` and
``deploy/grafana/provisioning/datasources/datasources.yaml``. The output is checked in;
``tests/unit/test_deploy.py`` regenerates it and fails when it differs, so edit this file,
never the JSON.

The dashboards are built with grafana-foundation-sdk, Grafana's own typed builders for its
dashboard schema: the Prometheus and Tempo queries use the SDK's query builders. The SDK
ships no model for the DuckDB data source plugin (``motherduck-duckdb-datasource``), so
``DuckDBQuery`` below is a small typed data query on the SDK's generic data query
facility (``cog.variants.Dataquery``, registered with ``cog.runtime`` so that
``Dashboard.from_json`` reads it back typed).

Every attribute name comes from ``fr_otel.otel.model`` and every archive column from
``fr_otel.schema``: the helpers ``span``, ``resource``, ``label`` and ``col`` refuse any
other name, so a rename in the span model fails here (and in the test) instead of leaving
a dashboard that silently matches nothing.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, table, tempo, text, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import plugins as cogplugins
from grafana_foundation_sdk.cog import runtime as cogruntime
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as model_common
from grafana_foundation_sdk.models import dashboard as model_dashboard
from grafana_foundation_sdk.models import prometheus as model_prometheus
from grafana_foundation_sdk.models import text as model_text

from fr_otel.analysis.stragglers import arrival_query
from fr_otel.otel import model
from fr_otel.schema import ENTRY_MACROS, RECORD_SCHEMA

HERE = Path(__file__).resolve().parent
DASHBOARDS_DIR = "dashboards"
DATASOURCES_FILE = "provisioning/datasources/datasources.yaml"

# --- data sources: one definition, used by the dashboards and the provisioning file ----

PROMETHEUS = model_dashboard.DataSourceRef(type_val="prometheus", uid="fr-otel-prometheus")
TEMPO = model_dashboard.DataSourceRef(type_val="tempo", uid="fr-otel-tempo")
JAEGER = model_dashboard.DataSourceRef(type_val="jaeger", uid="fr-otel-jaeger")
DUCKDB_TYPE = "motherduck-duckdb-datasource"
DUCKDB = model_dashboard.DataSourceRef(type_val=DUCKDB_TYPE, uid="fr-otel-duckdb")

# Where compose mounts the fr_otel Parquet archive inside the Grafana container.
ARCHIVE_MOUNT = "/var/lib/fr-otel/archive"
# Jaeger's UI as the browser reaches it when deploy/compose.yaml runs locally.
JAEGER_UI = "http://localhost:16686"
TAG = "fr_otel"

# --- names: only from the span model and the schema ---------------------------------------

RESOURCE_ATTRIBUTES = tuple(key for key, _ in model.resource_attributes("job", 0))
"""The resource attributes every rank's spans carry (``model.resource_attributes``)."""


def span(name: str) -> str:
    """A TraceQL span attribute; ``name`` must be one the span model emits."""
    if name not in model.SPAN_ATTRIBUTES:
        raise ValueError(f"{name!r} is not in fr_otel.otel.model.SPAN_ATTRIBUTES")
    return f"span.{name}"


def resource(name: str) -> str:
    """A TraceQL resource attribute of the ranks' spans."""
    if name not in RESOURCE_ATTRIBUTES:
        raise ValueError(f"{name!r} is not a resource attribute of fr_otel's spans")
    return f"resource.{name}"


def label(name: str) -> str:
    """The Prometheus label the span metrics connector makes of an attribute: the
    Collector's Prometheus exporter replaces each character a legacy label name cannot
    hold (here, the dots) by an underscore."""
    if name not in model.SPAN_ATTRIBUTES and name not in RESOURCE_ATTRIBUTES:
        raise ValueError(f"{name!r} is not an attribute fr_otel emits")
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def col(name: str) -> str:
    """An archive column (``fr_otel.schema.RECORD_SCHEMA``)."""
    if name not in RECORD_SCHEMA.names:
        raise ValueError(f"{name!r} is not a column of fr_otel.schema.RECORD_SCHEMA")
    return name


# The span metrics connector's own series (namespace ``traces.span.metrics``, its
# default) as the Prometheus exporter names them, and the labels it always sets.
SPANMETRICS_NAMESPACE = "traces.span.metrics"
_METRIC_PREFIX = SPANMETRICS_NAMESPACE.replace(".", "_")
CALLS = f"{_METRIC_PREFIX}_calls_total"
DURATION_BUCKET = f"{_METRIC_PREFIX}_duration_milliseconds_bucket"
SPAN_NAME_LABEL = "span_name"  # the connector's dimension for the span name
STATUS_CODE_LABEL = "status_code"  # ... and for the status code
STATUS_ERROR = "STATUS_CODE_ERROR"
BUCKET_LABEL = "le"  # a histogram bucket's upper bound
SPANMETRICS_DIMENSIONS = (model.OP, model.PG_DESC)
"""The span attributes the dashboards expect as span metrics dimensions (the Collector
config's ``connectors.spanmetrics.dimensions``): low cardinality only."""

JOB_LABEL = label(model.SERVICE_NAME)  # spanmetrics always keeps service.name

# The incident count (``fr_otel.otel.incident``): a monotonic sum, which the exporter
# names with _total, its data points' attributes as labels.
INCIDENTS = model.INCIDENTS_METRIC.replace(".", "_") + "_total"
INCIDENT_JOB_LABEL = label(model.JOB)
INCIDENT_LABELS = tuple(
    label(name) for name in (model.INCIDENT, model.FINDING_KIND, model.FINDING_CULPRIT_RANKS)
)
OP_LABEL = label(model.OP)
GROUP_LABEL = label(model.PG_DESC)

# --- the DuckDB data source's query: typed, on the SDK's generic data query -------------


class DuckDBQuery(cogvariants.Dataquery):
    """A query of the DuckDB data source (``motherduck-duckdb-datasource``).

    Its query model is the SQL data sources' one from ``@grafana/plugin-ui``
    (``SQLQuery``): ``rawSql`` run as written in the ``code`` editor mode, returned as a
    ``table`` or a ``time_series`` frame.
    """

    def __init__(
        self,
        ref_id: str = "",
        raw_sql: str = "",
        format_val: str = "table",
        editor_mode: str = "code",
        datasource: model_dashboard.DataSourceRef | None = None,
    ) -> None:
        self.ref_id = ref_id
        self.raw_sql = raw_sql
        self.format_val = format_val
        self.editor_mode = editor_mode
        self.datasource = datasource

    def to_json(self) -> dict[str, object]:
        payload: dict[str, object] = {
            "refId": self.ref_id,
            "rawSql": self.raw_sql,
            "format": self.format_val,
            "editorMode": self.editor_mode,
        }
        if self.datasource is not None:
            payload["datasource"] = self.datasource
        return payload

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DuckDBQuery:
        datasource = data.get("datasource")
        return cls(
            ref_id=data.get("refId", ""),
            raw_sql=data.get("rawSql", ""),
            format_val=data.get("format", "table"),
            editor_mode=data.get("editorMode", "code"),
            datasource=(
                model_dashboard.DataSourceRef.from_json(datasource) if datasource else None
            ),
        )


class DuckDBQueryBuilder(cogbuilder.Builder[DuckDBQuery]):
    def __init__(self) -> None:
        self._internal = DuckDBQuery(datasource=DUCKDB)

    def build(self) -> DuckDBQuery:
        return self._internal

    def ref_id(self, ref_id: str) -> DuckDBQueryBuilder:
        self._internal.ref_id = ref_id
        return self

    def raw_sql(self, raw_sql: str) -> DuckDBQueryBuilder:
        self._internal.raw_sql = raw_sql
        return self


def register_sdk_variants() -> None:
    """Let ``Dashboard.from_json`` decode every query type the dashboards use."""
    cogplugins.register_default_plugins()
    cogruntime.register_dataquery_variant(
        cogruntime.DataqueryConfig(identifier=DUCKDB_TYPE, from_json_hook=DuckDBQuery.from_json)
    )


# --- shared pieces ----------------------------------------------------------------------


def _links() -> dash.DashboardLink:
    return (
        dash.DashboardLink("fr_otel dashboards")
        .type(model_dashboard.DashboardLinkType.DASHBOARDS)
        .tags([TAG])
        .as_dropdown(True)
        .include_vars(True)
        .keep_time(True)
    )


def _dashboard(uid: str, title: str, description: str) -> dash.Dashboard:
    return (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags([TAG])
        .timezone("browser")
        .readonly()
        .link(_links())
    )


def _promql(expr: str, legend: str, ref_id: str) -> prometheus.Dataquery:
    return (
        prometheus.Dataquery()
        .expr(expr)
        .legend_format(legend)
        .range()
        .ref_id(ref_id)
        .datasource(PROMETHEUS)
    )


def _promql_table(expr: str, ref_id: str) -> prometheus.Dataquery:
    """An instant query shown as a table: one row per series, its labels as columns."""
    return (
        prometheus.Dataquery()
        .expr(expr)
        .instant()
        .format(model_prometheus.PromQueryFormat.TABLE)
        .ref_id(ref_id)
        .datasource(PROMETHEUS)
    )


def _traceql(query: str, limit: int = 100) -> tempo.TempoQuery:
    return (
        tempo.TempoQuery()
        .ref_id("A")
        .query_type("traceql")
        .query(query)
        .limit(limit)
        .datasource(TEMPO)
    )


def _sql(sql: str) -> DuckDBQueryBuilder:
    return DuckDBQueryBuilder().ref_id("A").raw_sql(sql)


def _timeseries(panel_id: int, title: str, unit: str) -> timeseries.Panel:
    return (
        timeseries.Panel()
        .id(panel_id)
        .title(title)
        .datasource(PROMETHEUS)
        .unit(unit)
        .line_width(1)
        .fill_opacity(10)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(model_common.LegendDisplayMode.TABLE)
            .placement(model_common.LegendPlacement.RIGHT)
            .show_legend(True)
            .calcs(["mean", "max"])
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(model_common.TooltipDisplayMode.MULTI)
            .sort(model_common.SortOrder.DESCENDING)
        )
    )


def _table(panel_id: int, title: str, datasource: model_dashboard.DataSourceRef) -> table.Panel:
    return (
        table.Panel()
        .id(panel_id)
        .title(title)
        .datasource(datasource)
        .show_header(True)
        .cell_height(model_common.TableCellHeight.SM)
    )


# --- Job overview: span metrics in Prometheus ---------------------------------------------


def _selector(*extra: str) -> str:
    """The series of one job's ranks, without the analyzer's verdict spans."""
    matchers = [f'{JOB_LABEL}="$job"', f'{SPAN_NAME_LABEL}!="{model.VERDICT_SPAN_NAME}"']
    return "{" + ", ".join([*matchers, *extra]) + "}"


def job_overview() -> dash.Dashboard:
    by_op_group = f"{OP_LABEL}, {GROUP_LABEL}"
    calls = (
        f"sum by ({by_op_group}) (rate({CALLS}{_selector()}[$__rate_interval]))",
        f"{{{{{GROUP_LABEL}}}}} {{{{{OP_LABEL}}}}}",
    )
    error = f'{STATUS_CODE_LABEL}="{STATUS_ERROR}"'
    errors = (
        f"sum by ({by_op_group}) (rate({CALLS}{_selector(error)}[$__rate_interval]))",
        f"{{{{{GROUP_LABEL}}}}} {{{{{OP_LABEL}}}}}",
    )
    incidents = (
        f"max by ({', '.join(INCIDENT_LABELS)}) (max_over_time("
        f'{INCIDENTS}{{{INCIDENT_JOB_LABEL}="$job"}}[$__range]))'
    )
    latency = _timeseries(2, "Latency percentiles by op", "ms")
    for ref_id, quantile in (("A", "0.5"), ("B", "0.95"), ("C", "0.99")):
        percent = f"p{round(float(quantile) * 100)}"
        by_le_op = f"sum by ({BUCKET_LABEL}, {OP_LABEL})"
        # The spans of the last minutes where they flow (FR_OTEL_MODE=continuous), else
        # (NaN, which no comparison keeps) every span the Collector has counted: an
        # incident's spans arrive at once, and the connector's histograms start at their
        # first counts, which a rate never sees.
        latency.with_target(
            _promql(
                f"(histogram_quantile({quantile}, {by_le_op} "
                f"(rate({DURATION_BUCKET}{_selector()}[$__rate_interval]))) >= 0)"
                f" or histogram_quantile({quantile}, {by_le_op} ({DURATION_BUCKET}{_selector()}))",
                f"{percent} {{{{{OP_LABEL}}}}}",
                ref_id,
            )
        )
    return (
        _dashboard(
            "fr-otel-job-overview",
            "fr_otel: job overview",
            "Collectives of one job from the Collector's span metrics (spanmetrics connector "
            "-> Prometheus): rate by op and process group, latency percentiles, errors. "
            "Spans reach the Collector on incidents, or continuously with "
            "FR_OTEL_MODE=continuous.",
        )
        .time("now-6h", "now")
        .refresh("30s")
        .with_variable(
            dash.QueryVariable("job")
            .id("job")
            .label("job")
            .description(f"The job: the spans' {model.SERVICE_NAME}.")
            .datasource(PROMETHEUS)
            .query(f"label_values({CALLS}, {JOB_LABEL})")
            .refresh(model_dashboard.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model_dashboard.VariableSort.ALPHABETICAL_ASC)
        )
        .with_panel(
            _timeseries(1, "Collectives per second by op and group", "ops")
            .description(
                f"Spans per second, by {model.OP} and {model.PG_DESC} (span metrics calls)."
            )
            .with_target(_promql(*calls, "A"))
            .span(24)
            .height(9)
        )
        .with_panel(
            latency.description(
                "p50, p95 and p99 of span duration (enqueued to completion; work still in "
                "flight ends at the dump) over the last minutes while spans flow, else over "
                "every span of the job the Collector counted (an incident's spans arrive at "
                "once). gloo records no completion time: its spans are zero-length."
            )
            .span(12)
            .height(9)
        )
        .with_panel(
            _timeseries(3, "Errors per second by op and group", "ops")
            .description(
                f"Spans with status ERROR: work that never completed ({model.ERROR_TYPE} "
                f"{model.ERROR_TIMEOUT} or {model.ERROR_NOT_COMPLETED})."
            )
            .with_target(_promql(*errors, "A"))
            .span(12)
            .height(9)
        )
        .with_panel(
            _table(4, "Incidents", PROMETHEUS)
            .description(
                f"The job's incidents in the time range ({model.INCIDENTS_METRIC}): the "
                "recorder's declaration, its trigger as the kind, and each analysis' "
                "verdict, with the root cause's kind and culprit ranks. The alerts "
                "(deploy/prometheus/rules.yaml) fire on the same series."
            )
            .with_target(_promql_table(incidents, "A"))
            .span(24)
            .height(8)
        )
    )


# --- Incident: TraceQL over Tempo -------------------------------------------------------


def _incident_filter(*extra: str) -> str:
    return " && ".join(
        [
            f'{resource(model.JOB)} = "$job"',
            f'{span(model.INCIDENT)} = "$incident"',
            *extra,
        ]
    )


def _tempo_label_values(attribute: str) -> dict[str, object]:
    """A Tempo query variable listing an attribute's values (Grafana's Tempo variable
    editor model: ``type`` 1 is "label values")."""
    return {
        "type": 1,
        "label": attribute,
        "refId": "TempoDatasourceVariableQueryEditor-VariableQuery",
    }


def _jaeger_search_url() -> str:
    """Jaeger UI's search for the incident's spans (``tags`` is a JSON object)."""
    before, after = json.dumps({model.INCIDENT: "@"}, separators=(",", ":")).split("@")
    tags = f"{quote(before)}${{incident:percentencode}}{quote(after)}"
    return f"{JAEGER_UI}/search?service=${{job:percentencode}}&lookback=2d&limit=1500&tags={tags}"


def _tempo_variable(
    name: str, label: str, description: str, attribute: str, sort: Any
) -> dash.QueryVariable:
    """A dashboard variable listing the values Tempo has seen for ``attribute``."""
    return (
        dash.QueryVariable(name)
        .id(name)
        .label(label)
        .description(description)
        .datasource(TEMPO)
        .query(_tempo_label_values(attribute))
        .refresh(model_dashboard.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(sort)
    )


def incident() -> dash.Dashboard:
    collectives = f"{{ {_incident_filter()} }}"
    # A collective's trace holds one span per member rank, each carrying the group size:
    # the traces with fewer spans than that lack ranks. TraceQL compares an aggregate
    # only with a literal, so the panel repeats once per group size (variable pg_size).
    # Collectives only: a send or recv has a trace per rank, never a full group.
    missing = (
        "{ "
        + _incident_filter(
            f"{span(model.COLLECTIVE_SEQ_ID)} >= 0",
            f"{span(model.PG_SIZE)} = $pg_size",
        )
        + " } | count() < $pg_size"
    )
    unfinished = (
        "{ "
        + _incident_filter(
            f'{span(model.ERROR_TYPE)} =~ "{model.ERROR_TIMEOUT}|{model.ERROR_NOT_COMPLETED}"'
        )
        + f" }} | select({span(model.RANK)}, {span(model.PG_DESC)}, {span(model.OP)}, "
        f"{span(model.STATE)}, {span(model.CODE_FILE)}, {span(model.CODE_LINE)})"
    )
    verdicts = (
        "{ "
        + _incident_filter(f'name = "{model.VERDICT_SPAN_NAME}"')
        + " } | select("
        + ", ".join(
            span(a)
            for a in (
                model.FINDING_INDEX,
                model.FINDING_KIND,
                model.FINDING_ROOT_CAUSE,
                model.FINDING_CULPRIT_RANKS,
                model.FINDING_SUMMARY,
                model.FINDING_CONSEQUENCE_OF,
                model.PG_DESC,
                model.COLLECTIVE_SEQ_ID,
            )
        )
        + ")"
    )
    help_text = "\n".join(
        [
            "One trace per collective: all member ranks' spans of one collective share it,",
            "so a rank that never joined is a missing span. Pick the job and the incident",
            "(`fr-otel analyze` prints both); click a trace id to open it in Explore, or",
            "paste it into `trace_id` to see it below.",
            "",
            f"[This incident in Jaeger]({_jaeger_search_url()}) (Jaeger's search by tag; "
            "the UI of `deploy/compose.yaml`).",
        ]
    )
    return (
        _dashboard(
            "fr-otel-incident",
            "fr_otel: incident",
            "The collectives of one incident in Tempo (TraceQL): all of them, those with "
            "missing ranks, work that never completed, and the analyzer's verdicts.",
        )
        .time("now-24h", "now")
        .with_variable(
            _tempo_variable(
                "job",
                "job",
                f"Resource attribute {model.JOB}.",
                resource(model.JOB),
                model_dashboard.VariableSort.ALPHABETICAL_ASC,
            )
        )
        .with_variable(
            _tempo_variable(
                "incident",
                "incident",
                f"Span attribute {model.INCIDENT}.",
                span(model.INCIDENT),
                model_dashboard.VariableSort.ALPHABETICAL_DESC,
            )
        )
        .with_variable(
            _tempo_variable(
                "pg_size",
                "group size",
                f"Span attribute {model.PG_SIZE}: one missing-ranks panel each.",
                span(model.PG_SIZE),
                model_dashboard.VariableSort.NUMERICAL_ASC,
            )
            .multi(True)
            .include_all(True)
        )
        .with_variable(
            dash.TextBoxVariable("trace_id")
            .id("trace_id")
            .label("trace id")
            .description("A trace id (32 hex digits) from the tables, for the trace view.")
            .default_value("")
        )
        .with_panel(
            text.Panel()
            .id(1)
            .title("How to read this dashboard")
            .mode(model_text.TextMode.MARKDOWN)
            .content(help_text)
            .span(24)
            .height(5)
        )
        .with_panel(
            _table(2, "Collectives of the incident", TEMPO)
            .description(
                "Every trace with a span of this incident: one per collective, plus one per "
                "rank and point-to-point sequence number for send and recv."
            )
            .with_target(_traceql(collectives, limit=500))
            .span(12)
            .height(10)
        )
        .with_panel(
            _table(3, "Verdicts", TEMPO)
            .description(
                f"The analyzer's findings ({model.VERDICT_SPAN_NAME} spans, sent by "
                "`fr-otel export --findings`), each in the trace of its collective: the "
                "culprit ranks and whether it is the root cause."
            )
            .with_target(_traceql(verdicts))
            .span(12)
            .height(10)
        )
        .with_panel(
            _table(4, "Collectives with missing ranks (group size $pg_size)", TEMPO)
            .description(
                f"Collective traces with fewer spans than {model.PG_SIZE}: some member rank "
                "has no entry for that collective (it never got there, its dump is "
                "missing, or its ring buffer overwrote it)."
            )
            .with_target(_traceql(missing))
            .repeat("pg_size")
            .repeat_direction("h")
            .span(24)
            .height(8)
        )
        .with_panel(
            _table(5, "Work that never completed", TEMPO)
            .description(
                f"Spans with {model.ERROR_TYPE} {model.ERROR_TIMEOUT} (pending past their "
                f"timeout) or {model.ERROR_NOT_COMPLETED}, with their rank and call site."
            )
            .with_target(_traceql(unfinished, limit=500))
            .span(24)
            .height(9)
        )
        .with_panel(
            dash.Panel()
            .type("traces")
            .id(6)
            .title("Trace $trace_id")
            .options({})
            .description("One collective across its ranks: each rank is a span.")
            .datasource(TEMPO)
            .with_target(_traceql("$trace_id", limit=1))
            .span(24)
            .height(14)
        )
    )


# --- Archive: SQL over the Parquet archive with DuckDB ------------------------------------

ARCHIVE_SOURCE = (
    "read_parquet('${archive:raw}/**/*.parquet', hive_partitioning = true, "
    "hive_types_autocast = false, union_by_name = true)"
)
"""The archive as DuckDB reads it. ``:raw`` because the plugin quotes a variable as an
SQL string by default; ``hive_types_autocast = false`` keeps incident ids that look like
dates or numbers strings; ``union_by_name`` reads archives written by several versions."""

JOB_INCIDENT = f"{col('job')} = ${{job:sqlstring}} AND {col('incident')} = ${{incident:sqlstring}}"


def _not_completed() -> str:
    """Work that never completed: the span model's rule (gloo's only completion signal is
    retirement)."""
    done = (
        f"{col('state')} = 'completed' "
        f"OR ({col('backend')} = 'gloo' AND coalesce({col('retired')}, false))"
    )
    return f"NOT coalesce({done}, false)"


def _dump_time(aggregate: str) -> str:
    return f"make_timestamp({aggregate}({col('dump_time_ns')}) // 1000)"


def _sql_lines(*lines: str) -> str:
    return "\n".join(lines)


_MACRO = re.compile(r"CREATE OR REPLACE TEMP MACRO (\w+)\(([^)]*)\) AS (.+)", re.DOTALL)


def _inline_macros(sql: str) -> str:
    """``sql`` with each call of the analysis' SQL macros (``schema.ENTRY_MACROS``) written
    out: Grafana's DuckDB data source runs a panel's query on its own connection, where
    nobody created them."""
    for statement in ENTRY_MACROS:
        match = _MACRO.fullmatch(statement)
        if match is None:
            raise ValueError(f"not a macro this generator can inline: {statement!r}")
        name, params, body = match[1], [p.strip() for p in match[2].split(",")], match[3]

        def expand(call: re.Match[str], params: list[str] = params, body: str = body) -> str:
            args = [a.strip() for a in call[1].split(",")]
            if len(args) != len(params):
                raise ValueError(f"{call[0]!r}: expected {len(params)} arguments")
            values = dict(zip(params, args, strict=True))
            names = re.compile(r"\b(" + "|".join(map(re.escape, params)) + r")\b")
            return "(" + names.sub(lambda m: values[m[1]], body) + ")"

        sql = re.sub(rf"\b{name}\(([^()]*)\)", expand, sql)
    return sql


def archive() -> dash.Dashboard:
    job, incident_, rank = col("job"), col("incident"), col("rank")
    pg_desc, pg_name, seq = col("pg_desc"), col("pg_name"), col("collective_seq_id")
    incidents = _sql_lines(
        f"SELECT {job}, {incident_},",
        f"  count(DISTINCT {rank}) AS ranks,",
        "  count(*) AS entries,",
        f"  count(*) FILTER (WHERE {_not_completed()}) AS not_completed,",
        f"  {_dump_time('min')} AS first_dump,",
        f"  {_dump_time('max')} AS last_dump",
        f"FROM {ARCHIVE_SOURCE}",
        "GROUP BY ALL",
        f"ORDER BY {job}, last_dump DESC",
    )
    per_rank = _sql_lines(
        f"SELECT {rank},",
        "  count(*) AS entries,",
        f"  count(*) FILTER (WHERE NOT coalesce({col('is_p2p')}, false)) AS collectives,",
        f"  count(*) FILTER (WHERE {_not_completed()}) AS not_completed,",
        f"  max({col('record_id')}) AS last_record_id,",
        f"  any_value({col('source_format')}) AS source",
        f"FROM {ARCHIVE_SOURCE}",
        f"WHERE {JOB_INCIDENT}",
        "GROUP BY ALL",
        f"ORDER BY {rank}",
    )
    last_collective = _sql_lines(
        f"SELECT {pg_desc}, {pg_name}, {rank},",
        f"  max({seq}) AS last_seq,",
        f"  max({seq}) FILTER (WHERE {col('state')} = 'completed') AS last_completed_seq,",
        "  count(*) AS entries",
        f"FROM {ARCHIVE_SOURCE}",
        f"WHERE {JOB_INCIDENT} AND NOT coalesce({col('is_p2p')}, false)",
        "GROUP BY ALL",
        f"ORDER BY last_seq, {rank}",
    )
    unfinished = _sql_lines(
        f"SELECT {rank}, {pg_desc}, {col('op')}, {seq}, {col('p2p_seq_id')}, {col('state')},",
        f"  {col('timeout_ms')}, {col('call_site')}",
        f"FROM {ARCHIVE_SOURCE}",
        f"WHERE {JOB_INCIDENT} AND {_not_completed()}",
        f"ORDER BY {seq}, {rank}",
        "LIMIT 1000",
    )
    # the analyzer's own arrival relation (fr-otel sql's `arrival` view), on this incident
    arrival = _inline_macros(arrival_query(ARCHIVE_SOURCE, JOB_INCIDENT))
    lateness = _sql_lines(
        f"SELECT r.{rank},",
        "  count(a.lateness_ns) AS collectives,",
        "  round(median(a.lateness_ns) / 1e6, 3) AS median_lateness_ms,",
        "  round(quantile_cont(a.lateness_ns, 0.9) / 1e6, 3) AS p90_lateness_ms,",
        "  round(max(a.clock_offset_ns) / 1e6, 3) AS clock_offset_ms,",
        "  round(max(a.clock_uncertainty_ns) / 1e6, 3) AS clock_uncertainty_ms,",
        "  any_value(a.basis) AS basis",
        f"FROM (SELECT DISTINCT {rank} FROM {ARCHIVE_SOURCE} WHERE {JOB_INCIDENT}) r",
        f"LEFT JOIN ({arrival}) a ON a.rank = r.{rank}",
        f"GROUP BY r.{rank}",
        f"ORDER BY median_lateness_ms DESC NULLS LAST, r.{rank}",
    )
    return (
        _dashboard(
            "fr-otel-archive",
            "fr_otel: archive",
            "SQL over the fr_otel Parquet archive (ARCHIVE/job=J/incident=I/rank-NNNNNN.parquet)"
            " with the DuckDB data source: no Collector needed, every column of the schema.",
        )
        .time("now-7d", "now")
        .with_variable(
            dash.TextBoxVariable("archive")
            .id("archive")
            .label("archive")
            .description("The archive folder as the Grafana container sees it.")
            .default_value(ARCHIVE_MOUNT)
        )
        .with_variable(
            dash.QueryVariable("job")
            .id("job")
            .label("job")
            .datasource(DUCKDB)
            .query(f"SELECT DISTINCT {job} FROM {ARCHIVE_SOURCE} ORDER BY {job}")
            .refresh(model_dashboard.VariableRefresh.ON_DASHBOARD_LOAD)
        )
        .with_variable(
            dash.QueryVariable("incident")
            .id("incident")
            .label("incident")
            .datasource(DUCKDB)
            .query(
                f"SELECT {incident_} FROM {ARCHIVE_SOURCE} WHERE {job} = ${{job:sqlstring}} "
                f"GROUP BY {incident_} ORDER BY max({col('dump_time_ns')}) DESC"
            )
            .refresh(model_dashboard.VariableRefresh.ON_DASHBOARD_LOAD)
        )
        .with_panel(
            _table(1, "Incidents per job", DUCKDB)
            .description("Every (job, incident) in the archive, newest first within a job.")
            .with_target(_sql(incidents))
            .span(24)
            .height(8)
        )
        .with_panel(
            _table(2, "Entries per rank", DUCKDB)
            .description(
                "A rank with no row has no dump in this incident; one with far fewer "
                "entries than its peers stopped early."
            )
            .with_target(_sql(per_rank))
            .span(12)
            .height(10)
        )
        .with_panel(
            _table(3, "Last collective per rank and group", DUCKDB)
            .description(
                "The ranks whose last sequence number is lowest in a group are the ones the "
                "others wait for (the README's DuckDB query)."
            )
            .with_target(_sql(last_collective))
            .span(12)
            .height(10)
        )
        .with_panel(
            _table(4, "Entries that never completed", DUCKDB)
            .description("With the call site in the user's code, when the dump had stacks.")
            .with_target(_sql(unfinished))
            .span(24)
            .height(10)
        )
        .with_panel(
            _table(5, "Lateness per rank (arrival)", DUCKDB)
            .description(
                "How long after its group's first member each rank issued its completed "
                "collectives (clock-corrected; NCCL: its kernel's start), from the same "
                "relation as fr-otel sql's arrival view: a straggler tops the list, far "
                "above its peers. fr-otel analyze names it."
            )
            .with_target(_sql(lateness))
            .span(24)
            .height(10)
        )
    )


DASHBOARDS = {"job-overview": job_overview, "incident": incident, "archive": archive}

# --- provisioning -------------------------------------------------------------------------

_DATASOURCES_HEADER = """\
# Generated by deploy/grafana/generate.py from fr_otel.otel.model: do not edit.
# Grafana data sources for deploy/compose.yaml; the dashboards refer to these uids.
#
# The DuckDB data source is the plugin motherduck-duckdb-datasource (MotherDuck),
# installed by compose through GF_PLUGINS_PREINSTALL_SYNC from its GitHub release. It is
# unsigned: Grafana loads it only when GF_PLUGINS_ALLOW_LOADING_UNSIGNED_PLUGINS names it.
# It needs glibc (an -ubuntu Grafana image; the default Alpine one cannot run it). An
# empty path is an in-memory DuckDB: the dashboards read the Parquet archive with
# read_parquet(), so nothing else opens a DuckDB file that Grafana holds.
"""


def datasources() -> dict[str, object]:
    """The provisioning file's content."""
    trace_tags = [
        {"key": attribute, "value": label(attribute)}
        for attribute in (model.SERVICE_NAME, *SPANMETRICS_DIMENSIONS)
    ]
    return {
        "apiVersion": 1,
        "prune": True,
        "datasources": [
            {
                "name": "Prometheus",
                "type": PROMETHEUS.type_val,
                "uid": PROMETHEUS.uid,
                "access": "proxy",
                "url": "http://prometheus:9090",
                "isDefault": True,
                "editable": False,
                "jsonData": {"timeInterval": "15s"},
            },
            {
                "name": "Tempo",
                "type": TEMPO.type_val,
                "uid": TEMPO.uid,
                "access": "proxy",
                "url": "http://tempo:3200",
                "editable": False,
                "jsonData": {
                    "nodeGraph": {"enabled": True},
                    "search": {"hide": False},
                    "spanBar": {"type": "Tag", "tag": model.RANK},
                    "traceQuery": {
                        "timeShiftEnabled": True,
                        "spanStartTimeShift": "-1h",
                        "spanEndTimeShift": "1h",
                    },
                    "tracesToMetrics": {
                        "datasourceUid": PROMETHEUS.uid,
                        "spanStartTimeShift": "-10m",
                        "spanEndTimeShift": "10m",
                        "tags": trace_tags,
                        "queries": [
                            {
                                "name": "Collectives per second",
                                "query": f"sum by ({OP_LABEL}, {GROUP_LABEL}) "
                                f"(rate({CALLS}{{$__tags}}[5m]))",
                            }
                        ],
                    },
                },
            },
            {
                "name": "Jaeger",
                "type": JAEGER.type_val,
                "uid": JAEGER.uid,
                "access": "proxy",
                "url": "http://jaeger:16686",
                "editable": False,
            },
            {
                "name": "fr_otel archive (DuckDB)",
                "type": DUCKDB.type_val,
                "uid": DUCKDB.uid,
                "access": "proxy",
                "editable": False,
                "jsonData": {"path": ""},
            },
        ],
    }


# --- output -------------------------------------------------------------------------------


def render() -> dict[str, str]:
    """Every generated file: path relative to ``deploy/grafana`` -> its exact text."""
    files: dict[str, str] = {}
    for name, build in DASHBOARDS.items():
        board = build().build()
        text_ = json.dumps(board, cls=JSONEncoder, sort_keys=True, indent=2)
        files[f"{DASHBOARDS_DIR}/{name}.json"] = text_ + "\n"
    body = yaml.safe_dump(datasources(), sort_keys=False, default_flow_style=False, width=100)
    files[DATASOURCES_FILE] = _DATASOURCES_HEADER + body
    return files


def generate(out_dir: Path = HERE) -> list[Path]:
    """Write every generated file under ``out_dir`` (default: ``deploy/grafana``)."""
    written = []
    for relative, content in render().items():
        path = out_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    out_dir = Path(argv[1]) if len(argv) > 1 else HERE
    for path in generate(out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
