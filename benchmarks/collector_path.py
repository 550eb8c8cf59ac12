"""Collector path: an incident from the flush to Jaeger's query API, through real Collectors.

A simulated 64-rank x 2,000-entry NCCL incident (128,000 spans) is imported, then sent
with ``fr-otel export --otlp`` (OTLP/HTTP, gzip) to an agent (``agent.yaml``), which
queues it on disk and sends it to a gateway (``gateway.yaml`` + ``gateway.static.yaml``:
the load-balancing tier and the owner tier in one process, persistent queues), which
sends it to Jaeger v2 (in-memory storage). All real processes on loopback
(``make e2e-tools`` builds them), run as the configs' comments ask for in production
(GOMEMLIMIT and GOGC; the Collectors send to each other and to Jaeger with zstd).

The gateway runs as a site with Jaeger and no Tempo runs it: ``traces/view`` exports to
Jaeger and the span metrics only (``--set``, as README.md's laptop section does). Tempo is
not built here, and its stand-in, an exporter retrying against a closed port, is no Tempo:
its persistent queue takes every span and never drains. ``--tempo-stand-in`` keeps it (the
configs unchanged, what the end-to-end tests run), for comparison.

Measured, in one run:

- the time from the start of the flush (the export command starting) until Jaeger has
  stored the last span (its storage exporter's own counter), and until every trace is
  confirmed through the query API (``/api/traces?traceID=...``, as the UI loads them);
- spans per second through each tier: N / (time the tier's counter reached N);
- the Collectors' CPU time (user + system) and peak RSS (/proc, sampled every 0.1 s);
- spans dropped: the spans Jaeger does not have, and the Collectors' own refused/failed
  counters (the Tempo exporter's retries against the closed port excluded).

Peer figure, same run, same fresh stack: the same spans (same ids, attributes, status,
resource per rank) created with the OpenTelemetry SDK (``TracerProvider``, one per rank,
``BatchSpanProcessor`` with a queue as large as the rank's buffer) and sent by the SDK's own
OTLP/HTTP exporter (``opentelemetry-exporter-otlp-proto-http``, gzip) to the same agent.
Building the SDK's inputs from the archive is not timed.

Goal (issue 15): visible in Jaeger within 10 s of the flush, with zero spans dropped.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import Status  # noqa: E402

from fr_otel import __version__  # noqa: E402
from fr_otel.analysis.source import pick_incident, register_archive  # noqa: E402
from fr_otel.archive import import_dumps  # noqa: E402
from fr_otel.otel import model  # noqa: E402
from fr_otel.otel.encode import encode_requests  # noqa: E402
from fr_otel.sim import FleetSpec, simulate, write_fleet  # noqa: E402
from tests.e2e import stack  # noqa: E402

GOAL_S = 10.0
JOB = "bench"
INCIDENT = "collector-path"
# (tier, service, metric, labels): the counter that says a span has passed the tier
TIERS = [
    ("agent in", "agent", "otelcol_receiver_accepted_spans", {}),
    ("agent out", "agent", "otelcol_exporter_sent_spans", {}),
    ("gateway route", "gateway", "otelcol_exporter_sent_spans", {"exporter": "load_balancing"}),
    ("gateway owner", "gateway", "otelcol_receiver_accepted_spans", {"receiver": "otlp/routed"}),
    (
        "gateway to Jaeger",
        "gateway",
        "otelcol_exporter_sent_spans",
        {"exporter": "otlp_grpc/jaeger"},
    ),
    (
        "Jaeger stored",
        "jaeger",
        "otelcol_exporter_sent_spans",
        {"exporter": "jaeger_storage_exporter"},
    ),
]


@dataclass
class Sample:
    at: float
    counts: dict[str, float]
    cpu: dict[str, float]
    rss: dict[str, int]


@dataclass
class Run:
    name: str
    spans: int
    t0: float = 0.0
    client_s: float = 0.0
    client_cpu_s: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)
    flow_samples: int = 0
    """Samples taken until the last span was stored: CPU is counted over these only (the
    query check afterwards makes Jaeger read every span back)."""
    """The machine's 1-minute load average at the start and at the end (others' work too)."""
    samples: list[Sample] = field(default_factory=list)
    visible_s: float | None = None
    all_traces: bool = False
    check_s: float = 0.0
    in_jaeger: int = 0
    problems: dict[str, float] = field(default_factory=dict)


def _archive(tmp: Path, world: int, entries: int) -> Path:
    dumps, archive = tmp / "dumps", tmp / "archive"
    made = archive / f"job={JOB}" / f"incident={INCIDENT}"
    if len(list(made.glob("rank-*.parquet"))) == world and (tmp / f"{world}x{entries}").exists():
        return archive  # --keep DIR of an earlier run with the same shape
    write_fleet(simulate(FleetSpec(world=world, entries=entries, fault="gpu_hang")), dumps)
    report = import_dumps([dumps], archive=archive, job=JOB, incident=INCIDENT)
    if not report.ok:
        raise SystemExit(f"import failed: {report.problems[:3]}")
    (tmp / f"{world}x{entries}").touch()
    return archive


def _requests(archive: Path) -> list[ExportTraceServiceRequest]:
    with duckdb.connect() as connection:
        register_archive(connection, archive, only=pick_incident(archive, JOB, INCIDENT))
        table = connection.sql("SELECT * FROM src").to_arrow_table()
    return list(encode_requests(table))


class Stack:
    """Jaeger, one gateway and one agent on their own loopback addresses, fresh."""

    def __init__(self, workdir: Path, tempo_stand_in: bool) -> None:
        self.jaeger = stack.jaeger(workdir / "jaeger")
        routed = f"127.0.0.2:{stack.free_port('127.0.0.2')}"
        self.gateway = stack.collector(
            "gateway",
            ["gateway.yaml", "gateway.static.yaml"],
            workdir / "gateway",
            host="127.0.0.2",
            env={
                "FR_OTEL_ROUTED_LISTEN": routed,
                "FR_OTEL_GATEWAY_HOSTS": f"[{routed}]",
                "JAEGER_OTLP_ENDPOINT": self.jaeger.otlp_grpc,
                "TEMPO_OTLP_ENDPOINT": f"127.0.0.1:{stack.free_port()}",
                # as gateway.yaml's comments ask for in production
                "GOMEMLIMIT": "12800MiB",
                "GOGC": "400",
            },
        )
        self.gateway.ready.append(routed)
        if not tempo_stand_in:  # see the module's docstring
            self.gateway.argv.append(
                "--set=service::pipelines::traces/view::exporters=[otlp_grpc/jaeger,span_metrics]"
            )
        self.agent = stack.collector(
            "agent",
            ["agent.yaml"],
            workdir / "agent",
            host="127.0.0.3",
            # GOMEMLIMIT 1600MiB (stack.collector's) and GOGC as agent.yaml's comments ask
            env={"FR_OTEL_GATEWAY_ENDPOINT": self.gateway.grpc, "GOGC": "200"},
        )
        self.services = {"jaeger": self.jaeger, "gateway": self.gateway, "agent": self.agent}

    def sample(self) -> Sample:
        # one scrape per process per sample, however many of its counters are read: the
        # sampler shares the cores with what it measures
        texts = {name: s.metrics_text() for name, s in self.services.items()}
        counts = {
            tier: stack.metric_in(texts[service], metric, **labels)
            for tier, service, metric, labels in TIERS
        }
        return Sample(
            at=time.monotonic(),
            counts=counts,
            cpu={n: s.cpu_seconds() for n, s in self.services.items()},
            rss={n: s.rss_bytes() for n, s in self.services.items()},
        )

    def problems(self) -> dict[str, float]:
        """Every refused/failed/dropped counter that is not zero, Tempo's retries excluded."""
        out: dict[str, float] = {}
        for name, service in self.services.items():
            with stack.urllib.request.urlopen(f"http://{service.telemetry}/metrics") as r:
                text = r.read().decode()
            for line in text.splitlines():
                if line.startswith("#") or "tempo" in line:
                    continue
                metric = line.split("{")[0].split(" ")[0]
                if any(w in metric for w in ("refused", "failed", "dropped")):
                    value = float(line.rsplit(" ", 1)[1])
                    if value:
                        out[f"{name}: {line.rsplit(' ', 1)[0]}"] = value
        return out


