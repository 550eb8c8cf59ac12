"""``fr-otel run`` after a job that failed with no rank left to declare its incident: the
launcher declares it (``job_failed``) and sends its log record and count itself, as the
launcher (``<job>/launcher``), to a real OTLP receiver."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from opentelemetry.proto.logs.v1.logs_pb2 import SeverityNumber

from fr_otel import config
from fr_otel.otel import model
from fr_otel.recorder.launcher import finish
from fr_otel.recorder.ring import ring_base
from tests.otlp_receiver import OtlpReceiver, _any_value
from tests.rings import write_ring


def _attributes(items: Any) -> dict[str, Any]:
    return {a.key: _any_value(a.value) for a in items}


def test_the_launchers_own_incident_is_sent_as_the_launchers(tmp_path: Path) -> None:
    with OtlpReceiver(protocol="http") as receiver:
        environ = {
            "FR_OTEL_ARCHIVE": str(tmp_path / "archive"),
            "FR_OTEL_JOB": "gone",
            "FR_OTEL_RUN_ID": "run-1",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        }
        settings = config.recorder_settings(environ=environ)
        started = time.time_ns()
        for rank in range(2):  # rings the ranks left, killed before they could flush
            base = ring_base(settings.rings, settings.job, rank, settings.run_id)
            write_ring(base, rank=rank, world=2, job=settings.job, seqs=range(1, 4))
        result = finish(settings, 1, started)
        [incident] = result.incidents
        assert incident.endswith("-launcher-job_failed")
        [(resource, record)] = receiver.wait_for_logs(1)
        [(count_resource, metric)] = receiver.wait_for_metrics(1)
    assert record.event_name == model.INCIDENT_EVENT
    assert record.severity_number == SeverityNumber.SEVERITY_NUMBER_ERROR
    facts = _attributes(record.attributes)
    assert facts[model.INCIDENT] == incident and facts[model.RUN_ID] == "run-1"
    assert facts[model.FINDING_KIND] == facts[model.INCIDENT_TRIGGER] == "job_failed"
    assert model.RANK not in facts  # no rank declared it
    assert (
        resource
        == count_resource
        == {
            model.SERVICE_NAME: "gone",
            model.SERVICE_INSTANCE_ID: "gone/launcher",
            model.JOB: "gone",
        }
    )
    [point] = metric.sum.data_points
    assert point.as_int == 1 and point.start_time_unix_nano == started
    assert _attributes(point.attributes)[model.FINDING_KIND] == "job_failed"
