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

from fr_otel.sim.dump import FleetDumps
from fr_otel.sim.fleet import Fleet, simulate
from fr_otel.sim.spec import FAULT_KINDS, FaultTruth, FleetSpec
from fr_otel.sim.topology import Mesh, ProcessGroup, resolve_layout
from fr_otel.sim.writer import TRUTH_FILENAME, to_json_shape, write_fleet

__all__ = [
    "FAULT_KINDS",
    "TRUTH_FILENAME",
    "FaultTruth",
    "Fleet",
    "FleetDumps",
    "FleetSpec",
    "Mesh",
    "ProcessGroup",
    "resolve_layout",
    "simulate",
    "to_json_shape",
    "write_fleet",
]
