"""Two-stage pipeline parallelism with ``torch.distributed.pipelining``: a ``PipelineStage``
per rank and ``ScheduleGPipe`` over 4 microbatches; the last stage broadcasts the step's
mean loss so that rank 0 can log it.

Activations and gradients move by send/recv (``batch_isend_irecv``), which gloo's Flight
Recorder does not record: torch's FR holds only the loss broadcasts (and each step's
p2p ops show as op_id gaps between them).

Ground truth: culprit FAULT_RANK (default 1, the last stage) in default_pg. hang: it stalls
before FAULT_STEP's schedule step, so rank 0 waits in a recv (op recv; no FR entry). skip:
it leaves out FAULT_STEP's loss broadcast (op broadcast).

    torchrun --standalone --nproc-per-node 2 tests/workloads/pipelining.py
"""

from __future__ import annotations

import _common
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

DIM, BATCH, MICROBATCHES = 16, 8, 4


def stage_module(index: int) -> nn.Module:
    if index == 0:
        return nn.Sequential(nn.Linear(DIM, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
    return nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, DIM))


def main() -> None:
    cfg = _common.settings()
    rank = _common.init(cfg)
    world = dist.get_world_size()
    if world != 2:
        raise SystemExit("pipelining runs 2 stages on 2 ranks")
    last = world - 1
    _common.write_truth(
        cfg,
        "pipelining",
        world,
        pg_desc="default_pg",
        op="recv" if cfg.fault == "hang" else "broadcast",
        where="pipeline recv (unrecorded)" if cfg.fault == "hang" else "loss broadcast",
    )
    _common.seed(rank)
    module = stage_module(rank)
    # shapes are inferred on the first step (metadata travels by send/recv too)
    stage = PipelineStage(module, stage_index=rank, num_stages=world, device=torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=MICROBATCHES, loss_fn=nn.MSELoss())
    optimizer = torch.optim.SGD(module.parameters(), lr=0.05)
    _common.seed(100)  # both stages draw the same batches: rank 0 the inputs, the last the targets
    with _common.dump_on_error(cfg):
        for step in range(cfg.steps):
            x, y = torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)
            if cfg.fault == "hang" and cfg.faulty_step(step):
                _common.hang(cfg)
            optimizer.zero_grad()
            losses: list[torch.Tensor] = []
            if rank == 0:
                schedule.step(x)
            else:
                schedule.step(target=y, losses=losses)
            optimizer.step()
            mean = torch.stack(losses).mean().detach() if rank == last else torch.zeros(())
            if cfg.fault == "skip" and cfg.faulty_step(step):
                _common.skipped(cfg)
            else:
                dist.broadcast(mean, src=last)
            if rank == 0:
                print(f"step {step} loss {mean.item():.4f}", flush=True)
    _common.finish(cfg)


if __name__ == "__main__":
    main()
