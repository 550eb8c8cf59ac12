"""Every shipped Collector config validates with the real Collector binary
(``otelcol-fr-otel validate``): component types, every key of every component, values
and pipelines, as the Collector itself checks them at start-up. An overlay
(``<base>.<extra>.yaml``) is validated merged onto its base, the way the Collector merges
several ``--config`` flags. tests/unit/test_collector_config.py keeps the checks that
validation cannot see (sizes, cardinality, where the member list goes).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.e2e.stack import CONFIGS, JAEGER, JAEGER_CONFIG, OTELCOL

SHIPPED = sorted(p for p in CONFIGS.glob("*.yaml") if p.name != "builder.yaml")


def _runs(path: Path) -> list[Path]:
    """The --config files that run ``path``: itself, or its base then itself (an overlay)."""
    parts = path.name.split(".")
    return [path.with_name(f"{parts[0]}.yaml"), path] if len(parts) > 2 else [path]


def _validate(
    binary: Path, files: list[Path], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), "validate", *(f"--config={f}" for f in files)],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


# The variables without a default, set as a deployment would; the rest keep their defaults.
REQUIRED = {
    "FR_OTEL_S3_BUCKET": "fr-otel-archive",
    "FR_OTEL_GATEWAY_HOSTS": "[127.0.0.2:4327, 127.0.0.3:4327]",
}


def test_every_shipped_config_is_validated() -> None:
    assert {p.name for p in SHIPPED} >= {
        "local.yaml",
        "agent.yaml",
        "gateway.yaml",
        "gateway.s3.yaml",
        "gateway.static.yaml",
        "agent.route.yaml",
    }


@pytest.mark.parametrize(
    "path", [p for p in SHIPPED if p.name != "gateway.s3.yaml"], ids=lambda p: p.name
)
def test_the_collector_validates_the_config(path: Path, tmp_path: Path) -> None:
    # file_storage creates its folder (create_directory), so the default path must be
    # writable or the variable set: set, as on a laptop
    env = {**REQUIRED, "FR_OTEL_QUEUE_DIR": str(tmp_path / "queue")}
    result = _validate(OTELCOL, _runs(path), env)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "path", [p for p in SHIPPED if p.name != "gateway.s3.yaml"], ids=lambda p: p.name
)
def test_the_collector_runs_logs_and_metrics_pipelines_from_the_otlp_receiver(
    path: Path, tmp_path: Path
) -> None:
    """As the Collector resolves the config (``print-config``: overlays merged, variables
    set), OTLP log records and metrics have pipelines: an incident's log record
    (fr_otel.incident) and count (fr_otel.incidents) are taken where its spans are, and
    the count is served to Prometheus where the span metrics are."""
    env = {**REQUIRED, "FR_OTEL_QUEUE_DIR": str(tmp_path / "queue")}
    result = subprocess.run(
        [str(OTELCOL), "print-config", *(f"--config={f}" for f in _runs(path))],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    pipelines = config["service"]["pipelines"]
    for signal in ("logs", "metrics"):
        fed = [
            p
            for name, p in pipelines.items()
            if name.split("/")[0] == signal and "otlp" in p["receivers"] and p["exporters"]
        ]
        assert fed, f"{path.name}: no {signal} pipeline from the otlp receiver"
    if any(e.split("/")[0] == "prometheus" for e in config["exporters"]):
        assert any(
            "otlp" in p["receivers"] and "prometheus" in p["exporters"]
            for name, p in pipelines.items()
            if name.split("/")[0] == "metrics"
        )


def test_the_s3_overlay_fails_only_on_the_exporter_this_build_cannot_have() -> None:
    """gateway.s3.yaml needs contrib's awss3 exporter, which the Go module proxy here does
    not serve (collector-config/builder.yaml): merged onto gateway.yaml, the only problem
    the real Collector finds is that one type. Its keys are checked against the schema by
    the unit tests; it runs on the contrib image."""
    result = _validate(OTELCOL, _runs(CONFIGS / "gateway.s3.yaml"), REQUIRED)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "unknown type" in line]
    assert len(errors) == 1, result.stderr
    assert '\'exporters\' unknown type: "awss3" for id: "awss3/archive"' in errors[0]


def test_routing_agents_with_a_fixed_list_of_gateways_validate(tmp_path: Path) -> None:
    """agent.route.yaml with gateway.static.yaml on top (its comments say so): the
    gateways' overlay switches the agents' resolver too."""
    files = [CONFIGS / n for n in ("agent.yaml", "agent.route.yaml", "gateway.static.yaml")]
    env = {**REQUIRED, "FR_OTEL_QUEUE_DIR": str(tmp_path / "queue")}
    assert _validate(OTELCOL, files, env).returncode == 0
    unset = {"FR_OTEL_QUEUE_DIR": str(tmp_path / "queue")}
    assert _validate(OTELCOL, files, unset).returncode != 0, "FR_OTEL_GATEWAY_HOSTS unset"


def test_a_broken_config_fails_validation(tmp_path: Path) -> None:
    """The check above has teeth: a misspelt key and a missing required value fail."""
    broken = tmp_path / "broken.yaml"
    text = (CONFIGS / "local.yaml").read_text()
    broken.write_text(text.replace("send_batch_max_size:", "send_batch_maxsize:"))
    result = _validate(OTELCOL, [broken], {})
    assert result.returncode != 0
    assert "send_batch_maxsize" in result.stderr
    result = _validate(OTELCOL, _runs(CONFIGS / "gateway.static.yaml"), {})
    assert result.returncode != 0, "FR_OTEL_GATEWAY_HOSTS unset must not validate"


def test_jaeger_validates_its_config() -> None:
    result = _validate(JAEGER, [JAEGER_CONFIG], {})
    assert result.returncode == 0, result.stderr


def test_the_readmes_laptop_command_validates() -> None:
    """README.md, "On a laptop, without Docker": local.yaml without its Tempo exporter."""
    result = subprocess.run(
        [
            str(OTELCOL),
            "validate",
            f"--config={CONFIGS / 'local.yaml'}",
            "--set",
            "service::pipelines::traces/view::exporters=[otlp_grpc/jaeger,span_metrics]",
        ],
        env={"PATH": "/usr/bin:/bin", "JAEGER_OTLP_ENDPOINT": "127.0.0.1:14317"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "--set 'service::pipelines::traces/view::exporters=[otlp_grpc/jaeger,span_metrics]'"
        in (CONFIGS.parent / "README.md").read_text()
    )
