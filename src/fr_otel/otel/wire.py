"""Canonical rows -> serialized OTLP ``ExportTraceServiceRequest`` bytes, written by hand.

The same requests as ``fr_otel.otel.encode.encode_requests`` (same resource grouping,
attribute order, status, times, ids and request boundaries), but produced straight in
protobuf wire format, for the recorder's flush of a full buffer when a timeout hits: building
the protobuf classes costs an order of magnitude more per span, the SDK's tracer more again.

How it stays fast (per span, well over an order of magnitude below the SDK, which
``benchmarks/flush_vs_sdk.py`` measures):

- What spans share is encoded once. Each column is reduced to per-row integer codes in
  Arrow (list columns included), and the codes of every column that does not change
  from span to span (group, op, state, shapes, dtypes, call site, peer, ...) are
  combined into one "block" code per row. Each distinct block becomes attribute bytes
  once, from one representative row, by the span plan (``plan.SPAN_PLAN``, which
  ``encode.row_to_span`` follows too), and stays cached across calls (continuous mode
  encodes the same few blocks every pass).
- What differs per span (the plan's per-span attributes: record id, sequence number; the
  times; the error type) is written a column at a time with Arrow kernels: varints from
  lookup tables, fixed64 from the int64 buffer itself, each span's bytes but its ids
  joined row-wise. The plan's shared attributes are segments of bytes around them.
- The one per-row Python loop hashes the two ids (``model.trace_id``/``span_id``). The
  spans are then joined in Arrow into one buffer, and a request is slices of it behind
  their ranks' headers, cut at the same byte budget (found by bisection, not span by span).

The decoded messages equal ``encode_requests``'s, and in practice the bytes are the ones
``SerializeToString`` writes (fields in field-number order); ``tests/unit/test_otel_wire.py``
holds both to that.

The module is over 800 lines because it is the exporter's measured fast path (``benchmarks/
flush_vs_sdk.py``) and one pipeline: the block codes, the column kernels, the ids and the
request cuts work on the same per-row codes and byte layouts, which the tests hold to the
protobuf path's bytes as one.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from fr_otel import __version__
from fr_otel.otel import model
from fr_otel.otel.encode import MAX_REQUEST_BYTES
from fr_otel.otel.plan import (
    ID_COLUMNS,
    SPAN_COLUMNS,
    SPAN_PLAN,
    TIME_COLUMNS,
    SpanAttribute,
    error_message,
    error_type,
    rank_resource,
)
from fr_otel.schema import is_done_entry, is_p2p_entry

__all__ = ["encode_requests_fast"]

# The per-span values: the ids' per-span part, the plan's per-span attributes, the times.
_ROW_COLUMNS = tuple(
    dict.fromkeys([*ID_COLUMNS, *(a.column for a in SPAN_PLAN if a.per_span), *TIME_COLUMNS])
)
# The constant per block: the columns whose values are identical for many spans.
_BLOCK_COLUMNS = tuple(c for c in SPAN_COLUMNS if c not in _ROW_COLUMNS)
_SORT_KEYS = (("job", "ascending"), ("rank", "ascending"), ("record_id", "ascending"))
_MASK64 = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_ZERO_TRACE_ID = bytes(16)
_ZERO_SPAN_ID = bytes(8)


# --- protobuf wire format --------------------------------------------------------------
# A tag is (field number << 3) | wire type; 0 = varint, 1 = 64-bit, 2 = length-delimited.

# Every varint under 2**14 (one or two bytes: lengths, most ids and counters), ready made.
_VARINTS = [bytes((n,)) if n < 0x80 else bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(0x4000)]


def _varint(value: int) -> bytes:
    """Base-128 varint of an unsigned value (callers mask negative int64 to 64 bits)."""
    if value < 0x4000:
        return _VARINTS[value]
    if value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    return bytes((tag,)) + _varint(len(payload)) + payload


def _int64(value: int) -> bytes:
    # int64 is written as its two's complement: 10 bytes for a negative value
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"Value out of range: {value}")
    return _varint(value & _MASK64)


def _any_value(value: Any) -> bytes:
    """``AnyValue`` fields, by the same rules as ``encode._value``.

    A oneof member is present even at its default value, so it is always written
    (``int_value: 0`` decodes differently from an empty ``AnyValue``).
    """
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _int64(value)
    if isinstance(value, float):
        return b"\x21" + struct.pack("<d", value)
    if isinstance(value, (list, tuple)):
        return _field(0x2A, b"".join(_field(0x0A, _any_value(v)) for v in value))
    return _field(0x0A, str(value).encode())


def _key_value(key: str, value: Any) -> bytes:
    """One ``KeyValue`` message body."""
    return _field(0x0A, key.encode()) + _field(0x12, _any_value(value))


def _attribute(key: str, value: Any) -> bytes:
    """``Span.attributes`` (field 9) holding one ``KeyValue``."""
    return _field(0x4A, _key_value(key, value))


def _int_attribute_prefixes(key: str) -> list[bytes]:
    """For each varint length n (1..10): the bytes of an int attribute before the varint.

    Lets the per-row loop write an int attribute as ``prefix[len(v)] + v``.
    """
    key_field = _field(0x0A, key.encode())
    out = [b""]
    for n in range(1, 11):
        kv_len = len(key_field) + 2 + 1 + n  # value field: tag, length, AnyValue tag, varint
        out.append(b"\x4a" + _varint(kv_len) + key_field + bytes((0x12, 1 + n, 0x18)))
    return out


@dataclass(frozen=True, kw_only=True)
class _Slot:
    """Where a per-span attribute goes between the shared ones: one attribute, or a
    point-to-point one and a collective one (each span carries the one that applies)."""

    always: SpanAttribute | None = None
    p2p: SpanAttribute | None = None
    collective: SpanAttribute | None = None


def _layout() -> tuple[list[_Slot], list[tuple[int, SpanAttribute]]]:
    """``SPAN_PLAN`` cut at its per-span attributes: the slots, and each shared attribute
    with its segment (segment i comes before slot i, the last one after every slot)."""
    slots: list[_Slot] = []
    shared: list[tuple[int, SpanAttribute]] = []
    pair_open = False  # the last slot holds half of a point-to-point/collective pair
    for attribute in SPAN_PLAN:
        if not attribute.per_span:
            shared.append((len(slots), attribute))
            pair_open = False
        elif attribute.only is None:
            slots.append(_Slot(always=attribute))
            pair_open = False
        elif pair_open and getattr(slots[-1], attribute.only) is None:
            slots[-1] = dataclasses.replace(slots[-1], **{attribute.only: attribute})
            pair_open = False
        else:
            slots.append(_Slot(**{attribute.only: attribute}))
            pair_open = True
    return slots, shared


_SLOTS, _SHARED = _layout()
_PER_SPAN = [a for a in SPAN_PLAN if a.per_span]
"""Per-span attributes in plan order: ``_int_prefix_table`` holds 11 prefixes for each."""
_PREFIX_BASE = {a.key: 11 * i for i, a in enumerate(_PER_SPAN)}
"""Where each per-span attribute's prefixes start in ``_int_prefix_table``."""
_ERROR_TIMEOUT = _attribute(model.ERROR_TYPE, model.ERROR_TIMEOUT)
_ERROR_NOT_COMPLETED = _attribute(model.ERROR_TYPE, model.ERROR_NOT_COMPLETED)
_STATUS_UNSET = b"\x7a\x00"  # row_to_span always sets status: present, even when empty
_STATUS_ERROR_CODE = b"\x18\x02"  # Status.code = STATUS_CODE_ERROR
_KIND_INTERNAL = b"\x30\x01"


