"""``fr-otel run`` after the job: an incident it declared for a failed job is named even
when the archive holds no rank of it, with the reason (real child processes), and every
ring the job left is archived before any span is sent."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fr_otel import config
from fr_otel.archive.layout import partition_dir
from fr_otel.cli import main
from fr_otel.recorder.launcher import finish
from fr_otel.recorder.ring import (
    COMPLETED,
    STARTED,
    GroupInfo,
    RingWriter,
    Signature,
    ring_base,
)


def test_a_job_that_fails_before_any_group_gets_an_empty_incident_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "archive"
    script = "import torch.distributed; raise SystemExit(3)"
    code = main(
        ["run", "--job", "early", "--archive", str(archive), "--", sys.executable, "-c", script]
    )
    assert code == 3
    err = capsys.readouterr().err
    assert "-launcher-job_failed is empty: no rank of this run opened a ring" in err, err
    assert not list(archive.glob("job=early/incident=*"))


def _dead_ring(settings: Any, rank: int, world: int) -> None:
    """A ring as a rank killed outright leaves it: written, then unlocked."""
    base = ring_base(settings.rings, settings.job, rank)
    writer = RingWriter(base, capacity=64, rank=rank, world=world, job=settings.job, backend="gloo")
    group = writer.intern_group(
        ("0", tuple(range(world))),
        GroupInfo(
            name="0", desc="default_pg", ranks=tuple(range(world)), backend="gloo", timeout_ms=1000
        ),
    )
    signature = writer.intern_signature(
        "ar",
        Signature(
            op="all_reduce",
            input_sizes=[[4]],
            output_sizes=[[4]],
            input_dtypes=["Float"],
            output_dtypes=["Float"],
            is_p2p=False,
        ),
    )
    for seq in range(1, 6):
        record = writer.begin(group, seq, 0, signature, -1, -1, STARTED)
        writer.finish(record, COMPLETED)
    writer.close()


def test_every_dead_ring_is_archived_although_the_collector_never_answers(
    tmp_path: Path,
) -> None:
    """A Collector that accepts connections and never answers: before, the first ring's
    export spent the whole flush deadline and the other rings were skipped."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    try:
        environ = {
            "FR_OTEL_ARCHIVE": str(tmp_path / "archive"),
            "FR_OTEL_JOB": "hole",
            "FR_OTEL_FLUSH_DEADLINE": "2",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{hole.getsockname()[1]}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        }
        settings = config.recorder_settings(environ=environ)
        assert settings.otlp is not None
        started = time.time_ns()
        for rank in range(3):
            _dead_ring(settings, rank, 3)
        began = time.monotonic()
        result = finish(settings, 1, started)
        elapsed = time.monotonic() - began
    finally:
        hole.close()
    [incident] = result.incidents
    folder = partition_dir(settings.archive, settings.job, incident)
    assert sorted(p.name for p in folder.glob("rank-*.parquet")) == [
        f"rank-{r:06d}.parquet" for r in range(3)
    ]
    assert elapsed < 2 * settings.flush_deadline_s + 2, elapsed


def test_a_command_ended_by_sigterm_exits_143(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    script = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    code = main(
        ["run", "--job", "term", "--archive", str(archive), "--", sys.executable, "-c", script]
    )
    assert code == 143
