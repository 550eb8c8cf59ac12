"""Sending ``ExportTraceServiceRequest``s to an OTLP receiver (gRPC or HTTP).

A request is a ``Payload``: the protobuf message (``fr_otel.otel.encode``) or its
serialized bytes (``fr_otel.otel.wire``), sent as they are either way; bytes are parsed
only to count spans or to split them.

Two layers, in the style of the OpenTelemetry SDK's ``SpanExporter``:

- an exporter (``GrpcExporter``, ``HttpExporter``) makes one attempt at one request and
  classifies the answer (``ExportOutcome``); it never retries and never raises for
  network trouble;
- ``send_all`` drives the exporter: retries with exponential backoff and jitter (or the
  server's ``Retry-After`` / ``RetryInfo``), splits a request the server finds too large,
  and stops at an overall deadline, returning the requests it could not deliver so the
  caller can spool them (``fr_otel.otel.spool``).

Unlike the SDK exporters, a request refused for its size (HTTP 413, gRPC
``RESOURCE_EXHAUSTED`` without ``RetryInfo``) is split in two and both halves are sent:
the SDK retries it unchanged until its timeout and then drops it. Delivery is
at-least-once: an attempt whose answer was lost is sent again. Span ids are
deterministic (``fr_otel.otel.model``), so a receiver can drop duplicates.
"""

from __future__ import annotations

import contextlib
import email.utils
import enum
import gzip
import http.client
import logging
import random
import ssl
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeAlias
from urllib.parse import urlsplit

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from fr_otel import __version__
from fr_otel.config import PROTOCOL_GRPC, PROTOCOL_HTTP, OtlpSettings
from fr_otel.errors import ConfigError
from fr_otel.otel.repeats import RepeatedWarnings, warn
from fr_otel.otel.rpc_status import status_message, status_retry_delay

logger = logging.getLogger(__name__)

GRPC_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
GRPC_LOGS_METHOD = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
"""For a logs request (``GrpcExporter(method=...)``): its answer reads as a trace answer,
the partial success's fields have the same numbers and types."""
GRPC_METRICS_METHOD = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
"""For a metrics request: its answer, too, reads as a trace answer (same field numbers)."""
GRPC_DEFAULT_PORT = 4317
USER_AGENT = f"fr-otel/{__version__}"

INITIAL_BACKOFF_S = 0.5
"""First retry delay; doubled on each retry of the same request, up to ``MAX_BACKOFF_S``."""
MAX_BACKOFF_S = 8.0
"""A flush races a watchdog: long sleeps would only waste the little time there is."""

GZIP_LEVEL = 1
"""zlib's fastest level, for OTLP/HTTP with ``gzip`` (gRPC compresses with grpc's own):
the recorder's export thread shares the cores with training. Measured on encoded requests
(an 8-rank simulated fleet, and one recorder ring in continuous mode), level 1 takes
1.3-2.3 µs a span and leaves 8-10 % of the bytes; level 6 costs 2-3 times the CPU for
7-15 % fewer bytes (7-9 %), level 9 nearly 4 times the CPU for hardly fewer again."""

RETRYABLE_HTTP_STATUS = frozenset({429, 502, 503, 504})
"""OTLP/HTTP specification: these and only these failures are retried."""

Payload: TypeAlias = "ExportTraceServiceRequest | bytes"
"""One export request: the message, or its serialization."""


def as_bytes(request: Payload) -> bytes:
    if type(request) is bytes:
        return request
    if isinstance(request, bytes):  # grpc's serializer wants exactly bytes, no subclass
        return bytes(request)
    payload: bytes = request.SerializeToString()
    return payload


def as_message(request: Payload) -> ExportTraceServiceRequest:
    """The message itself; bytes are parsed (``DecodeError`` when they are not one)."""
    if isinstance(request, bytes):
        message: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(request)
        return message
    return request


class AttemptResult(enum.Enum):
    """How one export attempt ended (a whole export's result is ``fr_otel.sinks.ExportResult``)."""

    SUCCESS = "success"
    """Accepted (possibly with some spans rejected: the spec forbids retrying those)."""
    FAILURE_RETRYABLE = "failure_retryable"
    """Not accepted, but the same request may succeed later (server down, throttling)."""
    FAILURE = "failure"
    """Not accepted and must not be sent again (bad data, unauthorised, not found)."""
    TOO_LARGE = "too_large"
    """Refused for its size: send it again in smaller pieces."""


@dataclass(frozen=True)
class ExportOutcome:
    """One attempt's result with what the server said about it."""

    result: AttemptResult
    detail: str = ""
    """The server's message or the network error, for reports and logs."""
    retry_after_s: float | None = None
    """The server's ``Retry-After`` / ``RetryInfo`` delay, when it gave one."""
    rejected_spans: int = 0
    """Spans a successful answer says it dropped (OTLP partial success)."""


