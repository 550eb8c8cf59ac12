"""Data parallel training synchronised by hand through ``ProcessGroup`` methods called on
the group object (``pg.broadcast``, ``pg.allreduce`` and ``Work.wait()``), as libraries
that bypass ``torch.distributed``'s functions do.

The parameters are broadcast from rank 0 on a group created with ``new_group(...,
group_desc="grad_sync")``; each step all-reduces the flat gradient and then the loss for
logging on that group.

Ground truth: culprit FAULT_RANK in grad_sync, op all_reduce. hang: it stalls before
loss.backward() in FAULT_STEP; skip: it leaves out the gradient allreduce of FAULT_STEP.

    torchrun --standalone --nproc-per-node 3 tests/workloads/pg_methods.py
"""

from __future__ import annotations

import _common
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters


def main() -> None:
    cfg = _common.settings()
    rank = _common.init(cfg)
    world = dist.get_world_size()
    pg = dist.new_group(list(range(world)), timeout=cfg.timeout, group_desc="grad_sync")
    _common.write_truth(
        cfg,
        "pg_methods",
        world,
        pg_desc="grad_sync",
        op="all_reduce",
        where="gradient allreduce on the group object",
    )
    model = nn.Sequential(nn.Linear(20, 40), nn.ReLU(), nn.Linear(40, 2))
    flat = parameters_to_vector(model.parameters()).detach()
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    pg.broadcast([flat], opts).wait()
    vector_to_parameters(flat, model.parameters())
    _common.seed(1 + rank)
    with _common.dump_on_error(cfg):
        for step in range(cfg.steps):
            x, y = torch.randn(16, 20), torch.randn(16, 2)
            loss = nn.functional.mse_loss(model(x), y)
            if cfg.fault == "hang" and cfg.faulty_step(step):
                _common.hang(cfg)
            model.zero_grad()
            loss.backward()
            grad = parameters_to_vector(p.grad for p in model.parameters())
            if cfg.fault == "skip" and cfg.faulty_step(step):
                _common.skipped(cfg)
            else:
                pg.allreduce([grad]).wait()
            grad /= world
            with torch.no_grad():
                flat = parameters_to_vector(model.parameters()) - 0.05 * grad
                vector_to_parameters(flat, model.parameters())
            logged = loss.detach().reshape(1)
            pg.allreduce([logged]).wait()
            if rank == 0:
                print(f"step {step} loss {logged.item() / world:.4f}", flush=True)
    _common.finish(cfg)


if __name__ == "__main__":
    main()
