"""The shape of every count fr_otel sends over OTLP: a monotonic cumulative sum from its
sender's start, so that a Collector that missed a request still counts right, and
Prometheus sees an ordinary counter."""

from __future__ import annotations

from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Metric,
    NumberDataPoint,
    Sum,
)


def cumulative_count(*, name: str, description: str, unit: str, point: NumberDataPoint) -> Metric:
    """A count metric of one data point (its ``start_time_unix_nano`` is the sender's
    start)."""
    return Metric(
        name=name,
        description=description,
        unit=unit,
        sum=Sum(
            aggregation_temporality=AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE,
            is_monotonic=True,
            data_points=[point],
        ),
    )
