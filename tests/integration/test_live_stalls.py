"""Stalls named live by ``fr-otel run``, on real gloo jobs: a rank stuck in host code is
named as the suspect once its peers have waited the threshold, with where its training
thread is; pauses every rank shares, and a rank slower than the rest but under the
threshold, are never named.

The stuck rank is a workload's ``FAULT=hang`` culprit (``tests/workloads/_common.py``'s
``hang``: it sleeps in host code before its next collective). In DDP its peers wait in a
gradient bucket's all-reduce, issued by DDP's C++ reducer (the torch ring's path); in
data_shuffle in a gather issued through the hooked Python function.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fr_otel.analysis import analyze
from tests.jobs import fr_otel_run, torchrun

pytestmark = pytest.mark.gloo

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"
STALL_S = 4.0
"""The threshold these jobs run under (``FR_OTEL_LIVE_STALL_S``)."""
SLACK_S = {"data_shuffle": 2.0, "ddp": 6.0}
"""How late past the threshold the suspect may come: a look's interval and the stack's
round trip; for DDP also the time until the peers' mirrors bring the bucket all-reduce
they wait in into their rings (the torch ring is written at reads of torch's FR)."""


def _hang_line() -> int:
    """The line of ``_common.hang`` where the culprit sleeps."""
    lines = (WORKLOADS / "_common.py").read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1) if "time.sleep(3 * cfg.pg_timeout)" in text)


def _suspects(archive: Path, job: str, err: str) -> list[dict[str, Any]]:
    lines = [line for line in err.splitlines() if line.startswith("fr-otel: live: stall ")]
    records = [
        json.loads(path.read_text())
        for path in sorted((archive / "_live" / f"job={job}").glob("run=*/*-live-stall-*.json"))
    ]
    assert len(lines) == len(records), err[-3000:]
    for line, record in zip(lines, records, strict=True):
        assert f"#{record['seq']} ({record['op']})" in line, line
    return records


@pytest.mark.parametrize("family", ["data_shuffle", "ddp"])
def test_a_rank_stuck_in_host_code_is_named_at_the_threshold_with_its_line(
    family: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, archive, _ = fr_otel_run(
        tmp_path / "archive",
        family,
        torchrun(WORKLOADS / f"{family}.py", 3),
        FAULT="hang",
        FAULT_RANK="2",
        STEPS="8",
        PG_TIMEOUT="15",
        FR_OTEL_LIVE_STALL_S=str(STALL_S),
    )
    err = capsys.readouterr().err
    assert code != 0  # the peers' timeout ends the job: a suspect declares nothing
    [record] = _suspects(archive, family, err)
    assert "fr-otel: live: desync" not in err, err[-3000:]
    assert record["culprit_ranks"] == [2] and record["waiting_ranks"] == [0, 1], record
    assert record["group_desc"] == "default_pg" and record["incident"] is None, record
    assert record["call_site"] == f"{WORKLOADS / '_common.py'}:{_hang_line()} in hang", record
    assert record["in_collective"] is False and "in host code" in err
    assert record["waited_s"] >= STALL_S and record["seconds"] < STALL_S + SLACK_S[family], record
    [stack] = record["stacks"].values()
    assert [f["name"] for f in stack["frames"][:2]] == ["hang", "main"], stack["frames"][:3]
    # the incident the peers' timeout declared later: its analysis blames the same rank
    [folder] = (archive / f"job={family}").glob("incident=*")
    analysis = analyze(archive, job=family, incident=folder.name.removeprefix("incident="))
    assert analysis.root_cause is not None, analysis.findings
    assert analysis.findings[analysis.root_cause].culprit_ranks == record["culprit_ranks"]


_PAUSES = """
import datetime, os, time, torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank = dist.get_rank()
if rank == 0:
    time.sleep(2.5)  # a slow first step (compiling, loading) on one rank
for step in range(12):
    if rank == 1 and step < 4:
        time.sleep(2.0)  # slower than the rest, under the threshold
    if step == 6:
        time.sleep(2 * {stall_s})  # a checkpoint every rank saves
    dist.all_reduce(torch.ones(100))
dist.destroy_process_group()
"""


def test_shared_pauses_and_a_rank_slower_than_the_threshold_are_never_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "pauses.py"
    script.write_text(_PAUSES.format(stall_s=STALL_S))
    code, archive, took = fr_otel_run(
        tmp_path / "archive", "pauses", torchrun(script, 3), FR_OTEL_LIVE_STALL_S=str(STALL_S)
    )
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert took > 2 * STALL_S + 8  # the pauses happened
    assert "fr-otel: live" not in err, err[-3000:]
    assert not (archive / "_live").exists()
