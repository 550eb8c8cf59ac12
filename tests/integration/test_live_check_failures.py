"""The live check's own failures never harm training: real faults on real gloo jobs.

- A ring the agent cannot read (the rank's meta replaced by garbage, as a failing disk
  leaves it): the agent says once that it is blind to that rank, compares the others, and
  still names a desync among them; the rank itself flushes as always.
- A killed agent (``fr-otel run`` killed outright): the ranks run on, and their incident is
  archived and diagnosed as without the check.
- A store that stops answering (torchrun, which serves the job's TCPStore, stopped with
  SIGSTOP): the agent reads files, not the store, and names the desync in seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fr_otel.analysis import analyze
from fr_otel.cli._errors import EXIT_LIVE_ABORTED
from fr_otel.recorder.ring import NEXT_RECORD, NEXT_RECORD_OFFSET
from tests.jobs import STEERING, children, fr_otel_run, torchrun

pytestmark = pytest.mark.gloo

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"
GOAL_S = 5.0

_TRAIN = """
import datetime, os, time, torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds={timeout}))
rank, world = dist.get_rank(), dist.get_world_size()
blind = os.environ.get("BLIND_RANK")


def unreadable_ring():
    folder = os.path.join(
        os.environ["FR_OTEL_ARCHIVE"], "_rings", "job=" + os.environ["FR_OTEL_JOB"],
        "run=" + os.environ["FR_OTEL_RUN_ID"],
    )
    path = os.path.join(folder, f"rank-{{rank:06d}}.meta")
    with open(path + ".bad", "wb") as bad:
        bad.write(b"\\x00garbage\\xff\\n" * 10)
    os.replace(path + ".bad", path)


for step in range(400):
    if blind is not None and step == 3 and rank == int(blind):
        unreadable_ring()
    if step == {fault_step} and rank == 1:
        with open(os.environ["FAULT_MARK"], "w") as mark:
            mark.write(str(time.time_ns()))
        dist.all_gather_into_tensor(torch.empty(64 * world), torch.ones(64))
        dist.all_reduce(torch.ones(1000))
    else:
        dist.all_reduce(torch.ones(1000))
        dist.all_gather_into_tensor(torch.empty(64 * world), torch.ones(64))
    time.sleep(0.05)
dist.destroy_process_group()
"""


def _script(tmp_path: Path, *, timeout: int, fault_step: int) -> Path:
    script = tmp_path / "train.py"
    script.write_text(_TRAIN.format(timeout=timeout, fault_step=fault_step))
    return script


def _record(archive: Path, job: str) -> dict[str, object]:
    [path] = (archive / "_live" / f"job={job}").glob("run=*/*.json")
    record: dict[str, object] = json.loads(path.read_text())
    return record


def test_a_ring_it_cannot_read_blinds_the_check_to_that_rank_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 3's meta turns to garbage at step 3; rank 1 reorders at step 10. Ranks 0 and 2
    against rank 1 are a majority without rank 3, so the desync is still named."""
    mark = tmp_path / "fault"
    code, archive, _ = fr_otel_run(
        tmp_path / "archive",
        "blind",
        torchrun(_script(tmp_path, timeout=30, fault_step=10), 4),
        BLIND_RANK="3",
        FAULT_MARK=str(mark),
        FR_OTEL_LIVE_POLICY="abort",
    )
    err = capsys.readouterr().err
    blind = [line for line in err.splitlines() if "live check: blind to" in line]
    assert len(blind) == 1 and "blind to rank 3:" in blind[0], err[-3000:]
    assert "rank-000003.meta" in blind[0]
    assert code == EXIT_LIVE_ABORTED, err[-3000:]
    record = _record(archive, "blind")
    assert record["culprit_ranks"] == [1] and record["seq"] == 21, record
    assert (int(str(record["known_ns"])) - int(mark.read_text())) / 1e9 < GOAL_S, record
    assert "cannot tell whether ranks 3 flushed" in err, err[-3000:]
    incident = archive / "job=blind" / f"incident={record['incident']}"
    # rank 3 flushed from its own memory: the garbage is only in the file the agent reads
    assert sorted(p.name for p in incident.glob("rank-*.parquet")) == [
        f"rank-{rank:06d}.parquet" for rank in range(4)
    ]


