"""FR pickle bytes -> Arrow columns of its entries, by the C decoder ``_pickle_columns``.

The fast path of the import: it never builds the entries as Python objects (see the C
file for why and how). It reads only what it can read exactly as the general path
(``parse.decode_dump_stream`` then ``dump_to_table``) would; for anything else, or where
the extension was not compiled, ``decode_columns`` returns None and the caller takes the
general path, which words every error.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from fr_otel.dumps.parse import RAW_ENTRY, DecodedEntries, expansion_detail

try:
    from fr_otel.dumps import _pickle_columns  # type: ignore[attr-defined]
except ImportError:  # not compiled here: the general path reads every dump
    _pickle_columns = None

AVAILABLE = _pickle_columns is not None


def _buffer(data: bytes | None) -> pa.Buffer | None:
    return None if data is None else pa.py_buffer(data)


def _column(kind: pa.DataType, n: int, parts: tuple[Any, ...]) -> pa.Array:
    """An Arrow array over the decoder's buffers: (validity, nulls, values, data, data2)."""
    valid, nulls, values, data, data2 = parts
    validity = _buffer(valid)
    if kind == pa.string():
        return pa.Array.from_buffers(
            kind, n, [validity, pa.py_buffer(values), pa.py_buffer(data)], nulls
        )
    if pa.types.is_list(kind):
        inner = kind.value_type
        count = len(data) // 4 - 1
        if inner == pa.string():
            child = pa.Array.from_buffers(
                inner, count, [None, pa.py_buffer(data), pa.py_buffer(data2)]
            )
        else:  # list<int64>: a shape
            child = pa.Array.from_buffers(
                inner,
                count,
                [None, pa.py_buffer(data)],
                children=[
                    pa.Array.from_buffers(pa.int64(), len(data2) // 8, [None, pa.py_buffer(data2)])
                ],
            )
        return pa.Array.from_buffers(
            kind, n, [validity, pa.py_buffer(values)], nulls, children=[child]
        )
    return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(values)], nulls)


class ExpandingPickleError(ValueError):
    """The pickle names the same objects so many times over that its entries would
    decode to far more than its size (gigabytes from a few hundred kilobytes): whatever
    reads it would run out of memory. No real dump does that."""


def decode_columns(data: bytes) -> tuple[dict[str, Any], DecodedEntries] | None:
    """The dump without its entries, and its entries in columns; None when the general
    path must read ``data`` (see the module's docstring). Raises
    ``ExpandingPickleError`` for a pickle neither path should expand."""
    if _pickle_columns is None:
        return None
    decoded = _pickle_columns.decode(data)
    if decoded == "expands":
        raise ExpandingPickleError(expansion_detail(len(data)))
    if decoded is None:
        return None
    rest, n, columns, stacks = decoded
    fields = list(RAW_ENTRY)
    raw = pa.StructArray.from_arrays(
        [_column(field.type, n, columns[field.name]) for field in fields], fields=fields
    )
    stack_index = _column(pa.int32(), n, columns["frames"])
    return rest, DecodedEntries(raw=raw, stack_index=stack_index, stacks=stacks)
