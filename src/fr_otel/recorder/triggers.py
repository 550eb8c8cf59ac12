"""The watch thread: the ways an incident is noticed other than a collective raising.

* a collective pending past its timeout (the recorder's ``FR_OTEL_TIMEOUT`` or the group's),
  found by reading the newest slots of the ring, so the training thread does nothing for it;
* torch's own dump-on-timeout file appearing (NCCL's watchdog writes it);
* an operator writing to the rank's FIFO (``echo > <ring dir>/job=J/run=R/rank-NNNNNN.trigger``),
  which exists only while the rank records: it is removed when the watch stops, before
  the rank ends by the launcher's signal, and, for a rank killed outright, by whoever
  adopts its ring (``adopt``);
* an operator's signal (``SIGUSR2``): Python runs signal handlers only on the main thread,
  between bytecodes, which never comes while that thread waits inside a collective; the
  C-level handler does write the signal number to ``signal.set_wakeup_fd``'s pipe at once,
  and this thread reads it;
* the launcher's ``SIGTERM`` (torchrun sends it to every rank once one has failed): the
  rank flushes, then ends by the same signal, so the launcher sees what it sent;
* ``tick``, when given: the mirror of torch's Flight Recorder, which finds ops running
  past their timeout among the collectives the hooks never saw.

All of them call ``on_incident(reason)``; none touches the training thread. One more
thing comes through the FIFO: the live check's ``stack_request.STACK_REQUEST``, which asks
for the training thread's stack (``on_stack_request``) and declares nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

from fr_otel.recorder.stack_request import STACK_REQUEST

logger = logging.getLogger(__name__)

POLL_S = 0.25
"""Seconds between the watch's polls while the rank is quiet (its collectives stopped: a
hang's timeouts, torch's dump and the live check's reads come then) and in continuous
mode (its reads follow torch's buffer as it fills)."""
STEADY_POLL_S = 1.0
"""Seconds between polls while the rank keeps issuing collectives in incident mode: none
of those checks is due sooner (an op near its timeout wakes the watch at its deadline),
and a poll's cost is the same whether it finds anything, so a tight loop of small
collectives paid for four a second out of its own share of the cores."""

LIVE_CHECK_REQUEST: Final = b"live\n"
"""What the live check writes into a rank's trigger FIFO to declare the incident of its
verdict (``live.declare``): any other bytes are an operator's request."""
ASKED_FOR: Final = ("operator", "signal")
"""Triggers that are a person's request for a snapshot, not a failure: they start a new
incident at any time, and send no incident signal (an alert for a snapshot someone
asked for would be a false alarm)."""

TRIGGER_SUFFIX: Final = ".trigger"


def trigger_path(base: Path) -> Path:
    """The FIFO of the rank whose ring is ``base`` (``ring.ring_base``)."""
    return base.with_suffix(TRIGGER_SUFFIX)


class _Signal:
    """Signals routed to a pipe, those the process leaves free."""

    def __init__(self, name: str | None, terminate: bool = False) -> None:
        self.number: int | None = None
        self.terminate: int | None = None
        self.read_fd: int | None = None
        self._write_fd: int | None = None
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        wanted: list[int] = []
        if name:
            number = getattr(signal, name.upper(), None)
            if not isinstance(number, int):
                logger.warning("fr_otel: unknown trigger signal %r; none installed", name)
            elif signal.getsignal(number) not in (signal.SIG_DFL, None):
                logger.info("fr_otel: %s already has a handler; not using it as a trigger", name)
            else:
                wanted.append(int(number))
        if terminate and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            wanted.append(int(signal.SIGTERM))
        if not wanted:
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        try:
            previous = signal.set_wakeup_fd(write_fd)
        except ValueError:
            os.close(read_fd)
            os.close(write_fd)
            return
        if previous != -1:  # someone else's (asyncio's): leave theirs in place
            signal.set_wakeup_fd(previous)
            os.close(read_fd)
            os.close(write_fd)
            return
        for number in wanted:
            signal.signal(number, lambda *_: None)  # the byte in the pipe is the signal
        if name and wanted[0] != signal.SIGTERM:
            self.number = wanted[0]
        if int(signal.SIGTERM) in wanted:
            self.terminate = int(signal.SIGTERM)
        self.read_fd, self._write_fd = read_fd, write_fd
        self._installed = wanted

    def restore(self) -> None:
        """Give the signals back their default action (from the main thread only)."""
        if not getattr(self, "_installed", None):
            return
        if threading.current_thread() is not threading.main_thread():
            return
        with contextlib.suppress(ValueError, OSError):
            for number in self._installed:
                signal.signal(number, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
        self._installed = []

    def fired(self) -> set[int]:
        """The routed signals that arrived since the last call."""
        if self.read_fd is None:
            return set()
        try:
            data = os.read(self.read_fd, 512)
        except BlockingIOError:
            return set()
        return {n for n in (self.number, self.terminate) if n is not None and n in data}


def end_by_signal(number: int) -> None:
    """End the process by ``number`` with its default action, from any thread (Python lets
    only the main thread change a handler; the C library does not mind)."""
    import ctypes

    try:
        ctypes.CDLL(None).signal(number, 0)  # SIG_DFL
        os.kill(os.getpid(), number)
        time.sleep(1.0)  # delivery is asynchronous
    finally:
        os._exit(128 + number)


class _Fifo:
    """``<path>``: any bytes written to it declare an incident."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None
        self._keep_open: int | None = None
        self._removed = False
        try:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            os.mkfifo(path, 0o600)
            self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            # our own writer end: without one, select() reports EOF forever
            self._keep_open = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            logger.info("fr_otel: no trigger FIFO at %s: %s", path, exc)

    def read(self) -> bytes:
        """What was written since the last read (empty: nothing)."""
        if self.fd is None:
            return b""
        try:
            return os.read(self.fd, 4096)
        except BlockingIOError:
            return b""

    def remove(self) -> None:
        """Take the FIFO's name away (its open ends stay usable). Once only: a recorder
        started again in this process may have made a new FIFO of the same name since."""
        if self._removed:
            return
        self._removed = True
        with contextlib.suppress(OSError):
            self.path.unlink()

    def wake(self) -> None:
        """Wake a thread waiting on the FIFO (the byte is never read as a trigger: the
        watch stops first)."""
        if self._keep_open is not None:
            with contextlib.suppress(OSError):
                os.write(self._keep_open, b"\0")

    def close(self) -> None:
        self.remove()
        for fd in (self.fd, self._keep_open):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


class Watch(threading.Thread):
    """Polls every ``POLL_S`` seconds, or wakes at once on a FIFO write or signal."""

    def __init__(
        self,
        *,
        running: Callable[[], Iterable[tuple[int, int, int]]],
        dump_file: Path | None,
        fifo: Path | None,
        signal_name: str | None,
        on_incident: Callable[[str], Any],
        tick: Callable[[], str | None] | None = None,
        on_terminate: Callable[[int], Any] | None = None,
        on_stack_request: Callable[[], Any] | None = None,
        steady: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(name="fr_otel-watch", daemon=True)
        self._steady = steady
        """Whether the next poll may wait ``STEADY_POLL_S`` (asked once a poll); without
        it, every poll waits ``POLL_S``."""
        self._soonest_ns: int | None = None
        """When the running op nearest its timeout passes it (wall ns), as of the last poll."""
        self._on_stack_request = on_stack_request
        self._tick = tick
        self._on_terminate = on_terminate
        self._running = running
        self._dump_file = dump_file
        self._dump_seen = _mtime(dump_file)
        self._dump_changing: int | None = None
        self._fifo = _Fifo(fifo) if fifo is not None else None
        self._signal = _Signal(signal_name, terminate=on_terminate is not None)
        self.terminated: int | None = None
        self._on_incident = on_incident
        self._halt = threading.Event()
        self.timeouts_seen: set[int] = set()

    def stop(self) -> None:
        self._halt.set()
        if self._fifo is not None:
            # here, not when the thread ends: at exit the interpreter stops a daemon
            # thread wherever it is, and every rank of every run left its FIFO behind
            self._fifo.remove()
            self._fifo.wake()  # its descriptors close now, not after a poll
        if self._signal is not None:
            self._signal.restore()

    def run(self) -> None:
        waits = [
            fd
            for fd in (
                self._fifo.fd if self._fifo else None,
                self._signal.read_fd if self._signal else None,
            )
            if fd is not None
        ]
        while not self._halt.is_set():
            try:
                wait = self._wait_s()
                if waits:
                    select.select(waits, [], [], wait)
                else:
                    self._halt.wait(wait)
                if self._halt.is_set():
                    break
                reason = self._check()
                if reason is not None:
                    self._on_incident(reason)
                if self.terminated is not None and self._on_terminate is not None:
                    if self._fifo is not None:
                        self._fifo.remove()  # the process ends by the signal, at once
                    self._on_terminate(self.terminated)
            except Exception as exc:  # the watch must outlive its own bugs
                logger.warning("fr_otel watch: %r", exc)
                self._halt.wait(POLL_S)
        if self._fifo is not None:
            self._fifo.close()

    def _wait_s(self) -> float:
        """Until the next poll: ``STEADY_POLL_S`` while the rank is steady, else ``POLL_S``;
        no later than a running op's timeout."""
        wait = STEADY_POLL_S if self._steady is not None and self._steady() else POLL_S
        if self._soonest_ns is not None:
            wait = min(wait, max((self._soonest_ns - time.time_ns()) / 1e9, 0.0) + 0.01)
        return wait

    def _check(self) -> str | None:
        fired = self._signal.fired() if self._signal is not None else set()
        if self._signal is not None and self._signal.terminate in fired:
            self.terminated = self._signal.terminate
            return "terminated"
        if self._signal is not None and self._signal.number in fired:
            return "signal"
        # stop() sets the halt before its wake-up byte: a byte read once the halt is set
        # may be that one, never an operator's (a healthy run got an operator incident)
        written = self._fifo.read() if self._fifo is not None else b""
        if written and not self._halt.is_set():
            reason, stack = fifo_request(written)
            if stack and self._on_stack_request is not None:
                self._on_stack_request()  # the live check asks where the rank is
            if reason is not None:
                return reason
        now = time.time_ns()
        soonest = None
        for record, started, timeout_ns in self._running():
            if not timeout_ns or record in self.timeouts_seen:
                continue
            if now - started > timeout_ns:
                self.timeouts_seen.add(record)
                self._soonest_ns = None
                return "timeout"
            if soonest is None or started + timeout_ns < soonest:
                soonest = started + timeout_ns
        self._soonest_ns = soonest
        if self._dump_file is not None:
            # torch truncates, then writes for a while: one incident per dump, once the
            # file has stopped changing for a poll
            mtime = _mtime(self._dump_file)
            if mtime is not None and mtime != self._dump_seen:
                if mtime == self._dump_changing:
                    self._dump_seen = mtime
                    return "torch_dump"
                self._dump_changing = mtime
        if self._tick is not None:
            return self._tick()
        return None


def fifo_request(written: bytes) -> tuple[str | None, bool]:
    """What one read of the trigger FIFO asks: the incident's trigger (``live_check``
    where the live check's bytes are among them, its verdict's incident; ``operator`` for
    any other bytes; None) and whether the stack is asked for. Writes that came before
    the read are read together: a stack request beside the live check's, or the live
    check's twice, is not an operator's."""
    stack = STACK_REQUEST in written
    rest = written.replace(STACK_REQUEST, b"")
    without_live = rest.replace(LIVE_CHECK_REQUEST, b"")
    if without_live != rest:
        return "live_check", stack
    if rest:
        return "operator", stack
    return None, stack


def _mtime(path: Path | None) -> int | None:
    if path is None:
        return None
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None
