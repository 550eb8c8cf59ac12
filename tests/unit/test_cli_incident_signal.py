"""``fr-otel analyze`` and ``fr-otel export --findings`` send a verdict with findings as the
incident's log record and count (a real OTLP receiver), spool them while the Collector is
down (the verdict and its exit code unchanged), and ``export --otlp --resend`` delivers
them once it is back; a healthy verdict sends nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.otel import model
from fr_otel.otel.spool import spooled
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.otlp_receiver import OtlpReceiver


def _archive(root: Path, fault: str) -> Path:
    spec = FleetSpec(world=8, entries=60, fault=fault, fault_rank=3 if fault != "none" else None)
    write_fleet(simulate(spec), root / "dumps")
    assert import_dumps([root / "dumps"], archive=root / "archive", job="j", incident="i").ok
    return root / "archive"


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_analyze_spools_the_verdicts_signal_while_the_collector_is_down(
    protocol: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    archive = _archive(tmp_path, "skipped_collective")
    receiver = OtlpReceiver(protocol=protocol).start()
    receiver.stop()  # the Collector is down
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.port}")
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc" if protocol == "grpc" else "http/protobuf"
    )
    assert main(["analyze", str(archive)]) == 1  # the verdict's exit code, whatever the Collector
    out, err = capsys.readouterr()
    assert out.startswith("ROOT CAUSE: rank 3 skipped")
    assert "the log record and the count spooled" in err, err
    assert f"fr-otel export {archive} --otlp --resend" in err
    spool = archive / "_spool"
    assert spooled(spool) == []  # no span: analyze sends none
    assert len(spooled(spool / "logs")) == len(spooled(spool / "metrics")) == 1

    with receiver.start():  # back: the spool goes out, spans first, then the others
        assert main(["export", str(archive), "--otlp", "--resend"]) == 0
        out = capsys.readouterr().out
        logs, metrics = receiver.log_records(), receiver.metrics()
    assert f"resent 1 logs request from {spool / 'logs'}; 0 still waiting" in out, out
    assert f"resent 1 metrics request from {spool / 'metrics'}; 0 still waiting" in out
    [(resource, record)] = logs
    assert record.event_name == model.INCIDENT_EVENT
    assert resource[model.SERVICE_INSTANCE_ID] == "j/analyzer"
    [(_, metric)] = metrics
    assert metric.name == model.INCIDENTS_METRIC
    assert spooled(spool / "logs") == spooled(spool / "metrics") == []


def test_a_healthy_verdict_sends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _archive(tmp_path, "none")
    with OtlpReceiver(protocol="http") as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.port}")
        assert main(["analyze", str(archive)]) == 0
        assert main(["export", str(archive), "--otlp", "--findings"]) == 0
        received = [r for r in receiver.received if r.request is None]
    assert received == []  # spans only: no log record, no count
    assert "log record" not in capsys.readouterr().err


def test_analyze_without_an_endpoint_sends_nothing_and_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _archive(tmp_path, "skipped_collective")
    for variable in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(variable, raising=False)
    assert main(["analyze", str(archive)]) == 1
    assert "log record" not in capsys.readouterr().err
    assert not (archive / "_spool").exists()
