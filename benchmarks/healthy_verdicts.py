"""How often a healthy run is called healthy: the no-false-alarm rate, beside torchfrtrace's.

A tool that blames a healthy rank gets turned off, so this counts verdicts, not seconds.
Each healthy workload family of ``tests/workloads/`` (DDP, FSDP2, DTensor tensor parallel,
functional collectives, ``ProcessGroup`` methods, object collectives, a 2-D mesh,
pipelining, a compiled model, a data-dependent shuffle) runs ``--runs`` times under
``fr-otel run -- torchrun`` on real gloo ranks, in incident and in continuous mode (spans
to a real OTLP receiver in this process). After each run:

- ``fr-otel analyze ARCHIVE`` (no incident: it reads the rings) and ``fr-otel analyze
  ARCHIVE/_rings`` must exit 0;
- every rank's rings must hold every collective torch's Flight Recorder held at the end
  (the scripts dump torch's buffer last, ``FR_DUMP_DIR``);
- the live check of ``fr-otel run`` (stalls past ``LIVE_STALL_S``, 8 s) must have said
  nothing and left no record;
- the peer's figure from the same run: ``torchfrtrace`` over those torch dumps, healthy
  when it reports no mismatch, counted apart when it crashes.

Prints one line per (family, mode): the runs, how many each check passed, and the
failures' first lines. ``--families`` and ``--modes`` narrow it down.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyze_vs_fr_trace import _fr_blocks, _script  # noqa: E402

from fr_otel.cli import main  # noqa: E402
from fr_otel.dumps.safe_pickle import loads_plain  # noqa: E402
from fr_otel.recorder.ring import read_ring, ring_bases  # noqa: E402
from tests.jobs import environment, torchrun  # noqa: E402
from tests.otlp_receiver import OtlpReceiver  # noqa: E402

WORKLOADS = ROOT / "tests" / "workloads"
FAMILIES = [
    "ddp",
    "fsdp2",
    "dtensor_tp",
    "functional",
    "pg_methods",
    "objects",
    "mesh2d",
    "pipelining",
    "compiled",
    "data_shuffle",
]
WORLD = {"mesh2d": 4, "pipelining": 2}
LIVE_STALL_S = 8


def _quiet_main(arguments: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(arguments)
    return code, (out.getvalue() + err.getvalue()).strip()


def _torch_held(dumps: Path, rank: int) -> set[tuple[str, int]]:
    path = dumps / f"comm_lib_trace_rank_{rank}"
    entries = loads_plain(path.read_bytes()).get("entries", []) if path.exists() else []
    return {
        (str(e["process_group"][0]), e["collective_seq_id"]) for e in entries if not e.get("is_p2p")
    }


def _fr_trace_healthy(dumps: Path) -> bool | None:
    """torchfrtrace's verdict on the torch dumps: True when no report block names a rank
    and nothing is reported as a mismatch; None when it crashed."""
    done = subprocess.run(
        [
            *_script("torchfrtrace", "torch.distributed.flight_recorder.fr_trace"),
            str(dumps),
            "-p",
            "comm_lib_trace_rank_",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    text = done.stdout + "\n" + done.stderr
    if done.returncode != 0 or "Traceback (most recent call last):" in text:
        return None
    lines = text.splitlines()
    return not _fr_blocks(lines) and not any(line.startswith("MISMATCH") for line in lines)


def one_run(family: str, mode: str, receiver: OtlpReceiver, folder: Path) -> dict[str, object]:
    archive, dumps = folder / "archive", folder / "fr"
    env = {
        "FAULT": "none",
        "PG_TIMEOUT": "6",
        "FR_DUMP_DIR": str(dumps),
        "OMP_NUM_THREADS": "1",
        "FR_OTEL_MODE": mode,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        # the live check runs too, with stalls named past 8 s rather than 30
        "FR_OTEL_LIVE_STALL_S": str(LIVE_STALL_S),
    }
    with environment(env):
        command = torchrun(WORKLOADS / f"{family}.py", WORLD.get(family, 3))
        code, log = _quiet_main(["run", "--job", family, "--archive", str(archive), "--", *command])
    result: dict[str, object] = {"run": code == 0}
    said = [line for line in log.splitlines() if line.startswith("fr-otel: live: ")]
    result["live"] = not said and not (archive / "_live").exists()
    if not result["live"]:
        result["why"] = [f"live check: {said[0] if said else 'a record under _live'}"]
    if code != 0:
        result.setdefault("why", []).extend(  # type: ignore[union-attr]
            log.splitlines()[-1:] if log else ["no output"]
        )
        return result
    complete = True
    for base in ring_bases(archive / "_rings", family):
        contents = read_ring(base)
        names = {i: g.name for i, g in contents.groups.items()}
        held = {(names[s[1]], s[2]) for s in contents.slots if s[6] < 0}
        complete &= _torch_held(dumps, contents.rank) <= held
    result["complete"] = complete
    for name, path in (("archive", archive), ("rings", archive / "_rings")):
        verdict, text = _quiet_main(["analyze", str(path), "--job", family])
        result[name] = verdict == 0
        if verdict != 0:
            result.setdefault("why", []).append(
                f"{name}: {text.splitlines()[0] if text else verdict}"
            )  # type: ignore[union-attr]
    result["fr_trace"] = _fr_trace_healthy(dumps)
    return result


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--families", nargs="*", default=FAMILIES)
    parser.add_argument("--modes", nargs="*", default=["incident", "continuous"])
    options = parser.parse_args(argv)
    print(
        f"{'family':<13}{'mode':<11}{'runs':>5}{'ran':>5}{'rings>=FR':>10}"
        f"{'archive ok':>11}{'rings ok':>9}{'live quiet':>11}{'fr_trace ok':>12}{'crashed':>8}"
        "  (seconds)"
    )
    failed = 0
    with OtlpReceiver(protocol="grpc").start() as receiver:
        for family in options.families:
            for mode in options.modes:
                tally: Counter[str] = Counter()
                reasons: list[str] = []
                started = time.monotonic()
                for _ in range(options.runs):
                    with tempfile.TemporaryDirectory(prefix="fr-otel-healthy-") as folder:
                        result = one_run(family, mode, receiver, Path(folder))
                    for key, value in result.items():
                        if value is True:
                            tally[key] += 1
                    if result.get("fr_trace", False) is None:
                        tally["fr_trace_crashed"] += 1
                    reasons += [str(r) for r in result.get("why", [])]  # type: ignore[union-attr]
                runs = options.runs
                ok = (
                    tally["run"]
                    == tally["archive"]
                    == tally["rings"]
                    == tally["complete"]
                    == tally["live"]
                    == runs
                )
                failed += not ok
                print(
                    f"{family:<13}{mode:<11}{runs:>5}{tally['run']:>5}{tally['complete']:>10}"
                    f"{tally['archive']:>11}{tally['rings']:>9}{tally['live']:>11}"
                    f"{tally['fr_trace']:>12}"
                    f"{tally['fr_trace_crashed']:>8}"
                    f"  ({time.monotonic() - started:.0f})",
                    flush=True,
                )
                for reason in reasons[:3]:
                    print(f"    {reason}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main_())
