"""Dump files whose names are not UTF-8 (a Latin-1 ``débug_rank_0``): imported and
analysed like any other, their names shown and stored with the odd bytes escaped. Before,
both commands ended in a ``UnicodeEncodeError`` traceback. Real gloo dumps, renamed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.cli import main

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "gloo_healthy"


def _latin1_copies(folder: Path) -> Path:
    target = folder / "dumps"
    target.mkdir()
    for source in sorted(FIXTURE.glob("comm_lib_trace_rank_[0-9]")):
        rank = source.name.rsplit("_", 1)[1]
        name = os.fsdecode(b"d\xe9bug_rank_" + rank.encode())
        shutil.copyfile(source, target / name)
    return target


def test_latin1_names_import_and_analyze(tmp_path: Path) -> None:
    dumps = _latin1_copies(tmp_path)
    archive = tmp_path / "archive"
    assert main(["import", str(dumps), "--archive", str(archive), "--job", "j"]) == 0
    files = sorted(archive.rglob("rank-*.parquet"))
    sources = {s for f in files for s in pq.read_table(f)["source_file"].to_pylist()}
    assert sources == {f"{dumps}/d\\xe9bug_rank_{r}" for r in range(4)}
    assert main(["analyze", str(dumps)]) == 0  # healthy, and no traceback


def test_a_bad_file_with_a_latin1_name_is_named_with_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dumps = _latin1_copies(tmp_path)
    (dumps / os.fsdecode(b"d\xe9bug_rank_3")).write_bytes(b"not a dump")
    code = main(["import", str(dumps), "--archive", str(tmp_path / "archive")])
    assert code == 2
    err = capsys.readouterr().err
    assert (
        f"{dumps}/d\\xe9bug_rank_3: corrupt" in err or f"{dumps}/d\\xe9bug_rank_3: foreign" in err
    ), err