# --- columns -> integer codes ----------------------------------------------------------
# All in Arrow (numpy is not a dependency): per-row work in Python is what this module avoids.

_ENCODE_NULLS = pc.DictionaryEncodeOptions(null_encoding="encode")


def _dictionary(array: pa.Array) -> pa.DictionaryArray:
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    # nulls get a code of their own, so "null" is just another distinct value
    encoded: pa.DictionaryArray = pc.dictionary_encode(array, options=_ENCODE_NULLS)
    return encoded


def _is_list(array: pa.Array) -> bool:
    return bool(pa.types.is_list(array.type) or pa.types.is_large_list(array.type))


def _codes(array: pa.Array) -> tuple[pa.Array, int]:
    """One code per row, numbered 0.. in order of first appearance, and how many there are.

    Equal values, equal codes. Lists are coded bottom up: each row's run of elements is read
    as one binary string (with the list's own offsets, not copied) and the strings are
    coded. The run is of the elements' own bytes where those say everything (integers, no
    nulls: the shapes and rank lists), else of the elements' codes. Null and empty lists
    stay apart through the validity bitmap.
    """
    if pa.types.is_dictionary(array.type) and _is_list(array.dictionary):
        # coded through its distinct values: decoding would copy each row's list first
        # (the recorder's continuous mode hands member lists so: 64 KB a row at 8,192 ranks)
        by_value = _codes(array.dictionary)[0].take(array.indices)
        encoded = pc.dictionary_encode(by_value, options=_ENCODE_NULLS)
        return encoded.indices, len(encoded.dictionary)
    if not _is_list(array):
        encoded = _dictionary(array)
        return encoded.indices, len(encoded.dictionary)
    # every child, also those under null lists (their rows are null anyway)
    elements = array.values
    if not (pa.types.is_integer(elements.type) and elements.null_count == 0):
        elements = _codes(elements)[0]
        if not pa.types.is_int32(elements.type):
            elements = elements.cast(pa.int32())
    width = elements.type.bit_width // 8
    data = elements.buffers()[1].slice(elements.offset * width, len(elements) * width)
    validity = pc.is_valid(array).buffers()[1] if array.null_count else None
    offsets = array.offsets
    if len(elements) * width <= _INT32_MAX:
        # the usual case: byte offsets fit binary's int32 (a cast fewer)
        if not pa.types.is_int32(offsets.type):
            offsets = offsets.cast(pa.int32())
        offsets = pc.multiply(offsets, _scalar(width, pa.int32()))
        kind, offset_width = pa.binary(), 4
    else:
        offsets = pc.multiply(offsets.cast(pa.int64()), _int(width))
        kind, offset_width = pa.large_binary(), 8
    rows = pa.Array.from_buffers(
        kind,
        len(array),
        [validity, offsets.buffers()[1].slice(offsets.offset * offset_width), data],
        null_count=array.null_count,
    )
    return _codes(rows)


