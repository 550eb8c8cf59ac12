"""How the ``fr-otel`` process ends, once its command has returned an exit code.

A command whose work is all done and written when it returns (``analyze``) says so
(``may_end_quickly``). The process then ends without the interpreter's own teardown,
which frees every module's objects one by one: after ``fr-otel analyze`` that teardown
is a noticeable part of the run, spent after the verdict is out. Exit handlers still run
and output is still flushed; only the freeing is skipped, which the operating system does
at once. What such a command still holds when it returns (a DuckDB connection, whose
close frees its tables one by one too, temporary folders) it may leave to the end too
(``leave_to_exit``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn

from fr_otel.cli._errors import state


def may_end_quickly() -> None:
    """The running command leaves nothing to finish but its exit code."""
    state.end_quickly = True


_left: list[contextlib.ExitStack] = []


def leave_to_exit(stack: contextlib.ExitStack) -> None:
    """Where the process ends quickly once the command returns, take what ``stack`` holds
    off it: nothing is then closed or freed one by one, and temporary folders are removed
    by their finalizers, which run with the exit handlers (``end``). Elsewhere (``main``
    called in-process) ``stack`` closes as usual."""
    if state.end_quickly and state.process_ends:
        _left.append(stack.pop_all())


def end(code: int) -> NoReturn:
    """End the process with ``code``: quickly when the command allowed it and no other
    thread is still running (one would be cut short), else as usual."""
    if not state.end_quickly or threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()  # logging's flush, temporary folders, child processes
    for stream in (sys.stdout, sys.stderr):
        # a closed pipe: what it did not take is lost either way
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
