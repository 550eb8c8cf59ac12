"""Training bookkeeping with object collectives: each step every rank shares its stats with
``all_gather_object``, rank 0 broadcasts the next learning rate with
``broadcast_object_list``, ranks meet at ``barrier`` every other step, and at
``monitored_barrier`` (gloo only: rank 0 names the ranks that did not arrive) before each
"checkpoint" (every third step).

Ground truth: culprit FAULT_RANK in default_pg. hang: it stalls in host code right before
FAULT_STEP's all_gather_object (op all_gather, its size exchange). skip: it leaves out
FAULT_STEP's barrier (op barrier; barriers come on odd steps, and FAULT_STEP defaults to 3).

    torchrun --standalone --nproc-per-node 3 tests/workloads/objects.py
"""

from __future__ import annotations

import datetime

import _common
import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    cfg = _common.settings()
    rank = _common.init(cfg)
    world = dist.get_world_size()
    _common.write_truth(
        cfg,
        "objects",
        world,
        pg_desc="default_pg",
        op="all_gather" if cfg.fault == "hang" else "barrier",
        where="all_gather_object" if cfg.fault == "hang" else "barrier",
    )
    _common.seed(1 + rank)
    model = nn.Linear(8, 1)
    lr = 0.1
    with _common.dump_on_error(cfg):
        for step in range(cfg.steps):
            x, y = torch.randn(32, 8), torch.randn(32, 1)
            loss = nn.functional.mse_loss(model(x), y)
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= lr * p.grad
            stats = {"rank": rank, "step": step, "loss": loss.item(), "samples": 32}
            gathered: list[object] = [None] * world
            if cfg.fault == "hang" and cfg.faulty_step(step):
                _common.hang(cfg)
            dist.all_gather_object(gathered, stats)
            decision: list[object] = [None]
            if rank == 0:
                mean = sum(s["loss"] for s in gathered) / world  # type: ignore[index]
                decision = [{"lr": lr * 0.9 if mean > 1.0 else lr, "mean_loss": mean}]
                print(f"step {step} loss {mean:.4f}", flush=True)
            dist.broadcast_object_list(decision, src=0)
            lr = decision[0]["lr"]  # type: ignore[index]
            if step % 2 == 1:
                if cfg.fault == "skip" and cfg.faulty_step(step):
                    _common.skipped(cfg)
                else:
                    dist.barrier()
            if step % 3 == 2:
                dist.monitored_barrier(
                    timeout=datetime.timedelta(seconds=cfg.pg_timeout), wait_all_ranks=True
                )
    _common.finish(cfg)


if __name__ == "__main__":
    main()