def _first_seen(codes: pa.Array, count: int) -> pa.Array:
    """Row of each code's first occurrence (codes numbered 0..count-1)."""
    return pc.index_in(pa.array(range(count), codes.type), value_set=codes)


def _combine(columns: Sequence[tuple[pa.Array, int]], rows: int) -> tuple[pa.Array, int]:
    """One code per distinct combination of the columns' values (mixed radix)."""
    varying = [(codes, width) for codes, width in columns if width > 1]
    if not varying:
        # one value per column for every row (one rank's steady state): one block
        return pa.repeat(_int(0), rows), 1
    if len(varying) == 1:
        return varying[0]  # already numbered in order of first appearance
    combined: pa.Array | None = None
    radix = 1
    for codes, width in varying:
        codes = codes.cast(pa.int64())
        if combined is None:
            combined, radix = codes, width
            continue
        if radix * width >= 1 << 62:
            # renumber densely before the product could overflow int64
            combined, radix = _codes(combined)
            combined = combined.cast(pa.int64())
        combined = pc.add(pc.multiply(combined, _int(width)), codes)
        radix *= width
    assert combined is not None
    return _codes(combined)


def _array(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


# --- spans -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Resource:
    """One rank's ``ResourceSpans`` header, pre-encoded."""

    resource: bytes
    """``ResourceSpans.resource`` (field 1), complete."""
    scope: bytes
    """``ScopeSpans.scope`` (field 1), complete."""
    header_size: int
    """``ResourceSpans.ByteSize()`` before any span: what ``encode_requests`` counts."""


@dataclass(frozen=True)
class _Block:
    """What spans with the same block code share, pre-encoded."""

    resource: _Resource
    key_lead: str
    """The trace key (``model.trace_key``) up to the sequence number at its end."""
    id_infix: str
    """``\\x00<rank>\\x00``: between the trace key and the record id in the span id's input."""
    is_p2p: bool
    done: bool
    retired: bool
    timeout_ms: int | None
    name_kind: bytes
    """``name`` (5) and ``kind`` (6)."""
    segments: tuple[bytes, ...]
    """The shared attributes: segment i before the per-span attribute of slot i, the last
    one before ``error.type``."""
    error_status: bytes
    """``status`` (15) for a span that never completed."""


def _resource(job: str, rank: int, extra: Mapping[str, str | int] | None) -> _Resource:
    attributes = b"".join(
        _field(0x0A, _key_value(key, value))
        for key, value in model.resource_attributes(job, rank, extra)
    )
    resource = _field(0x0A, attributes)
    scope_body = b""
    if model.SCOPE_NAME:
        scope_body += _field(0x0A, model.SCOPE_NAME.encode())
    if __version__:
        scope_body += _field(0x12, __version__.encode())
    scope = _field(0x0A, scope_body)
    return _Resource(resource, scope, len(resource) + len(_field(0x12, scope)))


_BLOCKS: dict[tuple[str, tuple[tuple[str, str | int], ...]], _Block] = {}
"""Blocks already encoded, by their row's values and the extra resource attributes:
continuous mode encodes the same few blocks every pass."""
_RESOURCES: dict[tuple[str, int, tuple[tuple[str, str | int], ...]], _Resource] = {}
_CACHE_LIMIT = 1024
"""Entries kept before the caches start over (a job's distinct blocks are far fewer)."""


def _cached_block(row: dict[str, Any], extra: tuple[tuple[str, str | int], ...]) -> _Block:
    """``_block`` of ``row``, encoded once per distinct row. The values' ``repr`` is the key:
    they are strings, ints, bools, ``None`` and lists of those, which it tells apart."""
    key = (repr(tuple(row.values())), extra)
    block = _BLOCKS.get(key)
    if block is None:
        if len(_BLOCKS) >= _CACHE_LIMIT:
            _BLOCKS.clear()
        block = _BLOCKS[key] = _block(row, extra)
    return block


def _cached_resource(job: str, rank: int, extra: tuple[tuple[str, str | int], ...]) -> _Resource:
    key = (job, rank, extra)
    resource = _RESOURCES.get(key)
    if resource is None:
        if len(_RESOURCES) >= _CACHE_LIMIT:
            _RESOURCES.clear()
        resource = _RESOURCES[key] = _resource(job, rank, dict(extra))
    return resource


def _block(row: dict[str, Any], extra: tuple[tuple[str, str | int], ...]) -> _Block:
    """The shared part of ``encode.row_to_span`` for one representative row."""
    job, rank, op, state = row["job"], row["rank"], row["op"], row["state"]
    is_p2p = is_p2p_entry(is_p2p=row["is_p2p"], op=op)
    done = is_done_entry(state=state, backend=row["backend"], retired=row["retired"])
    # the trace key up to its per-span part: its tail is "coll\0<seq>" or "p2p\0<rank>\0<seq>"
    key = model.trace_key(
        job=job,
        pg_name=row["pg_name"],
        pg_ranks=row["pg_ranks"],
        collective_seq_id=None,
        is_p2p=False,
        rank=rank,
        p2p_seq_id=None,
        run_id=row["run_id"],
    ).decode()
    tail = "coll\x00None"
    if not key.endswith(tail):
        raise AssertionError(f"unexpected trace key layout: {key!r}")
    segments = [b""] * (len(_SLOTS) + 1)
    for index, attribute in _SHARED:
        if attribute.applies(p2p=is_p2p):
            for name, value in attribute.pairs(row[attribute.column]):
                segments[index] += _attribute(name, value)
    message = error_message(op, state).encode()
    error_status = _field(0x7A, _field(0x12, message) + _STATUS_ERROR_CODE)
    return _Block(
        resource=_cached_resource(
            job, rank, tuple(rank_resource(dict(extra), row["host"]).items())
        ),
        key_lead=key[: -len(tail)] + (f"p2p\x00{rank}\x00" if is_p2p else "coll\x00"),
        id_infix=f"\x00{rank}\x00",
        is_p2p=is_p2p,
        done=done,
        retired=bool(row["retired"]),
        timeout_ms=row["timeout_ms"],
        name_kind=(_field(0x2A, op.encode()) if op else b"") + _KIND_INTERNAL,
        segments=tuple(segments),
        error_status=error_status,
    )


def _order(table: pa.Table, one_job_and_rank: bool) -> pa.Array | None:
    """Rows in ``encode_requests``'s order: job, rank, record id (Arrow's sort is stable).

    ``None`` when the table is in that order already (one rank's buffer usually is).
    """
    for name, _ in _SORT_KEYS:
        if table.column(name).null_count:
            raise ValueError(f"column {name!r} has nulls; every span needs one")
    if one_job_and_rank:
        record_id = table.column("record_id")
        if pc.all(pc.less_equal(record_id[:-1], record_id[1:])).as_py() is not False:
            return None
        return pc.sort_indices(record_id)
    keys = {}
    for name, _ in _SORT_KEYS:
        column = table.column(name)
        if pa.types.is_dictionary(column.type):
            # Arrow sorts no dictionary column in a table: sort by the values
            column = column.cast(column.type.value_type)
        keys[name] = column
    return pc.sort_indices(pa.table(keys), sort_keys=_SORT_KEYS)


def _resource_spans_head(resource: _Resource, spans_size: int) -> bytes:
    """``ExportTraceServiceRequest.resource_spans`` (field 1) up to one rank's spans, which
    follow it: ``spans_size`` bytes of ``ScopeSpans.spans`` fields."""
    scope_spans_size = len(resource.scope) + spans_size
    scope_spans_length = _varint(scope_spans_size)
    body_size = len(resource.resource) + 1 + len(scope_spans_length) + scope_spans_size
    return b"".join(
        (
            b"\x0a",
            _varint(body_size),
            resource.resource,
            b"\x12",
            scope_spans_length,
            resource.scope,
        )
    )


def encode_requests_fast(
    table: pa.Table,
    *,
    max_bytes: int = MAX_REQUEST_BYTES,
    resource: Mapping[str, str | int] | None = None,
) -> Iterator[bytes]:
    """Serialized ``ExportTraceServiceRequest``s holding every row of ``table`` as a span.

    Decoded, each request equals the corresponding one from
    ``fr_otel.otel.encode.encode_requests(table, max_bytes=max_bytes, resource=resource)``:
    the same spans,
    the same split into requests (each under ``max_bytes``, unless one span alone is
    larger), one ``ResourceSpans`` per rank (per job) within a request. ``job``, ``rank``
    and ``record_id`` must not be null. Raises ``ValueError`` where the protobuf classes
    would (a negative creation time), before yielding anything.
    """
    if table.num_rows == 0:
        return
    for name in ("run_id", "host"):  # an archive written before runs had ids, hosts
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, pa.string()))
    # codes are computed in table order; only the (integer) results are put in span order
    columns = [_codes(_array(table.column(name))) for name in _BLOCK_COLUMNS]
    widths = dict(zip(_BLOCK_COLUMNS, (width for _, width in columns), strict=True))
    order = _order(table, widths["job"] == widths["rank"] == 1)
    block_codes, count = _combine(columns, table.num_rows)
    # one representative row per block
    shared = table.select(_BLOCK_COLUMNS)
    shared = shared.slice(0, 1) if count == 1 else shared.take(_first_seen(block_codes, count))
    extra = tuple((resource or {}).items())
    blocks = [_cached_block(row, extra) for row in shared.to_pylist()]
    rows = {name: _array(table.column(name)) for name in _ROW_COLUMNS}
    if order is not None:
        block_codes = block_codes.take(order)
        rows = {name: column.take(order) for name, column in rows.items()}
    yield from _requests(_Rows(blocks, block_codes, rows), max_bytes)


