"""The first pass's result kept in the archive by ``fr-otel import``
(``analysis.prepared``): used only while current, never changing a verdict, never written
by an analysis, and never in the way when it cannot be read or written."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from fr_otel.analysis import analyze, open_session
from fr_otel.analysis import prepared as prepared_module
from fr_otel.analysis.session import prepare_incident
from fr_otel.analysis.source import open_source
from fr_otel.archive import import_dumps
from fr_otel.archive.layout import partition_dir
from fr_otel.cli import main
from fr_otel.sim import FleetSpec, simulate, write_fleet

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
JOB, INCIDENT = "j", "i"


def _fleet(tmp_path: Path, fault: str, name: str | None = None) -> Path:
    out = tmp_path / (name or fault)
    write_fleet(simulate(FleetSpec(world=8, entries=120, fault=fault, seed=3)), out)
    return out


def _import(dumps: Path, archive: Path) -> Path:
    report = import_dumps([dumps], archive=archive, job=JOB, incident=INCIDENT)
    assert report.files_written
    return partition_dir(archive, JOB, INCIDENT)


def _kept(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if prepared_module.is_prepared_file(p.name))


def _traced_analysis(
    archive: Path, caplog: pytest.LogCaptureFixture, **incident: str
) -> tuple[dict[str, Any], list[str]]:
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="fr_otel.analysis.sql"):
        verdict = analyze(archive, **incident).to_dict()
    files = [r.getMessage().split(":")[0] for r in caplog.records if r.name.endswith(".sql")]
    return verdict, files


def test_import_keeps_the_first_pass_and_the_analysis_uses_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dumps = _fleet(tmp_path, "op_type_mismatch")
    from_dumps = analyze(dumps).to_dict()
    archive = tmp_path / "archive"
    assert main(["import", str(dumps), "--archive", str(archive), "--job", JOB,
                 "--incident", INCIDENT]) == 0  # fmt: skip
    folder = partition_dir(archive, JOB, INCIDENT)
    (kept,) = _kept(folder)
    verdict, files = _traced_analysis(archive, caplog)
    assert "01_entries.sql" not in files  # loaded, not made
    assert "dumped.sql" in files and "02_slots.sql" in files
    assert verdict["findings"] == from_dumps["findings"]
    assert verdict["root_cause"] == from_dumps["root_cause"]
    assert _kept(folder) == [kept]  # current: neither rewritten nor replaced


def test_an_analysis_without_one_runs_the_pass_and_writes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive = tmp_path / "archive"
    folder = _import(_fleet(tmp_path, "missing_rank"), archive)
    before = sorted(p.name for p in folder.iterdir())
    made, made_files = _traced_analysis(archive, caplog)
    assert "01_entries.sql" in made_files
    assert sorted(p.name for p in folder.iterdir()) == before
    prepare_incident(archive, job=JOB, incident=INCIDENT)
    assert len(_kept(folder)) == 1
    loaded, loaded_files = _traced_analysis(archive, caplog)
    assert "01_entries.sql" not in loaded_files
    assert loaded == made
    assert any(f["kind"] == "missing_rank" for f in loaded["findings"])


def test_the_loaded_table_is_the_made_one(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    _import(_fleet(tmp_path, "size_mismatch"), archive)
    tables, described = [], []
    for prepared_first in (False, True):  # made, then loaded
        if prepared_first:
            prepare_incident(archive, job=JOB, incident=INCIDENT)
        with open_session(archive) as session:
            session.analysis  # noqa: B018
            connection = session.connection
            tables.append(connection.execute("SELECT * FROM e ORDER BY rank, record_id").fetchall())
            described.append(connection.execute("DESCRIBE e").fetchall())
    # repr: NaN durations (entries never started) are never equal to themselves
    assert repr(tables[0]) == repr(tables[1]) and len(tables[0]) == 8 * 120
    assert described[0] == described[1]


def test_files_changed_since_make_it_stale(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive = tmp_path / "archive"
    folder = _import(_fleet(tmp_path, "missing_rank"), archive)
    prepare_incident(archive, job=JOB, incident=INCIDENT)
    (old,) = _kept(folder)
    # the same incident imported again from other dumps: every rank file replaced
    _import(_fleet(tmp_path, "op_type_mismatch"), archive)
    verdict, files = _traced_analysis(archive, caplog)
    assert "01_entries.sql" in files
    assert {f["kind"] for f in verdict["findings"]} == {
        f["kind"] for f in analyze(tmp_path / "op_type_mismatch").to_dict()["findings"]
    }
    prepare_incident(archive, job=JOB, incident=INCIDENT)
    (new,) = _kept(folder)  # the stale one replaced
    assert new != old and not old.exists()


def test_one_file_touched_makes_it_stale(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    archive = tmp_path / "archive"
    folder = _import(_fleet(tmp_path, "none"), archive)
    prepare_incident(archive, job=JOB, incident=INCIDENT)
    rank_file = folder / "rank-000003.parquet"
    stat = rank_file.stat()
    os.utime(rank_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    _, files = _traced_analysis(archive, caplog)
    assert "01_entries.sql" in files


def _prepared_archive(tmp_path: Path, fault: str) -> tuple[Path, Path, dict[str, Any]]:
    """An imported archive, its kept first pass and its verdict made without one."""
    archive = tmp_path / "archive"
    folder = _import(_fleet(tmp_path, fault), archive)
    reference = analyze(archive).to_dict()
    prepare_incident(archive, job=JOB, incident=INCIDENT)
    (kept,) = _kept(folder)
    return archive, kept, reference


def test_a_damaged_one_is_not_used_and_made_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive, kept, reference = _prepared_archive(tmp_path, "skipped_collective")
    kept.write_bytes(kept.read_bytes()[: kept.stat().st_size // 2])
    verdict, files = _traced_analysis(archive, caplog)
    assert "01_entries.sql" in files
    assert verdict == reference
    prepare_incident(archive, job=JOB, incident=INCIDENT)  # written again, whole
    _, files = _traced_analysis(archive, caplog)
    assert "01_entries.sql" not in files


def test_an_import_that_cannot_keep_it_warns_and_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a full disk after the rank files were written cannot be made here: the rename into
    # place fails instead, as it would there
    dumps = _fleet(tmp_path, "op_type_mismatch")
    archive = tmp_path / "archive"

    class NoRoom:
        """``os`` for the prepared entries only (the import's own renames must work)."""

        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def replace(src: object, dst: object) -> None:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(prepared_module, "os", NoRoom())
    assert main(["import", str(dumps), "--archive", str(archive), "--job", JOB,
                 "--incident", INCIDENT]) == 0  # fmt: skip
    assert "not prepared for analysis" in capsys.readouterr().err
    folder = partition_dir(archive, JOB, INCIDENT)
    assert _kept(folder) == []
    assert not [p for p in folder.iterdir() if p.name.startswith(".") and p.suffix == ".tmp"]
    monkeypatch.undo()
    assert analyze(archive).to_dict()["findings"] == analyze(dumps).to_dict()["findings"]


def test_an_archive_with_a_damaged_rank_file_never_uses_one(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    folder = _import(_fleet(tmp_path, "none"), archive)
    with open_source(archive) as source:
        assert source.entries_folder == folder
    (folder / "rank-000002.parquet").write_bytes(b"PAR1 not a parquet file")
    with open_source(archive) as source:
        assert source.entries_folder is None
    prepare_incident(archive, job=JOB, incident=INCIDENT)  # nothing to keep
    assert _kept(folder) == []
    with open_session(archive) as session:
        assert 2 in session.analysis.missing_dumps


def test_dumps_are_never_kept(tmp_path: Path) -> None:
    dumps = _fleet(tmp_path, "none")
    with open_source(dumps) as source:
        assert source.entries_folder is None


FIXTURES = sorted(
    p.name
    for p in DATA_DIR.iterdir()
    if (p / "scenario.json").is_file() or (p / "archive").is_dir()
)


@pytest.mark.parametrize("case", FIXTURES)
def test_fixture_verdicts_are_the_same_made_or_loaded(
    case: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive = tmp_path / "archive"
    if (DATA_DIR / case / "archive").is_dir():
        shutil.copytree(DATA_DIR / case / "archive", archive)
        incidents = [
            (p.parent.name.removeprefix("job="), p.name.removeprefix("incident="))
            for p in archive.glob("job=*/incident=*")
        ]
    else:
        report = import_dumps([DATA_DIR / case], archive=archive)
        incidents = [(report.job, i) for i in report.incidents]
    assert incidents
    for job, incident in incidents:
        made, made_files = _traced_analysis(archive, caplog, job=job, incident=incident)
        prepare_incident(archive, job=job, incident=incident)
        loaded, loaded_files = _traced_analysis(archive, caplog, job=job, incident=incident)
        assert "01_entries.sql" in made_files and "01_entries.sql" not in loaded_files
        assert loaded == made


def _e_kind(connection: Any) -> str:
    (kind,) = connection.execute(
        "SELECT CASE WHEN EXISTS (SELECT 1 FROM duckdb_views() WHERE temporary"
        " AND view_name = 'e') THEN 'view' ELSE 'table' END"
    ).fetchone()
    return str(kind)


def test_loaded_entries_are_read_in_place_and_copied_only_to_be_changed(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    _import(_fleet(tmp_path, "op_type_mismatch"), archive)
    prepare_incident(archive, job=JOB, incident=INCIDENT)
    with open_session(archive) as session:
        session.analysis  # noqa: B018
        assert _e_kind(session.connection) == "view"  # nothing copied
        before = session.connection.execute("SELECT count(*), count(*) FILTER (done) FROM e")
        counts = before.fetchone()
        prepared_module.writable(session.connection)
        assert _e_kind(session.connection) == "table"
        session.connection.execute("UPDATE e SET done = false")  # the kept file is untouched
        after = session.connection.execute("SELECT count(*), count(*) FILTER (done) FROM e")
        assert after.fetchone() == (counts[0], 0) and counts[1] > 0
    with open_session(archive) as session:
        session.analysis  # noqa: B018
        again = session.connection.execute("SELECT count(*), count(*) FILTER (done) FROM e")
        assert again.fetchone() == counts


def test_a_damaged_block_inside_it_is_caught_on_loading(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # the header and catalog read fine, a column's data does not: DuckDB's block checksum
    # fails when the block is first read, which loading does for every column
    archive, kept, reference = _prepared_archive(tmp_path, "size_mismatch")
    with duckdb.connect() as connection:
        connection.execute(f"ATTACH '{kept}' AS k (READ_ONLY)")
        blocks = connection.execute(
            "SELECT DISTINCT block_id FROM pragma_storage_info('k.e')"
            " WHERE column_name = 'h' AND block_id >= 0"
        ).fetchall()
        (block_size,) = connection.execute(
            "SELECT block_size FROM pragma_database_size() WHERE database_name = 'k'"
        ).fetchone()
    assert blocks
    data = bytearray(kept.read_bytes())
    start = 3 * 4096 + blocks[0][0] * block_size  # past the file's three header blocks
    data[start + 64 : start + 192] = bytes(128)
    kept.write_bytes(bytes(data))
    verdict, files = _traced_analysis(archive, caplog)
    assert "01_entries.sql" in files
    assert verdict == reference


def test_keeping_it_leaves_no_staging_file_and_removes_earlier_ones(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    folder = _import(_fleet(tmp_path, "none"), archive)
    earlier = folder / "_entries.0123456789abcdef0123456789abcdef.pq"  # as kept before: Parquet
    earlier.write_bytes(b"PAR1")
    before = {p.name for p in folder.iterdir()} - {earlier.name}
    prepare_incident(archive, job=JOB, incident=INCIDENT)
    (kept,) = _kept(folder)
    assert kept.suffix == ".duckdb"
    assert {p.name for p in folder.iterdir()} == before | {kept.name}  # no .wal, no .tmp
