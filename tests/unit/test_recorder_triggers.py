"""The watch thread (``fr_otel.recorder.triggers.Watch``): FIFO, timeouts, dump file, signal.

All real: a real FIFO under ``tmp_path``, real files whose mtime changes, a real thread.
Only ``POLL_S`` is shortened (monkeypatched) so that polling tests stay fast. Signal
handlers and ``signal.set_wakeup_fd`` are process-global and need the main thread, so
the signal tests run the watch in a child process and send it a real ``SIGUSR2``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fr_otel.recorder import triggers
from fr_otel.recorder.stack_request import (
    STACK_REQUEST,
    read_stack,
    request_stack,
    stack_path,
    write_stack,
)
from fr_otel.recorder.triggers import Watch, trigger_path


class _Incidents:
    def __init__(self) -> None:
        self.reasons: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, reason: str) -> None:
        with self._lock:
            self.reasons.append(reason)

    def wait_for(self, count: int, deadline_s: float = 3.0) -> list[str]:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.reasons) >= count:
                    return list(self.reasons)
            time.sleep(0.005)
        with self._lock:
            return list(self.reasons)


LONG_POLL_S = 10.0
"""A poll long enough that what must wake the watch at once cannot pass for the poll."""


@pytest.fixture
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triggers, "POLL_S", 0.02)


def _stop(watch: Watch) -> None:
    """Stop ``watch`` and wait for its thread to end."""
    watch.stop()
    watch.join(timeout=5)
    assert not watch.is_alive()


def _running(watch: Watch) -> bool:
    return watch in threading.enumerate()


@pytest.fixture
def start_watch() -> Iterator[Callable[..., Watch]]:
    started: list[Watch] = []

    def start(**kwargs: object) -> Watch:
        options: dict[str, object] = {
            "running": list,
            "dump_file": None,
            "fifo": None,
            "signal_name": None,
        }
        options.update(kwargs)
        watch = Watch(**options)  # type: ignore[arg-type]
        watch.start()
        started.append(watch)
        return watch

    yield start
    for watch in started:
        _stop(watch)


def _wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.005)


def _poke(fifo: Path, data: bytes = b"\n") -> None:
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # as `echo > rank-000000.trigger`
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def test_fifo_write_declares_an_operator_incident_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start_watch: Callable[..., Watch]
) -> None:
    # a long poll: the write itself must wake the thread, not the next poll
    monkeypatch.setattr(triggers, "POLL_S", LONG_POLL_S)
    fifo = tmp_path / "rank-000000.trigger"
    fifo.write_text("stale")  # a leftover regular file is replaced by the FIFO
    incidents = _Incidents()
    watch = start_watch(fifo=fifo, on_incident=incidents)
    assert fifo.is_fifo()
    time.sleep(0.05)
    assert incidents.reasons == []

    sent = time.monotonic()
    _poke(fifo)
    assert incidents.wait_for(1, deadline_s=LONG_POLL_S * 2) == ["operator"]
    assert time.monotonic() - sent < LONG_POLL_S / 2  # woken, not at the next poll

    _poke(fifo, b"again\n")
    assert incidents.wait_for(2, deadline_s=LONG_POLL_S * 2) == ["operator", "operator"]

    stopping = time.monotonic()
    watch.stop()
    watch.join(timeout=LONG_POLL_S * 2)
    assert not watch.is_alive()
    assert time.monotonic() - stopping < LONG_POLL_S / 2  # stopping wakes it, too
    assert not fifo.exists()  # the watch removes its FIFO when it stops


def test_overdue_running_records_declare_one_timeout_each(
    fast_poll: None, start_watch: Callable[..., Watch]
) -> None:
    now = time.time_ns()
    second = 1_000_000_000
    inflight: dict[int, tuple[int, int]] = {
        1: (now - 10 * second, second),  # overdue
        2: (now, 60 * second),  # not yet
        3: (now - 10 * second, 0),  # no timeout known: never
    }

    def running() -> list[tuple[int, int, int]]:
        return [(record, started, timeout) for record, (started, timeout) in inflight.items()]

    incidents = _Incidents()
    watch = start_watch(running=running, on_incident=incidents)
    assert incidents.wait_for(1) == ["timeout"]
    time.sleep(0.15)  # several more polls
    assert incidents.reasons == ["timeout"] and watch.timeouts_seen == {1}

    inflight[4] = (time.time_ns(), 50_000_000)  # overdue in 50 ms
    assert incidents.wait_for(2) == ["timeout", "timeout"]
    time.sleep(0.1)
    assert incidents.reasons == ["timeout", "timeout"] and watch.timeouts_seen == {1, 4}


class _Polls:
    """``running`` for a watch that counts its polls, and whether each found the rank
    steady (what ``steady`` answers)."""

    def __init__(self, *, steady: bool, steady_from_second: bool = False) -> None:
        self.steady = steady
        self._steady_from_second = steady_from_second
        self.at: list[float] = []
        self.inflight: list[tuple[int, int, int]] = []

    def running(self) -> list[tuple[int, int, int]]:
        self.at.append(time.monotonic())
        if self._steady_from_second:
            self.steady = True
        return list(self.inflight)

    def is_steady(self) -> bool:
        return self.steady


def test_a_steady_rank_is_polled_at_the_steady_pace_a_quiet_one_at_the_fast_one(
    monkeypatch: pytest.MonkeyPatch, start_watch: Callable[..., Watch]
) -> None:
    monkeypatch.setattr(triggers, "POLL_S", 0.02)
    monkeypatch.setattr(triggers, "STEADY_POLL_S", 0.5)
    polls = _Polls(steady=True)
    start_watch(running=polls.running, steady=polls.is_steady, on_incident=_Incidents())
    time.sleep(1.2)
    steady = len(polls.at)
    assert 1 <= steady <= 4  # every 0.5 s, not every 0.02 s
    polls.steady = False  # its collectives stopped: a hang's checks are due
    _wait_until(lambda: len(polls.at) >= steady + 20, timeout_s=3.0)


def test_an_op_nearing_its_timeout_wakes_a_steady_watch_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch, start_watch: Callable[..., Watch]
) -> None:
    monkeypatch.setattr(triggers, "POLL_S", 0.02)
    monkeypatch.setattr(triggers, "STEADY_POLL_S", LONG_POLL_S)
    # the first poll finds the op; from then on the rank is steady: the next poll would
    # come after LONG_POLL_S
    polls = _Polls(steady=False, steady_from_second=True)
    polls.inflight = [(1, time.time_ns(), 300_000_000)]  # past its timeout in 0.3 s
    incidents = _Incidents()
    start_watch(running=polls.running, steady=polls.is_steady, on_incident=incidents)
    began = time.monotonic()
    assert incidents.wait_for(1, deadline_s=LONG_POLL_S / 2) == ["timeout"]
    assert time.monotonic() - began < LONG_POLL_S / 4  # at the deadline, not the next poll
    assert len(polls.at) == 2  # the first, and the one at the deadline


def test_dump_file_appearing_or_changing_declares_torch_dump(
    tmp_path: Path, fast_poll: None, start_watch: Callable[..., Watch]
) -> None:
    dump = tmp_path / "comm_lib_trace_rank_0"
    incidents = _Incidents()
    start_watch(dump_file=dump, on_incident=incidents)
    time.sleep(0.06)
    assert incidents.reasons == []

    dump.write_bytes(b"pickle")
    assert incidents.wait_for(1) == ["torch_dump"]
    time.sleep(0.06)
    assert incidents.reasons == ["torch_dump"]  # once per change, not once per poll

    stat = dump.stat()
    os.utime(dump, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert incidents.wait_for(2) == ["torch_dump", "torch_dump"]


def test_a_dump_file_already_there_is_not_an_incident(
    tmp_path: Path, fast_poll: None, start_watch: Callable[..., Watch]
) -> None:
    dump = tmp_path / "comm_lib_trace_rank_0"
    dump.write_bytes(b"from an earlier run")
    incidents = _Incidents()
    watch = start_watch(dump_file=dump, on_incident=incidents)
    time.sleep(0.1)
    assert incidents.reasons == [] and _running(watch)


def test_watch_survives_a_failing_on_incident(
    tmp_path: Path,
    fast_poll: None,
    start_watch: Callable[..., Watch],
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    def broken(reason: str) -> None:
        calls.append(reason)
        raise RuntimeError("flush failed")

    dump = tmp_path / "dump"
    with caplog.at_level(logging.WARNING, logger="fr_otel.recorder.triggers"):
        watch = start_watch(dump_file=dump, on_incident=broken)
        dump.write_bytes(b"x")
        _wait_until(lambda: calls == ["torch_dump"])
        # it survived the first if it still answers the next change
        stat = dump.stat()
        os.utime(dump, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        _wait_until(lambda: len(calls) == 2)
    assert calls == ["torch_dump", "torch_dump"] and _running(watch)
    assert any("flush failed" in r.getMessage() for r in caplog.records)


def test_a_stopped_watch_can_be_joined(start_watch: Callable[..., Watch]) -> None:
    watch = start_watch(on_incident=print)
    watch.stop()
    watch.join(timeout=5)
    assert not watch.is_alive()


_FORK_CHILD = textwrap.dedent(
    """
    import os
    from fr_otel.recorder.triggers import Watch

    watch = Watch(running=list, dump_file=None, fifo=None, signal_name=None, on_incident=print)
    watch.start()
    pid = os.fork()  # as a DataLoader worker is started
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("forked", flush=True)
    """
)


def test_forking_while_the_watch_runs_is_clean() -> None:
    child = subprocess.run(
        [sys.executable, "-c", _FORK_CHILD], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 0 and child.stdout == "forked\n"
    assert "_after_fork" not in child.stderr, child.stderr


def test_unknown_signal_name_warns_and_installs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = signal.getsignal(signal.SIGUSR2)
    with caplog.at_level(logging.WARNING, logger="fr_otel.recorder.triggers"):
        watch = Watch(
            running=list, dump_file=None, fifo=None, signal_name="SIGNOPE", on_incident=print
        )
    assert any("SIGNOPE" in r.getMessage() for r in caplog.records)
    assert watch._signal is not None and watch._signal.read_fd is None
    assert signal.getsignal(signal.SIGUSR2) is before


def test_signal_trigger_is_not_installed_off_the_main_thread() -> None:
    made: list[Watch] = []
    thread = threading.Thread(
        target=lambda: made.append(
            Watch(running=list, dump_file=None, fifo=None, signal_name="SIGUSR2", on_incident=print)
        )
    )
    thread.start()
    thread.join(timeout=5)
    assert made and made[0]._signal is not None and made[0]._signal.read_fd is None


# --- the signal, in a child process -------------------------------------------------------

_SIGNAL_CHILD = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from fr_otel.recorder import triggers
    from fr_otel.recorder.triggers import Watch

    marker = Path(sys.argv[1])
    triggers.POLL_S = float(sys.argv[2])  # only the wake-up can be this quick
    declared = threading.Event()

    def on_incident(reason):
        marker.write_text(reason)
        declared.set()

    watch = Watch(running=list, dump_file=None, fifo=None, signal_name="SIGUSR2",
                  on_incident=on_incident)
    watch.start()
    print("ready", flush=True)
    # the main thread waits in native code, as it would inside a collective
    declared.wait(60)
    print("declared" if declared.is_set() else "nothing", flush=True)
    """
)


