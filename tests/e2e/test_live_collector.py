"""The live check's OTLP reaches a real Collector running the shipped ``local.yaml``
(build/bin/otelcol-fr-otel), over HTTP and gRPC, without a refusal: a verdict's span goes
to the span archive, its log record to the logs file (its own folder, not the archive that
``fr-otel import`` reads), and the blindness gauge to the Collector's Prometheus endpoint.

Stand-ins, and why: Jaeger and Tempo, local.yaml's viewers, point at closed loopback ports
(their queues retry in memory; nothing here reads them)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from fr_otel import config
from fr_otel.live.send import SEND_DEADLINE_S, send_in_background
from fr_otel.otel import model
from tests.e2e import stack
from tests.e2e.spans import file_archive_spans
from tests.e2e.stack import free_port, running, wait_until
from tests.unit.test_live_blind_metric import live_check
from tests.unit.test_live_otlp import _verdict

PROTOCOLS = {"http/protobuf": "live-http", "grpc": "live-grpc"}
"""Protocol -> the job whose live check sends over it."""


def _endpoint(collector: stack.Collector, protocol: str) -> str:
    return (
        f"http://{collector.grpc}" if protocol == "grpc" else f"http://{collector.http}/v1/traces"
    )


def _log_bodies(folder: Path) -> list[str]:
    bodies = []
    for path in sorted(folder.glob("logs*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:  # a line being written
                continue
            for resource_logs in data.get("resourceLogs") or []:
                for scope in resource_logs.get("scopeLogs") or []:
                    bodies += [r["body"]["stringValue"] for r in scope.get("logRecords") or []]
    return bodies


def _scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        return str(response.read().decode())


def _series(text: str, name: str, job: str) -> list[str]:
    return [
        line
        for line in text.splitlines()
        if line.startswith(name + "{") and f'{model.JOB.replace(".", "_")}="{job}"' in line
    ]


def test_the_collector_takes_the_live_checks_span_log_and_blindness(tmp_path: Path) -> None:
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
    said: list[str] = []
    with running(collector):
        verdicts = {}
        for protocol, job in PROTOCOLS.items():
            otlp = config.otlp_settings(
                endpoint=_endpoint(collector, protocol), protocol=protocol, environ={}
            )
            verdicts[job] = verdict = _verdict(job=job, id=f"v-{job}")
            thread = send_in_background(verdict, otlp, lambda key, text: said.append(text))
            assert thread is not None
            thread.join(3 * SEND_DEADLINE_S)
            settings = config.recorder_settings(
                {"archive": tmp_path / job, "job": job, "run_id": "run", "otlp": otlp}
            )
            check = live_check(settings, said)
            check._note_blind({3: "not a ring", 5: "not a ring"})
            assert check._blind_sent is not None
            check._blind_sent.join(3 * SEND_DEADLINE_S)
        # a refusal (404, UNIMPLEMENTED) or an unreachable Collector would be said
        assert [n for n in said if "did not get" in n] == []

        logs = tmp_path / "otlp-logs"
        bodies = wait_until(
            "both log records in the logs file",
            lambda: len(found := _log_bodies(logs)) >= 2 and found,
            30,
        )
        assert sorted(bodies) == sorted(v.line() for v in verdicts.values())
        archived = wait_until(
            "both spans in the span archive",
            lambda: len(found := file_archive_spans(tmp_path / "otlp-archive")) >= 2 and found,
            30,
        )
        assert len(archived) == 2
        assert not list((tmp_path / "otlp-archive").glob("logs*")), "logs stay out of it"
        for job in PROTOCOLS.values():
            gauge = wait_until(
                f"{job}'s blindness gauge on the Prometheus endpoint",
                lambda job=job: _series(_scrape(prometheus), "fr_otel_live_blind_ranks", job),
                30,
            )
            [line] = gauge
            assert line.endswith(" 2"), line
            assert 'fr_otel_live_ranks="[\\"3\\",\\"5\\"]"' in line, line
            assert f'{model.RUN_ID.replace(".", "_")}="run"' in line, line
            [episodes] = _series(_scrape(prometheus), "fr_otel_live_blind_episodes_total", job)
            assert episodes.endswith(" 1"), episodes
