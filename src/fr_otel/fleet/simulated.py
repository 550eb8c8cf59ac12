"""A simulated fleet's archive: many incidents of several jobs, on hosts drawn from one
pool, some of which are bad.

Each incident is a simulated job (``simulate``) on a few hosts of the pool, its dumps named
as real jobs name them (``<host>.pci3_rank_<N>``) and imported under its own job and
incident. Most incidents hang (a rank skips a collective or sends the wrong size or op),
the rest are slow (one rank straggles). The rank to blame is on a random host of the
incident, except that where a bad host takes part it is on the bad host ``bad_share`` of
the time: the truth a fleet ranking has to find.
"""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from fr_otel.errors import SimulationError
from fr_otel.sim.spec import FleetSpec, Straggler

HANG_FAULTS = ("skipped_collective", "size_mismatch", "op_type_mismatch")
"""Faults whose culprit is the rank the spec names, at any world this module makes."""
HANG_ENTRIES = 60
"""Enough for a hang's evidence."""
SLOW_ENTRIES = 1_200
"""Enough steps for a straggler to be named: it must be late at ten separate occasions of
a call site (``analysis.stragglers``)."""
HOUR_NS = 3_600_000_000_000


@dataclass(kw_only=True, frozen=True)
class FleetArchiveSpec:
    """A fleet's incidents: how many, on which hosts, and which hosts are bad."""

    incidents: int
    hosts: int
    """The pool's size: hosts ``node000``, ``node001``..."""
    hosts_per_incident: int = 4
    max_hosts_per_incident: int | None = None
    """Where set, each incident runs on between ``hosts_per_incident`` and this many hosts
    (drawn with ``seed``): a fleet's jobs are not all one size."""
    ranks_per_host: int = 2
    bad_hosts: int = 0
    """How many of the pool are bad (drawn with ``seed``)."""
    bad_share: float = 0.8
    """Of the incidents a bad host takes part in, the share that blame it."""
    slow_share: float = 0.3
    """Of the incidents, the share that are slow (a straggler), not hung."""
    jobs: int = 3
    days: int = 14
    """The incidents are spread over this many days."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.incidents < 1:
            raise SimulationError(f"incidents: must be at least 1, got {self.incidents}")
        if not 2 <= self.hosts_per_incident <= self.hosts:
            raise SimulationError(
                f"hosts_per_incident: must be between 2 and hosts ({self.hosts}),"
                f" got {self.hosts_per_incident}"
            )
        most = self.max_hosts_per_incident
        if most is not None and not self.hosts_per_incident <= most <= self.hosts:
            raise SimulationError(
                f"max_hosts_per_incident: must be between hosts_per_incident"
                f" ({self.hosts_per_incident}) and hosts ({self.hosts}), got {most}"
            )
        if not 0 <= self.bad_hosts < self.hosts:
            raise SimulationError(f"bad_hosts: must be in [0, {self.hosts}), got {self.bad_hosts}")
        if self.ranks_per_host < 1 or self.hosts_per_incident * self.ranks_per_host < 4:
            raise SimulationError("an incident needs at least 4 ranks")
        for name, share in (("bad_share", self.bad_share), ("slow_share", self.slow_share)):
            if not 0.0 <= share <= 1.0:
                raise SimulationError(f"{name}: must be between 0 and 1, got {share}")


@dataclass(kw_only=True)
class FleetTruth:
    """What was planted."""

    bad_hosts: list[str]
    blamed: dict[str, str] = field(default_factory=dict)
    """``job/incident`` -> the host its culprit or straggler ran on."""
    kinds: dict[str, str] = field(default_factory=dict)
    """``job/incident`` -> the fault, or ``straggler``."""


def host_name(index: int) -> str:
    return f"node{index:03d}"


def write_fleet_archive(spec: FleetArchiveSpec, archive: Path) -> FleetTruth:
    """Simulate ``spec``'s incidents and import each into ``archive``."""
    from fr_otel.archive.importer import import_dumps
    from fr_otel.sim.fleet import simulate
    from fr_otel.sim.writer import write_fleet

    rng = random.Random(spec.seed)
    pool = [host_name(i) for i in range(spec.hosts)]
    bad = sorted(rng.sample(pool, spec.bad_hosts))
    truth = FleetTruth(bad_hosts=bad)
    for number in range(spec.incidents):
        count = spec.hosts_per_incident
        if spec.max_hosts_per_incident is not None:
            count = rng.randint(count, spec.max_hosts_per_incident)
        world = count * spec.ranks_per_host
        hosts = rng.sample(pool, count)
        present_bad = [h for h in hosts if h in bad]
        if present_bad and rng.random() < spec.bad_share:
            blamed = rng.choice(present_bad)
        else:
            blamed = rng.choice(hosts)
        rank = hosts.index(blamed) * spec.ranks_per_host + rng.randrange(spec.ranks_per_host)
        # the simulator's job starts ``seed`` hours into its year: spread over the days
        hour = number * spec.days * 24 // spec.incidents
        slow = rng.random() < spec.slow_share
        job_spec = FleetSpec(
            world=world,
            entries=SLOW_ENTRIES if slow else HANG_ENTRIES,
            fault="none" if slow else rng.choice(HANG_FAULTS),
            fault_rank=None if slow else rank,
            seed=hour,
            stragglers=(Straggler(rank=rank, delay_ms=20.0),) if slow else (),
        )
        job = f"job{number % spec.jobs}"
        incident = f"incident{number:05d}"
        fleet = simulate(job_spec)
        names = [hosts[r // spec.ranks_per_host] for r in range(world)]
        with tempfile.TemporaryDirectory(prefix="fr-otel-fleet-") as scratch:
            write_fleet(fleet, Path(scratch), prefix="pci3_rank_", hosts=names)
            report = import_dumps([scratch], archive=archive, job=job, incident=incident, workers=1)
        if report.problems:  # pragma: no cover - a simulator bug, not user input
            raise SimulationError(f"{job}/{incident}: {report.problems[0]}")
        truth.blamed[f"{job}/{incident}"] = blamed
        truth.kinds[f"{job}/{incident}"] = "straggler" if slow else job_spec.fault
    return truth
