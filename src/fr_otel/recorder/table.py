"""A decoded ring as canonical rows (``fr_otel.schema.RECORD_SCHEMA``).

Continuous mode builds a table every export pass, so this is column-wise: each slot field
becomes one array, and what slots refer to (group, op signature, call site) is converted
once per distinct value and spread with ``take``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fr_otel.recorder.ring import COMPLETED, FAILED, STATE_NAMES, RingContents
from fr_otel.schema import RECORD_SCHEMA
from fr_otel.stacks import call_site

_FIELD = {name: RECORD_SCHEMA.field(name).type for name in RECORD_SCHEMA.names}


def _spread(values: list[Any], codes: pa.Array, name: str) -> pa.Array:
    """``values[code]`` for each code, as the schema's type for column ``name``."""
    return pa.array(values, type=_FIELD[name]).take(codes)


def ring_table(
    contents: RingContents,
    *,
    job: str,
    incident: str,
    dump_time_ns: int,
    first_record: int = 0,
    completed_only: bool = False,
) -> pa.Table:
    """The ring's slots from ``first_record`` on as rows of ``job``/``incident``.

    ``completed_only`` keeps the finished (completed or failed) slots: what continuous
    mode exports while the job runs. Slots whose group or signature never reached the
    meta file (the owner died between the two writes) are left out.
    """
    slots = [
        s
        for s in contents.slots
        if s[0] >= first_record
        and (not completed_only or s[9] in (COMPLETED, FAILED))
        and s[1] in contents.groups
        and s[4] in contents.signatures
    ]
    count = len(slots)
    if count == 0:
        return RECORD_SCHEMA.empty_table()
    record, group, seq, p2p_seq, sig, site, peer, created, done, state = (
        list(column) for column in zip(*slots, strict=True)
    )

    group_ids = sorted(set(group))
    position = {g: i for i, g in enumerate(group_ids)}
    group_code = pa.array([position[g] for g in group], pa.int32())
    groups = [contents.groups[g] for g in group_ids]
    sig_ids = sorted(set(sig))
    position = {s: i for i, s in enumerate(sig_ids)}
    sig_code = pa.array([position[s] for s in sig], pa.int32())
    signatures = [contents.signatures[s] for s in sig_ids]
    site_ids = sorted(set(site))
    position = {s: i for i, s in enumerate(site_ids)}
    site_code = pa.array([position[s] for s in site], pa.int32())
    frames = [
        [{"name": n, "filename": f, "line": line} for n, f, line in contents.sites.get(s, [])]
        for s in site_ids
    ]
    # a signature carries its backend; rows of older rings fall back to their group's
    row_backend = pc.coalesce(
        _spread([sg.backend for sg in signatures], sig_code, "backend"),
        _spread([g.backend for g in groups], group_code, "backend"),
    )

    completed = [s == COMPLETED for s in state]

    def column(values: list[Any], name: str) -> pa.Array:
        return pa.array(values, type=_FIELD[name])

    def constant(value: Any, name: str) -> pa.Array:
        return pa.repeat(pa.scalar(value, type=_FIELD[name]), count)

    ops = _spread([sg.op for sg in signatures], sig_code, "op")
    columns: dict[str, pa.Array] = {
        "job": constant(job, "job"),
        "incident": constant(incident, "incident"),
        "rank": constant(contents.rank, "rank"),
        "pg_id": column(group, "pg_id"),
        "pg_name": _spread([g.name for g in groups], group_code, "pg_name"),
        "pg_desc": _spread([g.desc for g in groups], group_code, "pg_desc"),
        "pg_ranks": _spread(
            [list(g.ranks) if g.ranks is not None else None for g in groups],
            group_code,
            "pg_ranks",
        ),
        "pg_ranks_inferred": constant(False, "pg_ranks_inferred"),
        "record_id": column(record, "record_id"),
        "collective_seq_id": column(seq, "collective_seq_id"),
        "p2p_seq_id": column(p2p_seq, "p2p_seq_id"),
        "op_id": constant(None, "op_id"),
        "backend": row_backend,
        "op": ops,
        "profiling_name": pc.if_else(
            pc.is_null(row_backend),
            ops,
            # a scalar, not ":": see otel.wire._scalar
            pc.binary_join_element_wise(row_backend, ops, pa.scalar(":", pa.string())),
        ),
        "peer": column([p if p >= 0 else None for p in peer], "peer"),
        "input_sizes": _spread([sg.input_sizes for sg in signatures], sig_code, "input_sizes"),
        "output_sizes": _spread([sg.output_sizes for sg in signatures], sig_code, "output_sizes"),
        "input_dtypes": _spread([sg.input_dtypes for sg in signatures], sig_code, "input_dtypes"),
        "output_dtypes": _spread(
            [sg.output_dtypes for sg in signatures], sig_code, "output_dtypes"
        ),
        # a failed op never completed: FR's "started"
        "state": column([STATE_NAMES.get(s, "started") for s in state], "state"),
        "time_created_ns": column(created, "time_created_ns"),
        "time_started_ns": constant(None, "time_started_ns"),
        "time_completed_ns": column(
            [d if c and d else None for d, c in zip(done, completed, strict=True)],
            "time_completed_ns",
        ),
        "duration_ms": constant(None, "duration_ms"),
        # FR's "retired" means the op left the watchdog's list; for the recorder that is
        # completion, so a failed op stays unretired and reads as never completed
        "retired": column(completed, "retired"),
        "timeout_ms": _spread([g.timeout_ms for g in groups], group_code, "timeout_ms"),
        "is_p2p": _spread([sg.is_p2p for sg in signatures], sig_code, "is_p2p"),
        "thread_name": constant(None, "thread_name"),
        "thread_id": constant(None, "thread_id"),
        "frames": _spread([f or None for f in frames], site_code, "frames"),
        "call_site": _spread([call_site(f) for f in frames], site_code, "call_site"),
        "pg_last_enqueued_seq": constant(None, "pg_last_enqueued_seq"),
        "pg_last_started_seq": constant(None, "pg_last_started_seq"),
        "pg_last_completed_seq": constant(None, "pg_last_completed_seq"),
        "dump_time_ns": constant(dump_time_ns, "dump_time_ns"),
        "source_file": constant(str(contents.base) + ".ring", "source_file"),
        "source_format": constant("recorder", "source_format"),
        "fr_version": constant(None, "fr_version"),
        "comm_lib_version": constant(None, "comm_lib_version"),
    }
    return pa.Table.from_arrays(
        [columns[name] for name in RECORD_SCHEMA.names], schema=RECORD_SCHEMA
    )
