"""Tensor parallel MLP with DTensor: two feed-forward blocks, each a ColwiseParallel up
projection and a RowwiseParallel down projection, on a 1-D mesh ("tp") over every rank.

parallelize_module shards each weight from rank 0 (``distribute_tensor``: a scatter whose
input list only the source has); each step all-reduces both blocks' outputs in forward and
one activation gradient in backward (the input needs no gradient), all functional
collectives on the mesh's group ``mesh_tp``.

Ground truth: culprit FAULT_RANK in mesh_tp, op all_reduce. hang: it stalls before
loss.backward() in FAULT_STEP. skip: it skips the backward of FAULT_STEP (a rank-local
"bad loss, skip the update" guard), leaving out that step's backward all_reduce.

    torchrun --standalone --nproc-per-node 2 tests/workloads/dtensor_tp.py
"""

from __future__ import annotations

import _common
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class MLP(nn.Module):
    def __init__(self, dim: int = 32, hidden: int = 96) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(FeedForward(dim, hidden) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return x


def main() -> None:
    cfg = _common.settings()
    rank = _common.init(cfg)
    world = dist.get_world_size()
    mesh = init_device_mesh(
        "cpu",
        (world,),
        mesh_dim_names=("tp",),
        backend_override={"tp": ("gloo", _common.gloo_options(cfg))},
    )
    _common.write_truth(
        cfg,
        "dtensor_tp",
        world,
        pg_desc="mesh_tp",
        mesh_dim="tp",
        op="all_reduce",
        where="tensor parallel activation all_reduce",
    )
    _common.seed(0)
    model = MLP()
    plan = {}
    for i in range(len(model.blocks)):
        plan[f"blocks.{i}.up"] = ColwiseParallel()
        plan[f"blocks.{i}.down"] = RowwiseParallel()
    model = parallelize_module(model, mesh["tp"], plan)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    # tensor parallel ranks see the same batch
    _common.seed(1)
    with _common.dump_on_error(cfg):
        for step in range(cfg.steps):
            x, y = torch.randn(8, 32), torch.randn(8, 32)
            loss = nn.functional.mse_loss(model(x), y)
            if cfg.fault == "hang" and cfg.faulty_step(step):
                _common.hang(cfg)
            if cfg.fault == "skip" and cfg.faulty_step(step):
                optimizer.zero_grad()
                _common.skipped(cfg)
                continue
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
    _common.finish(cfg)


if __name__ == "__main__":
    main()
