"""``simulate``: layout, programs, fault, engine run, lazily built dumps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from fr_otel.errors import SimulationError
from fr_otel.sim.dump import DumpBuilder, FleetDumps
from fr_otel.sim.engine import Engine, gc_paused
from fr_otel.sim.faults import plan_fault
from fr_otel.sim.program import KernelSpec, ProgramBuilder, entries_per_step
from fr_otel.sim.spec import FaultTruth, FleetSpec
from fr_otel.sim.topology import Mesh, build_mesh, resolve_layout


@dataclass(kw_only=True)
class Fleet:
    """A simulated job's dumps and the truth about what went wrong."""

    spec: FleetSpec
    dumps: Mapping[int, dict[str, Any]]
    """Global rank -> the FR dump dict exactly as torch would pickle it (built lazily;
    see ``FleetDumps``). A plain dict works too, e.g. for hand-edited fleets."""
    truth: FaultTruth
    mesh: Mesh | None = None
    """The resolved layout (tp, pp, dp) and every process group."""

    def dump_time_ns(self, rank: int) -> int | None:
        """Wall-clock ns (the rank's host clock) at which ``rank`` wrote its dump."""
        getter = getattr(self.dumps, "dump_time_ns", None)
        return None if getter is None else int(getter(rank))


def plan_steps(entries: int, step_entries: list[int]) -> int:
    """Steps so every rank records more than ``entries`` before the faulty last step."""
    least = min(step_entries)
    return max(2, entries // least + 2)


def simulate(spec: FleetSpec) -> Fleet:
    """Run the job described by ``spec`` and return every rank's Flight Recorder dump."""
    tp, pp, dp = resolve_layout(
        spec.world,
        spec.tp,
        spec.pp,
        need_pp=spec.fault == "p2p_unmatched",
        need_dp=spec.fault == "all_to_all_splits",
    )
    mesh = build_mesh(spec.world, tp, pp, dp)
    builder = ProgramBuilder(mesh)
    stage_steps = [builder.step(p) for p in range(pp)]
    steps = plan_steps(spec.entries, [entries_per_step(s) for s in stage_steps])
    plan = plan_fault(spec, mesh, builder, steps)
    stage_programs: list[list[KernelSpec]] = [s * steps for s in stage_steps]
    programs = [stage_programs[mesh.coords(r)[1]] for r in range(spec.world)]
    if plan.rank is not None and plan.last_step is not None:
        stage = mesh.coords(plan.rank)[1]
        programs[plan.rank] = stage_steps[stage] * (steps - 1) + plan.last_step
    delays: dict[str, dict[int, int]] = {"cpu": {}, "gpu": {}}
    for straggler in spec.stragglers:
        delays[straggler.side][straggler.rank] = int(straggler.delay_ms * 1_000_000)
    engine = Engine(
        mesh,
        programs,
        spec.entries,
        spec.seed,
        cpu_delay_ns=delays["cpu"],
        gpu_delay_ns=delays["gpu"],
    )
    with gc_paused():
        engine.run()
    hang = engine.is_hang()
    if hang != (spec.fault != "none"):  # pragma: no cover - a modelling bug, not user input
        raise SimulationError(
            f"fault: {spec.fault} {'hung' if hang else 'did not hang'} unexpectedly: "
            f"{engine.describe()}"
        )
    dumps = FleetDumps(DumpBuilder(spec, mesh, engine))
    truth = replace(plan.truth, stragglers=spec.stragglers)
    return Fleet(spec=spec, dumps=dumps, truth=truth, mesh=mesh)