def _measure(run: Run, services: Stack, send: Callable[[], None], timeout_s: float) -> None:
    services.sample()  # warm the metrics endpoints
    done = threading.Event()

    def client() -> None:
        # the client's own CPU: this thread's (the SDK runs here) and its child's (the
        # export command runs as one)
        thread_cpu = time.thread_time()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        send()
        run.client_s = time.monotonic() - run.t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        run.client_cpu_s = (time.thread_time() - thread_cpu) + (
            after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
        )
        done.set()

    start_load = os.getloadavg()[0]
    run.t0 = time.monotonic()
    thread = threading.Thread(target=client)
    thread.start()
    while True:
        sample = services.sample()
        run.samples.append(sample)
        if sample.counts["Jaeger stored"] >= run.spans:
            run.visible_s = sample.at - run.t0
            break
        if sample.at - run.t0 > timeout_s:
            break
        time.sleep(0.1)
    thread.join()
    run.load = (start_load, os.getloadavg()[0])
    run.flow_samples = len(run.samples)
    # every trace, as the UI loads one (not timed: the check reads all 128,000 spans back)
    check = time.monotonic()
    trace_ids = sorted(_trace_ids_sent)
    found: set[str] = set()
    spans: set[str] = set()
    for trace in services.jaeger.traces_by_id(trace_ids, chunk_size=500):
        found.add(trace["traceID"])
        spans |= {s["spanID"] for s in trace["spans"]}
    run.all_traces = found == set(trace_ids)
    run.check_s = time.monotonic() - check
    run.in_jaeger = len(spans)
    time.sleep(1.5)  # the counters settle (metrics are pulled)
    run.samples.append(services.sample())
    run.problems = services.problems()


