"""Replica subgroups created together: ``new_subgroups_by_enumeration([[0, 2], [1, 3]])``
(no description: torch records them as ``undefined``). Each step all-reduces the
gradient over everyone, then a one-element statistic inside each rank's pair, then the
loss over everyone again.

Ground truth: culprit FAULT_RANK (3 in the committed fixture) in its pair, op
all_reduce. skip: it leaves out FAULT_STEP's pair all_reduce and goes on to the loss
all_reduce. Its pair peer then waits in the pair for it, while it and the other pair wait
in the default group for that peer: two absences waiting on each other across groups.
Only what the other pair did (it issued its pair all_reduce before the loss, as every
rank did at every step) says which came first. hang: it stalls before FAULT_STEP's pair
all_reduce.

    FAULT=skip FAULT_RANK=3 torchrun --standalone --nproc-per-node 4 tests/workloads/subgroups.py
"""

from __future__ import annotations

import _common
import torch
import torch.distributed as dist

DIM = 64


def main() -> None:
    cfg = _common.settings()
    rank = _common.init(cfg)
    world = dist.get_world_size()
    if world != 4:
        raise SystemExit("subgroups needs 4 ranks (pairs [0, 2] and [1, 3])")
    enumeration = [[0, 2], [1, 3]]
    pair, _ = dist.new_subgroups_by_enumeration(enumeration, timeout=cfg.timeout)
    culprit_pair = next(p for p in enumeration if cfg.fault_rank in p)
    _common.write_truth(
        cfg,
        "subgroups",
        world,
        pg_desc="undefined",
        group_ranks=culprit_pair,
        op="all_reduce",
        where="pair all_reduce",
    )
    _common.seed(1 + rank)
    weight = torch.randn(DIM)
    with _common.dump_on_error(cfg):
        for step in range(cfg.steps):
            x = torch.randn(16, DIM)
            loss = ((x @ weight) ** 2).mean()
            grad = (2 * (x @ weight)[:, None] * x).mean(0)
            dist.all_reduce(grad)  # gradient, everyone
            weight -= 0.01 * grad / world
            stat = grad.norm().reshape(1)
            if cfg.faulty_step(step) and cfg.fault == "skip":
                _common.skipped(cfg)
            else:
                if cfg.faulty_step(step) and cfg.fault == "hang":
                    _common.hang(cfg)
                dist.all_reduce(stat, group=pair)  # a statistic inside the pair
            logged = loss.detach().reshape(1)
            dist.all_reduce(logged)  # loss, everyone
            if rank == 0:
                print(f"step {step} loss {logged.item() / world:.4f}", flush=True)
    _common.finish(cfg)


if __name__ == "__main__":
    main()