class RequestExporter(Protocol):
    """Makes one attempt at delivering one request; see ``send_all`` for the retries."""

    def export(self, request: Payload, deadline: float) -> ExportOutcome:
        """Send ``request`` once, giving up at ``deadline`` (a ``time.monotonic()`` instant).

        Must not raise for network or server problems: they are outcomes.
        """
        ...

    def shutdown(self) -> None:
        """Release connections. The exporter is not used afterwards."""
        ...


# --- splitting -----------------------------------------------------------------------


def span_count(request: Payload) -> int:
    """Spans in a request (unreadable bytes count as none)."""
    known = getattr(request, "span_count", None)
    if isinstance(known, int):
        return known
    try:
        message = as_message(request)
    except DecodeError:
        return 0
    return sum(len(scope.spans) for rs in message.resource_spans for scope in rs.scope_spans)


def _empty(request: Payload) -> bool:
    return not request if isinstance(request, bytes) else not request.resource_spans


def _subset(source: ResourceSpans, picks: list[tuple[int, Span]]) -> ResourceSpans:
    """``source`` (resource and scopes kept) holding only the picked spans."""
    out = ResourceSpans(resource=source.resource, schema_url=source.schema_url)
    by_scope: dict[int, list[Span]] = {}
    for index, span in picks:
        by_scope.setdefault(index, []).append(span)
    for index, spans in by_scope.items():
        scope = source.scope_spans[index]
        out.scope_spans.append(
            ScopeSpans(scope=scope.scope, schema_url=scope.schema_url, spans=spans)
        )
    return out


def split_request(
    request: Payload,
) -> tuple[ExportTraceServiceRequest, ExportTraceServiceRequest] | None:
    """Two requests holding half of ``request`` each, or ``None`` for a single span.

    Halves by resource (rank) when there are several, else by span, so each half keeps
    its resource and scope and the receiver sees the same data either way.
    """
    resources = as_message(request).resource_spans
    if len(resources) > 1:
        middle = len(resources) // 2
        return (
            ExportTraceServiceRequest(resource_spans=resources[:middle]),
            ExportTraceServiceRequest(resource_spans=resources[middle:]),
        )
    if not resources:
        return None
    only = resources[0]
    spans = [(index, span) for index, scope in enumerate(only.scope_spans) for span in scope.spans]
    if len(spans) < 2:
        return None
    middle = len(spans) // 2
    return (
        ExportTraceServiceRequest(resource_spans=[_subset(only, spans[:middle])]),
        ExportTraceServiceRequest(resource_spans=[_subset(only, spans[middle:])]),
    )


# --- send_all --------------------------------------------------------------------------


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
                    "dropping a single span the receiver finds too large",
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
                "receiver refused %d spans: %s",
                span_count(request),
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
    if report.unsent:
        warn(
            warnings,
            logger,
            "undelivered",
            "%d of %d spans not delivered: %s",
            report.unsent_spans,
            report.unsent_spans + report.sent_spans + report.rejected_spans,
            "; ".join(report.reasons[-3:]),
        )
    elif warnings is not None and report.sent_requests:
        warnings.resolved("undelivered")
    return report


# --- gRPC ----------------------------------------------------------------------------

_GRPC_RETRYABLE = (
    "CANCELLED",
    "DEADLINE_EXCEEDED",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNAVAILABLE",
    "DATA_LOSS",
)
"""OTLP/gRPC specification's retryable codes (RESOURCE_EXHAUSTED is handled apart)."""


