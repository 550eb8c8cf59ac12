"""Recorder overhead on two workloads (a tight all_reduce loop, DDP steps), and its flush.

Each workload runs without the recorder, in incident and in continuous mode: a tight
all_reduce loop, and DDP training steps of a small MLP. Also the flush of a full
20,000-entry ring beside torch's own FR dump.

In one run, with a real OTLP receiver (``tests/otlp_receiver.py``, HTTP, loopback) in this
process and every rank a separate process on this machine (``--workload allreduce``, ``ddp``
or ``all``, the default):

1. End to end (the headline figure): 2 gloo ranks run ``--calls`` ``all_reduce`` of 4
   float32 each (after a warm-up that starts the recorder, a ``gc.collect()`` in every
   mode, and in continuous mode the export threads' first pass, whose one-time CPU is
   printed apart), with no recorder, with
   ``fr_otel.install(mode="incident")`` and with ``mode="continuous"`` (spans exported
   to the receiver at the default ``FR_OTEL_EXPORT_INTERVAL``). Each (mode, repeat) is
   its own 2-rank launch; the repeats rotate the order of the modes so that each mode
   runs once in each position.
   Reported: the median per-call wall time of each mode, the slowdown against ``off``
   within each repeat (median and range of those ratios), and CPU per call: the training
   thread's, the whole process's, the recorder's threads' (every Python thread but the
   main one: the benchmark starts none), and in continuous mode the export threads'
   (those only continuous mode starts) per span sent during the loop. Launches differ from
   each other by tens of percent on a small machine, so the spread of ``off`` is printed:
   it is what this figure can resolve.
   Every mode runs with torch's own Flight Recorder at its default size (the launches
   drop ``TORCH_FR_*`` and ``TORCH_NCCL_*`` from the environment, and ``install()`` leaves
   the size alone): what torch's FR costs is in ``off`` too, not in the recorder's figure.
   Continuous mode is checked to have really
   exported: spans that reached the receiver against the collectives the ranks issued
   (torch's own count, ``_get_sequence_number_for_group`` of the default group), and the
   recorder's ``spans_sent`` / ``spans_dropped`` / ``recorder_errors`` after ``close()``.
   The receiver decodes every request in this process, on the same cores as the ranks (a
   real Collector runs elsewhere): its CPU per span is printed too.
2. Paired, in one 2-rank job with the recorder installed (incident mode): rounds of
   blocks that call the original ``all_reduce`` (``__wrapped__``), a do-nothing Python
   wrapper around it (the control: what any extra Python frame costs), the recorder's
   wrapper as installed (the compiled one where it was built) and, beside it, the Python
   wrapper writing the same ring, the order rotated every round. Same processes, same
   sockets, same moment: no launch-to-launch noise. Reported: per-round differences
   against the original, wall and training-thread CPU, median and interquartile range;
   and the recorder's threads' CPU over the rounds, per call. (A recorder that also takes
   what its hooks missed from torch's FR does so here for the original and plain arms'
   calls, which bypass the hooks as no real job's calls do: its threads' CPU includes it.)
3. The recorder's own cost, precisely, in a world-1 gloo job: the recorder's wrappers
   (compiled ``_fasthook``, and the Python ``Capture._wrapper``: the code ``install()``
   puts in front of every collective, writing real ring slots) around a no-op with
   ``all_reduce``'s signature, against the no-op alone: µs per call with warm caches, and
   as a share of the ``off`` all_reduce.
4. Flush: the same world-1 job fills a ``buffer_size=20000`` ring (20,500 calls), then
   ``recorder.declare("operator")`` flushes it synchronously (Parquet archive, OTLP to
   the receiver, raw FR dump). Printed: ``declare``'s wall time, the ``FlushReport``
   (whose ``elapsed_s`` leaves out the raw FR dump taken before it starts), beside the
   5 s flush deadline; the peer: ``torch._C._distributed_c10d._dump_fr_trace`` of the
   same process with stack traces (FR's default dump) and without.
5. DDP end to end: part 1's launches (same modes, repeats, rotation, receiver, checks) with
   ``--steps`` training steps per launch instead of the all_reduce loop: a
   ``DistributedDataParallel`` MLP of four ``Linear`` layers (``DDP_WIDTHS``,
   ``bucket_cap_mb=DDP_BUCKET_CAP_MB``: three gradient buckets once DDP has rebuilt them
   after its first step; the count is printed), SGD, synthetic batches made in each rank,
   one intra-op thread per rank (torchrun's ``OMP_NUM_THREADS=1``), after
   ``DDP_WARMUP`` warm-up steps. DDP's bucket all-reduces come from its C++ reducer, not
   from ``torch.distributed``'s Python functions; whatever the recorder does to see them
   (threads of its own included) is in these figures, and the collectives issued are
   torch's count, not the recorder's.
6. DDP paired, in one 2-rank job with the recorder installed (incident mode): rounds of
   blocks of DDP steps of one model in two arms, the order rotated every round: ``plain``,
   with ``torch.distributed``'s functions as torch ships them (the recorder's patches swapped
   out for the block), and ``recorder``, as installed; plus the recorder's threads' CPU
   over all the rounds (they run whatever the arm), per step.
7. The same in continuous mode: the recorder's threads then include the export threads,
   measured over the rounds' steady stream of steps rather than per span in part 5's short
   loops (the spans of what only torch's FR saw leave in bursts, when the recorder reads
   it).

Goals: at most 3% slower in continuous mode, 1% in incident mode; the flush of a
full buffer within the 5 s deadline. On a small machine launches differ by more than the
goals, in wall time and in CPU per call, so the verdict is the CPU the recorder adds per
call or step where one run resolves it: the paired job's training-thread difference and
recorder threads (parts 2, 6 and 7); for the all_reduce loop, whose paired job runs in
incident mode only, continuous mode adds the export threads (part 1: those only
continuous mode starts, their CPU per span sent times the collectives issued per call).
For the all_reduce loop it is a share of the ``off`` all_reduce's wall time; for DDP a
share of the peer's CPU per step: the paired job's whole process over its rounds, per rank,
less the recorder's threads (the same job without them, measured in the same minutes as
they were: this machine's speed drifts by tens of percent between parts), printed beside
ours and beside part 5's ``off`` launches. The launch-to-launch figures are printed beside
it. Whether one run resolves the verdict is judged over the 95% confidence interval of
the training thread's median paired difference (order statistics; it narrows as rounds
are added, which the rounds' interquartile range, also printed, does not). Torch's FR is
on in every arm of a paired job (it is process-wide): what its C++
recording costs shows only in the launch-to-launch figures.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import itertools
import json
import math
import os
import pickle
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODES = ("off", "incident", "continuous")
GOALS = {"incident": 1.0, "continuous": 3.0}
DEADLINE_S = 5.0
WARMUP = 200
"""Warm-up all_reduce calls (the all_reduce workload)."""
DDP_WIDTHS = (128, 256, 256, 256, 10)
"""The MLP's layer widths: four ``Linear`` layers, 167,178 parameters (653 KiB)."""
DDP_BATCH = 32
DDP_BATCHES = 16
"""Synthetic batches each rank makes once and cycles through."""
DDP_BUCKET_CAP_MB = 0.25
"""Gives three gradient buckets (267, 257 and 129 KiB) once DDP rebuilds them."""
DDP_WARMUP = 20
"""Warm-up steps (DDP rebuilds its buckets after the first)."""
RESULT = "RESULT "
_SCRUB = ("FR_OTEL_", "OTEL_", "TORCH_FR_", "TORCH_NCCL_")
"""Variables the parent's environment may hold that would change what a rank does."""


