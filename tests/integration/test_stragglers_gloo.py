"""A real slow job (4 gloo ranks, rank 2 sleeping 15 ms longer before every step's gradient
all_reduce, under ``fr_otel.install()``): ``fr-otel snapshot`` while it trains leaves every
rank's buffer in the archive, the job finishes normally, and ``fr-otel analyze`` of the
snapshot names rank 2, with its lateness, and no hang."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fr_otel.cli import main
from tests.jobs import torchrun

pytestmark = pytest.mark.gloo

SCRIPT = Path(__file__).resolve().parents[1] / "workloads" / "stragglers.py"
DELAY_MS = 15.0
"""Rank 2's extra milliseconds before every collective it is late to."""


def _env(archive: Path, job: str, **workload: str) -> dict[str, str]:
    """The workload's environment: rank 2 late by ``DELAY_MS``, archiving to ``archive``
    under ``job``, none of this process's recorder settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FR_OTEL_", "OTEL_"))}
    env.update(
        FR_OTEL_ARCHIVE=str(archive),
        FR_OTEL_JOB=job,
        OMP_NUM_THREADS="1",
        STRAGGLERS=f"2:{DELAY_MS:g}",
        **workload,
    )
    return env


def test_a_snapshot_of_a_slow_running_job_names_its_straggler_and_no_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "archive"
    env = _env(archive, "slow", STEPS="400", SNAPSHOT="none", PRINT_AT="60")
    job = subprocess.Popen(
        torchrun(SCRIPT, 4), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    lines: list[bytes] = []
    try:
        assert job.stdout is not None
        # every rank 60 steps in (they print it), then the snapshot, the job still training
        while sum(line.count(b"step 60") for line in lines) < 4:
            line = job.stdout.readline()
            assert line, b"".join(lines)[-3000:]
            lines.append(line)
        assert main(["snapshot", "--archive", str(archive), "--job", "slow"]) == 0
        capsys.readouterr()
        output, _ = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
    log = (b"".join(lines) + output).decode(errors="replace")
    assert job.returncode == 0, log[-3000:]
    assert log.count("finished") == 4, log[-3000:]
    [folder] = list((archive / "job=slow").glob("incident=*"))
    assert folder.name.endswith("-operator")
    assert sorted(p.name for p in folder.glob("rank-*.parquet")) == [
        f"rank-{r:06d}.parquet" for r in range(4)
    ]
    verdict_path = tmp_path / "verdict.json"
    assert main(["analyze", str(archive), "--format", "json", "-o", str(verdict_path)]) == 1
    verdict = json.loads(verdict_path.read_text())
    kinds = [f["kind"] for f in verdict["findings"]]
    assert kinds == ["straggler"], [f["summary"] for f in verdict["findings"]]
    assert verdict["root_cause"] is None and verdict["snapshot"]["stalled"] is False
    [finding] = verdict["findings"]
    assert finding["culprit_ranks"] == [2]
    lateness = finding["evidence"]["lateness_ms"]["median"]
    assert abs(lateness - DELAY_MS) <= 0.2 * DELAY_MS, finding["summary"]


@pytest.mark.parametrize(("steps", "named"), [(3, []), (25, [2])])
def test_a_rank_slow_in_a_few_steps_is_not_a_straggler_and_slow_in_many_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], steps: int, named: list[int]
) -> None:
    """Each step every rank runs 10 gradient all_reduces from one line (as FSDP's per-layer
    collectives), rank 2 late to each by ``DELAY_MS``. Over 3 steps it is late at all 30 of them,
    but at 3 occasions only: a slow moment (a short run of torchtitan on a busy machine
    showed one), and nobody is named. Over 25 steps it is named."""
    archive = tmp_path / "archive"
    env = _env(archive, "bursts", STEPS=str(steps), BURST="10", BASE_MS="100")
    job = subprocess.run(torchrun(SCRIPT, 4), env=env, capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, (job.stdout + job.stderr)[-3000:]
    code = main(["analyze", str(archive), "--job", "bursts", "--format", "json"])
    verdict = json.loads(capsys.readouterr().out)
    stragglers = [f for f in verdict["findings"] if f["kind"] == "straggler"]
    assert [f["culprit_ranks"] for f in stragglers] == ([named] if named else [])
    assert code == (1 if named else 0), [f["summary"] for f in verdict["findings"]]
    if named:
        [finding] = stragglers
        assert finding["evidence"]["occasions"] >= 15, finding["summary"]
        assert finding["evidence"]["collectives"] >= 10 * finding["evidence"]["occasions"] - 10
