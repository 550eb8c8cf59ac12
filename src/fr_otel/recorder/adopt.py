"""Flushing the rings of ranks that died before they could flush themselves.

A rank killed outright (gloo's ``std::terminate`` on a size mismatch, ``kill -9``, the
OOM killer) leaves its ring file behind, unlocked. A surviving rank on the same host
flushes it during its own incident flush, and ``fr-otel run`` does the same for every
ring once the job has ended, so a host whose ranks all died is covered too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

from fr_otel.config import RecorderSettings
from fr_otel.otel.transport import RequestExporter
from fr_otel.recorder.flush import FlushReport, flush_ring
from fr_otel.recorder.ring import adopted, append_flushed, read_ring, ring_bases

logger = logging.getLogger(__name__)


def flush_dead_rings(
    settings: RecorderSettings,
    incident: str,
    *,
    exporter: RequestExporter | None,
    deadline: float,
    skip: Path | None = None,
) -> Iterator[FlushReport]:
    """Flush every unlocked ring of ``settings.job`` not yet flushed for ``incident``."""
    for base in ring_bases(settings.rings, settings.job):
        if base == skip or time.monotonic() >= deadline:
            continue
        with adopted(base) as ours:
            if not ours:
                continue  # its rank is alive (it flushes itself) or another survivor has it
            try:
                contents = read_ring(base)
            except (OSError, ValueError) as exc:
                logger.warning("fr_otel: cannot read the ring of a dead rank at %s: %s", base, exc)
                continue
            if incident in contents.flushed or not contents.slots:
                continue
            report = flush_ring(
                contents, settings=settings, incident=incident, exporter=exporter, deadline=deadline
            )
            if report.archived is not None:
                append_flushed(base, incident)
            logger.warning(
                "fr_otel: flushed the ring of rank %d (dead) for incident %s",
                contents.rank,
                incident,
            )
            yield report


def known_incidents(settings: RecorderSettings) -> list[str]:
    """Incidents the job's ranks declared or learned of, oldest first."""
    path = settings.rings / f"job={settings.job}" / "incidents"
    try:
        lines = path.read_text().split()
    except OSError:
        return []
    return list(dict.fromkeys(line for line in lines if line))
