"""The live check of ``fr-otel run`` on real gloo jobs: a desync is named while the job
still runs, within seconds of the divergent collective and long before the group's
timeout, with the culprit ``fr-otel analyze`` names from the incident the ranks then
flushed; healthy workloads get no verdict.

The faulty job is a small training loop whose culprit misbehaves at a known moment,
which it writes down (``FAULT_MARK``) just before its divergent collective: a reordering
(its peers hang in the all_reduce it moved), a size mismatch (gloo aborts the receiving
peer at once: the evidence is in the dead rank's ring) and a skipped collective of a
workload (``tests/workloads/data_shuffle.py``, ``FAULT=skip``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fr_otel.analysis import analyze
from fr_otel.cli import main
from fr_otel.cli._errors import EXIT_LIVE_ABORTED
from tests.jobs import fr_otel_run, torchrun

pytestmark = pytest.mark.gloo

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"
PG_TIMEOUT_S = 30
GOAL_S = 5.0
"""The verdict comes within this many seconds of the divergent collective."""

_TRAIN = """
import datetime, os, time, torch, torch.distributed as dist

fault = os.environ["LIVE_FAULT"]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds={timeout}))
rank, world = dist.get_rank(), dist.get_world_size()


def gradients(numel=1000, dtype=torch.float32):
    dist.all_reduce(torch.ones(numel, dtype=dtype))


def parameters():
    dist.all_gather_into_tensor(torch.empty(64 * world), torch.ones(64))


for step in range(60):
    if step == 10 and rank == 1:
        with open(os.environ["FAULT_MARK"], "w") as mark:
            mark.write(str(time.time_ns()))
        if fault == "reorder":
            parameters()
            gradients()
        elif fault == "dtype":
            gradients(dtype=torch.float64)  # its peers all_reduce float32
            parameters()
        else:
            gradients(1001)  # its peers all_reduce 1000 floats
            parameters()
    else:
        gradients()
        parameters()
    time.sleep(0.05)
dist.destroy_process_group()
"""


def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: str, command: list[str], **env: str
) -> tuple[int, Path, float]:
    """``fr-otel run --job JOB -- COMMAND`` in this process; (exit code, archive, seconds)."""
    return fr_otel_run(tmp_path / "archive", job, command, **env)


def _faulty_job(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
    policy: str,
    timeout_s: int = PG_TIMEOUT_S,
) -> tuple[int, Path, float, int]:
    """The small training job with ``fault``; (exit code, archive, seconds, fault ns)."""
    script = tmp_path / "train.py"
    script.write_text(_TRAIN.format(timeout=timeout_s))
    mark = tmp_path / "fault"
    code, archive, took = _run(
        tmp_path,
        monkeypatch,
        "live",
        torchrun(script, 3),
        LIVE_FAULT=fault,
        FAULT_MARK=str(mark),
        FR_OTEL_LIVE_POLICY=policy,
    )
    return code, archive, took, int(mark.read_text())


def _verdict(archive: Path, job: str, err: str) -> dict[str, Any]:
    """The one live verdict: its line on stderr and its record in the archive."""
    lines = [line for line in err.splitlines() if line.startswith("fr-otel: live: desync ")]
    assert len(lines) == 1, err[-3000:]
    [path] = (archive / "_live" / f"job={job}").glob("run=*/*.json")
    record: dict[str, Any] = json.loads(path.read_text())
    assert f" {record['kind']}: " in lines[0] and f"#{record['seq']}" in lines[0], lines[0]
    return record


def _offline_agrees(archive: Path, job: str, record: dict[str, Any]) -> None:
    """``fr-otel analyze`` of the incident the ranks flushed names the same culprit at the
    same collective."""
    assert record["incident"], record
    analysis = analyze(archive, job=job, incident=record["incident"])
    assert analysis.root_cause is not None, analysis.findings
    root = analysis.findings[analysis.root_cause]
    named = (root.kind, root.culprit_ranks, root.group.name, root.collective_seq_id)
    assert named == (record["kind"], record["culprit_ranks"], record["group"], record["seq"])


def test_a_reordering_is_named_while_the_job_hangs_and_abort_ends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 1 issues its all_gather before its all_reduce: every rank hangs in its first
    collective of the step (gloo never matches them) until the 30 s timeout. The verdict
    comes in seconds, while all three ranks run; ``abort`` then ends the job."""
    code, archive, took, fault_ns = _faulty_job(tmp_path, monkeypatch, "reorder", "abort")
    record = _verdict(archive, "live", capsys.readouterr().err)
    assert code == EXIT_LIVE_ABORTED
    assert took < PG_TIMEOUT_S  # ended by the live check, not by the group's timeout
    assert record["culprit_ranks"] == [1] and record["group_desc"] == "default_pg"
    assert record["seq"] == 21 and "train.py" in record["call_site"], record
    assert record["running_ranks"] == [0, 1, 2], record
    assert (record["known_ns"] - fault_ns) / 1e9 < GOAL_S, record
    assert record["incident"].endswith("-live_check"), record  # declared by the live check
    _offline_agrees(archive, "live", record)
    # and fr-otel analyze of that incident says what the live check named, and agrees
    assert main(["analyze", str(archive), "--job", "live", "--incident", record["incident"]]) == 1
    out = capsys.readouterr().out
    assert "the live check named this while the job ran: desync skipped_collective: rank 1" in out
    assert "the analysis of the flushed incident agrees" in out


