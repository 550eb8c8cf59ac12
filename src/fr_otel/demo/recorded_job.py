"""A real gloo training job under the recorder, with one injected fault that really fails.

Unlike :mod:`fr_otel.demo.gloo_job`, which freezes ranks to take deterministic dumps, this
job lets each fault run its course the way it would in production: a peer of a size
mismatch dies of gloo's ``std::terminate``, a rank that skipped a collective makes its
peers fail or time out, a rank stuck in host code leaves its peers waiting until a timeout
kills them with an uncaught exception. Whatever remains is the recorder's job: every
rank's buffer must reach the archive (and the Collector) under one incident.

``run_recorded(name, archive)`` plays ``fr-otel run -- torchrun``: it hosts the job's
TCPStore itself (torchrun's agent store, so the store outlives any rank), starts the
ranks as ``python -m fr_otel.demo.recorded_job worker NAME`` with ``RANK``/``WORLD_SIZE``/
``MASTER_*`` set, and when a rank fails it does what torchrun does: SIGTERM to the others
at its next monitor tick (0.1 s), then ``fr-otel run``'s finishing flush of whatever rings
nobody flushed. Each rank calls ``fr_otel.install()`` itself, before or after
``init_process_group`` (``install``), or gets it ``fr-otel run``'s way, with no code change
(``install="launcher"``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: Gloo timeout of every process group in the job.
PG_TIMEOUT_S = 6.0
#: The recorder's own timeout in ``stuck_in_host``: it fires while the peers still wait.
RECORDER_TIMEOUT_S = 2.0
#: How the ranks get the recorder: ``install()`` before or after ``init_process_group``, or
#: ``fr-otel run``'s way (the launcher's environment, no call in the script).
INSTALL_WAYS = ("before", "after", "launcher")
#: torchrun's default monitor interval: how soon the other ranks get SIGTERM after a failure.
MONITOR_INTERVAL_S = 0.1
WARMUP_STEPS = 3
FRONT_GROUP = "front_group"
BACK_GROUP = "back_group"


@dataclass(frozen=True, kw_only=True)
class RecordedScenario:
    name: str
    description: str
    culprit: int | None
    pg_desc: str | None
    """The group whose collective the culprit got wrong."""
    kinds: tuple[str, ...]
    """Finding kinds a correct analysis may report as the root cause."""
    environment: Mapping[str, str] = field(default_factory=dict)


#: What each scenario does, in words.
_DESCRIPTIONS = {
    "healthy": "no fault: the warm-up steps, then ten more",
    "skipped_collective": "rank 1 skips the gradient all_reduce of step 4 and goes on",
    "skipped_in_subgroup": (
        "inside back_group (ranks 1..3) rank 2 skips an all_reduce; gloo's own dumps"
        " cannot even say who is in that group"
    ),
    "size_mismatch": (
        "rank 1 all_reduces 1001 floats against its peers' 1000: the peer that"
        " receives them dies at once (gloo aborts the process)"
    ),
    "stuck_in_host": (
        "rank 0 hangs in host code; the recorder's timeout fires while its peers are"
        " still blocked inside the all_reduce, and every rank flushes from its"
        " background threads"
    ),
    "uncaught_timeout": (
        "rank 0 hangs in host code; gloo's timeout raises in its peers, uncaught, and kills them"
    ),
}
_SHORT_TIMEOUT = {"FR_OTEL_TIMEOUT": str(RECORDER_TIMEOUT_S)}

# name, culprit, its group, the root causes a correct analysis may report, environment
_SCENARIO_TABLE: tuple[
    tuple[str, int | None, str | None, tuple[str, ...], Mapping[str, str]], ...
] = (
    ("healthy", None, None, (), {}),
    ("skipped_collective", 1, "default_pg", ("skipped_collective",), {}),
    ("skipped_in_subgroup", 2, BACK_GROUP, ("skipped_collective", "missing_rank"), {}),
    ("size_mismatch", 1, "default_pg", ("size_mismatch",), {}),
    ("stuck_in_host", 0, "default_pg", ("missing_rank",), _SHORT_TIMEOUT),
    ("uncaught_timeout", 0, "default_pg", ("missing_rank",), {}),
)

SCENARIOS: dict[str, RecordedScenario] = {
    name: RecordedScenario(
        name=name,
        culprit=culprit,
        pg_desc=pg_desc,
        kinds=kinds,
        environment=environment,
        description=_DESCRIPTIONS[name],
    )
    for name, culprit, pg_desc, kinds, environment in _SCENARIO_TABLE
}


@dataclass(kw_only=True)
class RecordedRun:
    scenario: RecordedScenario
    world: int
    archive: Path
    job: str
    returncodes: list[int | None]
    logs: list[str]
    elapsed_s: float
    late_flushes: list[int] = field(default_factory=list)
    """Ranks whose rings the launcher flushed after the job (nobody else had)."""

    def incidents(self) -> list[str]:
        folder = self.archive / f"job={self.job}"
        return sorted(p.name.removeprefix("incident=") for p in folder.glob("incident=*"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_recorded(
    name: str,
    archive: Path,
    *,
    world: int = 4,
    job: str = "demo",
    environment: Mapping[str, str] | None = None,
    install: str = "before",
    timeout_s: float = 90.0,
) -> RecordedRun:
    """Run scenario ``name`` under the recorder, writing into ``archive``.

    ``environment`` adds to the ranks' environment (``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``FR_OTEL_MODE`` ...). Every rank process is gone when this returns.
    """
    scenario = SCENARIOS[name]
    if install not in INSTALL_WAYS:
        raise ValueError(f"install must be one of {INSTALL_WAYS}, not {install!r}")
    if not 4 <= world <= 8:
        raise ValueError(f"world must be between 4 and 8, not {world}")
    import datetime

    from torch._C._distributed_c10d import TCPStore

    from fr_otel import config
    from fr_otel.recorder.launcher import finish

    archive = Path(archive).absolute()
    archive.mkdir(parents=True, exist_ok=True)
    port = free_port()
    store = TCPStore(
        "127.0.0.1",
        port,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    env = dict(os.environ)
    env.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCHELASTIC_RESTART_COUNT": "0",
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "FR_OTEL_ARCHIVE": str(archive),
            "FR_OTEL_JOB": job,
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(scenario.environment)
    env.update(environment or {})
    if install == "launcher":
        from fr_otel.recorder.launcher import child_environment

        env = child_environment({}, env)
    started = time.monotonic()
    started_ns = time.time_ns()
    logs = [archive.parent / f".{archive.name}-rank{rank}.log" for rank in range(world)]
    procs = []
    for rank in range(world):
        rank_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
        command = [sys.executable, "-m", "fr_otel.demo.recorded_job", "worker", name, install]
        with logs[rank].open("wb") as log:
            procs.append(
                subprocess.Popen(command, env=rank_env, stdout=log, stderr=subprocess.STDOUT)
            )
    try:
        _supervise(procs, MONITOR_INTERVAL_S, started + timeout_s)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    settings = config.recorder_settings(environ=env)
    failed = any(p.returncode != 0 for p in procs)
    late = finish(settings, 1 if failed else 0, started_ns)
    del store
    texts = [path.read_text(errors="replace") for path in logs]
    for path in logs:
        path.unlink(missing_ok=True)
    return RecordedRun(
        scenario=scenario,
        world=world,
        archive=archive,
        job=job,
        returncodes=[p.returncode for p in procs],
        logs=texts,
        elapsed_s=time.monotonic() - started,
        late_flushes=[report.rank for report in late.late_flushes],
    )


def _supervise(procs: list[subprocess.Popen[bytes]], grace: float, deadline: float) -> None:
    """torchrun's rule: once a rank fails, the rest get ``grace`` seconds, then SIGTERM."""
    failed_at: float | None = None
    while time.monotonic() < deadline:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > grace:
            break
        time.sleep(0.05)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    end = time.monotonic() + 5
    while time.monotonic() < end and any(p.poll() is None for p in procs):
        time.sleep(0.05)


