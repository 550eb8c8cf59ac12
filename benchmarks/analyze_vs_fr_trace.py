"""Diagnosis speed, memory and correctness: ``fr-otel analyze`` vs. torch's ``torchfrtrace``.

For each fleet size (default 64, 256 and 1024 ranks x 2000 entries, one injected fault
each, a different kind per size) the simulator writes pickle dumps named
``nccl_trace_rank_<rank>``; then, in one run, four commands are timed, each as its own
subprocess:

- the floor: a restricted unpickle (``fr_otel.dumps.safe_pickle.load_plain``) of every
  dump with a pool of 2 worker processes (``--floor-workers``), the objects then freed:
  what any analyzer of these pickles pays at least;

- ``torchfrtrace DUMPS -p nccl_trace_rank_``: torch's analyzer as a user would run it
  (``--fr-trace-mismatch-cap`` passes its ``--mismatch_cap``; by default it keeps its own
  default of 10, and then stops early once one group has more mismatches than that); run
  only up to ``--fr-trace-max-size`` ranks (1024), beyond which it takes more than 10
  minutes;
- ``fr-otel analyze DUMPS --format json``: fr-otel end to end, importing on the fly;
- ``fr-otel analyze ARCHIVE --format json``: re-analysis of an archive already written by
  ``fr-otel import``, which keeps the analysis's first pass beside the rank files
  (``fr_otel.analysis.prepared``). The import is setup, not a timed row: its wall time is
  printed in the row's notes.
- the archive's read floor: Python, DuckDB's import and one DuckDB scan of the archive's
  rank files, reading every column the analyzer's first pass reads (each value hashed, the
  hashes summed): what any DuckDB analysis of that archive pays before analysing anything.

Measured per command:

- wall time: ``time.perf_counter`` around the subprocess, from spawn to reap;
- "max RSS, largest process": ``ru_maxrss`` from ``os.wait4`` on the child. Linux folds
  in every descendant the child waited for (fr-otel's import workers included), but as a
  maximum over processes, not a sum;
- "max RSS, process tree": the sum of the resident sets (``/proc/PID/statm``) of the child
  and all its descendants, sampled every 50 ms; the largest sum seen. Pages shared between
  processes (forked workers) count once per process, and a spike shorter than the interval
  can be missed; the first column is exact but per process, so report both;
- CPU: user + system time of the child and its reaped descendants (``os.wait4``), which
  other load on the machine disturbs less than wall time;
- verdict: fr-otel's root-cause finding (else its first), and for torchfrtrace the first
  block of its text output that names ranks (``error msg: Culprit rank R; Error type: T``
  or ``missing ranks: {R}``), or how it crashed or timed out. A verdict matches the
  simulator's ground truth when its culprit-rank set equals the truth's.

Goals (issue 19), checked and printed at the end:

- at 256 x 2000, fr-otel end to end at least 12x faster than torchfrtrace, and at most 2x
  the floor's wall time;
- re-analysis of an imported archive under 0.5 s (printed beside the archive's read floor);
- at 8192 x 2000 (``--sizes 8192``, or ``--big``: fr-otel alone, torchfrtrace is not run
  there), end to end under 120 s with a peak RSS under 4 GB (the larger of the two RSS
  measurements).

The floors and both fr-otel commands run ``--repeat`` times (3; once above 1,024 ranks),
taking turns, and each reports its fastest run: this machine's speed drifts by tens of
percent between minutes, which a ratio of two runs minutes apart would measure instead.
The ratio of each round is printed too. torchfrtrace runs once.

Dump generation and the archive import are never timed, and every dump is read once
before the runs so that no tool pays for a cold page cache. fr_otel's modules are
byte-compiled first, as a regular ``pip install`` does. Fleets are kept under ``--out``
with a ``spec.json`` beside them and reused when the spec and the simulator's source are
unchanged. Every command's stdout and stderr are kept under ``--out/logs``, and the
results as JSON in ``--out/results.json``.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fr_otel
import fr_otel.sim
from fr_otel.sim import FAULT_KINDS, FleetSpec, simulate, write_fleet

ENTRIES = 2000
PREFIX = "nccl_trace_rank_"
DEFAULT_SIZES = (64, 256, 1024)
DEFAULT_FAULTS = {64: "skipped_collective", 256: "op_type_mismatch", 1024: "gpu_hang"}
# sizes without a default above cycle through these, so neighbouring sizes differ
FAULT_CYCLE = ("skipped_collective", "op_type_mismatch", "gpu_hang")
BIG_WORLD = 8192
SPEEDUP_WORLD = 256
SPEEDUP_GOAL = 12.0
FLOOR_GOAL = 2.0
"""fr-otel end to end at most this many times the floor's wall time (at SPEEDUP_WORLD)."""
REANALYSIS_GOAL_S = 0.5
BIG_WALL_GOAL_S = 120.0
BIG_RSS_GOAL_MB = 4 * 1024
FR_TRACE_MAX_SIZE = 1024
"""Above this many ranks torchfrtrace would take more than 10 minutes: not run unless asked."""
FLOOR_WORKERS = 2
REPEAT = 3
REPEAT_MAX_WORLD = 1024
"""Sizes up to this run the floor and fr-otel ``--repeat`` times; larger ones once."""
SAMPLE_S = 0.05
MB = 1024 * 1024

