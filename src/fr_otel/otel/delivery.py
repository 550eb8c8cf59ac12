"""Delivering requests through an exporter: ``send_all``.

``send_all`` drives an exporter (``fr_otel.otel.exporter``): retries with exponential
backoff and jitter (or the server's ``Retry-After`` / ``RetryInfo``), splits a request the
server finds too large, and stops at an overall deadline, returning the requests it could
not deliver so the caller can spool them (``fr_otel.otel.spool``).

Unlike the SDK exporters, a request refused for its size (HTTP 413, gRPC
``RESOURCE_EXHAUSTED`` without ``RetryInfo``) is split in two and both halves are sent:
the SDK retries it unchanged until its timeout and then drops it. Delivery is
at-least-once: an attempt whose answer was lost is sent again. Span ids are
deterministic (``fr_otel.otel.model``), so a receiver can drop duplicates.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from fr_otel.errors import ConfigError
from fr_otel.otel.exporter import AttemptResult, RequestExporter
from fr_otel.otel.payload import Payload, span_count
from fr_otel.otel.repeats import RepeatedWarnings, warn
from fr_otel.otel.split import split_request

logger = logging.getLogger(__name__)

INITIAL_BACKOFF_S = 0.5
"""First retry delay; doubled on each retry of the same request, up to ``MAX_BACKOFF_S``."""
MAX_BACKOFF_S = 8.0
"""A flush races a watchdog: long sleeps would only waste the little time there is."""


@dataclass
class SendReport:
    """What ``send_all`` (or ``spool.resend``) delivered and what it did not."""

    sent_requests: int = 0
    sent_spans: int = 0
    unsent: list[Payload] = field(default_factory=list)
    """Not delivered but deliverable later (receiver down, throttled, deadline): spool them."""
    rejected: list[Payload] = field(default_factory=list)
    """Refused for good (HTTP 400/401/404..., gRPC INVALID_ARGUMENT..., or a single span
    too large to split): the spec says to drop them; kept here for the caller to report."""
    attempts: int = 0
    """Export calls made, retries and split halves included."""
    retries: int = 0
    splits: int = 0
    partially_rejected_spans: int = 0
    """Spans the receiver dropped from requests it otherwise accepted (partial success)."""
    reasons: list[str] = field(default_factory=list)
    """Each distinct failure message, in the order first seen."""
    deadline_reached: bool = False
    elapsed_s: float = 0.0

    @property
    def unsent_spans(self) -> int:
        return sum(span_count(r) for r in self.unsent)

    @property
    def rejected_spans(self) -> int:
        return sum(span_count(r) for r in self.rejected)

    @property
    def ok(self) -> bool:
        """Everything delivered (partial-success drops aside)."""
        return not self.unsent and not self.rejected

    def note(self, reason: str) -> None:
        if reason and reason not in self.reasons:
            self.reasons.append(reason)

    def merge(self, other: SendReport) -> None:
        """Add ``other``'s counts and lists to this report (elapsed time excepted)."""
        self.sent_requests += other.sent_requests
        self.sent_spans += other.sent_spans
        self.unsent.extend(other.unsent)
        self.rejected.extend(other.rejected)
        self.attempts += other.attempts
        self.retries += other.retries
        self.splits += other.splits
        self.partially_rejected_spans += other.partially_rejected_spans
        for reason in other.reasons:
            self.note(reason)
        self.deadline_reached = self.deadline_reached or other.deadline_reached


def backoff_delay(retry: int) -> float:
    """Delay before retry number ``retry`` (0-based): exponential with "equal jitter", so
    ranks that failed together do not come back together, yet never retry at once."""
    ceiling = min(MAX_BACKOFF_S, INITIAL_BACKOFF_S * 2.0**retry)
    return random.uniform(ceiling / 2, ceiling)


def _empty(request: Payload) -> bool:
    return not request if isinstance(request, bytes) else not request.resource_spans