# --- inside a rank ----------------------------------------------------------------------


def _install(config: dict[str, Any]) -> Any:
    if config["mode"] == "off":
        return None
    import fr_otel
    from fr_otel.config import otlp_settings

    return fr_otel.install(
        mode=config["mode"],
        archive=config["archive"],
        job=config["job"],
        buffer_size=config.get("buffer_size", 20_000),
        otlp=otlp_settings(config["endpoint"], "http/protobuf"),
    )


def _settle() -> None:
    """Let the recorder's start-up import thread finish before anything is timed."""
    for thread in threading.enumerate():
        if thread.name == "fr_otel-preload":
            thread.join()


class _Threads:
    """CPU clocks of the recorder's threads: every Python thread but the main one (the
    benchmark starts none in these jobs), whatever its name, looked for again at each
    ``read`` so that a thread started since the last one counts too (its clock starts at
    zero with it). A thread that ended keeps its last reading."""

    def __init__(self) -> None:
        self._clocks: dict[threading.Thread, list[Any]] = {}

    def read(self) -> dict[str, float]:
        """CPU seconds so far, by thread name (threads of one name added up)."""
        main = threading.main_thread()
        for thread in threading.enumerate():
            if thread is main or thread.ident is None or thread in self._clocks:
                continue
            with contextlib.suppress(OSError):  # it ended in between
                self._clocks[thread] = [thread.name, time.pthread_getcpuclockid(thread.ident), 0.0]
        totals: dict[str, float] = {}
        for entry in self._clocks.values():
            with contextlib.suppress(OSError):  # ended: its last reading stands
                entry[2] = time.clock_gettime(entry[1])
            totals[entry[0]] = totals.get(entry[0], 0.0) + entry[2]
        return totals

    @staticmethod
    def since(now: dict[str, float], before: dict[str, float]) -> dict[str, float]:
        return {name: value - before.get(name, 0.0) for name, value in now.items()}


def _issued() -> int:
    """Collectives the default group has run so far, by torch's own count (DDP's included)."""
    from torch.distributed import distributed_c10d as c10d

    return int(c10d._get_default_group()._get_sequence_number_for_group())


def _mirror(recorder: Any) -> dict[str, float]:
    """The recorder's counters of its reads of torch's FR, where it keeps them (none, or
    ``mirror_stats``: reads, entries mirrored, seconds spent reading), for the printout."""
    stats = getattr(recorder, "mirror_stats", None) if recorder is not None else None
    values = getattr(stats, "__dict__", {})
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float)}


def _ddp_step(config: dict[str, Any]) -> tuple[Callable[[], None], dict[str, Any]]:
    """One training step of a small MLP under DDP, and what DDP says of its buckets."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    # torchrun's default with several ranks per host (OMP_NUM_THREADS=1): 2 ranks of 2
    # intra-op threads each on 2 cores spin against each other (measured: a step took 16x
    # the wall time and 23x the CPU)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise(DDP_WIDTHS):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    model = DistributedDataParallel(nn.Sequential(*layers[:-1]), bucket_cap_mb=DDP_BUCKET_CAP_MB)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()
    generator = torch.Generator().manual_seed(1 + dist.get_rank())  # each rank its own shard
    batches = itertools.cycle(
        [
            (
                torch.randn(DDP_BATCH, DDP_WIDTHS[0], generator=generator),
                torch.randn(DDP_BATCH, DDP_WIDTHS[-1], generator=generator),
            )
            for _ in range(DDP_BATCHES)
        ]
    )

    def step() -> None:
        inputs, targets = next(batches)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(inputs), targets).backward()
        optimizer.step()

    def buckets() -> dict[str, Any]:
        data = model._get_ddp_logging_data()
        sizes = str(data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or "")
        return {
            "buckets": [int(size) for size in sizes.split(",") if size.strip()],
            "parameters": sum(p.numel() for p in model.parameters()),
        }

    return step, {"describe": buckets}


def _workload(config: dict[str, Any]) -> tuple[Callable[[], Any], dict[str, Any]]:
    """The timed unit of ``config["workload"]`` (a call with no arguments), and extras."""
    if config["workload"] == "ddp":
        return _ddp_step(config)
    import torch
    import torch.distributed as dist

    tensor = torch.zeros(4)
    # a partial adds no Python frame: the recorder sees the timing loop as the call site
    return functools.partial(dist.all_reduce, tensor), {"tensor": tensor}


def _first_pass(recorder: Any, timeout_s: float = 30.0) -> None:
    """In continuous mode, wait for the export threads' first pass (their first encoding,
    a one-time cost) to be done: until a span was sent."""
    if recorder is None or recorder.settings.mode != "continuous":
        return
    deadline = time.monotonic() + timeout_s
    while recorder.streamed_spans == 0 and time.monotonic() < deadline:
        time.sleep(0.05)


def _caught_up(recorder: Any) -> None:
    """Steady state for the FR mirror too: the warm-up's collectives read from torch's FR
    now (a one-time backlog, reported with the start-up), so reads inside the measured
    loop come at the mirror's own pace."""
    read = getattr(recorder, "read_torch_fr", None)
    if read is not None:
        read()


def _end_to_end(config: dict[str, Any]) -> dict[str, Any]:
    import torch.distributed as dist

    from fr_otel import recorder as recorder_module

    recorder = _install(config)
    dist.init_process_group("gloo")
    step, extras = _workload(config)
    for _ in range(config["warmup"]):
        step()
    # a collective every version of the recorder sees through its hooks: its threads run
    # by now, whatever else it records (DDP's steps issue nothing from Python)
    dist.barrier()
    _settle()
    threads = _Threads()
    streamed = (lambda: recorder.streamed_spans) if recorder is not None else (lambda: 0)
    # Steady state, in every mode: the start-up's garbage collected (a full collection in
    # a torch process takes ~80 ms, and whichever thread allocates next pays it), and in
    # continuous mode the export threads' first pass (their first encoding) done; that
    # one-time CPU is reported apart
    gc.collect()
    _first_pass(recorder)
    _caught_up(recorder)
    startup = threads.read()
    units = config["units"]
    dist.barrier()
    threads0, thread0, process0 = threads.read(), time.thread_time(), time.process_time()
    streamed0, issued0, mirror0 = streamed(), _issued(), _mirror(recorder)
    start = time.perf_counter()
    for _ in range(units):
        step()
    wall = time.perf_counter() - start
    thread, process = time.thread_time() - thread0, time.process_time() - process0
    in_loop = _Threads.since(threads.read(), threads0)
    issued_in_loop = _issued() - issued0
    streamed_in_loop = streamed() - streamed0
    mirror = {k: v - mirror0.get(k, 0.0) for k, v in _mirror(recorder).items()}
    dist.barrier()
    result: dict[str, Any] = {
        "rank": dist.get_rank(),
        "wall_us": wall / units * 1e6,
        "thread_cpu_us": thread / units * 1e6,
        "process_cpu_us": process / units * 1e6,
        "threads_s": in_loop,
        "threads_startup_s": startup,
        "mirror_in_loop": mirror,
        "issued_in_loop": issued_in_loop,
        "streamed_in_loop": streamed_in_loop,
        "issued": _issued(),
    }
    if "describe" in extras:
        result.update(extras["describe"]())
    if recorder is not None:
        recorder_module.uninstall()  # close(): the last export pass, then the counters
        stats = recorder.stats
        result.update(
            spans_sent=stats.spans_sent,
            spans_spooled=stats.spans_spooled,
            spans_dropped=stats.spans_dropped,
            recorder_errors=stats.recorder_errors,
        )
    dist.destroy_process_group()
    return result


