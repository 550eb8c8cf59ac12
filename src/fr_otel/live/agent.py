"""The node agent: ``fr-otel run``'s thread that watches this host's rings while the job
runs, and names a desync's culprit within seconds.

Each look (``LiveSettings.interval_s``, once a second by default) reads what every local
rank issued since the last one (``heads``, as ``columns``), places it on the board
(``compare``), and
hands each complete candidate to the analyzer (``confirm``). The first confirmed desync is
the verdict: said at once (``on_verdict``), followed by an incident every rank flushes
(``declare``), its record written into the archive (``verdict``), and, with the ``abort``
policy, the end of the job once the ranks have flushed. Later desyncs of the same job are
usually the first one's consequences: the agent stops looking after it.

Each look also finds stalls (``stall``): members of a group waiting in a collective that a
running member has not issued, past a threshold. The laggard is asked for its training
thread's stack through its trigger FIFO (``stack_request``), and the suspect is said with
where that thread is (``on_suspect``) and recorded; it declares an incident only on
request (``LiveSettings.stall_incident``).

Nothing here touches a training process: the rings are files on this host's disk, read
with ``pread`` and ``stat``; a rank's liveness is read from its pid, never from its ring's
lock, which a rank taking its file over must find free. The agent's own failures are said
once each (``on_notice``) and never end the job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fr_otel import config
from fr_otel.config import LiveSettings, RecorderSettings
from fr_otel.live.columns import Ids
from fr_otel.live.compare import Board, Candidate
from fr_otel.live.confirm import analyse_rings
from fr_otel.live.declare import declare, wait_for_flush
from fr_otel.live.heads import RankRings
from fr_otel.live.otlp import blind_metrics
from fr_otel.live.records import write_record
from fr_otel.live.send import send_in_background, send_metrics_in_background
from fr_otel.live.stall import Stall, StallWatch
from fr_otel.live.suspect import KIND as STALL_KIND
from fr_otel.live.suspect import StallSuspect, make_suspect
from fr_otel.live.verdict import Verdict, make_verdict
from fr_otel.recorder.incident_ids import new_incident_id
from fr_otel.recorder.ring import run_ring_bases, run_ring_dir
from fr_otel.recorder.stack_request import RankStack, read_stack, request_stack
from fr_otel.recorder.triggers import trigger_path

logger = logging.getLogger(__name__)

DECLARE_WAIT_S = 10.0
"""How long the ranks have to say the id of the incident the verdict declared."""
FLUSH_MARGIN_S = 5.0
"""``abort``: how much longer than the ranks' own flush deadline the agent waits for their
flush before it ends the job anyway."""
SETTLE_SEQS = 4
"""A candidate the analyzer does not confirm is analysed again as its group moves on, until
every running member is this many collectives past it: some desyncs are named only from
what follows them (a skip whose later collectives are shifted, where the skipped and the
next collective look alike)."""
SETTLED_KEPT = 64
"""Cleared candidates kept for the last look: the analysis of a running job reads only
what every member has finished, and names a skip whose collectives look alike only once
some member is stuck; the rings as the job left them are analysed once more for them."""
CLEARED_BEFORE_SPACING = 20
"""Candidates the analyzer may clear before confirmations are spaced out: a pre-check
that keeps finding differences the analyzer accepts would otherwise cost an analysis per
look."""
RESCAN_LOOKS = 20
"""The ring folder is listed again this often even when its mtime has not changed."""
SPACING_FACTOR = 10
"""Once spaced out, a confirmation waits this many times the last one's cost."""
STACK_WAIT_S = 5.0
"""How long a rank has to write the stack the agent asked for: its watch reads the FIFO
at once, unless it is in the middle of a read of torch's FR."""
_HOST = config.host_name()
"""The name this host's ranks write in their rings (``FR_OTEL_HOST`` or the host name)."""


@dataclass(kw_only=True)
class _Asked:
    """A stall whose laggards were asked for their stacks."""

    stall: Stall
    asked_ns: int
    deadline: float
    """Monotonic: when it is said with whatever stacks came."""


@dataclass(kw_only=True)
class _Trial:
    """A candidate waiting for the analyzer's word."""

    candidate: Candidate
    frontier: int | None = None
    """How far its group had gone at its last analysis (None: not analysed yet)."""


