"""Torch's own Flight Recorder read as Arrow columns: its dumps of this process (pickle, no
stack traces), decoded by the import's C decoder, and the column work the mirror
(``frsource.FrMirror``) does on them before any entry becomes Python values: the entries in
record order, each entry's group and signature as a key, a column's distinct values.
"""

from __future__ import annotations

from functools import cache
from itertools import pairwise
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pyarrow is imported where entries are read: not at install
    import pyarrow as pa

FR_SOURCES = ("_dump_fr_trace", "_dump_nccl_trace")
"""Torch keeps one Flight Recorder per event type: the generic one (gloo and other CPU
backends) and NCCL's. A job with groups of both has entries in both, each numbered on its
own (``record_id``). Their pickle dumps, without stack traces, are read: torch writes
the pickle in a fraction of the time the same entries take as JSON."""


def fr_columns(data: bytes) -> pa.StructArray:
    """A pickle dump's entries as columns (``parse.RAW_ENTRY``): by the import's C decoder
    (several times faster than the restricted unpickler, which reads what the decoder
    declines; both refuse every global)."""
    from fr_otel.dumps.columnar import decode_columns
    from fr_otel.dumps.parse import raw_entries
    from fr_otel.dumps.safe_pickle import loads_plain

    if not data:
        return raw_entries([])
    decoded = decode_columns(data)
    if decoded is not None:
        return decoded[1].raw
    entries = loads_plain(data).get("entries", [])
    return raw_entries(entries if isinstance(entries, list) else [])


def torch_fr_entries() -> dict[str, pa.StructArray] | None:
    """This process's FR entries (no stack traces) by recorder, or None when torch has
    none. The dump is torch's own, of this process; it is still read as untrusted, as
    every dump is."""
    try:
        from torch._C import _distributed_c10d as c10d_ext
    except ImportError:
        return None
    found: dict[str, pa.StructArray] = {}
    for name in FR_SOURCES:
        function: Any = getattr(c10d_ext, name, None)
        if function is None:
            continue
        try:
            raw = function(includeCollectives=True, includeStackTraces=False, onlyActive=False)
            found[name] = fr_columns(bytes(raw) if raw else b"")
        except Exception:  # NCCL's recorder exists but this process has no NCCL group
            continue
    return found if found else None


@cache
def _text(value: str) -> pa.Scalar:
    """A string scalar, made once: pyarrow converting a Python literal in a compute call
    looks for dateutil each time (a filesystem search where it is not installed)."""
    import pyarrow as pa

    return pa.scalar(value, pa.string())


def _sizes_text(sizes: pa.ListArray) -> pa.Array:
    """``[[2, 3], []]`` -> ``"[2x3][]"``: one text per row, equal for equal shape lists."""
    import pyarrow as pa
    import pyarrow.compute as pc

    inner = sizes.flatten()
    texts = pc.binary_join(inner.cast(pa.list_(pa.string())), _text("x"))
    shapes = pc.binary_join_element_wise(_text("["), texts, _text("]"), _text(""))
    offsets = sizes.offsets
    rebased = pc.subtract(offsets, offsets[0]) if len(offsets) else offsets
    per_row = pa.ListArray.from_arrays(rebased, shapes, mask=sizes.is_null())
    return pc.binary_join(per_row, _text(""))


def signature_keys(entries: pa.StructArray) -> pa.DictionaryArray:
    """Per entry, what makes its ``Signature``, as a text (Arrow hashes no nested lists):
    entries of one call site share it, so each distinct one is built once."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = [
        entries.field("profiling_name"),
        _sizes_text(entries.field("input_sizes")),
        _sizes_text(entries.field("output_sizes")),
        pc.binary_join(entries.field("input_dtypes"), _text(",")),
        pc.binary_join(entries.field("output_dtypes"), _text(",")),
        entries.field("is_p2p").cast(pa.string()),
    ]
    text = pc.binary_join_element_wise(*[pc.fill_null(p, _text("")) for p in parts], _text("|"))
    return pc.dictionary_encode(text)


def encoded_rows(array: pa.Array) -> tuple[list[int | None], list[Any]]:
    """Per row an index into the distinct values (None for a null), and those values."""
    from fr_otel.dumps.parse import encoded

    values, indices = encoded(array)
    return indices.to_pylist(), values


def first_items(lists: pa.ListArray) -> pa.Array:
    """Each list's first item; null for a null or empty list."""
    import pyarrow as pa
    import pyarrow.compute as pc

    filled = pc.greater(pc.list_value_length(lists), 0)
    return pc.list_element(pc.if_else(filled, lists, pa.scalar(None, lists.type)), 0)


def in_record_order(entries: pa.StructArray) -> tuple[pa.StructArray, list[int]]:
    """The entries with a record id, in record order (torch dumps its ring oldest first;
    anything else is sorted, not trusted), and their record ids."""
    import pyarrow.compute as pc

    ids = entries.field("record_id")
    if ids.null_count:
        entries = entries.filter(pc.is_valid(ids))
        ids = entries.field("record_id")
    records: list[int] = ids.to_pylist()
    if any(later < earlier for earlier, later in pairwise(records)):
        entries = entries.take(pc.sort_indices(ids))
        records.sort()
    return entries, records
