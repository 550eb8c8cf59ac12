"""Regenerate the real gloo Flight Recorder fixtures under tests/data/gloo_<scenario>/.

    python tests/data/generate_gloo.py             # every scenario (~45 s on 2 cores)
    python tests/data/generate_gloo.py --only size_mismatch

Each folder gets every rank's pickle dump (with stack traces) and JSON dump, named by the
convention listed in NAMING below, plus ``scenario.json`` with the ground truth. Needs torch.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import pickle
import shutil
import sys
import time
from pathlib import Path

from fr_otel.demo.gloo_job import SCENARIOS, run_scenario
from fr_otel.demo.naming import dump_relpath

DATA_DIR = Path(__file__).resolve().parent

#: Naming convention per scenario: every convention appears at least once, so the dump
#: discovery code is tested on each layout with real files.
NAMING = {
    "healthy": "torch_default",
    "skipped_collective": "torchtitan",
    "skipped_in_subgroup": "torchft",
    "missing_rank": "nccl",
    "op_type_mismatch": "torch_default",
    "size_mismatch": "nccl",
    "dtype_mismatch": "torchtitan",
    "all_to_all_splits": "torchft",
    "reordered_collectives": "torch_default",
}


def folder_for(name: str) -> Path:
    return DATA_DIR / f"gloo_{name}"


def generate(name: str) -> float:
    """Run one scenario into a fresh folder; returns the seconds it took."""
    scenario = SCENARIOS[name]
    naming = NAMING[name]
    folder = folder_for(name)
    # Write beside, then swap, so a failed run leaves the previous fixture intact.
    tmp = folder.with_name(folder.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    run_scenario(name, tmp, naming=naming, stack_traces=True, json_too=True)
    took = time.monotonic() - t0

    with (tmp / dump_relpath(naming, 0)).open("rb") as f:
        fr_version = pickle.load(f)["version"]
    files = {
        str(rank): {
            "pickle": dump_relpath(naming, rank),
            "json": dump_relpath(naming, rank, json=True),
        }
        for rank in range(scenario.world)
    }
    meta = {
        "scenario": scenario.as_dict(),
        "world": scenario.world,
        "naming": naming,
        "stack_traces": True,
        "files": files,
        "torch_version": importlib.metadata.version("torch"),
        "fr_version": fr_version,
        "backend": "gloo",
        "regenerate": f"python tests/data/generate_gloo.py --only {name}",
    }
    (tmp / "scenario.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return took


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=list(SCENARIOS), action="append", help="repeatable")
    args = p.parse_args()
    for name in args.only or list(SCENARIOS):
        took = generate(name)
        print(f"{folder_for(name).relative_to(DATA_DIR.parent.parent)}: {took:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
