"""The import's worker processes: set up for converting one dump after another."""

from __future__ import annotations

import gc
import multiprocessing
import os

from fr_otel.archive import importer


def _gc_state_after_init(parent: int) -> bool:
    importer._worker_init(parent)
    return gc.isenabled()


def test_workers_run_without_the_cyclic_gc() -> None:
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        assert pool.apply(_gc_state_after_init, (os.getpid(),)) is False
    assert gc.isenabled()  # the parent's is left alone