_Arm = tuple[Callable[[], Any], Callable[[], Any]]
"""(the timed unit, a context manager factory the arm's blocks run in)."""


def _allreduce_arms(recorder: Any, tensor: Any) -> dict[str, _Arm]:
    """The original all_reduce, a do-nothing Python wrapper, the recorder's wrapper as
    installed and, where that is the compiled one, the Python wrapper beside it."""
    import torch.distributed as dist

    from fr_otel.recorder.capture import SPECS, _Hook

    recorded = dist.all_reduce
    original = recorded.__wrapped__

    def plain(tensor: Any) -> Any:
        return original(tensor)

    functions = {"original": original, "plain": plain, "recorder": recorded}
    if recorder.capture.compiled:  # the Python wrapper too, writing the same ring
        functions["python"] = recorder.capture._wrapper(
            _Hook("all_reduce", SPECS["all_reduce"], original)
        )
    return {
        name: (functools.partial(function, tensor), contextlib.nullcontext)
        for name, function in functions.items()
    }


@contextlib.contextmanager
def _unhooked(recorder: Any) -> Any:
    """``torch.distributed`` as torch ships it for the block: the recorder's patches
    swapped out (its threads, and torch's FR, keep running)."""
    patched = list(recorder.capture._patched)  # (module, name, torch's original)
    installed = [(module, name, getattr(module, name)) for module, name, _ in patched]
    for module, name, original in patched:
        setattr(module, name, original)
    try:
        yield
    finally:
        for module, name, wrapper in installed:
            setattr(module, name, wrapper)


def _paired(config: dict[str, Any]) -> dict[str, Any]:
    import torch.distributed as dist

    from fr_otel import recorder as recorder_module

    recorder = _install(config)
    dist.init_process_group("gloo")
    step, extras = _workload(config)
    arms: dict[str, _Arm]
    if config["workload"] == "ddp":
        # one model, one optimizer: the arms differ only in what the recorder puts on the
        # training thread's path through torch.distributed's Python functions
        arms = {
            "plain": (step, lambda: _unhooked(recorder)),
            "recorder": (step, contextlib.nullcontext),
        }
    else:
        arms = _allreduce_arms(recorder, extras["tensor"])
    for unit, context in arms.values():
        with context():
            for _ in range(config["warmup"]):
                unit()
    dist.barrier()  # the recorder's threads run by now, whatever it records
    _settle()
    _first_pass(recorder)
    _caught_up(recorder)
    block = config["block"]
    wall: dict[str, list[float]] = {name: [] for name in arms}
    cpu: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    # the recorder's own threads (the watch, the store listener, in continuous mode the
    # export threads, whatever else it starts) run whatever the arm: their CPU over the
    # rounds is spread over every unit
    threads = _Threads()
    background0, window, mirror0 = threads.read(), time.perf_counter(), _mirror(recorder)
    process0 = time.process_time()
    for round_ in range(config["rounds"]):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            unit, context = arms[name]
            dist.barrier()
            with context():
                thread0, start = time.thread_time(), time.perf_counter()
                for _ in range(block):
                    unit()
                wall[name].append((time.perf_counter() - start) / block * 1e6)
                cpu[name].append((time.thread_time() - thread0) / block * 1e6)
    window = time.perf_counter() - window
    process_s = time.process_time() - process0
    mirror = {k: v - mirror0.get(k, 0.0) for k, v in _mirror(recorder).items()}
    units = config["rounds"] * len(names) * block
    background_us = {
        name: cpu_s / units * 1e6
        for name, cpu_s in _Threads.since(threads.read(), background0).items()
    }
    dist.barrier()
    recorder_module.uninstall()
    dist.destroy_process_group()
    return {
        "wall": wall,
        "cpu": cpu,
        "background_us": background_us,
        "process_us": process_s / units * 1e6,
        "window_s": window,
        "mirror": mirror,
    }


