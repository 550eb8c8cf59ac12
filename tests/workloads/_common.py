"""What every workload script shares: its settings, seeding, the fault, and torch's FR dump.

The scripts are run by torchrun (``torchrun --standalone --nproc-per-node N script.py``) on
gloo/CPU and are controlled by the environment:

- ``FAULT``: ``none`` (default), ``hang`` (the culprit sleeps in host code long past the
  timeout before its next collective) or ``skip`` (the culprit leaves out one collective of
  one step and carries on);
- ``FAULT_RANK`` (default 1): the culprit's global rank;
- ``FAULT_STEP`` (default: the middle step): the step the fault happens in;
- ``STEPS`` (default 6);
- ``PG_TIMEOUT`` seconds (default 8), for every group the script creates;
- ``FR_DUMP_DIR``: when set, each rank writes torch's own Flight Recorder buffer to
  ``$FR_DUMP_DIR/comm_lib_trace_rank_<global rank>`` and rank 0 writes ``truth.json``.

A rank dumps at the end of a healthy run, when one of its collectives raises (then the
exception goes on), on the culprit just before it hangs and just after it skips, and on
SIGTERM (torchrun sends it to the survivors once a rank has failed, and they may still be
blocked in a collective). Each dump replaces the previous one, so the file holds the
rank's latest view.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import random
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist

FAULTS = ("none", "hang", "skip")
#: ``wait()`` returns (or raises) a few microseconds before gloo's worker thread retires the
#: entry in torch's FR: without a pause the last entry is sometimes still unretired.
SETTLE_S = 0.1
#: Exit code of a hung culprit that outlived its peers' timeout.
HUNG_EXIT = 3


@dataclass(frozen=True)
class Settings:
    fault: str
    fault_rank: int
    fault_step: int
    steps: int
    pg_timeout: float
    dump_dir: Path | None

    @property
    def timeout(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.pg_timeout)

    def is_culprit(self, rank: int | None = None) -> bool:
        rank = dist.get_rank() if rank is None else rank
        return self.fault != "none" and rank == self.fault_rank

    def faulty_step(self, step: int, rank: int | None = None) -> bool:
        """Whether ``rank`` (default: this one) misbehaves in ``step``."""
        return self.is_culprit(rank) and step == self.fault_step


def settings() -> Settings:
    fault = os.environ.get("FAULT", "none").strip().lower() or "none"
    if fault not in FAULTS:
        raise SystemExit(f"FAULT must be one of {', '.join(FAULTS)}, not {fault!r}")
    steps = int(os.environ.get("STEPS", "6"))
    step = os.environ.get("FAULT_STEP")
    dump_dir = os.environ.get("FR_DUMP_DIR")
    return Settings(
        fault=fault,
        fault_rank=int(os.environ.get("FAULT_RANK", "1")),
        fault_step=int(step) if step else steps // 2,
        steps=steps,
        pg_timeout=float(os.environ.get("PG_TIMEOUT", "8")),
        dump_dir=Path(dump_dir) if dump_dir else None,
    )


def seed(value: int = 0) -> None:
    random.seed(value)
    torch.manual_seed(value)


def init(cfg: Settings) -> int:
    """Join the default gloo group with the configured timeout; returns the global rank."""
    dist.init_process_group("gloo", timeout=cfg.timeout)
    _arm_sigterm(cfg)
    return dist.get_rank()


def gloo_options(cfg: Settings) -> Any:
    """Backend options for DeviceMesh groups: without them they get gloo's 30 minutes."""
    options = dist.ProcessGroupGloo._Options()
    options._timeout = cfg.timeout
    return options


def dump_fr(cfg: Settings) -> Path | None:
    """Write this rank's FR buffer (no stack traces) to ``FR_DUMP_DIR``, replacing the last."""
    if cfg.dump_dir is None or not dist.is_initialized():
        return None
    time.sleep(SETTLE_S)
    data = torch._C._distributed_c10d._dump_fr_trace(
        includeCollectives=True, includeStackTraces=False
    )
    cfg.dump_dir.mkdir(parents=True, exist_ok=True)
    path = cfg.dump_dir / f"comm_lib_trace_rank_{dist.get_rank()}"
    # a rank killed mid-write must not leave a truncated dump behind
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def write_truth(cfg: Settings, family: str, world: int, **truth: Any) -> None:
    """Rank 0 records the injected fault, for the tests that check the analyzer's verdict."""
    if cfg.dump_dir is None or dist.get_rank() != 0:
        return
    cfg.dump_dir.mkdir(parents=True, exist_ok=True)
    faulty = cfg.fault != "none"
    record = {
        "family": family,
        "world": world,
        "fault": cfg.fault,
        "steps": cfg.steps,
        "fault_step": cfg.fault_step if faulty else None,
        "culprit_ranks": [cfg.fault_rank] if faulty else [],
        "torch_version": torch.__version__,
        **{k: (v if faulty else None) for k, v in truth.items()},
    }
    (cfg.dump_dir / "truth.json").write_text(json.dumps(record, indent=2) + "\n")


@contextlib.contextmanager
def dump_on_error(cfg: Settings) -> Iterator[None]:
    """Dump when a collective (or anything else) raises, then let the exception go on."""
    try:
        yield
    except BaseException:
        # after the settling pause the failed collective shows as gloo leaves it once its
        # worker gives up on it: retired, as if it had completed
        with contextlib.suppress(Exception):
            dump_fr(cfg)
        raise


def hang(cfg: Settings) -> NoReturn:
    """The culprit is stuck in host code (a slow data loader, a deadlocked thread...):
    it dumps, then sleeps far past its peers' timeout instead of issuing its next
    collective, and gives up rather than sleeping forever."""
    dump_fr(cfg)
    print(f"rank {dist.get_rank()}: hanging in host code", file=sys.stderr, flush=True)
    time.sleep(3 * cfg.pg_timeout)
    os._exit(HUNG_EXIT)


def skipped(cfg: Settings) -> None:
    """Called by the culprit right after the collective it left out."""
    dump_fr(cfg)
    print(f"rank {dist.get_rank()}: skipped a collective", file=sys.stderr, flush=True)


def finish(cfg: Settings) -> None:
    """End of a run that raised nothing: dump, then leave the group."""
    dump_fr(cfg)
    dist.destroy_process_group()


def _arm_sigterm(cfg: Settings) -> None:
    # torchrun SIGTERMs the survivors as soon as one rank fails; a rank still blocked in
    # its collective would otherwise die without a dump (the handler runs once the
    # blocking call returns, well within torchrun's 30 s grace). Exiting by exception,
    # not os._exit, leaves atexit hooks (a recorder's flush) their chance.
    def on_term(signum: int, frame: object) -> None:
        with contextlib.suppress(Exception):
            dump_fr(cfg)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
