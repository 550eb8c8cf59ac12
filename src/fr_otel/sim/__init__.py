"""An NCCL-semantics fleet simulator that writes Flight Recorder dumps.

``simulate(FleetSpec(world=..., entries=..., fault=...))`` runs a 3D-parallel (tp, pp, dp)
training job through a model of NCCL execution (asynchronous host enqueue, in-order
streams, group rendezvous, send/recv pairing) and returns each rank's FR dump as torch
would pickle it, plus the ground truth of the injected fault. ``write_fleet`` writes the
dumps as ``nccl_trace_rank_<rank>`` pickle or JSON files.

Modules: ``spec`` (requests and truth), ``topology`` (mesh and groups), ``callsites``
(stacks), ``program`` (what each stage issues per step), ``faults`` (edits that inject a
fault), ``engine`` (execution), ``dump`` (ring buffers to dump dicts), ``writer`` (files).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fr_otel.sim.spec import FAULT_KINDS, FaultTruth, FleetSpec, Straggler

if TYPE_CHECKING:
    from fr_otel.sim.dump import FleetDumps
    from fr_otel.sim.fleet import Fleet, simulate
    from fr_otel.sim.topology import Mesh, ProcessGroup, resolve_layout
    from fr_otel.sim.writer import TRUTH_FILENAME, to_json_shape, write_fleet

# The engine loads on first use, so that `fr-otel` starts fast for every other command.
_LAZY = {
    "FleetDumps": "fr_otel.sim.dump",
    "Fleet": "fr_otel.sim.fleet",
    "simulate": "fr_otel.sim.fleet",
    "Mesh": "fr_otel.sim.topology",
    "ProcessGroup": "fr_otel.sim.topology",
    "resolve_layout": "fr_otel.sim.topology",
    "TRUTH_FILENAME": "fr_otel.sim.writer",
    "to_json_shape": "fr_otel.sim.writer",
    "write_fleet": "fr_otel.sim.writer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fr_otel.sim' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "FAULT_KINDS",
    "TRUTH_FILENAME",
    "FaultTruth",
    "Fleet",
    "FleetDumps",
    "FleetSpec",
    "Mesh",
    "ProcessGroup",
    "Straggler",
    "resolve_layout",
    "simulate",
    "to_json_shape",
    "write_fleet",
]
