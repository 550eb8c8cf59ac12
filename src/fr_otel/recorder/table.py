"""A decoded ring as canonical rows (``fr_otel.schema.RECORD_SCHEMA``).

Continuous mode builds a table every export pass, so this is column-wise: each slot field
becomes one array, and what slots refer to (group, op signature, call site) is converted
once per distinct value and spread with one ``take`` per kind. Per slot, only C loops run
(``zip``, ``set``, ``pa.array``): a Python loop over the slots would cost more than the
rest of the table.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fr_otel.recorder.ring import RingContents
from fr_otel.recorder.slot import COMPLETED, FAILED, STATE_NAMES
from fr_otel.schema import MEMBERS_DICTIONARY, RECORD_SCHEMA, with_members_type
from fr_otel.stacks import call_site

_FIELD = {name: RECORD_SCHEMA.field(name).type for name in RECORD_SCHEMA.names}
_FINISHED = frozenset({COMPLETED, FAILED})
# Arrow scalars made once: a Python literal handed to a compute function is converted on
# every call, and that conversion tries to import dateutil (see otel.wire._scalar)
_ZERO = pa.scalar(0, pa.int64())
_FIRST = pa.scalar(0, pa.int32())
_COMPLETED = pa.scalar(COMPLETED, pa.int64())
_NO_INT = pa.scalar(None, pa.int64())
_COLON = pa.scalar(":", pa.string())
_ENCODE = pc.DictionaryEncodeOptions(null_encoding="encode")


def _codes(
    values: Sequence[int], array: pa.Array | None = None
) -> tuple[pa.Array | None, list[int]]:
    """Each value's code (``None`` when there is one value, the usual case) and the distinct
    values, in order of first appearance."""
    distinct = set(values)
    if len(distinct) == 1:
        return None, list(distinct)
    if array is None:
        array = pa.array(values, pa.int64())
    encoded = pc.dictionary_encode(array, options=_ENCODE)
    return encoded.indices, encoded.dictionary.to_pylist()


@functools.cache
def _schema(names: tuple[str, ...]) -> pa.Schema:
    return pa.schema([(name, _FIELD[name]) for name in names])


_MEMBERS_SCHEMA = with_members_type(RECORD_SCHEMA, MEMBERS_DICTIONARY)
"""``RECORD_SCHEMA`` with ``pg_ranks`` as indices into the groups' lists (``ring_table``'s
``members_as_dictionary``)."""
_DICTIONARY_MIN_MEMBERS = 1024
"""``members_as_dictionary`` applies to passes with a group larger than this: the dictionary
column costs a pass a fixed amount more to build and encode, which pays only where
copying the member list into every row, a cost that grows with the list, costs more."""

_DISTINCT: dict[Hashable, pa.Table] = {}
"""Per-distinct-value columns, by what they were built from (its ``repr``, or the frozen
groups themselves: a repr costs by the member, and a default group may have tens of
thousands): a running job has a few groups, signatures and call sites, and every export
pass converts the same ones."""
_DISTINCT_LIMIT = 256
_REPEATED: dict[str, tuple[Hashable, pa.Table]] = {}
"""Per kind, the last single value's row repeated (with room for larger passes): a pass
of one group (signature, call site) is then a slice of it, no copy."""
_REPEATED_BYTES = 4 << 20
"""The most a repeated table may hold (deep stacks make wide rows): memory the training
process keeps between passes."""


def _distinct(key: Hashable, build: Callable[[], dict[str, list[Any]]]) -> pa.Table:
    """``build()``'s columns (per distinct value, in the schema's types), built once per
    ``key`` (``_DISTINCT``)."""
    table = _DISTINCT.get(key)
    if table is None:
        if len(_DISTINCT) >= _DISTINCT_LIMIT:
            _DISTINCT.clear()
        columns = build()
        table = _DISTINCT[key] = pa.Table.from_pydict(columns, schema=_schema(tuple(columns)))
    return table


def _spread(
    kind: str,
    key: Hashable,
    build: Callable[[], dict[str, list[Any]]],
    codes: pa.Array | None,
    count: int,
) -> pa.Table:
    """``build()``'s columns (per distinct value, in the schema's types), one row per code;
    ``codes`` is ``None`` for a single value."""
    table = _distinct(key, build)
    if codes is not None:
        return table.take(codes)
    held = _REPEATED.get(kind)
    if held is not None and held[0] == key and held[1].num_rows >= count:
        return held[1].slice(0, count)
    size = 2 * count
    if table.nbytes * size > _REPEATED_BYTES:
        return table.take(pa.repeat(_FIRST, count))
    repeated = table.take(pa.repeat(_FIRST, size))
    _REPEATED[kind] = (key, repeated)
    return repeated.slice(0, count)


def _slot_fields(
    contents: RingContents, first_record: int, completed_only: bool
) -> list[tuple[int, ...]]:
    """The fields of the slots ``ring_table`` keeps, one tuple per field (the transpose)."""
    fields = list(zip(*contents.slots, strict=True))
    record, group, _, _, sig, *_, state = fields
    if (
        min(record) >= first_record
        and (not completed_only or _FINISHED.issuperset(state))
        and contents.groups.keys() >= set(group)
        and contents.signatures.keys() >= set(sig)
    ):
        return fields  # the usual case: every slot, without a Python loop over them
    kept = [
        s
        for s in contents.slots
        if s[0] >= first_record
        and (not completed_only or s[9] in _FINISHED)
        and s[1] in contents.groups
        and s[4] in contents.signatures
    ]
    return list(zip(*kept, strict=True))


def past_gaps(contents: RingContents) -> RingContents:
    """``contents`` without each group's collectives up to its last gap
    (``RingContents.gaps``): the rank's record of that group then begins after what it
    lost, and a reader that compares ranks (the analyzer's windows) expects from it only
    what it holds, never the collectives torch overwrote before a read. Without gaps,
    ``contents`` itself."""
    if not contents.gaps:
        return contents
    last: dict[str, int] = {}
    for gap in contents.gaps:
        last[gap.group] = max(last.get(gap.group, gap.last), gap.last)
    upto = {i: last[g.name] for i, g in contents.groups.items() if g.name in last}
    # slot fields: record, group, seq, p2p seq, signature, site, peer, ...
    slots = [s for s in contents.slots if s[6] >= 0 or s[2] > upto.get(s[1], -1)]
    return replace(contents, slots=slots)


def ring_table(
    contents: RingContents,
    *,
    job: str,
    incident: str,
    dump_time_ns: int | None,
    first_record: int = 0,
    completed_only: bool = False,
    members_as_dictionary: bool = False,
) -> pa.Table:
    """The ring's slots from ``first_record`` on as rows of ``job``/``incident``.

    ``completed_only`` keeps the finished (completed or failed) slots: what continuous
    mode exports while the job runs. Slots whose group or signature never reached the
    meta file (the owner died between the two writes) are left out.
    ``members_as_dictionary``: where a group of the rows has over 1,024 members,
    ``pg_ranks`` as each row's index into its groups' member lists (a dictionary column),
    not a copy of the list in every row, which at 8,192 ranks was most of a continuous
    pass's cost: for spans (``otel.wire`` reads it) and ``archive.rows.write_rows`` (which
    writes such a list once, in the file's footer).
    """
    fields = _slot_fields(contents, first_record, completed_only) if contents.slots else []
    if not fields:
        return RECORD_SCHEMA.empty_table()
    record, group, seq, p2p_seq, sig, site, peer, created, done, state = fields
    count = len(record)

    pg_id = pa.array(group, pa.int64())
    group_code, group_ids = _codes(group, pg_id)
    groups = [contents.groups[g] for g in group_ids]
    sig_code, sig_ids = _codes(sig)
    signatures = [contents.signatures[s] for s in sig_ids]
    site_code, site_ids = _codes(site)
    sites = [contents.sites.get(s, []) for s in site_ids]
    as_dictionary = members_as_dictionary and any(
        g.ranks is not None and len(g.ranks) > _DICTIONARY_MIN_MEMBERS for g in groups
    )
    schema = _MEMBERS_SCHEMA if as_dictionary else RECORD_SCHEMA

    def by_members() -> dict[str, list[Any]]:
        return {"pg_ranks": [list(g.ranks) if g.ranks is not None else None for g in groups]}

    def by_groups() -> dict[str, list[Any]]:
        return {
            "pg_name": [g.name for g in groups],
            "pg_desc": [g.desc for g in groups],
            **({} if as_dictionary else by_members()),
            "timeout_ms": [g.timeout_ms for g in groups],
            "backend": [g.backend for g in groups],
        }

    group_key = (as_dictionary, tuple(groups))
    by_group = _spread("group", group_key, by_groups, group_code, count)
    if as_dictionary:
        members = _distinct(("members", group_key), by_members)
        pg_ranks: pa.Array | pa.ChunkedArray = pa.DictionaryArray.from_arrays(
            group_code if group_code is not None else pa.repeat(_FIRST, count),
            members.column("pg_ranks").chunk(0),
        )
    else:
        pg_ranks = by_group["pg_ranks"]
    # a signature carries its backend; rows of older rings fall back to their group's
    own_backend = all(sg.backend is not None for sg in signatures)

    def by_signature() -> dict[str, list[Any]]:
        columns: dict[str, list[Any]] = {
            "backend": [sg.backend for sg in signatures],
            "op": [sg.op for sg in signatures],
            "input_sizes": [sg.input_sizes for sg in signatures],
            "output_sizes": [sg.output_sizes for sg in signatures],
            "input_dtypes": [sg.input_dtypes for sg in signatures],
            "output_dtypes": [sg.output_dtypes for sg in signatures],
            "is_p2p": [sg.is_p2p for sg in signatures],
            # the function called (the hooks'); ``op`` is torch's name for it once learned
            "api": [sg.api for sg in signatures],
        }
        if own_backend:
            columns["profiling_name"] = [
                None if sg.op is None else f"{sg.backend}:{sg.op}" for sg in signatures
            ]
        return columns

    per_signature = _spread("signature", repr(signatures), by_signature, sig_code, count)
    ops = per_signature["op"]
    if own_backend:
        row_backend = per_signature["backend"]
        profiling_name = per_signature["profiling_name"]
    else:
        row_backend = pc.coalesce(per_signature["backend"], by_group["backend"])
        profiling_name = pc.if_else(
            pc.is_null(row_backend), ops, pc.binary_join_element_wise(row_backend, ops, _COLON)
        )

    def by_site() -> dict[str, list[Any]]:
        frames = [[{"name": n, "filename": f, "line": line} for n, f, line in s] for s in sites]
        return {"frames": [f or None for f in frames], "call_site": [call_site(f) for f in frames]}

    per_site = _spread("site", repr(sites), by_site, site_code, count)

    def column(values: Sequence[Any], name: str) -> pa.Array:
        return pa.array(values, type=_FIELD[name])

    def constant(value: Any, name: str) -> pa.Array:
        if value is None:
            return pa.nulls(count, _FIELD[name])
        return pa.repeat(pa.scalar(value, type=_FIELD[name]), count)

    # FR's "retired" means the op left the watchdog's list; for the recorder that is
    # completion, so a failed op stays unretired and reads as never completed. Only a
    # completed op has a completion time (0: none was written).
    states = set(state)
    if len(states) == 1:  # every op of the pass completed, usually
        (only,) = states
        state_column = constant(STATE_NAMES.get(only, "started"), "state")
        retired = constant(only == COMPLETED, "retired")
        if only != COMPLETED:
            completion = constant(None, "time_completed_ns")
        elif min(done) > 0:
            completion = column(done, "time_completed_ns")
        else:
            completion = None
    else:
        state_values = pa.array(state, pa.int64())
        encoded = pc.dictionary_encode(state_values, options=_ENCODE)
        names = [STATE_NAMES.get(s, "started") for s in encoded.dictionary.to_pylist()]
        state_column = column(names, "state").take(encoded.indices)
        retired = pc.equal(state_values, _COMPLETED)
        completion = None
    if completion is None:
        done_ns = pa.array(done, pa.int64())
        completion = pc.if_else(pc.and_(retired, pc.not_equal(done_ns, _ZERO)), done_ns, _NO_INT)
    if max(peer) < 0:  # collectives have no peer (-1)
        peer_column = pa.nulls(count, pa.int64())
    else:
        peer_values = pa.array(peer, pa.int64())
        peer_column = pc.if_else(pc.less(peer_values, _ZERO), _NO_INT, peer_values)

    columns: dict[str, pa.Array] = {
        "job": constant(job, "job"),
        "incident": constant(incident, "incident"),
        "run_id": constant(contents.run, "run_id"),
        "rank": constant(contents.rank, "rank"),
        "pg_id": pg_id,
        "pg_name": by_group["pg_name"],
        "pg_desc": by_group["pg_desc"],
        "pg_ranks": pg_ranks,
        "pg_ranks_inferred": constant(False, "pg_ranks_inferred"),
        "record_id": column(record, "record_id"),
        "collective_seq_id": column(seq, "collective_seq_id"),
        "p2p_seq_id": column(p2p_seq, "p2p_seq_id"),
        "op_id": constant(None, "op_id"),
        "backend": row_backend,
        "op": ops,
        "profiling_name": profiling_name,
        "peer": peer_column,
        "input_sizes": per_signature["input_sizes"],
        "output_sizes": per_signature["output_sizes"],
        "input_dtypes": per_signature["input_dtypes"],
        "output_dtypes": per_signature["output_dtypes"],
        # a failed op never completed: FR's "started"
        "state": state_column,
        "time_created_ns": column(created, "time_created_ns"),
        "time_started_ns": constant(None, "time_started_ns"),
        "time_completed_ns": completion,
        "duration_ms": constant(None, "duration_ms"),
        "retired": retired,
        "timeout_ms": by_group["timeout_ms"],
        "is_p2p": per_signature["is_p2p"],
        "thread_name": constant(None, "thread_name"),
        "thread_id": constant(None, "thread_id"),
        "frames": per_site["frames"],
        "call_site": per_site["call_site"],
        "pg_last_enqueued_seq": constant(None, "pg_last_enqueued_seq"),
        "pg_last_started_seq": constant(None, "pg_last_started_seq"),
        "pg_last_completed_seq": constant(None, "pg_last_completed_seq"),
        "dump_time_ns": constant(dump_time_ns, "dump_time_ns"),
        "source_file": constant(str(contents.base) + ".ring", "source_file"),
        "source_format": constant("recorder", "source_format"),
        "fr_version": constant(None, "fr_version"),
        "comm_lib_version": constant(None, "comm_lib_version"),
        "api": per_signature["api"],
        "host": constant(contents.host, "host"),
        "local_rank": constant(contents.local_rank, "local_rank"),
        "device": constant(contents.device, "device"),
    }
    return pa.Table.from_arrays([columns[name] for name in schema.names], schema=schema)
