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
    """torch's FR dump (pickle): NCCL's own recorder on NCCL, the generic one otherwise."""
    from torch._C import _distributed_c10d as ext

    names = ("_dump_nccl_trace", "_dump_fr_trace") if BACKEND == "nccl" else ("_dump_fr_trace",)
    for name in names:
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


def _fr_entries() -> list[dict[str, Any]]:
    """The entries of torch's FR dump, in record order."""
    entries: list[dict[str, Any]] = pickle.loads(_fr_dump_bytes()).get("entries", [])
    return sorted(entries, key=lambda e: int(e.get("record_id", 0)))


def _recorded_rows(recorder: Any) -> list[dict[str, Any]]:
    """``recorder.snapshot()`` (both rings) as the canonical rows a flush would write."""
    from fr_otel.recorder.table import ring_table

    contents = recorder.snapshot()
    if contents is None:
        return []
    table = ring_table(contents, job=JOB, incident="snapshot", dump_time_ns=time.time_ns())
    rows: list[dict[str, Any]] = table.to_pylist()
    if len(rows) != len(contents.slots):  # a slot whose group or signature is unknown
        print(f"INFO snapshot: {len(contents.slots)} slots, {len(rows)} rows", flush=True)
    return sorted(rows, key=lambda row: row["record_id"])


def _from_torch_ring(row: dict[str, Any]) -> bool:
    """Did the FR mirror write this row (an op the hooks did not see)?"""
    from fr_otel.recorder.ring import TORCH_RECORD_OFFSET

    return bool(row["record_id"] >= TORCH_RECORD_OFFSET)


def _fr_key(entry: dict[str, Any]) -> tuple[str, bool, int, int]:
    """(group name, is p2p, collective seq, p2p seq or 0) of a torch FR entry."""
    group = entry.get("process_group")
    name = str(group[0]) if isinstance(group, list | tuple) and group else str(group)
    p2p = bool(entry.get("is_p2p"))
    p2p_seq = int(entry.get("p2p_seq_id") or 0) if p2p else 0
    return name, p2p, int(entry.get("collective_seq_id") or 0), p2p_seq


def _row_key(row: dict[str, Any]) -> tuple[str, bool, int, int]:
    p2p = bool(row["is_p2p"])
    p2p_seq = int(row["p2p_seq_id"] or 0) if p2p else 0
    return str(row["pg_name"]), p2p, int(row["collective_seq_id"] or 0), p2p_seq


def _fr_op(entry: dict[str, Any]) -> str:
    return str(entry.get("profiling_name", "")).partition(":")[2]


def _expect_coverage(
    rep: _Report, rows: list[dict[str, Any]], entries: list[dict[str, Any]]
) -> dict[int, dict[str, Any]]:
    """Every torch FR entry has exactly one row of the snapshot, and no collective's
    (group name, collective_seq_id) is there twice. Returns FR record id -> its row."""
    from collections import Counter

    by_key: dict[tuple[str, bool, int, int], list[dict[str, Any]]] = {}
    for row in rows:
        by_key.setdefault(_row_key(row), []).append(row)
    found: dict[int, dict[str, Any]] = {}
    missing, doubled = [], []
    for entry in entries:
        key = _fr_key(entry)
        match = by_key.get(key, [])
        if len(match) == 1:
            found[int(entry.get("record_id", -1))] = match[0]
        else:
            (missing if not match else doubled).append((_fr_op(entry), *key, len(match)))
    rep.expect(
        not missing,
        f"{len(missing)} of {len(entries)} torch FR entries have no row in the snapshot"
        f" (op, pg, p2p, seq, p2p seq, rows): {missing[:10]}",
    )
    rep.expect(not doubled, f"torch FR entries with several rows: {doubled[:10]}")
    twice = Counter((r["pg_name"], r["collective_seq_id"]) for r in rows if not r["is_p2p"])
    dups = {key: n for key, n in twice.items() if n > 1}
    rep.expect(not dups, f"(pg_name, collective_seq_id) recorded more than once: {dups}")
    fr_keys = {_fr_key(e) for e in entries}
    extra = [
        (r["op"], *_row_key(r), "torch ring" if _from_torch_ring(r) else "hooks")
        for r in rows
        if _row_key(r) not in fr_keys
    ]
    rep.expect(
        not extra,
        f"rows no torch FR entry has (its buffer holds every op here: the numbering"
        f" differs): {extra[:10]}",
    )
    hooked = sum(not _from_torch_ring(r) for r in found.values())
    rep.info(
        f"{len(entries)} torch FR entries, {len(rows)} snapshot rows; of the matched,"
        f" {hooked} from the hooks and {len(found) - hooked} from the torch ring"
    )
    return found


