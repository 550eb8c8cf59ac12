"""What follows a verdict: an incident every rank flushes, and, on request, the job's end.

The incident is declared the way an operator's ``fr-otel snapshot`` declares one (bytes
to a live rank's trigger FIFO, ``recorder.snapshot``): every rank archives its whole
buffer through the job's store, and training goes on. The bytes say the live check asks
(trigger ``live_check``): its incident is a failure, and is signalled as one. A job that
already declared an incident since the divergence (a rank aborted by gloo on a size
mismatch, whose peers then fail) is not given a second one: the verdict names the job's
own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fr_otel.config import RecorderSettings
from fr_otel.errors import ArchiveError
from fr_otel.recorder.adopt import known_incidents
from fr_otel.recorder.ring import read_ring, run_ring_bases
from fr_otel.recorder.snapshot import live_runs, request_snapshot

POLL_S = 0.1


@dataclass(frozen=True, kw_only=True)
class Declared:
    incident: str | None
    """None: no rank of the run was left to ask, or none said the id in time."""
    joined: bool
    """The job had declared it itself since the divergence."""


def declare(settings: RecorderSettings, since_ns: int, wait_s: float) -> Declared:
    """The incident the ranks flush for a verdict whose divergence is at ``since_ns``:
    the job's own if it declared one since, else one declared now (its id awaited up to
    ``wait_s``)."""
    joined = known_incidents(settings, since_ns)
    if joined:
        return Declared(incident=joined[-1], joined=True)
    try:
        taken = request_snapshot(settings, wait_s=wait_s, live_check=True)
    except ArchiveError:  # every rank has ended: the launcher flushes what is left
        return Declared(incident=None, joined=False)
    return Declared(incident=taken.incident, joined=False)


@dataclass(frozen=True, kw_only=True)
class FlushWait:
    late: list[int]
    """Live ranks that had not noted the incident flushed by the deadline."""
    unknown: list[int]
    """Live ranks whose ring could not be read: whether they flushed is not known."""


def wait_for_flush(settings: RecorderSettings, incident: str, deadline: float) -> FlushWait:
    """Wait until every live rank of the run on this host noted ``incident`` flushed, or
    ``deadline`` (monotonic). A rank whose ring cannot be read is not waited for: it would
    hold the job's end to the deadline for a flush that may well be done."""
    while True:
        pending, unknown = [], []
        alive = set(live_runs(settings).get(settings.run_id, []))
        for base in run_ring_bases(settings.rings, settings.job, settings.run_id):
            if base not in alive:
                continue
            rank = int(base.name.removeprefix("rank-"))
            try:
                flushed = incident in read_ring(base).flushed
            except (OSError, ValueError):
                unknown.append(rank)
                continue
            if not flushed:
                pending.append(rank)
        if not pending or time.monotonic() >= deadline:
            return FlushWait(late=pending, unknown=unknown)
        time.sleep(POLL_S)
