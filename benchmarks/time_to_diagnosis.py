"""Time to diagnosis: how soon the live check of ``fr-otel run`` names a fault's culprit,
beside the old way (the group's timeout, then ``fr-otel analyze``) and beside torch's own
immediate check, ``TORCH_DISTRIBUTED_DEBUG=DETAIL``; and what each costs a DDP loop.

Each fault family is a real 3-rank gloo job (``torchrun`` on this machine) with the fault
injected by one rank, which writes the fault's wall-clock moment (``time.time_ns()``) to
``FAULT_MARK`` just before it misbehaves; every time below is counted from that mark, on
the same host's clock:

- ``skipped collective``: ``tests/workloads/data_shuffle.py`` ``FAULT=skip`` (rank 1 leaves
  out a step's gather and goes on to the next step's shuffle);
- ``size mismatch`` / ``dtype mismatch``: a small training loop (the one of
  ``tests/integration/test_live_diagnosis.py``) whose rank 1 all_reduces 1001 floats
  against 1000, or float64 against float32;
- ``reordering``: the same loop, rank 1 issues its all_gather before its all_reduce;
- ``rank stuck in host code``: ``FAULT=hang FAULT_RANK=2`` of ``tests/workloads/ddp.py``
  (rank 2 sleeps before its backward; its peers wait in a DDP bucket all-reduce, which
  reaches the rings through torch's Flight Recorder) and of ``data_shuffle.py`` (its peers
  wait in a gather, hooked); the live check names a stall *suspect* once the peers have
  waited ``FR_OTEL_LIVE_STALL_S`` (set to ``--stall-s``, 10 s here, against 30 s by
  default), with ``FR_OTEL_LIVE_STALL_INCIDENT=1`` so that the suspect also declares an
  incident;
- ``skipped functional collective``: ``tests/workloads/functional.py`` ``FAULT=skip``
  (rank 1 leaves out a ZeRO step's ``all_gather_tensor``; functional collectives are
  issued from C++ and reach the rings at the rank's next read of torch's FR).

The workloads mark the moment through a wrapper that runs them with ``_common.skipped`` /
``_common.hang`` (called by the culprit at its fault) writing ``FAULT_MARK`` first. Every
group's timeout is ``--timeout`` (30 s): NCCL's default is 600 s, gloo's 1,800 s, and the
old way scales with it, the live way does not.

Per family and repeat, three launches of the same job:

1. **live**: ``fr-otel run`` (incident mode, live check on, ``FR_OTEL_LIVE_POLICY=abort``,
   which ends the job once its ranks have flushed, so the benchmark does not wait for the
   timeout). Its standard error is read line by line in a thread and each line stamped on
   arrival: *live verdict* is the first ``fr-otel: live: desync`` or ``fr-otel: live:
   stall suspect`` line; the culprit is the one its record under ``ARCHIVE/_live`` names.
   *incident in archive* is when the last rank's file of the incident the record names
   (``ARCHIVE/job=J/incident=I/rank-*.parquet``, polled every 0.1 s) appeared.
2. **old way**: the same under ``fr-otel run`` with ``FR_OTEL_LIVE=0``: the recorder
   declares an incident when a collective has been pending three quarters of the group's
   timeout (``FR_OTEL_TIMEOUT``'s default), or when a rank fails; the time its last rank
   file appeared, plus the wall time of ``fr-otel analyze ARCHIVE --job J --incident I
   --format json`` in a fresh process (someone running it the moment the files are in).
   The analysis's root-cause culprit must be the expected one.
3. **DETAIL**: ``torchrun`` alone with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (every
   collective is first checked by an extra collective of its fingerprint: op, sizes,
   dtypes): the first line on any rank's standard error after the mark that reads as an
   error (a traceback, ``...Error``, ``terminate called``). DETAIL names a rank only
   where its monitored barrier finds one missing (a hang, at the group's timeout); a
   mismatch's message says which two ranks differ, not which is at fault (each family's
   DETAIL message is printed below the table).

"right culprit?" says, per run, for the live verdict, the old way's analysis and DETAIL,
whether the named ranks are the fault's culprit: a verdict naming another rank is
printed ``WRONG``, a run without one ``none``; nothing is dropped.

Then the overhead: steps per second of a small DDP loop (an MLP 128-256-256-256-10, three
gradient buckets, SGD, 2 ranks, one intra-op thread each) without anything, with
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` and under ``fr-otel run`` (incident mode, live check on).
With torch 2.13 on gloo, ``DistributedDataParallel``'s constructor dies of SIGSEGV under
DETAIL (in its logger's ``set_construction_data_and_log``, with the group wrapped for
DETAIL's checks), as does the stuck-rank DDP job: so the same loop also runs with the
same three buckets all-reduced by hand after ``backward()``, which DETAIL does run.
Each (mode, repeat) is its own launch; the repeats rotate the order of the modes.
Reported: the median steps/s and each mode's ratio to ``off`` within a repeat (median and
range). Launches on a small shared machine differ by several percent: the spread of the
``off`` launches is printed too.

    .venv/bin/python benchmarks/time_to_diagnosis.py            # every family, 2 repeats
    .venv/bin/python benchmarks/time_to_diagnosis.py --quick    # 2 families, 1 repeat

The default takes about 20 minutes on a 2-core machine; ``--quick`` about 3, which is why
no test runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.jobs import torchrun  # noqa: E402

WORKLOADS = ROOT / "tests" / "workloads"
WORLD = 3
DDP_WORLD = 2
SCRUB = ("FR_OTEL_", "OTEL_", "TORCH_FR_", "TORCH_NCCL_", "ARROW_", "TORCH_DISTRIBUTED_DEBUG")
"""Variables of this process that would change what a launch's ranks or fr-otel do."""
LIVE_LINE = re.compile(r"^fr-otel: live: (desync \w+|stall suspect):")
ERROR_LINE = re.compile(r"Traceback|[A-Za-z]+Error\b|terminate called")
"""A rank's error on its standard error (Python's traceback, gloo's std::terminate)."""
BARRIER = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")