# --- inside each rank --------------------------------------------------------------------


def _train_step(groups: dict[str, object], rank: int, *, skip_gradient: bool = False) -> None:
    import torch as t
    import torch.distributed as d

    world = d.get_world_size()
    grad = t.ones(1000)
    if not skip_gradient:
        d.all_reduce(grad)  # gradient all_reduce
    shard = t.ones(10)
    gathered = t.empty(10 * world)
    d.all_gather_into_tensor(gathered, shard)  # parameter all_gather
    if rank < world - 1:
        d.all_reduce(t.ones(100), group=groups[FRONT_GROUP])  # front stage
    if rank > 0:
        d.all_reduce(t.ones(100), group=groups[BACK_GROUP])  # back stage
    if rank == 0:
        d.send(t.ones(16), 1)  # activations to the next stage
    elif rank == 1:
        d.recv(t.empty(16), 0)
    d.broadcast(t.ones(4), 0)  # config broadcast


def _fault_step(name: str, groups: dict[str, object], rank: int) -> None:
    import torch as t
    import torch.distributed as d

    world = d.get_world_size()
    if name == "healthy":
        for _ in range(10):
            _train_step(groups, rank)
    elif name == "skipped_collective":
        # one more training step, in which rank 1 skips the gradient all_reduce: its
        # parameter all_gather meets its peers' all_reduce, and gloo fails them all there.
        # Only the call sites, against the steps before, show that rank 1 went on.
        _train_step(groups, rank, skip_gradient=rank == 1)
        d.all_reduce(t.ones(8))  # loss all_reduce
    elif name == "skipped_in_subgroup":
        if rank > 0:
            if rank != 2:
                d.all_reduce(t.ones(100), group=groups[BACK_GROUP])  # back stage
            d.all_gather_into_tensor(
                t.empty(10 * (world - 1)), t.ones(10), group=groups[BACK_GROUP]
            )
        d.all_reduce(t.ones(8))  # loss all_reduce
    elif name == "size_mismatch":
        d.all_reduce(t.ones(1001 if rank == 1 else 1000))  # gradient all_reduce
        d.all_reduce(t.ones(8))
    elif name in ("stuck_in_host", "uncaught_timeout"):
        if rank == 0:
            time.sleep(600)  # host code that never returns (a hung checkpoint write)
        d.all_reduce(t.ones(1000))  # gradient all_reduce
    else:
        raise ValueError(f"unknown scenario {name!r}")


def worker(name: str, install: str) -> None:
    import datetime

    import torch.distributed as dist

    import fr_otel

    if install == "before":
        fr_otel.install()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=PG_TIMEOUT_S)
    dist.init_process_group("gloo", timeout=timeout)
    if install == "after":
        fr_otel.install()
    groups = {
        FRONT_GROUP: dist.new_group(
            list(range(world - 1)), timeout=timeout, group_desc=FRONT_GROUP
        ),
        BACK_GROUP: dist.new_group(list(range(1, world)), timeout=timeout, group_desc=BACK_GROUP),
    }
    for _ in range(WARMUP_STEPS):
        _train_step(groups, rank)
    _fault_step(name, groups, rank)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "worker" and sys.argv[3] in INSTALL_WAYS:
        worker(sys.argv[2], install=sys.argv[3])
    else:
        sys.exit("usage: python -m fr_otel.demo.recorded_job worker SCENARIO before|after|launcher")
