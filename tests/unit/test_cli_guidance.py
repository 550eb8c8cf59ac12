"""The CLI says what to do instead of failing obscurely: options before ``--`` in
``fr-otel run``, and torch missing for the demo and ``fr_otel.install()``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fr_otel.cli import main

# makes torch unfindable, as on a machine where it was never installed
NO_TORCH = """
import sys
from importlib.machinery import PathFinder

class NoTorch(PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            return None
        return PathFinder.find_spec(name, path, target)

sys.meta_path[:] = [NoTorch if f is PathFinder else f for f in sys.meta_path]
"""


def _without_torch(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH + code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_option_before_the_double_dash_is_explained(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["run", "--nproc-per-node", "2", "--", "torchrun", "train.py"])
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot run" not in err
    assert "--nproc-per-node is not an option of fr-otel run" in err
    assert "fr-otel run -- torchrun --nproc-per-node 2 train.py" in err


def test_the_demo_without_torch_names_the_extra(tmp_path: Path) -> None:
    done = _without_torch(
        "from fr_otel.cli import main; raise SystemExit(main(['demo', '--out', 'out']))",
        tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "needs torch, which is not installed" in done.stderr
    assert "pip install '.[torch]'" in done.stderr
    assert not (tmp_path / "out").exists()


def test_install_without_torch_names_the_extra(tmp_path: Path) -> None:
    done = _without_torch(
        "import fr_otel\n"
        "try:\n"
        "    fr_otel.install()\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name, '|', exc)\n",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    name, message = done.stdout.strip().split(" | ")
    assert name == "torch"
    assert "fr_otel.install() records torch.distributed" in message
    assert "pip install '.[torch]'" in message