_TRAIN = """
import datetime, os, time, torch, torch.distributed as dist

timeout = datetime.timedelta(seconds=float(os.environ["PG_TIMEOUT"]))
dist.init_process_group("gloo", timeout=timeout)
rank, world = dist.get_rank(), dist.get_world_size()
gathered = torch.empty(64 * world)


def step(numel=1000, dtype=torch.float32, reorder=False):
    calls = [
        lambda: dist.all_reduce(torch.ones(numel, dtype=dtype)),
        lambda: dist.all_gather_into_tensor(gathered, torch.ones(64)),
    ]
    for call in reversed(calls) if reorder else calls:
        call()


# rank 1's step 10: its peers all_reduce 1000 float32, then all_gather
FAULTS = {
    "reorder": dict(reorder=True),
    "size": dict(numel=1001),
    "dtype": dict(dtype=torch.float64),
}
for i in range(60):
    if i == 10 and rank == 1:
        with open(os.environ["FAULT_MARK"], "w") as mark:
            mark.write(str(time.time_ns()))
        step(**FAULTS[os.environ["LIVE_FAULT"]])
    else:
        step()
    time.sleep(0.05)
dist.destroy_process_group()
"""

_MARKED = """
import os, runpy, sys, time

workload = sys.argv[1]
sys.path.insert(0, os.path.dirname(workload))
import _common


def marked(original):
    def at_fault(cfg):
        with open(os.environ["FAULT_MARK"], "w") as mark:
            mark.write(str(time.time_ns()))
        return original(cfg)

    return at_fault


# the culprit calls these at its fault: hang() before it sleeps, skipped() right after
# the collective it left out (the workload looks them up on the module at the call)
_common.hang = marked(_common.hang)
_common.skipped = marked(_common.skipped)
sys.argv = sys.argv[1:]
runpy.run_path(workload, run_name="__main__")
"""

_DDP = """
import os, time, torch, torch.distributed as dist
from torch import nn

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
net = nn.Sequential(
    nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
    nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10),
)
ddp = os.environ["SYNC"] == "ddp"
model = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.25) if ddp else net
# by hand: DDP's buckets (last layers first, 0.25 MiB each), each all_reduced flat
buckets, bucket, size = [], [], 0
for parameter in reversed(list(net.parameters())):
    bucket.append(parameter)
    size += parameter.numel() * 4
    if size >= 0.25 * 2**20:
        buckets.append(bucket)
        bucket, size = [], 0
buckets += [bucket] if bucket else []
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
generator = torch.Generator().manual_seed(1 + rank)
batches = [
    (torch.randn(32, 128, generator=generator), torch.randn(32, 10, generator=generator))
    for _ in range(16)
]


def step(i):
    inputs, targets = batches[i % len(batches)]
    optimizer.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(inputs), targets).backward()
    if not ddp:
        for bucket in buckets:
            flat = torch.cat([p.grad.reshape(-1) for p in bucket])
            dist.all_reduce(flat)
            flat /= world
            offset = 0
            for p in bucket:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
                offset += p.numel()
    optimizer.step()


for i in range(int(os.environ["WARMUP"])):
    step(i)
dist.barrier()
steps = int(os.environ["STEPS"])
began = time.perf_counter()
for i in range(steps):
    step(i)
dist.barrier()
took = time.perf_counter() - began
if rank == 0:
    with open(os.environ["RESULT"], "w") as out:
        out.write(str(steps / took))
dist.destroy_process_group()
"""


