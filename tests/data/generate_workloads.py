"""Regenerate the real gloo fixtures under tests/data/workload_<case>/ from the training
scripts in tests/workloads/ (run with torchrun, torch's own Flight Recorder dumped by each
rank without stack traces).

    python tests/data/generate_workloads.py                    # every case (~3 min on 2 cores)
    python tests/data/generate_workloads.py --only mesh2d_hang

Each folder gets every rank's pickle dump (``comm_lib_trace_rank_<N>``) and
``scenario.json``: the ground truth the script recorded (its ``truth.json``), what the
analyzer is expected to report, the command that ran, and the versions. Needs torch, and
numpy for the cases that use object collectives (torch 2.13 deserialises objects with
``Tensor.numpy()``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
WORKLOADS = DATA_DIR.parent / "workloads"


@dataclass(frozen=True)
class Case:
    family: str
    ranks: int
    fault: str
    description: str
    expected_kind: str
    """The root cause's kind as torch's FR lets the analyzer see it ("none": healthy)."""
    env: dict[str, str] = field(default_factory=dict)
    needs_numpy: bool = False


CASES = {
    "dtensor_tp_healthy": Case(
        "dtensor_tp",
        2,
        "none",
        "Tensor parallel MLP on a 1-D mesh: parallelize_module scatters each weight from"
        " rank 0 (input list only on the source).",
        "none",
    ),
    "data_shuffle_healthy": Case(
        "data_shuffle",
        3,
        "none",
        "scatter from rank 0, uneven all_to_all_single, gather to rank 0: inputs and"
        " outputs legitimately differ across ranks.",
        "none",
    ),
    "functional_healthy": Case(
        "functional",
        3,
        "none",
        "ZeRO-1 with functional collectives: gloo records all_gather_tensor's output as"
        " one member's chunk.",
        "none",
    ),
    "objects_healthy": Case(
        "objects",
        3,
        "none",
        "Object collectives, barrier and monitored_barrier: each monitored_barrier consumes"
        " two collective sequence numbers on every rank and leaves no FR entry.",
        "none",
        needs_numpy=True,
    ),
    "objects_hang": Case(
        "objects",
        3,
        "hang",
        "Rank 1 stalls before step 3's all_gather_object, right after a monitored_barrier"
        " (a sequence number gap on every rank).",
        "missing_rank",
        needs_numpy=True,
    ),
    "mesh2d_hang": Case(
        "mesh2d",
        4,
        "hang",
        "2 x 2 mesh (dp, tp): rank 1 stalls before step 3's backward tp all_reduce; its tp"
        " peer waits in tp, ranks 2 and 3 in dp.",
        "missing_rank",
    ),
    "mesh2d_skip": Case(
        "mesh2d",
        4,
        "skip",
        "2 x 2 mesh (dp, tp): rank 1 leaves out step 3's forward tp all_reduce and ends a"
        " tp collective early; rank 0 waits in tp, rank 2 in dp behind it.",
        "missing_rank",
    ),
    "subgroups_skip": Case(
        "subgroups",
        4,
        "skip",
        "Pairs [0, 2] and [1, 3] (undescribed replica subgroups): rank 3 leaves out step"
        " 3's pair all_reduce; rank 1 waits for it in the pair, ranks 0, 2, 3 wait for rank 1"
        " in the loss all_reduce. Rank 3's own history says it skipped (it went on with what"
        " followed the pair all_reduce the step before); the other pair's order says the same.",
        "skipped_collective",
        env={"FAULT_RANK": "3"},
    ),
    "data_shuffle_skip": Case(
        "data_shuffle",
        3,
        "skip",
        "Rank 1 leaves out step 3's gather; the root waits in it, rank 2 in the next shuffle.",
        "skipped_collective",
    ),
}


def folder_for(name: str) -> Path:
    return DATA_DIR / f"workload_{name}"


def generate(name: str, timeout: float) -> float:
    """Run one case into a fresh folder; returns the seconds it took."""
    case = CASES[name]
    if case.needs_numpy and importlib.util.find_spec("numpy") is None:
        raise SystemExit(f"{name}: torch's object collectives need numpy: pip install numpy")
    folder = folder_for(name)
    # write beside, then swap, so a failed run leaves the previous fixture intact
    tmp = folder.with_name(folder.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    script = WORKLOADS / f"{case.family}.py"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={case.ranks}",
        str(script.relative_to(DATA_DIR.parents[1])),
    ]
    env = {**os.environ, **case.env, "FAULT": case.fault, "FR_DUMP_DIR": str(tmp)}
    t0 = time.monotonic()
    result = subprocess.run(
        command,
        cwd=DATA_DIR.parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    took = time.monotonic() - t0
    if (result.returncode == 0) != (case.fault == "none"):
        sys.stderr.write(result.stderr[-4000:])
        raise SystemExit(f"{name}: torchrun exited {result.returncode}")
    truth = json.loads((tmp / "truth.json").read_text())
    (tmp / "truth.json").unlink()
    dumps = sorted(tmp.glob("comm_lib_trace_rank_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
    if len(dumps) != case.ranks:
        raise SystemExit(f"{name}: {len(dumps)} dumps for {case.ranks} ranks")
    with dumps[0].open("rb") as f:
        fr_version = pickle.load(f)["version"]
    meta = {
        "scenario": {
            "name": name,
            "description": case.description,
            "world": case.ranks,
            "culprit_ranks": truth["culprit_ranks"],
            "pg_desc": truth.get("pg_desc"),
            "expected_kind": case.expected_kind,
        },
        "truth": truth,
        "world": case.ranks,
        "naming": "torch_default",
        "stack_traces": False,
        "files": {str(r): {"pickle": p.name} for r, p in enumerate(dumps)},
        # when each rank wrote its dump: git keeps no file times, and gloo's dumps hold no
        # dump time, so tests restore these (``tests/fixtures.py``)
        "dumped_ns": {str(r): p.stat().st_mtime_ns for r, p in enumerate(dumps)},
        "torch_version": importlib.metadata.version("torch"),
        "fr_version": fr_version,
        "backend": "gloo",
        "command": " ".join(
            [*(f"{k}={v}" for k, v in {**case.env, "FAULT": case.fault}.items()), *command[2:]]
        ),
        "regenerate": f"python tests/data/generate_workloads.py --only {name}",
    }
    (tmp / "scenario.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(CASES), help="one case")
    parser.add_argument("--timeout", type=float, default=180, help="seconds per case")
    args = parser.parse_args()
    for name in args.only or list(CASES):
        took = generate(name, args.timeout)
        print(f"{folder_for(name).name}: {took:.1f} s", flush=True)


if __name__ == "__main__":
    main()