def _deliver(
    request: Payload,
    exporter: RequestExporter,
    deadline: float,
    report: SendReport,
    pending: deque[Payload],
    warnings: RepeatedWarnings | None = None,
) -> bool:
    """Send one request until it succeeds, is refused, is split or time runs out.

    Returns False when it ended unsent for lack of time (the caller stops there).
    """
    retry = 0
    while True:
        report.attempts += 1
        try:
            outcome = exporter.export(request, deadline)
        except Exception as exc:  # a flush racing a watchdog must not die on a bug here
            logger.exception("exporter failed on a request; keeping it unsent")
            report.note(f"exporter error: {type(exc).__name__}: {exc}")
            report.unsent.append(request)
            return True
        result = outcome.result
        if result is AttemptResult.SUCCESS:
            report.sent_requests += 1
            report.sent_spans += span_count(request)
            if outcome.rejected_spans:
                report.partially_rejected_spans += outcome.rejected_spans
                report.note(f"partial success: {outcome.detail}")
            return True
        report.note(f"{result.value}: {outcome.detail}")
        if result is AttemptResult.TOO_LARGE:
            try:
                halves = split_request(request)
            except DecodeError:
                halves = None  # bytes that are no request: nothing to split
            if halves is None:
                warn(
                    warnings,
                    logger,
                    "too-large",
                    "dropping a single %s the receiver finds too large",
                    "span" if span_count(request) else "request",
                )
                report.rejected.append(request)
            else:
                report.splits += 1
                pending.extendleft(reversed(halves))
            return True
        if result is AttemptResult.FAILURE:
            warn(
                warnings,
                logger,
                "refused",
                "receiver refused %s: %s",
                f"{count} spans" if (count := span_count(request)) else "a request",
                outcome.detail,
            )
            report.rejected.append(request)
            return True
        if outcome.retry_after_s is None:
            delay = backoff_delay(retry)
        else:
            # the server's delay first; if that fails too, never faster than the backoff
            delay = max(outcome.retry_after_s, backoff_delay(retry) if retry else 0.0)
        if time.monotonic() + delay >= deadline:
            report.unsent.append(request)
            report.deadline_reached = True
            return False
        logger.debug("retrying in %.2fs after: %s", delay, outcome.detail)
        time.sleep(delay)
        retry += 1
        report.retries += 1


def send_all(
    requests: Iterable[Payload],
    exporter: RequestExporter,
    *,
    deadline_s: float,
    warnings: RepeatedWarnings | None = None,
) -> SendReport:
    """Deliver ``requests`` within ``deadline_s`` seconds; never raises for the network.

    With ``warnings``, a caller that sends again and again (continuous mode) has each
    kind of failure logged once and then summed up, not once per call.

    Requests are pulled from ``requests`` one at a time (a generator is encoded as it is
    sent). Once time is up, the current request and every one not yet tried are returned
    in ``unsent`` without another attempt. Interrupted (``KeyboardInterrupt``), it
    re-raises with the report, its ``unsent`` complete, as the exception's
    ``send_report``, so the caller can spool what is left.
    """
    if not deadline_s > 0:  # NaN included
        raise ConfigError(f"deadline must be positive, got {deadline_s}")
    started = time.monotonic()
    deadline = started + deadline_s
    report = SendReport()
    pending: deque[Payload] = deque()
    source = iter(requests)
    current: Payload | None = None
    try:
        while True:
            if pending:
                request = pending.popleft()
            else:
                following = next(source, None)
                if following is None:
                    break
                request = following
            if _empty(request):
                continue  # the spec asks senders not to send empty envelopes
            if time.monotonic() >= deadline:
                report.deadline_reached = True
                report.unsent.append(request)
                break
            current = request
            delivered = _deliver(request, exporter, deadline, report, pending, warnings)
            current = None
            if not delivered:
                break
    except KeyboardInterrupt as exc:
        # Ctrl-C or SIGTERM: what was not delivered is handed back (to spool), not lost
        if current is not None and not any(r is current for r in report.unsent):
            report.unsent.append(current)
        report.unsent.extend(pending)
        report.unsent.extend(r for r in source if not _empty(r))
        report.note("interrupted")
        report.elapsed_s = time.monotonic() - started
        exc.send_report = report  # type: ignore[attr-defined]
        raise
    if report.deadline_reached:
        report.note("deadline reached")
        report.unsent.extend(pending)
        report.unsent.extend(r for r in source if not _empty(r))
    report.elapsed_s = time.monotonic() - started
    if report.unsent and report.unsent_spans:
        warn(
            warnings,
            logger,
            "undelivered",
            "%d of %d spans not delivered: %s",
            report.unsent_spans,
            report.unsent_spans + report.sent_spans + report.rejected_spans,
            "; ".join(report.reasons[-3:]),
        )
    elif report.unsent:  # log records or metrics: requests without spans
        warn(
            warnings,
            logger,
            "undelivered",
            "%d requests not delivered: %s",
            len(report.unsent),
            "; ".join(report.reasons[-3:]),
        )
    elif warnings is not None and report.sent_requests:
        warnings.resolved("undelivered")
    return report
