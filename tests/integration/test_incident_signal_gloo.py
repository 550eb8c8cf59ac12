"""An incident is a signal, over real OTLP traffic (tests/otlp_receiver.py): a real 3-rank
gloo job under ``fr-otel run`` whose rank 2 skips an all_reduce.

* The recorder's declaration: the rank whose declaration won sends one log record
  (``fr_otel.incident``) and one count (``fr_otel.incidents``) with its flush, saying what
  it knows before any analysis (the job, run, incident id, its trigger and rank), in the
  trace of the collective that failed on it.
* ``fr-otel analyze`` of the archive, with the OTLP endpoint in the environment, sends the
  verdict's: the root cause's kind, culprit, group, sequence number and call site, in the
  very trace the ranks' spans of the diverging collective are in.
* ``fr-otel export --otlp --findings-only`` sends the verdict spans and the log record
  names its root's span.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, SeverityNumber
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric

from fr_otel.analysis import analyze
from fr_otel.cli import main
from fr_otel.otel import model
from tests.jobs import fr_otel_run, one_rank_child, torchrun
from tests.otlp_receiver import OtlpReceiver, _any_value

pytestmark = pytest.mark.gloo

_TRAIN = """
import datetime, os, torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
x = torch.ones(64)
for step in range(5):
    dist.all_reduce(x)
if int(os.environ["RANK"]) != 2:
    dist.all_reduce(x)  # rank 2 skips this one
dist.all_reduce(x)
"""


def _attributes(items: Any) -> dict[str, Any]:
    return {a.key: _any_value(a.value) for a in items}


def _incident_logs(receiver: OtlpReceiver) -> list[tuple[dict[str, Any], LogRecord]]:
    return [(r, log) for r, log in receiver.log_records() if log.event_name == model.INCIDENT_EVENT]


def _counts(receiver: OtlpReceiver) -> list[tuple[dict[str, Any], dict[str, Any], int]]:
    """(resource, point attributes, value) of every fr_otel.incidents point."""
    found = []
    for resource, metric in receiver.metrics():
        if metric.name == model.INCIDENTS_METRIC:
            assert isinstance(metric, Metric) and metric.sum.is_monotonic
            for point in metric.sum.data_points:
                assert point.start_time_unix_nano < point.time_unix_nano
                found.append((resource, _attributes(point.attributes), point.as_int))
    return found


def test_the_recorder_and_the_analysis_send_the_incident_as_a_log_record_and_a_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(_TRAIN)
    with OtlpReceiver(protocol="http") as receiver:
        code, archive, _ = fr_otel_run(
            tmp_path / "archive",
            "sig",
            torchrun(script, 3),
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.port}",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            FR_OTEL_LIVE="0",  # the ranks' own triggers declare it, not the live check
            FR_OTEL_TIMEOUT="60",  # gloo raises first: the collective that failed is known
        )
        assert code != 0
        [folder] = list((archive / "job=sig").glob("incident=*"))
        incident = folder.name.removeprefix("incident=")
        spans = receiver.wait_for_spans(3 * 6, timeout_s=10)
        [(resource, declared)] = _incident_logs(receiver)
        [(count_resource, point, value)] = _counts(receiver)

        # the recorder's declaration: what it knows, from the rank whose declaration won
        facts = _attributes(declared.attributes)
        rank = facts[model.RANK]
        assert resource[model.RANK] == rank and resource[model.JOB] == "sig"
        assert resource[model.SERVICE_INSTANCE_ID] == f"sig/rank-{rank}"
        assert facts[model.JOB] == "sig" and facts[model.INCIDENT] == incident
        assert facts[model.INCIDENT_TRIGGER] == facts[model.FINDING_KIND] == "collective_error"
        assert facts[model.RUN_ID] and f"-r{rank}-collective_error" in incident
        assert declared.severity_number == SeverityNumber.SEVERITY_NUMBER_ERROR
        assert declared.severity_text == "ERROR"
        # in the trace of the collective that raised on that rank: its own span is there
        [failed] = [
            s for r, s in spans if s.trace_id == declared.trace_id and r[model.RANK] == rank
        ]
        assert failed.status.code == failed.status.STATUS_CODE_ERROR
        # one count, of that incident, by the same emitter
        assert count_resource == resource and value == 1
        assert point == {
            model.JOB: "sig",
            model.FINDING_KIND: "collective_error",
            model.INCIDENT: incident,
        }

        # the analysis: the root cause's, in the trace of the ranks' spans of its collective
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.port}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        capsys.readouterr()
        assert main(["analyze", str(archive)]) == 1
        err = capsys.readouterr().err
        assert "the log record and the count sent" in err, err
        analysis = analyze(archive)
        assert analysis.root_cause is not None
        root = analysis.findings[analysis.root_cause]
        assert root.kind == "skipped_collective" and root.culprit_ranks == [2]
        [_, (analyzer, verdict_log)] = _incident_logs(receiver)
        facts = _attributes(verdict_log.attributes)
        assert analyzer[model.SERVICE_INSTANCE_ID] == "sig/analyzer"
        assert facts[model.FINDING_KIND] == "skipped_collective"
        assert facts[model.FINDING_CULPRIT_RANKS] == [2]
        assert facts[model.INCIDENT] == incident
        assert facts[model.PG_NAME] == root.group.name
        assert facts[model.COLLECTIVE_SEQ_ID] == root.collective_seq_id
        assert Path(facts[model.CODE_FILE]).name == "train.py"
        assert facts[model.CODE_FUNCTION] == "<module>"
        at_divergence = {
            s.trace_id
            for _, s in spans
            if _attributes(s.attributes).get(model.COLLECTIVE_SEQ_ID) == root.collective_seq_id
            and _attributes(s.attributes).get(model.PG_NAME) == root.group.name
        }
        assert at_divergence == {verdict_log.trace_id}
        assert verdict_log.span_id == b""  # analyze sends no verdict span
        counts = _counts(receiver)
        assert len(counts) == 2 and counts[1][1][model.FINDING_KIND] == "skipped_collective"
        assert counts[1][1][model.FINDING_CULPRIT_RANKS] == "2"

        # export --findings-only: the verdict spans, and the log record names its root's
        assert main(["export", str(archive), "--otlp", "--findings-only"]) == 0
        [*_, (_, exported_log)] = _incident_logs(receiver)
        [root_span] = [
            s
            for _, s in receiver.spans()
            if s.name == model.VERDICT_SPAN_NAME
            and _attributes(s.attributes)[model.FINDING_ROOT_CAUSE]
        ]
        assert (exported_log.trace_id, exported_log.span_id) == (
            root_span.trace_id,
            root_span.span_id,
        )
        assert exported_log.trace_id == verdict_log.trace_id
        assert len(_counts(receiver)) == 3


_LATE = """
import datetime, os, time, torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
x = torch.ones(64)
for step in range(3):
    dist.all_reduce(x)
