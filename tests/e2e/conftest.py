"""End-to-end tests: real Collectors (build/bin/otelcol-fr-otel) and a real Jaeger
(build/bin/jaeger) as processes on loopback. ``make e2e-tools`` builds both; ``make test``
does it first. Without them the tests are skipped, except in CI (``CI`` set), where a
missing binary fails them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.e2e.alerting import AlertingStack, JobRun, alerting_stack, run_skip_job
from tests.e2e.stack import missing_binaries


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: runs real Collector and Jaeger processes (make e2e-tools builds them)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = missing_binaries()
    for item in items:
        if "tests/e2e/" not in item.nodeid.replace(os.sep, "/"):
            continue
        item.add_marker(pytest.mark.e2e)
        if missing and not os.environ.get("CI"):
            item.add_marker(pytest.mark.skip(reason=f"{missing} not built: make e2e-tools"))


@pytest.fixture(autouse=True)
def _binaries_built() -> None:
    missing = missing_binaries()
    if missing:
        pytest.fail(f"{missing} not built: run `make e2e-tools`")


# --- alerts: a real Collector, Prometheus and Alertmanager, and one real job through them --


# package: stopped after the last end-to-end test, before the timing-sensitive
# integration tests run beside it
@pytest.fixture(scope="package")
def alerting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlertingStack]:
    """A Collector running the shipped local.yaml, a Prometheus scraping its exporter and
    its own telemetry with the shipped rules, an Alertmanager and its webhook: started once
    for the alert and dashboard tests (tests/e2e/alerting.py)."""
    yield from alerting_stack(tmp_path_factory.mktemp("alerting"))


@pytest.fixture(scope="package")
def alerting_job(alerting: AlertingStack, tmp_path_factory: pytest.TempPathFactory) -> JobRun:
    """A real gloo job under the recorder, with an incident, sending to ``alerting``'s
    Collector."""
    return run_skip_job(tmp_path_factory.mktemp("alerting-job"), alerting.collector)
