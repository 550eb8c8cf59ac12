"""DDP over a small MLP: three gradient buckets (after DDP rebuilds them), SGD.

Ground truth: culprit FAULT_RANK in default_pg, op all_reduce (a gradient bucket). hang: it
stalls before loss.backward() in FAULT_STEP, so its peers wait in the first bucket's
all_reduce. skip: it runs FAULT_STEP's backward under model.no_sync() (a gradient
accumulation counter off by one on one rank), so it leaves out that step's bucket
all_reduces and carries on one step behind its peers.

    torchrun --standalone --nproc-per-node 3 tests/workloads/ddp.py
"""

from __future__ import annotations

import contextlib

import _common
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(32, 96),
            nn.ReLU(),
            nn.Linear(96, 96),
            nn.ReLU(),
            nn.Linear(96, 96),
            nn.ReLU(),
            nn.Linear(96, 8),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def main() -> None:
    cfg = _common.settings()
    rank = _common.init(cfg)
    world = dist.get_world_size()
    _common.write_truth(
        cfg,
        "ddp",
        world,
        pg_desc="default_pg",
        op="all_reduce",
        where="gradient bucket all_reduce",
    )
    _common.seed(0)
    # 0.03 MiB per bucket: the 22,568 parameters land in three buckets once DDP rebuilds
    # them after the first step (before that they are one)
    model = DDP(MLP(), bucket_cap_mb=0.03)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    _common.seed(1 + rank)  # each rank its own data shard
    with _common.dump_on_error(cfg):
        for step in range(cfg.steps):
            x, y = torch.randn(16, 32), torch.randn(16, 8)
            optimizer.zero_grad()
            skip = cfg.fault == "skip" and cfg.faulty_step(step)
            # DDP decides in forward whether backward syncs: inside no_sync() the step's
            # bucket all_reduces are never issued on this rank
            with model.no_sync() if skip else contextlib.nullcontext():
                loss = loss_fn(model(x), y)
                if cfg.fault == "hang" and cfg.faulty_step(step):
                    _common.hang(cfg)
                loss.backward()
            if skip:
                _common.skipped(cfg)
            optimizer.step()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
    _common.finish(cfg)


if __name__ == "__main__":
    main()
