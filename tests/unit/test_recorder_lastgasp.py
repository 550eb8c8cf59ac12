"""The recorder's last look before SIGABRT (``_lastgasp``), in real processes that abort.

``abort()`` is called through ctypes from a thread that does not hold the GIL, as gloo's
or NCCL's own threads call it (``std::terminate``); the process must still die of SIGABRT,
within the limit, whatever the callback or the rest of the process does.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

_lastgasp = pytest.importorskip(
    "fr_otel.recorder._lastgasp", reason="the C extension was not compiled here"
)

_PROLOGUE = """
import ctypes, sys, threading, time
from fr_otel.recorder import _lastgasp

def abort_from_a_native_thread():
    # ctypes lets the GIL go around the call, as a backend thread never had it
    threading.Thread(target=ctypes.CDLL(None).abort).start()
"""


def _run(body: str, timeout: float = 30) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _PROLOGUE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, time.monotonic() - started


def test_the_callback_runs_then_the_process_dies_of_sigabrt(tmp_path: Path) -> None:
    marker = tmp_path / "flushed"
    done, _ = _run(
        f"""
        def flush():
            open({str(marker)!r}, "w").write(threading.current_thread().name)
        assert _lastgasp.install(flush, 5)
        abort_from_a_native_thread()
        time.sleep(20)
        print("still alive")
        """
    )
    assert done.returncode == -signal.SIGABRT, done.stderr
    assert marker.exists()
    assert "still alive" not in done.stdout


def test_a_callback_that_never_returns_is_cut_off_by_the_limit() -> None:
    done, took = _run(
        """
        assert _lastgasp.install(lambda: time.sleep(60), 1)
        abort_from_a_native_thread()
        time.sleep(60)
        """
    )
    assert done.returncode == -signal.SIGABRT, done.stderr
    assert took < 15, took


def test_a_gil_that_never_comes_back_is_cut_off_by_the_limit(tmp_path: Path) -> None:
    """The main thread keeps the GIL (a regular expression that backtracks for minutes
    never reaches a bytecode boundary): the callback cannot start, the alarm ends it.

    SIGABRT comes a second after the match has started, to a thread in native code without
    the GIL (the main thread blocks it): an abort() right away raced the main thread for the
    GIL it had just released, and on a loaded machine the callback sometimes won."""
    marker = tmp_path / "flushed"
    done, took = _run(
        f"""
        import os, re, signal
        assert _lastgasp.install(lambda: open({str(marker)!r}, "w"), 1)
        backtracks, text = re.compile(r"(a+)+$"), "a" * 64 + "b"
        later = b"sleep 1; kill -ABRT %d" % os.getpid()
        threading.Thread(target=ctypes.CDLL(None).system, args=(later,)).start()
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGABRT}})
        backtracks.match(text)
        """
    )
    assert done.returncode == -signal.SIGABRT, done.stderr
    assert took < 15, took
    assert not marker.exists()


def test_someone_elses_handler_is_left_alone(tmp_path: Path) -> None:
    marker = tmp_path / "flushed"
    done, _ = _run(
        f"""
        import faulthandler
        faulthandler.enable()
        assert not _lastgasp.install(lambda: open({str(marker)!r}, "w"), 5)
        abort_from_a_native_thread()
        time.sleep(20)
        """
    )
    assert done.returncode == -signal.SIGABRT
    assert "Fatal Python error: Aborted" in done.stderr  # faulthandler's, not ours
    assert not marker.exists()


def test_uninstall_gives_sigabrt_its_default_action(tmp_path: Path) -> None:
    marker = tmp_path / "flushed"
    done, _ = _run(
        f"""
        assert _lastgasp.install(lambda: open({str(marker)!r}, "w"), 5)
        _lastgasp.uninstall()
        abort_from_a_native_thread()
        time.sleep(20)
        """
    )
    assert done.returncode == -signal.SIGABRT
    assert not marker.exists()
