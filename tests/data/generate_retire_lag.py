"""Regenerate tests/data/retire_lag_<case>/: real 4-rank gloo jobs whose peers dumped before
gloo had marked their last blocking collective complete.

    python tests/data/generate_retire_lag.py                  # both cases
    python tests/data/generate_retire_lag.py --only in_subgroup

One rank is stuck in host code after the demo's warm-up step and never issues the next
default_pg all_reduce (#7); its peers issue #7 and dump at once. ``wait()`` returns when
gloo's worker thread completes the work's future, a moment before that thread retires the
Flight Recorder entry (the pause the demo job makes, ``fr_otel.demo._worker.SETTLE_S``, is
there to hide this): a peer that dumps straight away shows its last blocking collective
``retired=False`` although it returned from it and issued #7, as real jobs do.

- ``missing_rank``: rank 1 stops after the warm-up's closing all_reduce (default_pg #6),
  which it completed; the peers' #6 shows not retired.
- ``in_subgroup``: rank 0 stops after the warm-up; ranks 1 to 3 first run a blocking
  back_group all_reduce (#3), then #7; two of them show #3 not retired.

Each rank is pinned to one CPU, which makes the lag likely, not certain: a job is run
again (each try 5-20 s on 2 cores) until enough peers' dumps show it (missing_rank: 23
tries, in_subgroup: 5, when they were made). Dumps have no stack traces; each rank's dump
time goes into ``scenario.json`` (``dumped_ns``, for ``tests/fixtures.restore_dump_times``),
with what each dump shows not retired (``not_retired``). Needs torch and a POSIX system.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from fr_otel.demo.naming import dump_relpath
from fr_otel.demo.scenarios import BACK_GROUP, FRONT_GROUP

DATA_DIR = Path(__file__).resolve().parent
WORLD = 4
NAMING = "torch_default"
FAULT_SEQ = 7


@dataclass(frozen=True, kw_only=True)
class Case:
    name: str
    culprit: int
    description: str
    lagging: tuple[str, int]
    """The group and sequence number of the peers' last blocking collective."""
    peers_lagging: int
    """How many peers must show it not retired."""

    @property
    def folder(self) -> Path:
        return DATA_DIR / f"retire_lag_{self.name}"

    def scenario(self) -> dict[str, Any]:
        return {
            "name": f"retire_lag_{self.name}",
            "description": self.description,
            "world": WORLD,
            "culprit_ranks": [self.culprit],
            "pg_desc": "default_pg",
            "collective_seq_id": FAULT_SEQ,
            "expected_kind": "missing_rank",
        }


_CASES = (
    Case(
        name="missing_rank",
        culprit=1,
        description=(
            "Rank 1 is stuck in host code after the blocking default_pg all_reduce #6 and"
            " never issues all_reduce #7; ranks 0, 2 and 3 issue #7 at once and dump before"
            " gloo has marked their #6 complete (retired=False), though they returned from it."
        ),
        lagging=("default_pg", FAULT_SEQ - 1),
        peers_lagging=3,
    ),
    Case(
        name="in_subgroup",
        culprit=0,
        description=(
            "Rank 0 is stuck in host code after the warm-up and never issues the default_pg"
            " all_reduce #7; ranks 1 to 3 run a blocking back_group all_reduce (#3), then"
            " issue #7 at once and dump, two of them before gloo has marked their back_group"
            " #3 complete (retired=False), though they returned from it."
        ),
        lagging=(BACK_GROUP, 3),
        # rarer: back_group #3 not retired on all three peers took more than 60 tries
        peers_lagging=2,
    ),
)
CASES = {case.name: case for case in _CASES}
#: Tries before giving up: one try in 5 to 25 shows the lag on enough peers.
ATTEMPTS = 60
#: Seconds one try may take.
TIMEOUT_S = 90.0
_POLL_S = 0.01


def _wait_for(path: Path, deadline: float) -> None:
    while not path.exists():
        if time.monotonic() > deadline:
            os._exit(124)
        time.sleep(_POLL_S)


def worker(case: Case, rank: int, workdir: Path, outdir: Path) -> None:
    """One rank: the demo's warm-up step, then the case's collectives at once (peers) or
    nothing (the culprit)."""
    deadline = time.monotonic() + TIMEOUT_S
    cpus = sorted(os.sched_getaffinity(0))
    # before torch starts a thread: gloo's worker threads inherit the main thread's CPU, so
    # the thread that completes a work's future shares it with the thread it wakes
    os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    import torch
    import torch.distributed as dist

    from fr_otel.demo._worker import Ctx, warm_up_step

    timeout = timedelta(seconds=TIMEOUT_S)
    store = f"file://{workdir / 'store'}"
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=WORLD, timeout=timeout)
    front = dist.new_group(list(range(WORLD - 1)), timeout=timeout, group_desc=FRONT_GROUP)
    back = dist.new_group(list(range(1, WORLD)), timeout=timeout, group_desc=BACK_GROUP)
    c = Ctx(rank=rank, world=WORLD, front=front, back=back, torch=torch, dist=dist)
    c10d: Any = torch._C._distributed_c10d
    warm_up_step(c)  # ends with the blocking all_reduce #6
    works = []
    if rank == case.culprit:
        _wait_for(workdir / "go", deadline)  # stuck in host code until the peers dumped
    else:
        if case.lagging[0] == BACK_GROUP:
            dist.all_reduce(torch.ones(512), group=back)  # blocking
        works.append(dist.all_reduce(torch.ones(1024), async_op=True))  # #7
    dumped_ns = time.time_ns()
    pickled = c10d._dump_fr_trace(includeCollectives=True, includeStackTraces=False)
    path = outdir / dump_relpath(NAMING, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickled)
    (workdir / f"rank_{rank}.done").write_text(str(dumped_ns))
    _wait_for(workdir / "release", deadline)
    # no destroy_process_group: it would block on #7, which the culprit never joins
    os._exit(0)


