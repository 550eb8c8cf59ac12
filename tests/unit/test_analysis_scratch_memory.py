"""An analysis of dumps writes its temporary archive to memory (``/dev/shm``) when the
scratch files fit there with room to spare, else to the system's temporary folder, and
falls back to that folder when writing to memory fails part-way. The memory folder is a
test folder here (``scratch.MEMORY_FOLDER`` patched): what decides is the room it and the
machine have, and that is what the tests vary."""

from __future__ import annotations

import errno
import logging
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest

from fr_otel.analysis import analyze
from fr_otel.analysis.source import open_source
from fr_otel.archive import scratch
from fr_otel.dumps.discover import discover

DATA = Path(__file__).resolve().parents[1] / "data"
CASE = DATA / "gloo_skipped_collective"


@pytest.fixture
def memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "shm"
    folder.mkdir()
    monkeypatch.setattr(scratch, "MEMORY_FOLDER", folder)
    return folder


def _rank_file_paths(path: Path) -> list[str]:
    with open_source(path) as source:
        rows = source.connection.execute("SELECT path FROM src_rank_files").fetchall()
    return [p for (p,) in rows]


def test_dumps_that_fit_are_imported_into_memory_and_removed_after(memory: Path) -> None:
    assert scratch.memory_folder([CASE]) == memory
    paths = _rank_file_paths(CASE)
    assert len(paths) == 4
    assert all(p.startswith(f"{memory}/") and p.endswith(scratch.SUFFIX) for p in paths)
    assert list(memory.iterdir()) == []  # the temporary archive went with the analysis


def test_the_verdict_is_the_same_in_memory_and_on_disk(
    memory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_memory = analyze(CASE).to_dict()
    monkeypatch.setattr(scratch, "_memory_available", lambda: 0)
    assert scratch.memory_folder([CASE]) is None
    on_disk = analyze(CASE).to_dict()
    assert in_memory == on_disk
    assert in_memory["findings"]


def test_memory_is_used_only_with_room_for_several_times_the_estimate(
    memory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dumps = sum(d.path.stat().st_size for d in discover([CASE]).files)
    need = dumps * scratch.SCRATCH_PER_DUMP_BYTE * scratch.MEMORY_SHARE
    monkeypatch.setattr(scratch, "_memory_available", lambda: need + 4096)
    assert scratch.memory_folder([CASE]) == memory
    monkeypatch.setattr(scratch, "_memory_available", lambda: need - 1)
    assert scratch.memory_folder([CASE]) is None
    monkeypatch.setattr(scratch, "_memory_available", lambda: None)  # no figure: not Linux
    assert scratch.memory_folder([CASE]) is None


def test_memory_is_not_used_past_the_scratch_files_limit_or_without_the_folder(
    memory: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert scratch.memory_folder([CASE], folder=tmp_path / "absent") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert scratch.memory_folder([empty]) is None
    monkeypatch.setattr(scratch, "MAX_FILES", 3)  # 4 dumps: Parquet, not mapped
    assert scratch.memory_folder([CASE]) is None
    assert all(not p.startswith(f"{memory}/") for p in _rank_file_paths(CASE))


def test_a_memory_folder_that_fills_up_falls_back_to_the_temporary_folder(
    memory: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A full tmpfs is faked (this machine has room): every write under the memory folder
    fails as a full one does, with ENOSPC."""
    write = scratch.write

    def full_memory(table: pa.Table, path: Path) -> None:
        if path.is_relative_to(memory):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        write(table, path)

    monkeypatch.setattr(scratch, "write", full_memory)
    with caplog.at_level(logging.WARNING, logger="fr_otel.analysis.source"):
        paths = _rank_file_paths(CASE)
    assert len(paths) == 4
    assert all(Path(p).is_relative_to(tempfile.gettempdir()) for p in paths)
    assert list(memory.iterdir()) == []  # the failed attempt left nothing behind
    (record,) = caplog.records
    assert "No space left on device" in record.getMessage()
    assert "into the temporary folder instead" in record.getMessage()
