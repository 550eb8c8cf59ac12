"""``fr-otel snapshot`` against a real running job (3 gloo ranks, ``fr_otel.install()``,
plain torchrun): every rank's buffer lands in the archive under one id, and training
finishes normally."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel import config
from fr_otel.cli import main
from fr_otel.recorder.snapshot import live_runs
from tests.jobs import torchrun

pytestmark = pytest.mark.gloo

_TRAIN = """
import datetime, time, torch, torch.distributed as dist
from torch import nn
import fr_otel

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
fr_otel.install()
model = nn.parallel.DistributedDataParallel(nn.Linear(16, 4))
for step in range(80):
    model(torch.randn(2, 16)).sum().backward()
    dist.all_reduce(torch.ones(1))
    if step == 10:
        print("step 10", flush=True)
    time.sleep(0.1)
dist.destroy_process_group()
print("finished", flush=True)
"""


def test_a_snapshot_of_a_running_job_archives_every_rank_and_training_goes_on(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(_TRAIN)
    archive = tmp_path / "archive"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FR_OTEL_", "OTEL_"))}
    env.update(FR_OTEL_ARCHIVE=str(archive), FR_OTEL_JOB="snap", OMP_NUM_THREADS="1")
    job = subprocess.Popen(
        torchrun(script, 3), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    lines: list[bytes] = []
    try:
        assert job.stdout is not None
        # every rank ten steps in (they print it), then the snapshot; counted in the
        # joined output, since two ranks' prints can share one line of the pipe
        while b"".join(lines).count(b"step 10") < 3:
            line = job.stdout.readline()
            assert line, b"".join(lines)[-3000:]
            lines.append(line)
        settings = config.recorder_settings({"archive": archive, "job": "snap"})
        assert sum(map(len, live_runs(settings).values())) == 3
        assert main(["snapshot", "--archive", str(archive), "--job", "snap"]) == 0
        output, _ = job.communicate(timeout=180)
    finally:
        if job.poll() is None:
            job.kill()
    log = (b"".join(lines) + output).decode(errors="replace")
    assert job.returncode == 0, log[-3000:]
    assert log.count("finished") == 3, log[-3000:]
    [folder] = list((archive / "job=snap").glob("incident=*"))
    assert folder.name.endswith("-operator"), folder.name
    for rank in range(3):
        table = pq.read_table(folder / f"rank-{rank:06d}.parquet")
        ops = table.column("op").to_pylist()
        # the steps so far: DDP's bucket all-reduces (C++) and the loss all-reduces
        assert ops.count("all_reduce") >= 2 * 10, (rank, ops)


def test_a_snapshot_with_no_running_job_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["snapshot", "--archive", str(tmp_path), "--job", "none"]) == 2
    assert "no running rank of job 'none'" in capsys.readouterr().err
