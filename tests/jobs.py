"""How the tests start a real multi-process job."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

from fr_otel.demo.recorded_job import free_port


def torchrun(script: Path, ranks: int) -> list[str]:
    """torchrun starting ``ranks`` ranks of ``script`` on a free port."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(ranks),
        "--master-port",
        str(free_port()),
        str(script),
    ]


STEERING = ("FR_OTEL_", "TORCH_FR_", "TORCH_NCCL_", "OTEL_", "ARROW_")
"""Variables of this process that would change what a child's recorder or torch does."""


@contextlib.contextmanager
def environment(variables: dict[str, str]) -> Iterator[None]:
    """This process's environment with ``variables`` set, as it was again afterwards:
    ``fr-otel run`` called in-process hands its environment to the job it starts."""
    saved = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def python_child(
    code: str, env: dict[str, str], cwd: Path | None = None, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) with ``args`` in a child Python with exactly ``env``; asserts
    that it exits 0 and returns it (stdout and stderr as text)."""
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    return child


def one_rank_child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python_child`` for code that may start a one-rank gloo job on a free port: this
    process's environment without its ``STEERING`` variables, plus ``env``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(STEERING)}
    environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), **env)
    return python_child(code, environ)


def fr_otel_run(archive: Path, job: str, command: list[str], **env: str) -> tuple[int, Path, float]:
    """``fr-otel run --job JOB --archive ARCHIVE -- COMMAND`` in this process, with ``env``
    set around it and one intra-op thread per rank; (exit code, archive, seconds)."""
    from fr_otel.cli import main

    began = time.monotonic()
    with environment({"OMP_NUM_THREADS": "1", **env}):
        code = main(["run", "--job", job, "--archive", str(archive), "--", *command])
    return code, archive, time.monotonic() - began


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes, from ``/proc``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found
