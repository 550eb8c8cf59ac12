"""OTLP/HTTP: one attempt at one request, binary protobuf over a kept-alive connection
(``HttpExporter``)."""

from __future__ import annotations

import contextlib
import email.utils
import gzip
import http.client
import logging
import ssl
import threading
import time
from urllib.parse import urlsplit

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from fr_otel.errors import ConfigError
from fr_otel.otel.exporter import (
    USER_AGENT,
    AttemptResult,
    ExporterOptions,
    ExportOutcome,
    success_outcome,
)
from fr_otel.otel.payload import Payload, as_bytes
from fr_otel.otel.rpc_status import status_message

logger = logging.getLogger(__name__)

GZIP_LEVEL = 1
"""zlib's fastest level, for OTLP/HTTP with ``gzip`` (gRPC compresses with grpc's own):
the recorder's export thread shares the cores with training. On encoded requests (a
simulated fleet's, a recorder ring's in continuous mode) level 1 already leaves about a
tenth of the bytes; higher levels cost several times the CPU for barely fewer."""

RETRYABLE_HTTP_STATUS = frozenset({429, 502, 503, 504})
"""OTLP/HTTP specification: these and only these failures are retried."""


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


_DEFAULTS = ExporterOptions()


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
            return success_outcome(parsed)
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