_trace_ids_sent: set[str] = set()


def _send_fr_otel(archive: Path, endpoint: str) -> Callable[[], None]:
    def send() -> None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "fr_otel",
                "export",
                str(archive),
                "--otlp",
                endpoint,
                "--deadline",
                "300",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            # gzip as the SDK's run sends: to an agent on this machine fr-otel's default
            # is no compression, which would not compare like with like
            env={**os.environ, "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"},
        )

    return send


def _plain(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return tuple(_plain(v) for v in value.array_value.values)
    return getattr(value, kind)


def _send_sdk(requests: list[ExportTraceServiceRequest], endpoint: str) -> Callable[[], None]:
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.status import Status as SdkStatus
    from opentelemetry.trace.status import StatusCode

    class GivenIds(IdGenerator):
        def __init__(self, ids: list[tuple[int, int]]) -> None:
            self._trace_ids = iter([t for t, _ in ids])
            self._span_ids = iter([s for _, s in ids])

        def generate_trace_id(self) -> int:
            return next(self._trace_ids)

        def generate_span_id(self) -> int:
            return next(self._span_ids)

    # per rank: resource, ids, spans (prepared here, not timed)
    ranks: dict[int, tuple[dict[str, Any], list[tuple[int, int]], list[tuple[Any, ...]]]] = {}
    for request in requests:
        for resource_spans in request.resource_spans:
            resource = {a.key: _plain(a.value) for a in resource_spans.resource.attributes}
            _, ids, spans = ranks.setdefault(resource[model.RANK], (resource, [], []))
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    ids.append(
                        (int.from_bytes(s.trace_id, "big"), int.from_bytes(s.span_id, "big"))
                    )
                    message = (
                        s.status.message if s.status.code == Status.STATUS_CODE_ERROR else None
                    )
                    attributes = {a.key: _plain(a.value) for a in s.attributes}
                    spans.append(
                        (s.name, s.start_time_unix_nano, s.end_time_unix_nano, attributes, message)
                    )

    def send() -> None:
        for resource, ids, spans in ranks.values():
            exporter = OTLPSpanExporter(
                endpoint=f"{endpoint}/v1/traces", compression=Compression.Gzip
            )
            processor = BatchSpanProcessor(exporter, max_queue_size=len(spans))
            provider = TracerProvider(
                resource=Resource(resource), id_generator=GivenIds(ids), shutdown_on_exit=False
            )
            provider.add_span_processor(processor)
            tracer = provider.get_tracer(model.SCOPE_NAME, __version__)
            for name, start_ns, end_ns, attributes, message in spans:
                span = tracer.start_span(
                    name, kind=SpanKind.INTERNAL, start_time=start_ns, attributes=attributes
                )
                if message is not None:
                    span.set_status(SdkStatus(StatusCode.ERROR, message))
                span.end(end_time=end_ns)
            provider.force_flush()
            provider.shutdown()

    return send


def _report(run: Run) -> None:
    first, last = run.samples[0], run.samples[-1]
    n = run.spans
    visible = f"{run.visible_s:.2f} s" if run.visible_s is not None else "NOT within the timeout"
    queryable = "all" if run.all_traces else "NOT all"
    print(f"\n== {run.name}: {n} spans")
    print(
        f"  load average (1 min) at start / end: {run.load[0]:.2f} / {run.load[1]:.2f}"
        f" on {os.cpu_count()} cores"
    )
    print(
        f"  client done (export returned / SDK flushed): {run.client_s:.2f} s"
        f" (client CPU {run.client_cpu_s:.2f} s)"
    )
    print(f"  last span stored in Jaeger (queryable):      {visible}")
    print(
        f"  traces found through the query API afterwards: {queryable}"
        f" (/api/traces?traceID=..., checked in {run.check_s:.1f} s, not timed)"
    )
    for tier, *_ in TIERS:
        reached = next((s.at - run.t0 for s in run.samples if s.counts[tier] >= n), None)
        rate = f"{n / reached:10,.0f} spans/s (all in at {reached:.2f} s)" if reached else "not all"
        print(f"  {tier:<18} {rate}   count {last.counts[tier]:,.0f}")
    flow = run.samples[: run.flow_samples] or run.samples
    total = run.client_cpu_s
    for name in ("agent", "gateway", "jaeger"):
        cpu = flow[-1].cpu[name] - first.cpu[name]
        total += cpu
        peak = max(s.rss[name] for s in flow) / 2**20
        print(f"  {name:<8} CPU {cpu:6.2f} s   peak RSS {peak:7.1f} MiB   (until stored)")
    # the machine may be shared: with every core to itself the path needs at least this long
    cores = os.cpu_count() or 1
    print(
        f"  CPU of client, Collectors and Jaeger: {total:.2f} s = {total / cores:.2f} s on"
        f" {cores} cores with nothing else running"
    )
    dropped = n - run.in_jaeger
    print(
        f"  spans in Jaeger {run.in_jaeger:,} -> dropped {max(dropped, 0):,}"
        f"{' (more than sent: duplicates)' if dropped < 0 else ''}"
    )
    print(f"  Collector counters refused/failed/dropped: {run.problems or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--world", type=int, default=64)
    parser.add_argument("--entries", type=int, default=2_000)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep logs and archives here (an incident of the same shape made there before"
        " is reused)",
    )
    parser.add_argument("--no-sdk", action="store_true", help="skip the SDK peer figure")
    parser.add_argument(
        "--tempo-stand-in",
        action="store_true",
        help="keep the gateway's Tempo exporter, pointed at a closed port (see above)",
    )
    args = parser.parse_args()
    if stack.missing_binaries():
        raise SystemExit(f"{stack.missing_binaries()} missing: run `make e2e-tools`")

    with tempfile.TemporaryDirectory(prefix="fr-otel-collector-path-") as tmp_name:
        tmp = args.keep or Path(tmp_name)
        archive = _archive(tmp, args.world, args.entries)
        requests = _requests(archive)
        n = sum(len(sc.spans) for r in requests for rs in r.resource_spans for sc in rs.scope_spans)
        _trace_ids_sent.update(
            span.trace_id.hex()
            for r in requests
            for rs in r.resource_spans
            for sc in rs.scope_spans
            for span in sc.spans
        )
        tempo = "Tempo exporter to a closed port" if args.tempo_stand_in else "no Tempo"
        print(
            f"incident: {args.world} ranks x {args.entries} entries = {n:,} spans in"
            f" {len(_trace_ids_sent):,} traces; agent -> gateway (route + owner) -> Jaeger"
            f" ({tempo})"
        )
        runs = [
            (
                "fr-otel export --otlp (HTTP, gzip)",
                lambda s: _send_fr_otel(archive, f"http://{s.agent.http}"),
            )
        ]
        if not args.no_sdk:
            runs.append(
                (
                    "OpenTelemetry SDK + its OTLP/HTTP exporter (gzip)",
                    lambda s: _send_sdk(requests, f"http://{s.agent.http}"),
                )
            )
        results = []
        for index, (name, sender) in enumerate(runs):
            shutil.rmtree(tmp / f"run{index}", ignore_errors=True)  # queues start empty
            services = Stack(tmp / f"run{index}", tempo_stand_in=args.tempo_stand_in)
            with stack.running(services.jaeger, services.gateway, services.agent):
                run = Run(name=name, spans=n)
                _measure(run, services, sender(services), args.timeout)
            _report(run)
            results.append(run)
        ours = results[0]
        met = (
            ours.visible_s is not None
            and ours.visible_s <= GOAL_S
            and ours.all_traces
            and ours.in_jaeger >= n
            and not ours.problems
        )
        verdict = "met" if met else "NOT met"
        print(f"\ngoal (visible in Jaeger within {GOAL_S:.0f} s, zero dropped): {verdict}")


if __name__ == "__main__":
    main()
