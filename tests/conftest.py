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
