"""Real multi-process torch.distributed jobs on gloo, each with one injected fault, that
write real Flight Recorder dumps.

``run_scenario(name, outdir)`` starts ``world`` ranks as ``python -m fr_otel.demo.gloo_job
worker ...`` subprocesses (subprocesses rather than multiprocessing so that it behaves the same
under pytest, a console script and a REPL), waits for every rank to dump, and returns the
paths written. The scenarios and their ground truth are in :mod:`fr_otel.demo.scenarios`;
what one rank does is in :mod:`fr_otel.demo._worker`. POSIX only (it freezes ranks with
SIGSTOP). ``python -m fr_otel.demo.gloo_job run NAME OUTDIR`` runs one from a shell.

Why the choreography (observed with torch 2.13.0+cpu, 2 cores):

* **A real mismatch kills a peer, not the culprit.** When ranks really exchange a mismatched
  all_reduce (1001 against 1000 floats), the receiving peer dies at once with
  ``terminate called after throwing an instance of 'gloo::EnforceNotMet' ... pair.cc:456
  op.preamble.length <= op.nbytes. 664 vs 660. Received data size doesn't match expected
  size`` (SIGABRT, thrown on gloo's transport thread where nothing catches it). NCCL would
  hang instead. A peer that is still running when the culprit acts can die before it dumps.
* **The first dump with stack traces is slow.** The first
  ``_dump_fr_trace(includeStackTraces=True)`` in a process spends on the order of a second
  of CPU setting up the symbolizer (longer in wall time when ranks share few cores); the
  same with ``TORCH_SYMBOLIZE_MODE`` set to fast, dladdr or addr2line. Later dumps take
  around a millisecond, as does any dump without stack traces. Culprits therefore make a
  throw-away dump while they wait.
* **Letting peers exit first makes retired racy.** If the peers have exited, the culprit's
  collective fails at once with ``Connection closed by peer`` (an IoException, which gloo
  catches, so nothing aborts). Gloo then retires it within microseconds, racing the dump, so
  ``retired`` would vary from run to run.
* **What the protocol does.** Peers dump, then the launcher freezes them with SIGSTOP. Their
  sockets stay open, so the culprit's collective neither completes nor fails, and every dump
  is deterministic. 45 runs (5 per scenario) plus world-3, world-4, world-6 and world-8
  variants gave identical entry counts and in-flight entries every time, with no failures.
* **Dump contents.**
  - Version ``"2.10"``. Pickle keys: ``version``, ``pg_config``, ``comm_lib_version`` (``''``),
    ``pg_status`` and ``entries``. The JSON adds ``nccl_comm_state: {}``, has no ``frames``,
    writes ``process_group`` as a list and ``time_discovered_*`` as 0, and stores
    ``pg_status`` values as strings.
  - Every entry is ``state='scheduled'``, with no ``duration_ms``. ``retired`` is True for
    completed collectives and False for the fault's collectives, on every rank that issued
    them.
  - ``timeout_ms`` is 60000 (``PG_TIMEOUT_S``) on every entry, subgroups included.
    ``thread_name`` is ``'python'``.
* **The faulty collective's own entry is there.** A collective is recorded at enqueue,
  before any data moves, so the culprit's entry has its own sizes, dtype and op:
  - size: ``[[1000]]`` against ``[[1024]]``;
  - dtype: ``BFloat16`` against ``Float``;
  - op type: ``gloo:all_gather`` with ``[[1024]] -> [[3, 1024]]`` against
    ``gloo:all_reduce``;
  - all_to_all: ``[[9]] -> [[8]]`` against ``[[8]] -> [[8]]`` at world 4. Only totals are
    recorded, never the splits.
* **Missing and skipped collectives leave no entry.** A missing rank simply has no entry
  for the seq. A rank that skipped one has its later collectives shifted one seq down (its
  seq 7 matches the peers' seq 8).
* **pg_status counts op ids.** Its counters are gloo's op id (``seq_``), not
  ``collective_seq_id``.
  - With seq 7 in flight, ranks 2 and up show default group (enqueued 7, completed 6), but
    ranks 0 and 1 show (8, 7) because of the send/recv.
  - The gap between the two marks the collectives in flight.
    ``last_started_collective`` is always -1.
  - ``last_completed_collective`` can lag behind a retired entry: once, front_group showed
    (enqueued 2, completed 1) with both entries retired. Gloo's two worker threads each
    write it, and the last writer wins.
* **pg_config.** It is ``{'': {'name': '', 'desc': '', 'ranks': '[]'}}`` on every rank,
  because every rank belongs to some subgroup (a rank in no subgroup keeps
  ``'[0, 1, ..., world-1]'``).
* **pg_id is local.** back_group is pg 2 on ranks 1..world-2 but pg 1 on rank world-1.
  The ``process_group`` name (``'2'``) and desc agree across ranks. Ranks outside a
  subgroup have no entries for it.
* **send/recv are not recorded, but they use up an op id.** After the warm-up's send/recv,
  ranks 0 and 1 record ``op_id = collective_seq_id + 1`` in default_pg; the other ranks
  record ``op_id == collective_seq_id``.
* **How gloo records some collectives.**
  - ``reduce_scatter_tensor`` is recorded as ``gloo:all_reduce`` with input
    ``[[64*world]]``.
  - ``all_gather_into_tensor`` and the list ``all_gather`` are both recorded as
    ``gloo:all_gather``, with output ``[[group_size, n]]``.
* **Entry counts per rank.** Warm-up: 8 entries on rank 0 and on the last rank, 10 on the
  ranks in between (members of both subgroups). The fault step adds 0 to 3 entries.
* **Timing.** A scenario's time is mostly importing torch and, with stack traces on, the
  first, symbolizing dump; with them off it is mostly the import. It grows with the world
  where ranks outnumber the cores, each rank importing torch on its own.
* **fr_trace disagrees with the ground truth.** torch's ``fr_trace``, run on these dumps with
  pg_config patched, finds every fault, but in size_mismatch and skipped_collective it
  blames every peer (ranks 0 and 2; ranks 0, 2 and 3), because it takes the odd rank's
  entry as the reference.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import fr_otel
from fr_otel.demo.naming import NAMINGS, dump_relpath
from fr_otel.demo.scenarios import MAX_WORLD, MIN_WORLD, SCENARIOS, Scenario

__all__ = ["NAMINGS", "SCENARIOS", "Scenario", "dump_relpath", "run_scenario"]

#: Gloo process-group timeout inside the ranks. Short, so that a bug in the choreography fails
#: in a minute rather than torch's default 30; long enough that no op of ours ever times out.
PG_TIMEOUT_S = 60.0
#: Launcher poll interval.
_POLL_S = 0.02
#: How many lines of each rank's log go into an error message.
_LOG_TAIL_LINES = 30


def run_scenario(
    name: str,
    outdir: Path,
    *,
    world: int | None = None,
    naming: str = "torch_default",
    stack_traces: bool = True,
    json_too: bool = True,
    timeout_s: float = 120,
) -> list[Path]:
    """Run scenario ``name`` with ``world`` gloo ranks and write every rank's FR dumps.

    Each rank writes a pickle dump (``_dump_fr_trace(includeCollectives=True,
    includeStackTraces=stack_traces)``) and, if ``json_too``, a JSON dump
    (``_dump_fr_trace_json()``) under ``outdir``, named by ``naming`` (see
    :mod:`fr_otel.demo.naming`). Returns the paths, rank by rank, pickle before JSON.

    Raises ``ValueError`` for a bad argument, and ``RuntimeError`` (with the tail of each
    failed rank's output) when torch is missing, a rank dies before dumping or the job runs
    past ``timeout_s``. Every rank process is gone when this returns or raises.
    """
    scenario = SCENARIOS.get(name)
    if scenario is None:
        raise ValueError(f"name must be one of {sorted(SCENARIOS)}, not {name!r}")
    if naming not in NAMINGS:
        raise ValueError(f"naming must be one of {NAMINGS}, not {naming!r}")
    world = scenario.world if world is None else world
    if not MIN_WORLD <= world <= MAX_WORLD:
        raise ValueError(f"world must be between {MIN_WORLD} and {MAX_WORLD}, not {world}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, not {timeout_s}")
    if importlib.util.find_spec("torch") is None:
        raise RuntimeError(f"the gloo demo needs torch: {fr_otel.TORCH_EXTRA_HINT}")
    if not hasattr(signal, "SIGSTOP"):
        raise RuntimeError("the gloo demo needs a POSIX system (it freezes ranks with SIGSTOP)")

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fr_otel_gloo_") as tmp:
        _Job(scenario, world, Path(tmp), outdir, naming, stack_traces, json_too, timeout_s).run()

    paths: list[Path] = []
    for rank in range(world):
        paths.append(outdir / dump_relpath(naming, rank))
        if json_too:
            paths.append(outdir / dump_relpath(naming, rank, json=True))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise RuntimeError(f"gloo scenario {name!r} finished but dumps are missing: {missing}")
    return paths


@dataclass(eq=False)
class _Job:
    """The launcher side of the protocol described in :mod:`fr_otel.demo._worker`."""

    scenario: Scenario
    world: int
    workdir: Path
    outdir: Path
    naming: str
    stack_traces: bool
    json_too: bool
    timeout_s: float
    procs: list[subprocess.Popen[bytes]] = field(init=False, default_factory=list)
    frozen: set[int] = field(init=False, default_factory=set)

    def _log(self, rank: int) -> Path:
        return self.workdir / f"rank_{rank}.log"

    def _done(self, rank: int) -> bool:
        return (self.workdir / f"rank_{rank}.done").exists()

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # The ranks must import this very fr_otel, installed or not.
        src = str(Path(fr_otel.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        env["TORCH_FR_BUFFER_SIZE"] = "2000"
        env["PYTHONUNBUFFERED"] = "1"
        # Up to 8 ranks share a few cores; intra-op threads would only fight each other.
        env.setdefault("OMP_NUM_THREADS", "1")
        return env

    def _start(self) -> None:
        env = self._env()
        for rank in range(self.world):
            cmd = [
                sys.executable, "-m", "fr_otel.demo.gloo_job", "worker",
                "--scenario", self.scenario.name,
                "--rank", str(rank),
                "--world", str(self.world),
                "--workdir", str(self.workdir),
                "--outdir", str(self.outdir),
                "--naming", self.naming,
                "--pg-timeout-s", str(PG_TIMEOUT_S),
                # The launcher's own timeout fires first; this is the backstop.
                "--deadline-s", str(self.timeout_s + 15),
            ]  # fmt: skip
            if not self.stack_traces:
                cmd.append("--no-stack-traces")
            if not self.json_too:
                cmd.append("--no-json")
            with self._log(rank).open("wb") as log:
                # A session of its own: Ctrl-C reaches only the launcher, which then kills the
                # ranks; and if the launcher is killed, the kernel hangs up on the orphaned,
                # frozen ranks (SIGHUP + SIGCONT), so they cannot linger stopped forever.
                self.procs.append(
                    subprocess.Popen(
                        cmd,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                    )
                )

    def _freeze(self, rank: int) -> None:
        pid = self.procs[rank].pid
        os.kill(pid, signal.SIGSTOP)
        # The culprit must not act before the peer has really stopped.
        stat = Path(f"/proc/{pid}/stat")
        if not stat.exists():  # no procfs (macOS): a generous pause instead
            time.sleep(0.2)
        else:
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                try:
                    state = stat.read_text().rsplit(")", 1)[1].split()[0]
                except (OSError, IndexError):
                    break
                if state in ("T", "t"):
                    break
                time.sleep(0.002)
        self.frozen.add(rank)

    def _tail(self, rank: int) -> str:
        try:
            lines = self._log(rank).read_text(errors="replace").splitlines()
        except OSError:
            return "(no output)"
        return "\n".join(lines[-_LOG_TAIL_LINES:]) or "(no output)"

    def _failure(self, why: str, ranks: Sequence[int]) -> RuntimeError:
        parts = [f"gloo scenario {self.scenario.name!r} (world {self.world}): {why}"]
        for rank in ranks:
            parts.append(f"--- rank {rank} output (last {_LOG_TAIL_LINES} lines) ---")
            parts.append(self._tail(rank))
        return RuntimeError("\n".join(parts))

    def run(self) -> None:
        culprits = set(self.scenario.culprit_ranks)
        peers = [r for r in range(self.world) if r not in culprits]
        deadline = time.monotonic() + self.timeout_s
        go_written = False
        released = False
        try:
            self._start()
            while True:
                done = {r for r in range(self.world) if self._done(r)}
                if culprits:
                    for rank in peers:
                        if rank in done and rank not in self.frozen:
                            self._freeze(rank)
                    if not go_written and all(r in self.frozen for r in peers):
                        (self.workdir / "go").touch()
                        go_written = True
                if len(done) == self.world:
                    break
                dead = [
                    r
                    for r, p in enumerate(self.procs)
                    if p.poll() is not None and r not in done and not self._done(r)
                ]
                if dead:
                    codes = ", ".join(f"rank {r}: {self.procs[r].returncode}" for r in dead)
                    raise self._failure(f"rank(s) exited before dumping ({codes})", dead)
                if time.monotonic() > deadline:
                    late = [r for r in range(self.world) if r not in done]
                    raise self._failure(
                        f"timed out after {self.timeout_s:g} s; no dump yet from ranks {late}",
                        late,
                    )
                time.sleep(_POLL_S)
            (self.workdir / "release").touch()
            released = True
        finally:
            self._stop_all(grace_s=5.0 if released else 0.0)

    def _stop_all(self, grace_s: float) -> None:
        # Frozen ranks hold collectives that can never finish: kill them. After a success the
        # others were told to exit through the release file; give them a moment, then kill
        # whatever is left. After a failure nobody is waited for.
        for rank, p in enumerate(self.procs):
            if (rank in self.frozen or grace_s == 0) and p.poll() is None:
                p.kill()
        end = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m fr_otel.demo.gloo_job run NAME OUTDIR`` (and the internal ``worker``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["worker"]:
        from fr_otel.demo import _worker  # imports torch only inside the rank

        _worker.main(args[1:])
    p = argparse.ArgumentParser(prog="python -m fr_otel.demo.gloo_job")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run one scenario and print the dump paths")
    r.add_argument("name", choices=list(SCENARIOS))
    r.add_argument("outdir", type=Path)
    r.add_argument("--world", type=int)
    r.add_argument("--naming", default="torch_default", choices=NAMINGS)
    r.add_argument("--no-stack-traces", action="store_true")
    r.add_argument("--no-json", action="store_true")
    r.add_argument("--timeout-s", type=float, default=120.0)
    sub.add_parser("list", help="list the scenarios")
    a = p.parse_args(args)
    if a.cmd == "list":
        for s in SCENARIOS.values():
            print(f"{s.name:24} world {s.world}  {s.description}")
        return
    t0 = time.monotonic()
    paths = run_scenario(
        a.name,
        a.outdir,
        world=a.world,
        naming=a.naming,
        stack_traces=not a.no_stack_traces,
        json_too=not a.no_json,
        timeout_s=a.timeout_s,
    )
    for path in paths:
        print(path)
    print(f"{a.name}: {len(paths)} files in {time.monotonic() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
