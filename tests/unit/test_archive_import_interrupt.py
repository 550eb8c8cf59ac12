"""Imports stop cleanly: a SIGTERMed import leaves no process and no temporary file; one
killed outright (SIGKILL) takes its workers with it, and the next import sweeps what it
left; while an import writes an incident, analyze says so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fr_otel.cli import main
from tests.jobs import children

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


@pytest.fixture(scope="module")
def big_dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 ranks of 20,000 entries: an import that takes seconds."""
    folder = tmp_path_factory.mktemp("big") / "dumps"
    assert main(["simulate", str(folder), "--world", "16", "--entries", "20000"]) == 0
    return folder


def _alive(pid: int) -> bool:
    """Running (a zombie has ended: only its exit status is left)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _temporaries(archive: Path) -> list[Path]:
    """Temporary files, and the lock files of imports."""
    return [
        p
        for p in archive.rglob("*")
        if p.name.endswith(".tmp") or (p.suffix == ".lock" and p.parent.name == ".imports")
    ]


def _start_import(dumps: Path, archive: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """An import, once its workers have begun writing (their temporary files exist)."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fr_otel",
            "import",
            str(dumps),
            "--archive",
            str(archive),
            "--job",
            "big",
            "--workers",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the import ended before it could be interrupted: {process.stderr}")
        staged = list(archive.rglob(".*.tmp")) if archive.exists() else []
        workers = children(process.pid)
        if staged and len(workers) >= 2:
            return process, workers
        time.sleep(0.02)
    process.kill()
    pytest.fail("the import never began writing")


def test_sigterm_stops_workers_and_leaves_no_temporary_file(
    big_dumps: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "archive"
    process, workers = _start_import(big_dumps, archive)
    try:
        # meanwhile, analyze says the incident is being written, not that there is none
        assert main(["analyze", str(archive)]) == 2
        err = capsys.readouterr().err
        assert "is being written by an import" in err and f"pid {process.pid}" in err
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "fr-otel: stopped by SIGTERM" in err and "Traceback" not in err
    assert not [pid for pid in workers if _alive(pid)]
    assert _temporaries(archive) == []
    assert not list(archive.rglob("*.parquet"))
    # and the next import finds nothing to sweep, and writes normally
    assert main(["import", str(big_dumps / "nccl_trace_rank_0"), "--archive", str(archive),
                 "--job", "small", "--workers", "1"]) == 0  # fmt: skip
    assert "interrupted import had left" not in capsys.readouterr().err
    assert _temporaries(archive) == []


def test_sigkill_takes_the_workers_along_and_the_next_import_sweeps(
    big_dumps: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "archive"
    process, workers = _start_import(big_dumps, archive)
    process.kill()
    process.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while [pid for pid in workers if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if _alive(pid)], "workers outlived their killed parent"
    left = _temporaries(archive)
    assert any(p.name.endswith(".tmp") for p in left)
    assert any(p.suffix == ".lock" for p in left)

    code = main(["import", str(big_dumps / "nccl_trace_rank_0"), "--archive", str(archive),
                 "--job", "small", "--workers", "1"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0
    assert "interrupted import had left" in err
    assert _temporaries(archive) == []
    # the killed import's incident was never complete, so it is not there
    assert main(["incidents", str(archive)]) == 0
    assert "job=big" not in capsys.readouterr().out
    assert os.listdir(archive / "job=small")