@dataclass(frozen=True, kw_only=True)
class Family:
    name: str
    script: str
    """``train`` (``_TRAIN``) or a workload's file name under tests/workloads."""
    culprit: int
    env: dict[str, str]
    stall: bool = False


FAMILIES = (
    Family(name="skipped collective", script="data_shuffle.py", culprit=1, env={"FAULT": "skip"}),
    Family(name="size mismatch", script="train", culprit=1, env={"LIVE_FAULT": "size"}),
    Family(name="dtype mismatch", script="train", culprit=1, env={"LIVE_FAULT": "dtype"}),
    Family(name="reordering", script="train", culprit=1, env={"LIVE_FAULT": "reorder"}),
    Family(
        name="rank stuck in host code (DDP)",
        script="ddp.py",
        culprit=2,
        env={"FAULT": "hang", "FAULT_RANK": "2", "STEPS": "8"},
        stall=True,
    ),
    Family(
        name="rank stuck in host code (shuffle)",
        script="data_shuffle.py",
        culprit=2,
        env={"FAULT": "hang", "FAULT_RANK": "2", "STEPS": "8"},
        stall=True,
    ),
    Family(
        name="skipped functional collective",
        script="functional.py",
        culprit=1,
        env={"FAULT": "skip"},
    ),
)
QUICK = ("skipped collective", "reordering")
"""``--quick``'s families (with 1 repeat, 1 DDP launch per mode of 100 steps)."""


@dataclass(kw_only=True)
class Launch:
    """What one launch left: its standard error lines stamped on arrival, when each rank
    file of each incident appeared in the archive, its exit code."""

    lines: list[tuple[int, str]] = field(default_factory=list)
    files: dict[str, dict[str, int]] = field(default_factory=dict)
    returncode: int | None = None

    def first(self, pattern: re.Pattern[str], after_ns: int = 0) -> tuple[int, str] | None:
        return next(
            ((ns, text) for ns, text in self.lines if ns >= after_ns and pattern.search(text)),
            None,
        )

    def why(self) -> str:
        """How a launch that left no result ended: its exit code, and a rank's fatal signal."""
        signals = [text.strip() for _, text in self.lines if "received by PID" in text]
        return f"exit {self.returncode}" + (f", {signals[0]}" if signals else "")

    def landed_ns(self, incident: str) -> int | None:
        """When the incident's last rank file appeared."""
        stamps = self.files.get(incident)
        return max(stamps.values()) if stamps else None


@dataclass(kw_only=True)
class Outcome:
    """One launch's figures: seconds after the fault mark (None: never), culprits named."""

    seconds: float | None = None
    incident_s: float | None = None
    analyze_s: float | None = None
    culprits: list[int] | None = None
    kind: str | None = None
    note: str = ""


@dataclass(kw_only=True)
class Result:
    family: Family
    live: list[Outcome] = field(default_factory=list)
    old: list[Outcome] = field(default_factory=list)
    detail: list[Outcome] = field(default_factory=list)


def _environment(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB)}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)
    return env


FR_OTEL = (sys.executable, "-m", "fr_otel")


def _launch(
    command: list[str], env: dict[str, str], limit_s: float, archive: Path | None = None
) -> Launch:
    """Run ``command`` to its end (killed, with its process group, past ``limit_s``),
    stamping each standard error line and each incident rank file as it appears."""
    launch = Launch()
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    assert process.stderr is not None
    stream = process.stderr

    def read() -> None:
        for text in stream:
            launch.lines.append((time.time_ns(), text.rstrip("\n")))

    def poll() -> None:
        if archive is None:
            return
        for path in archive.glob("job=*/incident=*/rank-*.parquet"):
            incident = path.parent.name.removeprefix("incident=")
            launch.files.setdefault(incident, {}).setdefault(path.name, time.time_ns())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + limit_s
    while process.poll() is None:
        poll()
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            launch.lines.append((time.time_ns(), f"(benchmark: killed after {limit_s:.0f} s)"))
        time.sleep(0.1)
    launch.returncode = process.returncode
    reader.join(timeout=10)
    poll()
    return launch


