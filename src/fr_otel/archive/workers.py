"""The import's worker pool: each worker converts dumps (``stage_dump``) a batch at a time,
set up to convert one dump after another, and the parent keeps each outcome as it comes."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed

import pyarrow as pa

from fr_otel.archive import scratch
from fr_otel.archive.stage_dump import Outcome, Task, load_and_stage, load_and_stage_batch

ProgressCallback = Callable[[int, int], None]
"""Called with (files done, files total) as the import goes."""

_INLINE_MAX_FILES = 4
"""Below this many files a worker pool costs more than it saves."""

_BATCH_MAX = 16
"""Dumps a worker is handed at a time, at most (each task's outcome waits for its batch)."""


def _pool_context() -> multiprocessing.context.BaseContext:
    """fork where it is safe, forkserver where the caller runs other threads.

    fork starts workers in milliseconds and, unlike spawn/forkserver, does not re-import
    the caller's main script (which would break callers without a ``__main__`` guard).
    With other Python threads alive, a forked child could inherit a lock held by one of
    them, so then the clean forkserver is used instead.
    """
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")


_PR_SET_PDEATHSIG = 1
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_KEEP_HEAP = 32 << 20
"""Bytes: glibc's largest mmap threshold on 64-bit; a dump's buffers are smaller."""


def _worker_init(parent: int | None) -> None:
    """A worker leaves signals to its parent, and dies with it even when the parent is
    killed outright (Linux), instead of waiting forever for work. ``parent``: the
    parent's pid when forked from it (with forkserver, the server dies with the parent)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        # glibc: keep the heap between dumps. By default, freeing one dump's buffers
        # gives the top of the heap back to the system and the next dump faults every
        # page in again, system time spent anew on every dump
        libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_HEAP)
        libc.mallopt(_M_MMAP_THRESHOLD, _KEEP_HEAP)
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the parent died before the line above took effect
    # A worker holds one dump's tree of small containers at a time, freed by reference
    # counting when its task ends: the cyclic GC would only rescan that tree (and the
    # parent's heap a forked worker shares) and find nothing to collect. Off for the
    # worker's life, so no CPU goes to those rescans.
    gc.disable()


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop every worker now: running tasks too, not only queued ones."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    deadline = time.monotonic() + 5.0
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(1.0)


def new_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes set up as the import's are (``_worker_init``), for
    other work done an incident or a dump at a time; stop it early with ``stop_pool``."""
    context = _pool_context()
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_worker_init,
        initargs=(os.getpid() if context.get_start_method() == "fork" else None,),
    )


def _received(outcome: Outcome, known: dict[tuple[int, ...], list[int]]) -> Outcome:
    """An outcome as the parent keeps it.

    Each group's member list points at one list per distinct membership: every member of
    a group reports the same list, and a rank knows the members of its groups and of the
    whole default group: a copy for every rank grows with the square of the world size
    (gigabytes at 8,192 ranks).

    A scratch file is mapped into memory now, while the workers convert the other dumps,
    for the analysis that reads it next (``ImportReport.scratch_tables``): the opening
    then overlaps the wait on the workers instead of adding to ``fr-otel analyze DUMPS``'s
    time. Where that fails, the analysis opens the file itself and says why.
    """
    for group in outcome.groups.values():
        if group.ranks:
            group.ranks = known.setdefault(tuple(group.ranks), group.ranks)
    if outcome.staged is not None and scratch.is_scratch(outcome.task.final):
        with contextlib.suppress(OSError, pa.ArrowException):
            outcome.mapped = (outcome.staged, scratch.mapped(outcome.staged))
    return outcome


def run_tasks(
    tasks: list[Task],
    workers: int,
    on_progress: ProgressCallback | None,
    meanwhile: Callable[[], object] | None,
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    members: dict[tuple[int, ...], list[int]] = {}
    total = len(tasks)
    if workers <= 1 or total < _INLINE_MAX_FILES:
        if meanwhile is not None:
            meanwhile()
        for task in tasks:
            outcomes.append(_received(load_and_stage(task), members))
            if on_progress:
                on_progress(len(outcomes), total)
        return outcomes
    pool = new_pool(min(workers, total))
    # tasks go to the workers a few at a time: one round trip through the pool per dump
    # (pickle the task, wake the pool's thread, queue, pickle the outcome back) left each
    # worker idle between dumps for a large share of the import
    size = max(1, min(_BATCH_MAX, total // (workers * 8)))
    try:
        futures = [
            pool.submit(load_and_stage_batch, tasks[i : i + size]) for i in range(0, total, size)
        ]
        if meanwhile is not None:
            # every worker has started (with fork, the first submission starts them all):
            # whatever this loads or starts is not forked into them
            meanwhile()
        done = as_completed(futures)
        # as_completed lets go of each future it yields: with no list of them here, each
        # result's own member lists are freed once shared
        del futures
        for future in done:
            for outcome in future.result():
                outcomes.append(_received(outcome, members))
            if on_progress:
                on_progress(len(outcomes), total)
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)
    return outcomes
