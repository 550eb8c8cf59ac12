"""A real OTLP receiver for tests: gRPC (grpcio) or HTTP (stdlib), on loopback; traces,
logs (``LogsService`` / ``/v1/logs``: the live check's log records) and metrics
(``MetricsService`` / ``/v1/metrics``: the live check's blindness).

It decodes every request with the official ``opentelemetry-proto`` classes, records what
arrived (request, sizes, headers) and can be told to misbehave the way Collectors do:

- down: not started yet, or ``stop()`` then ``start()`` again on the same port;
- too large: ``reject_above = N`` answers HTTP 413 / gRPC ``RESOURCE_EXHAUSTED`` (no
  RetryInfo, grpc's own "received message larger than max" wording) for requests above
  N bytes (decoded); ``grpc_max_receive_bytes`` sets grpc's real server limit instead;
- failing: ``fail(k, kind)`` answers the next k requests with ``unavailable`` (503 /
  UNAVAILABLE), ``throttle`` (429 / RESOURCE_EXHAUSTED with RetryInfo) or ``invalid``
  (400 / INVALID_ARGUMENT), with an optional Retry-After / RetryInfo delay;
- slow: ``delay_s`` seconds before any answer.

Use it as a context manager: it always shuts down.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import math
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sized
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import grpc
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.duration_pb2 import Duration
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"
METRICS_SERVICE = "opentelemetry.proto.collector.metrics.v1.MetricsService"
KINDS = ("unavailable", "throttle", "invalid")


# --- google.rpc.Status, encoded by hand (googleapis-common-protos is not installed) ----


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def rpc_status(code: int, message: str, retry_after_s: float | None = None) -> bytes:
    """A serialized ``google.rpc.Status``, with a ``RetryInfo`` detail when asked."""
    out = _varint(1 << 3) + _varint(code) + _field(2, message.encode())
    if retry_after_s is not None:
        seconds = int(retry_after_s)
        delay = Duration(seconds=seconds, nanos=round((retry_after_s - seconds) * 1e9))
        retry_info = _field(1, delay.SerializeToString())
        detail = AnyMessage(type_url="type.googleapis.com/google.rpc.RetryInfo", value=retry_info)
        out += _field(3, detail.SerializeToString())
    return out


class _GrpcStatus(NamedTuple):
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, bytes], ...]


class _Status(_GrpcStatus, grpc.Status):  # type: ignore[misc]
    """What ``context.abort_with_status`` takes (grpcio-status builds the same)."""


@dataclass
class Received:
    """One request as it reached the receiver, whatever the answer was."""

    wire_bytes: int
    """Body size as sent: compressed for HTTP+gzip; after grpc's decompression for gRPC."""
    decoded_bytes: int
    headers: dict[str, str]
    answer: str
    """``ok``, or the failure sent back (``413``, ``RESOURCE_EXHAUSTED``, ...)."""
    request: ExportTraceServiceRequest | None = None
    logs: ExportLogsServiceRequest | None = None
    """A logs request's message (``request`` is then None)."""
    metrics: ExportMetricsServiceRequest | None = None
    """A metrics request's message (``request`` is then None)."""


