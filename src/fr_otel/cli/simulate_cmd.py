"""``fr-otel simulate``: write a simulated fleet's Flight Recorder dumps to a directory."""

from __future__ import annotations

from pathlib import Path

import click

from fr_otel.errors import SimulationError
from fr_otel.sim.spec import FAULT_KINDS, FleetSpec, Straggler


@click.command("simulate")
@click.argument("outdir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--world",
    type=int,
    default=None,
    help="Number of ranks (with --incidents: of each incident, 8 by default).",
)
@click.option(
    "--entries",
    type=int,
    default=2000,
    show_default=True,
    help="FR ring size per rank (TORCH_FR_BUFFER_SIZE).",
)
@click.option(
    "--fault",
    type=click.Choice(FAULT_KINDS),
    default="none",
    show_default=True,
    help="Fault to inject in the last training step.",
)
@click.option("--fault-rank", type=int, default=None, help="Culprit rank (default: mid-world).")
@click.option("--tp", type=int, default=None, help="Tensor-parallel size (default: 2 if even).")
@click.option("--pp", type=int, default=None, help="Pipeline stages (default: 4, 2 or 1).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for timings.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["pickle", "json"]),
    default="pickle",
    show_default=True,
    help="pickle (what the watchdog writes) or json (_dump_fr_trace_json).",
)
@click.option("--prefix", default="nccl_trace_rank_", show_default=True, help="File prefix.")
@click.option(
    "--omit-rank",
    "omit_ranks",
    type=int,
    multiple=True,
    help="Leave this rank's file out, as if it never dumped (repeatable).",
)
@click.option("--no-stack-traces", is_flag=True, help="Leave out `frames`.")
@click.option("--no-timing", is_flag=True, help="As without TORCH_NCCL_ENABLE_TIMING.")
@click.option(
    "--straggler",
    "stragglers",
    multiple=True,
    metavar="RANK:MS[:cpu|gpu]",
    help="Make RANK late by MS milliseconds to every work: cpu (default) issues it late,"
    " gpu starts its kernel late (repeatable).",
)
@click.option(
    "--clock-skew-ms",
    type=click.FloatRange(min=0),
    default=3.0,
    show_default=True,
    help="Each host's clock (8 ranks per host) is off by up to this much, either way.",
)
@click.option("--truth", "write_truth", is_flag=True, help="Also write truth.json.")
@click.option(
    "--incidents",
    type=click.IntRange(min=1),
    default=None,
    help="Write an archive of this many incidents into OUTDIR instead (a fleet: each on"
    " --world ranks, 2 per host, of hosts drawn from --fleet-hosts; dumps named"
    " <host>.pci3_rank_N; a quarter slow, the rest hung).",
)
@click.option(
    "--fleet-hosts",
    type=click.IntRange(min=2),
    default=16,
    show_default=True,
    help="With --incidents: the hosts the incidents run on (node000, node001...).",
)
@click.option(
    "--bad-hosts",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="With --incidents: how many of the hosts are bad (blamed in 9 of 10 of their"
    " incidents); with --truth, OUTDIR.truth.json names them.",
)
def simulate(
    outdir: Path,
    world: int | None,
    entries: int,
    fault: str,
    fault_rank: int | None,
    tp: int | None,
    pp: int | None,
    seed: int,
    fmt: str,
    prefix: str,
    omit_ranks: tuple[int, ...],
    no_stack_traces: bool,
    no_timing: bool,
    stragglers: tuple[str, ...],
    clock_skew_ms: float,
    write_truth: bool,
    incidents: int | None,
    fleet_hosts: int,
    bad_hosts: int,
) -> None:
    """Simulate a 3D-parallel NCCL job and write each rank's FR dump into OUTDIR (with
    --incidents: a fleet's archive of many such jobs' incidents)."""
    if incidents is not None:
        _simulate_fleet(outdir, world or 8, incidents, fleet_hosts, bad_hosts, seed, write_truth)
        return
    if world is None:
        raise click.UsageError("--world is required (the number of ranks)")
    bad = sorted({r for r in omit_ranks if not 0 <= r < world})
    if bad:
        raise click.UsageError(f"--omit-rank {bad[0]} is outside [0, {world})")
    if outdir.exists() and any(outdir.iterdir()):
        raise click.UsageError(f"{outdir} is not empty; dumps of two runs must not mix")
    spec = FleetSpec(
        world=world,
        entries=entries,
        tp=tp,
        pp=pp,
        fault=fault,
        fault_rank=fault_rank,
        seed=seed,
        stack_traces=not no_stack_traces,
        timing=not no_timing,
        stragglers=tuple(_straggler(text) for text in stragglers),
        clock_skew_ms=clock_skew_ms,
    )
    from fr_otel.sim import simulate as run_simulation
    from fr_otel.sim import write_fleet

    fleet = run_simulation(spec)
    written = write_fleet(
        fleet,
        outdir,
        fmt="json" if fmt == "json" else "pickle",
        prefix=prefix,
        omit_ranks=omit_ranks,
        write_truth=write_truth,
    )
    culprit = ",".join(str(r) for r in fleet.truth.culprit_ranks) or "none"
    slow = "".join(f"; straggler: {s.rank} ({s.side}, {s.delay_ms:g} ms)" for s in spec.stragglers)
    click.echo(
        f"wrote {len(written)} dump files to {outdir}; fault: {fault}; culprit: {culprit}{slow}"
    )


def _straggler(text: str) -> Straggler:
    """``RANK:MS[:cpu|gpu]``."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        side = parts[2] if len(parts) == 3 else "cpu"
        return Straggler(rank=int(parts[0]), delay_ms=float(parts[1]), side=side)
    except (ValueError, SimulationError) as exc:
        detail = f": {exc}" if isinstance(exc, SimulationError) else ""
        raise click.BadParameter(
            f"{text!r} is not RANK:MS[:cpu|gpu]{detail}", param_hint="--straggler"
        ) from exc


def _simulate_fleet(
    outdir: Path,
    world: int,
    incidents: int,
    hosts: int,
    bad_hosts: int,
    seed: int,
    write_truth: bool,
) -> None:
    import dataclasses
    import json

    from fr_otel.fleet.simulated import FleetArchiveSpec, write_fleet_archive

    if world % 2 or world < 4:
        raise click.BadParameter(
            "must be even and at least 4 (2 ranks per host)", param_hint="--world"
        )
    if outdir.exists() and any(outdir.iterdir()):
        raise click.UsageError(f"{outdir} is not empty; write a fleet into a new folder")
    try:
        spec = FleetArchiveSpec(
            incidents=incidents,
            hosts=hosts,
            hosts_per_incident=world // 2,
            bad_hosts=bad_hosts,
            bad_share=0.9,
            slow_share=0.25,
            seed=seed,
        )
    except SimulationError as exc:
        raise click.UsageError(str(exc)) from None
    truth = write_fleet_archive(spec, outdir)
    if write_truth:
        (outdir.parent / f"{outdir.name}.truth.json").write_text(
            json.dumps(dataclasses.asdict(truth), indent=2, sort_keys=True) + "\n"
        )
    bad = ", ".join(truth.bad_hosts) or "none"
    click.echo(
        f"wrote an archive of {incidents} incidents on {hosts} hosts to {outdir}; bad: {bad}"
    )
