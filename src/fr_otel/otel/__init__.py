"""Span model, OTLP encoding and transports (not built yet)."""
