"""The import's index of its rank files (``archive.file_index``): a file unchanged since
is not opened again to be checked, and one changed, cut short or damaged in place is
still named exactly as without the index."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from fr_otel.archive import checks, file_index
from fr_otel.archive.checks import check_files, check_rank_file, rank_files, verifying_pages
from fr_otel.cli import main

FOLDER = ("job=j", "incident=i")


@pytest.fixture
def archive(pristine: Path, tmp_path: Path) -> Path:
    """A copy of ``pristine`` (tests/conftest.py: 16 ranks, rank 3 skipped a collective)
    that keeps every file's modification time, as ``cp -p`` and rsync do."""
    copy = tmp_path / "archive"
    shutil.copytree(pristine, copy)
    return copy


def _folder(archive: Path) -> Path:
    return archive.joinpath(*FOLDER)


def _never_opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record every footer ``check_files`` reads."""
    opened: list[Path] = []
    real = checks.check_rank_file

    def counting(path: Path, *, pages: bool = False) -> checks.RankFile:
        opened.append(path)
        return real(path, pages=pages)

    monkeypatch.setattr(checks, "check_rank_file", counting)
    return opened


def test_the_import_records_each_file_as_its_footer_describes_it(archive: Path) -> None:
    files = rank_files(archive)
    assert len(files) == 16
    index = file_index.read_index(_folder(archive))
    assert sorted(index) == sorted(path.name for path in files)
    indexed = checks._indexed(files)
    assert indexed == {path: check_rank_file(path) for path in files}


def test_an_unchanged_file_is_not_opened_again(
    archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = _never_opened(monkeypatch)
    checked = check_files(rank_files(archive))
    assert len(checked.good) == 16 and not checked.problems
    assert opened == []
    with verifying_pages():  # a read failed: every file is read through, index or not
        checked = check_files(rank_files(archive))
    assert len(opened) == 16 and len(checked.good) == 16


def test_a_file_changed_since_the_import_is_checked_from_its_footer(
    archive: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = _folder(archive) / "rank-000005.parquet"
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    opened = _never_opened(monkeypatch)
    code = main(["analyze", str(archive), "--format", "json"])
    err = capsys.readouterr().err
    assert code == 1
    assert opened == [cut]
    assert "rank-000005.parquet: truncated:" in err


def test_a_file_damaged_in_place_with_its_size_and_time_kept_is_still_found(
    archive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _folder(archive) / "rank-000011.parquet"
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[4:3000] = b"A" * 2996  # its first pages; the footer at its end still reads
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file_index.matches(
        file_index.read_index(path.parent)[path.name], file_index.stat_key(path)
    )
    code = main(["analyze", str(archive), "--format", "json"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    assert captured.err.count("rank-000011.parquet: corrupt: unreadable data") == 1
    assert 11 in json.loads(captured.out)["missing_dumps"]


@pytest.mark.parametrize(
    "index_text",
    [
        "{not json",
        json.dumps({"index_version": 99, "column_sets": [], "files": {}}),
    ],
)
def test_an_unreadable_or_newer_index_is_ignored(
    archive: Path, monkeypatch: pytest.MonkeyPatch, index_text: str
) -> None:
    file_index.index_path(_folder(archive)).write_text(index_text)
    opened = _never_opened(monkeypatch)
    checked = check_files(rank_files(archive))
    assert len(checked.good) == 16 and len(opened) == 16


def test_an_entry_of_an_archive_schema_this_fr_otel_cannot_read_is_not_trusted(
    archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = file_index.index_path(_folder(archive))
    data = json.loads(path.read_text())
    data["files"]["rank-000009.parquet"]["version"] = "99"
    path.write_text(json.dumps(data))
    opened = _never_opened(monkeypatch)
    checked = check_files(rank_files(archive))
    assert len(checked.good) == 16
    assert [p.name for p in opened] == ["rank-000009.parquet"]


def test_an_index_keeps_earlier_entries_and_forgets_files_gone(archive: Path) -> None:
    folder = _folder(archive)
    (folder / "rank-000015.parquet").unlink()
    moved = folder / "rank-000014.parquet"
    entry = checks.index_facts(check_rank_file(moved))
    assert entry is not None
    file_index.write_index(folder, [entry])
    index = file_index.read_index(folder)
    assert "rank-000015.parquet" not in index
    assert len(index) == 15 and index[moved.name] == {
        **entry[1],
        "columns": frozenset(entry[1]["columns"]),
    }
