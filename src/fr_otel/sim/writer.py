"""Writing a simulated fleet as dump files, byte-shaped like torch's own.

Pickle: protocol 2 of plain dicts, lists, tuples, str, int, float, bool and None, which is
what ``torch::jit::Pickler`` emits for FR dumps and what ``pickle.load`` reads back without
importing anything. JSON: what ``_dump_fr_trace_json`` returns (nlohmann: keys sorted,
no whitespace, no ``frames``, ``process_group`` as a list, ``time_discovered_*`` 0 instead
of null, ``pg_status`` values as strings, ``entries`` omitted when empty, and an empty
``nccl_comm_state``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from fr_otel.errors import SimulationError
from fr_otel.sim.dump import FleetDumps
from fr_otel.sim.fleet import Fleet

TRUTH_FILENAME = "truth.json"


def to_json_shape(dump: dict[str, Any]) -> dict[str, Any]:
    """The dict ``_dump_fr_trace_json`` would have produced for the same recorder state."""
    out: dict[str, Any] = {}
    for key, value in dump.items():
        if key == "entries":
            if value:
                out["entries"] = [_json_entry(e) for e in value]
        elif key == "pg_status":
            out[key] = {pg: {k: str(v) for k, v in st.items()} for pg, st in value.items()}
        elif key == "nccl_comm_state":
            continue
        else:
            out[key] = value
    out["nccl_comm_state"] = dump.get("nccl_comm_state", {})
    return out


def _json_entry(entry: dict[str, Any]) -> dict[str, Any]:
    e = {k: v for k, v in entry.items() if k != "frames"}
    e["process_group"] = list(entry["process_group"])
    for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
        if e.get(key) is None:
            e[key] = 0
    return e


def dumps_json(dump: dict[str, Any]) -> bytes:
    """Serialise like ``nlohmann::json::dump()``: sorted keys, compact separators."""
    text = json.dumps(
        to_json_shape(dump), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return text.encode("utf-8")


def dumps_pickle(dump: dict[str, Any]) -> bytes:
    return pickle.dumps(dump, protocol=2)


def write_fleet(
    fleet: Fleet,
    outdir: Path,
    *,
    fmt: Literal["pickle", "json"] = "pickle",
    prefix: str = "nccl_trace_rank_",
    omit_ranks: Iterable[int] = (),
    write_truth: bool = False,
    hosts: Sequence[str] | None = None,
) -> list[Path]:
    """Write one ``<prefix><rank>`` file per rank (``.json`` appended for JSON);
    ``hosts``: each rank's host, put before the prefix as real jobs name their dumps
    (``<host>.<prefix><rank>``, ``archive.hosts``).

    ``omit_ranks`` leaves those files out, as when a rank died before dumping. Each
    file's mtime is the simulated dump time. With ``write_truth`` a ``truth.json`` holding
    the ``FaultTruth`` and layout is written too; nothing else goes into ``outdir``.
    Returns the dump files written, in rank order.
    """
    if fmt not in ("pickle", "json"):
        raise SimulationError(f"fmt: expected 'pickle' or 'json', got {fmt!r}")
    if not prefix or os.sep in prefix or (os.altsep and os.altsep in prefix):
        raise SimulationError(f"prefix: must be a non-empty file name prefix, got {prefix!r}")
    world = len(fleet.dumps)
    omit = set(omit_ranks)
    bad = sorted(r for r in omit if not 0 <= r < world)
    if bad:
        raise SimulationError(f"omit_ranks: {bad} outside [0, {world})")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    peek = fleet.dumps.peek if isinstance(fleet.dumps, FleetDumps) else fleet.dumps.__getitem__
    for rank in range(world):
        if rank in omit:
            continue
        dump = peek(rank)
        name = f"{hosts[rank]}.{prefix}{rank}" if hosts is not None else f"{prefix}{rank}"
        if fmt == "json":
            path = outdir / f"{name}.json"
            data = dumps_json(dump)
        else:
            path = outdir / name
            data = dumps_pickle(dump)
        path.write_bytes(data)
        ns = fleet.dump_time_ns(rank)
        if ns is not None:
            os.utime(path, ns=(ns, ns))
        written.append(path)
    if write_truth:
        (outdir / TRUTH_FILENAME).write_text(
            json.dumps(truth_record(fleet), indent=2, sort_keys=True) + "\n"
        )
    return written


def truth_record(fleet: Fleet) -> dict[str, Any]:
    """The truth plus the spec and layout, as plain JSON-able data."""
    record: dict[str, Any] = {
        "truth": dataclasses.asdict(fleet.truth),
        "spec": dataclasses.asdict(fleet.spec),
    }
    if fleet.mesh is not None:
        m = fleet.mesh
        record["layout"] = {"world": m.world, "tp": m.tp, "pp": m.pp, "dp": m.dp}
    return record
