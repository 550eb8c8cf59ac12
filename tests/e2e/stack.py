"""Real Collectors and a real Jaeger as processes on loopback, for the end-to-end tests and
``benchmarks/collector_path.py``.

The binaries are the ones ``make e2e-tools`` builds: ``build/bin/otelcol-fr-otel`` (our
distribution, ``collector-config/builder.yaml``) and ``build/bin/jaeger`` (Jaeger v2). Each
process runs a shipped config unchanged; what differs between a laptop, compose and a
fleet is only the ``${env:...}`` values the configs read (addresses, the archive and queue
folders), which are set here per process: every listener on its own loopback address and
a free port, so that tests running at the same time never meet.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "build" / "bin"
OTELCOL = BIN / "otelcol-fr-otel"
JAEGER = BIN / "jaeger"
CONFIGS = ROOT / "collector-config"
JAEGER_CONFIG = ROOT / "tools" / "jaeger" / "jaeger.yaml"


def missing_binaries() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in (OTELCOL, JAEGER) if not os.access(p, os.X_OK)]


# Ports already handed out by free_port in this process. The kernel may offer a port that
# was probed and closed a moment ago again, before the service meant to hold it has bound
# it: a Collector once got the same port for its gRPC and HTTP receivers and failed to start.
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on at ``host`` (nor on the wildcard address) right now, and
    that this process has not handed out before."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
        if port in _handed_out:
            continue
        with socket.socket() as wildcard:
            try:
                wildcard.bind(("0.0.0.0", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port on {host}")


def wait_until(
    what: str, check: Callable[[], Any], timeout_s: float, interval_s: float = 0.2
) -> Any:
    """``check()``'s first truthy value, or AssertionError naming ``what`` after the timeout."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = check()
        except (OSError, urllib.error.URLError, ValueError) as error:
            last = error
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}: {last!r}")
        time.sleep(interval_s)


def port_open(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, int(port))) == 0


@dataclass
class Service:
    """One process with its own log file; started, stopped, killed and restarted."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    ready: list[str] = field(default_factory=list)  # host:port that accept when it is up
    telemetry: str | None = None  # host:port of its Prometheus self-metrics
    process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> Service:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"--- start {self.argv}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                self.argv,
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        for address in self.ready:
            wait_until(
                f"{self.name} to listen on {address}",
                lambda a=address: self._alive_or_fail() and port_open(a),
                timeout_s,
            )
        return self

    def _alive_or_fail(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(
                f"{self.name} exited with {self.process.returncode}:\n{self.tail()}"
            )
        return True

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 30) -> int | None:
        """SIGTERM (the Collector drains its in-memory queues), SIGKILL after the timeout."""
        if not self.alive():
            return None if self.process is None else self.process.returncode
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(10)

    def kill(self) -> None:
        """SIGKILL: what a crash or the OOM killer does; nothing is drained."""
        if self.alive():
            assert self.process is not None
            self.process.kill()
            self.process.wait(10)

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def metrics(self) -> dict[str, float]:
        """Its self-metrics (Prometheus text), summed over labels: name -> value."""
        assert self.telemetry, f"{self.name} has no telemetry address"
        with urllib.request.urlopen(f"http://{self.telemetry}/metrics", timeout=5) as response:
            text = response.read().decode()
        sums: dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            match = re.match(r"([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
            if match:
                sums[match[1]] = sums.get(match[1], 0.0) + float(match[3])
        return sums

    def metrics_text(self) -> str:
        """Its self-metrics as served (Prometheus text): one scrape, for ``metric_in``."""
        assert self.telemetry, f"{self.name} has no telemetry address"
        with urllib.request.urlopen(f"http://{self.telemetry}/metrics", timeout=5) as response:
            return str(response.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """One self-metric, summed over the series whose labels include ``labels``; 0 before
        the Collector has exported it."""
        return metric_in(self.metrics_text(), name, **labels)

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process so far (/proc)."""
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_bytes(self) -> int:
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0


