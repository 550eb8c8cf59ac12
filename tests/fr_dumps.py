"""Small hand-written Flight Recorder dumps in each format version, for tests."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

FRAMES = [
    {"name": "all_reduce", "filename": "/venv/torch/distributed/distributed_c10d.py", "line": 3245},
    {"name": "wrapper", "filename": "/venv/torch/distributed/c10d_logger.py", "line": 83},
    {"name": "train_step", "filename": "/job/train.py", "line": 21},
]


def fr_entry(
    *,
    record_id: int,
    seq: int,
    pg: tuple[str, str] = ("0", "default_pg"),
    op: str = "nccl:all_reduce",
    sizes: list[list[int]] | None = None,
    version: str = "2.10",
    state: str = "completed",
    p2p_seq: int = 0,
    is_p2p: bool = False,
) -> dict[str, Any]:
    """One entry with the fields torch writes in ``version``."""
    sizes = [[4, 8]] if sizes is None else sizes
    entry: dict[str, Any] = {
        "frames": FRAMES,
        "record_id": record_id,
        "pg_id": 0,
        "process_group": pg,
        "collective_seq_id": seq,
        "p2p_seq_id": p2p_seq,
        "op_id": seq,
        "profiling_name": op,
        "time_created_ns": 1_700_000_000_000_000_000 + record_id,
        "input_sizes": sizes,
        "input_dtypes": ["Float"] * len(sizes),
        "output_sizes": sizes,
        "output_dtypes": ["Float"] * len(sizes),
        "state": state,
        "time_discovered_started_ns": 1_700_000_000_000_000_100 + record_id,
        "time_discovered_completed_ns": (
            1_700_000_000_000_000_200 + record_id if state == "completed" else None
        ),
        "retired": state == "completed",
        "timeout_ms": 600_000,
        "is_p2p": is_p2p,
    }
    if state == "completed":
        entry["duration_ms"] = 0.5
    if version == "2.10":
        entry["thread_name"] = "pt_main_thread"
        entry["thread_id"] = "140000"
    return entry


def fr_dump(
    entries: list[dict[str, Any]],
    *,
    version: str = "2.10",
    pg_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A whole dump with the top-level keys of ``version``."""
    dump: dict[str, Any] = {
        "version": version,
        "pg_config": pg_config
        if pg_config is not None
        else {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {
            "0": {
                "last_enqueued_collective": 2,
                "last_started_collective": 2,
                "last_completed_collective": 1,
            }
        },
        "entries": entries,
    }
    if version == "2.10":
        dump["comm_lib_version"] = "2.21.5"
    elif version >= "2.7":
        dump["nccl_version"] = "2.20.3"
    return dump


def as_json_bytes(dump: dict[str, Any]) -> bytes:
    """Encode like ``_dump_fr_trace_json``: no frames, 0 for unset times, strings in pg_status."""
    out = json.loads(json.dumps(dump))
    for entry in out.get("entries", []):
        entry.pop("frames", None)
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            if entry.get(key) is None:
                entry[key] = 0
    out["pg_status"] = {
        k: {kk: str(vv) for kk, vv in v.items()} for k, v in out.get("pg_status", {}).items()
    }
    if not out.get("entries"):
        out.pop("entries", None)
    out["nccl_comm_state"] = {}
    return json.dumps(out, sort_keys=True).encode()


def write_pickle(path: Path, dump: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(dump, protocol=2))
    return path


def write_json(path: Path, dump: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(as_json_bytes(dump))
    return path


def two_rank_dumps(version: str = "2.10") -> dict[int, dict[str, Any]]:
    """Ranks 0 and 1 of a healthy job: three all_reduces on the default group."""
    return {
        rank: fr_dump(
            [fr_entry(record_id=i, seq=i + 1, version=version) for i in range(3)], version=version
        )
        for rank in (0, 1)
    }
