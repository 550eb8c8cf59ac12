"""GPU-side state from torch's own Flight Recorder, for collectives only the GPU can finish.

With NCCL a collective call returns as soon as the op is queued on a CUDA stream, and the
Work's future is marked complete at that moment too, so the recorder's hooks know when an
op was issued but not when it ran. NCCL's Flight Recorder knows: its watchdog polls each
op's CUDA events. This module reads torch's dump of the same process (through the safe
unpickler) and copies the state, discovery times and duration into the recorder's rows
that are still ``scheduled``, matching on (group name, sequence number, op).
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fr_otel.dumps.parse import decode_dump, split_profiling_name
from fr_otel.errors import DumpError

logger = logging.getLogger(__name__)

QUEUED_BACKENDS = frozenset({"nccl", "xccl"})
"""Backends whose calls return before the op has run (their completion is the GPU's)."""

_Key = tuple[str, bool, int]


def fr_states(dump: bytes) -> dict[_Key, dict[str, Any]]:
    """(group name, is p2p, sequence number) -> the FR entry's op and GPU-side state."""
    try:
        decoded, _ = decode_dump(dump, "<torch FR buffer>")
    except DumpError as exc:
        logger.warning("fr_otel: torch's FR buffer is unreadable: %s", exc)
        return {}
    states: dict[_Key, dict[str, Any]] = {}
    for entry in decoded.get("entries", []):
        group = entry.get("process_group")
        name = str(group[0]) if isinstance(group, list | tuple) and group else str(group)
        is_p2p = bool(entry.get("is_p2p"))
        seq = entry.get("p2p_seq_id" if is_p2p else "collective_seq_id")
        if seq is None:
            continue
        _, op, _ = split_profiling_name(str(entry.get("profiling_name", "")))
        states[(name, is_p2p, int(seq))] = {
            "op": op,
            "state": entry.get("state"),
            "started": entry.get("time_discovered_started_ns") or None,
            "completed": entry.get("time_discovered_completed_ns") or None,
            "duration_ms": entry.get("duration_ms"),
            "retired": entry.get("retired"),
        }
    return states


def merge_gpu_state(table: pa.Table, dump: bytes | None) -> pa.Table:
    """``table`` with its queued rows' state taken from torch's FR ``dump`` where it has
    them; other rows, and rows FR no longer holds, are left as they are."""
    if dump is None or table.num_rows == 0:
        return table
    queued = pc.and_(
        pc.equal(table["state"], pa.scalar("scheduled", pa.string())),
        pc.is_in(table["backend"], value_set=pa.array(sorted(QUEUED_BACKENDS), pa.string())),
    )
    if not pc.any(queued).as_py():
        return table
    states = fr_states(dump)
    if not states:
        return table
    columns = {
        name: table[name].to_pylist()
        for name in (
            "state",
            "time_started_ns",
            "time_completed_ns",
            "duration_ms",
            "retired",
        )
    }
    keys = zip(
        queued.to_pylist(),
        table["pg_name"].to_pylist(),
        table["is_p2p"].to_pylist(),
        table["collective_seq_id"].to_pylist(),
        table["p2p_seq_id"].to_pylist(),
        table["op"].to_pylist(),
        strict=True,
    )
    matched = 0
    for row, (is_queued, pg_name, is_p2p, seq, p2p_seq, op) in enumerate(keys):
        if not is_queued:
            continue
        found = states.get((pg_name, bool(is_p2p), p2p_seq if is_p2p else seq))
        if found is None or found["op"] != op:
            continue
        matched += 1
        columns["state"][row] = found["state"]
        columns["time_started_ns"][row] = found["started"]
        columns["time_completed_ns"][row] = found["completed"]
        columns["duration_ms"][row] = found["duration_ms"]
        columns["retired"][row] = found["retired"]
    if not matched:
        return table
    for name, values in columns.items():
        index = table.schema.get_field_index(name)
        table = table.set_column(
            index, table.schema.field(index), pa.array(values, table[name].type)
        )
    return table