def test_sigusr2_declares_an_incident_while_the_main_thread_blocks(tmp_path: Path) -> None:
    marker = tmp_path / "incident"
    child = subprocess.Popen(
        [sys.executable, "-c", _SIGNAL_CHILD, str(marker), str(LONG_POLL_S)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        sent = time.monotonic()
        child.send_signal(signal.SIGUSR2)
        while not marker.exists() and time.monotonic() - sent < LONG_POLL_S * 2:
            time.sleep(0.005)
        elapsed = time.monotonic() - sent
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert marker.exists(), err
    assert elapsed < LONG_POLL_S / 2  # woken by the signal, not at the next poll
    assert marker.read_text() == "signal"
    assert child.returncode == 0, err  # SIGUSR2's default action would have killed it
    assert out == "declared\n"


_OWN_HANDLER_CHILD = textwrap.dedent(
    """
    import os, signal, threading, time
    from fr_otel.recorder.triggers import Watch

    caught = threading.Event()

    def mine(number, frame):
        caught.set()

    signal.signal(signal.SIGUSR2, mine)
    incidents = []
    watch = Watch(running=list, dump_file=None, fifo=None, signal_name="SIGUSR2",
                  on_incident=incidents.append)
    watch.start()
    kept = signal.getsignal(signal.SIGUSR2) is mine
    os.kill(os.getpid(), signal.SIGUSR2)
    deadline = time.monotonic() + 5
    while not caught.is_set() and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.3)  # longer than the watch's poll
    print(kept, caught.is_set(), watch._signal.read_fd is None, incidents, flush=True)
    """
)


def test_a_handler_the_process_already_has_is_kept(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", _OWN_HANDLER_CHILD], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout == "True True True []\n"


_WAKEUP_FD_CHILD = textwrap.dedent(
    """
    import os, signal
    from fr_otel.recorder.triggers import Watch

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd)  # as asyncio does
    watch = Watch(running=list, dump_file=None, fifo=None, signal_name="SIGUSR2",
                  on_incident=print)
    still_theirs = signal.set_wakeup_fd(-1) == write_fd
    print(still_theirs, signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL,
          watch._signal.read_fd is None, flush=True)
    """
)


def test_someone_elses_wakeup_fd_is_left_in_place() -> None:
    child = subprocess.run(
        [sys.executable, "-c", _WAKEUP_FD_CHILD], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout == "True True True\n"


def test_the_wake_up_byte_of_stop_is_never_an_operator_s_trigger(tmp_path: Path) -> None:
    """stop() sets the halt, then writes a byte into the FIFO to wake the thread; a look
    that was already past its halt check reads that byte. Here the look comes exactly
    then (the thread is not started): before, a healthy run got an operator incident."""
    from fr_otel.recorder.triggers import Watch

    watch = Watch(
        running=list,
        dump_file=None,
        fifo=tmp_path / "rank-000000.trigger",
        signal_name=None,
        on_incident=print,
    )
    watch.stop()
    assert watch._check() is None


def _wait_for_the_stack_here(path: Path) -> None:
    """Where the main thread waits while the watch writes its stack: only this test's
    frames and Python's own (``os.path``, ``time``), never the recorder's."""
    deadline = time.monotonic() + 5
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_live_checks_stack_request_writes_the_training_threads_stack_and_declares_nothing(
    tmp_path: Path, start_watch: Callable[..., Watch]
) -> None:
    """The agent's ``STACK_REQUEST`` byte: the watch writes where the main thread is (here:
    this test, waiting below) beside the ring, and declares no incident; any other bytes
    still declare one."""
    base = tmp_path / "rank-000003"
    fifo = trigger_path(base)
    incidents = _Incidents()
    start_watch(fifo=fifo, on_incident=incidents, on_stack_request=lambda: write_stack(base, 3))
    asked = time.time_ns()
    assert request_stack(fifo)
    _wait_for_the_stack_here(stack_path(base))
    stack = read_stack(base, asked)
    assert stack is not None and stack.rank == 3 and stack.thread == "MainThread"
    assert stack.where is not None and __file__ in stack.where, stack.frames[:3]
    assert not stack.in_collective  # this test's frames: in the wait, or still in the
    # request, whose own frame is fr_otel's and so never the user's
    assert read_stack(base, time.time_ns()) is None  # older than what is asked for
    time.sleep(0.3)
    assert incidents.reasons == []
    _poke(fifo, STACK_REQUEST + b"\n")  # not the request alone: an operator's write
    assert incidents.wait_for(1) == ["operator"]
    assert not request_stack(tmp_path / "no-such.trigger")


def test_the_live_check_s_bytes_declare_a_live_check_incident(
    tmp_path: Path, start_watch: Callable[..., Watch]
) -> None:
    # the live check's verdict is a failure; any other bytes are an operator's request
    fifo = tmp_path / "rank-000000.trigger"
    incidents = _Incidents()
    start_watch(fifo=fifo, on_incident=incidents)
    _poke(fifo, triggers.LIVE_CHECK_REQUEST)
    assert incidents.wait_for(1) == ["live_check"]
    _poke(fifo, b"live check\n")
    assert incidents.wait_for(2) == ["live_check", "operator"]


def test_writes_read_together_keep_what_each_asked(
    tmp_path: Path, start_watch: Callable[..., Watch]
) -> None:
    """The watch reads what was written since its last read at once: the live check's
    request twice, or beside a stack request, is still the live check's (it was read as an
    operator's snapshot, which sends no incident signal)."""
    fifo = tmp_path / "rank-000000.trigger"
    base = tmp_path / "rank-000000"
    incidents = _Incidents()
    start_watch(fifo=fifo, on_incident=incidents, on_stack_request=lambda: write_stack(base, 0))
    _poke(fifo, triggers.LIVE_CHECK_REQUEST * 2)
    assert incidents.wait_for(1) == ["live_check"]
    asked_ns = time.time_ns()
    _poke(fifo, STACK_REQUEST + triggers.LIVE_CHECK_REQUEST)
    assert incidents.wait_for(2) == ["live_check", "live_check"]
    _wait_until(lambda: read_stack(base, asked_ns) is not None)
    _poke(fifo, b"\n" + STACK_REQUEST)  # an operator's echo beside a stack request
    assert incidents.wait_for(3) == ["live_check", "live_check", "operator"]


@pytest.mark.parametrize(
    ("written", "asked"),
    [
        (b"live\n", ("live_check", False)),
        (b"live\nlive\n", ("live_check", False)),
        (b"\x05live\n", ("live_check", True)),
        (b"\x05", (None, True)),
        (b"\x05\x05", (None, True)),
        (b"\n", ("operator", False)),
        (b"snapshot please\n\x05", ("operator", True)),
        (b"live", ("operator", False)),  # not the live check's whole request
    ],
)
def test_fifo_request_reads_every_request_in_one_read(
    written: bytes, asked: tuple[str | None, bool]
) -> None:
    assert triggers.fifo_request(written) == asked
