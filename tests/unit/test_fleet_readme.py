"""The README's Fleet section: its shell examples run, in order, in an empty directory,
and say what the README says of them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"```sh\n(.*?)```", re.S)


def test_the_fleet_sections_examples_run(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Fleet\n", 1)[1].split("\n## ", 1)[0]
    blocks = _BLOCK.findall(section)
    assert len(blocks) == 2
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    outputs = []
    for code in blocks:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", code],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"README example failed:\n{code}\n{done.stderr}"
        outputs.append(done.stdout)
    assert (
        "BAD NODES (blamed above the fleet's rate, 99.9% over every host): node002, node010"
        in (outputs[0])
    )
    report = json.loads((tmp_path / "fleet.json").read_text())
    assert report["job"] == "job1" and report["incidents"] > 0
    assert "node002" in outputs[1] and "all_reduce" in outputs[1]
