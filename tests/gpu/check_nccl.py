"""fr_otel's recorder on real NCCL: a check script for a machine with a GPU (not run in CI).

    python tests/gpu/check_nccl.py                      # every check, about a minute
    python tests/gpu/check_nccl.py --only recording,overhead --keep /tmp/frcheck

Every check runs in fresh processes (``install()`` and NCCL state must not leak from one
check to the next), as ranks of a world of 1 (NCCL refuses two ranks on one GPU), or of 2
when the machine has two GPUs. One ``PASS``/``FAIL``/``SKIP`` line per check, ``info``
lines for what is measured rather than asserted, ``fail`` lines for each problem. Exit
status: 0 when nothing failed, 1 when a check failed, 2 when there is no CUDA device (or
no torch) to run on. See tests/gpu/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
BACKEND = "nccl"
DEVICE = "cuda"
# Every NCCL op is recorded as queued; the incident flush takes its GPU-side state from
# torch's NCCL Flight Recorder (fr_otel.recorder.frmerge), so once the GPU has finished and
# FR's watchdog has seen it, the archived row reads completed, async or not.
BLOCKING_STATE = "completed"
"""What the recorder must say of a blocking collective: NCCL's call returns once queued."""
JOB = "gpucheck"
PG_TIMEOUT_S = 120
RESULT = "@@RESULT "
_STRIPPED_PREFIXES = ("FR_OTEL_", "OTEL_", "TORCH_FR_")
_STRIPPED = (
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_NCCL_DUMP_ON_TIMEOUT",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)
"""Settings of the calling shell that would change what the checks see."""


# --- inside a rank ---------------------------------------------------------------------------


class _Report:
    """What one rank found: ``expect`` collects problems, ``info`` prints what it measured."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def expect(self, ok: bool, problem: str) -> bool:
        if not ok:
            self.failures.append(problem)
        return ok

    def info(self, text: str) -> None:
        print(f"INFO {text}", flush=True)


def _line() -> int:
    """The caller's line: ``op(...)`` then ``lines[k] = _line() - 1`` names the op's line."""
    return sys._getframe(1).f_lineno


def _sync() -> None:
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()
        time.sleep(0.3)  # FR's watchdog discovers completions by polling the CUDA events


def _device() -> Any:
    import torch

    local = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
    if DEVICE == "cuda":
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def _init(backend: str | None = BACKEND, timeout_s: float = PG_TIMEOUT_S) -> tuple[Any, int]:
    """install() first (torch reads the FR variables it sets when a group is created)."""
    import torch.distributed as dist

    import fr_otel

    recorder = fr_otel.install()
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return recorder, dist.get_rank()


def _fr_dump_bytes() -> bytes:
    from torch._C import _distributed_c10d as ext

    for name in ("_dump_nccl_trace", "_dump_fr_trace"):
        dump = getattr(ext, name, None)
        if dump is not None:
            try:  # symbolising stack traces takes seconds
                return bytes(dump(includeStackTraces=False))
            except TypeError:
                return bytes(dump())
    raise RuntimeError("this torch has no Flight Recorder dump function")


def _wait(condition: Callable[[], Any], timeout_s: float) -> float | None:
    """Seconds until ``condition()`` held, or None if it did not within ``timeout_s``."""
    start = time.monotonic()
    while True:
        if condition():
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            return None
        time.sleep(0.02)


def _rows(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = pq.ParquetFile(path).read().to_pylist()
    return sorted(rows, key=lambda row: row["record_id"])


def _archived(recorder: Any, incident: str, rank: int) -> Path:
    from fr_otel.archive.layout import rank_file

    return rank_file(recorder.settings.archive, recorder.settings.job, incident, rank)


def _w_recording(rep: _Report) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from fr_otel.archive import import_dumps
    from fr_otel.recorder.flush import raw_dump_dir

    dev = _device()
    recorder, rank = _init()
    world = dist.get_world_size()
    timeout = datetime.timedelta(seconds=PG_TIMEOUT_S)
    sub = dist.new_group(list(range(world)), timeout=timeout, group_desc="check_sub")
    names = {"default": c10d._get_process_group_name(c10d._get_default_group())}
    names["sub"] = c10d._get_process_group_name(sub)
    lines: dict[str, int] = {}

    dist.all_reduce(torch.ones(1024, device=dev))
    lines["all_reduce"] = _line() - 1
    gathered = torch.empty(256 * world, dtype=torch.bfloat16, device=dev)
    dist.all_gather_into_tensor(gathered, torch.ones(256, dtype=torch.bfloat16, device=dev))
    lines["all_gather"] = _line() - 1
    scattered = torch.empty(128, dtype=torch.float16, device=dev)
    dist.reduce_scatter_tensor(scattered, torch.ones(128 * world, dtype=torch.float16, device=dev))
    lines["reduce_scatter"] = _line() - 1
    dist.broadcast(torch.arange(64, device=dev), src=0)
    lines["broadcast"] = _line() - 1
    if DEVICE == "cuda":
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time queued before the async op
    work = dist.all_reduce(torch.ones(2048, device=dev), async_op=True)
    lines["async"] = _line() - 1
    done_at_enqueue = work.is_completed()
    work.wait()
    _sync()
    gpu_done_ns = time.time_ns()
    dist.all_reduce(torch.ones(16, dtype=torch.float64, device=dev), group=sub)
    lines["sub"] = _line() - 1
    _sync()

    incident = recorder.declare("operator")
    if not rep.expect(incident is not None, "declare('operator') returned None"):
        return
    rep.info(f"incident {incident}")
    flush = recorder.stats.flushes[-1] if recorder.stats.flushes else None
    if not rep.expect(flush is not None, "no flush report after declare"):
        return
    rep.expect(flush.ok, f"flush problems: {flush.problems}")
    path = _archived(recorder, incident, rank)
    if not rep.expect(path.is_file(), f"no archive file {path}"):
        return
    rows = _rows(path)
    ranks = list(range(world))
    # key, op, group, seq, input sizes, output sizes, dtype, blocking
    expected = [
        ("all_reduce", "all_reduce", "default", 1, [[1024]], [[1024]], "Float", True),
        (
            "all_gather",
            "all_gather_into_tensor",
            "default",
            2,
            [[256]],
            [[256 * world]],
            "BFloat16",
            True,
        ),
        (
            "reduce_scatter",
            "reduce_scatter_tensor",
            "default",
            3,
            [[128 * world]],
            [[128]],
            "Half",
            True,
        ),
        ("broadcast", "broadcast", "default", 4, [[64]], [[64]], "Long", True),
        ("async", "all_reduce", "default", 5, [[2048]], [[2048]], "Float", False),
        ("sub", "all_reduce", "sub", 1, [[16]], [[16]], "Double", True),
    ]
    found: dict[str, dict[str, Any]] = {}
    for key, op, group, seq, ins, outs, dtype, blocking in expected:
        match = [
            r
            for r in rows
            if r["op"] == op and r["pg_name"] == names[group] and r["collective_seq_id"] == seq
        ]
        if not rep.expect(len(match) == 1, f"{key}: {len(match)} rows for {op} seq {seq}"):
            continue
        row = found[key] = match[0]
        got = {f: row[f] for f in ("input_sizes", "output_sizes", "input_dtypes", "state")}
        want = {"input_sizes": ins, "output_sizes": outs, "input_dtypes": [dtype]}
        want["state"] = BLOCKING_STATE if blocking else "completed"
        rep.expect(got == want, f"{key}: got {got}, want {want}")
        rep.expect(row["output_dtypes"] == [dtype], f"{key}: output_dtypes {row['output_dtypes']}")
        rep.expect(row["pg_ranks"] == ranks, f"{key}: pg_ranks {row['pg_ranks']} != {ranks}")
        rep.expect(row["backend"] == BACKEND, f"{key}: backend {row['backend']!r}")
        rep.expect(row["rank"] == rank, f"{key}: rank {row['rank']}")
        rep.expect(row["time_completed_ns"] is not None, f"{key}: no time_completed_ns")
        site = f"{SCRIPT}:{lines[key]} in _w_recording"
        rep.expect(row["call_site"] == site, f"{key}: call_site {row['call_site']!r} != {site!r}")
    if "all_reduce" in found:
        row = found["all_reduce"]
        rep.expect(row["timeout_ms"] == PG_TIMEOUT_S * 1000, f"timeout_ms {row['timeout_ms']}")
        rep.expect(row["pg_desc"] == "default_pg", f"default pg_desc {row['pg_desc']!r}")
    if "sub" in found:
        rep.info(f"subgroup pg_name={found['sub']['pg_name']} pg_desc={found['sub']['pg_desc']!r}")
    extra = [
        (r["op"], r["pg_name"], r["collective_seq_id"])
        for r in rows
        if r["record_id"] not in {f["record_id"] for f in found.values()}
    ]
    if extra:
        rep.info(f"rows beyond the {len(expected)} ops: {extra}")
    if "async" in found and found["async"]["time_completed_ns"] is not None:
        lead_ms = (gpu_done_ns - found["async"]["time_completed_ns"]) / 1e6
        created = found["async"]["time_created_ns"]
        rep.info(
            f"async all_reduce: work.is_completed() right after the call={done_at_enqueue};"
            f" recorded completed {(found['async']['time_completed_ns'] - created) / 1e6:.2f} ms"
            f" after creation, {lead_ms:.1f} ms before the GPU was done"
            + (
                " -> SUSPECT: completion is taken at enqueue, not at GPU completion"
                if lead_ms > 20
                else ""
            )
        )

    raw = flush.raw_dump
    if not rep.expect(raw is not None and raw.is_file(), f"no raw FR dump (report: {raw})"):
        return
    want_raw = raw_dump_dir(recorder.settings, incident) / f"comm_lib_trace_rank_{rank}"
    rep.expect(raw == want_raw, f"raw dump at {raw}, want {want_raw}")
    rep.expect(raw.stat().st_size > 0, "raw FR dump is empty")
    imported = import_dumps(
        [raw], archive=Path(os.environ["CHECK_WORKDIR"]) / "fr-import", job=JOB, incident=incident
    )
    rep.info(f"import of the raw dump: {imported.summary()}")
    ok = imported.ok and imported.entries > 0 and imported.files_written
    if not rep.expect(bool(ok), f"raw dump import: {imported.summary()} {imported.problems}"):
        return
    fr_rows = _rows(imported.files_written[0])
    for group, name in names.items():
        ours = [(r["collective_seq_id"], r["op"]) for r in rows if r["pg_name"] == name]
        theirs = [
            (r["collective_seq_id"], r["op"], r["state"])
            for r in fr_rows
            if r["pg_name"] == name and not r["is_p2p"]
        ]
        agree = [s for s, _ in ours] == [s for s, _, _ in theirs]
        rep.info(
            f"collective_seq_id {group} pg {name}: {'AGREE' if agree else 'DIFFER'}"
            f" recorder={ours} nccl_fr={theirs}"
        )
    others = sorted({r["pg_name"] for r in fr_rows} - set(names.values()))
    if others:
        rep.info(f"NCCL FR also has groups {others}")


_FR_VARIABLES = (
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_DUMP_ON_TIMEOUT",
    "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)


def _w_environment(rep: _Report) -> None:
    import torch
    import torch.distributed as dist

    import fr_otel

    dev = _device()
    before = {name: os.environ.get(name) for name in _FR_VARIABLES}
    recorder = fr_otel.install()
    after = {name: os.environ.get(name) for name in _FR_VARIABLES}
    rep.info(f"before install(): {before}")
    rep.info(f"after install():  {after}")
    folder = recorder.settings.rings / f"job={recorder.settings.job}"
    want = {
        "TORCH_FR_BUFFER_SIZE": os.environ["FR_OTEL_BUFFER_SIZE"],
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": str(folder.absolute() / "comm_lib_trace_rank_"),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    }
    for name, value in want.items():
        rep.expect(after[name] == value, f"{name}={after[name]!r}, want {value!r}")

    dist.init_process_group(BACKEND, timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    for _ in range(20):
        dist.all_reduce(torch.ones(8, device=dev))
    _sync()
    prefix = Path(os.environ["TORCH_FR_DUMP_TEMP_FILE"])
    rep.expect(prefix.parent.is_dir(), f"the dump folder {prefix.parent} does not exist")
    entries = pickle.loads(_fr_dump_bytes()).get("entries", [])
    size = int(want["TORCH_FR_BUFFER_SIZE"])
    rep.info(f"torch FR holds {len(entries)} entries after 20 all_reduce (buffer size {size})")
    rep.expect(
        len(entries) == size,
        f"torch's FR holds {len(entries)} entries, not {size}: TORCH_FR_BUFFER_SIZE ignored",
    )


def _w_dump_trigger(rep: _Report) -> None:
    import torch
    import torch.distributed as dist

    dev = _device()
    recorder, rank = _init()
    dist.all_reduce(torch.ones(16, device=dev))
    _sync()
    target = Path(os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(rank))
    rep.expect(not target.exists(), f"{target} exists before any dump")
    data = _fr_dump_bytes()
    target.write_bytes(data)

    def declared() -> str | None:
        return next((i for i in recorder.stats.incidents if i.endswith("-torch_dump")), None)

    took = _wait(declared, 3.0)
    incident = declared()
    seen = f"{took:.2f} s" if took is not None else "never"
    rep.info(f"incidents {recorder.stats.incidents}, torch_dump incident after {seen}")
    if not rep.expect(incident is not None, "no torch_dump incident within 3 s"):
        return
    path = _archived(recorder, incident, rank)
    flushed = _wait(path.is_file, max(3.0 - (took or 0.0), 0.1))
    rep.expect(flushed is not None, f"no archive file {path} within 3 s of the dump")
    if flushed is not None:
        rep.info(f"archived {path.name} {(took or 0.0) + flushed:.2f} s after the dump appeared")
        rep.expect(len(_rows(path)) >= 1, f"{path} has no rows")


def _w_desync(rep: _Report) -> None:
    import torch
    import torch.distributed as dist

    dev = _device()
    recorder, rank = _init(timeout_s=10)
    x = torch.ones(1000, device=dev)
    for _ in range(3):
        dist.all_reduce(x)
        _sync()
    if rank == 1:
        rep.info("skips the all_reduce")
    else:
        started = time.monotonic()
        try:
            dist.all_reduce(x)  # rank 1 never joins this one
            _sync()  # ends only if NCCL aborts the communicator and leaves the process alive
            rep.info(f"all_reduce + synchronize returned after {time.monotonic() - started:.1f} s")
        except Exception as exc:
            rep.info(f"all_reduce + synchronize raised {exc!r:.200}")
    took = _wait(lambda: recorder.stats.flushes, 60.0)
    took_text = f"{took:.1f} s" if took is not None else "never"
    rep.info(f"incidents {recorder.stats.incidents}, own flush done after {took_text}")
    if not rep.expect(took is not None, "flushed nothing within 60 s"):
        return
    count = recorder.wait_for_job(recorder.stats.incidents[0])  # takes over a dead peer's ring
    reports = [(f.rank, f.incident, f.entries, f.problems) for f in recorder.stats.flushes]
    rep.info(f"{count} rank(s) flushed; flush reports (rank, incident, rows, problems) {reports}")


def _w_overhead(rep: _Report) -> None:
    import torch
    import torch.distributed as dist

    import fr_otel
    from fr_otel.recorder import uninstall

    calls = 2000
    dev = _device()
    dist.init_process_group(BACKEND, timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    x = torch.ones(1024, device=dev)

    def per_call_us(all_reduce: Callable[..., Any], n: int) -> float:
        _sync()
        start = time.perf_counter_ns()
        for _ in range(n):
            all_reduce(x)
        _sync()
        return (time.perf_counter_ns() - start) / n / 1000

    per_call_us(dist.all_reduce, 200)  # warm-up: communicator, kernels
    bare = [per_call_us(dist.all_reduce, calls)]
    recorder = fr_otel.install()
    wrapper = dist.all_reduce
    original = getattr(wrapper, "__wrapped__", None)
    if not rep.expect(original is not None, "dist.all_reduce is not wrapped after install()"):
        return
    per_call_us(wrapper, 200)  # opens the ring, interns the call site, starts the threads
    for thread in threading.enumerate():
        if thread.name == "fr_otel-preload":  # imports pyarrow: not a per-call cost
            thread.join(timeout=20)
    before = recorder._writer.next_record if recorder._writer is not None else 0
    recorded = []
    for _ in range(3):  # interleaved, so that drift of the machine hits both alike
        recorded.append(per_call_us(wrapper, calls))
        bare.append(per_call_us(original, calls))
    after = recorder._writer.next_record if recorder._writer is not None else 0
    errors = recorder.stats.recorder_errors + recorder.capture.errors
    uninstall()
    rep.expect(dist.all_reduce is original, "uninstall() left dist.all_reduce wrapped")
    bare.append(per_call_us(dist.all_reduce, calls))
    base, with_recorder = min(bare), min(recorded)
    rep.info(
        f"{calls} all_reduce of 1024 floats per run, best run: {base:.2f} us/call bare,"
        f" {with_recorder:.2f} us/call recorded: overhead {with_recorder - base:+.2f} us/call"
        f" ({(with_recorder / base - 1) * 100:+.1f} %)"
    )
    rep.info(
        f"runs (us/call): bare {[round(b, 2) for b in bare]}"
        f" (before install, interleaved x3, after uninstall),"
        f" recorded {[round(r, 2) for r in recorded]}"
    )
    want = 3 * calls
    rep.expect(after - before == want, f"the recorder wrote {after - before} of {want} calls")
    rep.expect(errors == 0, f"{errors} recorder errors")


def _w_mixed_backend(rep: _Report) -> None:
    import torch
    import torch.distributed as dist

    dev = _device()
    recorder, rank = _init(backend=None)  # torch's default: cuda:nccl plus cpu:gloo
    rep.info(f"get_backend() = {dist.get_backend()!r}")
    dist.all_reduce(torch.ones(32, device=dev))
    dist.all_reduce(torch.ones(32))
    _sync()
    incident = recorder.declare("operator")
    rows = _rows(_archived(recorder, incident, rank))
    seen = [(r["input_sizes"], r["backend"], r["state"], r["timeout_ms"]) for r in rows]
    rep.info(f"rows (sizes, backend, state, timeout_ms): {seen}")
    if not rep.expect(len(rows) == 2, f"{len(rows)} rows, want 2"):
        return
    rep.expect(
        rows[0]["backend"] == BACKEND and rows[0]["state"] == BLOCKING_STATE,
        f"the {DEVICE} all_reduce: backend {rows[0]['backend']!r}, state"
        f" {rows[0]['state']!r}; want {BACKEND!r}, {BLOCKING_STATE!r}",
    )
    rep.expect(
        rows[1]["backend"] == "gloo" and rows[1]["state"] == "completed",
        f"the cpu all_reduce: backend {rows[1]['backend']!r}, state {rows[1]['state']!r}",
    )


WORKERS: dict[str, Callable[[_Report], None]] = {
    "recording": _w_recording,
    "environment": _w_environment,
    "dump_trigger": _w_dump_trigger,
    "desync": _w_desync,
    "overhead": _w_overhead,
    "mixed_backend": _w_mixed_backend,
}


def worker(name: str) -> None:
    """One rank of one check: print INFO lines, then the result line, then leave at once
    (no NCCL teardown to hang in: the archive is written by then)."""
    rep = _Report()
    try:
        WORKERS[name](rep)
    except Exception as exc:
        traceback.print_exc()
        rep.failures.append(f"rank {os.environ.get('RANK')} raised {exc!r:.300}")
    print(RESULT + json.dumps({"failures": rep.failures}), flush=True)
    sys.stderr.flush()
    os._exit(0)


# --- the launcher ----------------------------------------------------------------------------


@dataclass
class _RankResult:
    rank: int
    returncode: int | None
    """None: killed after the time limit."""
    info: list[str]
    failures: list[str] | None
    """None: the rank printed no result (it crashed or was killed)."""
    tail: str


@dataclass
class _Outcome:
    status: str
    info: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _child_env(folder: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_STRIPPED_PREFIXES) and k not in _STRIPPED
    }
    env.update(
        FR_OTEL_ARCHIVE=str(folder / "archive"),
        FR_OTEL_JOB=JOB,
        CHECK_WORKDIR=str(folder),
        MASTER_ADDR="127.0.0.1",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def _run_ranks(
    check: str,
    world: int,
    folder: Path,
    *,
    timeout_s: float,
    extra_env: dict[str, str] | None = None,
    agent_store: bool = False,
    grace_s: float = 5.0,
) -> list[_RankResult]:
    """Run ``world`` ranks of ``check``; once one exits the others get ``grace_s``."""
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = _child_env(folder, dict(extra_env or {}))
    env.update(MASTER_PORT=str(port), WORLD_SIZE=str(world))
    store = None
    if agent_store:  # torchrun's way: the store outlives every rank
        from torch.distributed import TCPStore

        store = TCPStore(
            "127.0.0.1",
            port,
            is_master=True,
            wait_for_workers=False,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        env.update(TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
    logs = [folder / f"rank{rank}.log" for rank in range(world)]
    procs = []
    for rank, log in enumerate(logs):
        with log.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(SCRIPT), "--worker", check],
                    env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
    deadline = time.monotonic() + timeout_s
    first_exit: float | None = None
    while time.monotonic() < deadline:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            break
        if first_exit is None and any(c is not None for c in codes):
            first_exit = time.monotonic()
            deadline = min(deadline, first_exit + grace_s)
        time.sleep(0.1)
    results = []
    for rank, proc in enumerate(procs):
        killed = proc.poll() is None
        if killed:
            proc.kill()
        proc.wait()
        text = logs[rank].read_text(errors="replace")
        info = [line[5:] for line in text.splitlines() if line.startswith("INFO ")]
        failures = None
        for line in text.splitlines():
            if line.startswith(RESULT):
                failures = json.loads(line[len(RESULT) :])["failures"]
        tail = "\n".join(line for line in text.splitlines()[-15:] if not line.startswith("INFO "))
        results.append(_RankResult(rank, None if killed else proc.returncode, info, failures, tail))
    del store
    return results


def _outcome(results: list[_RankResult], timeout_s: float) -> _Outcome:
    outcome = _Outcome("PASS")
    many = len(results) > 1
    for r in results:
        label = f"rank {r.rank}: " if many else ""
        outcome.info.extend(label + line for line in r.info)
        if r.failures is None:
            how = (
                f"killed after {timeout_s:.0f} s" if r.returncode is None else f"rc {r.returncode}"
            )
            outcome.problems.append(f"{label}no result ({how}); output ends:\n{r.tail}")
        else:
            outcome.problems.extend(label + f for f in r.failures)
    if outcome.problems:
        outcome.status = "FAIL"
    return outcome


def _simple(name: str) -> Callable[[Path, float, int], _Outcome]:
    def check(folder: Path, timeout_s: float, gpus: int) -> _Outcome:
        extra = {}
        if name == "environment":
            extra = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "FR_OTEL_BUFFER_SIZE": "8"}
        results = _run_ranks(name, 1, folder, timeout_s=timeout_s, extra_env=extra)
        return _outcome(results, timeout_s)

    return check


def _check_desync(folder: Path, timeout_s: float, gpus: int) -> _Outcome:
    if gpus < 2:
        return _Outcome("SKIP", info=[f"needs 2 GPUs, this machine has {gpus}"])
    results = _run_ranks(
        "desync",
        2,
        folder,
        timeout_s=timeout_s,
        extra_env={"FR_OTEL_TIMEOUT": "3"},
        agent_store=True,
        grace_s=30.0,
    )
    outcome = _outcome(results, timeout_s)
    # rank 0 may well be ended by NCCL's watchdog: its missing result is no problem here
    outcome.problems = [p for p in outcome.problems if not p.startswith("rank 0: no result")]
    outcome.info.extend(f"rank {r.rank} exit code {r.returncode}" for r in results)
    job = folder / "archive" / f"job={JOB}"
    incidents = {
        d.name.removeprefix("incident="): sorted(p.name for p in d.glob("rank-*.parquet"))
        for d in sorted(job.glob("incident=*"))
    }
    outcome.info.append(f"archive: {incidents}")
    both = [i for i, files in incidents.items() if len(files) == 2]
    if len(both) != 1:
        outcome.problems.append(f"want one incident holding both ranks' files: {incidents}")
    else:
        from fr_otel.analysis import analyze

        analysis = analyze(folder / "archive", job=JOB, incident=both[0])
        for finding in analysis.findings:
            outcome.info.append(
                f"finding {finding.kind} {finding.culprit_ranks}: {finding.summary}"
            )
        root = analysis.root_cause
        culprits = analysis.findings[root].culprit_ranks if root is not None else []
        if culprits != [1]:
            outcome.problems.append(f"root cause names ranks {culprits}, want [1]")
    outcome.status = "FAIL" if outcome.problems else "PASS"
    return outcome


CHECKS: dict[str, tuple[str, Callable[[Path, float, int], _Outcome], float]] = {
    "recording": (
        "install() + NCCL collectives: archive rows, raw FR dump",
        _simple("recording"),
        90,
    ),
    "environment": (
        "install() sets torch's FR variables, torch honours them",
        _simple("environment"),
        60,
    ),
    "dump_trigger": (
        "torch's dump file appearing declares a torch_dump incident",
        _simple("dump_trigger"),
        60,
    ),
    "desync": (
        "2 ranks, rank 1 skips an all_reduce: one incident naming rank 1",
        _check_desync,
        90,
    ),
    "overhead": ("2,000 small all_reduce with and without the recorder", _simple("overhead"), 90),
    "mixed_backend": (
        "init_process_group() without backend: cuda ops are NCCL ops",
        _simple("mixed_backend"),
        60,
    ),
}
"""name -> (what it checks, how, seconds it may take at most)."""


def _environment_line() -> str:
    import torch

    version = torch.cuda.nccl.version() if DEVICE == "cuda" else "-"
    nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    name = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu"
    count = torch.cuda.device_count() if DEVICE == "cuda" else 0
    return f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {nccl}, {count} x {name}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(
            "Check fr_otel's recorder on real NCCL (needs a CUDA device; not part of CI)."
            " Prints one PASS/FAIL/SKIP line per check; exits 1 if any failed,"
            " 2 without a CUDA device."
        )
    )
    parser.add_argument(
        "--only", metavar="NAMES", help=f"comma-separated checks to run: {', '.join(CHECKS)}"
    )
    parser.add_argument(
        "--keep",
        metavar="DIR",
        type=Path,
        help="write archives and rank logs under DIR and keep them (default: a temporary"
        " folder, kept only when a check fails)",
    )
    parser.add_argument(
        "--budget",
        metavar="SECONDS",
        type=float,
        default=240.0,
        help="stop starting checks once this much time has gone (default: 240)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
    names = list(CHECKS) if not args.only else [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        parser.error(f"unknown check(s) {unknown}; choose from {','.join(CHECKS)}")

    try:
        import torch
    except ImportError:
        print("cannot run: torch is not installed (pip install -e . torch)", file=sys.stderr)
        return 2
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: these checks need a GPU with NCCL; nothing run", file=sys.stderr)
        return 2
    import torch.distributed as dist

    if BACKEND == "nccl" and not (dist.is_available() and dist.is_nccl_available()):
        print("no CUDA device with NCCL: this torch has no NCCL; nothing run", file=sys.stderr)
        return 2
    gpus = torch.cuda.device_count() if DEVICE == "cuda" else 2
    print(f"fr_otel NCCL checks: {_environment_line()}", flush=True)

    root = args.keep or Path(tempfile.mkdtemp(prefix="fr-otel-gpu-check-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for name in names:
        title, check, limit = CHECKS[name]
        left = args.budget - (time.monotonic() - started)
        t0 = time.monotonic()
        if left < 15:
            outcome = _Outcome(
                "FAIL", problems=[f"not run: the {args.budget:.0f} s budget is spent"]
            )
        else:
            try:
                outcome = check(root / name, min(limit, left), gpus)
            except Exception as exc:
                outcome = _Outcome("FAIL", problems=[f"the check itself raised {exc!r}"])
        for line in outcome.info:
            print(f"  info  {line}")
        for problem in outcome.problems:
            print("  fail  " + problem.replace("\n", "\n        "))
        print(f"{outcome.status} {name}: {title} ({time.monotonic() - t0:.1f} s)", flush=True)
        counts[outcome.status] += 1
    words = {"PASS": "passed", "FAIL": "failed", "SKIP": "skipped"}
    summary = ", ".join(f"{n} {words[s]}" for s, n in counts.items() if n)
    print(f"{summary} in {time.monotonic() - started:.0f} s")
    if counts["FAIL"] or args.keep:
        print(f"archives and rank logs: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
