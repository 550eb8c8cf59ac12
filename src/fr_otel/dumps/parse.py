"""Flight Recorder dump bytes -> rows of the canonical table.

Handles both encodings torch writes (pickle from ``_dump_fr_trace``/``_dump_nccl_trace``,
JSON from the ``*_json`` variants) and every format version from 2.3 to 2.10: a field a
version lacks becomes null. The differences between the two encodings are normalised
here: ``process_group`` tuple vs list, ``time_discovered_*`` None vs 0, ``pg_status`` ints
vs strings, ``entries`` omitted when empty.

The module is over 800 lines because it is the import's measured path: every dump's
conversion to the canonical columns (``dump_to_table``, after the C decoder or the general
path's unpickler) runs here, timed by ``benchmarks/import_throughput.py`` for both paths.
The normalisation, the hostile-dump bounds and the column building are its steps on one
dump's entries, each one pass over them.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc

from fr_otel.dumps.safe_pickle import UnsafePickleError, load_plain
from fr_otel.errors import DumpError
from fr_otel.schema import ALL_GATHER_OPS, RECORD_SCHEMA, SIZES_TYPE, with_members_type
from fr_otel.stacks import call_site

_PROFILING_NAME = re.compile(
    r"^(?:(?P<backend>[A-Za-z0-9_]+):)?(?P<op>[A-Za-z0-9_]+)(?:\s+(?P<meta>.*))?$"
)
_P2P_META = re.compile(r"^\s*(?P<me>\d+)\s*(?:->|<-)\s*(?P<peer>\d+)\s*$")
_REQUIRED_ENTRY_KEYS = ("record_id", "process_group", "profiling_name")
_WITHOUT_MEMBERS = RECORD_SCHEMA.remove(RECORD_SCHEMA.get_field_index("pg_ranks"))

SHARED_COLUMNS = frozenset(
    {
        "job",
        "incident",
        "run_id",
        "pg_name",
        "pg_desc",
        "backend",
        "op",
        "profiling_name",
        "frames",
        "call_site",
        "state",
        "thread_name",
        "thread_id",
        "source_file",
        "source_format",
        "fr_version",
        "comm_lib_version",
    }
)
"""Columns of a dump's rows that hold a few distinct values each (its constants, groups,
ops and stacks). ``dump_to_table(shared=True)`` gives them as dictionaries, each value
once: the form of the analyzer's scratch files (``archive.scratch``), where a stack is
written once instead of on every row that holds it."""


def shared_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the ``SHARED_COLUMNS`` it has as dictionaries of their type."""
    for name in SHARED_COLUMNS & set(schema.names):
        index = schema.get_field_index(name)
        field_ = schema.field(index)
        schema = schema.set(index, field_.with_type(pa.dictionary(pa.int32(), field_.type)))
    return schema


# Backends whose pg_config torch records wrongly: every gloo group lands under the key
# '' with the ranks of whichever group was created last.
UNTRUSTED_PG_CONFIG_BACKENDS = frozenset({"gloo"})


@dataclass(kw_only=True, slots=True)
class GroupSeen:
    """A process group as one dump shows it."""

    name: str
    desc: str | None
    ranks: list[int] | None
    """Global ranks from a trustworthy ``pg_config``; None when unknown."""
    entries: int = 0
    size_hint: int | None = None
    """Group size implied by an all_gather's shapes; lets a missing top rank be seen
    when ``ranks`` is unknown (gloo)."""


@dataclass(kw_only=True, slots=True)
class ParsedDump:
    """One dump file's rows plus what the fleet-level steps need to know about it."""

    table: pa.Table
    source_format: str
    version: str | None
    backends: set[str]
    groups: dict[str, GroupSeen] = field(default_factory=dict)
    record_id_span: tuple[int, int, int] = (0, -1, -1)
    """(count, first, last) record ids: equal spans mean the same buffer in two encodings."""
    warnings: list[str] = field(default_factory=list)
    """What the reader read but cannot vouch for (an unknown format version, no entries)."""


KNOWN_VERSIONS = ("2.3", "2.10")
"""The oldest and newest FR format versions this reader was checked against."""


_RUN_IN_PATH = re.compile(r"(?:^|/)run=([A-Za-z0-9][A-Za-z0-9._-]{0,127})/")


