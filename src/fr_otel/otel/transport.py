"""Sending ``ExportTraceServiceRequest``s to an OTLP receiver: the exporter, gRPC or HTTP,
that the OTLP settings ask for (``exporter_for``).

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


def exporter_for(settings: OtlpSettings) -> GrpcExporter | HttpExporter:
    """The exporter ``settings`` ask for (see ``fr_otel.config.otlp_settings``)."""
    options = ExporterOptions.from_settings(settings)
    if settings.protocol == PROTOCOL_GRPC:
        return GrpcExporter(settings.endpoint, insecure=settings.insecure, options=options)
    if settings.protocol == PROTOCOL_HTTP:
        return HttpExporter(settings.endpoint, options=options)
    raise ConfigError(f"protocol {settings.protocol!r} is not supported")
