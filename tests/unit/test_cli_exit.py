"""How the ``fr-otel`` process ends: after ``analyze``, without the interpreter's teardown,
but with its whole output, its exit code and its exit handlers. Real processes."""

from __future__ import annotations

import contextlib
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


def test_analyze_as_a_process_writes_what_it_writes_in_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fr_otel", "analyze", str(DUMPS), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
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

    def recording(stack: contextlib.ExitStack, memory_limit: str | None = None) -> Any:
        connection = connect(stack, memory_limit)
        stack.callback(lambda: at_close.append(out.getvalue()))  # runs before the close
        return connection

    monkeypatch.setattr(source, "connect", recording)
    with redirect_stdout(out):
        code = main(["analyze", str(DUMPS), "--format", "json"])
    assert code == 1
    [written] = at_close
    assert json.loads(written)["findings"], "the whole verdict, when closing began"
