"""Analysing dumps imports them and then reads what the import wrote: the import's own
account of each file (``ImportReport.rank_files``) stands for its footer, which is then
not read again, except when every page is being verified."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from fr_otel.analysis import analyze
from fr_otel.analysis.source import open_source
from fr_otel.archive import checks, import_dumps
from fr_otel.archive.checks import check_files, verifying_pages
from fr_otel.sim import FleetSpec, simulate, write_fleet


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("written") / "dumps"
    fleet = simulate(FleetSpec(world=8, entries=60, tp=2, fault="skipped_collective", seed=3))
    write_fleet(fleet, folder)
    return folder


def _counting_footer_reads(monkeypatch: Any) -> list[Path]:
    read: list[Path] = []
    check = checks.check_rank_file

    def counted(path: Path, **kwargs: Any) -> Any:
        read.append(path)
        return check(path, **kwargs)

    monkeypatch.setattr(checks, "check_rank_file", counted)
    return read


def test_the_import_describes_each_file_as_its_footer_does(dumps: Path, tmp_path: Path) -> None:
    report = import_dumps([dumps], archive=tmp_path / "archive", workers=2)
    assert report.ok and len(report.files_written) == 8
    assert [f.path for f in report.rank_files] == report.files_written
    from_footers = {f.path: f for f in check_files(report.files_written).good}
    for described in report.rank_files:
        footer = from_footers[described.path]
        # the footer's statistics span every entry's creation time, as the import's does
        assert dataclasses.asdict(described) == dataclasses.asdict(footer), described.path


def test_analysing_dumps_reads_no_footer_and_finds_what_the_archive_gives(
    dumps: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    import_dumps([dumps], archive=tmp_path / "archive", workers=2)
    from_archive = analyze(tmp_path / "archive").to_dict()
    read = _counting_footer_reads(monkeypatch)
    with open_source(dumps) as source:
        files = source.connection.execute("SELECT count(*) FROM src_rank_files").fetchone()
        assert files == (8,)
        assert read == []
    from_dumps = analyze(dumps).to_dict()
    assert read == []
    assert from_dumps["findings"], "the fleet's skipped collective is found"
    assert from_dumps["findings"] == from_archive["findings"]


def test_verifying_pages_reads_every_footer_again(dumps: Path, monkeypatch: Any) -> None:
    read = _counting_footer_reads(monkeypatch)
    with verifying_pages(), open_source(dumps):
        pass
    assert len(read) == 8
