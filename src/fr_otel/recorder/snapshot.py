"""A snapshot of a running job, asked from outside it (``fr-otel snapshot``).

It is the operator's trigger: a byte written to one live rank's FIFO (``rank-N.trigger``
beside its ring) declares an incident job-wide through the job's store, every rank
archives its whole buffer, and training goes on. One rank is enough, and only one is
asked: two operator triggers would be two snapshots. The ranks note the incident beside
their rings, which is how the snapshot's id comes back.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from fr_otel.config import RecorderSettings
from fr_otel.errors import ArchiveError
from fr_otel.recorder.adopt import known_incidents
from fr_otel.recorder.ring import adopted, ring_bases
from fr_otel.recorder.triggers import LIVE_CHECK_REQUEST

POLL_S = 0.1


@dataclass(frozen=True)
class Snapshot:
    run_id: str | None
    trigger: Path
    """The FIFO written to."""
    incident: str | None
    """The snapshot's incident id; None when no rank noted one within the wait."""


def live_runs(settings: RecorderSettings) -> dict[str | None, list[Path]]:
    """Run id -> the rings of this job on this host whose owner is alive (it holds the
    ring's lock), lowest rank first."""
    runs: dict[str | None, list[Path]] = {}
    for base in ring_bases(settings.rings, settings.job):
        with adopted(base) as ours:
            if ours:
                continue  # nobody holds it: its rank has ended
        run = base.parent.name.removeprefix("run=") if base.parent.name.startswith("run=") else None
        runs.setdefault(run, []).append(base)
    return runs


def request_snapshot(
    settings: RecorderSettings, wait_s: float = 30.0, *, live_check: bool = False
) -> Snapshot:
    """Ask the running job of ``settings.job`` (its run ``settings.run_id``, or the only
    one running here) for a snapshot; wait up to ``wait_s`` for its incident id.
    ``live_check``: the live check asks, for its verdict (trigger ``live_check``, which
    alerts), not an operator (``operator``, which does not)."""
    runs = live_runs(settings)
    if settings.run_id is not None:
        runs = {r: b for r, b in runs.items() if r == settings.run_id}
    where = settings.rings / f"job={settings.job}"
    if not runs:
        raise ArchiveError(
            f"no running rank of job {settings.job!r} on this host (no ring under {where} is"
            " held by a live process): a snapshot is taken on a host where the job runs"
        )
    if len(runs) > 1:
        raise ArchiveError(
            f"{len(runs)} runs of job {settings.job!r} are running here; choose one with"
            f" --run: {', '.join(sorted(r or '(no run id)' for r in runs))}"
        )
    [(run_id, bases)] = runs.items()
    settings = replace(settings, run_id=run_id)
    before = set(known_incidents(settings))
    for base in bases:
        trigger = base.with_suffix(".trigger")
        if _poke(trigger, LIVE_CHECK_REQUEST if live_check else b"\n"):
            break
    else:
        raise ArchiveError(
            f"no live rank of job {settings.job!r} listens on its trigger FIFO under {where}"
            f" (FR_OTEL_TRIGGER_SIGNAL and the FIFO need the recorder's watch thread)"
        )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        new = [i for i in known_incidents(settings) if i not in before]
        if new:
            return Snapshot(run_id=run_id, trigger=trigger, incident=new[0])
        time.sleep(POLL_S)
    return Snapshot(run_id=run_id, trigger=trigger, incident=None)


def _poke(trigger: Path, data: bytes) -> bool:
    """Write ``data`` to a rank's FIFO; False when nobody reads it (the rank is gone)."""
    try:
        fd = os.open(trigger, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENOENT):
            return False
        raise
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return True