def metric_in(text: str, name: str, **labels: str) -> float:
    """A self-metric in scraped ``text``, summed over the series whose labels include
    ``labels``; 0 when absent."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        # Collectors before v0.14x (Jaeger's) add _total to counters, newer ones do not
        match = re.match(rf"{re.escape(name)}(?:_total)?(\{{[^}}]*\}})?\s+(\S+)$", line)
        if match and all(f'{k}="{v}"' in (match[1] or "") for k, v in labels.items()):
            total += float(match[2])
    return total


@dataclass
class Collector(Service):
    """``otelcol-fr-otel`` running shipped configs from collector-config/."""

    grpc: str = ""
    http: str = ""


def collector(
    name: str,
    configs: Sequence[str],
    workdir: Path,
    host: str = "127.0.0.1",
    env: dict[str, str] | None = None,
) -> Collector:
    """A Collector of ``configs`` (file names in collector-config/, merged in order) whose
    every listener is on ``host`` at a free port. Not started."""
    grpc, http = f"{host}:{free_port(host)}", f"{host}:{free_port(host)}"
    telemetry_port = free_port(host)
    variables = {
        "FR_OTEL_OTLP_GRPC_LISTEN": grpc,
        "FR_OTEL_OTLP_HTTP_LISTEN": http,
        "FR_OTEL_TELEMETRY_HOST": host,
        "FR_OTEL_TELEMETRY_PORT": str(telemetry_port),
        "FR_OTEL_PROMETHEUS_LISTEN": f"{host}:{free_port(host)}",
        "FR_OTEL_HEALTH_LISTEN": f"{host}:{free_port(host)}",
        "FR_OTEL_SPAN_ARCHIVE_DIR": str(workdir / "otlp-archive"),
        "FR_OTEL_LOG_ARCHIVE_DIR": str(workdir / "otlp-logs"),
        "FR_OTEL_QUEUE_DIR": str(workdir / "queue"),
        # The Go runtime's soft limit, as the configs' comments ask for in production.
        "GOMEMLIMIT": "1600MiB",
        **(env or {}),
    }
    (workdir / "queue").mkdir(parents=True, exist_ok=True)  # file_storage wants it
    argv = [str(OTELCOL), *(f"--config={CONFIGS / c}" for c in configs)]
    return Collector(
        name=name,
        argv=argv,
        env=variables,
        log=workdir / f"{name}.log",
        ready=[grpc, http],
        telemetry=f"{host}:{telemetry_port}",
        grpc=grpc,
        http=http,
    )


def static_gateways(
    hosts: Sequence[str], workdir: Path, jaeger: Jaeger, env: dict[str, str] | None = None
) -> list[Collector]:
    """Gateways of gateway.yaml and gateway.static.yaml, one per host, each listening for
    the others' routed traces and knowing them all as its peers, exporting to ``jaeger``
    (the Tempo exporter to a port nobody listens on). Not started."""
    routed = [f"{host}:{free_port(host)}" for host in hosts]
    gateways = []
    for number, host in enumerate(hosts, start=1):
        gateway = collector(
            f"gateway{number}",
            ["gateway.yaml", "gateway.static.yaml"],
            workdir / f"gateway{number}",
            host=host,
            env={
                "FR_OTEL_ROUTED_LISTEN": routed[number - 1],
                "FR_OTEL_GATEWAY_HOSTS": "[" + ", ".join(routed) + "]",
                "JAEGER_OTLP_ENDPOINT": jaeger.otlp_grpc,
                "TEMPO_OTLP_ENDPOINT": f"127.0.0.1:{free_port()}",
                **(env or {}),
            },
        )
        gateway.ready.append(routed[number - 1])
        gateways.append(gateway)
    return gateways


@dataclass
class Jaeger(Service):
    """``jaeger`` (v2, in-memory storage) with tools/jaeger/jaeger.yaml."""

    otlp_grpc: str = ""
    query: str = ""

    def api(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        url = f"http://{self.query}{path}" + (f"?{query}" if query else "")
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.loads(response.read())

    def services(self) -> list[str]:
        return list(self.api("/api/services")["data"] or [])

    def find_traces(
        self, service: str, limit: int = 100_000, raw: bool = True, **params: Any
    ) -> list[dict[str, Any]]:
        """Search (/api/traces) over all time. ``raw``: as stored, without Jaeger's
        adjusters, so a span delivered twice shows twice; otherwise as the UI shows it
        (its adjusters drop identical copies of a span)."""
        window = {"start": 1, "end": int((time.time() + 86_400) * 1e6)}
        traces = self.api(
            "/api/traces",
            service=service,
            limit=limit,
            raw="true" if raw else "false",
            **window,
            **params,
        )
        return list(traces["data"] or [])

    def traces_by_id(self, trace_ids: Sequence[str], chunk_size: int = 100) -> list[dict[str, Any]]:
        """The traces the UI opens by id (/api/traces?traceID=...), raw."""
        found: list[dict[str, Any]] = []
        for start in range(0, len(trace_ids), chunk_size):
            chunk = list(trace_ids[start : start + chunk_size])
            found += self.api("/api/traces", traceID=chunk, raw="true")["data"] or []
        return found


def jaeger(workdir: Path, host: str = "127.0.0.1") -> Jaeger:
    otlp_grpc, query = f"{host}:{free_port(host)}", f"{host}:{free_port(host)}"
    telemetry_port = free_port(host)
    variables = {
        "JAEGER_OTLP_GRPC_LISTEN": otlp_grpc,
        "JAEGER_OTLP_HTTP_LISTEN": f"{host}:{free_port(host)}",
        "JAEGER_QUERY_HTTP_LISTEN": query,
        "JAEGER_QUERY_GRPC_LISTEN": f"{host}:{free_port(host)}",
        "JAEGER_HEALTH_LISTEN": f"{host}:{free_port(host)}",
        "JAEGER_TELEMETRY_HOST": host,
        "JAEGER_TELEMETRY_PORT": str(telemetry_port),
        "JAEGER_MAX_TRACES": "1000000",
    }
    return Jaeger(
        name="jaeger",
        argv=[str(JAEGER), f"--config={JAEGER_CONFIG}"],
        env=variables,
        log=workdir / "jaeger.log",
        ready=[otlp_grpc, query],
        telemetry=f"{host}:{telemetry_port}",
        otlp_grpc=otlp_grpc,
        query=query,
    )


@contextlib.contextmanager
def running(*services: Service) -> Iterator[None]:
    """Start the services in order; stop them in reverse order, whatever happens."""
    started: list[Service] = []
    try:
        for service in services:
            started.append(service.start())
        yield
    finally:
        for service in reversed(started):
            service.stop()


# --- Jaeger's JSON (the UI's model) ------------------------------------------------------


def tags(span_or_process: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span_or_process.get("tags") or []}


def span_rank(trace: dict[str, Any], span: dict[str, Any]) -> int | None:
    rank = tags(trace["processes"][span["processID"]]).get("fr_otel.rank")
    return None if rank is None else int(rank)


def jaeger_id(raw: bytes) -> str:
    """Jaeger's spelling of an OTLP trace or span id: lowercase hex."""
    return raw.hex()
