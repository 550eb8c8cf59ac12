"""The recorder of one rank: ring, hooks, incident detection and the all-rank flush.

Lifecycle:

1. ``install()`` patches ``torch.distributed`` (before or after ``init_process_group``).
2. The first recorded collective opens the ring (the rank is known by then), connects
   the side channel and starts the background threads: the listener (incidents other
   ranks declare), the watch (timeouts, torch's dump file, FIFO, signal) and, in
   continuous mode, the span stream.
3. An incident, noticed anywhere, is declared through the store; every rank flushes its
   ring once for it, plus the rings of ranks on its host that died without flushing.
   The rank whose collective raised waits (up to the deadline) for the whole job to
   flush before the exception continues, because a launcher tears the other ranks down as
   soon as that rank exits.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fr_otel.config import RecorderSettings
from fr_otel.recorder.ring import RingWriter, ring_base

logger = logging.getLogger(__name__)

RUNNING_WINDOW = 256
"""How many of the newest ring slots the watch checks for ops past their timeout (ops
issued and still running are always among the newest)."""

INCIDENT_WINDOW_S = 300.0
"""Automatic triggers this soon after an incident join it rather than declare another."""


@dataclass(kw_only=True)
class RecorderStats:
    """Counters a user (or a test) can read from ``fr_otel.recorder.current()``."""

    incidents: list[str] = field(default_factory=list)
    flushes: list[Any] = field(default_factory=list)
    """``FlushReport`` of every ring this rank flushed (its own and dead ranks')."""
    recorder_errors: int = 0
    spans_sent: int = 0
    spans_spooled: int = 0
    spans_dropped: int = 0


class Recorder:
    def __init__(self, settings: RecorderSettings) -> None:
        self.settings = settings
        self.stats = RecorderStats()
        self._writer: RingWriter | None = None
        self._writer_failed = False
        self._start_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._flushed: set[str] = set()
        self._generation = 1
        """The next incident number this rank has not seen."""
        self._channel: Any = None
        self._exporter: Any = None
        self._stream: Any = None
        self._watch: Any = None
        self.rank: int | None = None
        self.world: int | None = None
        self._stopping = threading.Event()
        self._listener: threading.Thread | None = None
        self._latest: tuple[str, float] | None = None
        """The last incident this rank flushed, and when (monotonic)."""
        from fr_otel.recorder.capture import Capture

        self.capture = Capture(self, settings.stack_depth)

    # --- start ---------------------------------------------------------------------------

    def writer(self) -> RingWriter | None:
        """The ring, opened on first use once the default group exists."""
        writer = self._writer
        if writer is not None or self._writer_failed:
            return writer
        with self._start_lock:
            if self._writer is None and not self._writer_failed:
                try:
                    self._start()
                except Exception as exc:  # record nothing rather than crash
                    self._writer_failed = True
                    self.stats.recorder_errors += 1
                    logger.warning("fr_otel recorder disabled: %r", exc)
        return self._writer

    def _start(self) -> None:
        from torch.distributed import distributed_c10d as c10d

        self.rank, self.world = c10d.get_rank(), c10d.get_world_size()
        default = c10d._get_default_group()
        backend = str(c10d.get_backend(default))
        settings = self.settings
        base = ring_base(settings.rings, settings.job, self.rank)
        self._writer = RingWriter(
            base,
            capacity=settings.buffer_size,
            rank=self.rank,
            world=self.world,
            job=settings.job,
            backend=backend,
        )
        self.capture.attach(self._writer)
        self._connect(c10d)
        if settings.otlp is not None:
            from fr_otel.otel.transport import exporter_for

            self._exporter = exporter_for(settings.otlp)
        if settings.mode == "continuous" and self._exporter is not None:
            from fr_otel.recorder.streaming import SpanStream

            self._stream = SpanStream(
                writer=lambda: self._writer, settings=settings, exporter=self._exporter
            )
            self._stream.start()
        from fr_otel.recorder.triggers import Watch

        self._watch = Watch(
            running=self._running,
            dump_file=_torch_dump_file(self.rank),
            fifo=base.with_suffix(".trigger"),
            signal_name=settings.trigger_signal,
            on_incident=self.declare,
        )
        self._watch.start()
        atexit.register(self.close)
        # pay for the flush path's imports now, not during an incident
        threading.Thread(target=_preload, name="fr_otel-preload", daemon=True).start()

    def _running(self) -> list[tuple[int, int, int]]:
        """(record, created ns, timeout ns) of the newest ops still running."""
        writer = self._writer
        if writer is None:
            return []
        self.capture.poll_unfinished()
        timeouts = self.capture.timeouts_ns
        return [
            (record, created, timeouts.get(group, 0))
            for record, group, created in writer.started(RUNNING_WINDOW)
        ]

    def _connect(self, c10d: Any) -> None:
        from fr_otel.recorder.sidechannel import SideChannel, tcp_store_address

        address = tcp_store_address(c10d._get_default_store())
        if address is None:
            logger.warning(
                "fr_otel: the job's store is not a TCPStore; incidents stay local to each rank"
            )
            return
        self._channel = SideChannel(*address)
        self._listener = threading.Thread(target=self._listen, name="fr_otel-listen", daemon=True)
        self._listener.start()

    # --- incidents -----------------------------------------------------------------------

    def _listen(self) -> None:
        from fr_otel.recorder.sidechannel import poll_interval

        interval = poll_interval(self.world or 1)
        while not self._stopping.wait(interval):
            try:
                incident = self._channel.declared(self._generation)
            except Exception:  # the store went away: the job is over
                return
            if incident is not None:
                self._generation += 1
                self._handle(incident)

    def declare(self, reason: str) -> str | None:
        """Declare an incident job-wide (or locally without a store) and flush this rank.

        Returns the incident id, which may be another rank's if it declared first. A
        failure noticed soon after an incident (its own consequence, typically: peers of a
        dead rank fail one after another) joins that incident instead of starting one;
        only an operator starts a new incident at any time."""
        latest = self._latest
        if (
            latest is not None
            and reason not in ("operator", "signal")
            and time.monotonic() - latest[1] < INCIDENT_WINDOW_S
        ):
            return latest[0]
        candidate = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-r{self.rank}-{reason}"
        incident = candidate
        agreed = False
        if self._channel is not None:
            try:
                incident = self._channel.declare(self._generation, candidate)
                agreed = True
            except Exception as exc:  # the store's host died: agree with this host's ranks
                logger.warning("fr_otel: cannot reach the job's store (%r)", exc)
        if not agreed:
            from fr_otel.recorder.adopt import join_local_incident

            incident = join_local_incident(self.settings, candidate, INCIDENT_WINDOW_S)
        logger.warning("fr_otel: incident %s (%s on rank %s)", incident, reason, self.rank)
        self._handle(incident)
        return incident

    def collective_failed(self, record: int, exc: BaseException) -> None:
        """A collective raised on the training thread: flush the job before it goes on."""
        try:
            incident = self.declare("collective_error")
            if incident is not None:
                self.wait_for_job(incident)
        except Exception as error:  # never replace the user's exception
            self.stats.recorder_errors += 1
            logger.warning("fr_otel flush after a failed collective: %r", error)

    def _handle(self, incident: str) -> None:
        with self._flush_lock:
            if incident in self._flushed:
                return
            self._flushed.add(incident)
            self._latest = (incident, time.monotonic())
            self.stats.incidents.append(incident)
            try:
                self._flush_all(incident)
            except Exception as exc:  # logged once, counted
                self.stats.recorder_errors += 1
                logger.warning("fr_otel flush of %s failed: %r", incident, exc)

    def _flush_all(self, incident: str) -> None:
        from fr_otel.recorder.adopt import flush_dead_rings, note_incident
        from fr_otel.recorder.flush import flush_ring, torch_fr_dump

        deadline = time.monotonic() + self.settings.flush_deadline_s
        writer = self._writer
        if writer is None:
            return
        note_incident(self.settings, incident)
        self.capture.poll_unfinished()
        already = self._stream.already_sent() if self._stream is not None else frozenset()
        report = flush_ring(
            writer.snapshot(),
            settings=self.settings,
            incident=incident,
            exporter=self._exporter,
            deadline=deadline,
            already_sent=already,
            raw_dump=torch_fr_dump(),
        )
        writer.note_flushed(incident)
        writer.sync()
        self._record(report)
        for adopted in flush_dead_rings(
            self.settings, incident, exporter=self._exporter, deadline=deadline, skip=writer.base
        ):
            self._record(adopted)

    def _record(self, report: Any) -> None:
        self.stats.flushes.append(report)
        self.stats.spans_sent += report.spans_sent
        self.stats.spans_spooled += report.spans_spooled
        for problem in report.problems:
            logger.warning("fr_otel flush of rank %s: %s", report.rank, problem)
        if self._channel is not None:
            with contextlib.suppress(Exception):  # the store is gone; the files are written
                self._channel.mark_flushed(report.incident)

    def wait_for_job(self, incident: str) -> int:
        """Wait (up to the flush deadline) until every rank has flushed; return how many did.

        Meanwhile it keeps flushing the rings of ranks that die: a rank whose peer just
        crashed often notices before the kernel has released the dead rank's ring."""
        if self._channel is None or self.world is None:
            return 1
        from fr_otel.recorder.adopt import flush_dead_rings

        deadline = time.monotonic() + self.settings.flush_deadline_s
        count = 0
        while True:
            try:
                count = self._channel.flushed(incident)
            except Exception:
                break
            if count >= self.world or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
            with self._flush_lock:
                for adopted in flush_dead_rings(
                    self.settings,
                    incident,
                    exporter=self._exporter,
                    deadline=deadline,
                    skip=self._writer.base if self._writer is not None else None,
                ):
                    self._record(adopted)
        if count < self.world:
            logger.warning(
                "fr_otel: %d of %d ranks flushed incident %s before the deadline",
                count,
                self.world,
                incident,
            )
        return count

    @property
    def streamed_spans(self) -> int:
        """Spans continuous mode has sent so far (0 in incident mode)."""
        stream = self._stream
        return int(stream.sent) if stream is not None else 0

    # --- stop ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the threads, wait for a flush in progress, send what is left (at exit)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        atexit.unregister(self.close)
        if self._watch is not None:
            self._watch.stop()
        if self._listener is not None and self._listener is not threading.current_thread():
            self._listener.join(timeout=self.settings.flush_deadline_s)
        if self._flush_lock.acquire(timeout=self.settings.flush_deadline_s):
            self._flush_lock.release()
        if self._stream is not None:
            self._stream.stop()
            # the process is exiting: one short try, then the spool
            self._stream.export_once(deadline_s=1.0)
            self.stats.spans_sent += self._stream.sent
            self.stats.spans_spooled += self._stream.spooled
            self.stats.spans_dropped += self._stream.dropped
            if self._stream.dropped:
                logger.warning(
                    "fr_otel: %d spans dropped (ring overwritten before export)",
                    self._stream.dropped,
                )
            self._stream = None
        self.stats.recorder_errors += self.capture.errors
        writer, self._writer, self._writer_failed = self._writer, None, True
        self.capture.detach()
        if writer is not None:
            # closing drops the ring's lock: the file stays for whoever reads it later
            writer.close()


def _torch_dump_file(rank: int) -> Path | None:
    from fr_otel.config import torch_dump_prefix

    prefix = torch_dump_prefix()
    return Path(f"{prefix}{rank}") if prefix else None


def _preload() -> None:
    for module in ("fr_otel.archive.rows", "fr_otel.otel.wire", "fr_otel.recorder.flush"):
        with contextlib.suppress(Exception):  # the flush will report it
            importlib.import_module(module)
