"""A verdict with findings as an incident signal (``otel.incident``: its log record and
count), sent by ``fr-otel analyze`` (when an OTLP endpoint is configured) and ``fr-otel
export --findings`` over OTLP, and the line that says what became of it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fr_otel.config import OTLP_TRACES_PATH

if TYPE_CHECKING:
    from fr_otel.analysis import Analysis
    from fr_otel.config import OtlpSettings
    from fr_otel.otel.incident_delivery import IncidentDelivery

ANALYZE_DEADLINE_S = 5.0
"""How long ``fr-otel analyze`` tries, retries included, once its verdict is out: the
Collector is usually on the same network; what it does not take in that time is
spooled."""


def send_verdict(
    analysis: Analysis,
    settings: OtlpSettings,
    *,
    run_id: str | None,
    started_ns: int,
    deadline: float,
    spool_dir: Path | None,
    verdict_sent: bool = False,
) -> IncidentDelivery | None:
    """Send the verdict's log record and count (None: a healthy analysis, nothing to
    send). The command is the emitter, counting from ``started_ns`` (when it started).
    ``deadline`` is ``time.monotonic()``'s; what is not delivered by then goes to
    ``spool_dir`` (None: lost, and said)."""
    from fr_otel.otel.incident import IncidentCounter, analysed
    from fr_otel.otel.incident_delivery import send_incident

    event = analysed(analysis, run_id=run_id, verdict_sent=verdict_sent)
    if event is None:
        return None
    counter = IncidentCounter(start_ns=started_ns)
    return send_incident(event, counter, settings, deadline=deadline, spool_dir=spool_dir)


def said(delivered: IncidentDelivery, settings: OtlpSettings, where: str, resend: str) -> str:
    """'job=J incident=I: the log record and the count sent, over OTLP to the Collector at
    URL', or what was
    spooled and ``resend``, the command that delivers it later."""
    collector = settings.endpoint.removesuffix(OTLP_TRACES_PATH)
    line = f"{where}: {delivered.words()}, over OTLP to the Collector at {collector}"
    if delivered.spooled:
        line += f"; deliver them later with: {resend}"
    return line
