"""How the ``fr-otel`` process ends: after ``analyze``, without the interpreter's teardown,
but with its whole output, its exit code and its exit handlers. Real processes."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import subprocess
import sys
import textwrap
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from fr_otel.cli import main
from fr_otel.cli._gc import YOUNG_ALLOCATIONS

DUMPS = Path(__file__).resolve().parents[1] / "data" / "gloo_skipped_collective"


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def _analyze_process(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``fr-otel analyze DUMPS --format json`` as its own process."""
    return subprocess.run(
        [sys.executable, "-m", "fr_otel", "analyze", str(DUMPS), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


def test_analyze_as_a_process_writes_what_it_writes_in_process() -> None:
    done = _analyze_process()
    in_process = io.StringIO()
    with redirect_stdout(in_process):
        code = main(["analyze", str(DUMPS), "--format", "json"])
    assert (done.returncode, code) == (1, 1)  # findings, both ways
    assert json.loads(done.stdout) == json.loads(in_process.getvalue())
    assert json.loads(done.stdout)["findings"]
    assert "Traceback" not in done.stderr


def test_a_quick_end_flushes_output_and_runs_exit_handlers(tmp_path: Path) -> None:
    done = _python(
        """
        import atexit, sys
        from pathlib import Path
        from fr_otel.cli._exit import end, may_end_quickly
        atexit.register(lambda: Path("handler-ran").write_text("yes"))
        sys.stdout.write("x" * 100_000)  # still in the buffer
        sys.stderr.write("said")
        may_end_quickly()
        end(5)
        """,
        tmp_path,
    )
    assert done.returncode == 5
    assert done.stdout == "x" * 100_000 and done.stderr == "said"
    assert (tmp_path / "handler-ran").read_text() == "yes"


def test_a_thread_still_running_is_waited_for(tmp_path: Path) -> None:
    done = _python(
        """
        import threading, time
        from pathlib import Path
        from fr_otel.cli._exit import end, may_end_quickly

        def finish():
            time.sleep(0.3)
            Path("thread-done").write_text("yes")

        threading.Thread(target=finish).start()
        may_end_quickly()
        end(4)
        """,
        tmp_path,
    )
    assert done.returncode == 4
    assert (tmp_path / "thread-done").read_text() == "yes"


_TORN_DOWN = """
import sys
from fr_otel.cli._exit import end, may_end_quickly

class Held:
    def __del__(self):  # runs when the interpreter frees module objects at its teardown
        sys.stdout.write("torn down")

held = Held()
{allow}
end(2)
"""


def test_a_quick_end_skips_the_teardown(tmp_path: Path) -> None:
    done = _python(_TORN_DOWN.format(allow="may_end_quickly()"), tmp_path)
    assert (done.returncode, done.stdout) == (2, "")


def test_a_command_that_did_not_allow_it_ends_as_usual(tmp_path: Path) -> None:
    done = _python(_TORN_DOWN.format(allow=""), tmp_path)
    assert (done.returncode, done.stdout) == (2, "torn down")


def test_the_verdict_is_written_before_the_analysis_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Closing the analysis (DuckDB's tables, for dumps the temporary archive) took 0.8 s
    at 8,192 ranks: the verdict does not wait for it."""
    import fr_otel.analysis.source as source

    out = io.StringIO()
    at_close: list[str] = []
    connect = source.connect

    def recording(stack: contextlib.ExitStack, memory_limit: str | None = None, **how: Any) -> Any:
        connection = connect(stack, memory_limit, **how)
        stack.callback(lambda: at_close.append(out.getvalue()))  # runs before the close
        return connection

    monkeypatch.setattr(source, "connect", recording)
    with redirect_stdout(out):
        code = main(["analyze", str(DUMPS), "--format", "json"])
    assert code == 1
    [written] = at_close
    assert json.loads(written)["findings"], "the whole verdict, when closing began"


_LEFT = """
import sys, tempfile
from pathlib import Path
from fr_otel.cli._errors import state
from fr_otel.cli._exit import end, leave_to_exit, may_end_quickly
import contextlib

class Closed:
    def __exit__(self, *exc):  # as a DuckDB connection's close
        sys.stdout.write("closed")
    def __enter__(self):
        return self

state.process_ends = {ends}
stack = contextlib.ExitStack()
folder = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=".")))
(folder / "scratch.arrow").write_text("rows")
stack.enter_context(Closed())
may_end_quickly()
with stack:
    leave_to_exit(stack)
end(1)
"""


def test_what_a_quick_end_holds_is_left_to_it_but_temporary_folders_go(tmp_path: Path) -> None:
    done = _python(_LEFT.format(ends=True), tmp_path)
    assert (done.returncode, done.stdout) == (1, "")  # never closed one by one
    assert list(tmp_path.iterdir()) == []  # the folder removed at exit all the same


def test_in_process_callers_still_close_what_the_command_holds(tmp_path: Path) -> None:
    done = _python(_LEFT.format(ends=False), tmp_path)
    assert (done.returncode, done.stdout) == (1, "closed")
    assert list(tmp_path.iterdir()) == []


def test_analyze_as_a_process_leaves_no_temporary_folder(tmp_path: Path) -> None:
    import os

    from fr_otel.archive import scratch

    shared = scratch.MEMORY_FOLDER
    before = set(os.listdir(shared)) if shared.is_dir() else set()
    done = _analyze_process({**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 1, done.stderr
    assert list(tmp_path.iterdir()) == []  # DuckDB's spill folder
    after = set(os.listdir(shared)) if shared.is_dir() else set()
    assert not {n for n in after - before if n.startswith("fr-otel-")}  # the scratch archive


def test_analyze_as_a_process_collects_cycles_rarely(tmp_path: Path) -> None:
    """The console script's ``analyze`` raises the youngest generation's threshold
    (``cli._gc``): its imports and outcomes made 70 collections of this small incident,
    not counting the command line's own import."""
    done = _python(
        f"""
        import atexit, gc, json, sys
        from pathlib import Path
        from fr_otel.cli import entry
        before = gc.get_stats()[0]["collections"]
        def said():
            young = gc.get_stats()[0]["collections"] - before
            Path("gc.json").write_text(json.dumps([gc.get_threshold(), young]))
        atexit.register(said)
        sys.argv = ["fr-otel", "analyze", {str(DUMPS)!r}, "--format", "json"]
        entry()
        """,
        tmp_path,
    )
    assert done.returncode == 1, done.stderr
    threshold, young_collections = json.loads((tmp_path / "gc.json").read_text())
    assert threshold[0] == YOUNG_ALLOCATIONS
    assert young_collections < 10


def test_in_process_callers_keep_their_collection_pace() -> None:
    before = gc.get_threshold()
    with redirect_stdout(io.StringIO()):
        assert main(["analyze", str(DUMPS), "--format", "json"]) == 1
    assert gc.get_threshold() == before