# --- per-row values, column-wise --------------------------------------------------------

_CHUNK_BITS = 14
_LAST = 1 << _CHUNK_BITS
_INT32_MAX = (1 << 31) - 1


@functools.cache
def _varint_table() -> pa.Array:
    """Varints by 14-bit chunk: [0, 2**14) the chunk as the last one (minimal: 1 or 2
    bytes), [2**14, 2**15) the chunk with more to follow (2 bytes, both continued)."""
    more = [bytes(((n & 0x7F) | 0x80, (n >> 7) | 0x80)) for n in range(_LAST)]
    return pa.array([*_VARINTS, *more], pa.binary())


@functools.cache
def _varint_tail_table() -> pa.Array:
    """``_varint_table`` for a chunk after the first: 0 there is past the value's end."""
    return pa.concat_arrays([pa.array([b""], pa.binary()), _varint_table().slice(1)])


@functools.cache
def _front_table() -> pa.Array:
    """For a span of n < 2**14 bytes: its ``ScopeSpans.spans`` tag and length, then the
    tag of its first field (``trace_id``, 16 bytes)."""
    return pa.array([b"\x12" + v + b"\x0a\x10" for v in _VARINTS], pa.binary())


@functools.cache
def _int_prefix_table() -> pa.Array:
    """``_int_attribute_prefixes`` of every per-span attribute (``_PER_SPAN``), 11 each."""
    return pa.array(
        [prefix for a in _PER_SPAN for prefix in _int_attribute_prefixes(a.key)], pa.binary()
    )


