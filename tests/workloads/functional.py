"""A hand-written ZeRO-1 step with raw functional collectives
(``torch.distributed._functional_collectives``): every rank holds the whole flat parameter
vector and updates one shard of it.

Each step: reduce_scatter_tensor of the flat gradient (each rank gets its shard's mean),
SGD on the shard, all_gather_tensor of the shards back into the flat vector, all_reduce of
the loss for logging. Each returns an AsyncCollectiveTensor that is waited on explicitly
(``wait_tensor``), as overlapped code does.

Ground truth: culprit FAULT_RANK in default_pg. hang: it stalls before loss.backward() in
FAULT_STEP, so its peers wait in the gradient reduce_scatter (gloo records it as
all_reduce). skip: it leaves out the parameter all_gather of FAULT_STEP (op all_gather).

    torchrun --standalone --nproc-per-node 3 tests/workloads/functional.py
"""

from __future__ import annotations

import _common
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters


def main() -> None:
    cfg = _common.settings()
    rank = _common.init(cfg)
    world = dist.get_world_size()
    group = dist.group.WORLD
    _common.write_truth(
        cfg,
        "functional",
        world,
        pg_desc="default_pg",
        op="all_reduce" if cfg.fault == "hang" else "all_gather",
        where="gradient reduce_scatter" if cfg.fault == "hang" else "parameter all_gather",
    )
    _common.seed(0)
    model = nn.Sequential(nn.Linear(24, 48), nn.Tanh(), nn.Linear(48, 4))
    numel = sum(p.numel() for p in model.parameters())
    shard = -(-numel // world)  # the flat vector is padded to world x shard
    flat = torch.zeros(world * shard)
    flat[:numel] = parameters_to_vector(model.parameters()).detach()
    _common.seed(1 + rank)
    with _common.dump_on_error(cfg):
        for step in range(cfg.steps):
            x, y = torch.randn(16, 24), torch.randn(16, 4)
            loss = nn.functional.mse_loss(model(x), y)
            if cfg.fault == "hang" and cfg.faulty_step(step):
                _common.hang(cfg)
            model.zero_grad()
            loss.backward()
            grad = torch.zeros(world * shard)
            grad[:numel] = parameters_to_vector(p.grad for p in model.parameters())
            mine = funcol.wait_tensor(funcol.reduce_scatter_tensor(grad, "avg", 0, group))
            updated = flat[rank * shard : (rank + 1) * shard] - 0.05 * mine
            if cfg.fault == "skip" and cfg.faulty_step(step):
                _common.skipped(cfg)
            else:
                flat = funcol.wait_tensor(funcol.all_gather_tensor(updated, 0, group))
                vector_to_parameters(flat[:numel], model.parameters())
            logged = funcol.all_reduce(loss.detach(), "avg", group)
            if rank == 0:
                print(f"step {step} loss {funcol.wait_tensor(logged).item():.4f}", flush=True)
            else:
                funcol.wait_tensor(logged)
    _common.finish(cfg)


if __name__ == "__main__":
    main()
