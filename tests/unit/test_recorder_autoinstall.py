"""``fr-otel run``'s zero-code install: ``child_environment``, ``boot/sitecustomize.py`` and
``recorder.autoinstall``.

Real child Python processes are started with the environment ``child_environment`` builds
(the boot folder first on ``PYTHONPATH``, ``FR_OTEL_AUTOINSTALL=1``, the archive under
``tmp_path``) and report back what they see; one of them runs a real one-rank gloo job.
Nothing is faked. The children import torch (CPU build), so these tests take a few seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fr_otel.recorder.launcher import BOOT_DIR, child_environment
from fr_otel.recorder.ring import read_ring, ring_base, ring_bases
from fr_otel.recorder.slot import COMPLETED
from fr_otel.recorder.table import ring_table
from tests.jobs import python_child

_OURS = ("FR_OTEL_", "TORCH_FR_", "TORCH_NCCL_", "OTEL_")


def _clean_environ() -> dict[str, str]:
    """This process's environment without anything that would steer the children."""
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(_OURS) and name != "PYTHONPATH"
    }


def _env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    return child_environment(
        {"FR_OTEL_ARCHIVE": str(tmp_path / "archive"), **overrides}, _clean_environ()
    )


# --- the environment --------------------------------------------------------------------


def test_child_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    environ = {"PYTHONPATH": "/user/lib::/other", "KEEP": "me", "FR_OTEL_AUTOINSTALL": "0"}
    env = child_environment({"FR_OTEL_ARCHIVE": "arch", "FR_OTEL_RING_DIR": "rings"}, environ)
    assert env["FR_OTEL_AUTOINSTALL"] == "1"
    assert env["FR_OTEL_ARCHIVE"] == str(tmp_path / "arch")  # ranks may chdir
    assert env["FR_OTEL_RING_DIR"] == str(tmp_path / "rings")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(BOOT_DIR), "/user/lib", "/other"]
    assert env["KEEP"] == "me"
    assert environ["FR_OTEL_AUTOINSTALL"] == "0" and "FR_OTEL_ARCHIVE" not in environ
    assert (BOOT_DIR / "sitecustomize.py").is_file()


def test_child_environment_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    env = child_environment({}, {})
    assert env["FR_OTEL_ARCHIVE"] == str(tmp_path / "fr-otel-archive")
    assert "FR_OTEL_RING_DIR" not in env
    assert env["PYTHONPATH"] == str(BOOT_DIR)


# --- in child processes ------------------------------------------------------------------

_INSTALLED = """
import os
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d
import fr_otel.recorder as r

wrapped = getattr(dist.all_reduce, "__wrapped__", None)
print(r.current() is not None)
print(dist.all_reduce.__module__, c10d.all_reduce.__module__, dist.all_reduce is c10d.all_reduce)
print(wrapped is not None and wrapped.__module__ == "torch.distributed.distributed_c10d")
print(os.environ.get("TORCH_FR_BUFFER_SIZE"), os.environ.get("TORCH_NCCL_DUMP_ON_TIMEOUT"))
"""


def test_recorder_is_installed_when_torch_distributed_is_imported(tmp_path: Path) -> None:
    child = python_child(_INSTALLED, _env(tmp_path, FR_OTEL_BUFFER_SIZE="32"), tmp_path)
    assert child.stdout.splitlines() == [
        "True",
        "fr_otel.recorder.capture fr_otel.recorder.capture True",
        "True",
        "None 1",  # torch's own buffer size is left as it is
    ]


def test_disable_switch_installs_nothing(tmp_path: Path) -> None:
    child = python_child(_INSTALLED, _env(tmp_path, FR_OTEL_DISABLE="1"), tmp_path)
    module = "torch.distributed.distributed_c10d"
    # torch's own @_exception_logger also sets __wrapped__: the module tells them apart
    assert child.stdout.splitlines()[:2] == ["False", f"{module} {module} True"]
    assert child.stdout.splitlines()[3] == "None None"


_NO_TORCH = """
import atexit, json, pathlib, sys

def report():
    torch = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
    hooks = [type(f).__name__ for f in sys.meta_path]
    print(torch, "_AfterImport" in hooks, flush=True)

atexit.register(report)
json.dumps({"a": pathlib.Path(".").name})
"""


def test_a_process_without_torch_distributed_never_imports_torch(tmp_path: Path) -> None:
    child = python_child(_NO_TORCH, _env(tmp_path), tmp_path)
    # the hook is waiting (so sitecustomize did run), and torch was never loaded
    assert child.stdout == "[] True\n"
    assert not (tmp_path / "archive").exists()  # nothing recorded, nothing written


def test_disabled_process_gets_no_import_hook(tmp_path: Path) -> None:
    child = python_child(_NO_TORCH, _env(tmp_path, FR_OTEL_DISABLE="1"), tmp_path)
    assert child.stdout == "[] False\n"


