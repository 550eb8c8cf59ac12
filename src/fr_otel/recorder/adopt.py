"""Flushing the rings of ranks that died before they could flush themselves.

A rank killed outright (gloo's ``std::terminate`` on a size mismatch, ``kill -9``, the
OOM killer) leaves its ring file behind, unlocked. A surviving rank on the same host
flushes it during its own incident flush, and ``fr-otel run`` does the same for every
ring once the job has ended, so a host whose ranks all died is covered too. Whoever
holds a dead rank's ring also removes the trigger FIFO the rank could not remove.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from fr_otel.config import RecorderSettings
from fr_otel.otel.exporter import RequestExporter
from fr_otel.recorder.flush import FlushReport, flush_ring
from fr_otel.recorder.ring import (
    RingContents,
    adopted,
    append_flushed,
    read_ring,
    run_ring_bases,
    run_ring_dir,
)
from fr_otel.recorder.torch_ops import LearnedOps, learned_ops, taught
from fr_otel.recorder.triggers import trigger_path

logger = logging.getLogger(__name__)


def flush_dead_rings(
    settings: RecorderSettings,
    incident: str,
    *,
    exporter: RequestExporter | None,
    deadline: float,
    skip: Path | None = None,
    since_ns: int = 0,
    deferred: list[Callable[[float], None]] | None = None,
) -> Iterator[FlushReport]:
    """Flush every unlocked ring of this run of ``settings.job`` not yet flushed for ``incident``
    (only rings opened at ``since_ns`` or later: older ones are another run's). With
    ``deferred``, the spans wait there (``flush.send_deferred``) until every ring is
    archived. The torch ops a dead rank had not learned yet are taken from this host's
    other ranks (``torch_ops.taught``)."""
    bases = list(run_ring_bases(settings.rings, settings.job, settings.run_id))
    learned: LearnedOps | None = None
    for base in bases:
        if base == skip or time.monotonic() >= deadline:
            continue
        with adopted(base) as ours:
            if not ours:
                continue  # its rank is alive (it flushes itself) or another survivor has it
            _remove_trigger(base)
            try:
                contents = read_ring(base)
            except (OSError, ValueError) as exc:
                logger.warning("fr_otel: cannot read the ring of a dead rank at %s: %s", base, exc)
                continue
            if incident in contents.flushed or not contents.slots or contents.created_ns < since_ns:
                continue
            if learned is None:
                learned = learned_ops(_metas(bases))
            contents = taught(contents, learned)
            report = flush_ring(
                contents,
                settings=settings,
                incident=incident,
                exporter=exporter,
                deadline=deadline,
                deferred=deferred,
            )
            if report.archived is not None:
                append_flushed(base, incident)
            if report.archived is not None:
                logger.warning(
                    "fr_otel: flushed the ring of rank %d (dead) for incident %s",
                    contents.rank,
                    incident,
                )
            else:  # said as failed, never as flushed: its ring stays for a later try
                logger.warning(
                    "fr_otel: could not archive the ring of rank %d (dead) for incident %s: %s;"
                    " it stays at %s",
                    contents.rank,
                    incident,
                    "; ".join(report.problems) or "nothing written",
                    base,
                )
            yield report


def _metas(bases: list[Path]) -> Iterator[RingContents]:
    """The rings' metas (their slots left unread), those that can be read."""
    for base in bases:
        with contextlib.suppress(OSError, ValueError):
            yield read_ring(base, slots=False)


def remove_dead_triggers(settings: RecorderSettings) -> None:
    """Remove the trigger FIFOs of this run's ranks that are gone. A rank removes its own
    when its recorder stops or its launcher's signal ends it; one killed outright
    (``SIGKILL``, the OOM killer, ``SIGABRT``) cannot, and nobody can write to the FIFO of
    a dead rank anyway."""
    for base in run_ring_bases(settings.rings, settings.job, settings.run_id):
        with adopted(base) as ours:
            if ours:
                _remove_trigger(base)


def _remove_trigger(base: Path) -> None:
    """Only while holding ``base``'s ring (``adopted``): its rank is dead, and a rank that
    takes its number again makes its FIFO only once it holds the ring itself, so the FIFO
    removed here is never a live rank's."""
    with contextlib.suppress(OSError):
        trigger_path(base).unlink(missing_ok=True)


def _registry(settings: RecorderSettings) -> Path:
    return run_ring_dir(settings.rings, settings.job, settings.run_id) / "incidents"


def known_incidents(settings: RecorderSettings, since_ns: int = 0) -> list[str]:
    """Incidents the job's ranks on this host declared or learned of (noted at or after
    ``since_ns``), oldest first."""
    try:
        lines = _registry(settings).read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        noted, _, incident = line.partition(" ")
        if incident and noted.isdigit() and int(noted) >= since_ns:
            found.append(incident)
    return list(dict.fromkeys(found))


def note_incident(settings: RecorderSettings, incident: str) -> None:
    """Leave the incident id next to the rings, for ``fr-otel run`` to finish the flush of
    ranks that died with nobody left on their host."""
    path = _registry(settings)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            handle.write(f"{time.time_ns()} {incident}\n")


def join_local_incident(settings: RecorderSettings, candidate: str, window_s: float) -> str:
    """Without the job's store, agree on an incident id with the ranks of this host: the
    most recent one noted within ``window_s`` seconds, else ``candidate`` (noted)."""
    path = _registry(settings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            recent = known_incidents(settings, time.time_ns() - int(window_s * 1e9))
            if recent:
                return recent[-1]
            handle.write(f"{time.time_ns()} {candidate}\n")
    except OSError:
        pass
    return candidate
