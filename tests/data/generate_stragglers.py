"""Regenerate the slow-job fixtures under tests/data/stragglers_<case>/ from
tests/workloads/stragglers.py: 4 gloo ranks under the recorder, some of them slower before
every step's gradient all_reduce, archived by a snapshot (SIGUSR2) at the end.

    python tests/data/generate_stragglers.py                 # every case (~1 min on 2 cores)
    python tests/data/generate_stragglers.py --only one

Each folder holds ``archive/`` (the recorder's archive of the snapshot: one Parquet file
per rank and the incident's manifest; the recorder's rows carry completion times, which
the clock estimate needs) and ``stragglers.json``: the injected delays, what the analyzer
must name, the command that ran and the versions.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
SCRIPT = DATA_DIR.parent / "workloads" / "stragglers.py"
WORLD = 4
JOB = "stragglers"


@dataclass(frozen=True)
class Case:
    description: str
    stragglers: dict[int, float]
    """rank -> extra milliseconds before every step's gradient all_reduce."""
    jitter_ms: float = 0.0


CASES = {
    "one": Case("Rank 2 sleeps 10 ms longer than its peers before every step.", {2: 10.0}),
    "two": Case(
        "Ranks 1 and 3 sleep 10 and 20 ms longer than their peers before every step.",
        {1: 10.0, 3: 20.0},
    ),
    "jitter": Case(
        "Healthy: every rank sleeps a random 0-10 ms more each step, nobody consistently.",
        {},
        jitter_ms=10.0,
    ),
}


def folder_for(name: str) -> Path:
    return DATA_DIR / f"stragglers_{name}"


def generate(name: str, timeout: float) -> float:
    case = CASES[name]
    folder = folder_for(name)
    tmp = folder.with_name(folder.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FR_OTEL_", "OTEL_"))}
    env.update(
        FR_OTEL_ARCHIVE=str(tmp / "archive"),
        FR_OTEL_JOB=JOB,
        FR_OTEL_RING_DIR=str(tmp / "rings"),
        OMP_NUM_THREADS="1",
        STRAGGLERS=",".join(f"{r}:{ms:g}" for r, ms in case.stragglers.items()),
        JITTER_MS=f"{case.jitter_ms:g}",
    )
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={WORLD}",
        str(SCRIPT.relative_to(DATA_DIR.parents[1])),
    ]
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
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-3000:] + result.stderr[-3000:])
        raise SystemExit(f"{name}: torchrun exited {result.returncode}")
    shutil.rmtree(tmp / "rings", ignore_errors=True)
    for hidden in (tmp / "archive").glob("_*"):  # torch's raw dumps, the spool
        shutil.rmtree(hidden, ignore_errors=True)
    [incident] = list((tmp / "archive" / f"job={JOB}").glob("incident=*"))
    (incident / ".manifest.lock").unlink(missing_ok=True)
    meta = {
        "scenario": {
            "name": name,
            "description": case.description,
            "world": WORLD,
            "stragglers": {str(r): ms for r, ms in case.stragglers.items()},
            "jitter_ms": case.jitter_ms,
            "call_site_function": "grad_sync",
        },
        "job": JOB,
        "incident": incident.name.removeprefix("incident="),
        "torch_version": importlib.metadata.version("torch"),
        "backend": "gloo",
        "command": " ".join([f"STRAGGLERS={env['STRAGGLERS']}", *command[2:]]),
        "regenerate": f"python tests/data/generate_stragglers.py --only {name}",
    }
    (tmp / "stragglers.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(CASES), action="append")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    for name in args.only or sorted(CASES):
        took = generate(name, args.timeout)
        print(f"{name}: {folder_for(name)} ({took:.0f} s)")


if __name__ == "__main__":
    main()
