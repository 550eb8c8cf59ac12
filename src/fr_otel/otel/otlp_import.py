"""OTLP spans -> canonical rows: the inverse of ``fr_otel.otel.encode``, as far as it goes.

Each attribute of the span plan (``plan.SPAN_PLAN``) is read back into its column; what
the plan does not carry is rebuilt from the span's resource, times and status below.

``spans_to_table`` takes ``TracesData`` or ``ExportTraceServiceRequest`` messages (e.g. from
``read_otlp_json``) and rebuilds one ``RECORD_SCHEMA`` row per span that fr_otel wrote.
Spans without ``fr_otel.rank`` or ``fr_otel.record_id`` (someone else's spans) are skipped
and counted (``import_traces(...).skipped``).

Rebuilt from the span: ``job`` (resource ``fr_otel.job``, else ``service.name``),
``incident``, ``rank``, ``pg_name``, ``pg_desc``, ``pg_ranks``, ``record_id``,
``collective_seq_id`` (collectives only), ``p2p_seq_id`` (point-to-point only), ``backend``,
``op``, ``peer``, ``is_p2p``, ``input_sizes``/``output_sizes`` (JSON text),
``input_dtypes``/``output_dtypes``, ``state``, ``time_created_ns`` (span start),
``time_completed_ns`` (span end when the span is not an error and ``state`` is
``completed``), ``dump_time_ns`` (span end when the span is an error, i.e. the work was not
done), ``timeout_ms``, ``call_site`` (``file:line in function`` from ``code.*``),
``api`` (where the span has it) and, where the span status decides it, ``retired``:
``True`` for done work that is not ``completed`` (gloo's completion signal), ``False`` for
``error.type`` ``not_completed``, else null.
``source_format`` is ``"otlp"``.

Not carried by spans, so null: ``pg_id``, ``op_id``, ``profiling_name``,
``time_started_ns``, ``duration_ms``, ``thread_name``, ``thread_id``,
``frames``, ``pg_last_enqueued_seq``, ``pg_last_started_seq``, ``pg_last_completed_seq``,
``source_file``, ``fr_version``, ``comm_lib_version``; ``pg_ranks_inferred`` (not nullable)
is ``False``. Where some rows' members came from runs, ``pg_ranks`` is a dictionary column:
rows that name the same runs share one list.

A large group's members come back from their runs (``fr_otel.pg.rank_ranges``), which a few
bytes can make as long as any list: ``import_traces(max_members=...)`` refuses spans whose
runs would expand past a bound (``ExpandingSpansError``; ``fr-otel import`` gives spans the
bound dumps have).

Lossy by construction of the encoder: a p2p span carries no ``collective_seq_id`` and a
collective span no ``p2p_seq_id`` (both null here); ``dump_time_ns`` of done work and the
completion time of work the encoder counted as not done are not carried.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status, TracesData

from fr_otel.otel import model
from fr_otel.otel.jsonfile import (
    json_attributes,
    json_field,
    json_int,
    json_list,
    json_object,
)
from fr_otel.otel.plan import SPAN_PLAN
from fr_otel.otel.rankranges import from_ranges
from fr_otel.schema import (
    COLUMNS,
    MEMBERS_DICTIONARY,
    RECORD_SCHEMA,
    is_p2p_entry,
    with_members_type,
)

SOURCE_FORMAT = "otlp"
"""``source_format`` of imported rows (to be listed in ``schema.SOURCE_FORMATS``)."""

UNKNOWN = "unknown"
"""``job``/``incident`` of a span whose resource and attributes name none."""


class ExpandingSpansError(ValueError):
    """Spans whose member runs name more ranks, over all rows, than ``import_traces``'s
    ``max_members``: ``0-999999`` is 8 bytes of text and 8 MB of a row."""


class _Members:
    """The member lists the rows' runs expand to, each distinct text once and shared by
    every row that names it, and how many members more they may come to (``None``: no
    bound). The bound is spent on each distinct list, which is what the rows then hold
    (``SpanRows.result`` makes them a dictionary column): spent per row, a 16,384-rank
    group's 2,000 spans, which fr_otel writes, were refused as hostile."""

    def __init__(self, limit: int | None) -> None:
        self.limit = self.left = limit
        self._expanded: dict[str, list[int]] = {}

    def of_runs(self, runs: str) -> list[int]:
        found = self._expanded.get(runs)
        if found is None:
            found = from_ranges(runs)
            self.spend(len(found))
            self._expanded[runs] = found
        return found

    @property
    def shared(self) -> bool:
        """Whether some rows share an expanded list."""
        return bool(self._expanded)

    def spend(self, members: int) -> None:
        if self.left is None:
            return
        self.left -= members
        if self.left < 0:
            raise ExpandingSpansError(
                f"their member runs ({model.PG_RANK_RANGES}) name more than {self.limit:,}"
                " ranks over all rows, more than their size can justify; fr_otel never"
                " writes that, and they were not expanded"
            )


