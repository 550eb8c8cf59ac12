"""What a simulation is asked for (``FleetSpec``) and what it knows to be true (``FaultTruth``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fr_otel.analysis.kinds import SIMULATED_FAULTS
from fr_otel.errors import SimulationError

FAULT_KINDS: tuple[str, ...] = ("none", *SIMULATED_FAULTS)
"""Every fault ``simulate`` can inject; ``"none"`` is a healthy run. The faults are the
analyzer's kinds' (``analysis.kinds``): a fault the analyzer has no kind for would test
nothing."""

MAX_WORLD = 65_536
"""Beyond this the default_pg ``ranks`` string alone would dominate every dump."""

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)$")


def parse_version(version: str) -> tuple[int, int]:
    """``"2.10"`` -> ``(2, 10)``; fr_trace's ``get_version_detail`` wants the same form."""
    m = _VERSION_RE.match(version)
    if m is None:
        raise SimulationError(f"version: expected 'MAJOR.MINOR' such as '2.10', got {version!r}")
    return int(m.group(1)), int(m.group(2))


STRAGGLER_SIDES = ("cpu", "gpu")
"""``cpu``: the rank's host issues every work late (a slow data loader, a noisy neighbour);
``gpu``: it issues on time but every kernel starts late (a throttled GPU)."""


@dataclass(kw_only=True, frozen=True)
class Straggler:
    """A rank that is late to every work it runs, by ``delay_ms``, on one side."""

    rank: int
    delay_ms: float
    side: str = "cpu"

    def __post_init__(self) -> None:
        if self.side not in STRAGGLER_SIDES:
            raise _fail("stragglers", f"side must be one of {STRAGGLER_SIDES}, got {self.side!r}")
        if not isinstance(self.rank, int) or isinstance(self.rank, bool) or self.rank < 0:
            raise _fail("stragglers", f"rank must be a non-negative int, got {self.rank!r}")
        if not self.delay_ms > 0:
            raise _fail("stragglers", f"delay_ms must be positive, got {self.delay_ms!r}")


def _fail(field: str, message: str) -> SimulationError:
    return SimulationError(f"{field}: {message}")


@dataclass(kw_only=True, frozen=True)
class FleetSpec:
    """One simulated job: its shape, its Flight Recorder settings and the fault to inject."""

    world: int
    """Number of ranks (1 to 65536)."""
    entries: int
    """FR ring size per rank (``TORCH_FR_BUFFER_SIZE``): a dump holds at most this many."""
    tp: int | None = None
    """Tensor-parallel size; ``None`` picks 2 when the world is even."""
    pp: int | None = None
    """Pipeline stages; ``None`` picks 4 or 2 when the world is large enough, else 1."""
    fault: str = "none"
    """One of ``FAULT_KINDS``."""
    fault_rank: int | None = None
    """The culprit; ``None`` picks a deterministic non-zero rank in the middle of the world."""
    seed: int = 0
    """Seeds timings, clock skews and thread ids; the same spec gives byte-identical dumps."""
    stack_traces: bool = True
    """Include ``frames`` in pickle dumps (``TORCH_INCLUDE_STACK_TRACE``)."""
    timing: bool = True
    """``TORCH_NCCL_ENABLE_TIMING``: without it no entry is ever ``started`` or has a duration."""
    version: str = "2.10"
    """Dump format version; "2.10" adds ``thread_*`` and ``comm_lib_version``."""
    timeout_ms: int = 600_000
    """Collective timeout; a hung job dumps one watchdog timeout after its oldest stuck work."""
    stragglers: tuple[Straggler, ...] = ()
    """Ranks that are late to every work they run (a slow job, not a stuck one)."""
    clock_skew_ms: float = 3.0
    """Each host's clock (8 ranks per host) is off the true time by up to this much, either
    way, as FR times of different hosts are."""

    def __post_init__(self) -> None:
        if not isinstance(self.world, int) or isinstance(self.world, bool):
            raise _fail("world", f"must be an int, got {self.world!r}")
        if not 1 <= self.world <= MAX_WORLD:
            raise _fail("world", f"must be between 1 and {MAX_WORLD}, got {self.world}")
        if not isinstance(self.entries, int) or isinstance(self.entries, bool):
            raise _fail("entries", f"must be an int, got {self.entries!r}")
        if self.entries < 1:
            raise _fail("entries", f"must be at least 1, got {self.entries}")
        for name, value in (("tp", self.tp), ("pp", self.pp)):
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise _fail(name, f"must be a positive int or None, got {value!r}")
            if self.world % value:
                raise _fail(name, f"{value} does not divide world {self.world}")
        if self.tp is not None and self.pp is not None and self.world % (self.tp * self.pp):
            raise _fail("pp", f"tp*pp = {self.tp * self.pp} does not divide world {self.world}")
        if self.fault not in FAULT_KINDS:
            raise _fail("fault", f"unknown fault {self.fault!r}; expected one of {FAULT_KINDS}")
        if self.fault != "none" and self.world < 2:
            raise _fail("fault", f"{self.fault} needs at least 2 ranks, world is {self.world}")
        if self.fault_rank is not None:
            if not isinstance(self.fault_rank, int) or isinstance(self.fault_rank, bool):
                raise _fail("fault_rank", f"must be an int or None, got {self.fault_rank!r}")
            if not 0 <= self.fault_rank < self.world:
                raise _fail("fault_rank", f"must be in [0, {self.world}), got {self.fault_rank}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise _fail("seed", f"must be an int, got {self.seed!r}")
        if not isinstance(self.version, str):
            raise _fail("version", f"must be a str, got {self.version!r}")
        parse_version(self.version)
        if not isinstance(self.timeout_ms, int) or self.timeout_ms < 1:
            raise _fail("timeout_ms", f"must be a positive int, got {self.timeout_ms!r}")
        for straggler in self.stragglers:
            if straggler.rank >= self.world:
                raise _fail("stragglers", f"rank {straggler.rank} is outside [0, {self.world})")
        if not self.clock_skew_ms >= 0:
            raise _fail("clock_skew_ms", f"must be >= 0, got {self.clock_skew_ms!r}")


@dataclass(kw_only=True, frozen=True)
class FaultTruth:
    """Ground truth about the injected fault, for testing analyzers against the dumps."""

    kind: str
    """The fault kind (``FleetSpec.fault``)."""
    culprit_ranks: tuple[int, ...]
    """Ranks whose behaviour caused the hang; empty for ``none`` and ``network``."""
    pg_name: str | None
    """Name of the group where the first divergence happened (as in ``pg_config``)."""
    pg_desc: str | None
    """Its description (``default_pg``, ``mesh_tp``, ...)."""
    pg_ranks: tuple[int, ...] | None
    """Its global ranks in group-rank order."""
    collective_seq_id: int | None
    """Sequence number (as the majority of the group numbers it) of the first divergent op."""
    op: str | None
    """The majority's op at that point, without backend prefix (``_reduce_scatter_base``)."""
    description: str
    """One sentence saying what the culprit did."""
    p2p_seq_id: int | None = None
    """For ``p2p_unmatched``: the sender's ``p2p_seq_id`` of the send left without a recv."""
    stragglers: tuple[Straggler, ...] = ()
    """The ranks made late (``FleetSpec.stragglers``): what a straggler finding must name."""
