"""``fr-otel run`` after the job: an incident it declared for a failed job is named even
when the archive holds no rank of it, with the reason (real child processes), and every
ring the job left is archived before any span is sent."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel import config
from fr_otel.archive.layout import partition_dir
from fr_otel.cli import main
from fr_otel.recorder.launcher import finish
from fr_otel.recorder.ring import ring_base
from tests.rings import LEARNED_OP, UNLEARNED_API, write_half_learned, write_ring


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
            base = ring_base(settings.rings, settings.job, rank)
            write_ring(base, rank=rank, world=3, job=settings.job, seqs=range(1, 6))
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


def test_a_dead_rank_that_had_not_learned_torchs_op_takes_its_peers(tmp_path: Path) -> None:
    """Rank 1 died before a read of torch's FR taught it that gloo runs
    ``reduce_scatter_tensor`` as ``all_reduce``; rank 0 had learned it. The archived rows
    of both say ``all_reduce``, the function called stays their ``api``."""
    environ = {"FR_OTEL_ARCHIVE": str(tmp_path / "archive"), "FR_OTEL_JOB": "learn"}
    settings = config.recorder_settings(environ=environ)
    started = time.time_ns()
    write_half_learned(settings.rings, settings.job)
    result = finish(settings, 1, started)
    [incident] = result.incidents
    rows = pq.read_table(partition_dir(settings.archive, settings.job, incident)).to_pylist()
    assert {(r["rank"], r["op"], r["api"]) for r in rows} == {
        (0, LEARNED_OP, UNLEARNED_API),
        (1, LEARNED_OP, UNLEARNED_API),
    }
