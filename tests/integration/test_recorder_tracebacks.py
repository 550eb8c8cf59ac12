"""What a user's traceback shows of the recorder when a collective raises: real 2-rank gloo
jobs whose collectives really fail (gloo timeouts while the peer waits elsewhere, a size
checked in the caller), under ``fr_otel.install()``.

People read a traceback from the bottom and blame the last library named there. Where the
compiled hook is built, no frame of the recorder is on the stack while the collective runs,
whichever way the call went (the C path, or the Python code that records a call the C
path does not know); in pure Python, the one frame the recorder must own is named to say
it only records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fr_otel.demo.recorded_job import free_port
from fr_otel.recorder.capture import RECORDS_ONLY_NAME
from tests.jobs import STEERING

pytestmark = pytest.mark.gloo

_JOB = textwrap.dedent(
    """
    import datetime, json, os, sys, traceback
    import torch, torch.distributed as dist, fr_otel

    recorder = fr_otel.install()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    short = datetime.timedelta(seconds=1)
    # one group per failure: a group whose op timed out is left broken
    fast, slow, p2p, monitored = (dist.new_group([0, 1], timeout=short) for _ in range(4))

    def shown(call):
        try:
            call()
        except Exception as exc:
            return "".join(traceback.format_exception(exc))
        return None

    x = torch.ones(4)
    store = dist.distributed_c10d._get_default_store()
    # the compiled hook knows a call by its frame and instruction: the warm-up and the
    # failing call come from one line of one frame
    for step in range(4):
        if step == 3:
            if rank == 1:  # takes part in nothing more, and stays until rank 0 is done
                store.wait(["done"], datetime.timedelta(seconds=60))
                store.set("bye", "1")  # rank 0 holds the store: it ends after this
                os._exit(0)
            recorded = getattr(dist.all_reduce, "recorded", None)
        try:
            dist.all_reduce(x, group=fast)
        except Exception as exc:  # the call rank 1 no longer joins: a gloo timeout
            fast_failure = "".join(traceback.format_exception(exc))
    tracebacks = {
        "fast": fast_failure,
        "fast_recorded": None if recorded is None else dist.all_reduce.recorded - recorded,
        # FSDP2's all-gather (all_gather_into_tensor calls all_gather_single), first call
        "slow": shown(
            lambda: dist.all_gather_into_tensor(torch.empty(16), torch.ones(8), group=slow)
        ),
        "recv": shown(lambda: dist.recv(torch.empty(2), src=1, group=p2p)),
        "monitored_barrier": shown(lambda: dist.monitored_barrier(monitored, timeout=short)),
        # checked in the caller: the output is not twice the input
        "size": shown(lambda: dist.all_gather_into_tensor(torch.empty(3), torch.ones(2))),
    }
    from fr_otel.recorder.slot import FAILED

    failed = [s[0] for s in recorder.ring.slots() if s[9] == FAILED]
    print(json.dumps({
        "compiled": recorder.capture.compiled,
        "tracebacks": tracebacks,
        # every failure recorded as the op's, with its error, and none of the recorder's
        "failed": len(failed),
        "noted": sorted(recorder.ring.snapshot().errors) == failed,
        "recorder_errors": recorder.stats.recorder_errors,
    }))
    sys.stdout.flush()
    store.set("done", "1")
    store.wait(["bye"], datetime.timedelta(seconds=60))
    os._exit(0)
    """
)


def _run(tmp_path: Path, **env: str) -> dict[str, object]:
    """Rank 0's report of a 2-rank job of ``_JOB``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(STEERING)}
    environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE="2",
        OMP_NUM_THREADS="1",
        FR_OTEL_ARCHIVE=str(tmp_path / "archive"),
        FR_OTEL_FLUSH_DEADLINE="1",
        **env,
    )
    # a file: the call site of code run by ``-c`` ("<string>") counts as a library's,
    # which the compiled hook leaves to the Python code
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script)],
            env=dict(environ, RANK=str(rank)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = []
    try:
        for rank in ranks:
            outputs.append(rank.communicate(timeout=120))
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
                rank.wait()
    (out, err), (_, err1) = outputs
    assert [rank.returncode for rank in ranks] == [0, 0], err[-3000:] + err1[-3000:]
    report: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return report


def _recorder_frames(text: str) -> list[str]:
    """The traceback's ``File ...`` lines in the recorder's own package."""
    return [
        line.strip()
        for line in text.splitlines()
        if line.lstrip().startswith("File ") and f"fr_otel{os.sep}recorder" in line
    ]


def _tracebacks(report: dict[str, object]) -> dict[str, str]:
    """The job's tracebacks, once its failures are seen recorded as before."""
    tracebacks = dict(report["tracebacks"])  # type: ignore[call-overload]
    assert (report["failed"], report["noted"], report["recorder_errors"]) == (
        len(tracebacks) - 1,
        True,
        0,
    ), report
    fast_recorded = tracebacks.pop("fast_recorded")
    if report["compiled"]:
        assert fast_recorded == 1  # the failing call took the compiled path
    for name, text in tracebacks.items():
        assert text is not None, f"{name} did not raise"
    return tracebacks


def test_the_compiled_hook_leaves_no_recorder_frame_in_a_failed_collective(
    tmp_path: Path,
) -> None:
    report = _run(tmp_path)
    assert report["compiled"], "the compiled hook was not built"
    tracebacks = _tracebacks(report)
    assert "Timed out" in tracebacks["fast"], tracebacks["fast"]
    for name, text in tracebacks.items():
        assert _recorder_frames(text) == [], f"{name}:\n{text}"


def test_pure_python_names_its_one_frame_as_only_recording(tmp_path: Path) -> None:
    report = _run(tmp_path, FR_OTEL_PURE_PYTHON="1")
    assert not report["compiled"]
    for name, text in _tracebacks(report).items():
        frames = _recorder_frames(text)
        assert len(frames) == 1, f"{name}:\n{text}"
        assert frames[0].endswith(f"in {RECORDS_ONLY_NAME}"), f"{name}:\n{text}"