def _try(case: Case, outdir: Path) -> dict[int, int]:
    """One run of the job into ``outdir``; returns each rank's dump time."""
    with tempfile.TemporaryDirectory(prefix="fr_otel_lag_") as tmp:
        work = Path(tmp)
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "worker", case.name, str(rank), str(work), str(outdir)],
                stdout=subprocess.DEVNULL,
            )
            for rank in range(WORLD)
        ]
        try:
            deadline = time.monotonic() + TIMEOUT_S
            peers = [r for r in range(WORLD) if r != case.culprit]
            culprit = [work / f"rank_{case.culprit}.done"]
            for markers in ([work / f"rank_{r}.done" for r in peers], culprit):
                while not all(m.exists() for m in markers):
                    if time.monotonic() > deadline or any(p.poll() for p in procs):
                        raise RuntimeError("the job failed or ran out of time")
                    time.sleep(_POLL_S)
                (work / "go").touch()
            times = {r: int((work / f"rank_{r}.done").read_text()) for r in range(WORLD)}
            (work / "release").touch()
            for proc in procs:
                proc.wait(timeout=TIMEOUT_S)
            return times
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def _unretired(outdir: Path) -> dict[int, list[list[Any]]]:
    """Per rank, the [group, sequence number] of each entry its dump shows not retired."""
    out = {}
    for rank in range(WORLD):
        with (outdir / dump_relpath(NAMING, rank)).open("rb") as f:
            entries = pickle.load(f)["entries"]
        out[rank] = [
            [e["process_group"][1], e["collective_seq_id"]] for e in entries if not e["retired"]
        ]
    return out


def generate(case: Case) -> int:
    """Run the job until every peer shows the lag; returns the tries it took."""
    folder = case.folder
    tmp = folder.with_name(folder.name + ".new")
    lagging = [list(case.lagging), ["default_pg", FAULT_SEQ]]
    for attempt in range(1, ATTEMPTS + 1):
        shutil.rmtree(tmp, ignore_errors=True)
        times = _try(case, tmp)
        unretired = _unretired(tmp)
        peers = [unretired[r] for r in range(WORLD) if r != case.culprit]
        lag = sum(seen == lagging for seen in peers)
        others = all(seen in (lagging, lagging[1:]) for seen in peers)
        if lag >= case.peers_lagging and others and unretired[case.culprit] == []:
            break
        print(f"try {attempt}: not retired per rank {unretired}", file=sys.stderr)
    else:
        raise RuntimeError(f"no try in {ATTEMPTS} showed the lag on enough peers")
    with (tmp / dump_relpath(NAMING, 0)).open("rb") as f:
        fr_version = pickle.load(f)["version"]
    meta = {
        "scenario": case.scenario(),
        "world": WORLD,
        "naming": NAMING,
        "stack_traces": False,
        "files": {str(r): {"pickle": dump_relpath(NAMING, r)} for r in range(WORLD)},
        "dumped_ns": {str(r): t for r, t in times.items()},
        "not_retired": {str(r): seqs for r, seqs in unretired.items()},
        "torch_version": importlib.metadata.version("torch"),
        "fr_version": fr_version,
        "backend": "gloo",
        "regenerate": f"python tests/data/generate_retire_lag.py --only {case.name}",
    }
    (tmp / "scenario.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return attempt


def main() -> int:
    if sys.argv[1:2] == ["worker"]:
        w = argparse.ArgumentParser(prog=f"{Path(__file__).name} worker")
        w.add_argument("case", choices=list(CASES))
        w.add_argument("rank", type=int)
        w.add_argument("workdir", type=Path)
        w.add_argument("outdir", type=Path)
        a = w.parse_args(sys.argv[2:])
        worker(CASES[a.case], a.rank, a.workdir, a.outdir)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=list(CASES), action="append", help="repeatable")
    args = p.parse_args()
    for name in args.only or list(CASES):
        case = CASES[name]
        t0 = time.monotonic()
        tries = generate(case)
        took = time.monotonic() - t0
        print(f"{case.folder.relative_to(DATA_DIR.parent.parent)}: {tries} tries, {took:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
