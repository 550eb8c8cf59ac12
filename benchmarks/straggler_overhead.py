"""What straggler analysis adds to ``fr-otel analyze`` (goal: at most 25%).

A simulated 1,024-rank job (2,000 FR entries per rank, one GPU-side straggler, per-host
clock skew) is written as dumps and imported into an archive (neither is timed). Then, in
one process, ``fr_otel.analysis.analyze`` runs on the archive alternately with the
straggler pass (the ``arrival`` relation and the ``straggler`` finding) and without it
(that pass replaced by nothing), ``--repeat`` times each after one untimed warm-up of each,
back to back in alternating order. The best time of each is reported, and the median of
the pairs' overhead, which a shared machine's changing load disturbs least:

    python benchmarks/straggler_overhead.py                 # 1024 x 2000 (a few minutes)
    python benchmarks/straggler_overhead.py --world 256 --entries 1000

The exit code is 1 when the overhead exceeds the goal or the straggler is not named.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fr_otel.analysis import analyze
from fr_otel.analysis import engine as analysis_engine
from fr_otel.archive.importer import import_dumps
from fr_otel.sim import FleetSpec, Straggler, simulate, write_fleet

GOAL = 0.25


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=1024)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="Keep the archive here.")
    args = parser.parse_args(argv)
    straggler = Straggler(rank=args.world // 3 + 1, delay_ms=10.0, side="gpu")
    spec = FleetSpec(
        world=args.world, entries=args.entries, stragglers=(straggler,), clock_skew_ms=200.0
    )
    with tempfile.TemporaryDirectory(prefix="fr-otel-bench-") as tmp:
        root = args.out or Path(tmp)
        dumps, archive = root / "dumps", root / "archive"
        if not archive.exists():
            t0 = time.perf_counter()
            write_fleet(simulate(spec), dumps)
            import_dumps([dumps], archive=archive, job="bench", incident="slow")
            print(
                f"simulated and imported {args.world} x {args.entries} in"
                f" {time.perf_counter() - t0:.0f} s (not timed)"
            )

        real_create, real_find = (
            analysis_engine.stragglers.create_arrival,
            analysis_engine.stragglers.stragglers,
        )

        def without() -> object:
            analysis_engine.stragglers.create_arrival = lambda *a, **k: None  # type: ignore[assignment]
            analysis_engine.stragglers.stragglers = lambda *a, **k: []  # type: ignore[assignment]
            try:
                return analyze(archive)
            finally:
                analysis_engine.stragglers.create_arrival = real_create  # type: ignore[assignment]
                analysis_engine.stragglers.stragglers = real_find  # type: ignore[assignment]

        def with_() -> object:
            return analyze(archive)

        named = [f.culprit_ranks for f in with_().findings if f.kind == "straggler"]  # type: ignore[attr-defined]
        without()
        plain, full, ratios = [], [], []
        for round_ in range(args.repeat):
            # back to back, in alternating order: on a shared machine the load changes from
            # one minute to the next, and a pair sees about the same
            if round_ % 2:
                full.append(_timed(with_))
                plain.append(_timed(without))
            else:
                plain.append(_timed(without))
                full.append(_timed(with_))
            ratios.append(full[-1] / plain[-1])
    base, total = min(plain), min(full)
    share = sorted(ratios)[len(ratios) // 2] - 1
    print(f"fr-otel analyze, {args.world} ranks x {args.entries} entries, best of {args.repeat}:")
    print(f"  without straggler analysis: {base:.2f} s")
    print(f"  with straggler analysis:    {total:.2f} s  (+{total / base - 1:.0%})")
    print(f"  median of the paired runs' overhead: +{share:.0%} (goal: at most +{GOAL:.0%})")
    print(f"  straggler named: {named} (injected: [{straggler.rank}])")
    ok = share <= GOAL and named == [[straggler.rank]]
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