def run_id_of(path: str) -> str | None:
    """The run id a dump's path names in a ``run=<id>`` folder (the recorder archives
    torch's own dumps of an incident under ``_fr_dumps/job=J/run=R/incident=I/``), so that
    importing them gives the trace ids the recorder's spans have."""
    found = _RUN_IN_PATH.findall(path.replace("\\", "/"))
    return found[-1] if found else None


def version_warning(version: str | None) -> str | None:
    """Why a dump's ``version`` cannot be vouched for, or None."""
    if version is None:
        return "it names no FR format version: read as 2.10"
    major, _, minor = version.partition(".")
    if major == "2" and minor.isdigit() and 3 <= int(minor) <= 10:
        return None
    return (
        f"FR format version {version} is not one this reader knows"
        f" ({KNOWN_VERSIONS[0]} to {KNOWN_VERSIONS[1]}): read as 2.10, fields it adds are"
        " ignored"
    )


def sniff_format(head: bytes) -> str | None:
    """``pickle``, ``json`` or None, from the first bytes of a file."""
    if head[:1] == b"\x80":
        return "pickle"
    if head.lstrip()[:1] == b"{":
        return "json"
    return None


def decode_dump(data: bytes, path: str) -> tuple[dict[str, Any], str]:
    """Bytes -> the dump dict and its encoding, or a ``DumpError`` naming the problem."""
    return decode_dump_stream(io.BufferedReader(io.BytesIO(data)), path)


def decode_dump_stream(handle: BinaryIO, path: str) -> tuple[dict[str, Any], str]:
    """Like ``decode_dump`` for a seekable binary stream positioned at its start.

    Unpickling straight from a buffered file is several times faster than from an
    in-memory copy (the C unpickler prefetches through ``peek``), and this is the import's
    hot path.
    """
    head = handle.peek(64)[:64] if hasattr(handle, "peek") else handle.read(64)
    if not hasattr(handle, "peek"):
        handle.seek(0)
    if not head:
        raise DumpError(path, "empty", "the file is empty (0 bytes); the dump was never written")
    fmt = sniff_format(head)
    if fmt == "pickle":
        obj = _unpickle(handle, path)
    elif fmt == "json":
        data = handle.read()
        try:
            obj = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            # an FR JSON dump is one object: a complete one ends with its closing brace
            problem = "corrupt" if data.rstrip().endswith(b"}") else "truncated"
            raise DumpError(path, problem, f"not valid JSON ({exc})") from None
    else:
        raise DumpError(
            path, "foreign", "neither a pickle nor a JSON document: not a Flight Recorder dump"
        )
    if not isinstance(obj, dict) or "version" not in obj or "pg_config" not in obj:
        keys = sorted(obj)[:6] if isinstance(obj, dict) else type(obj).__name__
        raise DumpError(
            path, "foreign", f"a {fmt} file but not a Flight Recorder dump (found {keys})"
        )
    return obj, fmt


def _unpickle(handle: BinaryIO, path: str) -> Any:
    try:
        return load_plain(handle)
    except UnsafePickleError as exc:
        raise DumpError(
            path, "hostile", f"{exc}; the file was not loaded and nothing in it ran"
        ) from None
    except (EOFError, pickle.UnpicklingError, ValueError, KeyError, IndexError, TypeError) as exc:
        handle.seek(0, io.SEEK_END)
        size = handle.tell()
        handle.seek(max(size - 1, 0))
        # every complete pickle ends with the STOP opcode
        ends_with_stop = handle.read(1) == b"."
        if isinstance(exc, EOFError) or not ends_with_stop or _ends_early(exc):
            raise DumpError(
                path, "truncated", f"the pickle ends early ({size} bytes; {exc or 'EOF'})"
            ) from None
        raise DumpError(path, "corrupt", f"not a readable pickle ({exc})") from None


def _ends_early(exc: Exception) -> bool:
    text = str(exc).lower()
    return "truncated" in text or "ran out of input" in text or "pickle data was" in text


def _parse_ranks(value: Any) -> list[int] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if not isinstance(value, list) or not value:
        return None
    # one pass over types, not one isinstance per member: a default group lists every
    # rank of the job and every group of every dump comes through here, so at thousands of
    # ranks the per-member Python call is most of the work
    if set(map(type, value)) == {int}:
        return list(value)
    if all(isinstance(r, int) for r in value):  # bools, int subclasses
        return [int(r) for r in value]
    return None


