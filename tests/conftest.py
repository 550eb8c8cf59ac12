"""Fixtures shared by every test folder; helpers tests import live in modules beside this
one (``tests/fr_dumps.py``, ``tests/rows.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fr_dumps import two_rank_dumps, write_pickle


@pytest.fixture
def healthy_dir(tmp_path: Path) -> Path:
    """nccl_trace_rank_{0,1} pickles of a healthy two-rank job."""
    folder = tmp_path / "dumps"
    for rank, dump in two_rank_dumps().items():
        write_pickle(folder / f"nccl_trace_rank_{rank}", dump)
    return folder


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive (``job=j/incident=i``) of a 16-rank simulated job where rank 3 skipped a
    collective, imported once per module: tests copy it before changing it."""
    from fr_otel.cli import main

    root = tmp_path_factory.mktemp("pristine")
    assert main(["simulate", str(root / "dumps"), "--world", "16", "--entries", "60",
                 "--fault", "skipped_collective", "--fault-rank", "3"]) == 0  # fmt: skip
    assert main(["import", str(root / "dumps"), "--archive", str(root / "archive"),
                 "--job", "j", "--incident", "i", "--workers", "1"]) == 0  # fmt: skip
    return root / "archive"
