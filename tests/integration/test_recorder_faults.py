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
from tests.jobs import torchrun

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
    done = subprocess.run(
        torchrun(script, RANKS), env=env, capture_output=True, text=True, timeout=240
    )
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
            job = subprocess.Popen(torchrun(script, RANKS), env=env, stderr=err, stdout=err)
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
    # what the Collector did not take is kept, and the log says where and how to send it
    assert f"fr-otel export {archive} --otlp --resend" in text, text[-3000:]
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


# --- two launches of one job name --------------------------------------------------------

DDP = Path(__file__).resolve().parents[1] / "workloads" / "ddp.py"


def _launch(archive: Path, job: str, log: Path, **extra: str) -> subprocess.Popen[bytes]:
    """``fr-otel run -- torchrun`` of the DDP workload, 2 ranks, as its own process."""
    env = _environment(archive, job, OMP_NUM_THREADS="1", **extra)
    command = [sys.executable, "-m", "fr_otel", "run", "--job", job, "--archive", str(archive)]
    command += ["--", *torchrun(DDP, 2)]
    with log.open("w") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=out)


def test_two_launches_of_one_job_name_at_once_share_nothing(tmp_path: Path) -> None:
    """Before: the second launch's recorder was disabled (its ring was locked by the
    first), and its launcher reported the other launch's incident and culprit."""
    archive = tmp_path / "archive"
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    jobs = [
        _launch(archive, "same", logs[0], FAULT="hang", FAULT_RANK="0"),
        _launch(archive, "same", logs[1], FAULT="hang", FAULT_RANK="1"),
    ]
    for job in jobs:
        job.wait(timeout=240)
    texts = [log.read_text() for log in logs]
    assert all(job.returncode != 0 for job in jobs), texts
    assert not any("recorder disabled" in text for text in texts), texts
    incidents = sorted(p.name.removeprefix("incident=") for p in (archive / "job=same").glob("*"))
    assert len(incidents) == 2, incidents
    # each launcher names its own incident, whose verdict is its own culprit
    for culprit, text in enumerate(texts):
        [named] = [i for i in incidents if f"--incident {i}" in text]
        root = analyze(archive, job="same", incident=named)
        assert root.root_cause is not None, root.findings
        assert root.findings[root.root_cause].culprit_ranks == [culprit], (named, text[-2000:])
        runs = {
            run
            for path in (archive / "job=same" / f"incident={named}").glob("rank-*.parquet")
            for run in pq.read_table(path, columns=["run_id"]).column("run_id").to_pylist()
        }
        assert len(runs) == 1 and None not in runs, runs


def test_a_rerun_of_a_job_starts_new_traces(tmp_path: Path) -> None:
    """Three runs of one job name to a real OTLP receiver: before, span and trace ids
    depended only on job, group, sequence and rank, and 60 spans held 20 unique ids."""
    from fr_otel.otel import model
    from tests.otlp_receiver import OtlpReceiver

    archive = tmp_path / "archive"
    with OtlpReceiver(protocol="grpc").start() as receiver:
        for attempt in range(3):
            log = tmp_path / f"run{attempt}.log"
            job = _launch(
                archive,
                "again",
                log,
                FAULT="hang",
                STEPS="4",
                OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
            )
            assert job.wait(timeout=240) != 0, log.read_text()[-2000:]
        rows = sum(pq.read_metadata(p).num_rows for p in archive.glob("job=again/*/*.parquet"))
        receiver.wait_for_spans(rows, timeout_s=20)
        spans = [span for _, span in receiver.spans()]
    assert len(spans) == rows
    assert len({span.span_id for span in spans}) == len(spans)
    traces: dict[str, set[bytes]] = {}
    for span in spans:
        attributes = {a.key: a.value.string_value for a in span.attributes}
        traces.setdefault(attributes[model.RUN_ID], set()).add(span.trace_id)
    assert len(traces) == 3, traces.keys()
    first, second, third = traces.values()
    assert not (first & second or second & third or first & third)
