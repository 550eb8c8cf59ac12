"""The live verdict of a real gloo job reaches the Collector the ranks export to (a real
OTLP/HTTP receiver here): a span in the very trace of the diverging collective that the
ranks' own spans of it are in, once they flush the incident, and a log record pointing at
it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.logs.v1.logs_pb2 import SeverityNumber

from fr_otel.cli._errors import EXIT_LIVE_ABORTED
from fr_otel.otel import model
from tests.integration.test_live_diagnosis import _TRAIN, _verdict
from tests.jobs import fr_otel_run, torchrun
from tests.otlp_receiver import OtlpReceiver, _any_value

pytestmark = pytest.mark.gloo


def _attributes(items: Any) -> dict[str, Any]:
    return {a.key: _any_value(a.value) for a in items}


def test_the_verdict_is_a_span_in_the_diverging_collectives_trace_and_a_log_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 1 reorders its step's two collectives (``test_live_diagnosis``'s job); the
    ``abort`` policy has every rank flush, and the ranks send their spans."""
    script = tmp_path / "train.py"
    script.write_text(_TRAIN.format(timeout=30))
    with OtlpReceiver("http") as receiver:
        code, archive, _ = fr_otel_run(
            tmp_path / "archive",
            "live",
            torchrun(script, 3),
            LIVE_FAULT="reorder",
            FAULT_MARK=str(tmp_path / "fault"),
            FR_OTEL_LIVE_POLICY="abort",
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.port}",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        )
        record = _verdict(archive, "live", capsys.readouterr().err)
        spans = receiver.wait_for_spans(10_000, timeout_s=10)
        receiver.wait_for_logs(1)
        # the live check's; the rank that declared the incident sends fr_otel.incident
        [log] = [r for _, r in receiver.log_records() if r.event_name == model.LIVE_DESYNC_EVENT]
    assert code == EXIT_LIVE_ABORTED
    [verdict] = [s for _, s in spans if s.name == model.LIVE_VERDICT_SPAN_NAME]
    ranks_at_divergence = {
        resource[model.RANK]: span
        for resource, span in spans
        if model.RANK in resource
        and _attributes(span.attributes).get(model.COLLECTIVE_SEQ_ID) == record["seq"]
        and _attributes(span.attributes).get(model.PG_NAME) == record["group"]
    }
    assert sorted(ranks_at_divergence) == [0, 1, 2], sorted(ranks_at_divergence)
    # the one trace Jaeger shows for collective #21: every rank's span of it, and the verdict
    assert {s.trace_id for s in ranks_at_divergence.values()} == {verdict.trace_id}
    names = {rank: span.name for rank, span in ranks_at_divergence.items()}
    assert names[0] == names[2] == "all_reduce" and names[1].startswith("all_gather"), names
    [event] = verdict.events
    facts = _attributes(event.attributes)
    assert facts[model.FINDING_CULPRIT_RANKS] == record["culprit_ranks"] == [1]
    assert facts[model.FINDING_KIND] == record["kind"]
    assert facts[model.LIVE_CALL_SITE] == record["call_site"]
    assert facts[model.INCIDENT] == record["incident"]
    assert (log.trace_id, log.span_id) == (verdict.trace_id, verdict.span_id)
    assert log.severity_number == SeverityNumber.SEVERITY_NUMBER_ERROR
    assert _attributes(log.attributes) == facts
