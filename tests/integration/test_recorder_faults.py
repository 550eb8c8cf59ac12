"""The recorder when the job dies badly, with ``fr_otel.install()`` in the script and plain
torchrun (no ``fr-otel run`` to flush after the job): real gloo ranks, real signals.

* A rank ``kill -9``ed at different moments of training: the survivors notice (their
  collective raises, or torchrun's SIGTERM comes first, about 0.1 s after the death), and
  one of them archives the dead rank's ring with its own, under one incident that names
  the dead rank. Five moments, every one must hold.
* torchrun's SIGTERM arriving while the ranks flush, with a Collector that accepts and
  never answers (so the flush is at its slowest, in the export): the local archive is
  whole, and every rank ends by SIGTERM well inside torchrun's 30 s grace period.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.analysis import analyze
from fr_otel.demo.recorded_job import free_port

pytestmark = pytest.mark.gloo

_TRAIN = """
import datetime, os, signal, sys, time
import torch, torch.distributed as dist
from torch import nn
import fr_otel

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ["PG_TIMEOUT"])))
fr_otel.install()
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(32, 96), nn.Linear(96, 96), nn.Linear(96, 8)), bucket_cap_mb=0.03
)
kill_step, hang_step = int(os.environ.get("KILL_STEP", -1)), int(os.environ.get("HANG_STEP", -1))
for step in range(60):
    if rank == 1 and step == kill_step:
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == 1 and step == hang_step:
        print("rank 1 hangs", file=sys.stderr, flush=True)
        time.sleep(600)
    model(torch.randn(4, 32)).sum().backward()
    dist.all_reduce(torch.ones(1))  # the step's loss, from Python
    time.sleep(0.05)
print("rank", rank, "finished")
"""

RANKS = 3


def _command(script: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(RANKS),
        "--master-port",
        str(free_port()),
        str(script),
    ]


def _environment(archive: Path, job: str, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "FR_OTEL_", "TORCHELASTIC_"))
    }
    return {
        **env,
        "PG_TIMEOUT": "6",
        "FR_OTEL_ARCHIVE": str(archive),
        "FR_OTEL_JOB": job,
        "OMP_NUM_THREADS": "1",
        **extra,
    }


def _ranks_archived(archive: Path, job: str) -> tuple[Path, list[int]]:
    [folder] = list((archive / f"job={job}").glob("incident=*"))
    return folder, sorted(int(p.stem.split("-")[1]) for p in folder.glob("rank-*.parquet"))


@pytest.mark.parametrize("kill_step", [3, 7, 11, 16, 22])
def test_a_rank_killed_by_sigkill_is_archived_and_named_without_the_launcher(
    kill_step: int, tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(_TRAIN)
    archive = tmp_path / "archive"
    env = _environment(archive, "killed", KILL_STEP=str(kill_step))
    done = subprocess.run(_command(script), env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode != 0
    folder, ranks = _ranks_archived(archive, "killed")
    assert ranks == list(range(RANKS)), done.stderr[-3000:]
    dead = pq.read_table(folder / "rank-000001.parquet", columns=["op"]).column("op").to_pylist()
    # its DDP set-up and the collectives of the steps it finished
    assert dead.count("all_reduce") >= kill_step, dead
    analysis = analyze(archive, job="killed")
    assert analysis.root_cause is not None, analysis.findings
    assert analysis.findings[analysis.root_cause].culprit_ranks == [1], analysis.findings


def test_sigterm_during_the_flush_leaves_the_archive_whole(tmp_path: Path) -> None:
    """Rank 1 hangs in host code; the others declare a timeout after 3/4 of 6 s and flush
    towards a Collector that never answers. SIGTERM to torchrun the moment the incident is
    declared: the ranks finish their local archive first, then end by the signal."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    script = tmp_path / "train.py"
    script.write_text(_TRAIN)
    archive = tmp_path / "archive"
    env = _environment(
        archive,
        "term",
        HANG_STEP="6",
        FR_OTEL_FLUSH_DEADLINE="4",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{hole.getsockname()[1]}",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
    )
    log = tmp_path / "torchrun.log"
    try:
        with log.open("w") as err:
            job = subprocess.Popen(_command(script), env=env, stderr=err, stdout=err)
            try:
                declared = _wait_for(log, "fr_otel: incident", timeout_s=120)
                job.send_signal(signal.SIGTERM)
                job.wait(timeout=60)
            finally:
                if job.poll() is None:
                    job.kill()
        ended = time.monotonic() - declared
    finally:
        hole.close()
    text = log.read_text()
    _, ranks = _ranks_archived(archive, "term")
    assert ranks == list(range(RANKS)), text[-3000:]
    # each rank's flush: its archive, then at most the deadline on the export
    assert ended < 2 * 4 + 10, (ended, text[-3000:])
    assert job.returncode != 0
    analysis = analyze(archive, job="term")
    assert analysis.root_cause is not None, analysis.findings
    assert analysis.findings[analysis.root_cause].culprit_ranks == [1], analysis.findings


def _wait_for(log: Path, text: str, timeout_s: float) -> float:
    """When ``text`` first appears in ``log`` (monotonic)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return time.monotonic()
        time.sleep(0.02)
    raise AssertionError(f"{text!r} not in the log after {timeout_s} s: {log.read_text()[-3000:]}")