def _mirror_report(rep: _Report, recorder: Any) -> None:
    stats = recorder.mirror_stats
    if not rep.expect(stats is not None, "no FR mirror (recorder.mirror_stats is None)"):
        return
    rep.info(
        f"mirror: reads {stats.reads}, mirrored {stats.mirrored}, missed {stats.missed},"
        f" last_cost_s {stats.last_cost_s * 1e3:.2f} ms, total {stats.total_cost_s * 1e3:.2f} ms"
    )
    rep.expect(stats.missed == 0, f"the mirror missed {stats.missed} FR entries")
    errors = recorder.stats.recorder_errors + recorder.capture.errors
    rep.expect(errors == 0, f"{errors} recorder errors")


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
    # key, function called (the row's api; its op is torch's), group, seq, input sizes,
    # output sizes, dtype, blocking
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
            if r["api"] == op and r["pg_name"] == names[group] and r["collective_seq_id"] == seq
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
    # the recorder's op is torch's own (NCCL's _allgather_base for all_gather_into_tensor)
    fr_ops = {(r["pg_name"], r["collective_seq_id"]): r["op"] for r in fr_rows if not r["is_p2p"]}
    differ = [
        (r["api"], r["op"], fr_ops[(r["pg_name"], r["collective_seq_id"])])
        for r in rows
        if not r["is_p2p"]
        and fr_ops.get((r["pg_name"], r["collective_seq_id"]), r["op"]) != r["op"]
    ]
    rep.expect(not differ, f"(api, op, torch FR's op) where the ops differ: {differ}")
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
        # left as it was (unset here: torch's default, 2,000): the recorder's own rings keep
        # the history, and each read of torch's FR costs more the larger its buffer
        "TORCH_FR_BUFFER_SIZE": before["TORCH_FR_BUFFER_SIZE"],
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
    entries = _fr_entries()
    ours = int(os.environ["FR_OTEL_BUFFER_SIZE"])
    seqs = [e.get("collective_seq_id") for e in entries]
    ops = sorted({str(e.get("profiling_name")) for e in entries})
    rep.info(
        f"torch FR holds {len(entries)} entries after 20 all_reduce (FR_OTEL_BUFFER_SIZE"
        f" {ours}, TORCH_FR_BUFFER_SIZE {os.environ.get('TORCH_FR_BUFFER_SIZE')!r}): {ops}"
    )
    # what this can tell: torch's buffer holds more than FR_OTEL_BUFFER_SIZE (the recorder's
    # size did not reach torch) and is not off (0); that it is 2,000 exactly, it cannot
    rep.expect(
        len(entries) == 20 and seqs == list(range(1, 21)),
        f"torch's FR holds {len(entries)} entries with collective_seq_id {seqs},"
        " want the 20 all_reduce numbered 1..20",
    )
    recorder.read_torch_fr()
    rows = _recorded_rows(recorder)
    rep.info(
        f"the recorder's rings (capacity {ours} each) hold collective_seq_id: hooks"
        f" {[r['collective_seq_id'] for r in rows if not _from_torch_ring(r)]}, torch ring"
        f" {[r['collective_seq_id'] for r in rows if _from_torch_ring(r)]}"
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
    before = recorder.ring.next_record if recorder.ring is not None else 0
    recorded = []
    for _ in range(3):  # interleaved, so that drift of the machine hits both alike
        recorded.append(per_call_us(wrapper, calls))
        bare.append(per_call_us(original, calls))
    after = recorder.ring.next_record if recorder.ring is not None else 0
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


def _w_ddp(rep: _Report) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dev = _device()
    recorder, _ = _init()
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(256, 8)).to(dev)
    # 0.1 MiB: each 256x256 weight (256 KiB of gradient) closes a bucket, 4-5 buckets
    ddp = DistributedDataParallel(
        model, device_ids=[dev.index] if DEVICE == "cuda" else None, bucket_cap_mb=0.1
    )
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    steps = 4
    for _ in range(steps):
        optimizer.zero_grad()
        loss = ddp(torch.randn(32, 256, device=dev)).square().mean()
        loss.backward()  # the buckets' all-reduces: C++, past every Python hook
        optimizer.step()
        dist.all_reduce(loss.detach().reshape(1))  # the loss to log: a hooked op among them
    _sync()
    recorder.read_torch_fr()
    rows = _recorded_rows(recorder)
    entries = _fr_entries()
    found = _expect_coverage(rep, rows, entries)
    _mirror_report(rep, recorder)

    def numel(entry: dict[str, Any]) -> int:
        sizes = entry.get("input_sizes") or [[]]
        count = 1
        for n in sizes[0]:
            count *= int(n)
        return count

    buckets = {
        int(e.get("record_id", -1)) for e in entries if _fr_op(e) == "all_reduce" and numel(e) > 8
    }
    per_step: list[list[int]] = [[]]
    for entry in entries:  # each step ends with the loss's all_reduce (1 element)
        if _fr_op(entry) == "all_reduce" and entry.get("input_sizes") == [[1]]:
            per_step.append([])
        elif int(entry.get("record_id", -1)) in buckets:
            per_step[-1].append(numel(entry))
    others = {_fr_op(e) for e in entries if int(e.get("record_id", -1)) not in buckets}
    rep.info(
        f"bucket all_reduce per step (elements): {per_step[:-1]}; other torch FR ops:"
        f" {sorted(others)}"
    )
    # DDP's first step reduces one bucket of everything, then it rebuilds its buckets
    counts = [len(step) for step in per_step[:-1]]
    rep.expect(
        len(counts) == steps and min(counts[1:]) >= 3,
        f"bucket all_reduce per step {counts}, want {steps} steps, 3+ buckets after the first",
    )
    states = [
        (found[r]["state"], "torch ring" if _from_torch_ring(found[r]) else "hooks")
        for r in sorted(buckets)
        if r in found
    ]
    rep.expect(
        all(state == "completed" for state, _ in states),
        f"bucket all_reduce rows after synchronize and a mirror read (state, from): {states}",
    )
    hooked = [r["collective_seq_id"] for r in rows if not _from_torch_ring(r)]
    rep.info(f"hooked ops (the logged loss) at collective_seq_id {hooked}")
    rep.expect(len(hooked) == steps, f"{len(hooked)} hooked rows, want the {steps} loss ops")


