"""``fr-otel incidents`` and ``analyze`` show the live check's records (``ARCHIVE/_live``):
an incident the live check named while the job ran says so, with the record's line, and
``analyze`` says whether its analysis of the flushed incident names the same culprit at
the same collective; records that name no incident get their own section; a record file
that cannot be read is named on stderr and never fails the command.

The archive is a real import of a simulated job in which rank 2 skipped a collective; the
records are the live check's own dataclasses written by its own writer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from fr_otel.analysis import analyze
from fr_otel.cli import main
from fr_otel.live.records import write_record
from fr_otel.live.stall import Stall
from fr_otel.live.suspect import StallSuspect, make_suspect
from fr_otel.live.verdict import Verdict

JOB, INCIDENT, RUN = "train", "failing", "20261206T045323Z-eb799e90"
KNOWN_NS = 1_765_000_000_000_000_000


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive with one incident: rank 2 skipped a collective of mesh_dp (pg 10)."""
    root = tmp_path_factory.mktemp("live-shown")
    fault = ["--fault", "skipped_collective", "--fault-rank", "2"]
    assert main(["simulate", str(root / "bad"), "--world", "8", "--entries", "40", *fault]) == 0
    archive = root / "archive"
    assert main(["import", str(root / "bad"), "--archive", str(archive), "--job", JOB,
                 "--incident", INCIDENT, "--workers", "1"]) == 0  # fmt: skip
    return archive


@pytest.fixture()
def archive(failing: Path, tmp_path: Path) -> Path:
    """This test's own copy: the records it writes are seen by it alone."""
    return Path(shutil.copytree(failing, tmp_path / "archive"))


def _root(archive: Path) -> dict[str, Any]:
    """The analysis's root cause: kind, culprits, group, seq, op."""
    analysis = analyze(archive, job=JOB, incident=INCIDENT)
    assert analysis.root_cause is not None
    root = analysis.findings[analysis.root_cause]
    assert (root.kind, root.culprit_ranks, root.group.name) == ("skipped_collective", [2], "10")
    return {
        "kind": root.kind,
        "culprit_ranks": root.culprit_ranks,
        "group": root.group.name,
        "group_desc": root.group.desc,
        "seq": root.collective_seq_id,
        "op": root.op,
    }


def _verdict(archive: Path, job: str = JOB, **fields: Any) -> tuple[Verdict, Path]:
    """A desync verdict, 0.8 s after the divergence, naming the root cause unless
    ``fields`` say otherwise, written where the live check writes it."""
    named = {**_root(archive), "incident": INCIDENT, **fields}
    verdict = Verdict(
        id=f"20261206T045335Z-eb799e90-live-{named['kind']}-{named['seq']}",
        call_site="train.py:20 in parameters",
        summary="rank 2 skipped a collective",
        divergence_ns=KNOWN_NS - 800_000_000,
        known_ns=KNOWN_NS,
        analysis_s=0.4,
        running_ranks=[0, 1, 2, 3, 4, 5, 6, 7],
        job=job,
        run_id=RUN,
        host="node-a",
        policy="report",
        **named,
    )
    return verdict, write_record(archive, verdict)


