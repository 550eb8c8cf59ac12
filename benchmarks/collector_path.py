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
  stored the last span (its storage exporter's own counter, and the gateways' counter of
  what Jaeger acknowledged: Jaeger's alone counts a span sent twice twice), and until every
  trace is confirmed through the query API (``/api/traces?traceID=...``, as the UI loads
  them);
- spans per second through each tier: N / (time the tier's counter reached N);
- the Collectors' CPU time (user + system) and peak RSS (/proc, sampled every
  ``--interval``, 0.1 s);
- spans dropped: the spans Jaeger does not have, and the Collectors' own refused/failed
  counters (the Tempo exporter's retries against the closed port excluded).

Peer figure, same run, same fresh stack: the same spans (same ids, attributes, status,
resource per rank) created with the OpenTelemetry SDK (``TracerProvider``, one per rank,
``BatchSpanProcessor`` with a queue as large as the rank's buffer, ranks one after another)
and sent by the SDK's own
OTLP/HTTP exporter (``opentelemetry-exporter-otlp-proto-http``, gzip) to the same agent.
Building the SDK's inputs from the archive is not timed.

Fleet scale (``--ranks 1024 --gateways 2``): the ranks are split into as many nodes as
there are gateways, each node with its own agent sending to "its" gateway (as a DNS name's
answers spread agents over gateways, and as tests/e2e/test_fleet.py runs them); the gateways
route every trace to its owner among all of them (``gateway.static.yaml``: the same list of
every gateway's routed address on each). Both paths send every node's ranks at the same
time, one sender per node. What is printed per path, and side by side at the end:

- spans through each tier, summed over the Collectors of that tier (their own counters:
  ``otelcol_receiver_accepted_spans``, ``otelcol_exporter_sent_spans``), Jaeger's stored
  count, and every refused/failed/dropped counter that is not zero;
- each gateway's peak RSS against the memory limits its shipped config sets:
  ``memory_limiter``'s ``limit_percentage`` (hard) and that less ``spike_limit_percentage``
  (soft: refusals start there) of the container memory its ``docker run`` line gives;
- the seconds from the flush until the last span is stored in Jaeger (its in-memory
  store: queryable from then on), and the traces read back through the query API (all of
  them, or ``--query-sample`` of them with their every span counted).

``--repeat N`` runs N rounds of both paths, each run on a fresh stack, the SDK path first in
every other round, and judges the speed goal on the medians: on a machine this small one
run's time to the last span swings by a tenth or more from run to run. Every run of ours
must meet the other goals.

Goals (issue 15): visible in Jaeger within 10 s of the flush, with zero spans dropped (the
64-rank, one-gateway shape). Goals (issue 46, at ``--gateways`` > 1): nothing dropped; each
gateway's peak RSS under the hard limit its config sets; the last span stored within 0.25x
the SDK path's time.
"""

from __future__ import annotations

import argparse
import os
import random
import re
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

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
import pyarrow as pa  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import Status  # noqa: E402

from fr_otel import __version__  # noqa: E402
from fr_otel.analysis.source import pick_incident, register_archive  # noqa: E402
from fr_otel.archive import import_dumps  # noqa: E402
from fr_otel.otel import model  # noqa: E402
from fr_otel.otel.wire import encode_requests_fast  # noqa: E402
from fr_otel.sim import FleetSpec, simulate, write_fleet  # noqa: E402
from tests.e2e import stack  # noqa: E402

GOAL_S = 10.0
SPEED_GOAL = 0.25
"""Issue 46: our last span stored within this share of the SDK path's time."""
JOB = "bench"
INCIDENT = "collector-path"
# (tier, kind of service, metric, labels): the counter that says a span has passed the
# tier, summed over every service of that kind
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
    """Spans found through the query API in the traces read back."""
    expected_in_checked: int = 0
    """Spans sent in the traces read back (all of them, or the sample's)."""
    checked_traces: int = 0
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


def _node_archives(archive: Path, tmp: Path, world: int, nodes: int) -> list[Path]:
    """The incident's ranks split into ``nodes`` blocks of consecutive ranks, each block an
    archive of its own (links to the rank files): what each node's ranks flush."""
    if nodes == 1:
        return [archive]
    made = archive / f"job={JOB}" / f"incident={INCIDENT}"
    out = []
    for node in range(nodes):
        root = tmp / f"node{node + 1}-of-{nodes}"
        folder = root / f"job={JOB}" / f"incident={INCIDENT}"
        shutil.rmtree(root, ignore_errors=True)
        folder.mkdir(parents=True)
        for rank in range(world * node // nodes, world * (node + 1) // nodes):
            name = f"rank-{rank:06d}.parquet"
            os.link(made / name, folder / name)
        out.append(root)
    return out


def _node_of(rank: int, world: int, nodes: int) -> int:
    return rank * nodes // world


@dataclass(frozen=True)
class MemoryLimits:
    """What a shipped config lets a Collector's memory reach, in bytes."""

    container: int
    hard: int
    """memory_limiter's limit_percentage of the container: past it, data is refused."""
    soft: int
    """The hard limit less spike_limit_percentage: refusals (retryable) start here."""


def memory_limits(config: str) -> MemoryLimits:
    """``config``'s memory_limiter percentages of the container memory its ``docker run``
    line (``--memory Ng``) gives."""
    text = (stack.CONFIGS / config).read_text()
    found = re.search(r"--memory (\d+)g\b", text)
    if found is None:
        raise SystemExit(f"{config}: no `--memory Ng` in its docker run line")
    container = int(found[1]) * 2**30
    limiter = yaml.safe_load(text)["processors"]["memory_limiter"]
    hard = container * int(limiter["limit_percentage"]) // 100
    soft = hard - container * int(limiter["spike_limit_percentage"]) // 100
    return MemoryLimits(container=container, hard=hard, soft=soft)


def _requests(archive: Path) -> list[bytes]:
    """The incident's spans as serialized requests (decoded one at a time where read: a
    decoded request's objects take several times its bytes)."""
    with duckdb.connect() as connection:
        register_archive(connection, archive, only=pick_incident(archive, JOB, INCIDENT))
        table = connection.sql("SELECT * FROM src").to_arrow_table()
        requests = [bytes(r) for r in encode_requests_fast(table)]
    del table
    pa.default_memory_pool().release_unused()  # the table's memory, for the stack's use
    return requests


class Stack:
    """Jaeger, ``gateways`` gateways and as many agents (agent n sends to gateway n), each
    Collector on its own loopback address, fresh."""

    def __init__(
        self,
        workdir: Path,
        tempo_stand_in: bool,
        gateways: int = 1,
        agents_route: bool = False,
    ) -> None:
        self.jaeger = stack.jaeger(workdir / "jaeger")
        self.gateways = stack.static_gateways(
            [f"127.0.1.{g}" for g in range(1, gateways + 1)],
            workdir,
            self.jaeger,
            # as gateway.yaml's comments ask for in production
            env={"GOMEMLIMIT": "12800MiB", "GOGC": "400"},
        )
        for gateway in self.gateways:
            if not tempo_stand_in:  # see the module's docstring
                gateway.argv.append(
                    "--set=service::pipelines::traces/view::exporters="
                    "[otlp_grpc/jaeger,span_metrics]"
                )
        # agents that route by trace id themselves (--agents-route): agent.route.yaml, with
        # the gateways' fixed list (gateway.static.yaml) as the gateways have it
        routing = (
            {"FR_OTEL_GATEWAY_HOSTS": self.gateways[0].env["FR_OTEL_GATEWAY_HOSTS"]}
            if agents_route
            else {}
        )
        overlays = ["agent.route.yaml", "gateway.static.yaml"] if agents_route else []
        self.agents = [
            stack.collector(
                f"agent{g + 1}",
                ["agent.yaml", *overlays],
                workdir / f"agent{g + 1}",
                host=f"127.0.2.{g + 1}",
                # GOMEMLIMIT 1600MiB (stack.collector's) and GOGC as agent.yaml's comments ask
                env={"FR_OTEL_GATEWAY_ENDPOINT": gateway.grpc, "GOGC": "200", **routing},
            )
            for g, gateway in enumerate(self.gateways)
        ]
        self._texts: dict[str, str] = {}
        self.services: dict[str, stack.Service] = {
            "jaeger": self.jaeger,
            **{s.name: s for s in self.gateways},
            **{s.name: s for s in self.agents},
        }

    def all(self) -> list[stack.Service]:
        """In the order they start: each before what sends to it."""
        return [self.jaeger, *self.gateways, *self.agents]

    def _scrape(self, name: str) -> str:
        """A service's metrics now, or as last scraped when it does not answer in time (a
        busy machine: its counters only grow, so the sample is late, never wrong)."""
        try:
            self._texts[name] = self.services[name].metrics_text()
        except OSError:
            if name not in self._texts:
                raise
        return self._texts[name]

    def sample(self) -> Sample:
        # one scrape per process per sample, however many of its counters are read: the
        # sampler shares the cores with what it measures
        texts = {name: self._scrape(name) for name in self.services}
        counts = {
            tier: sum(
                stack.metric_in(text, metric, **labels)
                for name, text in texts.items()
                if name.rstrip("0123456789") == kind
            )
            for tier, kind, metric, labels in TIERS
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


def _measure(
    run: Run,
    services: Stack,
    send: Callable[[], None],
    timeout_s: float,
    interval_s: float,
    query_sample: int,
) -> None:
    services.sample()  # warm the metrics endpoints
    done = threading.Event()
    failed: list[BaseException] = []

    def client() -> None:
        # the client's CPU: this process's (the SDK's threads run here; the sampler's few
        # scrapes are counted too) and its children's (the export commands)
        own_cpu = time.process_time()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            send()
        except BaseException as error:  # raised again below, once the stack is measured
            failed.append(error)
            done.set()
            return
        run.client_s = time.monotonic() - run.t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        run.client_cpu_s = (time.process_time() - own_cpu) + (
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
        # Jaeger's counter alone counts a span twice when a gateway's request timed out
        # after Jaeger had stored it and was sent again; the gateways' counters count what
        # Jaeger acknowledged, once
        if min(sample.counts["gateway to Jaeger"], sample.counts["Jaeger stored"]) >= run.spans:
            run.visible_s = sample.at - run.t0
            break
        if sample.at - run.t0 > timeout_s or failed:
            break
        time.sleep(interval_s)
    thread.join()
    if failed:
        raise failed[0]
    run.load = (start_load, os.getloadavg()[0])
    run.flow_samples = len(run.samples)
    # every trace (or a sample), as the UI loads one (not timed: the check reads every span
    # of those traces back)
    check = time.monotonic()
    trace_ids = sorted(_trace_ids_sent)
    if 0 < query_sample < len(trace_ids):
        trace_ids = sorted(random.Random(46).sample(trace_ids, query_sample))
    found: set[str] = set()
    spans: set[str] = set()
    for start in range(0, len(trace_ids), 500):  # a chunk at a time: Jaeger's JSON is large
        for trace in services.jaeger.traces_by_id(trace_ids[start : start + 500], chunk_size=500):
            found.add(trace["traceID"])
            spans |= {s["spanID"] for s in trace["spans"]}
    run.all_traces = found == set(trace_ids)
    run.check_s = time.monotonic() - check
    run.in_jaeger = len(spans)
    run.checked_traces = len(trace_ids)
    run.expected_in_checked = sum(_spans_per_trace[t] for t in trace_ids)
    time.sleep(1.5)  # the counters settle (metrics are pulled)
    run.samples.append(services.sample())
    run.problems = services.problems()


_trace_ids_sent: set[str] = set()
_spans_per_trace: dict[str, int] = {}


def _at_once(sends: list[Callable[[], None]]) -> None:
    """Every node's sender at the same time (the nodes flush together); the first error."""
    errors: list[BaseException] = []

    def guarded(one: Callable[[], None]) -> None:
        try:
            one()
        except BaseException as error:  # re-raised below, in the caller's thread
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(one,)) for one in sends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _send_fr_otel(archives: list[Path], endpoints: list[str]) -> Callable[[], None]:
    """``fr-otel export --otlp`` of each node's archive to its agent, all at once."""
    return lambda: _at_once(
        [
            _export_one(archive, endpoint)
            for archive, endpoint in zip(archives, endpoints, strict=True)
        ]
    )


def _export_one(archive: Path, endpoint: str) -> Callable[[], None]:
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


def _send_sdk(requests: list[bytes], world: int, endpoints: list[str]) -> Callable[[], None]:
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
    for raw in requests:
        for resource_spans in ExportTraceServiceRequest.FromString(raw).resource_spans:
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

    def send_rank(resource: dict[str, Any], ids: list[tuple[int, int]], spans: list[Any]) -> None:
        endpoint = endpoints[_node_of(int(resource[model.RANK]), world, len(endpoints))]
        exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", compression=Compression.Gzip)
        processor = BatchSpanProcessor(exporter, max_queue_size=max(len(spans), 512))
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

    # one sender per node, its ranks one after another (the SDK's own threads export)
    by_node: list[list[tuple[Any, ...]]] = [[] for _ in endpoints]
    for rank, one in sorted(ranks.items()):
        by_node[_node_of(rank, world, len(endpoints))].append(one)

    def node(ranks_of_node: list[tuple[Any, ...]]) -> Callable[[], None]:
        def send() -> None:
            for one in ranks_of_node:
                send_rank(*one)

        return send

    return lambda: _at_once([node(n) for n in by_node])


def _peak_rss(run: Run, name: str) -> int:
    flow = run.samples[: run.flow_samples] or run.samples
    return max(s.rss[name] for s in flow)


def _stored(run: Run) -> int:
    return int(run.samples[-1].counts["Jaeger stored"])


def _report(run: Run, names: list[str], limits: MemoryLimits) -> None:
    first, last = run.samples[0], run.samples[-1]
    n = run.spans
    visible = f"{run.visible_s:.2f} s" if run.visible_s is not None else "NOT within the timeout"
    queryable = "all" if run.all_traces else "NOT all"
    print(f"\n== {run.name}: {n:,} spans")
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
        f"  traces read back through the query API afterwards: {queryable} of"
        f" {run.checked_traces:,} (/api/traces?traceID=..., {run.in_jaeger:,} of their"
        f" {run.expected_in_checked:,} spans; {run.check_s:.1f} s, not timed)"
    )
    for tier, *_ in TIERS:
        reached = next((s.at - run.t0 for s in run.samples if s.counts[tier] >= n), None)
        rate = f"{n / reached:10,.0f} spans/s (all in at {reached:.2f} s)" if reached else "not all"
        print(f"  {tier:<18} {rate}   count {last.counts[tier]:,.0f}")
    flow = run.samples[: run.flow_samples] or run.samples
    total = run.client_cpu_s
    for name in names:
        cpu = flow[-1].cpu[name] - first.cpu[name]
        total += cpu
        peak = _peak_rss(run, name)
        against = (
            f" = {peak / limits.hard:4.0%} of its config's hard limit"
            if name.startswith("gateway")
            else ""
        )
        print(
            f"  {name:<9} CPU {cpu:7.2f} s   peak RSS {peak / 2**20:8.1f} MiB{against}"
            "   (until stored)"
        )
    # the machine may be shared: with every core to itself the path needs at least this long
    cores = os.cpu_count() or 1
    print(
        f"  CPU of client, Collectors and Jaeger: {total:.2f} s = {total / cores:.2f} s on"
        f" {cores} cores with nothing else running"
    )
    dropped = n - _stored(run)
    print(
        f"  spans stored in Jaeger {_stored(run):,} -> dropped {max(dropped, 0):,}"
        f"{' (more than sent: duplicates)' if dropped < 0 else ''}"
    )
    print(f"  Collector counters refused/failed/dropped: {run.problems or 'none'}")


def _duplicates(run: Run) -> int:
    return max(_stored(run) - run.spans, 0)


def _dropped(run: Run) -> int:
    """Spans sent that Jaeger does not hold: by its counter, by what it acknowledged to the
    gateways, and by the traces read back."""
    acknowledged = int(run.samples[-1].counts["gateway to Jaeger"])
    return max(
        run.spans - _stored(run),
        run.spans - acknowledged,
        run.expected_in_checked - run.in_jaeger,
        0,
    )


def _side_by_side(
    runs: list[Run], gateways: list[str], limits: MemoryLimits, which: str = ""
) -> None:
    def seconds(value: float | None) -> str:
        return "timeout" if value is None else f"{value:.2f}"

    rows: list[tuple[str, list[str]]] = [
        ("spans sent", [f"{r.spans:,}" for r in runs]),
        *(
            (f"{tier} (counter)", [f"{r.samples[-1].counts[tier]:,.0f}" for r in runs])
            for tier, *_ in TIERS
        ),
        ("spans dropped", [f"{_dropped(r):,}" for r in runs]),
        ("stored twice (Jaeger's count - sent)", [f"{_duplicates(r):,}" for r in runs]),
        ("refused/failed counters", [f"{sum(r.problems.values()):,.0f}" for r in runs]),
        *(
            (f"{g} peak RSS, MiB", [f"{_peak_rss(r, g) / 2**20:,.0f}" for r in runs])
            for g in gateways
        ),
        ("last span stored, s", [seconds(r.visible_s) for r in runs]),
        ("client done, s", [f"{r.client_s:.2f}" for r in runs]),
    ]
    width = max(len(label) for label, _ in rows)
    names = ["fr-otel export", "OTel SDK"][: len(runs)]
    print(f"\n== side by side{which} ({', '.join(names)}: same spans, same fresh stack each)")
    print(f"  {'':<{width}}" + "".join(f"{name:>18}" for name in names))
    for label, values in rows:
        print(f"  {label:<{width}}" + "".join(f"{v:>18}" for v in values))
    print(
        f"  gateway memory limits (gateway.yaml's memory_limiter of a"
        f" {limits.container / 2**30:.0f} GiB container): hard {limits.hard / 2**20:,.0f} MiB,"
        f" soft {limits.soft / 2**20:,.0f} MiB"
    )


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _rounds(ours: list[Run], sdk: list[Run]) -> None:
    """With --repeat: each round's pair, then the medians the speed goal is judged on."""

    def seconds(value: float | None) -> str:
        return "timeout" if value is None else f"{value:8.2f}"

    print("\n== rounds (a fresh stack for every run; the SDK path first in even rounds)")
    print(f"  {'round':<7}{'last span stored, s':>38}{'client done, s':>34}")
    print(f"  {'':<7}{'fr-otel':>12}{'SDK':>12}{'ratio':>10}{'fr-otel':>14}{'SDK':>12}")
    for index, (a, b) in enumerate(zip(ours, sdk, strict=True)):
        ratio = (
            f"{a.visible_s / b.visible_s:10.2f}"
            if a.visible_s is not None and b.visible_s is not None
            else f"{'-':>10}"
        )
        print(
            f"  {index + 1:<7}{seconds(a.visible_s):>12}{seconds(b.visible_s):>12}{ratio}"
            f"{a.client_s:14.2f}{b.client_s:12.2f}"
        )


def _verdicts(ours: list[Run], sdk: list[Run], gateways: list[str], limits: MemoryLimits) -> None:
    """Judged on every run of ours (each must keep every span and stay under the limits)
    and, for speed, on the medians of the rounds: one run's time swings by a tenth or more
    on a machine this small."""
    if len(gateways) == 1:
        met = all(
            run.visible_s is not None
            and run.visible_s <= GOAL_S
            and run.all_traces
            and _dropped(run) == 0
            and not run.problems
            for run in ours
        )
        verdict = "met" if met else "NOT met"
        print(f"\ngoal (visible in Jaeger within {GOAL_S:.0f} s, zero dropped): {verdict}")
        return
    print()
    n = ours[0].spans
    kept = all(_dropped(r) == 0 and r.all_traces and not r.problems for r in ours)
    print(
        f"goal (nothing dropped): {'met' if kept else 'NOT met'} ("
        + "; ".join(
            f"{_stored(r):,} of {n:,} stored, {_dropped(r):,} dropped,"
            f" {sum(r.problems.values()):,.0f} refused/failed"
            for r in ours
        )
        + ")"
    )
    peaks = {g: max(_peak_rss(r, g) for r in ours) for g in gateways}
    under = all(peak < limits.hard for peak in peaks.values())
    print(
        f"goal (each gateway's peak RSS under its config's {limits.hard / 2**20:,.0f} MiB"
        f" limit): {'met' if under else 'NOT met'} ("
        + ", ".join(f"{g} {p / 2**20:,.0f} MiB" for g, p in peaks.items())
        + f"; soft limit {limits.soft / 2**20:,.0f} MiB)"
    )
    if not sdk:
        print(f"goal (last span within {SPEED_GOAL}x the SDK path's time): not measured (--no-sdk)")
        return
    times = [r.visible_s for r in ours], [r.visible_s for r in sdk]
    if any(t is None for t in (*times[0], *times[1])):
        fast, share = False, "a run timed out"
    else:
        a = _median([t for t in times[0] if t is not None])
        b = _median([t for t in times[1] if t is not None])
        fast = a <= SPEED_GOAL * b
        of = f"medians of {len(ours)} rounds: " if len(ours) > 1 else ""
        share = f"{of}{a:.2f} s against {b:.2f} s: {a / b:.2f}x"
    print(
        f"goal (last span stored within {SPEED_GOAL}x the SDK path's time):"
        f" {'met' if fast else 'NOT met'} ({share})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--world", "--ranks", dest="world", type=int, default=64)
    parser.add_argument("--entries", type=int, default=2_000)
    parser.add_argument(
        "--gateways",
        type=int,
        default=1,
        help="gateways, and as many agents (nodes), each agent sending to its gateway",
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--interval", type=float, default=0.1, help="seconds between the samples of counters"
    )
    parser.add_argument(
        "--query-sample",
        type=int,
        default=0,
        help="read back this many traces, chosen at random, through the query API (0: all)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep logs and archives here (an incident of the same shape made there before"
        " is reused)",
    )
    parser.add_argument("--no-sdk", action="store_true", help="skip the SDK peer figure")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of both paths (the speed goal is judged on the medians)",
    )
    parser.add_argument(
        "--agents-route",
        action="store_true",
        help="the agents route spans by trace id to their owner gateway themselves"
        " (collector-config/agent.route.yaml, with gateway.static.yaml's list): one hop fewer",
    )
    parser.add_argument(
        "--tempo-stand-in",
        action="store_true",
        help="keep the gateway's Tempo exporter, pointed at a closed port (see above)",
    )
    args = parser.parse_args()
    if stack.missing_binaries():
        raise SystemExit(f"{stack.missing_binaries()} missing: run `make e2e-tools`")
    limits = memory_limits("gateway.yaml")

    with tempfile.TemporaryDirectory(prefix="fr-otel-collector-path-") as tmp_name:
        tmp = args.keep or Path(tmp_name)
        archive = _archive(tmp, args.world, args.entries)
        nodes = _node_archives(archive, tmp, args.world, args.gateways)
        requests = _requests(archive)
        n = 0
        for raw in requests:
            for rs in ExportTraceServiceRequest.FromString(raw).resource_spans:
                for sc in rs.scope_spans:
                    for span in sc.spans:
                        n += 1
                        trace_id = span.trace_id.hex()
                        _spans_per_trace[trace_id] = _spans_per_trace.get(trace_id, 0) + 1
        _trace_ids_sent.update(_spans_per_trace)
        tempo = "Tempo exporter to a closed port" if args.tempo_stand_in else "no Tempo"
        print(
            f"incident: {args.world:,} ranks x {args.entries:,} entries = {n:,} spans in"
            f" {len(_trace_ids_sent):,} traces; {args.gateways} node(s), each its agent ->"
            f" {args.gateways} gateway(s) (route by trace id + owner) -> Jaeger ({tempo})"
        )
        runs: list[tuple[str, Callable[[Stack], Callable[[], None]]]] = [
            (
                "fr-otel export --otlp (HTTP, gzip)",
                lambda s: _send_fr_otel(nodes, [f"http://{a.http}" for a in s.agents]),
            )
        ]
        if not args.no_sdk:
            runs.append(
                (
                    "OpenTelemetry SDK + its OTLP/HTTP exporter (gzip)",
                    lambda s: _send_sdk(
                        requests, args.world, [f"http://{a.http}" for a in s.agents]
                    ),
                )
            )
        results: list[list[Run]] = [[] for _ in runs]
        names = ["agent" + str(g + 1) for g in range(args.gateways)]
        names += [f"gateway{g + 1}" for g in range(args.gateways)] + ["jaeger"]
        for round_ in range(args.repeat):
            # the SDK path first in every other round: a machine that drifts (a neighbour,
            # the page cache) then weighs on both paths alike
            order = list(enumerate(runs))
            for index, (name, sender) in order[::-1] if round_ % 2 else order:
                shutil.rmtree(tmp / f"run{index}", ignore_errors=True)  # queues start empty
                services = Stack(
                    tmp / f"run{index}",
                    tempo_stand_in=args.tempo_stand_in,
                    gateways=args.gateways,
                    agents_route=args.agents_route,
                )
                send = sender(services)  # the SDK's inputs are made here, not timed
                with stack.running(*services.all()):
                    run = Run(name=name, spans=n)
                    _measure(run, services, send, args.timeout, args.interval, args.query_sample)
                if args.repeat > 1:
                    print(f"\n(round {round_ + 1} of {args.repeat})", end="")
                _report(run, names, limits)
                results[index].append(run)
        gateways = [f"gateway{g + 1}" for g in range(args.gateways)]
        last = f", round {args.repeat} of {args.repeat}" if args.repeat > 1 else ""
        _side_by_side([r[-1] for r in results], gateways, limits, last)
        ours, sdk = results[0], results[1] if len(results) > 1 else []
        if args.repeat > 1 and sdk:
            _rounds(ours, sdk)
        _verdicts(ours, sdk, gateways, limits)


if __name__ == "__main__":
    main()
