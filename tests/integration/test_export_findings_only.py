"""``fr-otel export --findings-only`` over real OTLP traffic: once an incident's spans are in
the backend, the verdict spans follow alone, into the traces those spans made.

A real OTLP receiver (tests/otlp_receiver.py, gRPC and HTTP) records every request; the
incident is a simulated 8-rank fleet whose rank 3 skipped a collective.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fr_otel.analysis import analyze
from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.otel import model
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.otlp_receiver import OtlpReceiver


def _archive(tmp_path: Path, fault: str) -> Path:
    dumps, archive = tmp_path / f"dumps-{fault}", tmp_path / f"archive-{fault}"
    spec = FleetSpec(world=8, entries=60, fault=fault, fault_rank=3 if fault != "none" else None)
    write_fleet(simulate(spec), dumps)
    assert import_dumps([dumps], archive=archive, job="fo", incident="i").ok
    return archive


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_findings_only_sends_the_verdicts_alone_into_the_traces_already_sent(
    protocol: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    archive = _archive(tmp_path, "skipped_collective")
    analysis = analyze(archive)
    assert analysis.findings and analysis.root_cause is not None
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc" if protocol == "grpc" else "http/protobuf"
    )
    with OtlpReceiver(protocol=protocol).start() as receiver:
        # the incident's spans, as the recorder's flush (or an earlier export) sent them
        assert main(["export", str(archive), "--otlp", receiver.endpoint, "--deadline", "20"]) == 0
        entries = receiver.spans()
        capsys.readouterr()
        code = main(
            [
                "export",
                str(archive),
                "--otlp",
                receiver.endpoint,
                "--findings-only",
                "--deadline",
                "20",
            ]
        )
        out = capsys.readouterr().out
        added = receiver.spans()[len(entries) :]
    assert code == 0, out
    assert entries and all(s.name != model.VERDICT_SPAN_NAME for _, s in entries)

    # only the verdicts went out: one span per finding, nothing of the entries again
    assert [s.name for _, s in added] == [model.VERDICT_SPAN_NAME] * len(analysis.findings)
    assert f"sent {len(analysis.findings)} verdict spans" in out
    assert not {s.span_id for _, s in added} & {s.span_id for _, s in entries}

    # each in a trace the entries' spans already made: the root cause's in the trace of
    # the collective its culprit skipped, beside the spans of the ranks that issued it
    entry_traces = {s.trace_id for _, s in entries}
    assert {s.trace_id for _, s in added} <= entry_traces
    root = analysis.findings[analysis.root_cause]
    [root_span] = [
        s
        for _, s in added
        if {a.key: a.value for a in s.attributes}[model.FINDING_ROOT_CAUSE].bool_value
    ]
    ranks_there = {
        resource[model.RANK]
        for resource, s in entries
        if s.trace_id == root_span.trace_id
        and {a.key: a.value for a in s.attributes}[model.PG_NAME].string_value == root.group.name
    }
    assert ranks_there and ranks_there <= set(root.group.ranks)
    assert root_span.status.code == root_span.status.STATUS_CODE_ERROR


def test_findings_only_writes_the_verdicts_alone_to_files(tmp_path: Path) -> None:
    archive = _archive(tmp_path, "skipped_collective")
    findings = len(analyze(archive).findings)
    spans, full = tmp_path / "verdicts.jsonl", tmp_path / "all.jsonl"
    assert main(["export", str(archive), "--findings-only", "--otlp-json", str(spans)]) == 0
    assert main(["export", str(archive), "--findings", "--otlp-json", str(full)]) == 0

    def names(path: Path) -> list[str]:
        return [
            span["name"]
            for line in path.read_text().splitlines()
            for resource in json.loads(line)["resourceSpans"]
            for scope in resource["scopeSpans"]
            for span in scope["spans"]
        ]

    assert names(spans) == [model.VERDICT_SPAN_NAME] * findings
    everything = names(full)
    assert everything.count(model.VERDICT_SPAN_NAME) == findings
    assert len(everything) > 8 * 50  # --findings still sends the entries too


def test_findings_only_for_a_healthy_incident_sends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _archive(tmp_path, "none")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    with OtlpReceiver(protocol="http").start() as receiver:
        code = main(["export", str(archive), "--otlp", receiver.endpoint, "--findings-only"])
        received = list(receiver.received)
    assert code == 0
    assert received == []
    assert "no findings (job=fo incident=i): no verdict span to export" in capsys.readouterr().out


def test_findings_with_resend_is_a_usage_error(tmp_path: Path) -> None:
    archive = _archive(tmp_path, "none")
    command = ["export", str(archive), "--otlp", "http://127.0.0.1:9/v1/traces", "--resend"]
    assert main([*command, "--findings-only"]) == 2
    assert main([*command, "--findings"]) == 2
