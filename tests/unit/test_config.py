"""Configuration precedence: argument > specific variable > generic variable > default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fr_otel import config
from fr_otel.errors import ConfigError


@pytest.mark.parametrize(
    ("explicit", "environ", "expected"),
    [
        (None, {}, "default"),
        (None, {"OTEL_SERVICE_NAME": "svc"}, "svc"),
        (None, {"OTEL_SERVICE_NAME": "svc", "FR_OTEL_JOB": "job1"}, "job1"),
        ("arg", {"OTEL_SERVICE_NAME": "svc", "FR_OTEL_JOB": "job1"}, "arg"),
        (None, {"FR_OTEL_JOB": "bad/name", "OTEL_SERVICE_NAME": "svc"}, "svc"),
        (None, {"FR_OTEL_JOB": "  "}, "default"),
    ],
)
def test_job_name_precedence(explicit: str | None, environ: dict[str, str], expected: str) -> None:
    assert config.job_name(explicit, environ) == expected


def test_bad_explicit_job_raises_naming_it() -> None:
    with pytest.raises(ConfigError, match="job 'a b'"):
        config.job_name("a b", {})


@pytest.mark.parametrize(
    ("explicit", "environ", "expected"),
    [
        (None, {}, Path("fr-otel-archive")),
        (None, {"FR_OTEL_ARCHIVE": "/data/fr"}, Path("/data/fr")),
        ("here", {"FR_OTEL_ARCHIVE": "/data/fr"}, Path("here")),
    ],
)
def test_archive_precedence(explicit: str | None, environ: dict[str, str], expected: Path) -> None:
    assert config.archive_dir(explicit, environ) == expected


def test_workers_fall_back_on_bad_environment(caplog: pytest.LogCaptureFixture) -> None:
    assert config.import_workers(None, {"FR_OTEL_IMPORT_WORKERS": "3"}) == 3
    assert config.import_workers(None, {"FR_OTEL_IMPORT_WORKERS": "lots"}) >= 1
    assert "FR_OTEL_IMPORT_WORKERS" in caplog.text
    assert config.import_workers(2, {"FR_OTEL_IMPORT_WORKERS": "3"}) == 2
    with pytest.raises(ConfigError):
        config.import_workers(0, {})


@pytest.mark.parametrize(
    "template",
    [
        "http://localhost:16686/trace/{trace_id}?uiFind={span_id}",
        'http://g:3000/explore?left={"datasource":"fr-otel-tempo","queries":'
        '[{"refId":"A","queryType":"traceql","query":"{trace_id}"}]}',
    ],
)
def test_trace_url_templates_of_jaeger_and_grafana_are_taken(template: str) -> None:
    assert config.trace_url(None, {"FR_OTEL_TRACE_URL": template}) == template
    assert config.trace_url(template, {"FR_OTEL_TRACE_URL": "http://other/{trace_id}"}) == template
    assert config.trace_url(None, {}) is None


@pytest.mark.parametrize(
    ("template", "problem"),
    [("http://j/trace/", "no {trace_id}"), ("http://j/{trace_id}/{traceID}", "{traceID}")],
)
def test_a_bad_trace_url_template_names_its_problem(template: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(problem)):
        config.trace_url(template)


@pytest.mark.parametrize(
    ("explicit", "environ", "expected"),
    [
        (None, {}, "3GB"),
        (None, {"FR_OTEL_ANALYSIS_MEMORY": "8GB"}, "8GB"),
        (None, {"FR_OTEL_ANALYSIS_MEMORY": " 512 MiB "}, "512 MiB"),
        ("1.5GB", {"FR_OTEL_ANALYSIS_MEMORY": "8GB"}, "1.5GB"),
    ],
)
def test_analysis_memory_precedence(
    explicit: str | None, environ: dict[str, str], expected: str
) -> None:
    assert config.analysis_memory(explicit, environ) == expected


def test_analysis_memory_falls_back_on_a_bad_environment(caplog: pytest.LogCaptureFixture) -> None:
    assert config.analysis_memory(None, {"FR_OTEL_ANALYSIS_MEMORY": "lots"}) == "3GB"
    assert "FR_OTEL_ANALYSIS_MEMORY" in caplog.text and "lots" in caplog.text


@pytest.mark.parametrize("bad", ["3", "three GB", "-1GB", "3 GBs"])
def test_a_bad_explicit_memory_limit_raises_naming_it(bad: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(repr(bad))):
        config.analysis_memory(bad, {})