FR_TRACE = "torchfrtrace"
FR_TRACE_FULL = "torchfrtrace (full)"
# torchfrtrace stops after 10 mismatches in a group (its --mismatch_cap), usually in the
# valid batched send/recv it misreads, long before the real fault. "full" lifts the cap
# so that it analyses the whole trace, as the 75 s baseline figure was taken.
FULL_CAP = 1_000_000_000
OURS_E2E = "fr-otel (dumps)"
FLOOR = "floor (unpickle)"
OURS_ARCHIVE = "fr-otel (archive)"
READ_FLOOR = "floor (archive)"
FLOORS = (FLOOR, READ_FLOOR)


# --------------------------------------------------------------------------- measuring


def _children_map() -> dict[int, list[int]]:
    """ppid -> pids over all of /proc (this kernel has no /proc/PID/task/TID/children)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # exited between listing and reading
            continue
        # the command name may hold spaces and parentheses: fields resume after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def _tree_rss_bytes(root: int, page: int) -> int:
    children = _children_map()
    total = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/statm", "rb") as handle:
                total += int(handle.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
        stack.extend(children.get(pid, ()))
    return total


class _TreeSampler(threading.Thread):
    """Samples the summed RSS of a process tree until stopped; keeps the maximum."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.max_bytes = 0
        self._stop_event = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")

    def run(self) -> None:
        while True:
            self.max_bytes = max(self.max_bytes, _tree_rss_bytes(self.root, self._page))
            if self._stop_event.wait(SAMPLE_S):
                return

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


@dataclasses.dataclass
class Measured:
    """One timed subprocess."""

    cmd: list[str]
    rc: int
    timed_out: bool
    wall_s: float
    maxrss_mb: float
    """``ru_maxrss`` of the child and its reaped descendants (largest single process)."""
    tree_mb: float
    """Largest sampled sum of RSS over the child's process tree."""
    cpu_s: float
    """User + system CPU time of the child and its reaped descendants (``wait4``): less
    sensitive than wall time to other load on the machine."""
    stdout: Path
    stderr: Path

    @property
    def peak_mb(self) -> float:
        return max(self.maxrss_mb, self.tree_mb)


def run_measured(cmd: list[str], log_stem: Path, timeout_s: float) -> Measured:
    """Run ``cmd`` with stdout/stderr to ``<log_stem>.stdout``/``.stderr``; time and size it."""
    out_path = log_stem.with_name(log_stem.name + ".stdout")
    err_path = log_stem.with_name(log_stem.name + ".stderr")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    timed_out = threading.Event()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        start = time.perf_counter()
        # own session, so a timeout can kill the tool together with its worker processes
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True
        )
        sampler = _TreeSampler(proc.pid)
        sampler.start()

        def kill() -> None:
            timed_out.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            # wait4 rather than Popen.wait: its rusage carries the peak RSS
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            wall = time.perf_counter() - start
            timer.cancel()
            sampler.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)  # already reaped: keep Popen quiet
    return Measured(
        cmd=cmd,
        rc=proc.returncode,
        timed_out=timed_out.is_set(),
        wall_s=wall,
        maxrss_mb=usage.ru_maxrss * 1024 / MB,  # ru_maxrss is in KiB on Linux
        tree_mb=sampler.max_bytes / MB,
        cpu_s=usage.ru_utime + usage.ru_stime,
        stdout=out_path,
        stderr=err_path,
    )


# --------------------------------------------------------------------------- fleets


@dataclasses.dataclass
class PreparedFleet:
    name: str
    world: int
    fault: str
    dumps: Path
    truth: dict[str, Any]
    reused: bool
    seconds: float

    @property
    def culprits(self) -> frozenset[int]:
        return frozenset(self.truth["culprit_ranks"])

    def describe_truth(self) -> str:
        t = self.truth
        where = f" in {t['pg_desc']} #{t['collective_seq_id']} {t['op']}" if t["pg_desc"] else ""
        return f"culprit {_ranks(self.culprits)}{where}: {t['description']}"


