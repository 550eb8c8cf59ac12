"""The node agent: ``fr-otel run``'s thread that watches this host's rings while the job
runs, and names a desync's culprit within seconds.

Each look (``LiveSettings.interval_s``, twice a second by default) reads what every local
rank issued since the last one (``heads``), places it on the board (``compare``), and
hands each complete candidate to the analyzer (``confirm``). The first confirmed desync is
the verdict: said at once (``on_verdict``), followed by an incident every rank flushes
(``declare``), its record written into the archive (``verdict``), and, with the ``abort``
policy, the end of the job once the ranks have flushed. Later desyncs of the same job are
usually the first one's consequences: the agent stops looking after it.

Nothing here touches a training process: the rings are files on this host's disk, read
with ``pread`` and ``stat``; a rank's liveness is read from its pid, never from its ring's
lock, which a rank taking its file over must find free. The agent's own failures are said
once each (``on_notice``) and never end the job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from fr_otel.config import LiveSettings, RecorderSettings
from fr_otel.live.compare import Board, Candidate
from fr_otel.live.confirm import analyse_rings
from fr_otel.live.declare import declare, wait_for_flush
from fr_otel.live.heads import RankRings
from fr_otel.live.verdict import Verdict, make_verdict, write_record
from fr_otel.recorder.incident_ids import new_incident_id
from fr_otel.recorder.ring import run_ring_bases, run_ring_dir

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
_HOST = socket.gethostname()


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
    ) -> None:
        self.settings = settings
        self.live = live
        self._on_verdict = on_verdict
        self._on_notice = on_notice
        self._end_job = end_job
        self._rings: dict[Path, RankRings] = {}
        self._board = Board()
        self._pending: list[_Trial] = []
        self._cleared: set[object] = set()
        self._settled: deque[_Trial] = deque(maxlen=SETTLED_KEPT)
        """Cleared by the analysis of a running job (see ``SETTLED_KEPT``)."""
        self._next_confirm = 0.0
        self._said: set[str] = set()
        self._folder_stamp: int | None = None
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fr-otel-live", daemon=True)
        self.verdict: Verdict | None = None
        self.aborted = False
        """The agent ended the job (``abort`` policy)."""
        self.looks = 0
        self.confirmations = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        """After the job: one last look at the rings as the ranks left them, then stop."""
        self._halt.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            _preload()
        except Exception as exc:  # the confirmation will say it, with its cause
            logger.debug("live check: preload failed: %r", exc)
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
        heads = []
        for base, rings in self._rings.items():
            try:
                heads += rings.new_heads()
            except (OSError, ValueError) as exc:
                self._say_once(
                    f"blind:{base}",
                    f"live check: cannot read the ring of rank {rings.rank} ({exc});"
                    " it is blind to that rank",
                )
        running = [rings.rank for rings in self._rings.values() if _running(rings)]
        self._pending += [_Trial(candidate=c) for c in self._board.add(heads, running)]
        self._confirm_pending(running, final)

    def _find_rings(self) -> None:
        """Follow the rings ranks made since the last look. The folder is listed only
        when it changed (its mtime), or every ``RESCAN_LOOKS`` looks where mtimes are
        coarse: listing and sorting 1,024 rings took 45 ms."""
        folder = run_ring_dir(self.settings.rings, self.settings.job, self.settings.run_id)
        try:
            stamp: int | None = os.stat(folder).st_mtime_ns
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

    def _act(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self._on_verdict(verdict)
        declared = declare(self.settings, verdict.divergence_ns, DECLARE_WAIT_S)
        incident = declared.incident
        self.verdict = verdict = verdict.with_incident(incident)
        path = write_record(self.settings.archive, verdict)
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
        late = wait_for_flush(self.settings, incident, deadline)
        if late:
            self._on_notice(
                f"live: ranks {', '.join(map(str, late))} had not flushed by the deadline"
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