class LiveCheck:
    """The agent's thread and what it found (see the module's docstring)."""

    def __init__(
        self,
        *,
        settings: RecorderSettings,
        live: LiveSettings,
        on_verdict: Callable[[Verdict], None],
        on_notice: Callable[[str], None],
        end_job: Callable[[], None],
        on_suspect: Callable[[StallSuspect], None] | None = None,
    ) -> None:
        self.settings = settings
        self.live = live
        self._on_verdict = on_verdict
        self._on_suspect = on_suspect
        self._on_notice = on_notice
        self._end_job = end_job
        self._rings: dict[Path, RankRings] = {}
        self._ids = Ids()
        self._board = Board(self._ids)
        self._stalls = StallWatch(live.stall_s, self._ids)
        self._asked: list[_Asked] = []
        self.suspects: list[StallSuspect] = []
        self._pending: list[_Trial] = []
        self._cleared: set[object] = set()
        self._settled: deque[_Trial] = deque(maxlen=SETTLED_KEPT)
        """Cleared by the analysis of a running job (see ``SETTLED_KEPT``)."""
        self._next_confirm = 0.0
        self._said: set[str] = set()
        self._folder_stamp: int | None = None
        # once: a Path made on every look cost a tenth of a look
        self._folder = str(run_ring_dir(settings.rings, settings.job, settings.run_id))
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fr-otel-live", daemon=True)
        self.verdict: Verdict | None = None
        self.aborted = False
        """The agent ended the job (``abort`` policy)."""
        self.looks = 0
        self.confirmations = 0
        self.preload_cpu_s = 0.0
        """CPU the thread spent importing the analysis before its first look (once)."""
        self.blind_ranks: dict[int, str] = {}
        """Ranks whose rings the last look could not read, and why."""
        self.blind_looks = 0
        """How many times ranks became unreadable."""
        self._began_ns = time.time_ns()
        self._blind_sent: threading.Thread | None = None

    def start(self) -> None:
        self._thread.start()

    @property
    def bytes_read(self) -> int:
        """What the looks read of the rings so far (slots and counters)."""
        return sum(rings.bytes_read for rings in self._rings.values())

    @property
    def native_id(self) -> int | None:
        """The agent thread's id for the OS (its CPU is read from ``/proc``)."""
        return self._thread.native_id

    def stop(self, timeout_s: float) -> None:
        """After the job: one last look at the rings as the ranks left them, then stop."""
        self._halt.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        began = time.thread_time()
        try:
            _preload()
        except Exception as exc:  # the confirmation will say it, with its cause
            logger.debug("live check: preload failed: %r", exc)
        self.preload_cpu_s = time.thread_time() - began
        while not self._halt.wait(self.live.interval_s) and self.verdict is None:
            self._guarded_look(final=False)
        if self.verdict is None:
            self._guarded_look(final=True)  # the rings as the job left them
        for rings in self._rings.values():
            rings.close()

    def _guarded_look(self, final: bool) -> None:
        try:
            self.look(final)
        except Exception as exc:  # the agent must outlive its own bugs
            self._say_once("look", f"live check: a look failed ({exc!r}); it goes on")

    def look(self, final: bool = False) -> None:
        """One look at this host's rings (see the module's docstring); ``final``: the
        last, once the job has ended (every candidate still open is analysed)."""
        self.looks += 1
        self._find_rings()
        looked = []
        blind: dict[int, str] = {}
        for rings in self._rings.values():
            try:
                looked.append(rings.new_columns(self._ids))
            except (OSError, ValueError) as exc:
                blind[rings.rank] = str(exc)
        self._note_blind(blind)
        # a rank the agent cannot read is compared no more: a slot would wait for it forever
        running = [
            rings.rank
            for rings in self._rings.values()
            if rings.rank not in blind and _running(rings)
        ]
        self._pending += [_Trial(candidate=c) for c in self._board.add_columns(looked, running)]
        self._stalls.add_columns(looked)
        if not final:
            self._look_for_stalls(running)
        self._confirm_pending(running, final)

    def _note_blind(self, blind: dict[int, str]) -> None:
        """Say once when the agent stops seeing ranks (and which), and when it sees them
        again, on stderr and as metrics to the Collector; ``blind_ranks`` is what it cannot
        see now."""
        lost = sorted(set(blind) - set(self.blind_ranks))
        back = sorted(set(self.blind_ranks) - set(blind))
        self.blind_ranks = dict(blind)
        if lost:
            self.blind_looks += 1
            first = blind[lost[0]]
            self._on_notice(
                f"live check: blind to rank{'s' if len(lost) > 1 else ''}"
                f" {', '.join(map(str, lost))}: cannot read {'their' if len(lost) > 1 else 'its'}"
                f" ring ({first}); the other ranks are still compared, and the incident"
                " path is as without the check"
            )
        if back:
            self._on_notice(
                f"live check: sees rank{'s' if len(back) > 1 else ''}"
                f" {', '.join(map(str, back))} again"
            )
        if lost or back:
            self._send_blindness()

    def _send_blindness(self) -> None:
        """The blindness as metrics, sent when it changes (``live.otlp.blind_metrics``)."""
        self._blind_sent = send_metrics_in_background(
            blind_metrics(
                job=self.settings.job,
                run_id=self.settings.run_id,
                host=_HOST,
                blind=self.blind_ranks,
                episodes=self.blind_looks,
                since_ns=self._began_ns,
                now_ns=time.time_ns(),
            ),
            self.settings.otlp,
            self._say_once,
            after=self._blind_sent,
        )

    def _find_rings(self) -> None:
        """Follow the rings ranks made since the last look. The folder is listed only
        when it changed (its mtime), or every ``RESCAN_LOOKS`` looks where mtimes are
        coarse: listing and sorting a large host's rings on every look would cost far
        more than the look itself."""
        try:
            stamp: int | None = os.stat(self._folder).st_mtime_ns
        except OSError:
            stamp = None
        if stamp == self._folder_stamp and self.looks % RESCAN_LOOKS:
            return
        self._folder_stamp = stamp
        for base in run_ring_bases(self.settings.rings, self.settings.job, self.settings.run_id):
            if base not in self._rings:
                self._rings[base] = RankRings(base)

    def _confirm_pending(self, running: Collection[int], final: bool) -> None:
        """One analysis of the rings for every open candidate whose group moved since its
        last (see ``SETTLE_SEQS``): the first confirmed is the verdict."""
        self._pending = [t for t in self._pending if t.candidate.pattern not in self._cleared]
        if final:
            self._pending += self._settled
            self._settled.clear()
        due = [
            trial
            for trial in self._pending
            if final
            or trial.frontier is None
            or self._board.frontier(trial.candidate, running) != trial.frontier
        ]
        if not due or (time.monotonic() < self._next_confirm and not final):
            return
        try:
            snapshot = analyse_rings(self.settings)
        except Exception as exc:
            self._say_once("analysis", f"live check: the analysis of its rings failed: {exc!r}")
            return
        self.confirmations += 1
        for trial in due:
            candidate = trial.candidate
            finding = snapshot.desync_at(candidate)
            if finding is not None:
                self._act(
                    make_verdict(
                        finding=finding,
                        candidate=candidate,
                        verdict_id=new_incident_id("live", finding.kind, self.settings.run_id),
                        analysis_s=snapshot.seconds,
                        running=snapshot.running,
                        job=self.settings.job,
                        run_id=self.settings.run_id,
                        policy=self.live.policy,
                    )
                )
                return
            trial.frontier = frontier = self._board.frontier(candidate, running)
            if final or frontier >= candidate.seq + SETTLE_SEQS:
                self._cleared.add(candidate.pattern)  # the analyzer finds it legal
                self._pending.remove(trial)
                if snapshot.running:
                    self._settled.append(trial)
        if len(self._cleared) >= CLEARED_BEFORE_SPACING:
            self._next_confirm = time.monotonic() + SPACING_FACTOR * snapshot.seconds

    def _look_for_stalls(self, running: Collection[int]) -> None:
        """Ask each new stall's laggards for their stacks; say the stalls whose stacks
        came (or whose wait for them is over)."""
        by_rank = {rings.rank: rings for rings in self._rings.values()}

        def complete_as_of(rank: int) -> int:
            rings = by_rank.get(rank)
            return rings.complete_as_of() if rings is not None else 0

        for stall in self._stalls.check(time.time_ns(), running, complete_as_of):
            asked_ns = time.time_ns()
            for rank in stall.laggards:
                if rank in by_rank:
                    request_stack(trigger_path(by_rank[rank].base))
            self._asked.append(
                _Asked(stall=stall, asked_ns=asked_ns, deadline=time.monotonic() + STACK_WAIT_S)
            )
        still = []
        for asked in self._asked:
            stacks = {
                rank: stack
                for rank in asked.stall.laggards
                if rank in by_rank
                and (stack := read_stack(by_rank[rank].base, asked.asked_ns)) is not None
            }
            if len(stacks) < len(asked.stall.laggards) and time.monotonic() < asked.deadline:
                still.append(asked)
                continue
            self._suspect(asked.stall, stacks)
        self._asked = still

    def _suspect(self, stall: Stall, stacks: dict[int, RankStack]) -> None:
        suspect = make_suspect(
            stall=stall,
            stacks=stacks,
            suspect_id=new_incident_id(
                "live", f"{STALL_KIND}-pg{stall.group}-{stall.seq}", self.settings.run_id
            ),
            job=self.settings.job,
            run_id=self.settings.run_id,
        )
        if self._on_suspect is not None:
            self._on_suspect(suspect)
        if self.live.stall_incident:
            declared = declare(self.settings, stall.since_ns, DECLARE_WAIT_S)
            suspect = suspect.with_incident(declared.incident)
        self.suspects.append(suspect)
        path = write_record(self.settings.archive, suspect)
        send_in_background(suspect, self.settings.otlp, self._say_once)
        incident = f"; declared incident {suspect.incident}" if suspect.incident else ""
        self._on_notice(f"live: the stall suspect's record: {path}{incident}")

    def _stacks_of_running(self) -> dict[int, dict[str, Any]]:
        """``snapshot`` policy: every local running rank's current stack."""
        asked_ns = time.time_ns()
        bases = {
            rings.rank: rings.base
            for rings in self._rings.values()
            if _running(rings) and request_stack(trigger_path(rings.base))
        }
        found: dict[int, RankStack] = {}
        deadline = time.monotonic() + STACK_WAIT_S
        while len(found) < len(bases) and time.monotonic() < deadline:
            for rank, base in bases.items():
                if rank not in found and (stack := read_stack(base, asked_ns)) is not None:
                    found[rank] = stack
            time.sleep(0.05)
        return {rank: stack.to_json() for rank, stack in sorted(found.items())}

    def _act(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self._on_verdict(verdict)
        if self.live.policy == "snapshot":
            # before the flush: the stacks of the ranks as the verdict found them
            verdict = verdict.with_stacks(self._stacks_of_running())
        declared = declare(self.settings, verdict.divergence_ns, DECLARE_WAIT_S)
        incident = declared.incident
        self.verdict = verdict = verdict.with_incident(incident)
        path = write_record(self.settings.archive, verdict)
        send_in_background(verdict, self.settings.otlp, self._say_once)
        if incident is None:
            self._on_notice(f"live: no rank is left to flush for it; its record: {path}")
            return
        if declared.joined:
            what = f"the job's own incident {incident} holds its evidence"
        else:
            what = f"declared incident {incident}: every rank flushes its buffer"
        self._on_notice(f"live: {what}; the verdict's record: {path}")
        if self.live.policy != "abort":
            return
        deadline = time.monotonic() + self.settings.flush_deadline_s + FLUSH_MARGIN_S
        waited = wait_for_flush(self.settings, incident, deadline)
        if waited.late:
            self._on_notice(
                f"live: ranks {', '.join(map(str, waited.late))} had not flushed by the deadline"
            )
        if waited.unknown:
            self._on_notice(
                f"live: cannot tell whether ranks {', '.join(map(str, waited.unknown))}"
                " flushed: their rings cannot be read"
            )
        if not any(_running(rings) for rings in self._rings.values()):
            return  # the job ended by itself meanwhile: its own exit status stands
        self._on_notice("live: ending the job (FR_OTEL_LIVE_POLICY=abort)")
        self.aborted = True
        self._end_job()

    def _say_once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self._on_notice(message)


def _running(rings: RankRings) -> bool:
    """Whether the rank still runs: its record has no end, and its process lives (a rank
    killed outright writes no end). Read from the pid, not the ring's lock (see the
    module's docstring)."""
    contents = rings.contents
    if contents is None:
        return True  # nothing read yet: it is starting
    if contents.ended is not None or contents.pid is None:
        return contents.ended is None
    if contents.host is not None and contents.host != _HOST:
        return True  # a ring folder shared with other hosts: their pids are not ours
    try:
        with open(f"/proc/{contents.pid}/stat", "rb") as handle:
            # the state follows the command's closing parenthesis; Z: a zombie
            return handle.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _preload() -> None:
    """Pay the analysis's imports (DuckDB, pyarrow, the passes) while the ranks start,
    not when the first candidate needs them."""
    with contextlib.suppress(ImportError):
        import duckdb  # noqa: F401

        import fr_otel.analysis.engine
        import fr_otel.recorder.ring_import  # noqa: F401