def _sim_digest() -> str:
    """Hash of the simulator's source: cached dumps go stale when it changes."""
    digest = hashlib.sha256()
    for path in sorted(Path(fr_otel.sim.__file__).parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def prepare_fleet(root: Path, world: int, fault: str, seed: int) -> PreparedFleet:
    """Dumps for one fleet, reused from ``root`` when ``spec.json`` says they match."""
    name = f"{world}x{ENTRIES}-{fault}-seed{seed}"
    fleet_dir = root / "fleets" / name
    dumps = fleet_dir / "dumps"
    spec = FleetSpec(world=world, entries=ENTRIES, fault=fault, seed=seed)
    wanted = {
        "spec": dataclasses.asdict(spec),
        "prefix": PREFIX,
        "format": "pickle",
        "sim_digest": _sim_digest(),
    }
    wanted = json.loads(json.dumps(wanted))  # as spec.json reads back: tuples become lists
    spec_path = fleet_dir / "spec.json"
    start = time.perf_counter()
    if spec_path.exists():
        recorded = json.loads(spec_path.read_text())
        complete = all((dumps / f"{PREFIX}{r}").is_file() for r in range(world))
        if complete and {k: recorded.get(k) for k in wanted} == wanted:
            return PreparedFleet(
                name, world, fault, dumps, recorded["truth"], True, time.perf_counter() - start
            )
    shutil.rmtree(fleet_dir, ignore_errors=True)
    fleet = simulate(spec)
    write_fleet(fleet, dumps, fmt="pickle", prefix=PREFIX)
    truth = dataclasses.asdict(fleet.truth)
    # written last: an interrupted write leaves no spec.json and is regenerated next time
    spec_path.write_text(json.dumps({**wanted, "truth": truth}, indent=2) + "\n")
    return PreparedFleet(name, world, fault, dumps, truth, False, time.perf_counter() - start)


def warm_page_cache(dumps: Path) -> None:
    """Read every dump once, untimed, so neither tool pays for a cold page cache."""
    for path in dumps.iterdir():
        with path.open("rb") as handle:
            while handle.read(1 << 24):
                pass


# --------------------------------------------------------------------------- the floor

# Run as ``python -c FLOOR_CODE DUMPS PREFIX WORKERS``: unpickle every dump with the
# restricted unpickler in a pool (fork, as fr-otel's import uses), the objects freed in the
# worker as soon as they are loaded; prints how many files and entries it read.
FLOOR_CODE = """
import multiprocessing, sys
from pathlib import Path
from fr_otel.dumps.safe_pickle import load_plain

def load(path):
    with open(path, "rb") as handle:
        return len(load_plain(handle).get("entries", ()))

if __name__ == "__main__":
    dumps, prefix, workers = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    files = sorted(str(p) for p in dumps.iterdir() if p.name.startswith(prefix))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        entries = sum(pool.imap_unordered(load, files))
    print(f"{len(files)} files, {entries} entries")
"""


# Run as ``python -c READ_FLOOR_CODE ARCHIVE COLUMNS``: what any DuckDB analysis of the
# archive pays before it analyses anything: Python, DuckDB's import and a connection, and
# one scan of the rank files' columns that the analyzer's first pass reads, every value
# hashed (so decoded) and the hashes summed; prints how many rows it read.
READ_FLOOR_CODE = """
import sys
import duckdb

archive, columns = sys.argv[1], sys.argv[2]
files = archive.replace("'", "''") + "/job=*/incident=*/*.parquet"
connection = duckdb.connect()
# no progress bar: it shares stdout, whose last line says what was read
connection.execute("SET enable_progress_bar = false")
rows, _ = connection.execute(
    f"SELECT count(*), sum(hash({columns})) FROM read_parquet('{files}')"
).fetchone()
print(f"{rows} rows")
"""


def first_pass_columns() -> list[str]:
    """The canonical columns the analyzer's first pass (``01_entries.sql``) reads: those
    its statements name (comments aside), and ``pg_name``, which its group key hashes."""
    from fr_otel.analysis.sqlfiles import statements
    from fr_otel.schema import RECORD_SCHEMA

    code = "\n".join(
        line.split("--")[0] for text in statements("01_entries.sql") for line in text.splitlines()
    )
    named = {name for name in RECORD_SCHEMA.names if re.search(rf"\b{name}\b", code)}
    return [name for name in RECORD_SCHEMA.names if name in named or name == "pg_name"]


def floor_verdict(run: Measured, world: int) -> Verdict:
    """The floor diagnoses nothing: say whether it read every file."""
    return _read_all(run, f"{world} files,", "unpickles only")


def read_floor_verdict(run: Measured, world: int) -> Verdict:
    """The read floor diagnoses nothing either: say whether it read every entry."""
    return _read_all(run, f"{world * ENTRIES} rows", "reads the archive only")


def _read_all(run: Measured, expected: str, what: str) -> Verdict:
    """A floor's run: whether its last line starts as ``expected`` says it must."""
    if run.timed_out:
        return Verdict(f"timeout after {run.wall_s:.1f} s", None)
    if run.rc != 0:
        return Verdict(f"error (rc {run.rc}): {_tail_line(run.stderr)}", None)
    said = _tail_line(run.stdout)
    if not said.startswith(expected):
        return Verdict(f"read the wrong input: {said}", None)
    return Verdict(f"n/a ({what}: {said})", None)


# --------------------------------------------------------------------------- verdicts


@dataclasses.dataclass
class Verdict:
    text: str
    culprits: frozenset[int] | None
    """Culprit ranks the verdict names; None when the tool gave no diagnosis (crash)."""
    notes: list[str] = dataclasses.field(default_factory=list)

    def matches(self, truth: frozenset[int]) -> bool:
        return self.culprits is not None and self.culprits == truth


def _ranks(ranks: frozenset[int] | Sequence[int]) -> str:
    items = sorted(ranks)
    return "{" + ", ".join(map(str, items)) + "}"


def _tail_line(path: Path) -> str:
    lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""


_FR_HEADER = re.compile(
    r"^(?:Collective sequence number: (?P<a>\d+) has errors"
    r"|Not all ranks joining collective, sequence number: (?P<b>\d+)"
    r"|Input/output mismatch in the collective sequence number: (?P<c>\d+))"
)
_FR_CULPRIT = re.compile(r"Culprit rank (\d+); Error type: (\w+)")
_FR_MISSING = re.compile(r"^missing ranks: \{([\d, ]*)\}")
_FR_GROUP = re.compile(r"^group info: (\S*)")
_FR_CAP = re.compile(r"^Too many mismatches for process_group \S+: (.*) aborting")


@dataclasses.dataclass
class _FrBlock:
    seq: str
    group: str = "?"
    culprits: frozenset[int] = frozenset()
    error_types: tuple[str, ...] = ()
    missing: bool = False

    def describe(self) -> str:
        where = f"[{self.group} #{self.seq}]"
        if self.missing:
            return f"missing ranks {_ranks(self.culprits)} {where}"
        types = "/".join(dict.fromkeys(self.error_types))
        noun = "culprit" if len(self.culprits) == 1 else "culprits"
        return f"{types} {noun} {_ranks(self.culprits)} {where}"


def _fr_blocks(lines: list[str]) -> list[_FrBlock]:
    """The report blocks of fr_trace's text output that name ranks, in output order."""
    blocks: list[_FrBlock] = []
    current: _FrBlock | None = None
    for line in lines:
        header = _FR_HEADER.match(line)
        if header:
            current = _FrBlock(seq=next(g for g in header.groups() if g is not None))
            blocks.append(current)
            continue
        if current is None:
            continue
        if m := _FR_GROUP.match(line):
            current.group = m.group(1)
        elif m := _FR_MISSING.match(line):
            current.missing = True
            current.culprits = frozenset(int(r) for r in m.group(1).split(",") if r.strip())
        elif line.startswith("error msg:"):
            found = _FR_CULPRIT.findall(line)
            current.culprits = frozenset(int(rank) for rank, _ in found)
            current.error_types = tuple(kind for _, kind in found)
    return [b for b in blocks if b.culprits]


def fr_trace_verdict(run: Measured, truth: frozenset[int]) -> Verdict:
    """Condense torchfrtrace's text report (it exits 0 whether or not it finds problems)."""
    if run.timed_out:
        return Verdict(f"timeout after {run.wall_s:.1f} s", None)
    text = run.stdout.read_text(errors="replace") + "\n" + run.stderr.read_text(errors="replace")
    lines = text.splitlines()
    if run.rc != 0 or "Traceback (most recent call last):" in text:
        return Verdict(f"crash (rc {run.rc}): {_tail_line(run.stderr)}", None)
    blocks = _fr_blocks(lines)
    notes = [f"{len(blocks)} report blocks naming ranks"]
    coalesced = sum(1 for ln in lines if ln.startswith("MISMATCH"))
    if coalesced:
        notes.append(f"{coalesced} coalesced/P2P 'MISMATCH' reports")
    capped = [m.group(1) for ln in lines if (m := _FR_CAP.match(ln))]
    if capped:
        notes.append(f"stopped early at its mismatch cap in {capped[0]}")
    hit = next((i for i, b in enumerate(blocks) if b.culprits == truth), None)
    if hit is None:
        notes.append("no block names exactly the true culprits")
    else:
        notes.append(
            f"first block naming exactly the true culprits: #{hit + 1}, {blocks[hit].describe()}"
        )
    if not blocks:
        return Verdict("no errors reported", frozenset(), notes)
    return Verdict(blocks[0].describe(), blocks[0].culprits, notes)


def fr_otel_verdict(run: Measured) -> Verdict:
    """Condense ``fr-otel analyze --format json`` (exit 0: no findings, 1: findings)."""
    if run.timed_out:
        return Verdict(f"timeout after {run.wall_s:.1f} s", None)
    if run.rc not in (0, 1):
        return Verdict(f"error (rc {run.rc}): {_tail_line(run.stderr)}", None)
    try:
        report = json.loads(run.stdout.read_text())
        findings: list[dict[str, Any]] = report["findings"]
        root = report.get("root_cause")
    except (ValueError, KeyError, TypeError) as exc:
        # an uncaught exception also exits 1, the code for "findings": tell them apart here
        if "Traceback (most recent call last):" in run.stderr.read_text(errors="replace"):
            return Verdict(f"crash (rc {run.rc}): {_tail_line(run.stderr)}", None)
        return Verdict(f"unreadable output (rc {run.rc}): {exc!r}"[:160], None)
    notes = [f"{len(findings)} findings"]
    if report.get("missing_dumps"):
        notes.append(f"missing dumps {_ranks(report['missing_dumps'])}")
    if not findings:
        return Verdict("no findings", frozenset(), notes)
    if root is None:
        notes.append("no root cause chosen; verdict is the first finding")
    finding = findings[root if root is not None else 0]
    culprits = frozenset(int(r) for r in finding.get("culprit_ranks") or ())
    pg = finding.get("process_group") or {}
    where = f" [{pg.get('desc') or pg.get('name') or '?'} #{finding.get('collective_seq_id')}]"
    noun = "culprit" if len(culprits) == 1 else "culprits"
    return Verdict(f"{finding.get('kind')} {noun} {_ranks(culprits)}{where}", culprits, notes)


# --------------------------------------------------------------------------- driving


@dataclasses.dataclass
class Row:
    fleet: PreparedFleet
    tool: str
    run: Measured | None
    """The run the row reports: of repeated runs, the fastest."""
    verdict: Verdict
    walls: list[float] = dataclasses.field(default_factory=list)
    """Every run's wall time, in the order run (one entry unless repeated)."""

    @property
    def match(self) -> bool:
        return self.verdict.matches(self.fleet.culprits)


def _script(name: str, module: str) -> list[str]:
    """The console script next to this interpreter (what a user runs), else ``-m module``."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return [str(candidate)]
    return [sys.executable, "-m", module]


def bench_fleet(
    fleet: PreparedFleet, args: argparse.Namespace, *, skip_fr_trace: str | None
) -> list[Row]:
    """Time the tools on one fleet; ``skip_fr_trace`` says why torchfrtrace is not run."""
    logs = args.out / "logs" / fleet.name
    shutil.rmtree(logs, ignore_errors=True)
    fr_otel = _script("fr-otel", "fr_otel")
    rows: list[Row] = []
    warm_page_cache(fleet.dumps)

    repeats = args.repeat if fleet.world <= REPEAT_MAX_WORLD else 1

    # the import is setup for the re-analysis row, not part of what is timed
    archive = args.out / "archives" / fleet.name
    shutil.rmtree(archive, ignore_errors=True)
    import_start = time.perf_counter()
    imp = subprocess.run(
        [*fr_otel, "import", str(fleet.dumps), "--archive", str(archive), "--incident", "bench"],
        capture_output=True,
        text=True,
        timeout=args.timeout,
    )
    import_s = time.perf_counter() - import_start
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "fr-otel-import.log").write_text(imp.stdout + imp.stderr)
    import_failed = None
    if imp.returncode != 0:
        detail = (imp.stderr.strip().splitlines() or ["?"])[-1][:120]
        import_failed = Verdict(f"import failed: {detail}", None)

    theirs: list[Row] = []
    if skip_fr_trace:
        theirs.append(Row(fleet, FR_TRACE, None, Verdict(skip_fr_trace, None)))
    else:  # minutes: run once
        cmd = [*_script("torchfrtrace", "torch.distributed.flight_recorder.fr_trace")]
        cmd += [str(fleet.dumps), "-p", PREFIX]
        if args.fr_trace_mismatch_cap is not None:
            cmd += ["--mismatch_cap", str(args.fr_trace_mismatch_cap)]
        run = run_measured(cmd, logs / "torchfrtrace", args.timeout)
        theirs.append(
            Row(fleet, FR_TRACE, run, fr_trace_verdict(run, fleet.culprits), [run.wall_s])
        )
        if fleet.world in args.full_fr_trace_sizes:
            full = [*cmd[: cmd.index("-p") + 2], "--mismatch_cap", str(FULL_CAP)]
            run = run_measured(full, logs / "torchfrtrace-full", args.timeout)
            theirs.append(
                Row(fleet, FR_TRACE_FULL, run, fr_trace_verdict(run, fleet.culprits), [run.wall_s])
            )

    # The floor and fr-otel take turns, round after round: this machine's speed drifts by
    # tens of percent within minutes, and a ratio of two runs minutes apart measured that
    # drift (the floor alone went from 0.91 s to 1.66 s between two runs)
    tools = {
        FLOOR: [
            sys.executable,
            "-c",
            FLOOR_CODE,
            str(fleet.dumps),
            PREFIX,
            str(args.floor_workers),
        ],
        OURS_E2E: [*fr_otel, "analyze", str(fleet.dumps), "--format", "json"],
    }
    if import_failed is None:
        tools[READ_FLOOR] = [
            sys.executable,
            "-c",
            READ_FLOOR_CODE,
            str(archive),
            ", ".join(first_pass_columns()),
        ]
        tools[OURS_ARCHIVE] = [*fr_otel, "analyze", str(archive), "--format", "json"]
    stems = {
        FLOOR: "floor",
        OURS_E2E: "fr-otel-dumps",
        READ_FLOOR: "floor-archive",
        OURS_ARCHIVE: "fr-otel-archive",
    }
    runs: dict[str, list[Measured]] = {tool: [] for tool in tools}
    for round_ in range(repeats):
        for tool, cmd in tools.items():
            stem = stems[tool] + (f"-{round_ + 1}" if repeats > 1 else "")
            runs[tool].append(run_measured(cmd, logs / stem, args.timeout))
    for tool in (FLOOR, OURS_E2E, READ_FLOOR, OURS_ARCHIVE):
        if tool not in runs:
            assert import_failed is not None
            rows.append(Row(fleet, tool, None, import_failed))
            continue
        done = runs[tool]
        judge = {FLOOR: floor_verdict, READ_FLOOR: read_floor_verdict}.get(tool)
        verdicts = [
            judge(r, fleet.world) if judge is not None else fr_otel_verdict(r) for r in done
        ]
        best = min(range(len(done)), key=lambda i: done[i].wall_s)
        verdict = verdicts[best]
        # a verdict that changed between runs is reported, whichever run was fastest
        if any(v.culprits != verdict.culprits or v.text != verdict.text for v in verdicts):
            worst = next((v for v in verdicts if not v.matches(fleet.culprits)), verdict)
            verdict = Verdict(
                f"verdicts differ between runs: {worst.text}", worst.culprits, worst.notes
            )
        if tool == OURS_ARCHIVE:
            verdict.notes.append(
                f"the archive's import (setup, not timed above) took {import_s:.2f} s"
            )
        rows.append(Row(fleet, tool, done[best], verdict, [r.wall_s for r in done]))
    return [rows[0], *theirs, *rows[1:]]


def _fmt_table(rows: list[Row]) -> str:
    w = max(len("fleet"), *(len(row.fleet.name) for row in rows)) + 2
    header = (
        f"{'fleet':<{w}}{'tool':<19}{'wall s':>9}{'CPU s':>8}{'max RSS MB':>12}{'max RSS MB':>12}"
        f"{'exit':>6}  {'truth?':<7}verdict"
    )
    sub = f"{'':<{w}}{'':<19}{'':>9}{'':>8}{'largest proc':>12}{'proc tree':>12}"
    lines = [header, sub, "-" * (w + 94)]
    for row in rows:
        r = row.run
        nums = (
            f"{r.wall_s:9.2f}{r.cpu_s:8.2f}{r.maxrss_mb:12.0f}{r.tree_mb:12.0f}{r.rc:6d}"
            if r is not None
            else f"{'-':>9}{'-':>8}{'-':>12}{'-':>12}{'-':>6}"
        )
        ok = "yes" if row.match else "-" if row.verdict.culprits is None else "NO"
        lines.append(f"{row.fleet.name:<{w}}{row.tool:<19}{nums}  {ok:<7}{row.verdict.text}")
    return "\n".join(lines)


def _find(rows: list[Row], world: int, tool: str) -> Row | None:
    return next((r for r in rows if r.fleet.world == world and r.tool == tool), None)


def _ok_run(row: Row | None) -> Measured | None:
    """The run behind a row, if it finished and gave a diagnosis (not a crash or timeout);
    for a floor, which diagnoses nothing, if it read everything."""
    if row is None or row.run is None or row.run.timed_out:
        return None
    if row.tool in FLOORS:
        return row.run if row.verdict.text.startswith("n/a") else None
    if row.verdict.culprits is None:
        return None
    return row.run


def _speedups(rows: list[Row], world: int) -> tuple[list[str], float | None]:
    """torchfrtrace wall / fr-otel end-to-end wall, as printed, and the one the goal uses
    (the full analysis where it was run)."""
    ours = _ok_run(_find(rows, world, OURS_E2E))
    parts: list[str] = []
    speedup: float | None = None
    for tool, label in ((FR_TRACE, "as run by default"), (FR_TRACE_FULL, "full analysis")):
        row = _find(rows, world, tool)
        if row is not None and row.run is None:
            parts.append(f"torchfrtrace {row.verdict.text}")
            continue
        theirs = _ok_run(row)
        if theirs is not None and ours is not None:
            ratio = theirs.wall_s / ours.wall_s
            parts.append(f"{ratio:.1f}x vs {label}")
            if tool == FR_TRACE_FULL or speedup is None:
                speedup = ratio
    return parts, speedup


def _floor_ratio(
    rows: list[Row],
    world: int,
    ours_tool: str = OURS_E2E,
    floor_tool: str = FLOOR,
    label: str = "floor",
) -> tuple[str, float | None]:
    """``ours_tool``'s wall / ``floor_tool``'s wall (called ``label``), as printed, and
    the ratio."""
    ours_row, floor_row = _find(rows, world, ours_tool), _find(rows, world, floor_tool)
    ours, floor = _ok_run(ours_row), _ok_run(floor_row)
    if floor is None or floor_row is None:
        return f"{label} n/a (it did not read everything)", None
    said = f"{label} {floor.wall_s:.2f} s, {floor.peak_mb:.0f} MB peak RSS"
    if ours is None or ours_row is None:
        return said + "; fr-otel gave no verdict", None
    ratio = ours.wall_s / floor.wall_s
    pairs = list(zip(ours_row.walls, floor_row.walls, strict=False))
    if len(pairs) > 1:
        said += "; fastest of each; round by round " + ", ".join(f"{o / f:.2f}x" for o, f in pairs)
    return f"{ratio:.2f}x the {label} ({said})", ratio


def report(rows: list[Row], sizes: list[int], big: bool, skip_fr_trace: bool) -> list[str]:
    """Speedups, the ratio to the floor and goal checks, as printed lines."""
    out: list[str] = [
        "",
        "fr-otel end to end vs torchfrtrace (its wall / ours) and vs the floor (ours / its):",
    ]
    worlds = [*sizes, *([BIG_WORLD] if big and BIG_WORLD not in sizes else [])]
    if not worlds:
        out.append("  none: no --sizes given")
    speedups: dict[int, float] = {}
    floors: dict[int, float] = {}
    for world in worlds:
        if skip_fr_trace:
            parts, speedup = ["torchfrtrace skipped (--skip-fr-trace)"], None
        else:
            parts, speedup = _speedups(rows, world)
        if speedup is not None:
            speedups[world] = speedup
        said, ratio = _floor_ratio(rows, world)
        if ratio is not None:
            floors[world] = ratio
        parts.append(said)
        out.append(f"  {world:>5} ranks: " + "; ".join(parts))

    out += ["", "goals (issue 19):"]
    at = f"{SPEEDUP_WORLD}x{ENTRIES}"
    if SPEEDUP_WORLD in speedups:
        s = speedups[SPEEDUP_WORLD]
        verdict = "met" if s >= SPEEDUP_GOAL else "NOT met"
        baseline = "full" if _find(rows, SPEEDUP_WORLD, FR_TRACE_FULL) else "default"
        out.append(
            f"  {at}: fr-otel end to end >= {SPEEDUP_GOAL:.0f}x faster than"
            f" torchfrtrace ({baseline} analysis): {s:.1f}x -> {verdict}"
        )
    else:
        out.append(
            f"  {at} speedup >= {SPEEDUP_GOAL:.0f}x: not checked"
            f" (needs size {SPEEDUP_WORLD} with both torchfrtrace and fr-otel giving a verdict)"
        )
    if SPEEDUP_WORLD in floors:
        f = floors[SPEEDUP_WORLD]
        out.append(
            f"  {at}: fr-otel end to end <= {FLOOR_GOAL:.0f}x the floor's wall time:"
            f" {f:.2f}x -> {'met' if f <= FLOOR_GOAL else 'NOT met'}"
        )
    else:
        out.append(
            f"  {at}: <= {FLOOR_GOAL:.0f}x the floor: not checked"
            f" (needs size {SPEEDUP_WORLD} with the floor and a fr-otel verdict)"
        )
    for world in worlds:
        run = _ok_run(_find(rows, world, OURS_ARCHIVE))
        if world != SPEEDUP_WORLD:
            if run is not None:  # the goal is stated for 256 ranks; others for information
                out.append(f"  {world}x{ENTRIES}: archive re-analysis (info): {run.wall_s:.2f} s")
            continue
        goal = f"  {world}x{ENTRIES}: archive re-analysis < {REANALYSIS_GOAL_S} s:"
        if run is None:
            out.append(f"{goal} NOT met (no successful run)")
            continue
        verdict = "met" if run.wall_s < REANALYSIS_GOAL_S else "NOT met"
        said, _ = _floor_ratio(rows, world, OURS_ARCHIVE, READ_FLOOR, "read floor")
        out.append(f"{goal} {run.wall_s:.2f} s -> {verdict} ({said})")
    goal = (
        f"  {BIG_WORLD}x{ENTRIES}: end to end < {BIG_WALL_GOAL_S:.0f} s and"
        f" < {BIG_RSS_GOAL_MB / 1024:.0f} GB peak RSS"
    )
    if BIG_WORLD in worlds:
        run = _ok_run(_find(rows, BIG_WORLD, OURS_E2E))
        if run is None:
            out.append(f"{goal}: NOT met (no successful run)")
        else:
            met = run.wall_s < BIG_WALL_GOAL_S and run.peak_mb < BIG_RSS_GOAL_MB
            out.append(
                f"{goal}: {run.wall_s:.1f} s, {run.peak_mb / 1024:.2f} GB (larger of the two"
                f" RSS columns) -> {'met' if met else 'NOT met'}"
            )
    else:
        out.append(f"{goal}: not checked (give --sizes {BIG_WORLD} or --big)")
    ours_rows = [r for r in rows if r.tool in (OURS_E2E, OURS_ARCHIVE)]
    out.append(
        "  fr-otel verdicts matching the ground truth:"
        f" {sum(r.match for r in ours_rows)}/{len(ours_rows)}"
    )
    theirs_rows = [r for r in rows if r.tool in (FR_TRACE, FR_TRACE_FULL) and r.run is not None]
    if theirs_rows:
        out.append(
            "  torchfrtrace verdicts matching the ground truth:"
            f" {sum(r.match for r in theirs_rows)}/{len(theirs_rows)}"
        )
    return out


def _parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None
    if any(s < 2 for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be at least 2 ranks, got {text!r}")
    return sizes


def _parse_faults(text: str) -> dict[int, str]:
    faults: dict[int, str] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        world, sep, kind = item.partition("=")
        if not sep or not world.strip().isdigit() or kind not in FAULT_KINDS:
            raise argparse.ArgumentTypeError(
                f"expected SIZE=FAULT items with FAULT in {FAULT_KINDS}, got {item!r}"
            )
        faults[int(world)] = kind
    return faults


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join((__doc__ or "").splitlines()[2:]),
    )
    parser.add_argument(
        "--sizes",
        type=_parse_sizes,
        default=list(DEFAULT_SIZES),
        help="comma-separated rank counts, each with 2000 entries (default: 64,256,1024;"
        " '' runs none, for --big alone)",
    )
    parser.add_argument(
        "--faults",
        type=_parse_faults,
        default={},
        help="fault per size as SIZE=FAULT,... (defaults: "
        + ", ".join(f"{w}={f}" for w, f in DEFAULT_FAULTS.items())
        + f"; other sizes cycle through {', '.join(FAULT_CYCLE)})",
    )
    parser.add_argument("--seed", type=int, default=0, help="simulator seed (default 0)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("bench-out/analyze"),
        help="fleets, archives, logs and results.json go here (default: bench-out/analyze)",
    )
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="per-command timeout in seconds (900)"
    )
    parser.add_argument("--skip-fr-trace", action="store_true", help="do not run torchfrtrace")
    parser.add_argument(
        "--repeat",
        type=int,
        default=REPEAT,
        help=f"rounds of the floor and fr-otel, interleaved, each tool's fastest reported"
        f" (default {REPEAT}; sizes over {REPEAT_MAX_WORLD} ranks run once; torchfrtrace once)",
    )
    parser.add_argument(
        "--fr-trace-max-size",
        type=int,
        default=FR_TRACE_MAX_SIZE,
        help=f"run torchfrtrace only up to this many ranks (default {FR_TRACE_MAX_SIZE}; it"
        " takes more than 10 minutes beyond)",
    )
    parser.add_argument(
        "--floor-workers",
        type=int,
        default=FLOOR_WORKERS,
        help=f"worker processes of the floor, a restricted unpickle of every dump"
        f" (default {FLOOR_WORKERS})",
    )
    parser.add_argument(
        "--fr-trace-mismatch-cap",
        type=int,
        default=None,
        help="pass --mismatch_cap N to torchfrtrace (default: not passed, its default is 10)",
    )
    parser.add_argument(
        "--full-fr-trace-sizes",
        type=_parse_sizes,
        default=[64, 256],
        help="sizes at which torchfrtrace also runs with its mismatch cap lifted, analysing the"
        " whole trace (default: 64,256; it takes minutes beyond)",
    )
    parser.add_argument(
        "--big",
        action="store_true",
        help=f"also run fr-otel alone on {BIG_WORLD} x {ENTRIES} (goal: < 120 s, < 4 GB)",
    )
    parser.add_argument(
        "--big-fault",
        choices=FAULT_KINDS[1:],
        default="skipped_collective",
        metavar="FAULT",
        help="fault for the --big fleet (default: skipped_collective)",
    )
    args = parser.parse_args(argv)
    args.out = args.out.resolve()

    plan: list[tuple[int, str, str | None]] = []
    for i, world in enumerate(args.sizes):
        fault = args.faults.get(world) or DEFAULT_FAULTS.get(world) or FAULT_CYCLE[i % 3]
        skip = "not run (--skip-fr-trace)" if args.skip_fr_trace else None
        if skip is None and world > args.fr_trace_max_size:
            skip = f"not run above {args.fr_trace_max_size} ranks (--fr-trace-max-size)"
        plan.append((world, fault, skip))
    if args.big and BIG_WORLD not in args.sizes:
        plan.append((BIG_WORLD, args.big_fault, "not run at this size: --big runs fr-otel alone"))
    if not plan:
        parser.error("nothing to run: give --sizes, or --sizes '' with --big")

    print(f"{os.cpu_count()} cores; output under {args.out}")
    # fr_otel's bytecode, as a regular pip install compiles it: an editable install where
    # no cache can be written (PYTHONDONTWRITEBYTECODE) compiles every module at every
    # start, 0.09 s a process, which users do not pay
    compileall.compile_dir(Path(fr_otel.__file__).parent, quiet=1)
    rows: list[Row] = []
    for world, fault, skip_fr_trace in plan:
        fleet = prepare_fleet(args.out, world, fault, args.seed)
        how = "reused" if fleet.reused else f"generated in {fleet.seconds:.1f} s (untimed)"
        print(f"fleet {fleet.name}: {how}; truth: {fleet.describe_truth()}", flush=True)
        fleet_rows = bench_fleet(fleet, args, skip_fr_trace=skip_fr_trace)
        for row in fleet_rows:
            wall = f"{row.run.wall_s:.2f} s ({row.run.cpu_s:.1f} CPU-s)" if row.run else "-"
            print(f"  {row.tool:<19}{wall:>22}  {row.verdict.text}", flush=True)
        rows += fleet_rows

    print()
    print(_fmt_table(rows))
    print(
        "max RSS largest proc: ru_maxrss via wait4 (max over the tool and its reaped"
        " descendants); proc tree: largest sampled sum of the tree's RSS"
        f" (every {SAMPLE_S * 1000:.0f} ms). truth?: verdict's culprit set == simulator's"
        " (-: no verdict)."
    )
    print()
    print("notes:")
    for row in rows:
        notes = list(row.verdict.notes)
        if len(row.walls) > 1:
            walls = ", ".join(f"{w:.2f}" for w in row.walls)
            notes.append(f"fastest of {len(row.walls)} interleaved runs ({walls} s)")
        if notes:
            print(f"  {row.fleet.name} {row.tool}: " + "; ".join(notes))
    for line in report(rows, args.sizes, args.big, args.skip_fr_trace):
        print(line)
    print(f"\nlogs: {args.out / 'logs'}")

    results = [
        {
            "fleet": row.fleet.name,
            "world": row.fleet.world,
            "fault": row.fleet.fault,
            "truth_culprits": sorted(row.fleet.culprits),
            "tool": row.tool,
            "cmd": row.run.cmd if row.run else None,
            "rc": row.run.rc if row.run else None,
            "timed_out": row.run.timed_out if row.run else None,
            "wall_s": row.run.wall_s if row.run else None,
            "walls_s": row.walls,
            "cpu_s": row.run.cpu_s if row.run else None,
            "maxrss_largest_process_mb": row.run.maxrss_mb if row.run else None,
            "maxrss_process_tree_sampled_mb": row.run.tree_mb if row.run else None,
            "verdict": row.verdict.text,
            "verdict_culprits": (
                sorted(row.verdict.culprits) if row.verdict.culprits is not None else None
            ),
            "matches_truth": row.match,
            "notes": row.verdict.notes,
        }
        for row in rows
    ]
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