def _per_call(function: Any, tensor: Any, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        function(tensor)
    return (time.perf_counter() - start) / calls * 1e6


def _solo(config: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d_ext

    from fr_otel import recorder as recorder_module
    from fr_otel.recorder.capture import SPECS, _fast_hook_type, _Hook

    entries = config["buffer_size"]
    recorder = _install(config)
    dist.init_process_group("gloo")
    tensor = torch.zeros(4)
    for _ in range(WARMUP):
        dist.all_reduce(tensor)
    _settle()

    # (3) the recorder's wrapper around a no-op collective, against the no-op alone
    def noop(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> None:
        return None

    hooks = {"hooked": recorder.capture._wrapper(_Hook("all_reduce", SPECS["all_reduce"], noop))}
    fast_hook = _fast_hook_type()
    if fast_hook is not None:
        hooks["compiled"] = recorder.capture._compiled(
            fast_hook, _Hook("all_reduce", SPECS["all_reduce"], noop)
        )
    calls, blocks = config["micro_calls"], config["micro_blocks"]
    per_call: dict[str, list[float]] = {}

    def in_thread(function: Any) -> float:
        """Timed from a thread whose only user frame is ``_per_call``."""
        out: list[float] = []
        thread = threading.Thread(target=lambda: out.append(_per_call(function, tensor, calls)))
        thread.start()
        thread.join()
        return out[0]

    for _ in range(blocks):
        for name, function in (("noop", noop), *hooks.items()):
            per_call.setdefault(name, []).append(_per_call(function, tensor, calls))
            per_call.setdefault(f"{name}_thread", []).append(in_thread(function))

    # (4) fill the ring past its size with real collectives, then flush it
    for _ in range(entries + 500):
        dist.all_reduce(tensor)
    start = time.perf_counter()
    incident = recorder.declare("operator")
    declare_s = time.perf_counter() - start
    report = recorder.stats.flushes[-1] if recorder.stats.flushes else None
    fr: dict[str, Any] = {}
    for stacks in (True, False):
        start = time.perf_counter()
        data = c10d_ext._dump_fr_trace(
            includeCollectives=True, includeStackTraces=stacks, onlyActive=False
        )
        elapsed = time.perf_counter() - start
        fr[str(stacks)] = {
            "s": elapsed,
            "bytes": len(data),
            "entries": len(pickle.loads(data).get("entries", [])),
        }
    recorder_module.uninstall()
    dist.destroy_process_group()
    return {
        "rank": 0,
        "micro_us": per_call,
        "incident": incident,
        "declare_s": declare_s,
        "flush": None
        if report is None
        else {
            "elapsed_s": report.elapsed_s,
            "entries": report.entries,
            "spans_sent": report.spans_sent,
            "spans_spooled": report.spans_spooled,
            "problems": report.problems,
            "archived": report.archived is not None,
            "raw_dump": report.raw_dump is not None,
        },
        "fr": fr,
        "recorder_errors": recorder.stats.recorder_errors,
    }


def _worker(config: dict[str, Any]) -> None:
    kind = config["kind"]
    run = {"e2e": _end_to_end, "paired": _paired, "solo": _solo}[kind]
    print(RESULT + json.dumps(run(config)), flush=True)


# --- the parent: launches, receiver, report --------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _launch(config: dict[str, Any], world: int, logs: Path, timeout_s: float) -> list[dict]:
    """Start ``world`` ranks of this script as workers; their results, rank order."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(world))
    if config.get("run_id"):
        env["FR_OTEL_RUN_ID"] = config["run_id"]  # as fr-otel run sets it: the agent's key
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    for rank in range(world):
        out = (logs / f"rank{rank}.out").open("w")
        err = (logs / f"rank{rank}.err").open("w")
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--worker", json.dumps(config)],
                env={**env, "RANK": str(rank)},
                stdout=out,
                stderr=err,
                cwd=ROOT,
            )
        )
        out.close()
        err.close()
    deadline = time.monotonic() + timeout_s
    try:
        for proc in procs:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
            proc.wait()
        tails = "\n".join(
            f"rank {rank}: {(logs / f'rank{rank}.err').read_text()[-1500:]}"
            for rank in range(world)
        )
        raise SystemExit(f"{config['kind']} launch hung past {timeout_s:.0f}s:\n{tails}") from None
    results = []
    for rank, proc in enumerate(procs):
        lines = (logs / f"rank{rank}.out").read_text().splitlines()
        found = [json.loads(line[len(RESULT) :]) for line in lines if line.startswith(RESULT)]
        if proc.returncode != 0 or not found:
            tail = (logs / f"rank{rank}.err").read_text()[-3000:]
            raise SystemExit(f"rank {rank} of {config['kind']} exited {proc.returncode}:\n{tail}")
        results.append(found[0])
    return results


def _received_spans(receiver: Any, since: int) -> tuple[int, int]:
    """(spans accepted in requests ``since`` on, how many requests there are now)."""
    received = list(receiver.received)
    spans = sum(
        len(scope.spans)
        for item in received[since:]
        if item.answer == "ok" and item.request is not None
        for resource_spans in item.request.resource_spans
        for scope in resource_spans.scope_spans
    )
    return spans, len(received)


def _iqr(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    quartiles = statistics.quantiles(values, n=4, method="inclusive")
    return quartiles[0], quartiles[2]


def _median_ci(values: list[float]) -> tuple[float, float]:
    """A 95% confidence interval of the median of ``values``, from their order statistics
    (distribution-free: the rounds' differences are far from normal). Unlike the IQR,
    which says how far one round strays, it narrows as rounds are added."""
    ordered = sorted(values)
    n = len(ordered)
    half = 1.96 * math.sqrt(n) / 2
    # ranks n/2 - half and 1 + n/2 + half, outwards (1-based)
    low, high = math.floor(n / 2 - half) - 1, math.ceil(n / 2 + half)
    if low < 0 or high >= n:  # too few rounds to bound it: their whole range
        return ordered[0], ordered[-1]
    return ordered[low], ordered[high]


def _pct(value: float) -> str:
    return f"{value:+.1f}%"


def _spread(values: list[float]) -> float:
    """Range of ``values`` as a percentage of their median."""
    return (max(values) - min(values)) / statistics.median(values) * 100


@dataclass(frozen=True, kw_only=True)
class _Workload:
    """What the ranks of one workload run, and how the parent reports it."""

    name: str
    """``allreduce`` or ``ddp`` (the workers' ``config["workload"]``)."""
    unit: str
    """What one timed unit is called: ``call``, ``step``."""
    units: int
    """Timed units per end-to-end launch."""
    warmup: int
    what: str
    """The timed units, in words."""
    rounds: int
    block: int
    unit_s: float
    """A generous bound on one unit's wall time, for launch deadlines."""
    first: int
    """The number of its end-to-end part in the printout (the paired part is next)."""
    basis: str
    """What the verdict's shares are of: ``wall`` (an ``off`` unit's wall time) or ``cpu``
    (an ``off`` unit's CPU, the whole process's: the peer's CPU per step)."""

    def config(self, **fields: Any) -> dict[str, Any]:
        return {"workload": self.name, "warmup": self.warmup, **fields}


def _run_end_to_end(
    work: _Workload, args: argparse.Namespace, receiver: Any, tmp: Path
) -> dict[str, Any]:
    unit = work.unit
    print(
        f"{work.first}. end to end: 2 gloo ranks, {work.units:,} {work.what} per launch"
        f" (after {work.warmup} warm-up {unit}s), {args.repeats} launch(es) per mode,"
        " order rotated"
    )
    print(
        f"   {'launch':<8}{'mode':<12}{f'µs/{unit}':>9}{'thread CPU':>12}{'process CPU':>13}"
        f"{'rec. threads':>14}{'spans in':>10}{'issued':>8}  recorder counters"
    )
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    _, seen = _received_spans(receiver, 0)  # requests of the workloads before this one
    launch = 0
    threads_by_mode: dict[str, dict[str, list[float]]] = {mode: {} for mode in MODES[1:]}
    described: dict[str, Any] = {}
    for repeat in range(args.repeats):
        shift = repeat % len(MODES)
        for mode in MODES[shift:] + MODES[:shift]:
            launch += 1
            config = work.config(
                kind="e2e",
                mode=mode,
                units=work.units,
                archive=str(tmp / f"{work.name}-launch{launch}"),
                job=f"bench-{work.name}-{mode}-{launch}",
                endpoint=receiver.endpoint,
            )
            parent_cpu = time.process_time()
            logs = tmp / f"logs-{work.name}{launch}"
            ranks = _launch(config, 2, logs, work.units * work.unit_s + 180)
            parent_cpu = time.process_time() - parent_cpu
            spans, seen = _received_spans(receiver, seen)
            for r in ranks:
                for name, cpu_s in r["threads_s"].items():
                    us = cpu_s / work.units * 1e6
                    threads_by_mode.setdefault(mode, {}).setdefault(name, []).append(us)
            described.update(
                {key: ranks[0][key] for key in ("buckets", "parameters") if key in ranks[0]}
            )
            run = {
                "repeat": repeat,
                "wall_us": max(r["wall_us"] for r in ranks),
                "thread_cpu_us": statistics.mean(r["thread_cpu_us"] for r in ranks),
                "process_cpu_us": statistics.mean(r["process_cpu_us"] for r in ranks),
                "threads_us": statistics.mean(sum(r["threads_s"].values()) for r in ranks)
                / work.units
                * 1e6,
                "threads_s": [r["threads_s"] for r in ranks],
                "threads_startup_s": [r["threads_startup_s"] for r in ranks],
                "streamed_in_loop": sum(r["streamed_in_loop"] for r in ranks),
                "mirror": [r["mirror_in_loop"] for r in ranks],
                "issued_in_loop": sum(r["issued_in_loop"] for r in ranks),
                "issued": sum(r["issued"] for r in ranks),
                "received": spans,
                "spans_sent": sum(r.get("spans_sent", 0) for r in ranks),
                "spans_dropped": sum(r.get("spans_dropped", 0) for r in ranks),
                "spans_spooled": sum(r.get("spans_spooled", 0) for r in ranks),
                "recorder_errors": sum(r.get("recorder_errors", 0) for r in ranks),
                "receiver_cpu_s": parent_cpu,
            }
            runs[mode].append(run)
            counters = (
                ""
                if mode == "off"
                else f"sent {run['spans_sent']}, dropped {run['spans_dropped']},"
                f" spooled {run['spans_spooled']}, errors {run['recorder_errors']}"
            )
            print(
                f"   {launch:<8}{mode:<12}{run['wall_us']:9.1f}{run['thread_cpu_us']:12.1f}"
                f"{run['process_cpu_us']:13.1f}{run['threads_us']:14.1f}{spans:>10}"
                f"{run['issued']:>8}  {counters}",
                flush=True,
            )
    print(
        f"   (µs per {unit}; thread CPU: the calling thread; process CPU: all threads;"
        " rec. threads: every Python thread but the main one; all per rank; issued:"
        " collectives both ranks ran, by torch's count)"
    )
    print(
        f"   the recorder's threads, CPU per {unit} per rank over the loop (median of the"
        " launches): "
        + "; ".join(
            f"{mode} "
            + (
                ", ".join(
                    f"{name} {statistics.median(values):.2f} µs"
                    for name, values in sorted(threads.items())
                )
                or "none"
            )
            for mode, threads in threads_by_mode.items()
        )
    )

    off = [r["wall_us"] for r in runs["off"]]
    off_median = statistics.median(off)
    off_thread = statistics.median(r["thread_cpu_us"] for r in runs["off"])
    off_process_all = [r["process_cpu_us"] for r in runs["off"]]
    off_process = statistics.median(off_process_all)
    print(
        f"   off: median {off_median:.1f} µs/{unit}, launches {min(off):.1f}..{max(off):.1f}"
        f" (spread {_spread(off):.0f}% of the median: differences"
        " smaller than that are not resolved by this figure); CPU per"
        f" {unit} per rank: process {off_process:.1f} µs (launches"
        f" {min(off_process_all):.1f}..{max(off_process_all):.1f}, spread"
        f" {_spread(off_process_all):.0f}%), training thread {off_thread:.1f} µs"
    )
    per_unit = statistics.median(
        r["issued_in_loop"] / (2 * work.units) for runs_ in runs.values() for r in runs_
    )
    if described:
        buckets = described.get("buckets", [])
        print(
            f"   DDP: {described.get('parameters', 0):,} parameters in {len(buckets)} gradient"
            f" bucket(s) of {', '.join(f'{b / 1024:.0f}' for b in buckets)} KiB;"
            f" {per_unit:g} collective(s) per {unit} per rank (torch's count)"
        )
    basis = off_median if work.basis == "wall" else off_process
    summary: dict[str, Any] = {
        "off_us": off_median,
        "off_spread": _spread(off),
        "off_thread_us": off_thread,
        "off_process_us": off_process,
        "basis_us": basis,
        "spread": _spread(off) if work.basis == "wall" else _spread(off_process_all),
        "collectives_per_unit": per_unit,
    }
    for mode in MODES[1:]:
        walls = [r["wall_us"] for r in runs[mode]]
        ratios = [
            (run["wall_us"] / base["wall_us"] - 1) * 100
            for run, base in zip(runs[mode], runs["off"], strict=True)
        ]
        cpu_extra = statistics.median(r["thread_cpu_us"] for r in runs[mode]) - off_thread
        process_extra = statistics.median(r["process_cpu_us"] for r in runs[mode]) - off_process
        median_ratio = statistics.median(ratios)
        summary[mode] = {
            "ratio": median_ratio,
            "range": (min(ratios), max(ratios)),
            # the training thread's extra CPU, as a share of the basis (an all_reduce's
            # wall time; the peer's CPU per step)
            "cpu_pct": cpu_extra / basis * 100,
            "process_pct": process_extra / basis * 100,
            "process_us": statistics.median(r["process_cpu_us"] for r in runs[mode]),
            "threads_us": statistics.median(r["threads_us"] for r in runs[mode]),
        }
        print(
            f"   {mode}: median {statistics.median(walls):.1f} µs/{unit};"
            f" vs off in the same repeat {_pct(median_ratio)}"
            f" (repeats {_pct(min(ratios))}..{_pct(max(ratios))});"
            f" CPU per {unit} {cpu_extra:+.1f} µs training thread, {process_extra:+.1f} µs"
            " process"
        )
    cont = runs["continuous"]
    issued, received = sum(r["issued"] for r in cont), sum(r["received"] for r in cont)
    sent = sum(r["spans_sent"] for r in cont)
    dropped = sum(r["spans_dropped"] for r in cont)
    # the export threads: those only continuous mode starts (fr_otel-export, and whatever
    # else the recorder runs for it), found by name against the incident launches; their
    # CPU per span sent while the loop ran (not per unit: how many passes fall inside the
    # loop depends on FR_OTEL_EXPORT_INTERVAL), times the collectives a unit issues
    incident_names = {name for r in runs["incident"] for t in r["threads_s"] for name in t}
    export_names = sorted(
        {name for r in cont for t in r["threads_s"] for name in t} - incident_names
    )
    export_s = sum(t.get(name, 0.0) for r in cont for t in r["threads_s"] for name in export_names)
    streamed_in_loop = sum(r["streamed_in_loop"] for r in cont)
    export_us = export_s / max(streamed_in_loop, 1) * 1e6
    loop_unit_us = export_s / (2 * work.units * len(cont)) * 1e6
    export_unit_us = export_us * per_unit if streamed_in_loop else loop_unit_us
    receiver_us = sum(r["receiver_cpu_s"] for r in cont) / max(received, 1) * 1e6
    startup_ms = (
        statistics.median(
            statistics.mean(
                sum(t.get(name, 0.0) for name in export_names) for t in r["threads_startup_s"]
            )
            for r in cont
        )
        * 1e3
    )
    missing = issued - received
    per_span = f"{export_us:.1f} µs" if streamed_in_loop else "n/a"
    print(
        f"   continuous export: {received:,} of {issued:,} collectives issued reached the"
        f" receiver ({sent:,} counted sent, {dropped} dropped); CPU per span: export"
        f" thread(s) {per_span}, receiver {receiver_us:.1f} µs (this process,"
        f" decoding on the same cores); the export thread(s)' start-up and first pass,"
        f" before the loop: {startup_ms:.0f} ms CPU per rank, once; export threads:"
        f" {', '.join(export_names) or 'none found'}"
    )
    by_span = (
        f"{export_us:.1f} µs per span sent during the loops ({streamed_in_loop:,} of them) x"
        f" {per_unit:g} collective(s) per {unit}"
        if streamed_in_loop
        else "no span was sent during the loops"
    )
    print(
        f"   export thread(s) per {unit}: {export_unit_us:.1f} µs ({by_span});"
        f" {loop_unit_us:.1f} µs per {unit} over the loops"
    )
    mirrors = []
    for mode in MODES[1:]:
        found = [m for r in runs[mode] for m in r["mirror"] if m]
        if found:
            reads = "/".join(str(int(m.get("reads", 0))) for m in found)
            cost = statistics.mean(m.get("total_cost_s", 0.0) for m in found) * 1e3
            mirrored = statistics.mean(m.get("mirrored", 0.0) for m in found)
            missed = sum(m.get("missed", 0.0) for m in found)
            mirrors.append(
                f"{mode} {reads} read(s), {cost:.0f} ms reading, {mirrored:.0f} entries"
                f" mirrored (means), {missed:.0f} missed (in all)"
            )
    if mirrors:
        print(
            "   the recorder's reads of torch's FR during the loops (its mirror_stats), per"
            " rank and launch: " + "; ".join(mirrors)
        )
    if missing:
        print(
            f"   !! {missing} collective(s) never exported and not counted as dropped"
            f" ({missing / len(cont) / 2:.1f} per rank per launch)"
        )
    summary["missing"] = missing
    summary["issued_continuous"] = issued
    summary["export_us"] = export_us
    summary["export_unit_us"] = export_unit_us
    return summary


def _start_agent(config: dict[str, Any]) -> Any:
    """The live check's node agent over the job's rings, as ``fr-otel run`` starts it."""
    from fr_otel.config import LiveSettings, recorder_settings
    from fr_otel.live.agent import LiveCheck

    settings = recorder_settings(
        {"archive": Path(config["archive"]), "job": config["job"], "run_id": config["run_id"]},
        environ={},
    )
    agent = LiveCheck(
        settings=settings,
        live=LiveSettings(),
        on_verdict=lambda verdict: print(f"   live check: {verdict.line()}"),
        on_notice=lambda text: print(f"   live check: {text}"),
        end_job=lambda: None,
    )
    agent.start()
    return agent


def _thread_cpu_s(native_id: int | None) -> float:
    """A thread of this process's CPU (user and system) from ``/proc``."""
    if native_id is None:
        return 0.0
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop_agent(agent: Any) -> dict[str, Any]:
    cpu = _thread_cpu_s(agent.native_id)  # before its last look at the ended job's rings
    agent.stop(60.0)
    return {
        "cpu_s": cpu - agent.preload_cpu_s,
        "preload_s": agent.preload_cpu_s,
        "looks": agent.looks,
        "bytes": agent.bytes_read,
        "confirmations": agent.confirmations,
    }


def _run_paired(work: _Workload, receiver: Any, tmp: Path, mode: str, part: int) -> dict[str, Any]:
    unit = work.unit
    config = work.config(
        kind="paired",
        mode=mode,
        rounds=work.rounds,
        block=work.block,
        archive=str(tmp / f"{work.name}-paired-{mode}"),
        job=f"bench-{work.name}-paired-{mode}",
        run_id=f"bench-{work.name}-paired-{mode}-{os.getpid()}",
        endpoint=receiver.endpoint,
    )
    units = work.rounds * 4 * work.block
    logs = tmp / f"logs-{work.name}-paired-{mode}"
    # incident mode is what fr-otel run runs by default, with its live check's node agent
    # beside the ranks: the agent runs here, reading the ranks' rings, as it would there
    agent = _start_agent(config) if mode == "incident" else None
    try:
        ranks = _launch(config, 2, logs, units * work.unit_s + 180)
    finally:
        agent_cost = _stop_agent(agent) if agent is not None else None
    names = list(ranks[0]["wall"])
    reference = names[0]
    print(
        f"{part}. paired, one 2-rank job with the recorder installed ({mode}):"
        f" {work.rounds} rounds x {len(names)} arms x {work.block} {work.what},"
        " arm order rotated each round"
    )
    walls = {
        name: [max(values) for values in zip(*(r["wall"][name] for r in ranks), strict=True)]
        for name in names
    }
    cpus = {
        name: [
            statistics.mean(values) for values in zip(*(r["cpu"][name] for r in ranks), strict=True)
        ]
        for name in names
    }
    if work.name == "ddp":
        labels = {"plain": "plain (hooks out)", "recorder": "recorder (installed)"}
    else:
        compiled = "python" in names
        labels = {
            "original": "original all_reduce",
            "plain": "plain Python wrapper",
            "recorder": "recorder (compiled)" if compiled else "recorder's wrapper",
        }
        if compiled:
            labels["python"] = "recorder (Python)"
    print(
        f"   {'':24}{f'µs/{unit}':>9}{f'vs {reference} (IQR)':>32}{'thread CPU':>12}"
        f"{f'vs {reference}':>13}"
    )
    result: dict[str, Any] = {}
    for name, label in labels.items():
        wall, cpu = walls[name], cpus[name]
        diffs = [(w / o - 1) * 100 for w, o in zip(wall, walls[reference], strict=True)]
        cpu_diffs = [c - o for c, o in zip(cpu, cpus[reference], strict=True)]
        low, high = _iqr(diffs)
        versus = (
            ""
            if name == reference
            else f"{_pct(statistics.median(diffs))} ({_pct(low)}..{_pct(high)})"
        )
        cpu_versus = "" if name == reference else f"{statistics.median(cpu_diffs):+.1f} µs"
        print(
            f"   {label:<24}{statistics.median(wall):9.1f}{versus:>32}"
            f"{statistics.median(cpu):12.1f}{cpu_versus:>13}"
        )
        result[name] = {
            "wall": statistics.median(wall),
            "ratio": statistics.median(diffs),
            "cpu_extra": statistics.median(cpu_diffs),
            "cpu_iqr": _iqr(cpu_diffs),
            "cpu_ci": _median_ci(cpu_diffs),
            "rounds": len(cpu_diffs),
        }
    threads = {
        name: statistics.mean(r["background_us"].get(name, 0.0) for r in ranks)
        for name in sorted({name for r in ranks for name in r["background_us"]})
    }
    result["background_us"] = sum(threads.values())
    result["threads_us"] = threads
    # the job without the recorder's threads, over the same rounds: the basis that drifts
    # with the machine as the recorder's own figures do (part 5's launches run minutes
    # apart, and this machine's speed moved by 45% between them and a paired job)
    result["peer_us"] = statistics.mean(r["process_us"] for r in ranks) - result["background_us"]
    print(
        f"   the recorder's threads, CPU per {unit} per rank over the rounds"
        f" ({statistics.mean(r['window_s'] for r in ranks):.1f} s): "
        + (", ".join(f"{name} {us:.2f} µs" for name, us in threads.items()) or "none found")
    )
    if agent_cost is not None:
        # every arm's units: the agent cannot tell the arms apart, and looks at all of them
        per_unit = agent_cost["cpu_s"] / (work.rounds * len(names) * work.block * 2) * 1e6
        result["agent_us"] = per_unit
        combined = result["recorder"]["cpu_extra"] + result["background_us"] + per_unit
        print(
            "   the live check's node agent (fr-otel run's thread, here in this process,"
            f" reading the 2 ranks' rings): {agent_cost['cpu_s'] * 1e3:.0f} ms CPU over the"
            f" job after {agent_cost['preload_s'] * 1e3:.0f} ms once for its imports,"
            f" {per_unit:.2f} µs per {unit} per rank; {agent_cost['looks']} looks,"
            f" {agent_cost['bytes'] / 1e6:.1f} MB read from the rings"
            f" ({agent_cost['bytes'] / max(agent_cost['looks'], 1):.0f} bytes a look),"
            f" {agent_cost['confirmations']} analyses, 0 messages: the ranks do nothing for"
            f" it. Recorder (training thread and threads) and agent together:"
            f" {combined:+.1f} µs per {unit} per rank ="
            f" {combined / result['peer_us'] * 100:.2f}% of the peer's CPU per {unit}"
            + (
                ""
                if work.name == "ddp"
                else " (its threads read torch's FR for the reference arms' calls, which pass"
                " no hook: the verdict takes them from the incident launches)"
            )
        )
    mirrors = [r["mirror"] for r in ranks if r["mirror"]]
    if mirrors:
        print(
            "   the recorder's reads of torch's FR over the rounds (its mirror_stats), per"
            f" rank: {'/'.join(str(int(m.get('reads', 0))) for m in mirrors)} read(s),"
            f" {statistics.mean(m.get('total_cost_s', 0.0) for m in mirrors) * 1e3:.0f} ms"
            f" reading, {statistics.mean(m.get('mirrored', 0.0) for m in mirrors):.0f} entries"
            f" mirrored (means), {sum(m.get('missed', 0.0) for m in mirrors):.0f} missed (in all)"
        )
    return result


def _run_solo(args: argparse.Namespace, receiver: Any, tmp: Path) -> dict[str, Any]:
    config = {
        "kind": "solo",
        "mode": "incident",
        "buffer_size": args.entries,
        "micro_calls": 20_000,
        "micro_blocks": 5,
        "archive": str(tmp / "solo"),
        "job": "bench-flush",
        "endpoint": receiver.endpoint,
    }
    _, before = _received_spans(receiver, 0)
    (solo,) = _launch(config, 1, tmp / "logs-solo", 300)
    received, _ = _received_spans(receiver, before)
    solo["received"] = received
    return solo


def _report_solo(
    args: argparse.Namespace, solo: dict[str, Any], e2e: dict[str, Any], paired: dict[str, Any]
) -> None:
    """Parts 3 and 4: the recorder's own cost per call, and the flush."""
    off_us = e2e["off_us"]
    micro = {name: statistics.median(values) for name, values in solo["micro_us"].items()}
    blocks = len(solo["micro_us"]["noop"])
    print(
        "3. the recorder's own cost: its wrapper around a no-op collective against the no-op"
        f" alone, world-1 gloo job, warm caches, median of {blocks} blocks of 20,000 calls:"
    )
    wrappers = [("hooked", "Python wrapper")]
    if "compiled" in micro:
        wrappers.insert(0, ("compiled", "compiled wrapper"))
    for name, wrapper in wrappers:
        for label, suffix in (
            ("called from this script's stack", ""),
            ("called from a thread", "_thread"),
        ):
            own = micro[f"{name}{suffix}"] - micro[f"noop{suffix}"]
            label = f"{wrapper}, {label}"
            print(
                f"   {label:<50}{own:6.2f} µs/call = {own / off_us * 100:.2f}% of the off"
                f" all_reduce ({off_us:.0f} µs)"
            )
    cpu_extra = paired["recorder"]["cpu_extra"]
    print(
        f"   in the 2-rank job (part 2, cold caches): {cpu_extra:+.1f} µs of training-thread"
        f" CPU per call = {cpu_extra / off_us * 100:.1f}% of the off all_reduce"
    )

    flush = solo["flush"]
    fr_stacks, fr_plain = solo["fr"]["True"], solo["fr"]["False"]
    print(f"4. flush of a full {args.entries:,}-entry ring (world-1 gloo job, incident mode):")
    if flush is None:
        print(f"   !! declare() returned {solo['incident']!r} and recorded no flush")
    else:
        print(
            f"   fr_otel declare('operator'), whole flush      {solo['declare_s']:7.3f} s"
            "  (store agreement, raw FR dump, then the FlushReport's part)"
        )
        print(
            f"   FlushReport.elapsed_s                         {flush['elapsed_s']:7.3f} s"
            f"  ({flush['entries']:,} entries archived: {flush['archived']};"
            f" {flush['spans_sent']:,} spans sent, {solo['received']:,} received,"
            f" {flush['spans_spooled']} spooled; problems: {flush['problems'] or 'none'})"
        )
    print(
        f"   torch _dump_fr_trace(includeStackTraces=True)  {fr_stacks['s']:7.3f} s"
        f"  ({fr_stacks['entries']:,} entries, {fr_stacks['bytes'] / 1e6:.1f} MB; FR's default)"
    )
    print(
        f"   torch _dump_fr_trace(includeStackTraces=False) {fr_plain['s']:7.3f} s"
        f"  ({fr_plain['entries']:,} entries, {fr_plain['bytes'] / 1e6:.1f} MB)"
    )


def _verdicts(work: _Workload, e2e: dict[str, Any], paired: dict[str, dict[str, Any]]) -> None:
    """The goals, by the CPU the recorder adds per unit where one run resolves it.

    Wall time on this machine varies between launches by more than the goals, and so does
    a launch's CPU per unit, so the verdict is the CPU the recorder adds per unit where it
    is resolved: the training thread's extra CPU in the paired job of the mode (same
    processes, interleaved with the reference arm), plus the recorder's own threads there;
    where only an incident-mode paired job ran (the all_reduce loop), continuous mode adds
    the export threads' CPU per span sent end to end, times the collectives a unit issues
    (they share the cores). The launch-to-launch figures are printed beside it."""
    ddp = work.name == "ddp"
    for mode, goal in GOALS.items():
        job = paired.get(mode, paired["incident"])
        # DDP: the job's own CPU per step over the paired rounds, the recorder's threads
        # left out; the all_reduce loop: the off launches' all_reduce
        basis = job["peer_us"] if ddp else e2e["basis_us"]
        training, threads = job["recorder"]["cpu_extra"], job["background_us"]
        if not ddp:
            # the paired job's reference arms call all_reduce past the hooks, and the
            # recorder rightly reads those calls from torch's FR: its threads are taken
            # from the incident launches instead, where every call is hooked as in a job
            threads = e2e["incident"]["threads_us"]
        low_cpu, high_cpu = job["recorder"]["cpu_iqr"]
        ci_low, ci_high = job["recorder"]["cpu_ci"]
        ratio = e2e[mode]["ratio"]
        low, high = e2e[mode]["range"]
        # incident mode is fr-otel run's default: its live check's node agent counts too
        agent = job.get("agent_us", 0.0) if mode == "incident" else 0.0
        cpu_us = training + threads + agent
        parts = (
            f"training thread {training:+.1f} (IQR of the paired rounds {low_cpu:+.1f}.."
            f"{high_cpu:+.1f}), recorder threads {threads:+.1f} = {threads / basis * 100:.2f}%"
            + ("" if ddp else " in the incident launches")
            + (f", live check's agent {agent:+.1f}" if agent else "")
        )
        extra = ""
        if mode == "continuous":
            if mode in paired:
                # the threads only continuous mode starts, by name against incident mode's
                exported = sum(
                    us
                    for name, us in job["threads_us"].items()
                    if name not in paired["incident"]["threads_us"]
                )
                parts += f" (export threads {exported:+.1f} of it)"
            else:
                cpu_us += e2e["export_unit_us"]
                parts += f", export threads {e2e['export_unit_us']:+.1f}"
            if e2e["missing"]:
                extra = f"; {e2e['missing']} spans missing at the receiver"
        cpu_pct = cpu_us / basis * 100
        met = cpu_pct <= goal and not (mode == "continuous" and e2e["missing"])
        resolved = "resolved" if e2e["spread"] <= goal else "not resolved"
        verdict = "met" if met else "NOT met"
        # does the verdict hold across the 95% confidence interval of the training
        # thread's median paired difference? (the recorder's threads are measured over
        # every round: their CPU is a sum, not a sample)
        low_pct = (cpu_us - training + ci_low) / basis * 100
        high_pct = (cpu_us - training + ci_high) / basis * 100
        settled = "not resolved" if low_pct <= goal < high_pct else "resolved"
        verdict += (
            f" ({settled}: {low_pct:.2f}%..{high_pct:.2f}% across the 95% confidence interval"
            f" of the training thread's median paired difference, {ci_low:+.1f}..{ci_high:+.1f}"
            f" µs over {job['recorder']['rounds']} rounds)"
        )
        if not ddp:
            print(
                f"goal ({mode} <= {goal:.0f}% slower): {verdict} by CPU added"
                f" per call: {cpu_us:.1f} µs = {cpu_pct:.2f}% of an all_reduce ({parts});"
                f" across launches: training thread CPU {_pct(e2e[mode]['cpu_pct'])} of an"
                f" all_reduce, wall {_pct(ratio)} (repeats {_pct(low)}..{_pct(high)}),"
                f" {resolved} at this machine's {e2e['spread']:.0f}% launch spread{extra}"
            )
            continue
        print(
            f"goal (DDP step, {mode} <= {goal:.0f}% CPU added per step): {verdict}:"
            f" {cpu_us:+.1f} µs CPU per step per rank = {cpu_pct:.2f}% of the peer's"
            f" {basis:.1f} µs (the same job over the same rounds without the recorder's"
            f" threads; part 5's off launches: {e2e['basis_us']:.1f} µs), ours"
            f" {basis + cpu_us:.1f} µs ({parts}){extra}"
        )
        print(
            f"   across launches: process CPU {_pct(e2e[mode]['process_pct'])} of the peer's"
            f" (ours {e2e[mode]['process_us']:.1f} µs per step), training thread"
            f" {_pct(e2e[mode]['cpu_pct'])}, wall {_pct(ratio)} (repeats {_pct(low)}.."
            f"{_pct(high)}), {resolved} at this machine's {e2e['spread']:.0f}% launch spread"
            " of the peer's CPU per step"
        )
    if ddp and e2e["missing"]:
        print(
            f"   !! DDP: {e2e['missing']:,} of the {e2e['issued_continuous']:,} collectives"
            " the continuous launches issued never reached the receiver: what recording and"
            " exporting them would cost is not in these figures"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--workload",
        choices=("allreduce", "ddp", "all"),
        default="all",
        help="the tight all_reduce loop (parts 1-4), DDP training steps (5-7), or both",
    )
    parser.add_argument("--calls", type=int, default=10_000, help="all_reduce per launch")
    parser.add_argument("--repeats", type=int, default=3, help="launches per mode")
    parser.add_argument(
        "--rounds",
        type=int,
        default=96,
        help="rounds of the all_reduce paired job (at 24 the training thread's 95%% interval"
        " was 12.6 µs per call wide, over 1%% of an all_reduce; at 96, 4.3 µs)",
    )
    parser.add_argument("--block", type=int, default=400, help="calls per arm and round")
    parser.add_argument("--entries", type=int, default=20_000, help="ring size to flush")
    parser.add_argument("--steps", type=int, default=200, help="DDP steps per launch")
    parser.add_argument(
        "--ddp-rounds",
        type=int,
        default=1200,
        help="rounds of the DDP paired job: long enough for the FR mirror's reads, and"
        " to bound the training thread's median difference within the goals (at 400 the"
        " 95%% interval here was 60-75 µs per step wide, more than a 1%% goal; at 1,200,"
        " 11-16 µs: about 8 minutes for both modes)",
    )
    parser.add_argument("--ddp-block", type=int, default=20, help="DDP steps per arm and round")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(json.loads(args.worker))
        return

    sys.path.insert(0, str(ROOT))
    from tests.otlp_receiver import OtlpReceiver

    workloads = []
    if args.workload in ("allreduce", "all"):
        workloads.append(
            _Workload(
                name="allreduce",
                unit="call",
                units=args.calls,
                warmup=WARMUP,
                what="all_reduce of 4 float32",
                rounds=args.rounds,
                block=args.block,
                unit_s=0.02,
                first=1,
                basis="wall",
            )
        )
    if args.workload in ("ddp", "all"):
        mlp = "-".join(str(width) for width in DDP_WIDTHS)
        workloads.append(
            _Workload(
                name="ddp",
                unit="step",
                units=args.steps,
                warmup=DDP_WARMUP,
                what=f"DDP steps (MLP {mlp}, batch {DDP_BATCH}, SGD)",
                rounds=args.ddp_rounds,
                block=args.ddp_block,
                unit_s=0.2,
                first=5,
                basis="cpu",
            )
        )
    started = time.perf_counter()
    results = []
    receiver = OtlpReceiver(protocol="http").start()
    try:
        with tempfile.TemporaryDirectory(prefix="fr-otel-overhead-") as folder:
            tmp = Path(folder)
            for work in workloads:
                e2e = _run_end_to_end(work, args, receiver, tmp)
                # DDP: a paired job per mode (the spans of what only torch's FR saw leave
                # in bursts, when the recorder reads it: a per-span figure from a short
                # loop says little); the all_reduce loop: incident mode only
                modes = ("incident", "continuous") if work.name == "ddp" else ("incident",)
                paired = {
                    mode: _run_paired(work, receiver, tmp, mode, work.first + 1 + i)
                    for i, mode in enumerate(modes)
                }
                solo = _run_solo(args, receiver, tmp) if work.name == "allreduce" else None
                if solo is not None:
                    _report_solo(args, solo, e2e, paired["incident"])
                results.append((work, e2e, paired, solo))
    finally:
        receiver.stop()

    for work, e2e, paired, solo in results:
        _verdicts(work, e2e, paired)
        flush = solo["flush"] if solo is not None else None
        if solo is not None and flush is not None:
            ok = solo["declare_s"] <= DEADLINE_S and not flush["problems"]
            print(
                f"goal (flush of {args.entries:,} entries <= {DEADLINE_S:.0f} s deadline):"
                f" {'met' if ok else 'NOT met'} ({solo['declare_s']:.2f} s whole flush;"
                f" FR's default dump alone {solo['fr']['True']['s']:.2f} s)"
            )
    print(f"(whole benchmark: {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