def _since(ns: int | None, mark_ns: int) -> float | None:
    return None if ns is None else (ns - mark_ns) / 1e9


def _live_record(archive: Path, job: str) -> dict[str, Any] | None:
    """The first record the live check wrote (verdict or suspect)."""
    records = [json.loads(p.read_text()) for p in archive.glob(f"_live/job={job}/run=*/*.json")]
    records.sort(key=lambda record: record.get("known_ns") or 0)
    return records[0] if records else None


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.tmp = tmp
        (tmp / "train.py").write_text(_TRAIN)
        (tmp / "marked.py").write_text(_MARKED)
        (tmp / "ddp_steps.py").write_text(_DDP)
        self.count = 0

    def _job(self, family: Family) -> tuple[list[str], dict[str, str], Path]:
        """The family's torchrun command, environment, and where it writes its mark."""
        self.count += 1
        mark = self.tmp / f"mark-{self.count}"
        if family.script == "train":
            command = torchrun(self.tmp / "train.py", WORLD)
        else:
            command = [*torchrun(self.tmp / "marked.py", WORLD), str(WORKLOADS / family.script)]
        env = {
            **family.env,
            "PG_TIMEOUT": str(self.args.timeout),
            "FAULT_MARK": str(mark),
        }
        if family.stall:
            env.update(FR_OTEL_LIVE_STALL_S=str(self.args.stall_s), FR_OTEL_LIVE_STALL_INCIDENT="1")
        return command, env, mark

    def _limit(self) -> float:
        return float(3 * self.args.timeout + 90)

    def _run(
        self, family: Family, env: dict[str, str], job: str | None
    ) -> tuple[Launch, Path, int | None]:
        """The family's job with ``env`` added, under ``fr-otel run --job JOB`` unless
        ``job`` is None; (the launch, its archive, the fault mark or None: no fault)."""
        command, family_env, mark = self._job(family)
        archive = self.tmp / f"archive-{self.count}"
        if job is not None:
            command = [*FR_OTEL, "run", "--job", job, "--archive", str(archive), "--", *command]
        launch = _launch(command, _environment({**family_env, **env}), self._limit(), archive)
        return launch, archive, int(mark.read_text()) if mark.exists() else None

    def live(self, family: Family) -> Outcome:
        launch, archive, mark_ns = self._run(family, {"FR_OTEL_LIVE_POLICY": "abort"}, "live")
        if mark_ns is None:
            return Outcome(note=f"the fault never came: {launch.why()}")
        said = launch.first(LIVE_LINE)
        record = _live_record(archive, "live")
        if said is None or record is None:
            return Outcome(note=f"no live verdict (exit {launch.returncode})")
        incident = record.get("incident")
        landed = launch.landed_ns(incident) if incident else None
        kind = str(record.get("kind"))
        return Outcome(
            seconds=_since(said[0], mark_ns),
            incident_s=_since(landed, mark_ns),
            culprits=list(record.get("culprit_ranks") or []),
            kind=kind,
            note="" if incident else "no incident declared",
        )

    def old(self, family: Family) -> Outcome:
        job = "old"
        launch, archive, mark_ns = self._run(family, {"FR_OTEL_LIVE": "0"}, job)
        if mark_ns is None:
            return Outcome(note=f"the fault never came: {launch.why()}")
        landed = {incident: launch.landed_ns(incident) for incident in launch.files}
        if not landed:
            return Outcome(note=f"no incident archived (exit {launch.returncode})")
        incident = min(landed, key=lambda name: landed[name] or 0)
        began = time.perf_counter()
        analyze = [*FR_OTEL, "analyze", str(archive), "--job", job, "--incident", incident]
        done = subprocess.run(
            [*analyze, "--format", "json"],
            env=_environment({}),
            capture_output=True,
            text=True,
            timeout=300,
        )
        took = time.perf_counter() - began
        try:
            analysis = json.loads(done.stdout)
        except json.JSONDecodeError:
            return Outcome(note=f"analyze exited {done.returncode}: {done.stderr[-200:]}")
        root = analysis.get("root_cause")
        finding = analysis["findings"][root] if root is not None else None
        return Outcome(
            incident_s=_since(landed[incident], mark_ns),
            analyze_s=took,
            culprits=finding["culprit_ranks"] if finding else None,
            kind=finding["kind"] if finding else None,
            note="" if finding else "analyze names no root cause",
        )

    def detail(self, family: Family) -> Outcome:
        launch, _, mark_ns = self._run(family, {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, None)
        if mark_ns is None:
            return Outcome(note=f"the fault never came: {launch.why()}")
        error = launch.first(ERROR_LINE, mark_ns)
        if error is None:
            return Outcome(note=f"no error (exit {launch.returncode})")
        # the line that says what went wrong: the traceback's last line, where it has one
        said = next(
            (
                text
                for _, text in launch.lines
                if re.match(r"^(\[rank\d+\]: )?[\w.]+(Error|Exception):", text)
                or "terminate called" in text
            ),
            error[1],
        )
        # DETAIL names a rank only where its monitored barrier found one missing (a hang);
        # a mismatch's message says that two ranks differ, not which is at fault
        named = next(filter(None, (BARRIER.search(text) for _, text in launch.lines)), None)
        return Outcome(
            seconds=_since(error[0], mark_ns),
            culprits=[int(r) for r in named.group(1).split(",")] if named else None,
            note=said.strip(),
        )

    def ddp(self, mode: str, sync: str) -> tuple[float | None, str]:
        """Steps per second of the DDP loop in ``mode``; or None and why not."""
        self.count += 1
        result = self.tmp / f"ddp-{self.count}"
        command = torchrun(self.tmp / "ddp_steps.py", DDP_WORLD)
        env = {
            "WARMUP": "20",
            "STEPS": str(self.args.ddp_steps),
            "RESULT": str(result),
            "SYNC": sync,
        }
        if mode == "DETAIL":
            env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        if mode == "fr-otel run":
            archive = self.tmp / f"archive-{self.count}"
            command = [*FR_OTEL, "run", "--job", "ddp", "--archive", str(archive), "--", *command]
        launch = _launch(command, _environment(env), 600)
        if result.exists():
            return float(result.read_text()), ""
        return None, launch.why()


def _figure(values: list[float | None]) -> str:
    """Median and range of the runs' seconds; ``-`` for a run without one."""
    got = sorted(v for v in values if v is not None)
    missing = len(values) - len(got)
    if not got:
        return "-"
    text = f"{statistics.median(got):.1f}"
    if len(got) > 1:
        text += f" ({got[0]:.1f}-{got[-1]:.1f})"
    return text + (f" +{missing} none" if missing else "")


def _old_total(outcome: Outcome) -> float | None:
    if outcome.incident_s is None or outcome.analyze_s is None:
        return None
    return outcome.incident_s + outcome.analyze_s


def _culprits(outcomes: list[Outcome], culprit: int) -> str:
    """Per run: ``yes``, ``WRONG [ranks]`` or ``none``."""
    words = []
    for outcome in outcomes:
        if outcome.culprits is None:
            words.append("none")
        elif outcome.culprits == [culprit]:
            words.append("yes")
        else:
            words.append(f"WRONG {outcome.culprits}")
    return ",".join(words)


def report(results: list[Result], args: argparse.Namespace) -> None:
    head = (
        "family",
        "live verdict s",
        "incident in archive s",
        "old way (timeout + analyze) s",
        "DETAIL error s",
        "right culprit? live / old / DETAIL",
    )
    rows = []
    for result in results:
        culprit = result.family.culprit
        rows.append(
            (
                result.family.name,
                _figure([o.seconds for o in result.live]),
                _figure([o.incident_s for o in result.live]),
                _figure([_old_total(o) for o in result.old]),
                _figure([o.seconds for o in result.detail]),
                " / ".join(
                    _culprits(outcomes, culprit)
                    for outcomes in (result.live, result.old, result.detail)
                ),
            )
        )
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    for row in [head, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    print(
        f"(seconds after the fault mark, median (range) of {args.repeats} runs; group timeout"
        f" {args.timeout} s for every group: NCCL's default is 600 s, and the old way scales"
        " with it; the stuck rank's live figure is its stall suspect, threshold"
        f" FR_OTEL_LIVE_STALL_S={args.stall_s:g} s)"
    )
    for result in results:
        print(f"{result.family.name} (culprit rank {result.family.culprit}):")
        for label, outcomes in (("live", result.live), ("old way", result.old)):
            for outcome in outcomes:
                parts = [f"kind {outcome.kind}", f"culprits {outcome.culprits}"]
                if outcome.seconds is not None:
                    parts.append(f"line {outcome.seconds:.2f} s")
                if outcome.incident_s is not None:
                    parts.append(f"incident {outcome.incident_s:.2f} s")
                if outcome.analyze_s is not None:
                    parts.append(f"analyze {outcome.analyze_s:.2f} s")
                if outcome.note:
                    parts.append(outcome.note)
                print(f"   {label:<8}" + "; ".join(parts))
        for outcome in result.detail:
            when = "-" if outcome.seconds is None else f"{outcome.seconds:.2f} s"
            print(f"   DETAIL  {when}: {outcome.note[:240]}")


def report_ddp(
    figures: dict[str, dict[str, list[tuple[float | None, str]]]], args: argparse.Namespace
) -> None:
    print(
        f"Overhead on a DDP loop ({DDP_WORLD} gloo ranks, {args.ddp_steps} steps of an MLP"
        f" 128-256-256-256-10 after 20 warm-up steps, {args.ddp_repeats} launches per mode,"
        " order rotated; steps/s, higher is better):"
    )
    for sync, modes in figures.items():
        what = (
            "DistributedDataParallel (3 buckets)"
            if sync == "ddp"
            else "the same buckets all_reduced by hand (no DDP)"
        )
        print(f"  {what}:")
        off = [value for value, _ in modes["off"]]
        got_off = [v for v in off if v is not None]
        for mode, runs in modes.items():
            values = [value for value, _ in runs]
            got = [v for v in values if v is not None]
            failed = [why for value, why in runs if value is None]
            line = f"   {mode:<12} "
            if got:
                line += f"{statistics.median(got):7.1f} steps/s"
                if len(got) > 1:
                    line += f" ({min(got):.1f}-{max(got):.1f})"
            ratios = [
                v / o - 1
                for v, o in zip(values, off, strict=True)
                if v is not None and o is not None
            ]
            if mode == "off" and len(got_off) > 1:
                spread = (max(got_off) - min(got_off)) / statistics.median(got_off) * 100
                line += f"  (spread of the off launches: {spread:.0f}% of their median)"
            elif mode != "off" and ratios:
                line += (
                    f"  {statistics.median(ratios) * 100:+.1f}% against off"
                    f" (repeats {min(ratios) * 100:+.1f}%..{max(ratios) * 100:+.1f}%)"
                )
            if failed:
                line += f"  !! {len(failed)} of {len(runs)} launches failed: {failed[0]}"
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"1 repeat of {', '.join(QUICK)}")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each family and way")
    parser.add_argument("--timeout", type=int, default=30, help="every group's timeout, s")
    parser.add_argument("--stall-s", type=float, default=10.0, help="FR_OTEL_LIVE_STALL_S")
    parser.add_argument("--families", nargs="*", help="families by name (default: all)")
    parser.add_argument("--ddp-steps", type=int, default=1000, help="timed DDP steps a launch")
    parser.add_argument("--ddp-repeats", type=int, default=3, help="DDP launches per mode")
    args = parser.parse_args()
    names = args.families or (QUICK if args.quick else [f.name for f in FAMILIES])
    if args.quick:
        args.repeats, args.ddp_repeats, args.ddp_steps = 1, 1, 100
    families = [f for f in FAMILIES if f.name in names]
    started = time.perf_counter()
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)", flush=True)
    results = [Result(family=family) for family in families]
    modes = ("off", "DETAIL", "fr-otel run")
    syncs = ("ddp", "manual")
    ddp: dict[str, dict[str, list[tuple[float | None, str]]]] = {
        sync: {mode: [] for mode in modes} for sync in syncs
    }
    with tempfile.TemporaryDirectory(prefix="fr-otel-ttd-") as folder:
        bench = Bench(args, Path(folder))
        for _ in range(args.repeats):
            for result in results:
                print(f"[{time.perf_counter() - started:5.0f} s] {result.family.name}", flush=True)
                result.live.append(bench.live(result.family))
                result.old.append(bench.old(result.family))
                result.detail.append(bench.detail(result.family))
        for repeat in range(args.ddp_repeats):
            print(f"[{time.perf_counter() - started:5.0f} s] DDP launches", flush=True)
            for i in range(len(modes)):
                mode = modes[(i + repeat) % len(modes)]
                for sync in syncs:
                    ddp[sync][mode].append(bench.ddp(mode, sync))
    print()
    report(results, args)
    report_ddp(ddp, args)
    print(
        f"(whole benchmark: {time.perf_counter() - started:.0f} s; load average at the end"
        f" {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