def test_the_snapshot_policy_puts_every_ranks_stack_into_the_verdicts_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reordering again, with ``snapshot``: the record holds where each rank's training
    thread was at the verdict: every one waiting in torch.distributed, rank 1 in its
    all_gather (``parameters``), its peers in their all_reduce (``gradients``)."""
    code, archive, _, _ = _faulty_job(tmp_path, monkeypatch, "reorder", "snapshot", timeout_s=12)
    record = _verdict(archive, "live", capsys.readouterr().err)
    assert code not in (0, EXIT_LIVE_ABORTED)  # the job went on to its timeout
    assert record["culprit_ranks"] == [1] and record["policy"] == "snapshot", record
    stacks = record["stacks"]
    assert sorted(stacks) == ["0", "1", "2"], record
    for rank, stack in stacks.items():
        assert stack["in_collective"] is True, stack
        function = "parameters" if rank == "1" else "gradients"
        assert stack["where"].endswith(f" in {function}"), stack["where"]
        assert "train.py" in stack["where"], stack["where"]


def test_a_size_mismatch_is_named_from_the_ring_of_the_rank_gloo_aborted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 1 all_reduces 1001 floats: the peer that receives them dies of gloo's
    std::terminate at once and the launcher stops the rest; the verdict comes from the
    rings, within seconds, and names the job's own incident."""
    code, archive, _, fault_ns = _faulty_job(tmp_path, monkeypatch, "size", "report")
    record = _verdict(archive, "live", capsys.readouterr().err)
    assert code not in (0, EXIT_LIVE_ABORTED)  # the job failed by itself
    assert (record["kind"], record["culprit_ranks"], record["seq"]) == ("size_mismatch", [1], 21)
    assert (record["known_ns"] - fault_ns) / 1e9 < GOAL_S, record
    assert not record["incident"].endswith("-live_check"), record  # the job's own
    _offline_agrees(archive, "live", record)


def test_a_skipped_collective_of_a_workload_is_named_and_the_job_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """data_shuffle's rank 1 leaves out a step's gather and goes on to the next step's
    shuffle; its peers wait in the gather. With ``report`` the job runs on to its own
    timeout, which fails it."""
    code, archive, took = _run(
        tmp_path,
        monkeypatch,
        "shuffle",
        torchrun(WORKLOADS / "data_shuffle.py", 3),
        FAULT="skip",
        PG_TIMEOUT="12",
    )
    err = capsys.readouterr().err
    record = _verdict(archive, "shuffle", err)
    assert code not in (0, EXIT_LIVE_ABORTED), err[-3000:]
    assert took > 12  # the job went on to its timeout
    # rank 1 waits in the next step's all_to_all where its peers wait in the gather: as the
    # snapshot stands when it is analysed, that slot is named a skip or an op mismatch, with
    # the same culprit and collective either way (and the flushed incident alike:
    # _offline_agrees)
    assert record["kind"] in ("skipped_collective", "op_type_mismatch"), record
    assert (record["culprit_ranks"], record["op"]) == ([1], "gather"), record
    assert record["seconds"] < GOAL_S and record["running_ranks"], record
    _offline_agrees(archive, "shuffle", record)


def test_a_dtype_mismatch_is_named_with_the_culprit_the_analysis_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 1 all_reduces 1000 float64 against its peers' float32: twice the bytes."""
    code, archive, _, fault_ns = _faulty_job(tmp_path, monkeypatch, "dtype", "abort", 12)
    record = _verdict(archive, "live", capsys.readouterr().err)
    assert code != 0
    assert (record["kind"], record["culprit_ranks"], record["seq"]) == ("dtype_mismatch", [1], 21)
    assert (record["known_ns"] - fault_ns) / 1e9 < GOAL_S, record
    _offline_agrees(archive, "live", record)


def test_a_skipped_functional_collective_is_named_from_the_torch_ring_within_the_goal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """functional.py's rank 1 leaves out a step's all_gather_tensor: functional collectives
    reach the rings only through each rank's reads of torch's FR, which a hung rank makes
    within a second of its collectives stopping."""
    code, archive, _ = _run(
        tmp_path,
        monkeypatch,
        "functional",
        torchrun(WORKLOADS / "functional.py", 3),
        FAULT="skip",
        STEPS="8",
        PG_TIMEOUT="30",
        FR_OTEL_LIVE_POLICY="abort",
    )
    err = capsys.readouterr().err
    record = _verdict(archive, "functional", err)
    assert code == EXIT_LIVE_ABORTED, err[-3000:]
    assert record["culprit_ranks"] == [1] and record["op"] == "all_gather", record
    assert record["seconds"] < GOAL_S, record
    _offline_agrees(archive, "functional", record)


HEALTHY = {"ddp": 3, "data_shuffle": 3, "objects": 3, "mesh2d": 4}
"""Families (and their ranks) whose healthy runs must give no verdict: C++ collectives
seen late through the torch ring, scatter and gather lists on the root alone with uneven
all_to_all splits, object collectives and monitored barriers, groups of one name on
separate members."""


@pytest.mark.parametrize("family", sorted(HEALTHY))
def test_a_healthy_workload_gets_no_verdict(
    family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, archive, _ = _run(
        tmp_path,
        monkeypatch,
        family,
        torchrun(WORKLOADS / f"{family}.py", HEALTHY[family]),
        FAULT="none",
        STEPS="12",
        # stalls too: lower than the default, as low as a healthy lockstep job allows
        FR_OTEL_LIVE_STALL_S="8",
    )
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert "fr-otel: live" not in err, err[-3000:]
    assert not (archive / "_live").exists()