def _read(path: Path | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from exc


def grpc_target(endpoint: str, *, insecure: bool = False) -> tuple[str, bool]:
    """(gRPC target, use TLS) for an endpoint as the SDK specification allows it.

    ``http://`` means plaintext and ``https://`` TLS whatever ``insecure`` says; without
    a scheme, ``insecure`` decides. The path is ignored; the port defaults to 4317.
    """
    if "://" in endpoint:
        parts = urlsplit(endpoint)
        if parts.scheme in ("http", "https"):
            if not parts.hostname:
                raise ConfigError(f"endpoint {endpoint!r} has no host")
            netloc = parts.netloc.rpartition("@")[2]
            target = netloc if parts.port is not None else f"{netloc}:{GRPC_DEFAULT_PORT}"
            return target, parts.scheme == "https"
        return endpoint, not insecure  # a gRPC name scheme (dns://, unix://, ...)
    return endpoint, not insecure


def _metadata_value(metadata: Any, key: str) -> Any:
    for item in metadata or ():
        if item[0] == key:
            return item[1]
    return None


@dataclass(frozen=True, kw_only=True)
class ExporterOptions:
    """What both exporters take besides the endpoint (``OTEL_EXPORTER_OTLP_*``)."""

    headers: Mapping[str, str] | None = None
    compression: str = "gzip"
    timeout_s: float = 10.0
    certificate: Path | None = None
    client_key: Path | None = None
    client_certificate: Path | None = None

    @classmethod
    def from_settings(cls, settings: OtlpSettings) -> ExporterOptions:
        return cls(
            headers=settings.headers,
            compression=settings.compression,
            timeout_s=settings.timeout_s,
            certificate=settings.certificate,
            client_key=settings.client_key,
            client_certificate=settings.client_certificate,
        )


_DEFAULTS = ExporterOptions()


class GrpcExporter:
    """OTLP/gRPC: ``TraceService/Export`` (or ``method``) over one channel, without
    generated stubs."""

    def __init__(
        self,
        endpoint: str,
        *,
        insecure: bool = False,
        options: ExporterOptions = _DEFAULTS,
        method: str = GRPC_METHOD,
    ) -> None:
        import grpc  # only the gRPC exporter needs grpcio

        self._grpc = grpc
        self.endpoint = endpoint
        self.target, secure = grpc_target(endpoint, insecure=insecure)
        self._timeout_s = options.timeout_s
        self._metadata = tuple(
            (name.lower(), value) for name, value in (options.headers or {}).items()
        )
        channel_options = [
            ("grpc.primary_user_agent", USER_AGENT),
            # grpc's own reconnect backoff grows to 2 minutes; while it waits every call
            # fails at once, so a Collector that is back would stay unseen until the
            # deadline. Keep it short: send_all does the pacing.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ]
        gzip_on = options.compression == "gzip"
        channel_compression = grpc.Compression.Gzip if gzip_on else grpc.Compression.NoCompression
        if secure:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(options.certificate, "certificate"),
                private_key=_read(options.client_key, "client key"),
                certificate_chain=_read(options.client_certificate, "client certificate"),
            )
            self._channel = grpc.secure_channel(
                self.target, credentials, options=channel_options, compression=channel_compression
            )
        else:
            self._channel = grpc.insecure_channel(
                self.target, options=channel_options, compression=channel_compression
            )
        self._call = self._channel.unary_unary(
            method,
            request_serializer=as_bytes,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )

    def export(self, request: Payload, deadline: float) -> ExportOutcome:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return ExportOutcome(AttemptResult.FAILURE_RETRYABLE, "deadline reached")
        grpc = self._grpc
        try:
            response = self._call(
                request, timeout=min(self._timeout_s, remaining), metadata=self._metadata
            )
        except grpc.RpcError as exc:
            return self._failure(exc)
        return _success(response)

    def _failure(self, exc: Any) -> ExportOutcome:
        grpc = self._grpc
        code = exc.code()
        details = exc.details() or ""
        status = _metadata_value(exc.trailing_metadata(), "grpc-status-details-bin")
        retry_after = status_retry_delay(status) if isinstance(status, bytes) else None
        name = code.name if code is not None else "UNKNOWN"
        detail = f"{name}: {details}"
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            # The spec: retryable only with RetryInfo. Without it (grpc's own "received
            # message larger than max"), the request is too big for the receiver.
            if retry_after is None or "larger than max" in details.lower():
                return ExportOutcome(AttemptResult.TOO_LARGE, detail)
            return ExportOutcome(AttemptResult.FAILURE_RETRYABLE, detail, retry_after)
        if name in _GRPC_RETRYABLE:
            return ExportOutcome(AttemptResult.FAILURE_RETRYABLE, detail, retry_after)
        return ExportOutcome(AttemptResult.FAILURE, detail)

    def shutdown(self) -> None:
        self._channel.close()


def _success(response: ExportTraceServiceResponse) -> ExportOutcome:
    partial = response.partial_success
    if partial.rejected_spans or partial.error_message:
        logger.warning(
            "receiver accepted the request but rejected %d spans: %s",
            partial.rejected_spans,
            partial.error_message,
        )
    return ExportOutcome(
        AttemptResult.SUCCESS, partial.error_message, rejected_spans=partial.rejected_spans
    )


# --- HTTP ----------------------------------------------------------------------------


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delay-seconds or an HTTP date (RFC 9110)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class _Dropped(str):
    """The connection was closed before an answer came (worth one immediate retry)."""


class HttpExporter:
    """OTLP/HTTP with binary protobuf, on one kept-alive ``http.client`` connection.

    Not for concurrent use from several threads beyond a lock that serialises them.
    """

    def __init__(
        self,
        url: str,
        *,
        options: ExporterOptions = _DEFAULTS,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"endpoint {url!r} is not an http:// or https:// URL")
        self.endpoint = url
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._gzip = options.compression == "gzip"
        self._timeout_s = options.timeout_s
        self._headers = {
            "Content-Type": "application/x-protobuf",
            "User-Agent": USER_AGENT,
            **dict(options.headers or {}),
        }
        if self._gzip:
            self._headers["Content-Encoding"] = "gzip"
        self._ssl: ssl.SSLContext | None = None
        if self._https:
            try:
                self._ssl = ssl.create_default_context(
                    cafile=str(options.certificate) if options.certificate else None
                )
                if options.client_certificate is not None:
                    self._ssl.load_cert_chain(
                        str(options.client_certificate),
                        str(options.client_key) if options.client_key else None,
                    )
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"cannot load the TLS files for {url}: {exc}") from exc
        self._connection: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._connection is None:
            if self._https:
                self._connection = http.client.HTTPSConnection(
                    self._host, self._port, timeout=timeout, context=self._ssl
                )
            else:
                self._connection = http.client.HTTPConnection(
                    self._host, self._port, timeout=timeout
                )
        else:
            self._connection.timeout = timeout
            if self._connection.sock is not None:
                self._connection.sock.settimeout(timeout)
        return self._connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def export(self, request: Payload, deadline: float) -> ExportOutcome:
        # bytes as they are, a subclass (wire.EncodedRequest) included: http.client and
        # zlib read any buffer, and as_bytes would copy megabytes for nothing
        body = request if isinstance(request, bytes) else as_bytes(request)
        if self._gzip:
            body = gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)
        with self._lock:
            reused = self._connection is not None
            outcome = self._post(body, deadline)
            if isinstance(outcome, _Dropped) and reused:
                # A kept-alive connection the server has since closed fails on first
                # use: one more try on a fresh connection before calling it a failure.
                outcome = self._post(body, deadline)
        if isinstance(outcome, str):
            return ExportOutcome(AttemptResult.FAILURE_RETRYABLE, outcome)
        return outcome

    def _post(self, body: bytes, deadline: float) -> ExportOutcome | str:
        """One POST: the classified answer, or why there was none (a ``_Dropped`` when
        the connection was closed under us)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "deadline reached"
        connection = self._connect(min(self._timeout_s, remaining))
        try:
            # A server refusing a large body may answer (413) and close before reading
            # it all: its answer can still be waiting in the socket.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                connection.request("POST", self._path, body=body, headers=self._headers)
            response = connection.getresponse()
            data = response.read()
        except (
            http.client.RemoteDisconnected,
            BrokenPipeError,
            ConnectionResetError,
            ConnectionAbortedError,
        ) as exc:
            self._close()
            return _Dropped(f"{type(exc).__name__}: {exc}")
        except (OSError, http.client.HTTPException) as exc:
            self._close()
            return f"{type(exc).__name__}: {exc}"
        if response.will_close:
            self._close()
        return self._classify(response, data)

    def _classify(self, response: http.client.HTTPResponse, data: bytes) -> ExportOutcome:
        status = response.status
        if 200 <= status < 300:
            parsed = ExportTraceServiceResponse()
            if "protobuf" in (response.getheader("Content-Type") or "") and data:
                try:
                    parsed = ExportTraceServiceResponse.FromString(data)
                except DecodeError:  # a garbled success body is still a success
                    logger.debug("unreadable success response from %s", self.endpoint)
            return _success(parsed)
        message = status_message(data) if data else None
        if message is None:
            message = data[:200].decode("utf-8", errors="replace").strip()
        detail = f"HTTP {status} {response.reason}" + (f": {message}" if message else "")
        if status == 413:
            return ExportOutcome(AttemptResult.TOO_LARGE, detail)
        if status in RETRYABLE_HTTP_STATUS:
            retry_after = parse_retry_after(response.getheader("Retry-After"))
            return ExportOutcome(AttemptResult.FAILURE_RETRYABLE, detail, retry_after)
        return ExportOutcome(AttemptResult.FAILURE, detail)

    def shutdown(self) -> None:
        with self._lock:
            self._close()


def exporter_for(settings: OtlpSettings) -> GrpcExporter | HttpExporter:
    """The exporter ``settings`` ask for (see ``fr_otel.config.otlp_settings``)."""
    options = ExporterOptions.from_settings(settings)
    if settings.protocol == PROTOCOL_GRPC:
        return GrpcExporter(settings.endpoint, insecure=settings.insecure, options=options)
    if settings.protocol == PROTOCOL_HTTP:
        return HttpExporter(settings.endpoint, options=options)
    raise ConfigError(f"protocol {settings.protocol!r} is not supported")
