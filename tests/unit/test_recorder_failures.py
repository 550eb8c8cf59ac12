"""The recorder never stops training: an unusable ring folder or an unreachable Collector
costs the recording, not the job. Real one-rank gloo jobs in subprocesses."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from fr_otel.demo.recorded_job import free_port
from tests.jobs import one_rank_child

_JOB = textwrap.dedent(
    """
    import json, sys, torch, torch.distributed as dist, fr_otel
    recorder = fr_otel.install()
    dist.init_process_group("gloo")
    x = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(x)
    incident = recorder.declare("operator")
    recorder.close()
    print(json.dumps({
        "sum": x.tolist(),
        "errors": recorder.stats.recorder_errors,
        "incident": incident,
        "flushes": [[f.entries, f.spans_sent, f.spans_spooled, f.problems]
                    for f in recorder.stats.flushes],
    }))
    """
)


def _run(tmp_path: Path, **env: str) -> dict[str, object]:
    done = one_rank_child(
        _JOB, RANK="0", WORLD_SIZE="1", FR_OTEL_ARCHIVE=str(tmp_path / "archive"), **env
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


def test_an_unusable_ring_folder_disables_the_recorder_not_the_job(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the ring folder should be")
    result = _run(tmp_path, FR_OTEL_RING_DIR=str(blocker / "rings"))
    assert result["sum"] == [1.0, 1.0, 1.0, 1.0]  # the collectives ran
    assert result["errors"] == 1  # counted once
    assert "recorder disabled for this rank, training goes on" in str(result["stderr"])
    assert str(result["stderr"]).count("recorder disabled") == 1  # logged once


def test_an_unreachable_collector_spools_and_the_archive_still_has_everything(
    tmp_path: Path,
) -> None:
    result = _run(
        tmp_path,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"http://127.0.0.1:{free_port()}/v1/traces",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_TIMEOUT="300",
        FR_OTEL_FLUSH_DEADLINE="1",
    )
    [[entries, sent, spooled, problems]] = result["flushes"]  # type: ignore[misc]
    assert (entries, sent, spooled, problems) == (3, 0, 3, [])
    assert result["errors"] == 0
    assert list((tmp_path / "archive" / "_spool").glob("*.otlp"))
    assert list((tmp_path / "archive").glob("job=default/incident=*/rank-000000.parquet"))
