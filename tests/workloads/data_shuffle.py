"""Data pipeline collectives whose tensors legitimately differ across ranks: rank 0 scatters
each rank's shuffling seed (``scatter``: only the source passes the list), every epoch the
samples are reshuffled globally with an uneven ``all_to_all_single`` (the split sizes are
exchanged first with an even one), and every step rank 0 gathers each rank's mean loss
(``gather``: only the destination passes the list).

Ground truth: culprit FAULT_RANK in default_pg. hang: it stalls before FAULT_STEP's gather
(op gather); skip: it leaves out FAULT_STEP's gather and goes on to the next step's
shuffle.

    torchrun --standalone --nproc-per-node 3 tests/workloads/data_shuffle.py
"""

from __future__ import annotations

import _common
import torch
import torch.distributed as dist
from torch import nn

SAMPLES, DIM = 12, 6


def reshuffle(samples: torch.Tensor, generator: torch.Generator, world: int) -> torch.Tensor:
    """Send each sample to a random rank: uneven splits, counts exchanged first."""
    owners = torch.randint(0, world, (samples.shape[0],), generator=generator)
    order = torch.argsort(owners, stable=True)
    samples = samples[order]
    send_counts = torch.bincount(owners, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    received = samples.new_empty(int(recv_counts.sum()), samples.shape[1])
    dist.all_to_all_single(
        received,
        samples,
        output_split_sizes=recv_counts.tolist(),
        input_split_sizes=send_counts.tolist(),
    )
    return received


def main() -> None:
    cfg = _common.settings()
    rank = _common.init(cfg)
    world = dist.get_world_size()
    _common.write_truth(
        cfg, "data_shuffle", world, pg_desc="default_pg", op="gather", where="loss gather"
    )
    seed = torch.zeros(1, dtype=torch.int64)
    seeds = list(torch.arange(100, 100 + world).reshape(world, 1)) if rank == 0 else None
    dist.scatter(seed, seeds, src=0)
    generator = torch.Generator().manual_seed(int(seed))
    samples = torch.randn(SAMPLES, DIM + 1, generator=generator)
    _common.seed(0)
    model = nn.Linear(DIM, 1)
    with _common.dump_on_error(cfg):
        for step in range(cfg.steps):
            samples = reshuffle(samples, generator, world)
            if samples.shape[0]:
                loss = nn.functional.mse_loss(model(samples[:, :DIM]), samples[:, DIM:])
            else:
                loss = torch.zeros(())
            losses = [torch.zeros(1) for _ in range(world)] if rank == 0 else None
            if cfg.fault == "hang" and cfg.faulty_step(step):
                _common.hang(cfg)
            if cfg.fault == "skip" and cfg.faulty_step(step):
                _common.skipped(cfg)
            else:
                dist.gather(loss.detach().reshape(1), losses, dst=0)
            if losses is not None:
                print(f"step {step} loss {torch.cat(losses).mean().item():.4f}", flush=True)
    _common.finish(cfg)


if __name__ == "__main__":
    main()
