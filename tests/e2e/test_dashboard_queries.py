"""Every query of every shipped Grafana dashboard, run against real backends fed by a real
job: a gloo job under the recorder has an incident and sends its spans to a real Collector
(the shipped local.yaml), whose span metrics a real Prometheus scrapes; the job's own
Parquet archive is the DuckDB panels' data. A query that fails to parse, or that returns
nothing for the job, fails its test. Grafana's variables are put in as Grafana would, with
the job's real values.

Not run here: the incident dashboard's TraceQL panels. Tempo is not one of the project's
binaries (AGPL, not built here); tests/unit/test_deploy.py checks their attribute names
against the span model. Grafana itself is checked statically there too.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.e2e.alerting import AlertingStack, JobRun, Prometheus
from tests.e2e.stack import wait_until
from tests.unit.test_deploy import interpolate_sql, load, queries

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
PROMETHEUS_TYPE = "prometheus"
DUCKDB_TYPE = "motherduck-duckdb-datasource"
NOT_RUN_HERE = {"tempo"}

RATE_INTERVAL = "1m"
"""Grafana's $__rate_interval (at least four scrape intervals): the one-second scrapes
here leave a minute plenty of samples."""
RANGE = "1h"
"""Grafana's $__range: the dashboard's time range."""

SPAN_METRICS_WAIT_S = 90
"""The spanmetrics connector exports every 15 s (local.yaml), and a new series' first
export is a zero: two exports after the job's spans arrive."""


def _all_queries() -> list[tuple[str, str, str, dict[str, Any]]]:
    return [
        (path.stem, where, kind, query)
        for path in DASHBOARDS
        for where, kind, query in queries(load(path))
    ]


QUERIES = _all_queries()
PROMQL = [(b, w, q) for b, w, k, q in QUERIES if k == PROMETHEUS_TYPE]
SQL = [(b, w, q) for b, w, k, q in QUERIES if k == DUCKDB_TYPE]


def _ids(item: tuple[str, str, dict[str, Any]]) -> str:
    board, where, query = item
    return f"{board}: {where} {query.get('refId', '')}".strip()


def test_every_query_is_run_here_or_named_as_not() -> None:
    kinds = {kind for _, _, kind, _ in QUERIES}
    assert kinds <= {PROMETHEUS_TYPE, DUCKDB_TYPE, *NOT_RUN_HERE}, kinds
    assert PROMQL and SQL


# --- PromQL against Prometheus ----------------------------------------------------------

_LABEL_VALUES = re.compile(r"label_values\(\s*([\w:]+)\s*,\s*(\w+)\s*\)")


def promql(expr: str, job: str) -> str:
    """``expr`` with Grafana's variables as Grafana puts them in."""
    text = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__range", RANGE)
    text = text.replace("$job", job)
    assert "$" not in text, f"a variable left in {text!r}"
    return text


def has_values(prometheus: Prometheus, expr: str, start: float) -> list[float]:
    """The values of ``expr`` over a range query from ``start`` to now (Grafana's panels
    ask for ranges), NaN (no data for a quantile) left out."""
    result = prometheus.api(
        "query_range", query=expr, start=f"{start:.3f}", end=f"{time.time():.3f}", step="1s"
    )["result"]
    values = [float(v) for series in result for _, v in series["values"]]
    return [v for v in values if not math.isnan(v)]


@pytest.fixture(scope="module")
def span_metrics(alerting: AlertingStack, alerting_job: JobRun) -> Prometheus:
    """Prometheus, once it holds the job's span metrics with their calls counted."""
    prometheus = alerting.prometheus
    wait_until(
        "the job's span metrics in Prometheus",
        lambda: prometheus.query(
            f'sum(traces_span_metrics_calls_total{{service_name="{alerting_job.job}"}}) > 0'
        ),
        SPAN_METRICS_WAIT_S,
        interval_s=1,
    )
    return prometheus


@pytest.mark.parametrize("item", PROMQL, ids=_ids)
def test_promql_returns_the_jobs_data(
    item: tuple[str, str, dict[str, Any]], span_metrics: Prometheus, alerting_job: JobRun
) -> None:
    _, where, query = item
    expr = query.get("expr") or query.get("query") or ""
    labels = _LABEL_VALUES.fullmatch(expr.strip())
    if labels:  # a variable's query: Grafana's label_values(), not PromQL
        metric, label = labels[1], labels[2]
        values = span_metrics.api(f"label/{label}/values", **{"match[]": metric})
        assert alerting_job.job in values, f"{where}: {values}"
        return
    text = promql(expr, alerting_job.job)
    span_metrics.api("query", query=text)  # parses: a bad expression is status "error"
    if query.get("instant") and not query.get("range"):  # a table: one row per series
        rows = wait_until(f"{where}: {text}", lambda: span_metrics.query(text), 30)
        assert all(math.isfinite(float(row["value"][1])) for row in rows), (where, rows)
        return
    # since the Collector started: the job's spans came at once, so a rate is above zero
    # only in the windows that hold a series' first exports
    start = time.time() - 600
    found = wait_until(f"{where}: {text}", lambda: has_values(span_metrics, text, start), 30)
    assert all(math.isfinite(v) for v in found), (where, text)


# --- SQL against the job's archive ------------------------------------------------------


def sql_values(job: JobRun) -> dict[str, str]:
    return {"archive": str(job.archive), "job": job.job, "incident": job.incident}


@pytest.mark.parametrize("item", SQL, ids=_ids)
def test_sql_returns_the_jobs_data(
    item: tuple[str, str, dict[str, Any]], alerting_job: JobRun
) -> None:
    _, where, query = item
    sql = interpolate_sql(query.get("rawSql") or query.get("query") or "", sql_values(alerting_job))
    rows = duckdb.connect().sql(sql).fetchall()
    assert rows, f"{where} returned nothing:\n{sql}"
    if where.startswith("variable job"):
        assert (alerting_job.job,) in rows
    if where.startswith("variable incident"):
        assert (alerting_job.incident,) in rows