def _stall(archive: Path) -> tuple[StallSuspect, Path]:
    """A stall suspect that declared no incident, made as the agent makes one: rank 5 has
    not issued the all_reduce ranks 4 and 6 wait in, and gave no stack."""
    stall = Stall(
        group="0",
        group_desc="default_pg",
        group_key="0",
        members=(4, 5, 6),
        seq=16,
        op="all_reduce",
        site="train.py:12 in step",
        waiting=(4, 6),
        laggards=(5,),
        since_ns=KNOWN_NS - 30_200_000_000,
        waited_s=30.2,
        threshold_s=30.0,
    )
    suspect = make_suspect(stall=stall, stacks={}, suspect_id="s-16", job=JOB, run_id=RUN)
    return suspect, write_record(archive, suspect)


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _analyze(archive: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[str, str]:
    code, out, err = _run(
        ["analyze", str(archive), "--job", JOB, "--incident", INCIDENT, *extra], capsys
    )
    assert code == 1, err
    return out, err


def test_analyze_says_the_live_check_named_the_incident_and_the_analysis_agrees(
    archive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    verdict, path = _verdict(archive)
    said = verdict.line().removeprefix("live: ")
    assert said.endswith(", 0.8 s after the divergence")
    out, _ = _analyze(archive, capsys)
    lines = out.splitlines()
    assert lines[0].startswith("ROOT CAUSE: rank 2 skipped")
    # near the root cause: right after its line and where it was issued
    assert lines[2] == f"  the live check named this while the job ran: {said} (record: {path})"
    assert lines[3] == (
        "  the analysis of the flushed incident agrees: the same culprit at the same collective"
    )

    out, _ = _analyze(archive, capsys, "--format", "json")
    live = json.loads(out)["live"]
    assert live == {**verdict.to_dict(), "path": str(path), "agrees": True}

    page = archive.parent / "report.html"
    _analyze(archive, capsys, "--format", "html", "-o", str(page))
    text = page.read_text()
    assert "the live check named this while the job ran: desync skipped_collective" in text
    assert "the analysis of the flushed incident agrees" in text


def test_analyze_says_what_the_analysis_names_instead_when_it_disagrees(
    archive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _root(archive)
    _verdict(archive, culprit_ranks=[6], seq=root["seq"] - 1)
    out, _ = _analyze(archive, capsys)
    assert "the live check named this while the job ran: desync skipped_collective: rank 6" in out
    assert (
        "  the analysis of the flushed incident names skipped_collective: rank 2 in mesh_dp"
        f" (pg 10) collective #{root['seq']} instead\n"
    ) in out
    assert "agrees" not in out
    out, _ = _analyze(archive, capsys, "--format", "json")
    live = json.loads(out)["live"]
    assert live["agrees"] is False and live["culprit_ranks"] == [6]


def test_analyze_of_an_incident_no_record_names_has_live_null(
    archive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _stall(archive)  # names no incident
    out, _ = _analyze(archive, capsys, "--format", "json")
    assert json.loads(out)["live"] is None
    out, _ = _analyze(archive, capsys)
    assert "live check" not in out


def test_incidents_shows_the_live_line_under_its_incident_and_the_rest_per_job(
    archive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    verdict, _ = _verdict(archive)
    suspect, stall_path = _stall(archive)
    # a verdict whose ranks had all ended: no rank was left to flush an incident
    ended, ended_path = _verdict(archive, job="eval", incident=None)
    code, out, err = _run(["incidents", str(archive)], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"job={JOB} incident={INCIDENT}  ranks 0-7 (8)")
    assert lines[1] == (
        "  the live check named it while the job ran: " + verdict.line().removeprefix("live: ")
    )
    assert lines[2:] == [
        "",
        "job=eval: the live check's records that name no incident here:",
        f"  {ended.line().removeprefix('live: ')} (record: {ended_path})",
        "",
        f"job={JOB}: the live check's records that name no incident here:",
        f"  {suspect.line().removeprefix('live: ')} (record: {stall_path})",
    ]
    assert "stall suspect: rank 5 has not issued default_pg (pg 0) collective #16" in lines[-1]
    assert "rank 5 gave no stack" in lines[-1]

    code, out, _ = _run(["incidents", str(archive), "--job", JOB], capsys)
    assert code == 0 and "job=eval" not in out
    assert out.count("the live check") == 2


def test_an_unreadable_record_is_named_on_stderr_and_the_rest_shown(
    archive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = _verdict(archive)
    cut = path.with_name("cut.json")
    cut.write_text('{"id": "x", "kind": ')
    undocumented = path.with_name("undocumented.json")
    undocumented.write_text('{"id": "y", "kind": "skipped_collective"}')
    for args in (["incidents", str(archive)], ["analyze", str(archive), "--format", "json"]):
        code, out, err = _run(args, capsys)
        assert code in (0, 1), err
        assert "Traceback" not in err
        assert f"fr-otel: {cut}: Expecting value: line 1 column 21" in err
        assert f"fr-otel: {undocumented}: not as documented: no culprit_ranks, group, " in err
        assert err.count("(a live check record that cannot be read; left out)") == 2
        assert "skipped_collective" in out  # the good record is still shown