def _any_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@dataclass
class OtlpReceiver:
    """An OTLP receiver on ``127.0.0.1``; ``protocol`` is ``grpc`` or ``http``."""

    protocol: str = "grpc"
    tls: tuple[Path, Path] | None = None
    """(certificate, private key) PEM files: serve TLS (the endpoint becomes https)."""
    grpc_max_receive_bytes: int | None = None
    reject_above: int | None = None
    delay_s: float = 0.0
    port: int = 0
    received: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _fail_count: int = 0
    _fail_kind: str = "unavailable"
    _fail_retry_after: float | None = None
    _grpc_server: Any = None
    _http_server: http.server.ThreadingHTTPServer | None = None
    _http_thread: threading.Thread | None = None
    _http_sockets: set[socket.socket] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        if self.protocol not in ("grpc", "http"):
            raise ValueError(f"protocol must be grpc or http, got {self.protocol!r}")

    # --- control ---------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """What to give the exporter (``otlp_settings(endpoint=...)``)."""
        if not self.port:
            raise RuntimeError("the receiver has no port yet: start it once")
        base = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"
        return base if self.protocol == "grpc" else f"{base}/v1/traces"

    @property
    def running(self) -> bool:
        return self._grpc_server is not None or self._http_server is not None

    def fail(
        self, count: int, kind: str = "unavailable", retry_after_s: float | None = None
    ) -> None:
        """Answer the next ``count`` requests with a failure of ``kind`` (see ``KINDS``)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        with self._lock:
            self._fail_count, self._fail_kind, self._fail_retry_after = count, kind, retry_after_s

    def start(self) -> OtlpReceiver:
        """Listen (again) on ``port``; the first start picks a free one."""
        if self.running:
            return self
        if self.protocol == "grpc":
            self._start_grpc()
        else:
            self._start_http()
        return self

    def stop(self) -> None:
        """Stop listening and drop open connections (clients then see the receiver down)."""
        if self._grpc_server is not None:
            self._grpc_server.stop(grace=None).wait(5)
            self._grpc_server = None
        if self._http_server is not None:
            self._http_server.shutdown()
            self._http_server.server_close()
            with self._lock:
                sockets = list(self._http_sockets)
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            if self._http_thread is not None:
                self._http_thread.join(5)
            self._http_server = self._http_thread = None

    def restart_after(self, seconds: float) -> threading.Timer:
        """Start again ``seconds`` from now, in the background."""
        timer = threading.Timer(seconds, self.start)
        timer.daemon = True
        timer.start()
        return timer

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what arrived ----------------------------------------------------------------

    @property
    def requests(self) -> list[ExportTraceServiceRequest]:
        """Every request that was accepted, in arrival order."""
        with self._lock:
            return [r.request for r in self.received if r.answer == "ok" and r.request]

    def spans(self) -> list[tuple[dict[str, Any], Span]]:
        """(resource attributes, span) for every span accepted."""
        out: list[tuple[dict[str, Any], Span]] = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                attributes = {
                    a.key: _any_value(a.value) for a in resource_spans.resource.attributes
                }
                for scope in resource_spans.scope_spans:
                    out.extend((attributes, span) for span in scope.spans)
        return out

    def wait_for_spans(
        self, count: int, timeout_s: float = 5.0
    ) -> list[tuple[dict[str, Any], Span]]:
        return _at_least(count, self.spans, timeout_s)

    def log_records(self) -> list[tuple[dict[str, Any], LogRecord]]:
        """(resource attributes, log record) for every log record accepted."""
        with self._lock:
            requests = [r.logs for r in self.received if r.answer == "ok" and r.logs]
        out: list[tuple[dict[str, Any], LogRecord]] = []
        for request in requests:
            for resource_logs in request.resource_logs:
                attributes = {a.key: _any_value(a.value) for a in resource_logs.resource.attributes}
                for scope in resource_logs.scope_logs:
                    out.extend((attributes, record) for record in scope.log_records)
        return out

    def wait_for_logs(
        self, count: int, timeout_s: float = 5.0
    ) -> list[tuple[dict[str, Any], LogRecord]]:
        return _at_least(count, self.log_records, timeout_s)

    def metrics(self) -> list[tuple[dict[str, Any], Metric]]:
        """(resource attributes, metric) for every metric accepted, in arrival order."""
        with self._lock:
            requests = [r.metrics for r in self.received if r.answer == "ok" and r.metrics]
        out: list[tuple[dict[str, Any], Metric]] = []
        for request in requests:
            for resource_metrics in request.resource_metrics:
                attributes = {
                    a.key: _any_value(a.value) for a in resource_metrics.resource.attributes
                }
                for scope in resource_metrics.scope_metrics:
                    out.extend((attributes, metric) for metric in scope.metrics)
        return out

    def wait_for_metrics(
        self, count: int, timeout_s: float = 5.0
    ) -> list[tuple[dict[str, Any], Metric]]:
        return _at_least(count, self.metrics, timeout_s)

    # --- shared decision -------------------------------------------------------------

    def _decide(self, decoded_bytes: int) -> tuple[str, float | None]:
        """("ok" | failure kind | "too_large", retry-after) for the next request."""
        if self.delay_s:
            time.sleep(self.delay_s)
        with self._lock:
            if self._fail_count > 0:
                self._fail_count -= 1
                return self._fail_kind, self._fail_retry_after
        if self.reject_above is not None and decoded_bytes > self.reject_above:
            return "too_large", None
        return "ok", None

    def _record(self, item: Received) -> None:
        with self._lock:
            self.received.append(item)

    # --- gRPC ------------------------------------------------------------------------

    def _start_grpc(self) -> None:
        options = []
        if self.grpc_max_receive_bytes is not None:
            options.append(("grpc.max_receive_message_length", self.grpc_max_receive_bytes))
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=options)
        handler = grpc.unary_unary_rpc_method_handler(
            self._grpc_export,
            request_deserializer=lambda data: (
                len(data),
                ExportTraceServiceRequest.FromString(data),
            ),
            response_serializer=ExportTraceServiceResponse.SerializeToString,
        )
        logs_handler = grpc.unary_unary_rpc_method_handler(
            self._grpc_export,
            request_deserializer=lambda data: (
                len(data),
                ExportLogsServiceRequest.FromString(data),
            ),
            response_serializer=ExportLogsServiceResponse.SerializeToString,
        )
        metrics_handler = grpc.unary_unary_rpc_method_handler(
            self._grpc_export,
            request_deserializer=lambda data: (
                len(data),
                ExportMetricsServiceRequest.FromString(data),
            ),
            response_serializer=ExportMetricsServiceResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),
                grpc.method_handlers_generic_handler(LOGS_SERVICE, {"Export": logs_handler}),
                grpc.method_handlers_generic_handler(METRICS_SERVICE, {"Export": metrics_handler}),
            )
        )
        address = f"127.0.0.1:{self.port}"
        if self.tls:
            certificate, key = (p.read_bytes() for p in self.tls)
            credentials = grpc.ssl_server_credentials([(key, certificate)])
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
        if not port:
            raise RuntimeError(f"cannot listen on 127.0.0.1:{self.port}")
        self.port = port
        server.start()
        self._grpc_server = server

    def _grpc_export(
        self,
        payload: tuple[
            int,
            ExportTraceServiceRequest | ExportLogsServiceRequest | ExportMetricsServiceRequest,
        ],
        context: grpc.ServicerContext,
    ) -> ExportTraceServiceResponse | ExportLogsServiceResponse | ExportMetricsServiceResponse:
        size, message = payload
        logs = message if isinstance(message, ExportLogsServiceRequest) else None
        metrics = message if isinstance(message, ExportMetricsServiceRequest) else None
        request = message if isinstance(message, ExportTraceServiceRequest) else None
        headers = {key: value for key, value in context.invocation_metadata()}
        verdict, retry_after = self._decide(size)
        codes = {
            "unavailable": grpc.StatusCode.UNAVAILABLE,
            "throttle": grpc.StatusCode.RESOURCE_EXHAUSTED,
            "invalid": grpc.StatusCode.INVALID_ARGUMENT,
            "too_large": grpc.StatusCode.RESOURCE_EXHAUSTED,
        }
        if verdict == "ok":
            self._record(Received(size, size, headers, "ok", request, logs, metrics))
            if metrics is not None:
                return ExportMetricsServiceResponse()
            return ExportTraceServiceResponse() if logs is None else ExportLogsServiceResponse()
        code = codes[verdict]
        self._record(Received(size, size, headers, code.name, request, logs, metrics))
        if verdict == "too_large":
            message = f"grpc: received message larger than max ({size} vs. {self.reject_above})"
        else:
            message = f"test receiver says {verdict}"
        if verdict == "throttle" and retry_after is None:
            retry_after = 0.0  # throttling without RetryInfo would mean "too large"
        trailing = (("grpc-status-details-bin", rpc_status(code.value[0], message, retry_after)),)
        context.abort_with_status(_Status(code, message, trailing))
        raise AssertionError("abort_with_status returned")  # pragma: no cover

    # --- HTTP ------------------------------------------------------------------------

    def _start_http(self) -> None:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as Collectors do

            def setup(self) -> None:
                super().setup()
                # headers and body go out in two writes: without this, Nagle and the
                # client's delayed ACK add 40 ms to every answer
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with receiver._lock:
                    receiver._http_sockets.add(self.connection)

            def finish(self) -> None:
                with receiver._lock:
                    receiver._http_sockets.discard(self.connection)
                super().finish()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

            def _answer(
                self, status: int, body: bytes, extra: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                if self.path not in ("/v1/traces", "/v1/logs", "/v1/metrics"):
                    self._answer(404, rpc_status(5, f"no such path {self.path}"))
                    return
                body = gzip.decompress(raw) if headers.get("content-encoding") == "gzip" else raw
                verdict, retry_after = receiver._decide(len(body))
                request: ExportTraceServiceRequest | None = None
                logs: ExportLogsServiceRequest | None = None
                metrics: ExportMetricsServiceRequest | None = None
                try:
                    if self.path == "/v1/logs":
                        logs = ExportLogsServiceRequest.FromString(body)
                    elif self.path == "/v1/metrics":
                        metrics = ExportMetricsServiceRequest.FromString(body)
                    else:
                        request = ExportTraceServiceRequest.FromString(body)
                except Exception:  # a test receiver reports anything it cannot read
                    verdict = "invalid"
                status = {
                    "ok": 200,
                    "unavailable": 503,
                    "throttle": 429,
                    "invalid": 400,
                    "too_large": 413,
                }[verdict]
                receiver._record(
                    Received(
                        len(raw),
                        len(body),
                        headers,
                        "ok" if status == 200 else str(status),
                        request,
                        logs,
                        metrics,
                    )
                )
                if status == 200:
                    self._answer(200, ExportTraceServiceResponse().SerializeToString())
                    return
                # Retry-After carries whole seconds
                extra = {} if retry_after is None else {"Retry-After": str(math.ceil(retry_after))}
                self._answer(status, rpc_status(14, f"test receiver says {verdict}"), extra)

        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        if self.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._http_server = server
        self._http_thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._http_thread.start()


_Found = TypeVar("_Found", bound=Sized)


def _at_least(count: int, fetch: Callable[[], _Found], timeout_s: float) -> _Found:
    """``fetch()`` once it holds ``count`` items, or as it is after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while len(found := fetch()) < count and time.monotonic() < end:
        time.sleep(0.02)
    return found