_ACTIVATE_LATE = """
import os
import torch.distributed as dist
from fr_otel.recorder import autoinstall, current

autoinstall.activate()
print(current() is not None, dist.all_reduce.__module__)
os.environ["FR_OTEL_AUTOINSTALL"] = "1"
autoinstall.activate()
print(current() is not None, dist.all_reduce.__module__)
"""


def test_activate_after_torch_distributed_is_loaded_installs_at_once(tmp_path: Path) -> None:
    env = _clean_environ()  # no boot folder: activate() is called by hand
    env["FR_OTEL_ARCHIVE"] = str(tmp_path / "archive")
    child = python_child(_ACTIVATE_LATE, env, tmp_path)
    assert child.stdout.splitlines() == [
        "False torch.distributed.distributed_c10d",  # not requested: nothing
        "True fr_otel.recorder.capture",
    ]


_USER_SITE = """
import os
from pathlib import Path

os.environ["USER_SITE_RAN"] = "yes"
Path(os.environ["USER_SITE_MARK"]).write_text(__file__)
"""

_CHAINED = """
import os, sys
hooked = any(type(f).__name__ == "_AfterImport" for f in sys.meta_path)
print(os.environ.get("USER_SITE_RAN"), hooked)
"""


def test_a_users_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text(_USER_SITE)
    mark = tmp_path / "mark"
    env = _env(tmp_path, PYTHONPATH=str(user), USER_SITE_MARK=str(mark))
    assert env["PYTHONPATH"].split(os.pathsep) == [str(BOOT_DIR), str(user)]
    child = python_child(_CHAINED, env, tmp_path)
    assert child.stdout == "yes True\n"
    assert mark.read_text() == str(user / "sitecustomize.py")
    assert "Error in sitecustomize" not in child.stderr


def test_nested_fr_otel_run_still_chains_once(tmp_path: Path) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text(_USER_SITE)
    mark = tmp_path / "mark"
    inner = _env(tmp_path, PYTHONPATH=str(user), USER_SITE_MARK=str(mark))
    twice = child_environment({}, inner)  # `fr-otel run -- fr-otel run -- ...`
    assert twice["PYTHONPATH"].split(os.pathsep)[:2] == [str(BOOT_DIR), str(BOOT_DIR)]
    child = python_child(_CHAINED, twice, tmp_path)
    assert child.stdout == "yes True\n"
    assert "Error in sitecustomize" not in child.stderr


def test_boot_folder_reachable_twice_still_chains(tmp_path: Path) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text(_USER_SITE)
    link = tmp_path / "boot_link"
    link.symlink_to(BOOT_DIR, target_is_directory=True)
    mark = tmp_path / "mark"
    env = _env(tmp_path, PYTHONPATH=f"{link}{os.pathsep}{user}", USER_SITE_MARK=str(mark))
    child = python_child(_CHAINED, env, tmp_path)
    assert "Error in sitecustomize" not in child.stderr, child.stderr
    assert child.stdout == "yes True\n"


# --- end to end: a one-rank gloo job records into its ring --------------------------------

_TRAIN = """
import datetime
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore


def train_step(tensor):
    dist.all_reduce(tensor)


store = TCPStore(
    "127.0.0.1", 0, is_master=True, wait_for_workers=False,
    timeout=datetime.timedelta(seconds=30),
)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
tensor = torch.ones(4, 2)
train_step(tensor)
dist.barrier()
assert tensor.tolist() == [[1.0, 1.0]] * 4
dist.destroy_process_group()
print("done", flush=True)
"""


def test_one_rank_gloo_job_is_recorded_without_code_changes(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(_TRAIN)
    env = _env(tmp_path, FR_OTEL_JOB="e2e", FR_OTEL_BUFFER_SIZE="16")
    child = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout == "done\n"

    # no launcher named the run: rank 0 made its id, and the ring is in that run's folder
    [base] = ring_bases(tmp_path / "archive" / "_rings", "e2e")
    assert base.parent.name.startswith("run=")
    contents = read_ring(base)
    assert contents.world == 1 and contents.job == "e2e" and contents.backend == "gloo"
    assert base == ring_base(tmp_path / "archive" / "_rings", "e2e", 0, contents.run)
    table = ring_table(contents, job="e2e", incident="check", dump_time_ns=0)
    rows = table.to_pylist()
    assert [row["op"] for row in rows] == ["all_reduce", "barrier"]
    assert [row["state"] for row in rows] == ["completed", "completed"]
    assert [slot[9] for slot in contents.slots] == [COMPLETED, COMPLETED]
    assert rows[0]["input_sizes"] == [[4, 2]] and rows[0]["input_dtypes"] == ["Float"]
    assert rows[0]["call_site"] == f"{script}:9 in train_step"
