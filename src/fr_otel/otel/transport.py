"""Sending OTLP export requests to a receiver: the exporter, gRPC or HTTP, that the OTLP
settings ask for (``exporter_for``), for spans or for another signal on the same path.

Sending is three layers, each a module: a request (``payload``); an exporter
(``exporter``: ``grpc_exporter``, ``http_exporter``) that makes one attempt at one
request and classifies the answer; and ``delivery.send_all``, which retries, splits a
request the receiver finds too large (``split``) and stops at a deadline.
"""

from __future__ import annotations

from fr_otel.config import PROTOCOL_GRPC, PROTOCOL_HTTP, OtlpSettings
from fr_otel.errors import ConfigError
from fr_otel.otel.exporter import ExporterOptions
from fr_otel.otel.grpc_exporter import GrpcExporter
from fr_otel.otel.http_exporter import HttpExporter
from fr_otel.otel.signals import Signal, signal_url


def exporter_for(
    settings: OtlpSettings, signal: Signal = Signal.TRACES
) -> GrpcExporter | HttpExporter:
    """The exporter ``settings`` ask for (see ``fr_otel.config.otlp_settings``), for
    ``signal``: another signal than traces goes where the traces go
    (``otel.signals``). ``ConfigError`` when the settings give no place for it."""
    options = ExporterOptions.from_settings(settings)
    if settings.protocol == PROTOCOL_GRPC:
        return GrpcExporter(
            settings.endpoint,
            insecure=settings.insecure,
            options=options,
            method=signal.grpc_method,
        )
    if settings.protocol == PROTOCOL_HTTP:
        url = signal_url(settings.endpoint, signal)
        if url is None:
            raise ConfigError(
                f"no OTLP/HTTP {signal.value} URL beside {settings.endpoint}: it does not"
                f" end in /v1/traces (use the Collector's address, e.g. http://host:4318)"
            )
        return HttpExporter(url, options=options)
    raise ConfigError(f"protocol {settings.protocol!r} is not supported")
