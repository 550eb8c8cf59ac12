"""The span plan (``fr_otel.otel.plan``) is what the three span codecs follow: the encoded
attributes come in its order, and a line added to it reaches both encoders (byte for byte
alike) and comes back through the importer, with no other change."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from fr_otel.otel import encode, model, otlp_import, plan, wire
from fr_otel.schema import RECORD_SCHEMA
from tests.rows import canonical_row, canonical_table

ROWS = [
    canonical_row(op_id=1, thread_name="pt_main_thread"),
    canonical_row(record_id=1, collective_seq_id=2, op_id=2, state="started", retired=False),
    canonical_row(record_id=2, op="send", is_p2p=True, peer=1, p2p_seq_id=1),
    canonical_row(record_id=3, collective_seq_id=3, op_id=3, call_site=None, pg_ranks=None),
]


def test_plan_names_model_attributes_and_canonical_columns() -> None:
    for attribute in plan.SPAN_PLAN:
        assert attribute.key in model.SPAN_ATTRIBUTES
        assert attribute.column in RECORD_SCHEMA.names
    assert set(plan.SPAN_COLUMNS) <= set(RECORD_SCHEMA.names)


def test_spans_carry_the_attributes_in_plan_order() -> None:
    (request,) = encode.encode_requests(canonical_table(ROWS))
    spans = request.resource_spans[0].scope_spans[0].spans
    for row, span in zip(ROWS, spans, strict=True):
        p2p = bool(row["is_p2p"])
        expected = [
            key
            for attribute in plan.SPAN_PLAN
            if attribute.applies(p2p=p2p)
            for key, _ in attribute.pairs(row[attribute.column])
        ]
        if row["state"] != "completed":
            expected.append(model.ERROR_TYPE)
        assert [a.key for a in span.attributes] == expected


EXTRA = (
    # a shared string and a per-span integer: one line each
    plan.SpanAttribute(key="test.thread_name", column="thread_name"),
    plan.SpanAttribute(key="test.op_id", column="op_id", per_span=True),
)


@pytest.fixture
def extended_plan(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The plan with ``EXTRA`` at its end; the codecs rebuilt from it, then restored."""
    modules = (encode, wire, otlp_import)
    extended = (*plan.SPAN_PLAN, *EXTRA)
    monkeypatch.setattr(plan, "SPAN_PLAN", extended)
    monkeypatch.setattr(
        plan, "SPAN_COLUMNS", tuple(dict.fromkeys([*plan.SPAN_COLUMNS, "thread_name", "op_id"]))
    )
    try:
        for module in modules:
            importlib.reload(module)
        yield
    finally:
        monkeypatch.undo()
        for module in modules:
            importlib.reload(module)


@pytest.mark.usefixtures("extended_plan")
def test_an_attribute_added_to_the_plan_reaches_every_codec() -> None:
    table = canonical_table(ROWS)
    expected = list(encode.encode_requests(table))
    got = list(wire.encode_requests_fast(table))
    assert got == [r.SerializeToString() for r in expected]
    spans = [
        span
        for data in got
        for rs in ExportTraceServiceRequest.FromString(data).resource_spans
        for span in rs.scope_spans[0].spans
    ]
    for row, span in zip(ROWS, spans, strict=True):
        keys = [a.key for a in span.attributes]
        assert ("test.thread_name" in keys) is (row["thread_name"] is not None)
        assert ("test.op_id" in keys) is (row["op_id"] is not None)
    back = otlp_import.spans_to_table(expected)
    assert back.column("thread_name").to_pylist() == table.column("thread_name").to_pylist()
    assert back.column("op_id").to_pylist() == table.column("op_id").to_pylist()


def test_the_codecs_are_restored_after_the_extended_plan() -> None:
    (request,) = encode.encode_requests(canonical_table(ROWS[:1]))
    keys = [a.key for a in request.resource_spans[0].scope_spans[0].spans[0].attributes]
    assert "test.thread_name" not in keys
