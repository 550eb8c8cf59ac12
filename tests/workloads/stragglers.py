"""A job that is slow, not stuck: some ranks spend longer before each step's gradient
all_reduce (a slow data loader), under the recorder (``fr_otel.install()``).

Each step every rank "computes" (sleeps ``BASE_MS`` plus a uniform draw of up to
``JITTER_MS``), the ranks listed in ``STRAGGLERS`` (``rank:ms,rank:ms``) sleep that much
longer, then all of them run the gradient all_reduce and a metrics all_reduce. With
``BURST=k`` the gradient all_reduce runs ``k`` times a step from one line, as FSDP's
per-layer collectives do, each after ``BURST_GAP_MS`` of work and the stragglers' extra
delay, which then holds them up at every collective of the burst. After
``STEPS`` steps, with ``SNAPSHOT=signal`` (default) rank 0 sends itself ``SIGUSR2``: the
recorder declares a snapshot job-wide and every rank archives its buffer under
``FR_OTEL_ARCHIVE`` (its completion times included, which the clock estimate needs); with
``SNAPSHOT=none`` the script only trains (an outside ``fr-otel snapshot`` takes it, once
every rank has printed ``step PRINT_AT``). The ranks wait for the snapshot before they
leave, so the job ends normally.

    FR_OTEL_ARCHIVE=a STRAGGLERS=2:10 torchrun --nproc-per-node 4 tests/workloads/stragglers.py
"""

from __future__ import annotations

import datetime
import os
import random
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist

import fr_otel


def _delays() -> dict[int, float]:
    spec = os.environ.get("STRAGGLERS", "").strip()
    pairs = (item.split(":") for item in spec.split(",") if item)
    return {int(rank): float(ms) / 1e3 for rank, ms in pairs}


def _wait_for_snapshot(archive: Path, job: str, world: int, timeout_s: float = 60.0) -> None:
    """Until every rank's file of one snapshot is in the archive."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for folder in (archive / f"job={job}").glob("incident=*"):
            if len(list(folder.glob("rank-*.parquet"))) >= world:
                return
        time.sleep(0.1)
    raise SystemExit(f"no complete snapshot under {archive} after {timeout_s} s")


def grad_sync(grads: torch.Tensor) -> None:
    dist.all_reduce(grads)


def report_metrics(metrics: torch.Tensor) -> None:
    dist.all_reduce(metrics)


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    fr_otel.install()
    rank, world = dist.get_rank(), dist.get_world_size()
    steps = int(os.environ.get("STEPS", "200"))
    base = float(os.environ.get("BASE_MS", "2")) / 1e3
    jitter = float(os.environ.get("JITTER_MS", "0")) / 1e3
    extra = _delays().get(rank, 0.0)
    print_at = int(os.environ.get("PRINT_AT", "10"))
    burst = int(os.environ.get("BURST", "0"))
    burst_gap = float(os.environ.get("BURST_GAP_MS", "1")) / 1e3
    rng = random.Random(1000 + rank)
    grads, metrics = torch.ones(256), torch.ones(4)
    for step in range(steps):
        if burst:
            time.sleep(base + rng.uniform(0.0, jitter))
            for _ in range(burst):
                time.sleep(burst_gap + extra)  # one layer's forward and backward
                grad_sync(grads)
        else:
            time.sleep(base + rng.uniform(0.0, jitter) + extra)  # forward and backward
            grad_sync(grads)
        report_metrics(metrics)
        if step == print_at:
            print(f"step {print_at}", flush=True)
    if os.environ.get("SNAPSHOT", "signal") == "signal":
        if rank == 0:
            os.kill(os.getpid(), signal.SIGUSR2)
        archive = Path(os.environ["FR_OTEL_ARCHIVE"])
        _wait_for_snapshot(archive, os.environ.get("FR_OTEL_JOB", "stragglers"), world)
    dist.barrier()
    dist.destroy_process_group()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
