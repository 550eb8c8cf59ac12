"""``fr-otel import`` on the committed real gloo dumps, and the demo (a live gloo job under
the recorder)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.demo.scenarios import BACK_GROUP, FRONT_GROUP
from fr_otel.dumps.safe_pickle import loads_plain

pytestmark = pytest.mark.gloo

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURES = sorted(p for p in DATA.glob("gloo_*") if (p / "scenario.json").is_file())


def test_every_scenario_has_a_fixture() -> None:
    assert len(FIXTURES) >= 9


@pytest.mark.parametrize("folder", FIXTURES, ids=lambda p: p.name)
def test_real_gloo_dumps_import_with_right_rows_and_groups(folder: Path, tmp_path: Path) -> None:
    meta = json.loads((folder / "scenario.json").read_text())
    world = meta["world"]
    report = import_dumps([folder], archive=tmp_path, job="gloo", incident="fixture")
    assert report.ok, report.problems
    # every rank's pickle imported once; its JSON twin recognised as the same buffer
    assert report.ranks == list(range(world))
    assert len(report.twins_skipped) == world
    assert report.missing_ranks == []

    expected_rows = {
        int(rank): len(loads_plain((folder / files["pickle"]).read_bytes())["entries"])
        for rank, files in meta["files"].items()
    }
    glob = str(tmp_path / "**" / "*.parquet")
    got_rows = dict(
        duckdb.execute(
            "SELECT rank, count(*) FROM read_parquet(?) GROUP BY rank", [glob]
        ).fetchall()
    )
    assert got_rows == expected_rows

    # membership as the job created its groups (gloo's own pg_config says '' -> [])
    expected_groups = {
        "default_pg": list(range(world)),
        FRONT_GROUP: list(range(0, world - 1)),
        BACK_GROUP: list(range(1, world)),
    }
    groups = duckdb.execute(
        "SELECT DISTINCT pg_desc, pg_ranks, pg_ranks_inferred FROM read_parquet(?)", [glob]
    ).fetchall()
    assert {desc: ranks for desc, ranks, _ in groups} == expected_groups
    assert all(inferred for _, _, inferred in groups)
    frames = duckdb.execute(
        "SELECT count(*) FILTER (frames IS NULL), count(*) FROM read_parquet(?)", [glob]
    ).fetchall()
    assert frames[0][0] == 0 and frames[0][1] > 0


def test_demo_runs_a_real_job_under_the_recorder_and_names_the_culprit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["demo", "--out", str(tmp_path / "demo")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ranks [0, 1, 2, 3] (missing: none)" in out
    assert "The injected fault was on rank 1; fr-otel analyze named it." in out
    # the SQL table: rank 1 issued something else than its peers at the same sequence number
    last = {
        line.split("│")[2].strip(): line.split("│")[4].strip()
        for line in out.splitlines()
        if line.startswith("│") and "default_pg" in line
    }
    assert sorted(last) == ["0", "1", "2", "3"]
    # torch's name for the op (all_gather_into_tensor runs as gloo's all_gather)
    assert "all_gather#" in last["1"], last
    assert all("all_reduce" in last[r] for r in ("0", "2", "3"))
    assert (tmp_path / "demo" / "spans.jsonl").stat().st_size > 0


@pytest.mark.parametrize("dropped", [1, 3])
def test_a_missing_gloo_rank_is_reported_even_the_last(dropped: int, tmp_path: Path) -> None:
    source = DATA / "gloo_healthy"
    copy = tmp_path / "dumps"
    copy.mkdir()
    for path in source.iterdir():
        if path.is_file() and not path.name.startswith(f"comm_lib_trace_rank_{dropped}"):
            (copy / path.name).write_bytes(path.read_bytes())
    report = import_dumps([copy], archive=tmp_path / "arc")
    assert report.ok
    assert report.missing_ranks == [dropped]
    assert f"missing ranks: {dropped}" in report.summary()
