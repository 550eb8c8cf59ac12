"""Verdicts on real gloo jobs run now, not only on committed dumps.

- The same fault, run three times, gives one answer: a cross-group wait cycle (ranks of
  one pair waiting on each other across their pair and the default group) is resolved by
  what the other pair did, never by which rank happened to reach its collective first.
- A rank that died before its recorder read anything (its rank file absent, or without
  rows) is the suspect when its peer waits in a collective only it could complete.
- The demo's rank that skips a collective is diagnosed as skipping it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.analysis import analyze
from fr_otel.cli import main
from fr_otel.demo.recorded_job import run_recorded
from tests.jobs import torchrun

pytestmark = pytest.mark.gloo

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "tests" / "workloads"


def _subgroups_skip(out: Path) -> Path:
    """One real run of tests/workloads/subgroups.py where rank 3 skips its pair all_reduce;
    returns the folder of torch's own FR dumps."""
    env = {
        **os.environ,
        "FAULT": "skip",
        "FAULT_RANK": "3",
        "PG_TIMEOUT": "4",
        "FR_DUMP_DIR": str(out),
        "OMP_NUM_THREADS": "1",
    }
    result = subprocess.run(
        torchrun(WORKLOADS / "subgroups.py", 4),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode != 0, result.stderr[-2000:]
    assert len(list(out.glob("comm_lib_trace_rank_*"))) == 4, result.stderr[-4000:]
    return out


def test_a_cross_group_wait_cycle_gives_one_answer_run_after_run(tmp_path: Path) -> None:
    verdicts = []
    for run in range(3):
        analysis = analyze(_subgroups_skip(tmp_path / f"run{run}"))
        root = analysis.findings[analysis.root_cause or 0]
        # decided by evidence: rank 3 went on with what followed its pair all_reduce in the
        # step before (the loss all_reduce) instead of issuing it
        assert (root.kind, root.culprit_ranks, root.group.ranks) == (
            "skipped_collective",
            [3],
            (1, 3),
        )
        assert root.evidence["went_to"]["op"] == "all_reduce"
        verdicts.append(
            [
                (f.kind, f.group.ranks, f.culprit_ranks, f.waiting_ranks, f.consequence_of)
                for f in analysis.findings
            ]
        )
    assert verdicts[0] == verdicts[1] == verdicts[2]
    assert verdicts[0][1] == ("missing_rank", (0, 1, 2, 3), [], [1], 0)


@pytest.fixture(scope="module")
def compiled_skip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``fr-otel run -- torchrun tests/workloads/compiled.py`` where rank 1 skips the
    compiled gradient all_reduce: its loss all_reduce meets rank 0's larger gradient one
    and gloo aborts rank 1. Returns the archive."""
    tmp = tmp_path_factory.mktemp("compiled")
    archive = tmp / "archive"
    saved = dict(os.environ)
    os.environ.update({"FAULT": "skip", "PG_TIMEOUT": "6", "OMP_NUM_THREADS": "1"})
    try:
        code = main(
            [
                "run",
                "--job",
                "compiled",
                "--archive",
                str(archive),
                "--",
                *torchrun(WORKLOADS / "compiled.py", 2),
            ]
        )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert code != 0
    return archive


@pytest.mark.parametrize("how", ["absent", "zero rows"])
def test_a_rank_that_left_no_rows_is_the_suspect_by_its_silence(
    compiled_skip: Path, tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    analysis = analyze(compiled_skip, job="compiled")
    assert analysis.root_cause is not None
    assert analysis.findings[analysis.root_cause].culprit_ranks == [1]
    # as when rank 1 dies before its recorder has read torch's buffer
    archive = tmp_path / "archive"
    subprocess.run(["cp", "-r", str(compiled_skip), str(archive)], check=True)
    [path] = archive.glob("job=compiled/incident=*/rank-000001.parquet")
    if how == "absent":
        path.unlink()
    else:
        pq.write_table(pq.read_table(path).slice(0, 0), path)
    analysis = analyze(archive, job="compiled")
    assert analysis.missing_dumps == [1] and analysis.ranks == [0]
    root = analysis.findings[analysis.root_cause or 0]
    # rank 0 waits in an all_reduce only rank 1 could complete
    assert (root.kind, root.culprit_ranks, root.op) == ("silent_rank", [1], "all_reduce")
    assert root.evidence["present_ranks"] == [0] and root.evidence["by_silence"] is True
    capsys.readouterr()
    assert main(["analyze", str(archive), "--job", "compiled"]) == 1
    assert "rank 1 left no dump and is the suspect" in capsys.readouterr().out


def test_the_demo_skip_is_a_skipped_collective(tmp_path: Path) -> None:
    run = run_recorded("skipped_collective", tmp_path / "archive", job="demo")
    [incident] = run.incidents()
    analysis = analyze(tmp_path / "archive", job="demo", incident=incident)
    root = analysis.findings[analysis.root_cause or 0]
    assert (root.kind, root.culprit_ranks, root.group.desc) == (
        "skipped_collective",
        [1],
        "default_pg",
    ), root.summary
    assert root.evidence["skipped_ops"] == ["all_reduce"]
