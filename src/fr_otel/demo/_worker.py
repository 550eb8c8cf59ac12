"""One rank of the gloo demo job: warm up, inject the scenario's fault, dump Flight Recorder.

Run by :func:`fr_otel.demo.gloo_job.run_scenario` as
``python -m fr_otel.demo.gloo_job worker ...``; not meant to be started by hand.

The launcher and the ranks talk through small files in a private work folder, because gloo
cannot be allowed to see a mismatched collective while anybody still has to dump (gloo
aborts the receiving process on a size mismatch, see the notes in ``gloo_job``):

1. every rank initialises gloo from ``<work>/store`` (a FileStore: no TCP port to pick) and
   runs the same warm-up step;
2. ranks that are not culprits issue their side of the fault step (``async_op=True`` where
   the collective can never finish), dump, write ``<work>/rank_<N>.done`` and idle; when
   the scenario has a culprit, the launcher freezes each of them with SIGSTOP as soon as
   its marker appears;
3. once every peer is frozen the launcher writes ``<work>/go``; only then do the culprits
   issue their faulty collectives and dump at once. The frozen peers keep their sockets
   open, so the culprit's collective stays in flight: it neither completes nor fails;
4. the launcher writes ``<work>/release`` (unfrozen ranks exit 0) and SIGKILLs frozen ones.

A rank never outlives its launcher for long: while waiting for a file it exits (code 125)
as soon as its parent changes, and a watchdog thread ends it (code 124) at the deadline
whatever happens. Frozen orphans get SIGHUP from the kernel (see ``gloo_job._Job._start``).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from fr_otel.demo.naming import NAMINGS, dump_relpath
from fr_otel.demo.scenarios import BACK_GROUP, FRONT_GROUP, SCENARIOS

#: How long to wait after a synchronous collective before dumping. ``wait()`` returns when the
#: work's future completes, a few microseconds before gloo's worker thread calls
#: ``retire_id``; without the pause the last completed entry is sometimes ``retired=False``.
SETTLE_S = 0.1
#: Poll interval for the launcher's go/release files.
POLL_S = 0.01
#: Exit code of a rank killed by its own watchdog.
WATCHDOG_EXIT = 124
#: Exit code of a rank that found its launcher gone.
ORPHAN_EXIT = 125


@dataclass
class Ctx:
    """What every step function needs: the rank, the world, the two subgroups."""

    rank: int
    world: int
    front: Any  # torch ProcessGroup, or None on ranks outside it
    back: Any
    torch: Any  # the imported modules, passed in because this file must import without torch
    dist: Any

    @property
    def in_front(self) -> bool:
        return self.rank < self.world - 1

    @property
    def in_back(self) -> bool:
        return self.rank >= 1


# ---------------------------------------------------------------------------------------------
# The warm-up "training step" every scenario runs first. The function names show up in the
# dumps' stack frames, so they read like a training loop.


def warm_up_step(c: Ctx) -> None:
    """default_pg seq 1..6, front_group and back_group seq 1..2; all synchronous."""
    torch, dist = c.torch, c.dist
    dist.all_reduce(torch.full((1024,), float(c.rank + 1)))  # 1: gradients
    dist.all_gather_into_tensor(torch.empty(c.world * 256), torch.ones(256))  # 2: params (FSDP)
    dist.broadcast(torch.zeros(128), src=0)  # 3: rank 0's config / RNG state
    # Pipeline-style activation hand-off. Gloo does not record send/recv in FR at all, but
    # they use up an op id: on ranks 0 and 1 every later default_pg entry has
    # op_id = collective_seq_id + 1, a real gloo gap that the importer has to live with.
    if c.rank == 0:
        dist.send(torch.ones(16), dst=1)
    elif c.rank == 1:
        dist.recv(torch.empty(16), src=0)
    # 4: gloo has no native reduce_scatter_tensor; torch's fallback records it as all_reduce.
    dist.reduce_scatter_tensor(torch.empty(64), torch.ones(64 * c.world))
    dist.all_to_all_single(torch.empty(2 * c.world), torch.ones(2 * c.world))  # 5: MoE tokens
    for member, group in ((c.in_front, c.front), (c.in_back, c.back)):
        if member:  # each subgroup has world-1 members
            dist.all_reduce(torch.ones(512), group=group)
            dist.all_gather(
                [torch.empty(32) for _ in range(c.world - 1)], torch.ones(32), group=group
            )
    dist.all_reduce(torch.ones(1))  # 6: loss, closes the step


# ---------------------------------------------------------------------------------------------
# Fault steps. Peers' collectives use async_op=True because they can never finish (the culprit
# has not acted, then the process is frozen); the works are returned so that they stay alive.
# Only collectives that need data from every rank are used after the warm-up: a broadcast root
# could finish alone and make its entry retired=True depending on timing.

Works = list[Any]


def _grad_all_reduce(c: Ctx, numel: int = 1024, dtype: Any = None) -> Any:
    t = c.torch.ones(numel, dtype=dtype or c.torch.float32)
    return c.dist.all_reduce(t, async_op=True)


def _param_all_gather(c: Ctx, numel: int = 64) -> Any:
    out = c.torch.empty(c.world * numel)
    return c.dist.all_gather_into_tensor(out, c.torch.ones(numel), async_op=True)


def _loss_all_reduce(c: Ctx) -> Any:
    return c.dist.all_reduce(c.torch.ones(1), async_op=True)


def healthy_peer(c: Ctx) -> Works:
    c.dist.all_reduce(c.torch.ones(1024))  # seq 7, completes everywhere
    time.sleep(SETTLE_S)
    return []


def skipped_peer(c: Ctx) -> Works:
    return [_grad_all_reduce(c), _param_all_gather(c), _loss_all_reduce(c)]  # seq 7, 8, 9


def skipped_culprit(c: Ctx) -> Works:
    # The gradient all_reduce is skipped (e.g. "if grad is not None" false on this rank only).
    return [_param_all_gather(c), _loss_all_reduce(c)]  # its seq 7, 8 = the peers' 8, 9


def skipped_in_subgroup_peer(c: Ctx) -> Works:
    if not c.in_back:
        # Rank 0 is not in back_group: it moves on to the next default_pg collective.
        return [_grad_all_reduce(c)]
    out = [c.torch.empty(32) for _ in range(c.world - 1)]
    return [
        c.dist.all_reduce(c.torch.ones(512), group=c.back, async_op=True),  # back seq 3
        c.dist.all_gather(out, c.torch.ones(32), group=c.back, async_op=True),  # back seq 4
    ]


def skipped_in_subgroup_culprit(c: Ctx) -> Works:
    out = [c.torch.empty(32) for _ in range(c.world - 1)]
    return [c.dist.all_gather(out, c.torch.ones(32), group=c.back, async_op=True)]  # its seq 3


def all_reduce_peer(c: Ctx) -> Works:
    return [_grad_all_reduce(c)]  # seq 7


def missing_culprit(c: Ctx) -> Works:
    # Stuck in host code: by the time it is dumped it still has not reached the all_reduce.
    return []


def op_type_culprit(c: Ctx) -> Works:
    return [_param_all_gather(c, 1024)]


def size_culprit(c: Ctx) -> Works:
    return [_grad_all_reduce(c, 1000)]


def dtype_culprit(c: Ctx) -> Works:
    return [_grad_all_reduce(c, 1024, c.torch.bfloat16)]


def _all_to_all(c: Ctx, extra_to_rank0: int) -> Any:
    in_splits = [2] * c.world
    in_splits[0] += extra_to_rank0
    out_splits = [2] * c.world
    inp = c.torch.ones(sum(in_splits))
    out = c.torch.empty(sum(out_splits))
    return c.dist.all_to_all_single(
        out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits, async_op=True
    )


def a2a_peer(c: Ctx) -> Works:
    return [_all_to_all(c, 0)]


def a2a_culprit(c: Ctx) -> Works:
    return [_all_to_all(c, 1)]  # routes one token too many to rank 0


def reordered_peer(c: Ctx) -> Works:
    return [_grad_all_reduce(c), _param_all_gather(c)]  # seq 7, 8


def reordered_culprit(c: Ctx) -> Works:
    return [_param_all_gather(c), _grad_all_reduce(c)]  # swapped


Step = Callable[[Ctx], Works]

#: name -> (what non-culprit ranks do, what culprit ranks do).
STEPS: dict[str, tuple[Step, Step | None]] = {
    "healthy": (healthy_peer, None),
    "skipped_collective": (skipped_peer, skipped_culprit),
    "skipped_in_subgroup": (skipped_in_subgroup_peer, skipped_in_subgroup_culprit),
    "missing_rank": (all_reduce_peer, missing_culprit),
    "op_type_mismatch": (all_reduce_peer, op_type_culprit),
    "size_mismatch": (all_reduce_peer, size_culprit),
    "dtype_mismatch": (all_reduce_peer, dtype_culprit),
    "all_to_all_splits": (a2a_peer, a2a_culprit),
    "reordered_collectives": (reordered_peer, reordered_culprit),
}


# ---------------------------------------------------------------------------------------------
# Process plumbing.


def _write_atomic(path: Path, data: bytes) -> None:
    # The launcher treats a file's existence as "complete", so never let it see a partial one.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _wait_for(path: Path, launcher_pid: int) -> None:
    # If the launcher died, nobody will ever write the file: leave now rather than at the
    # watchdog deadline (an orphan is re-parented, so its parent pid changes).
    while not path.exists():
        if os.getppid() != launcher_pid:
            sys.stderr.write(f"launcher {launcher_pid} is gone, exiting\n")
            os._exit(ORPHAN_EXIT)
        time.sleep(POLL_S)


def _start_watchdog(seconds: float, rank: int) -> None:
    def fire() -> None:
        sys.stderr.write(f"rank {rank}: watchdog: still running after {seconds:.0f} s, exiting\n")
        sys.stderr.flush()
        os._exit(WATCHDOG_EXIT)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m fr_otel.demo.gloo_job worker")
    p.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--outdir", type=Path, required=True)
    p.add_argument("--naming", required=True, choices=NAMINGS)
    p.add_argument("--no-stack-traces", action="store_true")
    p.add_argument("--no-json", action="store_true")
    p.add_argument("--pg-timeout-s", type=float, default=60.0)
    p.add_argument("--deadline-s", type=float, default=150.0)
    return p.parse_args(list(argv))


def main(argv: Sequence[str]) -> NoReturn:
    """Run one rank; always leaves through ``os._exit`` (see the module docstring)."""
    a = _parse(argv)
    launcher_pid = os.getppid()
    _start_watchdog(a.deadline_s, a.rank)
    # The buffer must be set before the first process group is created; 2000 is torch's
    # default, forced so that a user's TORCH_FR_BUFFER_SIZE=0 cannot silence the demo.
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    # CPU-only torch without numpy warns on import; it is noise in the rank logs.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=a.pg_timeout_s)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{a.workdir / 'store'}",
        rank=a.rank,
        world_size=a.world,
        timeout=timeout,
    )
    # new_group is collective over the default group: every rank creates both, in this order.
    front = dist.new_group(list(range(a.world - 1)), timeout=timeout, group_desc=FRONT_GROUP)
    back = dist.new_group(list(range(1, a.world)), timeout=timeout, group_desc=BACK_GROUP)
    c = Ctx(rank=a.rank, world=a.world, front=front, back=back, torch=torch, dist=dist)

    warm_up_step(c)
    time.sleep(SETTLE_S)
    scenario = SCENARIOS[a.scenario]
    peer_step, culprit_step = STEPS[a.scenario]
    c10d: Any = torch._C._distributed_c10d  # private, so absent from torch's type stubs
    if a.rank in scenario.culprit_ranks and culprit_step is not None:
        if not a.no_stack_traces:
            # The first dump with stack traces spends on the order of a second of CPU
            # setting up the symbolizer; doing it while the peers dump takes it off the
            # critical path. Discarded.
            c10d._dump_fr_trace(includeCollectives=True, includeStackTraces=True)
        _wait_for(a.workdir / "go", launcher_pid)
        works = culprit_step(c)
    else:
        works = peer_step(c)

    # Dump at once, before anything else can happen to the collectives just issued.
    pickled = c10d._dump_fr_trace(includeCollectives=True, includeStackTraces=not a.no_stack_traces)
    as_json = None if a.no_json else c10d._dump_fr_trace_json(includeCollectives=True)
    _write_atomic(a.outdir / dump_relpath(a.naming, a.rank), pickled)
    if as_json is not None:
        _write_atomic(a.outdir / dump_relpath(a.naming, a.rank, json=True), as_json)
    _write_atomic(a.workdir / f"rank_{a.rank}.done", b"")
    # ``works`` stays referenced until the process ends, so no Work is destroyed mid-flight.
    print(f"rank {a.rank}: dumped after issuing {len(works)} async collective(s)", flush=True)

    _wait_for(a.workdir / "release", launcher_pid)
    sys.stdout.flush()
    sys.stderr.flush()
    # No destroy_process_group: it would block on (or abort over) the pending collectives.
    os._exit(0)
