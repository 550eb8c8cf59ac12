"""``fr-otel export --otlp`` of a real gloo job to a real OTLP receiver (gRPC and HTTP),
and the spool when the receiver is down."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.otel import model
from tests.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.gloo

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def archive(tmp_path: Path) -> tuple[Path, int]:
    report = import_dumps(
        [TESTS / "data" / "gloo_skipped_collective"], archive=tmp_path / "a", job="gl", incident="i"
    )
    return tmp_path / "a", report.entries


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_every_entry_arrives_and_one_collective_is_one_trace(
    protocol: str, archive: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver_type = OtlpReceiver
    path, entries = archive
    with receiver_type(protocol=protocol).start() as receiver:
        monkeypatch.setenv(
            "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc" if protocol == "grpc" else "http/protobuf"
        )
        assert main(["export", str(path), "--otlp", receiver.endpoint, "--deadline", "20"]) == 0
        spans = receiver.spans()
    assert len(spans) == entries
    assert len({span.span_id for _, span in spans}) == entries
    ranks_per_trace: dict[bytes, set[int]] = {}
    for resource, span in spans:
        attrs = {a.key: a.value for a in span.attributes}
        if model.COLLECTIVE_SEQ_ID in attrs and attrs[model.PG_NAME].string_value == "0":
            ranks_per_trace.setdefault(span.trace_id, set()).add(resource[model.RANK])
    # default-group collectives that every rank issued: all 4 ranks in one trace
    assert Counter(len(r) for r in ranks_per_trace.values())[4] >= 5


def test_down_collector_spools_and_resend_delivers_once(
    archive: tuple[Path, int], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    receiver_type = OtlpReceiver
    path, entries = archive
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    receiver = receiver_type(protocol="http").start()
    endpoint = receiver.endpoint
    receiver.stop()
    try:
        assert main(["export", str(path), "--otlp", endpoint, "--deadline", "1"]) == 2
        assert "spooled" in capsys.readouterr().out
        assert list((path / "_spool").glob("*.otlp"))
        receiver.start()
        assert main(["export", str(path), "--otlp", endpoint, "--resend", "--deadline", "20"]) == 0
        assert main(["export", str(path), "--otlp", endpoint, "--resend", "--deadline", "20"]) == 0
        spans = receiver.spans()
    finally:
        receiver.stop()
    assert len(spans) == entries
    assert len({span.span_id for _, span in spans}) == entries
    assert not list((path / "_spool").glob("*.otlp"))
