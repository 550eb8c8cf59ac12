"""FSDP2 (``fully_shard``) over a small MLP: one FSDP unit per block plus the root, SGD.

Ground truth: culprit FAULT_RANK in default_pg. hang: it stalls before loss.backward() in
FAULT_STEP, so its peers wait in backward's first all_gather (gloo records FSDP2's
all_gather_into_tensor as all_gather). skip: it does not reshard the last block after
FAULT_STEP's forward (reshard_after_forward=False on that rank for that step), so its
backward leaves out that block's all_gather and its later collectives are shifted.

    torchrun --standalone --nproc-per-node 2 tests/workloads/fsdp2.py
"""

from __future__ import annotations

import _common
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(16, 64)
        self.blocks = nn.ModuleList(Block(64) for _ in range(2))
        self.out = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.inp(x))
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def main() -> None:
    cfg = _common.settings()
    rank = _common.init(cfg)
    world = dist.get_world_size()
    _common.write_truth(
        cfg,
        "fsdp2",
        world,
        pg_desc="default_pg",
        op="all_gather",
        where="FSDP2 parameter all_gather in backward",
    )
    _common.seed(0)
    model = MLP()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    _common.seed(1 + rank)
    with _common.dump_on_error(cfg):
        for step in range(cfg.steps):
            x, y = torch.randn(8, 16), torch.randn(8, 4)
            skip = cfg.fault == "skip" and cfg.faulty_step(step)
            last = model.blocks[-1]
            if skip:
                # the last block keeps its unsharded parameters after forward, so
                # backward needs no all_gather for it on this rank
                last.set_reshard_after_forward(False)  # type: ignore[operator]
            loss = nn.functional.mse_loss(model(x), y)
            if cfg.fault == "hang" and cfg.faulty_step(step):
                _common.hang(cfg)
            if skip:
                # the all_gather left out would come in backward, where the next one
                # meets a different collective: dump first in case gloo aborts
                _common.skipped(cfg)
            loss.backward()
            if skip:
                last.set_reshard_after_forward(True)  # type: ignore[operator]
            optimizer.step()
            optimizer.zero_grad()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
    _common.finish(cfg)


if __name__ == "__main__":
    main()