def _int_or_none(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def split_profiling_name(name: str) -> tuple[str | None, str, int | None]:
    """``'nccl:send 0->1'`` -> ``('nccl', 'send', 1)``: backend, op, group-local peer."""
    match = _PROFILING_NAME.match(name)
    if match is None:
        return None, name, None
    meta = match.group("meta")
    peer = None
    if meta:
        p2p = _P2P_META.match(meta)
        if p2p is not None:
            peer = int(p2p.group("peer"))
    return match.group("backend"), match.group("op"), peer


def global_peer(pg_ranks: list[int] | None, local_peer: int | None) -> int | None:
    """Map a group-local peer to a global rank (FR's send/recv names use group ranks)."""
    if local_peer is None or pg_ranks is None or not 0 <= local_peer < len(pg_ranks):
        return None
    return pg_ranks[local_peer]


# The entry fields as torch writes them. Converting every entry in one C++ call through
# this struct type is an order of magnitude faster than building columns in Python; keys a
# version lacks come out null, and keys we do not list (``frames``) are ignored.
_INT_FIELDS = (
    "record_id",
    "pg_id",
    "collective_seq_id",
    "p2p_seq_id",
    "op_id",
    "time_created_ns",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
    "timeout_ms",
)
_STR_FIELDS = ("profiling_name", "state", "thread_name", "thread_id")
RAW_ENTRY = pa.struct(
    [(name, pa.int64()) for name in _INT_FIELDS]
    + [(name, pa.string()) for name in _STR_FIELDS]
    + [
        ("process_group", pa.list_(pa.string())),
        ("duration_ms", pa.float64()),
        ("input_sizes", SIZES_TYPE),
        ("input_dtypes", pa.list_(pa.string())),
        ("output_sizes", SIZES_TYPE),
        ("output_dtypes", pa.list_(pa.string())),
        ("retired", pa.bool_()),
        ("is_p2p", pa.bool_()),
    ]
)


def _normalised(entry: dict[str, Any]) -> dict[str, Any]:
    """Coerce the scalar fields of an entry written by a tool less strict than torch."""
    out = dict(entry)
    for key in _INT_FIELDS:
        if key in out:
            out[key] = _int_or_none(out[key])
    for key in _STR_FIELDS:
        value = out.get(key)
        if value is not None and not isinstance(value, str):
            out[key] = str(value)
    group = out.get("process_group")
    if isinstance(group, (list, tuple)):
        out["process_group"] = [str(g) for g in group]
    elif group is not None:
        out["process_group"] = [str(group)]
    return out


EXPANSION_FACTOR = 64
"""A dump's entries may decode to this many times the dump's bytes (plus
``EXPANSION_FLOOR``), their stacks aside, and not more. Real dumps decode to a few times
their size; a pickle's memo lets a few bytes name one list in every entry, many times
over: kilobytes that would decode to gigabytes. ``_pickle_columns.c`` keeps this bound
(its own copy, in C) on what it decodes; ``dump_to_table`` keeps it on the general path."""
STACK_EXPANSION_FACTOR = 256
"""The bound on stacks, looser: torch memoises each frame, so a stack in the pickle is a
list of 2-5 byte references to frames whose two strings every entry's row copies."""
EXPANSION_FLOOR = 1 << 24


def expansion_detail(size: int, factor: int = EXPANSION_FACTOR) -> str:
    """Why a dump of ``size`` bytes that would decode past ``factor`` times that was not
    read."""
    return (
        f"its entries name the same lists so often that these {size} bytes would decode to"
        f" more than {factor} times their size; no Flight Recorder dump does that, and it"
        " was not expanded"
    )


class _Expands(ValueError):
    """The entries would decode past their bound: ``args[0]``, its factor."""


_MEASURED_LISTS = (
    # (field, bytes an item's length stands for): shapes hold int64s, the rest text
    ("input_sizes", 8),
    ("output_sizes", 8),
    ("process_group", 1),
    ("input_dtypes", 1),
    ("output_dtypes", 1),
)


def _field_bytes(values: list[Any], unit: int, limit: float) -> float:
    """What one field's lists, named by ``values`` (one per entry), decode to: 4 bytes an
    item, ``unit`` for each of an item's elements. Counted at C speed, each reference
    anew: that is what the conversion would make of them."""
    lists = [value for value in values if isinstance(value, list | tuple)]
    items = sum(map(len, lists))
    if 4 * items > limit:  # not a step further: the items may name long lists again
        return 4 * items
    try:
        units = sum(map(len, chain.from_iterable(lists)))
    except TypeError:  # an item without a length (an int where a shape was due)
        units = sum(len(i) if hasattr(i, "__len__") else 8 for i in chain.from_iterable(lists))
    return 4 * (len(lists) + items) + unit * units


def _check_entries_expansion(entries: list[dict[str, Any]], limit: float) -> None:
    """Raise ``_Expands`` when the entries' lists and strings (stacks aside) would decode
    to more than ``limit`` bytes, counted about as ``_pickle_columns.c`` counts."""
    total = 0.0
    for key, unit in _MEASURED_LISTS:
        total += _field_bytes([entry.get(key) for entry in entries], unit, limit - total)
        if total > limit:
            raise _Expands(EXPANSION_FACTOR)
    for key in _STR_FIELDS:
        texts = [value for entry in entries if isinstance(value := entry.get(key), str)]
        total += sum(map(len, texts))
    if total > limit:
        raise _Expands(EXPANSION_FACTOR)


def _stack_bytes(stack: Any) -> int:
    total = 4
    for frame in stack if isinstance(stack, list | tuple) else ():
        total += 16
        if isinstance(frame, dict):
            for key in ("name", "filename"):
                text = frame.get(key)
                if isinstance(text, str):
                    total += len(text)
    return total


@dataclass(kw_only=True, slots=True)
class DecodedEntries:
    """A dump's entries already in columns (``columnar.decode_columns``), each distinct
    stack once."""

    raw: pa.StructArray
    """One row per entry, ``RAW_ENTRY``."""
    stack_index: pa.Array
    """int32 per entry: its stack in ``stacks``; null for an entry without frames."""
    stacks: list[list[dict[str, Any]]]


def raw_entries(entries: list[dict[str, Any]]) -> pa.StructArray:
    """Entries as ``RAW_ENTRY`` rows (scalars a less strict writer left loose, coerced)."""
    try:
        return pa.array(entries, type=RAW_ENTRY)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array([_normalised(e) for e in entries], type=RAW_ENTRY)


def _without_zeros(array: pa.Array) -> pa.Array:
    # pickle says None and JSON says 0 for "not discovered"
    # Arrow scalars, not Python literals: pyarrow converts a literal on every call and,
    # without dateutil installed, tries to import it each time, which costs far more than
    # the comparison
    return pc.if_else(pc.equal(array, pa.scalar(0, array.type)), pa.scalar(None, pa.int64()), array)


def _content_key(stack: Any) -> tuple[Any, ...] | None:
    """What a stack converts from: each frame's name, file and line, the only keys the
    struct conversion and ``call_site`` read. A line that is not an int is keyed by its
    type and repr (``1``, ``1.0`` and ``True`` are equal keys but give different call
    sites). None when a frame is no dict or a value is unhashable: the stack is then
    converted on its own."""
    try:
        key = tuple(
            [
                (
                    frame.get("name"),
                    frame.get("filename"),
                    line if type(line := frame.get("line")) is int else (type(line), repr(line)),
                )
                for frame in stack
            ]
        )
        hash(key)
    except (AttributeError, TypeError):
        return None
    return key


def _frames_and_sites(
    entries: list[dict[str, Any]],
    frame_list_type: pa.DataType,
    limit: float,
    shared: bool = False,
) -> tuple[pa.Array, pa.Array]:
    """Convert each distinct stack once.

    torch symbolises each frame once per dump and the pickle memoises it, so entries from
    the same call site hold lists of the very same frame objects: stacks are first told
    apart by the identities of their frames (one cheap key per entry). Only then, once per
    distinct identity key, is a stack's content looked at, so that a dump written without
    shared frames still converts each distinct stack once.
    """
    code_of: dict[tuple[int, ...] | None, int] = {}
    # a list named by many entries is keyed once: a pickle can name a long one everywhere
    key_of: dict[int, tuple[int, ...]] = {}
    codes = [
        code_of.setdefault(
            None
            if (stack := entry.get("frames")) is None
            else key_of.get(id(stack)) or key_of.setdefault(id(stack), tuple(map(id, stack))),
            len(code_of),
        )
        for entry in entries
    ]
    # an entry per identity key: they hold the same frame objects, so any one will do
    holder = dict(zip(codes, entries, strict=True))
    by_content: dict[tuple[Any, ...], int] = {}
    unique: list[Any] = []
    position: list[int | None] = [None] * len(code_of)
    for key, code in code_of.items():
        if key is None:
            continue
        stack = holder[code]["frames"]
        content = _content_key(stack)
        found = by_content.get(content) if content is not None else None
        if found is None:
            found = len(unique)
            unique.append(stack)
            if content is not None:
                by_content[content] = found
        position[code] = found
    same = len(unique) == len(code_of) and position == list(range(len(code_of)))
    take = pa.array(codes if same else list(map(position.__getitem__, codes)), type=pa.int32())
    return _stack_columns(unique, take, frame_list_type, limit, shared)


def _stack_columns(
    stacks: list[Any],
    index: pa.Array,
    frame_list_type: pa.DataType,
    limit: float,
    shared: bool = False,
) -> tuple[pa.Array, pa.Array]:
    """The ``frames`` and ``call_site`` columns of rows that hold ``stacks[index[i]]``
    (``shared``: as dictionaries over the distinct stacks). Raises ``_Expands`` when
    these would take more than ``limit`` bytes once expanded (a reader of dictionaries
    expands them too): each row holds its stack, so a pickle can make one long stack
    every entry's."""
    if not stacks:
        index = pa.nulls(len(index), pa.int32())
        return _spread(pa.array([], frame_list_type), index, shared), _spread(
            pa.array([], pa.string()), index, shared
        )
    # every stack is some row's, so the rows' total bounds the stacks' conversion too
    sizes = pa.array([_stack_bytes(stack) for stack in stacks], pa.int64())
    if (pc.sum(sizes.take(index)).as_py() or 0) > limit:
        raise _Expands(STACK_EXPANSION_FACTOR)
    sites = pa.array([call_site(stack) for stack in stacks], type=pa.string())
    return _spread(pa.array(stacks, type=frame_list_type), index, shared), _spread(
        sites, index, shared
    )


def _spread(values: pa.Array, index: pa.Array, shared: bool) -> pa.Array:
    """Row ``i`` holds ``values[index[i]]``: a copy per row, or (``shared``) a dictionary."""
    if shared:
        return pa.DictionaryArray.from_arrays(index.cast(pa.int32()), values)
    return values.take(index)


def _numel(shape: list[int]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


def _add_size_hints(
    groups: dict[str, GroupSeen],
    name_values: list[Any],
    name_index: pa.Array,
    split: list[tuple[str | None, str, int | None]],
    profiling_index: pa.Array,
    raw: pa.StructArray,
) -> None:
    """An all_gather's output holds one input per member: its shapes give the group size.

    gloo stacks the list variant into one ``[world, n]`` tensor; NCCL's list variant has
    one output tensor per member; the tensor variants have ``world * n`` elements.
    """
    ops = [split[i][1] for i in profiling_index.to_pylist()]
    rows = [i for i, op in enumerate(ops) if op in ALL_GATHER_OPS]
    if not rows:
        return
    names = name_index.to_pylist()
    taken = pa.array(rows, pa.int64())  # typed: inferring a type tries to import dateutil
    inputs = raw.field("input_sizes").take(taken).to_pylist()
    outputs = raw.field("output_sizes").take(taken).to_pylist()
    for row, ins, outs in zip(rows, inputs, outputs, strict=True):
        if not ins or not outs or len(ins) != 1:
            continue
        in_numel = _numel(ins[0])
        if len(outs) > 1:
            size = len(outs)
        elif in_numel and _numel(outs[0]) % in_numel == 0:
            size = _numel(outs[0]) // in_numel
        else:
            continue
        group = groups[name_values[names[row]]]
        group.size_hint = max(group.size_hint or 0, size)


def _members(
    lists: list[list[int] | None], index: pa.Array, dictionary_above: int | None
) -> pa.Array:
    """Each row's group members: a dictionary column when some group has more than
    ``dictionary_above`` members, else the lists themselves."""
    if dictionary_above is not None and any(
        ranks is not None and len(ranks) > dictionary_above for ranks in lists
    ):
        return pa.DictionaryArray.from_arrays(index, pa.array(lists, type=pa.list_(pa.int64())))
    return _repeated_lists(lists, index)


def _repeated_lists(lists: list[list[int] | None], index: pa.Array) -> pa.Array:
    """``lists[index[i]]`` for every row, as a list<int64> column. A group's member list
    is on every row of its entries (at thousands of ranks, hundreds of thousands of values a
    dump): concatenating one Arrow array per row is several times faster than ``take`` on a
    list array."""
    if not len(index) or index.null_count or any(ranks is None for ranks in lists):
        return pa.array(lists, type=pa.list_(pa.int64())).take(index)
    arrays = [pa.array(ranks, type=pa.int64()) for ranks in lists]
    lengths = pa.array([len(ranks) for ranks in arrays], type=pa.int32()).take(index)
    # checked: past 2**31 values the int32 offsets would wrap; this raises instead
    offsets = pa.concat_arrays([pa.array([0], type=pa.int32()), pc.cumulative_sum_checked(lengths)])
    values = pa.concat_arrays([arrays[i] for i in index.to_pylist()])
    return pa.ListArray.from_arrays(offsets, values)


def encoded(array: pa.Array) -> tuple[list[Any], pa.Array]:
    """Distinct values (as Python objects) and each row's index into them."""
    encoded = pc.dictionary_encode(array)
    return encoded.dictionary.to_pylist(), encoded.indices


def dump_to_table(
    dump: Mapping[str, Any],
    *,
    path: str,
    source_format: str,
    job: str,
    incident: str,
    rank: int,
    dump_time_ns: int | None,
    members_column: bool = True,
    dictionary_members_above: int | None = None,
    decoded: DecodedEntries | None = None,
    source_bytes: int | None = None,
    shared: bool = False,
) -> ParsedDump:
    """Turn one decoded dump into canonical rows.

    Raises ``DumpError`` (``foreign``/``corrupt``) when the dump's structure is not FR's,
    and (``hostile``) when its entries would decode to far more than the ``source_bytes``
    it was read from (``EXPANSION_FACTOR``); without ``source_bytes``, nothing bounds them.
    ``members_column=False``: the table leaves out ``pg_ranks``, for a file written
    without it (``import_dumps(members_in_files=False)``); ``groups`` still has them.
    ``dictionary_members_above``: where a group has more members than this, ``pg_ranks`` is
    a dictionary column (each row an index into the groups' lists), not a copy of the list
    in every row (``archive.footer_members`` writes such a list once).
    ``decoded``: the entries, already in columns; ``dump`` then holds the rest.
    ``shared``: the ``SHARED_COLUMNS`` as dictionaries (``shared_schema``).
    """
    version = dump.get("version")
    version = str(version) if version is not None else None
    if decoded is None:
        entries = dump.get("entries", [])
        if not isinstance(entries, list):
            raise DumpError(path, "corrupt", f"'entries' is a {type(entries).__name__}, not a list")
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise DumpError(path, "corrupt", f"entry {index} is a {type(entry).__name__}")
            for key in _REQUIRED_ENTRY_KEYS:
                if key not in entry:
                    raise DumpError(path, "corrupt", f"entry {index} has no '{key}' field")
    if source_bytes is None:
        limit = stack_limit = float("inf")
    else:
        limit = EXPANSION_FACTOR * source_bytes + EXPANSION_FLOOR
        stack_limit = STACK_EXPANSION_FACTOR * source_bytes + EXPANSION_FLOOR
    try:
        if decoded is None:
            # the decoder bounds what it decodes itself
            _check_entries_expansion(entries, limit)
            raw = raw_entries(entries)
            frames, sites = _frames_and_sites(
                entries, RECORD_SCHEMA.field("frames").type, stack_limit, shared
            )
        else:
            raw = decoded.raw
            frames, sites = _stack_columns(
                decoded.stacks,
                decoded.stack_index,
                RECORD_SCHEMA.field("frames").type,
                stack_limit,
                shared,
            )
        parsed = _build(
            dump,
            raw,
            frames,
            sites,
            path,
            source_format,
            version,
            job,
            incident,
            rank,
            dump_time_ns,
            members_column,
            dictionary_members_above,
            shared,
        )
    except _Expands as exc:
        raise DumpError(path, "hostile", expansion_detail(source_bytes or 0, *exc.args)) from None
    except (TypeError, ValueError, IndexError, OverflowError, pa.ArrowException) as exc:
        raise DumpError(path, "corrupt", f"unexpected field contents ({exc})") from None
    warning = version_warning(version)
    if warning is not None:
        parsed.warnings.append(warning)
    if not len(parsed.table):
        parsed.warnings.append(
            "it holds no entries (FR off, or dumped without collectives): its rank counts"
            " as missing"
        )
    return parsed


def _build(
    dump: Mapping[str, Any],
    raw: pa.StructArray,
    frames: pa.Array,
    sites: pa.Array,
    path: str,
    source_format: str,
    version: str | None,
    job: str,
    incident: str,
    rank: int,
    dump_time_ns: int | None,
    members_column: bool,
    dictionary_members_above: int | None,
    shared: bool,
) -> ParsedDump:
    n = len(raw)
    if raw.field("record_id").null_count:
        raise ValueError("an entry has a null record_id")
    group_field = raw.field("process_group")
    lengths = pc.list_value_length(group_field)
    shortest = pc.min(lengths).as_py() if n else 2
    if shortest is None or shortest < 1:
        raise ValueError("an entry has an empty process_group")
    name_values, name_index = encoded(pc.list_element(group_field, pa.scalar(0, pa.int32())))
    if shortest >= 2:
        desc_column = pc.list_element(group_field, pa.scalar(1, pa.int32()))
    else:  # a (name,) group from a tool that left the description out
        desc_column = pa.array(
            [g[1] if len(g) > 1 else None for g in group_field.to_pylist()], type=pa.string()
        )

    profiling_values, profiling_index = encoded(raw.field("profiling_name"))
    split = [split_profiling_name(str(name)) for name in profiling_values]
    backends = {backend for backend, _, _ in split if backend}

    pg_config = dump.get("pg_config") or {}
    trust_config = isinstance(pg_config, dict) and not (backends & UNTRUSTED_PG_CONFIG_BACKENDS)
    counts = pc.value_counts(name_index).to_pylist()
    first_desc: dict[int, str | None] = {}
    descs_py = desc_column.to_pylist() if n else []
    for row, idx in enumerate(name_index.to_pylist()):
        if idx not in first_desc:
            first_desc[idx] = descs_py[row]
    groups: dict[str, GroupSeen] = {}
    group_ranks: list[list[int] | None] = []
    for idx, name in enumerate(name_values):
        ranks = None
        if trust_config:
            config = pg_config.get(name)
            if isinstance(config, dict):
                ranks = _parse_ranks(config.get("ranks"))
        group_ranks.append(ranks)
        groups[name] = GroupSeen(name=name, desc=first_desc.get(idx), ranks=ranks)
    for count in counts:
        groups[name_values[count["values"]]].entries = count["counts"]
    if not trust_config:
        _add_size_hints(groups, name_values, name_index, split, profiling_index, raw)

    # a row's peer depends only on its (group, profiling name): computed once per pair
    names = len(profiling_values)
    # a typed scalar: pyarrow infers an untyped one's type, and on the way tries to import
    # dateutil each time where it is not installed: a few percent of a worker's time, for one
    # number
    width = pa.scalar(names, pa.int64())
    pair_index = pc.add(pc.multiply(name_index.cast(pa.int64()), width), profiling_index)
    pairs, pair_rows = encoded(pair_index)
    pair_peers = [global_peer(group_ranks[pair // names], split[pair % names][2]) for pair in pairs]
    peers = pa.array(pair_peers, type=pa.int64()).take(pair_rows)

    status = dump.get("pg_status")
    status = status if isinstance(status, dict) else {}
    pg_id_values, pg_id_index = encoded(raw.field("pg_id"))

    def status_column(key: str) -> pa.Array:
        per_id = []
        for pg_id in pg_id_values:
            row = status.get(str(pg_id))
            per_id.append(_int_or_none(row.get(key)) if isinstance(row, dict) else None)
        return pa.array(per_id, type=pa.int64()).take(pg_id_index)

    record_ids = raw.field("record_id")
    comm_lib = dump.get("comm_lib_version", dump.get("nccl_version"))

    def constant(value: Any, dtype: pa.DataType) -> pa.Array:
        if shared and dtype == pa.string():
            return pa.DictionaryArray.from_arrays(
                pa.repeat(pa.scalar(0 if value is not None else None, pa.int32()), n),
                pa.array([value] if value is not None else [], dtype),
            )
        return pa.repeat(pa.scalar(value, type=dtype), n)

    def few(column: pa.Array) -> pa.Array:
        """A column of a few distinct values, as a dictionary when ``shared``."""
        return pc.dictionary_encode(column) if shared else column

    def by_profiling_name(values: list[str | None]) -> pa.Array:
        return _spread(pa.array(values, type=pa.string()), profiling_index, shared)

    columns: dict[str, Any] = {
        "job": constant(job, pa.string()),
        "incident": constant(incident, pa.string()),
        "run_id": constant(run_id_of(path), pa.string()),
        "rank": constant(rank, pa.int64()),
        "pg_id": raw.field("pg_id"),
        "pg_name": _spread(pa.array(name_values, type=pa.string()), name_index, shared),
        "pg_desc": few(desc_column),
        "pg_ranks": _members(group_ranks, name_index, dictionary_members_above)
        if members_column
        else None,
        "pg_ranks_inferred": constant(False, pa.bool_()),
        "record_id": record_ids,
        "collective_seq_id": raw.field("collective_seq_id"),
        "p2p_seq_id": raw.field("p2p_seq_id"),
        "op_id": raw.field("op_id"),
        "backend": by_profiling_name([b for b, _, _ in split]),
        "op": by_profiling_name([o for _, o, _ in split]),
        "profiling_name": by_profiling_name(profiling_values)
        if shared
        else raw.field("profiling_name"),
        "peer": peers,
        "input_sizes": raw.field("input_sizes"),
        "output_sizes": raw.field("output_sizes"),
        "input_dtypes": raw.field("input_dtypes"),
        "output_dtypes": raw.field("output_dtypes"),
        "state": few(raw.field("state")),
        "time_created_ns": raw.field("time_created_ns"),
        "time_started_ns": _without_zeros(raw.field("time_discovered_started_ns")),
        "time_completed_ns": _without_zeros(raw.field("time_discovered_completed_ns")),
        "duration_ms": raw.field("duration_ms"),
        "retired": raw.field("retired"),
        "timeout_ms": raw.field("timeout_ms"),
        "is_p2p": raw.field("is_p2p"),
        "thread_name": few(raw.field("thread_name")),
        "thread_id": few(raw.field("thread_id")),
        "frames": frames,
        "call_site": sites,
        "pg_last_enqueued_seq": status_column("last_enqueued_collective"),
        "pg_last_started_seq": status_column("last_started_collective"),
        "pg_last_completed_seq": status_column("last_completed_collective"),
        "dump_time_ns": constant(dump_time_ns, pa.int64()),
        "source_file": constant(path, pa.string()),
        "source_format": constant(source_format, pa.string()),
        "fr_version": constant(version, pa.string()),
        "comm_lib_version": constant(None if comm_lib is None else str(comm_lib), pa.string()),
        "api": pa.nulls(n, pa.string()),  # a dump says what torch ran, not what was called
        # where the rank ran: a dump does not say (the import takes the host from the
        # file's name or a map, ``archive.hosts``)
        "host": pa.nulls(n, pa.string()),
        "local_rank": pa.nulls(n, pa.int64()),
        "device": pa.nulls(n, pa.string()),
    }
    schema = RECORD_SCHEMA if members_column else _WITHOUT_MEMBERS
    if members_column and pa.types.is_dictionary(columns["pg_ranks"].type):
        schema = with_members_type(schema, columns["pg_ranks"].type)
    if shared:
        schema = shared_schema(schema)
    table = pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)
    return ParsedDump(
        table=table,
        record_id_span=(n, record_ids[0].as_py(), record_ids[n - 1].as_py()) if n else (0, -1, -1),
        source_format=source_format,
        version=version,
        backends=backends,
        groups=groups,
    )
