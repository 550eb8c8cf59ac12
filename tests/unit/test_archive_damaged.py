"""Damaged archive files (cut short, zero bytes, another schema version) are named in one
line each, their ranks count as without a dump, and the rest is analysed, queried and
exported. Nothing ends in a traceback, and exit 1 keeps meaning "findings"."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.cli import main

FOLDER = ("job=j", "incident=i")

# ``pristine`` (tests/conftest.py): a 16-rank job where rank 3 skipped a collective


def _copy(pristine: Path, tmp_path: Path) -> Path:
    archive = tmp_path / "archive"
    for path in pristine.rglob("*"):
        if path.is_file():
            target = archive / path.relative_to(pristine)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    return archive


def _rank_file(archive: Path, rank: int) -> Path:
    return archive.joinpath(*FOLDER) / f"rank-{rank:06d}.parquet"


def _damage(archive: Path) -> None:
    truncated = _rank_file(archive, 5)
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    _rank_file(archive, 6).write_bytes(b"")


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err and "duckdb" not in err.lower(), err


def test_analyze_names_each_damaged_file_and_treats_its_rank_as_unknown(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _copy(pristine, tmp_path)
    _damage(archive)
    code, out, err = _run(["analyze", str(archive), "--format", "json"], capsys)
    _no_traceback(err)
    assert code == 1  # findings: the fault of rank 3 is still found
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert "rank-000005.parquet: truncated:" in lines[0]
    assert "rank-000006.parquet: empty:" in lines[1]
    verdict = json.loads(out)
    assert verdict["missing_dumps"] == [5, 6]
    assert 5 not in verdict["ranks"] and 6 not in verdict["ranks"]
    root = verdict["findings"][verdict["root_cause"]]
    assert root["kind"] == "skipped_collective" and root["culprit_ranks"] == [3]
    for finding in verdict["findings"]:
        assert not {5, 6} & set(finding["culprit_ranks"]), finding  # unknown: never blamed
    assert {p["problem"] for p in verdict["input_problems"]} == {"truncated", "empty"}


def test_sql_and_export_leave_damaged_files_out_and_say_so(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _copy(pristine, tmp_path)
    _damage(archive)
    code, out, err = _run(
        ["sql", str(archive), "SELECT DISTINCT rank FROM entries ORDER BY 1", "--format", "csv"],
        capsys,
    )
    _no_traceback(err)
    assert code == 0
    assert out.split() == ["rank", *[str(r) for r in range(16) if r not in (5, 6)]]
    assert "rank-000005.parquet: truncated:" in err and "rank-000006.parquet: empty:" in err

    spans = tmp_path / "spans.jsonl"
    code, out, err = _run(["export", str(archive), "--otlp-json", str(spans)], capsys)
    _no_traceback(err)
    assert code == 0
    assert "rank-000005.parquet: truncated:" in err and "(exported without it)" in err
    ranks = {
        attribute["value"]["intValue"]
        for line in spans.read_text().splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for attribute in resource["resource"]["attributes"]
        if attribute["key"] == "fr_otel.rank"
    }
    assert {int(r) for r in ranks} == set(range(16)) - {5, 6}


def test_a_file_of_another_schema_version_is_foreign(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _copy(pristine, tmp_path)
    path = _rank_file(archive, 9)
    table = pq.read_table(path)
    future = table.replace_schema_metadata({"fr_otel.schema_version": "99"})
    pq.write_table(future, path)
    code, out, err = _run(["analyze", str(archive)], capsys)
    _no_traceback(err)
    assert code == 1
    assert "rank-000009.parquet: foreign: written for archive schema version 99" in err
    assert "no dump from ranks 9 (unknown, never blamed)" in out


def test_an_archive_with_no_readable_file_is_unusable_input(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _copy(pristine, tmp_path)
    for path in archive.rglob("*.parquet"):
        path.write_bytes(b"")
    for command in (
        ["analyze", str(archive)],
        ["export", str(archive), "--otlp-json", str(tmp_path / "x.jsonl")],
        ["sql", str(archive), "SELECT count(*) FROM entries"],
    ):
        code, _, err = _run(command, capsys)
        _no_traceback(err)
        assert code == 2, (command, err)
        assert "none of its 16 Parquet rank files can be read" in err, err


def test_an_internal_error_is_exit_3_in_one_line_and_the_traceback_only_with_v(
    pristine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fr_otel.analysis import engine

    def broken(*_: object, **__: object) -> None:
        raise ZeroDivisionError("an injected bug")

    monkeypatch.setattr(engine, "analyze_connection", broken)
    code, _, err = _run(["analyze", str(pristine)], capsys)
    assert code == 3
    assert err.strip().splitlines() == [
        "fr-otel: internal error: ZeroDivisionError: an injected bug"
        " (a bug in fr-otel; run with -v for the traceback)"
    ]
    code, _, err = _run(["-v", "analyze", str(pristine)], capsys)
    assert code == 3
    assert "Traceback (most recent call last)" in err and "an injected bug" in err


def test_a_file_damaged_inside_is_found_when_duckdb_cannot_decode_it(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _copy(pristine, tmp_path)
    path = _rank_file(archive, 11)
    data = bytearray(path.read_bytes())
    data[4:3000] = b"A" * 2996  # its first pages; the footer at its end still reads
    path.write_bytes(bytes(data))
    code, out, err = _run(["analyze", str(archive)], capsys)
    _no_traceback(err)
    assert code == 1, err
    assert err.count("rank-000011.parquet: corrupt: unreadable data") == 1, err
    assert "no dump from ranks 11 (unknown, never blamed)" in out
    code, out, err = _run(["sql", str(archive), "SELECT DISTINCT rank FROM entries"], capsys)
    _no_traceback(err)
    assert code == 0 and "rank-000011.parquet: corrupt:" in err
