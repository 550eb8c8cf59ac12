"""An incident's log record and count come out of a real Collector (build/bin/otelcol-fr-otel
on the shipped ``local.yaml``): ``fr-otel analyze`` sends them over OTLP/HTTP and ``fr-otel
export --findings-only`` over OTLP/gRPC; the log records land in the logs file, in the
trace of the verdict's collective, and the count is served on the Prometheus endpoint as
``fr_otel_incidents_total{fr_otel_job, fr_otel_finding_kind, ...}``, the series the alert
rules read, with the count's start as its created timestamp (what lets Prometheus see a new
series rise from zero).

Stand-ins, and why: Jaeger and Tempo, local.yaml's viewers, point at closed loopback ports
(their queues retry in memory; nothing here reads them). The incident is a simulated
8-rank fleet whose rank 3 skipped a collective (the recorder's own declaration reaches a
real OTLP receiver in tests/integration/test_incident_signal_gloo.py).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from fr_otel.analysis import analyze
from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.otel import model
from fr_otel.otel.verdict import finding_ids
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.e2e import stack
from tests.e2e.stack import free_port, running, wait_until

PROTOBUF = (
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
)


def _incident_records(folder: Path) -> list[dict[str, Any]]:
    """Every fr_otel.incident log record in the Collector's logs files (OTLP JSON)."""
    found = []
    for path in sorted(folder.glob("logs*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:  # a line being written
                continue
            for resource_logs in data.get("resourceLogs") or []:
                for scope in resource_logs.get("scopeLogs") or []:
                    found += [
                        r
                        for r in scope.get("logRecords") or []
                        if r.get("eventName") == model.INCIDENT_EVENT
                    ]
    return found


def _attributes(record: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for item in record.get("attributes") or []:
        [(kind, value)] = item["value"].items()
        if kind == "arrayValue":
            value = [int(v["intValue"]) for v in value.get("values") or []]
        elif kind == "intValue":
            value = int(value)
        out[item["key"]] = value
    return out


def _scrape(address: str, accept: str | None = None) -> bytes:
    request = urllib.request.Request(
        f"http://{address}/metrics", headers={"Accept": accept} if accept else {}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return bytes(response.read())


# --- the Prometheus protobuf exposition, read by hand (no client_model here) -------------


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, varint or bytes) of one message; fixed64 values as their 8 bytes."""
    out: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            out.append((number, value))
        elif wire == 1:
            out.append((number, data[at : at + 8]))
            at += 8
        elif wire == 2:
            size, at = _varint(data, at)
            out.append((number, data[at : at + size]))
            at += size
        else:
            raise ValueError(f"wire type {wire}")
    return out


def _created_ns(exposition: bytes, name: str, **labels: str) -> list[int]:
    """The created timestamps of counter ``name``'s series whose labels include ``labels``
    (MetricFamily: 1 name, 4 metric; Metric: 1 label, 3 counter; Counter: 3 created)."""
    found = []
    at = 0
    while at < len(exposition):
        size, at = _varint(exposition, at)
        family = dict(_fields(exposition[at : at + size])[:1])
        message = exposition[at : at + size]
        at += size
        if family.get(1) != name.encode():
            continue
        for number, metric in _fields(message):
            if number != 4 or not isinstance(metric, bytes):
                continue
            parts = _fields(metric)
            pairs = {
                dict(_fields(label)).get(1): dict(_fields(label)).get(2)
                for n, label in parts
                if n == 1 and isinstance(label, bytes)
            }
            if any(pairs.get(k.encode()) != v.encode() for k, v in labels.items()):
                continue
            for n, counter in parts:
                if n == 3 and isinstance(counter, bytes):
                    for m, created in _fields(counter):
                        if m == 3 and isinstance(created, bytes):
                            stamp = dict(_fields(created))
                            seconds, nanos = stamp.get(1, 0), stamp.get(2, 0)
                            assert isinstance(seconds, int) and isinstance(nanos, int)
                            found.append(seconds * 10**9 + nanos)
    return found


def test_the_incident_comes_out_of_the_collector_as_a_log_record_and_a_prometheus_counter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = FleetSpec(world=8, entries=60, fault="skipped_collective", fault_rank=3)
    write_fleet(simulate(spec), tmp_path / "dumps")
    archive = tmp_path / "archive"
    assert import_dumps([tmp_path / "dumps"], archive=archive, job="sigjob", incident="i-1").ok
    analysis = analyze(archive)
    assert analysis.root_cause is not None
    root = analysis.findings[analysis.root_cause]
    trace_id, span_id = finding_ids("sigjob", root, analysis.root_cause)

    prometheus = f"127.0.0.1:{free_port()}"
    collector = stack.collector(
        "collector",
        ["local.yaml"],
        tmp_path,
        env={
            "JAEGER_OTLP_ENDPOINT": f"127.0.0.1:{free_port()}",
            "TEMPO_OTLP_ENDPOINT": f"127.0.0.1:{free_port()}",
            "FR_OTEL_PROMETHEUS_LISTEN": prometheus,
        },
    )
    with running(collector):
        began = time.time_ns()
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://{collector.http}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        assert main(["analyze", str(archive)]) == 1
        assert "the log record and the count sent" in capsys.readouterr().err
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL")
        code = main(
            [
                "export",
                str(archive),
                "--otlp",
                f"http://{collector.grpc}",
                "--protocol",
                "grpc",
                "--findings-only",
            ]
        )
        out = capsys.readouterr().out
        assert code == 0, out
        assert "the log record and the count sent" in out, out

        records = wait_until(
            "both incident log records in the logs file",
            lambda: len(found := _incident_records(tmp_path / "otlp-logs")) >= 2 and found,
            30,
        )
        series = wait_until(
            "the incident count on the Prometheus endpoint",
            lambda: [
                line
                for line in _scrape(prometheus).decode().splitlines()
                if line.startswith("fr_otel_incidents_total{")
                and 'fr_otel_job="sigjob"' in line
                and 'fr_otel_finding_kind="skipped_collective"' in line
            ],
            30,
        )
        exposition = _scrape(prometheus, PROTOBUF)

    # analyze's (HTTP) and export's (gRPC): the same verdict, in the root's trace; only
    # export sent the verdict span, so only its record names that span
    assert len(records) == 2
    for record in records:
        assert record["severityText"] == "ERROR" and record["severityNumber"] == 17
        assert record["traceId"] == trace_id.hex()
        assert record["body"]["stringValue"] == root.summary
        facts = _attributes(record)
        assert facts[model.JOB] == "sigjob" and facts[model.INCIDENT] == "i-1"
        assert facts[model.FINDING_KIND] == "skipped_collective"
        assert facts[model.FINDING_CULPRIT_RANKS] == [3]
        assert facts[model.COLLECTIVE_SEQ_ID] == root.collective_seq_id
        assert facts[model.CODE_FILE] == "/workspace/optim/grad_sync.py"
    assert sorted(r.get("spanId", "") for r in records) == ["", span_id.hex()]

    # one series: the Collector keeps one per job, kind, incident and culprits (it drops
    # the emitter from metrics), at the latest emitter's count
    [line] = series
    assert re.search(r" 1(\.0)?$", line), line
    assert 'fr_otel_incident="i-1"' in line and 'fr_otel_finding_culprit_ranks="3"' in line
    # the count's start (the latest command's start) is the series' created timestamp
    [created] = _created_ns(
        exposition, "fr_otel_incidents_total", fr_otel_job="sigjob", fr_otel_incident="i-1"
    )
    assert began <= created <= time.time_ns()