def _w_functional(rep: _Report) -> None:
    import warnings

    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    dev = _device()
    recorder, _ = _init()
    world = dist.get_world_size()
    group = dist.group.WORLD
    rounds = 3
    reduced = gathered = None
    for _ in range(rounds):
        pending = funcol.all_reduce(torch.ones(16, device=dev), "sum", group)
        dist.all_reduce(torch.ones(24, device=dev))  # issued while the functional one waits
        reduced = pending.wait()
        with warnings.catch_warnings():  # a deprecated alias of all_gather_single
            warnings.simplefilter("ignore", FutureWarning)
            gathered = funcol.all_gather_tensor(torch.ones(8, device=dev), 0, group)
        gathered = funcol.wait_tensor(gathered)
        dist.all_reduce(torch.ones(24, device=dev))
    _sync()
    rep.expect(reduced is not None and bool((reduced == world).all()), f"all_reduce gave {reduced}")
    rep.expect(
        gathered is not None and tuple(gathered.shape) == (8 * world,),
        f"all_gather_tensor gave shape {None if gathered is None else tuple(gathered.shape)}",
    )
    recorder.read_torch_fr()
    rows = _recorded_rows(recorder)
    entries = _fr_entries()
    _expect_coverage(rep, rows, entries)
    _mirror_report(rep, recorder)
    functional = [
        (_fr_op(e), e.get("collective_seq_id"))
        for e in entries
        if e.get("input_sizes") in ([[16]], [[8]])
    ]
    rep.info(f"functional collectives in torch's FR (op, collective_seq_id): {functional}")
    # the sequence-number equality: a hook's torch counter + 1 is FR's collective_seq_id
    theirs = [
        e.get("collective_seq_id")
        for e in entries
        if _fr_op(e) == "all_reduce" and e.get("input_sizes") == [[24]]
    ]
    ours = [
        r["collective_seq_id"]
        for r in rows
        if not _from_torch_ring(r) and r["op"] == "all_reduce" and r["input_sizes"] == [[24]]
    ]
    same = ours == theirs and len(ours) == 2 * rounds
    rep.info(
        f"dist.all_reduce collective_seq_id {'AGREE' if same else 'DIFFER'}:"
        f" hooks {ours}, torch FR {theirs}"
    )
    rep.expect(
        same,
        f"the hooked dist.all_reduce rows' collective_seq_id {ours} != torch FR's {theirs}"
        f" (want {2 * rounds} each)",
    )


WORKERS: dict[str, Callable[[_Report], None]] = {
    "recording": _w_recording,
    "environment": _w_environment,
    "dump_trigger": _w_dump_trigger,
    "desync": _w_desync,
    "overhead": _w_overhead,
    "mixed_backend": _w_mixed_backend,
    "ddp": _w_ddp,
    "functional": _w_functional,
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


def _per_gpu(name: str) -> Callable[[Path, float, int], _Outcome]:
    """A check run by 2 ranks when there are 2 GPUs (each checks its own FR), else by 1."""

    def check(folder: Path, timeout_s: float, gpus: int) -> _Outcome:
        world = 2 if gpus >= 2 else 1
        results = _run_ranks(name, world, folder, timeout_s=timeout_s, grace_s=15.0)
        outcome = _outcome(results, timeout_s)
        outcome.info.insert(0, f"world of {world}")
        return outcome

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
        "install() sets torch's FR variables, leaves its buffer size alone",
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
    "ddp": (
        "DDP's C++ bucket all-reduces: every NCCL FR entry recorded once, completed",
        _per_gpu("ddp"),
        60,
    ),
    "functional": (
        "functional collectives: recorded once; hooked ops carry FR's collective_seq_id",
        _per_gpu("functional"),
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
