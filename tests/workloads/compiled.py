"""Data parallel gradient sync inside a ``torch.compile``d function: Inductor lowers the
functional collectives (``all_reduce`` of the flat gradient on sync steps, then of the
loss for logging) into the compiled graph, so no Python ``torch.distributed`` function is
called while it runs. Gradients accumulate over two steps: odd steps sync them, so both
graphs (with and without the gradient all_reduce) are compiled in the first two steps.

Ground truth: culprit FAULT_RANK in default_pg, op all_reduce. hang: it stalls before
FAULT_STEP's compiled sync; skip: it counts FAULT_STEP (odd, default 3) as an
accumulation step, so the graph it runs leaves out the gradient all_reduce (its loss
all_reduce then meets its peers' gradient all_reduce).

    torchrun --standalone --nproc-per-node 2 tests/workloads/compiled.py
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
    group_name = dist.group.WORLD.group_name  # type: ignore[union-attr]
    _common.write_truth(
        cfg,
        "compiled",
        world,
        pg_desc="default_pg",
        op="all_reduce",
        where="loss all_reduce in compiled code" if cfg.fault == "skip" else "gradient sync",
    )

    @torch.compile(fullgraph=True)
    def sync(grad: torch.Tensor, loss: torch.Tensor, sync_grads: bool) -> torch.Tensor:
        if sync_grads:
            grad = funcol.all_reduce(grad, "sum", group_name) / world
        loss = funcol.all_reduce(loss, "sum", group_name) / world
        return torch.cat([grad, loss.reshape(1)])

    _common.seed(0)
    model = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 3))
    _common.seed(1 + rank)
    with _common.dump_on_error(cfg):
        for step in range(cfg.steps):
            x, y = torch.randn(16, 12), torch.randn(16, 3)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            grad = parameters_to_vector(p.grad for p in model.parameters())
            if cfg.fault == "hang" and cfg.faulty_step(step):
                _common.hang(cfg)
            sync_grads = step % 2 == 1
            if sync_grads and cfg.fault == "skip" and cfg.faulty_step(step):
                sync_grads = False
                # the skip happens inside the compiled graph, whose next collective may
                # meet a larger one and make gloo abort this process: dump first
                _common.skipped(cfg)
            synced = sync(grad, loss.detach(), sync_grads)
            if sync_grads:
                with torch.no_grad():
                    flat = parameters_to_vector(model.parameters()) - 0.05 * synced[:-1]
                    vector_to_parameters(flat, model.parameters())
                model.zero_grad()
            if rank == 0:
                print(f"step {step} loss {synced[-1].item():.4f}", flush=True)
    _common.finish(cfg)


if __name__ == "__main__":
    main()