if int(os.environ["RANK"]) == 2:
    time.sleep(8)  # past FR_OTEL_TIMEOUT, well within gloo's: the job goes on after
dist.all_reduce(x)
"""


def test_a_timeout_declared_by_the_watch_is_in_the_trace_of_the_collective_that_waits(
    tmp_path: Path,
) -> None:
    """Rank 2 comes 8 s late to an all_reduce: its peers' watches see it pending past
    FR_OTEL_TIMEOUT and one declares the incident (``timeout``), in that all_reduce's trace;
    rank 2 then arrives and the job ends well."""
    script = tmp_path / "train.py"
    script.write_text(_LATE)
    with OtlpReceiver(protocol="grpc") as receiver:
        code, archive, _ = fr_otel_run(
            tmp_path / "archive",
            "late",
            torchrun(script, 3),
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.port}",
            OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
            FR_OTEL_LIVE="0",
            FR_OTEL_TIMEOUT="2",
        )
        assert code == 0
        spans = receiver.wait_for_spans(3 * 3, timeout_s=10)
        [(resource, declared)] = _incident_logs(receiver)
    facts = _attributes(declared.attributes)
    assert facts[model.FINDING_KIND] == facts[model.INCIDENT_TRIGGER] == "timeout"
    [folder] = list((archive / "job=late").glob("incident=*"))
    assert facts[model.INCIDENT] == folder.name.removeprefix("incident=")
    rank = facts[model.RANK]
    assert rank in (0, 1) and resource[model.RANK] == rank
    [waiting] = [s for r, s in spans if s.trace_id == declared.trace_id and r[model.RANK] == rank]
    # the fourth all_reduce, still pending at the flush
    assert _attributes(waiting.attributes)[model.COLLECTIVE_SEQ_ID] == 4
    assert waiting.name == "all_reduce"


_ASKED = """
import time, torch, torch.distributed as dist, fr_otel

recorder = fr_otel.install()
dist.init_process_group("gloo")
x = torch.ones(4)
for _ in range(3):
    dist.all_reduce(x)
# a second apart: declarations within one poll of the job's store are one incident
print(recorder.declare("operator"))  # fr-otel snapshot, or echo > rank-N.trigger
time.sleep(1)
print(recorder.declare("signal"))  # kill -USR2
time.sleep(1)
print(recorder.declare("live_check"))  # the live check's verdict
recorder.close()
"""


def test_a_snapshot_a_person_asked_for_is_no_alert_and_the_live_check_s_incident_is(
    tmp_path: Path,
) -> None:
    """An operator's snapshot (the FIFO, the signal) is archived and its spans sent, but
    it sends no incident log record and no count: an alert for it would be a false alarm.
    The incident the live check declares for its verdict is signalled."""
    with OtlpReceiver(protocol="http") as receiver:
        done = one_rank_child(
            _ASKED,
            RANK="0",
            WORLD_SIZE="1",
            FR_OTEL_ARCHIVE=str(tmp_path / "archive"),
            FR_OTEL_JOB="asked",
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.port}",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        )
        operator, signal, live = done.stdout.split()
        assert operator.endswith("-operator") and signal.endswith("-signal"), done.stdout
        assert live.endswith("-live_check"), done.stdout
        # every incident's spans went out: a snapshot is still evidence
        spans = receiver.wait_for_spans(3 * 3, timeout_s=10)
        assert {
            _any_value(a.value) for _, s in spans for a in s.attributes if a.key == model.INCIDENT
        } >= {operator, signal, live}
        [(_, declared)] = _incident_logs(receiver)
        facts = _attributes(declared.attributes)
        assert facts[model.INCIDENT] == live, json.dumps(facts, default=str)
        assert facts[model.INCIDENT_TRIGGER] == "live_check"
        [(_, point, value)] = _counts(receiver)
        assert point[model.FINDING_KIND] == "live_check" and value == 1
