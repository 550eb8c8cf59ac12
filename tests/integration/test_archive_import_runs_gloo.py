"""Two real gloo runs of one job, dumped into one folder, each missing a different rank:
``fr-otel import`` never mixes them, and ``analyze`` of the folder refuses to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fr_otel.cli import main
from fr_otel.demo.gloo_job import run_scenario

pytestmark = pytest.mark.gloo


def test_two_live_runs_in_one_folder_become_two_incidents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    folder = tmp_path / "dumps"
    # the same program twice, as a restarted job: first run's dumps, then the second's
    first = run_scenario(
        "healthy", folder, world=4, naming="nccl", stack_traces=False, json_too=False
    )
    second = run_scenario(
        "healthy", folder, world=4, naming="torch_default", stack_traces=False, json_too=False
    )
    first[1].unlink()  # the first run lost rank 1's dump
    second[2].unlink()  # the second, rank 2's

    archive = tmp_path / "archive"
    code = main(["import", str(folder), "--archive", str(archive), "--job", "j", "--workers", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "the dumps are of 2 runs" in out
    manifests = sorted(
        (json.loads(p.read_text()) for p in archive.glob("job=j/incident=*/_incident.json")),
        key=lambda m: m["incident"],
    )
    assert len(manifests) == 2
    got = sorted((m["ranks"], m["missing_ranks"]) for m in manifests)
    assert got == [([0, 1, 3], [2]), ([0, 2, 3], [1])]
    for manifest in manifests:
        files = {
            p.name
            for p in (archive / "job=j" / f"incident={manifest['incident']}").glob("*.parquet")
        }
        assert len(files) == 3
    # each incident's rows come from one run's files only
    import duckdb

    prefixes = duckdb.execute(
        "SELECT incident, list(DISTINCT regexp_extract(source_file, '(nccl|comm_lib)_trace'))"
        " FROM read_parquet(?, hive_partitioning = true) GROUP BY incident",
        [str(archive / "**" / "*.parquet")],
    ).fetchall()
    assert sorted(len(kinds) for _, kinds in prefixes) == [1, 1]

    for manifest in manifests:
        code = main(["analyze", str(archive), "--incident", manifest["incident"]])
        out = capsys.readouterr().out
        missing = manifest["missing_ranks"][0]
        assert f"no dump from ranks {missing} (unknown, never blamed)" in out, out
    assert main(["analyze", str(folder)]) == 2
    assert "holds dumps of 2 runs" in capsys.readouterr().err
