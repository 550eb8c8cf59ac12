"""An incident reaches a person through Prometheus and Alertmanager, end to end with real
processes on loopback: a real gloo job under the recorder (``fr-otel run -- torchrun``,
the last rank skips an all_reduce) has an incident; the recorder's count of it, and then
``fr-otel export --findings-only``'s, go over OTLP to a real Collector (the shipped
local.yaml); a real Prometheus scrapes the Collector's prometheus exporter with the shipped
rules (deploy/prometheus/rules.yaml); the alert goes to a real Alertmanager (the shipped
config), which posts it to a webhook in this test. The alert must name the job, the
incident and, once the analysis has run, the culprit rank.

The stack and the job are started once (tests/e2e/conftest.py, tests/e2e/alerting.py),
shared with the dashboard test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
from collections.abc import Callable
from typing import Any

from fr_otel.analysis import analyze
from fr_otel.otel import model
from tests.e2e.alerting import CULPRIT, AlertingStack, JobRun

ALERT_WAIT_S = 60
"""The Collector exports at once; Prometheus scrapes and evaluates every second and
Alertmanager waits a second: an alert arrives within seconds. The rest is slack for a
busy machine."""


def _incident_alert(job: JobRun, **labels: str) -> Callable[[dict[str, Any]], bool]:
    def match(alert: dict[str, Any]) -> bool:
        found = alert["labels"]
        wanted = {"alertname": "FrOtelIncident", "fr_otel_job": job.job, **labels}
        return all(found.get(k) == v for k, v in wanted.items())

    return match


def _wait_for_alert(
    alerting: AlertingStack, what: str, match: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The first alert at the webhook that ``match`` accepts; on a timeout, what
    Prometheus holds of the incident count and its alerts, to say where the path broke."""
    try:
        return alerting.webhook.wait_for(what, match, ALERT_WAIT_S)
    except AssertionError as error:
        prometheus = alerting.prometheus
        raise AssertionError(
            f"{error}\nthe count in Prometheus: {prometheus.query('fr_otel_incidents_total')}"
            f"\nits alerts: {prometheus.alerts()}\nat the webhook: {alerting.webhook.alerts()}"
        ) from None


def _link(alert: dict[str, Any]) -> tuple[str, dict[str, list[str]]]:
    url = urllib.parse.urlsplit(alert["annotations"]["trace_url"])
    return url.path, urllib.parse.parse_qs(url.query)


def test_the_recorders_incident_alerts_at_once(
    alerting: AlertingStack, alerting_job: JobRun
) -> None:
    """Before any analysis: the recorder's declaration, with its trigger as the kind."""
    alert = _wait_for_alert(
        alerting,
        f"the recorder's incident {alerting_job.incident} at the webhook",
        _incident_alert(alerting_job, fr_otel_incident=alerting_job.incident),
    )
    labels = alert["labels"]
    assert alert["status"] == "firing"
    assert labels["severity"] == "critical"
    assert labels["fr_otel_finding_kind"] in (*model.INCIDENT_TRIGGERS, model.OTHER_TRIGGER)
    assert "fr_otel_finding_culprit_ranks" not in labels  # nobody has analysed it yet
    assert alerting_job.incident in alert["annotations"]["description"]
    path, query = _link(alert)
    assert path == "/search" and query["service"] == [alerting_job.job]
    assert alerting_job.incident in query["tags"][0]


def test_the_analysis_names_the_culprit_at_the_webhook(
    alerting: AlertingStack, alerting_job: JobRun
) -> None:
    analysis = analyze(alerting_job.archive, job=alerting_job.job, incident=alerting_job.incident)
    assert analysis.root_cause is not None, analysis.findings
    root = analysis.findings[analysis.root_cause]
    assert sorted(root.culprit_ranks) == [CULPRIT]
    command = [
        *(sys.executable, "-m", "fr_otel", "export", str(alerting_job.archive)),
        *("--otlp", f"http://{alerting.collector.http}", "--findings-only"),
    ]
    exported = subprocess.run(
        command, env=dict(os.environ), capture_output=True, text=True, timeout=120
    )
    assert exported.returncode == 0, exported.stdout + exported.stderr

    alert = _wait_for_alert(
        alerting,
        f"the analysis' {root.kind} incident at the webhook",
        _incident_alert(alerting_job, fr_otel_finding_kind=root.kind),
    )
    labels, annotations = alert["labels"], alert["annotations"]
    assert labels["fr_otel_finding_culprit_ranks"] == str(CULPRIT)
    assert labels["fr_otel_incident"] == alerting_job.incident
    assert annotations["culprit"] == f"rank(s) {CULPRIT}"
    assert (
        f"culprit rank(s) {CULPRIT}, incident {alerting_job.incident}"
        in (annotations["description"])
    )
    path, query = _link(alert)
    assert path == "/search" and query["service"] == [alerting_job.job]
    assert alerting_job.incident in query["tags"][0]


def test_prometheus_runs_every_rule_on_the_collectors_own_series(
    alerting: AlertingStack, alerting_job: JobRun
) -> None:
    """The delivery alerts read the Collector's telemetry, scraped as the shipped
    prometheus.yml says: the real Collector serves the series under the rules' names (its
    failure counters appear with the first failure, so the refused one stands for them)."""
    groups = alerting.prometheus.api("rules")["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert {rule["name"] for rule in rules} == {
        "FrOtelIncident",
        "FrOtelStragglerPersists",
        "FrOtelSpansRefused",
        "FrOtelSpansDropped",
    }
    assert all(rule["health"] == "ok" for rule in rules), rules
    refused = alerting.prometheus.query('otelcol_receiver_refused_spans{job="otelcol"}')
    assert {row["metric"]["receiver"] for row in refused} == {"otlp"}
    assert all(float(row["value"][1]) == 0 for row in refused)
    assert not alerting.prometheus.query('ALERTS{alertname=~"FrOtelSpans.*"}')