@dataclass(frozen=True)
class OtlpImport:
    """The rows rebuilt from spans, and how many spans were not ours."""

    table: pa.Table
    skipped: int


def _python(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_python(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _python(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def _attributes(items: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: _python(kv.value) for kv in items}


def _row(
    *,
    name: str,
    start: int | None,
    end: int | None,
    error: bool,
    attrs: dict[str, Any],
    resource: dict[str, Any],
    members: _Members,
) -> dict[str, Any] | None:
    """The row of one span (its name, times, whether its status is an error, its
    attributes and its resource's), or None for a span that is not fr_otel's."""
    rank, record_id = attrs.get(model.RANK), attrs.get(model.RECORD_ID)
    if not isinstance(rank, int) or not isinstance(record_id, int):
        return None
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    # every column the plan writes an attribute from (a derived count carries nothing back)
    for attribute in SPAN_PLAN:
        if attribute.form == "members" and attribute.key not in attrs:
            runs = attrs.get(model.PG_RANK_RANGES)
            row[attribute.column] = members.of_runs(runs) if isinstance(runs, str) else None
        elif attribute.form != "count":
            row[attribute.column] = attribute.read(attrs)
    coll, p2p = row["collective_seq_id"], row["p2p_seq_id"]
    op = row["op"] or name
    if p2p is not None or coll is not None:
        is_p2p = p2p is not None and coll is None
    else:  # neither sequence number: the encoder's own fallback rule
        is_p2p = is_p2p_entry(is_p2p=None, op=op)
    state = row["state"]
    start = start or None
    end = end or None
    done = not error
    error_type = attrs.get(model.ERROR_TYPE)
    # The encoder counts work as done when completed, or (gloo) retired; pending work that
    # was retired is a timeout. So: done but not completed -> retired; "not_completed" ->
    # not retired; otherwise unknown.
    retired: bool | None = None
    if done and state != "completed":
        retired = True
    elif not done and error_type == model.ERROR_NOT_COMPLETED:
        retired = False
    pg_ranks = row["pg_ranks"]
    row.update(
        job=resource.get(model.JOB) or resource.get(model.SERVICE_NAME) or UNKNOWN,
        incident=row["incident"] or UNKNOWN,
        pg_name=row["pg_name"] or "",
        pg_ranks=pg_ranks if pg_ranks is None or isinstance(pg_ranks, list) else list(pg_ranks),
        pg_ranks_inferred=False,
        op=op,
        is_p2p=is_p2p,
        time_created_ns=start,
        time_completed_ns=end if done and state == "completed" else None,
        retired=retired,
        dump_time_ns=None if done else end,
        source_format=SOURCE_FORMAT,
        # where the rank ran, as the recorder's resource says (the fleet's hosts)
        host=host if isinstance(host := resource.get(model.HOST_NAME), str) else None,
    )
    return row


def import_traces(
    traces: Iterable[TracesData | ExportTraceServiceRequest], *, max_members: int | None = None
) -> OtlpImport:
    """Canonical rows (ordered by job, incident, rank, record_id) from fr_otel's spans.

    ``max_members``: how many ranks the rows' member runs may name in all, for spans read
    from a file (``ExpandingSpansError`` past it); ``None``: no bound."""
    rows = SpanRows(max_members=max_members)
    for message in traces:
        rows.add_message(message)
    return rows.result()


class SpanRows:
    """Canonical rows rebuilt from spans, a message at a time: protobuf messages
    (``add_message``) or OTLP JSON objects (``add_json``), which give the same rows.
    ``max_members``: as ``import_traces``'s."""

    def __init__(self, *, max_members: int | None = None) -> None:
        self._rows: list[dict[str, Any]] = []
        self._members = _Members(max_members)
        self.skipped = 0
        """Spans that are not fr_otel's."""

    def add_message(self, message: TracesData | ExportTraceServiceRequest) -> None:
        for resource_spans in message.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self._add(
                        name=span.name,
                        start=span.start_time_unix_nano,
                        end=span.end_time_unix_nano,
                        error=span.status.code == Status.STATUS_CODE_ERROR,
                        attrs=_attributes(span.attributes),
                        resource=resource,
                    )

    def add_json(self, data: dict[str, Any]) -> None:
        """One OTLP JSON ``TracesData`` (a line of an OTLP JSON lines file, as
        ``json.loads`` gives it), read as it is: building protobuf messages from it first
        (``jsonfile.from_otlp_json``) was two thirds of a span import's time. Raises
        ``ValueError`` where protobuf's parser would refuse the object."""
        for resource_spans in json_list(data, "resourceSpans", "resource_spans"):
            resource = json_object(resource_spans, "resource")
            attributes = json_attributes(json_field(resource, "attributes"))
            for scope_spans in json_list(resource_spans, "scopeSpans", "scope_spans"):
                for span in json_list(scope_spans, "spans"):
                    name = json_field(span, "name") or ""
                    if not isinstance(name, str):
                        raise ValueError(f"a span's name is {type(name).__name__}")
                    code = json_field(json_object(span, "status"), "code")
                    self._add(
                        name=name,
                        start=_json_time(span, "startTimeUnixNano", "start_time_unix_nano"),
                        end=_json_time(span, "endTimeUnixNano", "end_time_unix_nano"),
                        error=code in _JSON_ERROR_CODES,
                        attrs=json_attributes(json_field(span, "attributes")),
                        resource=attributes,
                    )

    def _add(self, **span: Any) -> None:
        row = _row(**span, members=self._members)
        if row is None:
            self.skipped += 1
        else:
            self._rows.append(row)

    def result(self) -> OtlpImport:
        """The rows so far, ordered by job, incident, rank and record_id."""
        rows = sorted(
            self._rows, key=lambda r: (r["job"], r["incident"], r["rank"], r["record_id"])
        )
        columns: dict[str, Any] = {name: [r[name] for r in rows] for name in COLUMNS}
        schema = RECORD_SCHEMA
        if self._members.shared:
            columns["pg_ranks"] = _shared_lists(columns["pg_ranks"])
            schema = with_members_type(schema, MEMBERS_DICTIONARY)
        return OtlpImport(pa.Table.from_pydict(columns, schema=schema), self.skipped)


def _shared_lists(lists: list[list[int] | None]) -> pa.DictionaryArray:
    """Rows' member lists as a dictionary column: a list that rows share (expanded from
    the same runs) is in it once, not copied into each row (2,000 rows of a
    100,000-rank group would be 1.6 GB)."""
    codes: list[int | None] = []
    distinct: list[list[int]] = []
    by_identity: dict[int, int] = {}  # the lists are alive (the rows hold them)
    for ranks in lists:
        if ranks is None:
            codes.append(None)
            continue
        code = by_identity.get(id(ranks))
        if code is None:
            code = by_identity[id(ranks)] = len(distinct)
            distinct.append(ranks)
        codes.append(code)
    return pa.DictionaryArray.from_arrays(
        pa.array(codes, pa.int32()), pa.array(distinct, RECORD_SCHEMA.field("pg_ranks").type)
    )


_JSON_ERROR_CODES = (Status.STATUS_CODE_ERROR, "STATUS_CODE_ERROR")
"""``status.code`` of an error span in OTLP JSON: the number, or the enum's name."""


def _json_time(span: Any, name: str, proto_name: str) -> int:
    value = json_field(span, name, proto_name)
    return 0 if value is None else json_int(value, unsigned=True)


def spans_to_table(traces: Iterable[TracesData | ExportTraceServiceRequest]) -> pa.Table:
    """``RECORD_SCHEMA`` rows from fr_otel's spans; other spans are skipped."""
    return import_traces(traces).table


def unique_entries(table: pa.Table) -> pa.Table:
    """One row per (job, incident, rank, record_id), the first seen: a Collector delivers at
    least once, so its file archive can hold a retried batch twice."""
    if table.num_rows == 0:
        return table
    keys = ["job", "incident", "rank", "record_id"]
    indexed = table.select(keys).append_column("_row", pa.array(range(table.num_rows), pa.int64()))
    first = indexed.group_by(keys, use_threads=False).aggregate([("_row", "min")])
    rows = pc.sort_indices(first["_row_min"])
    return table.take(first["_row_min"].take(rows))