def _start(tmp_path: Path, job: str, command: list[str], **env: str) -> subprocess.Popen[str]:
    """``fr-otel run`` in a child of its own session (its launcher and ranks in its process
    group), stderr to a file."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(STEERING)}
    environ.update(OMP_NUM_THREADS="1", **env)
    archive = tmp_path / "archive"
    return subprocess.Popen(
        [
            str(Path(sys.executable).parent / "fr-otel"),
            "run",
            "--job",
            job,
            "--archive",
            str(archive),
            "--",
            *command,
        ],
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "stderr").open("w"),
        text=True,
        start_new_session=True,
    )


def _wait_for(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _rings(tmp_path: Path, job: str) -> list[Path]:
    return list((tmp_path / "archive" / "_rings" / f"job={job}").glob("run=*/rank-*.ring"))


def test_a_killed_agent_leaves_training_and_its_incident_as_without_the_check(
    tmp_path: Path,
) -> None:
    """``fr-otel run`` is killed outright once the ranks record: data_shuffle's rank 1
    then hangs in host code; its peers' timeout declares the incident, which every rank
    flushes and the analysis blames on rank 1, as under ``fr_otel.install()`` alone."""
    child = _start(
        tmp_path,
        "killed",
        torchrun(WORKLOADS / "data_shuffle.py", 3),
        FAULT="hang",
        STEPS="8",
        PG_TIMEOUT="10",
    )
    try:
        _wait_for(
            lambda: len(_rings(tmp_path, "killed")) == 3 or child.poll() is not None,
            120,
            "the ranks' rings",
        )
        assert child.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        # the launcher and the ranks run on without it, to the timeout and the flush
        _wait_for(lambda: _group_gone(child.pid), 120, "the job to end")
    finally:
        if not _group_gone(child.pid):
            os.killpg(child.pid, signal.SIGKILL)
    archive = tmp_path / "archive"
    [incident] = (archive / "job=killed").glob("incident=*")
    assert incident.name.endswith("-timeout"), incident
    analysis = analyze(archive, job="killed", incident=incident.name.removeprefix("incident="))
    assert analysis.root_cause is not None, analysis.findings
    assert analysis.findings[analysis.root_cause].culprit_ranks == [1], analysis.findings
    assert not (archive / "_live").exists()


def _records(tmp_path: Path, job: str) -> int:
    """The fewest collectives any rank's ring holds so far (its record counter)."""
    counts = []
    for ring in _rings(tmp_path, job):
        with ring.open("rb") as handle:
            handle.seek(NEXT_RECORD_OFFSET)
            counts.append(NEXT_RECORD.unpack(handle.read(NEXT_RECORD.size))[0])
    return min(counts, default=0)


def _launcher(parent: int) -> int:
    """The pid of ``parent``'s child process (torchrun, under ``fr-otel run``)."""
    found = children(parent)
    assert found, f"no child of {parent}"
    return found[0]


def _store_answers(port: str) -> bool:
    """Whether the job's TCPStore answers a new client's request within 20 s (asked from a
    child: a client of a store that does not answer blocks for good)."""
    probe = (
        "import datetime, sys; from torch.distributed import TCPStore; TCPStore('127.0.0.1',"
        " int(sys.argv[1]), is_master=False, wait_for_workers=False,"
        " timeout=datetime.timedelta(seconds=2)).add('probe', 1)"
    )
    try:
        subprocess.run(
            [sys.executable, "-c", probe, port], timeout=20, capture_output=True, check=True
        )
    except (subprocess.TimeoutExpired, subprocess.CalledProcessError):
        return False
    return True


def test_a_store_that_stops_answering_neither_blinds_the_check_nor_holds_the_flush(
    tmp_path: Path,
) -> None:
    """torchrun serves the job's TCPStore; stopped (SIGSTOP) once the ranks train, the store
    answers nobody. Rank 1 then reorders: the verdict still comes in seconds, from the
    rings on disk, and the rank the agent asks to declare the incident gives the store up
    after ``sidechannel.ANSWER_S`` and flushes (its request would block for good: before,
    no rank flushed and its watch thread hung). The launcher is let go again afterwards,
    and the job ends at its timeout."""
    mark = tmp_path / "fault"
    command = torchrun(_script(tmp_path, timeout=15, fault_step=60), 3)
    child = _start(tmp_path, "nostore", command, FAULT_MARK=str(mark))
    try:
        _wait_for(
            lambda: len(_rings(tmp_path, "nostore")) == 3 or child.poll() is not None,
            120,
            "the ranks' rings",
        )
        assert child.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
        # once every rank trains: its recorder has connected to the store
        _wait_for(lambda: _records(tmp_path, "nostore") >= 20, 120, "the ranks to train")
        launcher = _launcher(child.pid)
        os.kill(launcher, signal.SIGSTOP)
        try:
            assert not _store_answers(command[command.index("--master-port") + 1])
            _wait_for(mark.exists, 60, "the fault")
            record_glob = (tmp_path / "archive" / "_live").glob
            _wait_for(lambda: list(record_glob("job=nostore/run=*/*.json")), 30, "the record")
        finally:
            os.kill(launcher, signal.SIGCONT)
        child.wait(120)
    finally:
        if not _group_gone(child.pid):
            os.killpg(child.pid, signal.SIGKILL)
    err = (tmp_path / "stderr").read_text()
    record = _record(tmp_path / "archive", "nostore")
    assert record["culprit_ranks"] == [1] and record["seq"] == 121, record
    assert (int(str(record["known_ns"])) - int(mark.read_text())) / 1e9 < GOAL_S, record
    assert f"live: desync {record['kind']}: rank 1 " in err, err[-3000:]
    assert "live check: blind" not in err, err[-3000:]
    assert record["incident"], (record, err[-3000:])
    flushed = tmp_path / "archive" / "job=nostore" / f"incident={record['incident']}"
    assert (flushed / "rank-000000.parquet").is_file(), err[-3000:]
