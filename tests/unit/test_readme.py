"""The README's examples run, in order, in an empty directory, and say what the README says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"```(sh|python)\n(.*?)```", re.S)

# What each example must print (a fragment), in README order.
EXPECTED = [
    "skipped_collective",
    "missing ranks: 5",
    "nccl_trace_rank_5: foreign:",
    "ROOT CAUSE: rank 21 skipped",
    "skipped_collective",
    "wrote report.html",
    "ROOT CAUSE: rank 2",
    "default_pg",
    "spans.jsonl: ",
]


def _examples() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Examples", 1)[1].split("\n## ", 1)[0]
    return _BLOCK.findall(section)


def test_readme_examples_run(tmp_path: Path) -> None:
    examples = _examples()
    assert len(examples) == len(EXPECTED), "update EXPECTED when the README's examples change"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    for (language, code), expected in zip(examples, EXPECTED, strict=True):
        command = (
            ["bash", "-euo", "pipefail", "-c", code]
            if language == "sh"
            else [sys.executable, "-c", code]
        )
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"README example failed:\n{code}\n{output}"
        assert expected in output, f"README example did not print {expected!r}:\n{code}\n{output}"
