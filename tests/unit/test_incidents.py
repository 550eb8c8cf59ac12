"""Incidents are chosen out loud: several in an archive are listed, never picked silently;
``fr-otel incidents`` describes each; a name that does not exist lists those that do; an
input without dumps is unusable."""

from __future__ import annotations

from pathlib import Path

import pytest

from fr_otel.cli import main


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def two_incidents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A failing run (rank 2 skipped a collective, rank 6 left no dump) and, imported
    after it, a healthy one, in one job."""
    root = tmp_path_factory.mktemp("incidents")
    archive = root / "archive"
    fault = ["--fault", "skipped_collective", "--fault-rank", "2", "--omit-rank", "6"]
    assert main(["simulate", str(root / "bad"), "--world", "8", "--entries", "40", *fault]) == 0
    assert main(["simulate", str(root / "good"), "--world", "8", "--entries", "40"]) == 0
    assert main(["import", str(root / "bad"), "--archive", str(archive), "--job", "train",
                 "--incident", "failing", "--workers", "1"]) == 0  # fmt: skip
    assert main(["import", str(root / "good"), "--archive", str(archive), "--job", "train",
                 "--incident", "healthy", "--workers", "1"]) == 0  # fmt: skip
    return archive


def test_analyze_without_incident_lists_them_and_exits_2(
    two_incidents: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("analyze", "export"):
        extra = (
            ["--otlp-json", str(two_incidents.parent / "x.jsonl")] if command == "export" else []
        )
        code, out, err = _run([command, str(two_incidents), *extra], capsys)
        assert code == 2, err
        assert "No problems found" not in out and "ROOT CAUSE" not in out
        assert "holds 2 incidents; say which one" in err
        assert "--job train --incident failing" in err
        assert "--job train --incident healthy" in err
        assert "Traceback" not in err
    code, out, _ = _run(["analyze", str(two_incidents), "--incident", "healthy"], capsys)
    assert code == 0 and out.startswith("No problems found.")
    code, out, _ = _run(["analyze", str(two_incidents), "--incident", "failing"], capsys)
    assert code == 1 and out.startswith("ROOT CAUSE: ")


def test_incidents_lists_each_with_ranks_missing_ranks_time_and_root(
    two_incidents: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(["incidents", str(two_incidents), "--analyze"], capsys)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 2
    failing = next(line for line in lines if "incident=failing" in line)
    healthy = next(line for line in lines if "incident=healthy" in line)
    assert failing.startswith("job=train incident=failing")
    assert "ranks 0-5,7 (7)" in failing and "missing 6" in failing
    assert " UTC (" in failing  # the entries' time span
    assert "root: " in failing
    assert "ranks 0-7 (8)" in healthy and "missing none" in healthy
    assert healthy.endswith("healthy")
    code, out, _ = _run(["incidents", str(two_incidents)], capsys)
    assert code == 0 and "root:" not in out and len(out.strip().splitlines()) == 2


def test_unknown_job_or_incident_lists_what_exists(
    two_incidents: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(["analyze", str(two_incidents), "--job", "llama"], capsys)
    assert code == 2
    assert err.strip() == f"fr-otel: error: {two_incidents} has no job 'llama'; its jobs: train"
    code, _, err = _run(
        ["analyze", str(two_incidents), "--job", "train", "--incident", "x"], capsys
    )
    assert code == 2
    assert "has no incident 'x' in job 'train'; its incidents: failing, healthy" in err
    code, _, err = _run(["incidents", str(two_incidents), "--job", "llama"], capsys)
    assert code == 2 and "its jobs: train" in err


def test_an_input_without_dumps_is_exit_2_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = _run(["import", str(empty), "--archive", str(tmp_path / "a")], capsys)
    assert code == 2
    assert f"{empty}: missing: no Flight Recorder dumps in this folder" in err
    assert "it is empty" in err
    assert out.startswith("imported nothing into")
    assert not list((tmp_path / "a").rglob("*.parquet"))

    (empty / "train.log").write_text("loss 0.1\n")
    code, _, err = _run(["analyze", str(empty)], capsys)
    assert code == 2
    assert "no Flight Recorder dumps in this folder" in err and "it holds train.log" in err
