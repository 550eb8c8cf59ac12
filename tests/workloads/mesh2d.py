"""2-D DeviceMesh ("dp", "tp") over 4 ranks: a tensor parallel linear layer inside each tp
pair, data parallel gradient averaging across the dp pairs, written with plain
``dist.all_reduce`` on the mesh's dimension groups.

Ranks [[0, 1], [2, 3]]: tp groups {0, 1} and {2, 3} (``mesh_tp``), dp groups {0, 2} and
{1, 3} (``mesh_dp``). Each step: forward all-reduces the row-parallel layer's partial
output in tp, backward all-reduces the input gradient in tp, then the weight shard's
gradient and the loss are all-reduced in dp.

Ground truth: culprit FAULT_RANK (default 1) in its tp group (mesh_tp), op all_reduce.
hang: it stalls before FAULT_STEP's backward tp all_reduce; skip: it leaves out FAULT_STEP's
forward tp all_reduce. Its tp peer waits in tp; the other ranks wait in dp as a
consequence.

    torchrun --standalone --nproc-per-node 4 tests/workloads/mesh2d.py
"""

from __future__ import annotations

import _common
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

DIM, HIDDEN, BATCH = 16, 32, 8


def main() -> None:
    cfg = _common.settings()
    rank = _common.init(cfg)
    world = dist.get_world_size()
    if world != 4:
        raise SystemExit("mesh2d needs 4 ranks (a 2 x 2 mesh)")
    options = _common.gloo_options(cfg)
    mesh = init_device_mesh(
        "cpu",
        (2, 2),
        mesh_dim_names=("dp", "tp"),
        backend_override={"dp": ("gloo", options), "tp": ("gloo", options)},
    )
    tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
    tp_rank, tp_size = mesh.get_local_rank("tp"), mesh.size(1)
    _common.write_truth(
        cfg,
        "mesh2d",
        world,
        pg_desc="mesh_tp",
        mesh_dim="tp",
        group_ranks=[r for r in range(world) if r // 2 == cfg.fault_rank // 2],
        op="all_reduce",
        where="tp all_reduce",
    )
    _common.seed(0)
    # each tp rank holds a column shard of w1 and the matching row shard of w2
    w1 = torch.randn(DIM, HIDDEN).chunk(tp_size, dim=1)[tp_rank].clone().requires_grad_()
    w2 = torch.randn(HIDDEN, DIM).chunk(tp_size, dim=0)[tp_rank].clone().requires_grad_()
    _common.seed(1 + mesh.get_local_rank("dp"))  # a data shard per dp rank
    with _common.dump_on_error(cfg):
        for step in range(cfg.steps):
            x, y = torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)
            partial = torch.relu(x @ w1) @ w2
            out = partial.detach().clone()
            if cfg.fault == "skip" and cfg.faulty_step(step):
                _common.skipped(cfg)
            else:
                dist.all_reduce(out, group=tp)
            # row-parallel output: the partial sums' gradient is the full output's
            grad_out = 2 * (out - y) / out.numel()
            loss = ((out - y) ** 2).mean()
            if cfg.fault == "hang" and cfg.faulty_step(step):
                _common.hang(cfg)
            partial.backward(grad_out)
            grad_x = (grad_out @ w2.detach().T) * (x @ w1.detach() > 0)
            grad_x = grad_x @ w1.detach().T
            dist.all_reduce(grad_x, group=tp)
            grads = torch.cat([w1.grad.flatten(), w2.grad.flatten()])  # type: ignore[union-attr]
            dist.all_reduce(grads, group=dp)
            grads /= mesh.size(0)
            with torch.no_grad():
                w1 -= 0.05 * grads[: w1.numel()].view_as(w1)
                w2 -= 0.05 * grads[w1.numel() :].view_as(w2)
                w1.grad = w2.grad = None
            logged = loss.detach().reshape(1)
            dist.all_reduce(logged, group=dp)
            if rank == 0:
                print(f"step {step} loss {logged.item() / mesh.size(0):.4f}", flush=True)
    _common.finish(cfg)


if __name__ == "__main__":
    main()
