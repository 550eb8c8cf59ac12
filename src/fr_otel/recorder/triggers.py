"""The watch thread: the ways an incident is noticed other than a collective raising.

* a collective pending past its timeout (the recorder's ``FR_OTEL_TIMEOUT`` or the group's),
  found by reading the newest slots of the ring, so the training thread does nothing for it;
* torch's own dump-on-timeout file appearing (NCCL's watchdog writes it);
* an operator writing to the rank's FIFO (``echo > <ring dir>/job=J/rank-NNNNNN.trigger``);
* an operator's signal (``SIGUSR2``): Python runs signal handlers only on the main thread,
  between bytecodes, which never comes while that thread waits inside a collective; the
  C-level handler does write the signal number to ``signal.set_wakeup_fd``'s pipe at once,
  and this thread reads it.

All of them call ``on_incident(reason)``; none touches the training thread.
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
from typing import Any

logger = logging.getLogger(__name__)

POLL_S = 0.25


class _Signal:
    """A trigger signal routed to a pipe, if the process leaves it free."""

    def __init__(self, name: str) -> None:
        self.number: int | None = None
        self.read_fd: int | None = None
        self._write_fd: int | None = None
        number = getattr(signal, name.upper(), None)
        if not isinstance(number, int):
            logger.warning("fr_otel: unknown trigger signal %r; none installed", name)
            return
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        if signal.getsignal(number) not in (signal.SIG_DFL, None):
            logger.info("fr_otel: %s already has a handler; not using it as a trigger", name)
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
        signal.signal(number, lambda *_: None)  # the byte in the pipe is the signal
        self.number, self.read_fd, self._write_fd = int(number), read_fd, write_fd

    def fired(self) -> bool:
        if self.read_fd is None:
            return False
        try:
            data = os.read(self.read_fd, 512)
        except BlockingIOError:
            return False
        return self.number is not None and self.number in data


class _Fifo:
    """``<path>``: any bytes written to it declare an incident."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None
        self._keep_open: int | None = None
        try:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            os.mkfifo(path, 0o600)
            self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            # our own writer end: without one, select() reports EOF forever
            self._keep_open = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            logger.info("fr_otel: no trigger FIFO at %s: %s", path, exc)

    def fired(self) -> bool:
        if self.fd is None:
            return False
        try:
            return bool(os.read(self.fd, 4096))
        except BlockingIOError:
            return False

    def close(self) -> None:
        for fd in (self.fd, self._keep_open):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        with contextlib.suppress(OSError):
            self.path.unlink()


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
    ) -> None:
        super().__init__(name="fr_otel-watch", daemon=True)
        self._running = running
        self._dump_file = dump_file
        self._dump_seen = _mtime(dump_file)
        self._dump_changing: int | None = None
        self._fifo = _Fifo(fifo) if fifo is not None else None
        self._signal = _Signal(signal_name) if signal_name else None
        self._on_incident = on_incident
        self._halt = threading.Event()
        self.timeouts_seen: set[int] = set()

    def stop(self) -> None:
        self._halt.set()

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
                if waits:
                    select.select(waits, [], [], POLL_S)
                else:
                    self._halt.wait(POLL_S)
                reason = self._check()
                if reason is not None:
                    self._on_incident(reason)
            except Exception as exc:  # the watch must outlive its own bugs
                logger.warning("fr_otel watch: %r", exc)
                self._halt.wait(POLL_S)
        if self._fifo is not None:
            self._fifo.close()

    def _check(self) -> str | None:
        if self._signal is not None and self._signal.fired():
            return "signal"
        if self._fifo is not None and self._fifo.fired():
            return "operator"
        now = time.time_ns()
        for record, started, timeout_ns in self._running():
            if timeout_ns and now - started > timeout_ns and record not in self.timeouts_seen:
                self.timeouts_seen.add(record)
                return "timeout"
        if self._dump_file is not None:
            # torch truncates, then writes for a while: one incident per dump, once the
            # file has stopped changing for a poll
            mtime = _mtime(self._dump_file)
            if mtime is not None and mtime != self._dump_seen:
                if mtime == self._dump_changing:
                    self._dump_seen = mtime
                    return "torch_dump"
                self._dump_changing = mtime
        return None


def _mtime(path: Path | None) -> int | None:
    if path is None:
        return None
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None
