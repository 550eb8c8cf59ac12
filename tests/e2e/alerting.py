"""A real Prometheus and a real Alertmanager as processes on loopback, with a webhook
receiver in the test process, for the alert and dashboard end-to-end tests.

The binaries are Debian's (``make test`` installs them: the Makefile's alerting-tools):
``/usr/bin/prometheus`` and ``/usr/bin/prometheus-alertmanager``. Each runs the shipped
config (deploy/prometheus/prometheus.yml with rules.yaml, deploy/alertmanager/alertmanager.yml)
with what differs on loopback put in: the scrape targets' and Alertmanager's addresses, a
scrape and rule evaluation every second instead of every 15, and Alertmanager's webhook
receiver and a short group wait, so that an alert reaches the webhook seconds after the
Collector exports the series that fires it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.stack import Collector, Service, collector, free_port, running, wait_until

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = Path("/usr/bin/prometheus")
ALERTMANAGER = Path("/usr/bin/prometheus-alertmanager")
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
ALERTMANAGER_CONFIG = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
INTERVAL = "1s"
"""Scrape and rule evaluation interval on loopback (the shipped config's is 15 s)."""

COLLECTOR_EXPORTER = "collector:8889"
COLLECTOR_TELEMETRY = "collector:8888"
"""The shipped prometheus.yml's targets (compose's service names)."""


def missing_binaries() -> list[str]:
    return [str(p) for p in (PROMETHEUS, ALERTMANAGER) if not p.exists()]


# --- the webhook: Alertmanager's notifications, as it POSTs them -------------------------


@dataclass(kw_only=True)
class Webhook:
    """An HTTP server in a thread that keeps every JSON body POSTed to it."""

    server: ThreadingHTTPServer
    received: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/alerts"

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert of every notification so far (Alertmanager's webhook payload)."""
        with self.lock:
            return [alert for body in self.received for alert in body.get("alerts", [])]

    def wait_for(
        self, what: str, match: Callable[[dict[str, Any]], bool], timeout_s: float
    ) -> dict[str, Any]:
        """The first alert received that ``match`` accepts."""
        found: dict[str, Any] = wait_until(
            what, lambda: next((a for a in self.alerts() if match(a)), None), timeout_s
        )
        return found


def webhook(host: str = "127.0.0.1") -> Webhook:
    """A webhook receiver listening on ``host`` at a free port, serving in a daemon thread."""
    holder: list[Webhook] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with holder[0].lock:
                holder[0].received.append(body)
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the test's output is not the place for its access log

    server = ThreadingHTTPServer((host, free_port(host)), Handler)
    holder.append(Webhook(server=server))
    threading.Thread(target=server.serve_forever, name="webhook", daemon=True).start()
    return holder[0]


# --- Prometheus -------------------------------------------------------------------------


@dataclass
class Prometheus(Service):
    """``prometheus`` with the shipped config, rules and targets put on loopback."""

    address: str = ""

    def api(self, path: str, **params: Any) -> Any:
        """The HTTP API's ``data``; AssertionError when its status is not success."""
        url = f"http://{self.address}/api/v1/{path}?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result now: a vector's samples (or a scalar as one)."""
        data = self.api("query", query=expr)
        result = data["result"]
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": result}]
        return list(result)

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts its rules hold now, pending or firing."""
        return list(self.api("alerts")["alerts"])

    def targets_up(self) -> bool:
        active = self.api("targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


def prometheus_config(targets: Mapping[str, str], alertmanager: str) -> dict[str, Any]:
    """The shipped prometheus.yml with each target in ``targets`` (shipped target ->
    host:port) replaced, every second's scrape and evaluation, the rules files by their
    paths and ``alertmanager`` as the only Alertmanager. A shipped target not in
    ``targets`` is left out."""
    config: dict[str, Any] = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    config["global"] = {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL}
    config["rule_files"] = [str(PROMETHEUS_DIR / f) for f in config["rule_files"]]
    config["alerting"]["alertmanagers"] = [{"static_configs": [{"targets": [alertmanager]}]}]
    jobs = []
    for job in config["scrape_configs"]:
        kept = [targets[t] for s in job["static_configs"] for t in s["targets"] if t in targets]
        if kept:
            jobs.append({**job, "static_configs": [{"targets": kept}]})
    config["scrape_configs"] = jobs
    return config


def prometheus(
    workdir: Path, targets: Mapping[str, str], alertmanager: str, host: str = "127.0.0.1"
) -> Prometheus:
    """A Prometheus scraping ``targets`` (see ``prometheus_config``), not started."""
    address = f"{host}:{free_port(host)}"
    config = workdir / "prometheus.yml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(prometheus_config(targets, alertmanager)))
    argv = [
        str(PROMETHEUS),
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address={address}",
        # alerts go out as soon as they fire; a resolved one is sent again later
        "--rules.alert.resend-delay=1s",
    ]
    return Prometheus(
        name="prometheus",
        argv=argv,
        env={},
        log=workdir / "prometheus.log",
        ready=[address],
        address=address,
    )


# --- Alertmanager -----------------------------------------------------------------------


@dataclass
class Alertmanager(Service):
    address: str = ""


def alertmanager_config(webhook_url: str) -> dict[str, Any]:
    """The shipped alertmanager.yml with a webhook to ``webhook_url`` in its receiver and
    short waits: a notification within a second or two of an alert."""
    config: dict[str, Any] = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    config["route"].update(group_wait="1s", group_interval="1s")
    (receiver,) = [r for r in config["receivers"] if r["name"] == config["route"]["receiver"]]
    receiver["webhook_configs"] = [{"url": webhook_url, "send_resolved": False}]
    return config


def alertmanager(workdir: Path, webhook_url: str, host: str = "127.0.0.1") -> Alertmanager:
    address = f"{host}:{free_port(host)}"
    config = workdir / "alertmanager.yml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(alertmanager_config(webhook_url)))
    argv = [
        str(ALERTMANAGER),
        f"--config.file={config}",
        f"--storage.path={workdir / 'alertmanager-data'}",
        f"--web.listen-address={address}",
        "--cluster.listen-address=",  # one instance: no gossip port
    ]
    return Alertmanager(
        name="alertmanager",
        argv=argv,
        env={},
        log=workdir / "alertmanager.log",
        ready=[address],
        address=address,
    )


@dataclass(kw_only=True)
class AlertingStack:
    """A Collector (the shipped local.yaml), a Prometheus scraping it with the shipped
    rules, an Alertmanager and the webhook it notifies: all running."""

    collector: Collector
    prometheus: Prometheus
    alertmanager: Alertmanager
    webhook: Webhook


def alerting_stack(workdir: Path) -> Iterator[AlertingStack]:
    """Start the stack, yield it, stop it whatever happens. The Collector's viewers (Jaeger,
    Tempo) are closed loopback ports: their queues retry in memory, nothing waits for them,
    and no alert is about them before their retries run out (minutes)."""
    missing = missing_binaries()
    if missing:
        raise AssertionError(
            f"{missing} missing: apt-get install prometheus prometheus-alertmanager"
            " (make test installs them)"
        )
    hook = webhook()
    otelcol = collector(
        "collector",
        ["local.yaml"],
        workdir,
        env={
            "JAEGER_OTLP_ENDPOINT": f"127.0.0.1:{free_port()}",
            "TEMPO_OTLP_ENDPOINT": f"127.0.0.1:{free_port()}",
        },
    )
    manager = alertmanager(workdir, hook.url)
    assert otelcol.telemetry
    targets = {
        COLLECTOR_EXPORTER: otelcol.env["FR_OTEL_PROMETHEUS_LISTEN"],
        COLLECTOR_TELEMETRY: otelcol.telemetry,
    }
    prom = prometheus(workdir, targets, manager.address)
    try:
        with running(otelcol, manager, prom):
            wait_until("Prometheus to scrape the Collector", prom.targets_up, 30)
            yield AlertingStack(
                collector=otelcol, prometheus=prom, alertmanager=manager, webhook=hook
            )
    finally:
        hook.server.shutdown()
        hook.server.server_close()


# --- one real job with an incident ------------------------------------------------------

TRAIN_SKIP = Path(__file__).resolve().parent / "train_skip.py"
JOB = "alerting"
WORLD = 3
CULPRIT = WORLD - 1
"""train_skip.py's last rank skips an all_reduce: the culprit."""


@dataclass(kw_only=True)
class JobRun:
    job: str
    archive: Path
    incident: str
    log: str


def run_skip_job(workdir: Path, otelcol: Collector) -> JobRun:
    """``fr-otel run -- torchrun`` of tests/e2e/train_skip.py (``WORLD`` gloo ranks, the last
    skips a collective) as job ``JOB``, sending over OTLP/HTTP to ``otelcol``."""
    archive = workdir / "archive"
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{otelcol.http}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OMP_NUM_THREADS": "1",
    }
    command = [
        *(sys.executable, "-m", "fr_otel.run", "--archive", str(archive), "--job", JOB, "--"),
        *(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD)),
        *("--master-port", str(free_port()), str(TRAIN_SKIP)),
    ]
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=240, cwd=workdir
    )
    log = result.stdout + result.stderr
    assert result.returncode != 0, f"the job did not fail:\n{log[-3000:]}"
    incidents = sorted(p.name.split("=", 1)[1] for p in archive.glob(f"job={JOB}/incident=*"))
    assert len(incidents) == 1, f"incidents {incidents}:\n{log[-4000:]}"
    return JobRun(job=JOB, archive=archive, incident=incidents[0], log=log)
