"""``fr-otel run -- CMD``: the job's command with the recorder in every rank.

The command runs as a child with ``FR_OTEL_AUTOINSTALL=1`` and the ``boot`` folder first on
``PYTHONPATH`` (``autoinstall``). Relative archive and ring paths are made absolute first,
so ranks that change directory still write to the same place. After the command ends, the
launcher flushes the rings of ranks that died without flushing for an incident the job
declared (all ranks of a host killed at once leave nobody else to do it), and removes the
trigger FIFOs that ranks killed outright left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fr_otel import config
from fr_otel.recorder.flush import FlushReport

BOOT_DIR = Path(__file__).resolve().parent / "boot"


def child_environment(
    overrides: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment ``fr-otel run`` gives the command."""
    env = dict(os.environ if environ is None else environ)
    env.update(overrides)
    env[config.FR_OTEL_AUTOINSTALL] = "1"
    # one id for the ranks and for this launcher, which finds their rings by it
    env[config.FR_OTEL_RUN_ID] = config.run_id(env) or config.new_run_id()
    env[config.FR_OTEL_ARCHIVE] = str(config.archive_dir(None, env).absolute())
    ring_dir = env.get(config.FR_OTEL_RING_DIR, "").strip()
    if ring_dir:
        env[config.FR_OTEL_RING_DIR] = str(Path(ring_dir).absolute())
    paths = [str(BOOT_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


@dataclass(kw_only=True)
class RunResult:
    returncode: int
    settings: config.RecorderSettings
    incidents: list[str] = field(default_factory=list)
    late_flushes: list[FlushReport] = field(default_factory=list)
    empty: dict[str, str] = field(default_factory=dict)
    """Incident -> why the archive holds no rank of it (an empty incident is said, never
    skipped in silence)."""


def run(command: Sequence[str], overrides: Mapping[str, str]) -> RunResult:
    """Run ``command`` under the recorder; signals to the launcher reach the command."""
    env = child_environment(overrides)
    settings = config.recorder_settings(environ=env)
    started_ns = time.time_ns()
    child = subprocess.Popen(list(command), env=env)
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
    previous = {}
    for number in forwarded:
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            previous[number] = signal.signal(number, lambda n, _f: child.send_signal(n))
    try:
        returncode = child.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return finish(settings, returncode, started_ns)


def finish(settings: config.RecorderSettings, returncode: int, started_ns: int) -> RunResult:
    """After the job: flush, for each incident it declared, the rings nobody flushed.

    A job that failed without declaring any incident (its ranks were killed before they
    could: a crash, then the launcher's SIGTERM to the others) gets one here,
    ``<time>-launcher-job_failed``, holding every ring of the run."""
    from fr_otel.recorder.adopt import (
        flush_dead_rings,
        known_incidents,
        note_incident,
        remove_dead_triggers,
    )
    from fr_otel.recorder.incident_ids import new_incident_id

    result = RunResult(returncode=returncode, settings=settings)
    result.incidents = known_incidents(settings, started_ns)
    declared_here = None
    if returncode != 0 and not result.incidents:
        incident = declared_here = new_incident_id("launcher", "job_failed", settings.run_id)
        note_incident(settings, incident)
        result.incidents = [incident]
    exporter = None
    if settings.otlp is not None and result.incidents:
        from fr_otel.otel.transport import exporter_for

        exporter = exporter_for(settings.otlp)
    from fr_otel.recorder.flush import launcher_declaration, send_deferred

    for incident in result.incidents:
        deadline = time.monotonic() + settings.flush_deadline_s
        # every ring archived before any is exported: a Collector that never answers
        # cannot spend the time the local evidence needs
        deferred: list[Callable[[float], None]] = []
        if incident == declared_here and settings.otlp is not None:
            # nobody else declared it: its log record and count are the launcher's to send
            deferred.append(launcher_declaration(settings, incident, "job_failed", started_ns))
        result.late_flushes.extend(
            flush_dead_rings(
                settings,
                incident,
                exporter=exporter,
                deadline=deadline,
                since_ns=started_ns,
                deferred=deferred,
            )
        )
        send_deferred(deferred, deadline)
    if exporter is not None:
        exporter.shutdown()
    remove_dead_triggers(settings)
    from fr_otel.archive.layout import partition_dir

    for incident in result.incidents:
        if not partition_dir(settings.archive, settings.job, incident).is_dir():
            result.empty[incident] = _why_empty(settings, started_ns)
    return result


def _why_empty(settings: config.RecorderSettings, started_ns: int) -> str:
    from fr_otel.recorder.ring import read_ring, run_ring_bases, run_ring_dir

    rings = held = 0
    for base in run_ring_bases(settings.rings, settings.job, settings.run_id):
        try:
            contents = read_ring(base)
        except (OSError, ValueError):
            continue
        if contents.created_ns < started_ns:
            continue  # another run's
        rings += 1
        held += bool(contents.slots)
    if not rings:
        return (
            "no rank of this run opened a ring under"
            f" {run_ring_dir(settings.rings, settings.job, settings.run_id)}"
            " (no process group was created, or the recorder was disabled)"
        )
    if not held:
        return f"the {rings} rings of this run hold no collective: no rank issued one"
    return (
        f"{held} of this run's {rings} rings hold collectives, but none was archived in"
        f" {settings.archive}: see the recorder's warnings above"
    )
