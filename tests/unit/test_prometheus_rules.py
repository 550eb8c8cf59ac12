"""deploy/prometheus/rules.yaml: Prometheus's own promtool accepts the rules and the config
that loads them, and its rule unit tests (rules.test.yaml: synthetic series) show each
alert firing where it should and silent where it should not; Alertmanager's amtool accepts
the shipped Alertmanager config. Every alert names its culprit and carries a link.

The binaries are Debian's prometheus and prometheus-alertmanager (``make test`` installs
them: the Makefile's alerting-tools).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "rules.yaml"
RULES_TEST = PROMETHEUS_DIR / "rules.test.yaml"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
ALERTMANAGER_CONFIG = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
LINKS = ("trace_url", "metrics_url")


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"the alert rule tests need {name}: apt-get install prometheus"
            " prometheus-alertmanager (make test installs them)",
            pytrace=False,
        )
    return found


def run(*argv: str, cwd: Path = ROOT) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    output = run(tool("promtool"), "check", "rules", str(RULES))
    assert f"SUCCESS: {len(rules())} rules found" in output


def test_promtool_checks_the_config_that_loads_them() -> None:
    output = run(tool("promtool"), "check", "config", str(PROMETHEUS_CONFIG))
    assert "SUCCESS: 1 rule files found" in output


def test_each_alert_fires_where_it_should_and_only_there() -> None:
    output = run(tool("promtool"), "test", "rules", RULES_TEST.name, cwd=PROMETHEUS_DIR)
    assert "SUCCESS" in output


def test_every_alert_has_a_unit_test() -> None:
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test["alert_rule_test"]}
    fired = {
        case["alertname"]
        for test in tests
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    alerts = {rule["alert"] for rule in rules()}
    assert tested == alerts
    assert fired == alerts


def test_every_alert_names_its_culprit_and_links_somewhere() -> None:
    for rule in rules():
        annotations = rule["annotations"]
        assert annotations.get("culprit"), rule["alert"]
        links = [annotations[k] for k in LINKS if k in annotations]
        assert links and all(link.startswith("http") for link in links), rule["alert"]
        assert {"summary", "description"} <= set(annotations), rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]


def test_the_broken_rule_is_refused(tmp_path: Path) -> None:
    """promtool's check can fail: a rule with a syntax error is refused."""
    broken = yaml.safe_load(RULES.read_text())
    broken["groups"][0]["rules"][0]["expr"] = "increase(fr_otel_incidents_total[10m] > 0"
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(broken))
    result = subprocess.run(
        [tool("promtool"), "check", "rules", str(path)], capture_output=True, text=True
    )
    assert result.returncode != 0


def test_amtool_checks_the_alertmanager_config() -> None:
    output = run(tool("amtool"), "check-config", str(ALERTMANAGER_CONFIG))
    assert "SUCCESS" in output


_HEREDOC = re.compile(r"cat > alerting/(\S+) <<'EOF'\n(.*?)\nEOF\n", re.S)


def test_the_readmes_alerting_configs_pass_the_tools(tmp_path: Path) -> None:
    """The README's "Alerts" section writes a Prometheus and an Alertmanager config for the
    user to copy: both pass their tools' checks, with the shipped rules beside them."""
    section = (ROOT / "README.md").read_text().split("\n## Alerts\n", 1)[1].split("\n## ", 1)[0]
    written = dict(_HEREDOC.findall(section))
    assert set(written) == {"prometheus.yml", "alertmanager.yml"}
    assert "cp deploy/prometheus/rules.yaml alerting/" in section
    shutil.copy(RULES, tmp_path / "rules.yaml")
    for name, text in written.items():
        (tmp_path / name).write_text(text + "\n")
    output = run(tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml"))
    assert f"SUCCESS: {len(rules())} rules found" in output
    run(tool("amtool"), "check-config", str(tmp_path / "alertmanager.yml"))
    targets = yaml.safe_load(written["prometheus.yml"])["scrape_configs"]
    # the laptop Collector's exporter and telemetry (README: "On a laptop, without Docker")
    assert [t for job in targets for s in job["static_configs"] for t in s["targets"]] == [
        "127.0.0.1:8889",
        "127.0.0.1:8888",
    ]
