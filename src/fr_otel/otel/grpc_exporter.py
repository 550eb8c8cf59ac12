"""OTLP/gRPC: one attempt at one request over a gRPC channel (``GrpcExporter``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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
from fr_otel.otel.rpc_status import status_retry_delay
from fr_otel.otel.signals import Signal

GRPC_METHOD = Signal.TRACES.grpc_method
GRPC_LOGS_METHOD = Signal.LOGS.grpc_method
"""For a logs request (``GrpcExporter(method=...)``): its answer reads as a trace answer,
the partial success's fields have the same numbers and types."""
GRPC_METRICS_METHOD = Signal.METRICS.grpc_method
"""For a metrics request: its answer, too, reads as a trace answer (same field numbers)."""
GRPC_DEFAULT_PORT = 4317

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
        return success_outcome(response)

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
