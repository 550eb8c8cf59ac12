"""End-to-end tests: real Collectors (build/bin/otelcol-fr-otel) and a real Jaeger
(build/bin/jaeger) as processes on loopback. ``make e2e-tools`` builds both; ``make test``
does it first. Without them the tests are skipped, except in CI (``CI`` set), where a
missing binary fails them.
"""

from __future__ import annotations

import os

import pytest

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
