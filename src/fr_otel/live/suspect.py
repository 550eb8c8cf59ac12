"""A stall's suspect: what the agent says, and its record in the archive (``records``).

A stall is not proof: the laggard may be slow and catch up. So it is a suspect, named with
what the person needs to go and look: the group and collective the others wait in, how
long, and where the laggard's training thread is (its innermost frame of user code, from
the stack the rank wrote on request: ``stack_request``). The record's fields are
documented in docs/live-diagnosis.md, and ``to_dict`` is that contract.
"""

from __future__ import annotations

import socket
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from fr_otel.analysis.findings import rank_list
from fr_otel.live.records import RECORD_VERSION
from fr_otel.live.stall import Stall
from fr_otel.recorder.stack_request import RankStack

KIND = "stall"


@dataclass(frozen=True, kw_only=True)
class StallSuspect:
    id: str
    kind: str
    culprit_ranks: list[int]
    """The laggards: running members that have not issued the collective."""
    waiting_ranks: list[int]
    group: str
    group_desc: str | None
    seq: int
    """The collective the waiting members issued (their group's sequence number)."""
    op: str
    waiting_site: str | None
    """Where the first waiting member issued it."""
    call_site: str | None
    """Where the first laggard's training thread is: its innermost frame of user code
    (None: it gave no stack in time)."""
    in_collective: bool | None
    """Whether that thread is inside ``torch.distributed`` (None: no stack)."""
    waited_s: float
    threshold_s: float
    since_ns: int
    """When the first waiting member issued the collective."""
    known_ns: int
    job: str
    run_id: str | None
    host: str
    stacks: dict[int, dict[str, Any]]
    """The laggards' stacks, by rank (``RankStack.to_json``)."""
    incident: str | None = None
    """The incident declared for it (``FR_OTEL_LIVE_STALL_INCIDENT``), else None."""
    group_ranks: list[int] | None = None
    """The group's global ranks (None: unknown): with its name they identify the group, and
    the trace of its collective (``fr_otel.live.otlp``)."""

    @property
    def seconds(self) -> float:
        """From the first waiting member's collective to the suspect."""
        return max(self.known_ns - self.since_ns, 0) / 1e9

    def line(self) -> str:
        """One line for people: the laggards, the group, the seq, where the laggard is."""
        many = len(self.culprit_ranks) > 1
        who = f"rank{'s' if many else ''} {rank_list(self.culprit_ranks)}"
        waiting = f"rank{'s' if len(self.waiting_ranks) > 1 else ''}"
        group = f"{self.group_desc or '?'} (pg {self.group})"
        if self.call_site is None:
            where = "gave no stack"
        else:
            inside = "in torch.distributed" if self.in_collective else "in host code"
            where = f"is at {self.call_site} ({inside})"
        return (
            f"live: stall suspect: {who} {'have' if many else 'has'} not issued {group}"
            f" collective #{self.seq} ({self.op}) that {waiting}"
            f" {rank_list(self.waiting_ranks)} wait in for {self.waited_s:.1f} s"
            f" (threshold {self.threshold_s:.0f} s); rank {self.culprit_ranks[0]} {where}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"version": RECORD_VERSION, **asdict(self), "seconds": round(self.seconds, 3)}

    def with_incident(self, incident: str | None) -> StallSuspect:
        return replace(self, incident=incident)


def make_suspect(
    *, stall: Stall, stacks: dict[int, RankStack], suspect_id: str, job: str, run_id: str | None
) -> StallSuspect:
    first = next((stacks[rank] for rank in stall.laggards if rank in stacks), None)
    return StallSuspect(
        id=suspect_id,
        kind=KIND,
        culprit_ranks=list(stall.laggards),
        waiting_ranks=list(stall.waiting),
        group=stall.group,
        group_desc=stall.group_desc,
        seq=stall.seq,
        op=stall.op,
        waiting_site=stall.site,
        call_site=first.where if first is not None else None,
        in_collective=first.in_collective if first is not None else None,
        waited_s=round(stall.waited_s, 3),
        threshold_s=stall.threshold_s,
        since_ns=stall.since_ns,
        known_ns=time.time_ns(),
        job=job,
        run_id=run_id,
        host=socket.gethostname(),
        stacks={rank: stack.to_json() for rank, stack in sorted(stacks.items())},
        group_ranks=list(stall.members) if stall.members is not None else None,
    )