@functools.cache
def _scalar(value: bytes | str | int, kind: pa.DataType) -> pa.Scalar:
    """``value`` as an Arrow scalar, made once. pyarrow converts a Python literal handed to
    a compute function on every call, and that conversion tries to import ``dateutil`` (not
    a dependency) each time, a cost that would be most of a small batch's encoding."""
    return pa.scalar(value, kind)


def _u64(value: int) -> pa.Scalar:
    return _scalar(value, pa.uint64())


def _bytes(value: bytes) -> pa.Scalar:
    return _scalar(value, pa.binary())


def _int(value: int) -> pa.Scalar:
    return _scalar(value, pa.int64())


def _as_int64(values: pa.Array) -> pa.Array:
    return values if pa.types.is_int64(values.type) else values.cast(pa.int64())


_STRIDES: dict[int, pa.Buffer] = {}


def _strided(width: int, count: int) -> pa.Buffer:
    """int32 offsets 0, width, 2 * width, ... for ``count`` values: a binary array over
    ``count`` packed values of ``width`` bytes each, without a kernel call. One buffer per
    width, grown as needed and sliced."""
    buffer = _STRIDES.get(width)
    if buffer is None or buffer.size < (count + 1) * 4:
        if width * count > _INT32_MAX:
            raise ValueError(f"{count} values of {width} bytes overflow binary offsets")
        # room for passes up to twice this one's size before the next rebuild
        capacity = min(2 * count, _INT32_MAX // width)
        buffer = _STRIDES[width] = pa.py_buffer(
            array("i", range(0, width * (capacity + 1), width)).tobytes()
        )
    return buffer.slice(0, (count + 1) * 4)


def _offsets(values: pa.Array) -> list[int]:
    """A binary array's ``len + 1`` offsets, as Python ints."""
    view = memoryview(values.buffers()[1])[
        values.offset * 4 : (values.offset + len(values) + 1) * 4
    ]
    return view.cast("i").tolist()


def _varints(values: pa.Array) -> pa.Array:
    """Each int64 value's varint (negative: its 64-bit two's complement, 10 bytes)."""
    unsigned = _as_int64(values).view(pa.uint64())
    top = pc.max(unsigned).as_py() or 0
    chunks = max(1, -(-top.bit_length() // _CHUNK_BITS))
    pieces = []
    for j in range(chunks):
        # what is left of each value from chunk j on; past a value's end it is 0, which
        # the tables for j > 0 turn into nothing
        rest = pc.shift_right(unsigned, _u64(_CHUNK_BITS * j)) if j else unsigned
        table = _varint_table() if j == 0 else _varint_tail_table()
        if j + 1 < chunks:
            # the chunk with "more to follow" where more follows: rest itself when it
            # fits one chunk, else chunk + 2**14 (the smaller of the two)
            low = pc.bit_wise_and(rest, _u64(_LAST - 1))
            rest = pc.min_element_wise(rest, pc.add(low, _u64(_LAST)))
        pieces.append(table.take(rest))
    if len(pieces) == 1:
        return pieces[0]
    return pc.binary_join_element_wise(*pieces, _bytes(b""))


def _fixed64(values: pa.Array) -> pa.Array:
    """Each int64 value's 8 little-endian bytes (the values' own buffer where it can)."""
    if sys.byteorder != "little":
        return pa.array([v.to_bytes(8, "little") for v in values.to_pylist()], pa.binary())
    values = _as_int64(values)
    data = values.buffers()[1].slice(values.offset * 8, len(values) * 8)
    return pa.Array.from_buffers(pa.binary(), len(values), [None, _strided(8, len(values)), data])


Piece: TypeAlias = "pa.Array | pa.Scalar"
"""A ``binary_join_element_wise`` argument: per row, or the same for every row."""


def _int_attribute(values: pa.Array, prefixes: pa.Array, prefix_index: Piece | None) -> list[Piece]:
    """An int attribute per row (none for a null), as pieces of the span's join:
    ``prefixes[prefix_index + len(varint)]`` and the varint."""
    filled = pc.fill_null(values, _scalar(0, values.type)) if values.null_count else values
    varints = _varints(filled)
    index = pc.binary_length(varints)
    if prefix_index is not None:
        index = pc.add(index, prefix_index)
    prefix = prefixes.take(index)
    if not values.null_count:
        return [prefix, varints]
    out = pc.binary_join_element_wise(prefix, varints, _bytes(b""))
    return [pc.if_else(pc.is_null(values), _bytes(b""), out)]


class _Rows:
    """Every span's bytes but its two ids, built a column at a time in Arrow.

    A span's field is ``fronts + trace_id + b"\\x12\\x08" + span_id + rests``; the ids come
    from hashing ``keys`` (the trace key) and ``id_inputs`` (what ``model.span_id`` hashes).
    What all blocks share is handed to Arrow as one scalar rather than spread over the rows:
    continuous mode often has one block, or blocks that are all done.
    """

    def __init__(self, blocks: list[_Block], codes: pa.Array, rows: dict[str, pa.Array]) -> None:
        single = len(blocks) == 1

        def per_row(values: list[Any], kind: pa.DataType) -> Piece:
            if single:
                return pa.scalar(values[0], kind)
            return pa.array(values, kind).take(codes)

        def pick(flags: list[bool], if_true: Piece, if_false: Piece) -> Any:
            """Per row: ``if_true`` where its block's flag is set, else ``if_false``."""
            if all(flags):
                return if_true
            if not any(flags):
                return if_false
            return pc.if_else(per_row(flags, pa.bool_()), if_true, if_false)

        done = [b.done for b in blocks]
        is_p2p = [b.is_p2p for b in blocks]
        record_id = rows["record_id"]
        self.count = len(record_id)

        # ids' inputs: model.trace_key's and model.span_id's text, "None" for a null
        sequence = pick(is_p2p, rows["p2p_seq_id"], rows["collective_seq_id"])
        sequence_text = sequence.cast(pa.string())
        if sequence_text.null_count:
            sequence_text = pc.fill_null(sequence_text, _scalar("None", pa.string()))
        id_tail = pc.binary_join_element_wise(
            per_row([b.id_infix for b in blocks], pa.string()),
            record_id.cast(pa.string()),
            _scalar("", pa.string()),
        )
        # The ids hash key_lead + the row's tail. The lead is hashed once per block and the
        # hasher copied per row: it holds the group's member list, 600 KB at 100,000 ranks,
        # which joined onto every row's tail would be hashed and held again for every span,
        # gigabytes for a flush and far more time than the rest of a span's encoding.
        leads = [b.key_lead.encode() for b in blocks]
        self.trace_hashers = [blake2b(lead, digest_size=16) for lead in leads]
        self.span_hashers = [blake2b(lead, digest_size=8) for lead in leads]
        self.blocks: list[int] = [0] * len(record_id) if single else codes.to_pylist()
        self.tails: list[bytes] = sequence_text.view(pa.binary()).to_pylist()
        self.id_tails: list[bytes] = id_tail.view(pa.binary()).to_pylist()

        # times: start = creation (or 0); end = completion if done, else the dump time,
        # the start when that is null or 0, and never before the start. With start >= 0
        # (protobuf refuses less), "null or 0 -> start" is already what the max does.
        start = _as_int64(rows["time_created_ns"])
        if start.null_count:
            start = pc.fill_null(start, _int(0))
        earliest = pc.min(start).as_py()
        if earliest < 0:
            raise ValueError("Value out of range: negative time_created_ns")
        end = _as_int64(pick(done, rows["time_completed_ns"], rows["dump_time_ns"]))
        if end.null_count:
            end = pc.fill_null(end, _int(0))
        end = pc.max_element_wise(end, start)
        times: list[Piece] = []
        for tag, value in ((b"\x39", start), (b"\x41", end)):
            if earliest > 0:  # and so is every end: no time is left out
                times += (_bytes(tag), _fixed64(value))
            else:  # a time of 0 is protobuf's default: not written
                times.append(
                    pc.if_else(
                        pc.equal(value, _int(0)),
                        _bytes(b""),
                        pc.binary_join_element_wise(_bytes(tag), _fixed64(value), _bytes(b"")),
                    )
                )

        prefixes = _int_prefix_table()
        # a pair of columns picked by point-to-point-ness: the ids' sequence is one
        picked: dict[tuple[str | None, str | None], Any] = {
            ("p2p_seq_id", "collective_seq_id"): sequence
        }

        def slot_attribute(slot: _Slot) -> list[Piece]:
            """The slot's attribute for every row (none where a row has none)."""
            chosen = [slot.always or (slot.p2p if p else slot.collective) for p in is_p2p]
            if all(a == chosen[0] for a in chosen):  # the same attribute for every block
                if chosen[0] is None:
                    return []
                first = _PREFIX_BASE[chosen[0].key]
                return _int_attribute(rows[chosen[0].column], prefixes.slice(first, 11), None)
            columns = (
                slot.p2p.column if slot.p2p else None,
                slot.collective.column if slot.collective else None,
            )
            values = picked.get(columns)
            if values is None:
                values = picked[columns] = pick(
                    is_p2p,
                    *(rows[c] if c else _scalar(None, pa.int64()) for c in columns),
                )
            offset = per_row([_PREFIX_BASE[a.key] if a else 0 for a in chosen], pa.int32())
            return _int_attribute(values, prefixes, offset)

        if all(done):
            error_status: list[Piece] = [_bytes(_STATUS_UNSET)]
        else:
            done_rows = pa.array(done, pa.bool_()).take(codes)
            error_kind = self._error_kinds(blocks, codes, done_rows, start, rows["dump_time_ns"])
            errors = pa.array([b"", _ERROR_TIMEOUT, _ERROR_NOT_COMPLETED], pa.binary())
            status = pc.if_else(
                done_rows,
                _bytes(_STATUS_UNSET),
                per_row([b.error_status for b in blocks], pa.binary()),
            )
            error_status = [errors.take(error_kind), status]
        # name, kind, times, then the plan's attributes: shared segments around the slots
        pieces: list[Piece] = [per_row([b.name_kind for b in blocks], pa.binary()), *times]
        for index, slot in enumerate(_SLOTS):
            pieces.append(per_row([b.segments[index] for b in blocks], pa.binary()))
            pieces += slot_attribute(slot)
        pieces.append(per_row([b.segments[-1] for b in blocks], pa.binary()))
        self.rests: pa.Array = pc.binary_join_element_wise(*pieces, *error_status, _bytes(b""))
        # 28: the two ids with their tags and lengths
        length = pc.add(pc.binary_length(self.rests), _scalar(28, pa.int32()))
        if pc.max(length).as_py() < _LAST:
            self.fronts: pa.Array = _front_table().take(length)
        else:
            self.fronts = pc.binary_join_element_wise(
                _bytes(b"\x12"), _varints(length), _bytes(b"\x0a\x10"), _bytes(b"")
            )
        self.runs = self._runs(blocks, codes, self.count)

    @staticmethod
    def _error_kinds(
        blocks: list[_Block], codes: pa.Array, done: pa.Array, start: pa.Array, dump: pa.Array
    ) -> pa.Array:
        """0: done; 1: ``timeout``; 2: ``not_completed`` (``plan.error_type``). Decided in
        Python, with Python's ints, for the (usually few) rows not done: the rule mixes
        truthiness and arithmetic that could overflow int64 at the edges."""
        not_done = pc.invert(done)
        rows = pc.indices_nonzero(not_done)
        kinds = pc.if_else(done, _scalar(0, pa.int8()), _scalar(2, pa.int8()))
        if not len(rows):
            return kinds
        out = []
        for code, start_ns, dump_ns in zip(
            codes.take(rows).to_pylist(),
            start.take(rows).to_pylist(),
            dump.take(rows).to_pylist(),
            strict=True,
        ):
            block = blocks[code]
            kind = error_type(
                retired=block.retired,
                timeout_ms=block.timeout_ms,
                start_ns=start_ns,
                dump_time_ns=dump_ns,
            )
            out.append(1 if kind == model.ERROR_TIMEOUT else 2)
        return pc.replace_with_mask(kinds, not_done, pa.array(out, pa.int8()))

    @staticmethod
    def _runs(
        blocks: list[_Block], codes: pa.Array, count: int
    ) -> list[tuple[int, int, _Resource]]:
        """(first row, end row, resource) of each run of rows of one rank (rows are sorted).

        Resources compare by value: blocks encoded in different calls share them alike."""
        index: dict[_Resource, int] = {}
        for block in blocks:
            index.setdefault(block.resource, len(index))
        resources = list(index)
        if len(resources) == 1:
            return [(0, count, resources[0])]
        per_row = pa.array([index[b.resource] for b in blocks], pa.int64()).take(codes)
        changes = pc.indices_nonzero(pc.not_equal(per_row[1:], per_row[:-1])).to_pylist()
        starts = [0, *(c + 1 for c in changes)]
        ends = [*starts[1:], count]
        return [
            (begin, stop, resources[per_row[begin].as_py()])
            for begin, stop in zip(starts, ends, strict=True)
        ]


class EncodedRequest(bytes):
    """A serialized request that knows how many spans it holds (senders count them; parsing
    the bytes back for that cost as much as encoding them)."""

    span_count: int = 0


def _request(parts: list[bytes | memoryview], spans: int) -> EncodedRequest:
    request = EncodedRequest(b"".join(parts))
    request.span_count = spans
    return request


class _CountedSize:
    """What ``encode_requests`` counts for the spans before row i, for ``bisect``: their
    bytes after the ids (``rests``) plus 44 each (the ids, and ``ByteSize() + 16``)."""

    def __init__(self, rest_offsets: list[int]) -> None:
        self._offsets = rest_offsets

    def __getitem__(self, row: int) -> int:
        return self._offsets[row] - self._offsets[0] + 44 * row

    def __len__(self) -> int:
        return len(self._offsets)


def _ids(rows: _Rows) -> bytes:
    """Each span's ``trace_id + b"\\x12\\x08" + span_id``, packed (26 bytes a span).

    The only per-row Python loop of the module: two hashes (``model.trace_id`` and
    ``model.span_id``, inlined) and the list items.
    """
    # copying a hasher is cheaper than making one per span (keyword parsing), and these
    # have their block's key lead in them already
    trace_hashers, span_hashers = rows.trace_hashers, rows.span_hashers
    pieces: list[bytes] = []
    extend = pieces.extend
    for block, tail, id_tail in zip(rows.blocks, rows.tails, rows.id_tails, strict=True):
        hasher = trace_hashers[block].copy()
        hasher.update(tail)
        trace_id = hasher.digest()
        hasher = span_hashers[block].copy()
        hasher.update(tail)
        hasher.update(id_tail)
        extend((trace_id, b"\x12\x08", hasher.digest()))
    ids = b"".join(pieces)
    if _ZERO_SPAN_ID not in ids:  # so no id is zero either (a 2**-64 chance per span)
        return ids
    # the model's ids are never zero: its last byte becomes 1
    fixed = bytearray(ids)
    for at in range(0, len(fixed), 26):
        if fixed[at : at + 16] == _ZERO_TRACE_ID:
            fixed[at + 15] = 1
        if fixed[at + 18 : at + 26] == _ZERO_SPAN_ID:
            fixed[at + 25] = 1
    return bytes(fixed)


def _requests(rows: _Rows, max_bytes: int) -> Iterator[bytes]:
    """Hash the ids, assemble the spans and cut the requests as ``encode_requests`` does.

    The spans are joined in Arrow into one buffer, in order; a request is slices of it,
    each behind its rank's ``ResourceSpans`` header, joined once.
    """
    count = rows.count
    ids = pa.Array.from_buffers(
        pa.binary(), count, [None, _strided(26, count), pa.py_buffer(_ids(rows))]
    )
    spans = pc.binary_join_element_wise(rows.fronts, ids, rows.rests, _bytes(b""))
    data = memoryview(spans.buffers()[2])
    ends = _offsets(spans)
    counted = _CountedSize(_offsets(rows.rests))
    parts: list[bytes | memoryview] = []  # the request's pieces, joined once at the end
    size = 0  # what encode_requests counts: resource headers, span sizes plus 16 each
    spans_in_request = 0
    for begin, stop, resource in rows.runs:
        row = begin
        while row < stop:
            # a rank's first span in a request is checked before its header is counted
            if parts and size + counted[row + 1] - counted[row] > max_bytes:
                yield _request(parts, spans_in_request)
                parts, size, spans_in_request = [], 0, 0
            size += resource.header_size
            # this span (whatever its size: it starts the request or its rank's part),
            # then every following one of the rank that still fits
            fit = bisect_right(counted, max_bytes - size + counted[row], row + 1, stop + 1) - 1
            end = max(row + 1, fit)
            size += counted[end] - counted[row]
            spans_in_request += end - row
            parts += (
                _resource_spans_head(resource, ends[end] - ends[row]),
                data[ends[row] : ends[end]],
            )
            row = end
            if row < stop:  # the next span does not fit
                yield _request(parts, spans_in_request)
                parts, size, spans_in_request = [], 0, 0
    if parts:
        yield _request(parts, spans_in_request)
