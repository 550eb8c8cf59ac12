"""The recorder of one rank: ring, hooks, incident detection and the all-rank flush.

Lifecycle:

1. ``install()`` patches ``torch.distributed`` (before or after ``init_process_group``).
2. The first process group (or ``install()`` after one exists) opens the ring, connects
   the side channel and starts the background threads: the listener (incidents other
   ranks declare), the watch (timeouts, torch's dump file, FIFO, signals, and the mirror
   of torch's own Flight Recorder for the collectives the hooks do not see) and, in
   continuous mode, the span streams. Uncaught exceptions in any thread declare an
   incident too: errors out of C++ (``loss.backward()``, ``Work.wait()``) never pass
   through a hook.
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
import math
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fr_otel.config import RecorderSettings
from fr_otel.recorder.incident_ids import new_incident_id
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
        self.ring: RingWriter | None = None
        """This rank's ring once opened (``writer()`` opens it). Read on every collective by
        the hooks, the compiled one included: a plain attribute, never reassigned but by
        this class."""
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
        self._mirror: Any = None
        self._mirror_lock = threading.Lock()
        self._mirror_stream: Any = None
        self.rank: int | None = None
        self.world: int | None = None
        self._stopping = threading.Event()
        self._listener: threading.Thread | None = None
        self._latest: tuple[str, float] | None = None
        """The last incident this rank flushed, and when (monotonic)."""
        self._last_gasp = False
        """Whether SIGABRT calls ``aborted`` first (``_lastgasp`` installed)."""
        self._started_ns = time.time_ns()
        self._declaring: dict[str, tuple[str, int | None]] = {}
        """Incident ids this rank proposed -> (trigger, failed record): the one that wins
        is this rank's declaration, whichever thread flushes it (the listener may see it
        in the store before ``declare`` gets to flush)."""
        self._incident_counter: Any = None
        self._timeouts_declared: set[int] = set()
        """Records of the watch's timeouts already declared (``_watched``)."""
        self._issued_at_poll = -1
        """Collectives issued as of the watch's last poll (``_steady``)."""
        from fr_otel.recorder.capture import Capture

        self.capture = Capture(self, settings.stack_depth)

    # --- start ---------------------------------------------------------------------------

    def writer(self) -> RingWriter | None:
        """The ring, opened on first use once the default group exists."""
        writer = self.ring
        if writer is not None or self._writer_failed:
            return writer
        with self._start_lock:
            if self.ring is None and not self._writer_failed:
                try:
                    self._start()
                except Exception as exc:  # record nothing rather than crash
                    self._writer_failed = True
                    self.stats.recorder_errors += 1
                    logger.warning(
                        "fr_otel: recorder disabled for this rank, training goes on: cannot"
                        " open its ring under %s (%s); this rank's collectives will not be"
                        " recorded or sent, and its incidents not declared",
                        self.settings.rings,
                        exc,
                    )
        return self.ring

    def _start(self) -> None:
        from torch.distributed import distributed_c10d as c10d

        self.rank, self.world = c10d.get_rank(), c10d.get_world_size()
        default = c10d._get_default_group()
        backend = str(c10d.get_backend(default))
        if self.settings.run_id is None:
            self.settings = replace(self.settings, run_id=_shared_run_id(c10d))
        settings = self.settings
        base = ring_base(settings.rings, settings.job, self.rank, settings.run_id)
        self.ring = RingWriter(
            base,
            capacity=settings.buffer_size,
            rank=self.rank,
            world=self.world,
            job=settings.job,
            backend=backend,
            run_id=settings.run_id,
        )
        self.capture.attach(self.ring)
        self._mirror = _open_mirror(self.ring, settings, self.capture)
        self._connect(c10d)
        if settings.otlp is not None:
            from fr_otel.otel.transport import exporter_for

            self._exporter = exporter_for(settings.otlp)
        if settings.mode == "continuous" and self._exporter is not None:
            from fr_otel.recorder.streaming import SpanStream
            from fr_otel.sinks.otlp import transport_warnings

            # one Collector, one gate: a rank whose Collector is down says so once
            warnings = transport_warnings()
            self._stream = SpanStream(
                writer=lambda: self.ring,
                settings=settings,
                exporter=self._exporter,
                warnings=warnings,
            )
            self._stream.start()
            if self._mirror is not None:
                mirror = self._mirror
                self._mirror_stream = SpanStream(
                    writer=lambda: mirror.ring if self._mirror is not None else None,
                    settings=settings,
                    exporter=self._exporter,
                    name="fr_otel-export-torch",
                    watch_backlog=False,  # the mirror wakes it after each read
                    warnings=warnings,
                )
                self._mirror_stream.start()
        from fr_otel.recorder.triggers import Watch

        self._watch = Watch(
            running=self._running,
            dump_file=_torch_dump_file(self.rank),
            fifo=base.with_suffix(".trigger"),
            signal_name=settings.trigger_signal,
            on_incident=self._watched,
            tick=self._mirror_tick if self._mirror is not None else None,
            on_terminate=self._end_by_signal,
            on_stack_request=lambda: self._write_stack(base),
            steady=self._steady,
        )
        self._watch.start()
        _chain_exception_hooks(self)
        self._last_gasp = _install_last_gasp(self)
        atexit.register(self.close)
        # pay for the flush path's imports now, not during an incident
        threading.Thread(target=_preload, name="fr_otel-preload", daemon=True).start()

    def _steady(self) -> bool:
        """Whether the watch may wait ``STEADY_POLL_S`` for its next poll: in incident
        mode, while the rank has issued collectives since the last poll (torch's counters
        where its FR is mirrored, as DDP's and functional collectives pass no hook; else
        the hooks' ring), and no hooked signature waits for its torch op."""
        if self.settings.mode == "continuous":
            return False
        mirror, writer = self._mirror, self.ring
        issued: int = 0
        if mirror is not None:
            if not self._mirror_lock.acquire(blocking=False):
                return False  # a flush is reading torch's FR
            try:
                if mirror.learning():  # its next read is due soon: as every rank's is
                    return False
                issued = mirror.issued()
            finally:
                self._mirror_lock.release()
        elif writer is not None:
            issued = writer.next_record
        moved, self._issued_at_poll = issued != self._issued_at_poll, issued
        return moved

    def _write_stack(self, base: Path) -> None:
        """The live check asked where the training thread is (``stack_request``)."""
        from fr_otel.recorder.stack_request import write_stack

        try:
            write_stack(base, self.rank if self.rank is not None else -1)
        except Exception as exc:  # the agent then says it has no stack; training goes on
            self.stats.recorder_errors += 1
            logger.warning("fr_otel: cannot write the stack the live check asked for: %r", exc)

    def group_created(self) -> None:
        """A process group was created (or ``install()`` found one): start recording."""
        try:
            from torch.distributed import distributed_c10d as c10d

            if c10d.is_initialized():
                self.writer()
        except Exception as exc:  # never fail the user's group creation
            self.stats.recorder_errors += 1
            logger.warning("fr_otel: cannot start the recorder: %r", exc)

    def _mirror_tick(self) -> str | None:
        mirror = self._mirror
        if mirror is None or not self._mirror_lock.acquire(blocking=False):
            return None  # a flush is reading torch's FR: it mirrors everything itself
        reads = mirror.stats.reads
        try:
            return mirror.tick(self._pause_unlocked)  # type: ignore[no-any-return]
        finally:
            self._mirror_lock.release()
            stream = self._mirror_stream
            if stream is not None and mirror.stats.reads != reads:
                stream.wake()

    def _pause_unlocked(self, seconds: float) -> bool:
        """The mirror's wait for torch's buffer to fill, without its lock: a flush that
        comes meanwhile reads at once rather than after the wait. False once the recorder
        is closing (it reads for the last time itself, and closes the mirror)."""
        self._mirror_lock.release()
        try:
            time.sleep(seconds)
        finally:
            self._mirror_lock.acquire()
        return not self._stopping.is_set()

    def read_torch_fr(self) -> None:
        """Bring the torch ring up to date with what torch's FR holds now (a flush does;
        a check or a benchmark may). Holds the GIL as long as torch's dump takes."""
        mirror = self._mirror
        if mirror is None:
            return
        with self._mirror_lock:
            try:
                mirror.read()
            except Exception as exc:  # the hooks' records still go out
                self.stats.recorder_errors += 1
                logger.warning("fr_otel: cannot read torch's Flight Recorder: %r", exc)

    def snapshot(self) -> Any:
        """Everything this rank recorded: the hooks' ring and the torch ring, as one
        ``RingContents`` (torch ring records past ``TORCH_RECORD_OFFSET``)."""
        writer = self.ring
        if writer is None:
            return None
        contents = writer.snapshot()
        mirror = self._mirror
        if mirror is not None:
            contents = contents.merged(mirror.ring.snapshot())
        return contents

    def uncaught(self, exc: BaseException, main_thread: bool = True) -> None:
        """An exception nobody caught (any thread): the job is failing; flush it all. In
        the main thread it also ends the rank: its record ends there."""
        if self.ring is None or isinstance(exc, KeyboardInterrupt | SystemExit):
            return
        self._flush_job("uncaught_exception")
        if main_thread:
            self._note_end("exception", type(exc).__name__)

    def _note_end(self, how: str, detail: str | None = None) -> None:
        """Read torch's FR a last time and mark the ring ended (``RingWriter.note_end``):
        a rank whose record stops because it ended must never look like one that stopped
        issuing what its peers went on to."""
        writer = self.ring
        if writer is None:
            return
        # gloo's point-to-point works have no future to call back: the watch polls them,
        # and the last ones a rank waited for finished after its last poll
        with contextlib.suppress(Exception):
            self.capture.poll_unfinished()
        self.read_torch_fr()
        try:
            writer.note_end(how, detail)
            writer.sync()
        except Exception as exc:  # the ring is still read without it
            self.stats.recorder_errors += 1
            logger.warning("fr_otel: cannot mark the end of rank %s's ring: %r", self.rank, exc)

    def group_destroying(self, default: bool) -> None:
        """A process group is about to be destroyed: once the default one goes, torch's
        registry no longer names the groups, so torch's FR is read while it still does."""
        if default and self.ring is not None:
            self.read_torch_fr()

    def _end_by_signal(self, number: int) -> None:
        """The launcher's SIGTERM, once this rank's incident is declared: end by it, but
        not before a flush in progress in another thread (the training thread's, after its
        collective raised) has written its archive. Joining that incident returns at once,
        and ending then would lose every rank's evidence: torchrun's SIGTERM comes a
        moment after the failure, before the flush is done."""
        from fr_otel.recorder.triggers import end_by_signal

        if self._flush_lock.acquire(timeout=self.settings.flush_deadline_s):
            self._flush_lock.release()
        self._note_end("signal", _signal_name(number))
        end_by_signal(number)

    def aborted(self) -> None:
        """SIGABRT is ending this process (``std::terminate`` in a backend thread, a fatal
        check): called in the aborting thread, bounded by an alarm; flush it all."""
        if self.ring is not None:
            self._flush_job("aborted")
            self._note_end("abort", "SIGABRT")

    def _running(self) -> list[tuple[int, int, int]]:
        """(record, created ns, timeout ns) of the newest ops still running."""
        writer = self.ring
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

    def declare(
        self, reason: str, deadline: float | None = None, record: int | None = None
    ) -> str | None:
        """Declare an incident job-wide (or locally without a store) and flush this rank.

        Returns the incident id, which may be another rank's if it declared first. A
        failure noticed soon after an incident (its own consequence, typically: peers of a
        dead rank fail one after another) joins that incident instead of starting one;
        only an operator starts a new incident at any time. ``deadline`` (monotonic)
        bounds this rank's flush; default: ``flush_deadline_s`` from now. When this
        rank's id wins, its flush sends the incident's log record and count (``reason``
        is their kind; ``record``, the collective that failed, their trace), unless a
        person asked for it (``triggers.ASKED_FOR``: a snapshot is no failure)."""
        from fr_otel.recorder.triggers import ASKED_FOR

        latest = self._latest
        if (
            latest is not None
            and reason not in (*ASKED_FOR, "live_check")
            and time.monotonic() - latest[1] < INCIDENT_WINDOW_S
        ):
            return latest[0]
        candidate = new_incident_id(f"r{self.rank}", reason, self.settings.run_id)
        if reason not in ASKED_FOR:
            self._declaring[candidate] = (reason, record)
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
        if incident != candidate:
            self._declaring.pop(candidate, None)
        logger.warning("fr_otel: incident %s (%s on rank %s)", incident, reason, self.rank)
        self._handle(incident, deadline)
        return incident

    def _watched(self, reason: str) -> str | None:
        """The watch noticed an incident: declare it, with the record that ran past its
        timeout when that is why (the one the watch has seen since the last call; none
        for torch's FR ops, which the mirror watches)."""
        record = None
        if reason == "timeout" and self._watch is not None:
            new = set(self._watch.timeouts_seen) - self._timeouts_declared
            self._timeouts_declared |= new
            record = min(new) if new else None
        return self.declare(reason, record=record)

    def collective_failed(self, record: int, exc: BaseException) -> None:
        """A collective raised on the training thread: flush the job before it goes on."""
        self._flush_job("collective_error", record)

    def _flush_job(self, reason: str, record: int | None = None) -> None:
        """Declare an incident and wait for every rank's flush: this rank is about to end
        (or its error to surface), and a launcher tears the others down once it has.
        One deadline for both: the error surfaces within ``flush_deadline_s`` whatever the
        OTLP timeout (the export inside the flush stops at the deadline too)."""
        deadline = time.monotonic() + self.settings.flush_deadline_s
        try:
            incident = self.declare(reason, deadline, record)
            if incident is not None:
                self.wait_for_job(incident, deadline)
        except Exception as error:  # never replace the user's exception
            self.stats.recorder_errors += 1
            logger.warning("fr_otel flush after %s: %r", reason, error)

    def _handle(self, incident: str, deadline: float | None = None) -> None:
        with self._flush_lock:
            if incident in self._flushed:
                return
            self._flushed.add(incident)
            self._latest = (incident, time.monotonic())
            self.stats.incidents.append(incident)
            try:
                self._flush_all(incident, deadline)
            except Exception as exc:  # logged once, counted
                self.stats.recorder_errors += 1
                logger.warning("fr_otel flush of %s failed: %r", incident, exc)

    def _flush_all(self, incident: str, deadline: float | None = None) -> None:
        from fr_otel.recorder.adopt import flush_dead_rings, note_incident
        from fr_otel.recorder.flush import flush_ring, send_deferred, torch_fr_dump

        if deadline is None:
            deadline = time.monotonic() + self.settings.flush_deadline_s
        writer = self.ring
        if writer is None:
            return
        note_incident(self.settings, incident)
        self.capture.poll_unfinished()
        self.read_torch_fr()
        already = self._already_sent()
        # local evidence first: this ring and the dead ones on this host are archived
        # before any span is sent
        deferred: list[Any] = []
        report = flush_ring(
            self.snapshot(),
            settings=self.settings,
            incident=incident,
            exporter=self._exporter,
            deadline=deadline,
            already_sent=already,
            raw_dump=torch_fr_dump(),
            deferred=deferred,
            declaration=self._declaration(incident),
        )
        writer.note_flushed(incident)
        writer.sync()
        adopted = list(
            flush_dead_rings(
                self.settings,
                incident,
                exporter=self._exporter,
                deadline=deadline,
                skip=writer.base,
                deferred=deferred,
            )
        )
        send_deferred(deferred, deadline)
        for flushed in (report, *adopted):
            self._record(flushed)

    def _declaration(self, incident: str) -> Any:
        """This rank's declaration of ``incident`` (``flush.Declaration``), None when
        another rank's (or an operator's elsewhere) declaration won."""
        declaring = self._declaring.pop(incident, None)
        if declaring is None:
            return None
        from fr_otel.otel.incident import IncidentCounter
        from fr_otel.recorder.flush import Declaration

        if self._incident_counter is None:
            self._incident_counter = IncidentCounter(start_ns=self._started_ns)
        trigger, record = declaring
        return Declaration(trigger=trigger, counter=self._incident_counter, record=record)

    def _already_sent(self) -> frozenset[int]:
        """Records continuous mode has sent, in ``snapshot()``'s record ids."""
        already = self._stream.already_sent() if self._stream is not None else frozenset()
        if self._mirror_stream is not None:
            from fr_otel.recorder.ring import TORCH_RECORD_OFFSET

            torch_sent = self._mirror_stream.already_sent()
            already = already | frozenset(r + TORCH_RECORD_OFFSET for r in torch_sent)
        return already

    def _record(self, report: Any) -> None:
        self.stats.flushes.append(report)
        self.stats.spans_sent += report.spans_sent
        self.stats.spans_spooled += report.spans_spooled
        for problem in report.problems:
            logger.warning("fr_otel flush of rank %s: %s", report.rank, problem)
        if self._channel is not None:
            with contextlib.suppress(Exception):  # the store is gone; the files are written
                self._channel.mark_flushed(report.incident)

    def wait_for_job(self, incident: str, deadline: float | None = None) -> int:
        """Wait (up to ``deadline``, monotonic; default the flush deadline from now) until
        every rank has flushed; return how many did.

        Meanwhile it keeps flushing the rings of ranks that die: a rank whose peer just
        crashed often notices before the kernel has released the dead rank's ring."""
        if self._channel is None or self.world is None:
            return 1
        from fr_otel.recorder.adopt import flush_dead_rings

        if deadline is None:
            deadline = time.monotonic() + self.settings.flush_deadline_s
        count = 0
        while True:
            try:
                count = int(self._channel.flushed(incident))
            except Exception as exc:  # the store's host is gone: nothing left to count
                logger.warning(
                    "fr_otel: cannot tell how many ranks flushed incident %s: the job's store"
                    " does not answer (%r); this rank's own flush is done",
                    incident,
                    exc,
                )
                return count
            if count >= self.world or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
            with self._flush_lock:
                for adopted in flush_dead_rings(
                    self.settings,
                    incident,
                    exporter=self._exporter,
                    deadline=deadline,
                    skip=self.ring.base if self.ring is not None else None,
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
        return sum(int(s.sent) for s in (self._stream, self._mirror_stream) if s is not None)

    @property
    def mirror_stats(self) -> Any:
        """The torch FR mirror's ``MirrorStats`` (None when it could not start)."""
        mirror = self._mirror
        return mirror.stats if mirror is not None else None

    # --- stop ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the threads, wait for a flush in progress, send what is left (at exit)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        atexit.unregister(self.close)
        if self._watch is not None:
            self._watch.stop()
        if self._last_gasp:
            from fr_otel.recorder import _lastgasp

            _lastgasp.uninstall()
            self._last_gasp = False
        if self._listener is not None and self._listener is not threading.current_thread():
            self._listener.join(timeout=self.settings.flush_deadline_s)
        if self._flush_lock.acquire(timeout=self.settings.flush_deadline_s):
            self._flush_lock.release()
        # in every mode: what torch saw since the last read goes into the ring (and out,
        # in continuous mode) before the ring says the rank ended
        self._note_end("exit")
        if self._mirror_stream is not None:
            missed = self.mirror_stats.missed if self.mirror_stats is not None else 0
            if missed:
                logger.warning(
                    "fr_otel: torch's Flight Recorder overwrote %d collectives before the"
                    " recorder read them: no span was sent for them (they came faster than"
                    " its reads of torch's buffer keep up with)",
                    missed,
                )
        for stream in (self._stream, self._mirror_stream):
            if stream is None:
                continue
            stream.stop()
            # the process is exiting: one short try, then the spool
            stream.export_once(deadline_s=1.0)
            self.stats.spans_sent += stream.sent
            self.stats.spans_spooled += stream.spooled
            self.stats.spans_dropped += stream.dropped
            if stream.dropped:
                logger.warning(
                    "fr_otel: %d spans dropped (ring overwritten before export)",
                    stream.dropped,
                )
        self._stream = self._mirror_stream = None
        self.stats.recorder_errors += self.capture.errors
        writer, self.ring, self._writer_failed = self.ring, None, True
        self.capture.detach()
        if writer is not None:
            # closing drops the ring's lock: the file stays for whoever reads it later
            writer.close()
        mirror, self._mirror = self._mirror, None
        if mirror is not None:
            with self._mirror_lock:
                mirror.close()


def _open_mirror(writer: RingWriter, settings: RecorderSettings, capture: Any) -> Any:
    """The mirror of torch's FR into the rank's torch ring, or None (said once) where it
    cannot be opened: the hooks' records still go out."""
    try:
        from fr_otel.config import torch_fr_buffer_size
        from fr_otel.recorder.frsource import FrMirror
        from fr_otel.recorder.process_groups import describe_group, torch_groups
        from fr_otel.recorder.ring import torch_ring_base

        return FrMirror(
            main=writer,
            base=torch_ring_base(writer.base),
            groups=torch_groups,
            describe=describe_group,
            timeout_s=settings.timeout_s,
            hook_counters=lambda: capture.counters,
            complete=settings.mode == "continuous",
            fr_capacity=torch_fr_buffer_size(),
        )
    except Exception as exc:
        logger.warning(
            "fr_otel: collectives issued from C++ (DDP, functional collectives) will not be "
            "recorded: cannot open the torch ring beside %s: %r",
            writer.base,
            exc,
        )
        return None


def _chain_exception_hooks(recorder: Recorder) -> None:
    """Uncaught exceptions in any thread declare an incident before the usual report."""
    import sys

    previous = sys.excepthook

    def excepthook(kind: Any, value: BaseException, traceback: Any) -> None:
        recorder.uncaught(value)
        previous(kind, value, traceback)

    sys.excepthook = excepthook
    previous_thread = threading.excepthook

    def thread_excepthook(args: Any) -> None:
        thread = args.thread
        if args.exc_value is not None and not (thread and thread.name.startswith("fr_otel")):
            recorder.uncaught(args.exc_value, main_thread=thread is threading.main_thread())
        previous_thread(args)

    threading.excepthook = thread_excepthook


RUN_ID_KEY = "fr_otel/run_id"


def _shared_run_id(c10d: Any) -> str | None:
    """No launcher named the run: the first rank to ask the job's store makes the id, and
    every rank reads that one (one compare-and-set each). None without a store that can:
    the rings then go where they went before runs had ids."""
    from fr_otel.config import new_run_id

    try:
        store = c10d._get_default_store()
        agreed = store.compare_set(RUN_ID_KEY, "", new_run_id())
        return bytes(agreed).decode() or None
    except Exception as exc:  # a store without compare_set: FileStore, HashStore, ...
        logger.info("fr_otel: no run id from the job's store (%r)", exc)
        return None


def _install_last_gasp(recorder: Recorder) -> bool:
    """Flush before a SIGABRT ends the rank. The flush of an aborting rank is bounded like
    any other (its own flush and the wait for the job, a deadline each), and the alarm
    behind it by a second more: after that the process dies as it would have."""
    try:
        from fr_otel.recorder import _lastgasp
    except ImportError:  # not compiled here: what the mirror read before is what is left
        return False
    limit = math.ceil(2 * recorder.settings.flush_deadline_s) + 1
    try:
        return _lastgasp.install(recorder.aborted, limit)
    except OSError as exc:
        logger.info("fr_otel: no flush on SIGABRT: %r", exc)
        return False


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _torch_dump_file(rank: int) -> Path | None:
    from fr_otel.config import torch_dump_prefix

    prefix = torch_dump_prefix()
    return Path(f"{prefix}{rank}") if prefix else None


def _preload() -> None:
    with contextlib.suppress(Exception):  # pyarrow's default stays: slower, not wrong
        _system_allocator()
    for module in (
        "fr_otel.archive.rows",
        "fr_otel.otel.wire",
        "fr_otel.recorder.flush",
        "fr_otel.otel.incident_delivery",
    ):
        with contextlib.suppress(Exception):  # the flush will report it
            importlib.import_module(module)


def _system_allocator() -> None:
    """Make pyarrow allocate with the C library's malloc in this process, unless the user
    chose an allocator (``ARROW_DEFAULT_MEMORY_POOL``).

    The recorder's threads build Arrow columns while the training thread runs. With
    pyarrow's default (its bundled mimalloc), the continuous export's encoding of the
    same spans costs several times more CPU in some passes than in others, with no more
    page faults; with the system allocator every pass costs alike, and the export
    thread's CPU per training step is lower. Buffers allocated before the switch are
    freed to the pool they came from.
    """
    from fr_otel.config import arrow_pool_chosen

    if arrow_pool_chosen():
        return
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
