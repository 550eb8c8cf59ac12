"""The C decoder reads damaged pickles without a memory error: built again here with
AddressSanitizer and UndefinedBehaviorSanitizer, it is fed thousands of mutated dumps
(bytes changed, cut, inserted and copied from elsewhere in the file) in a subprocess
that any out-of-bounds read or write, use after free, or undefined operation ends."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "fr_otel" / "dumps" / "_pickle_columns.c"

_FUZZ = """
import importlib.util, pickle, random, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("_pickle_columns", sys.argv[1])
decoder = importlib.util.module_from_spec(spec)
spec.loader.exec_module(decoder)
from tests.fr_dumps import fr_dump, fr_entry
dump = fr_dump([fr_entry(record_id=i, seq=i + 1) for i in range(3)])
bases = [pickle.dumps(dump, protocol=p) for p in (2, 4, 5)]
bases += [p.read_bytes() for p in sorted(Path("tests/data").glob("gloo_*/**/*_rank_0"))][:4]
rng = random.Random(int(sys.argv[2]))
decoded = 0
for _ in range(int(sys.argv[3])):
    data = bytearray(rng.choice(bases))
    at = rng.randrange(len(data))
    kind = rng.random()
    if kind < 0.5:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind < 0.7:
        del data[at : at + rng.randint(1, 16)]
    elif kind < 0.85:
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    else:
        start = rng.randrange(len(data))
        data[at:at] = data[start : start + rng.randint(1, 64)]
    decoded += decoder.decode(bytes(data)) is not None
print(decoded)
"""


def _runtime(name: str) -> str:
    found = subprocess.run(
        ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # gcc prints the bare name back when it has no such library
    assert os.path.isabs(found), f"gcc has no {name}: install its sanitizer runtimes"
    return found


def test_mutated_dumps_never_make_a_memory_error(tmp_path: Path) -> None:
    assert shutil.which("gcc"), "a C compiler is part of this machine (it builds the decoder)"
    module = tmp_path / f"_pickle_columns{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(
        [
            "gcc",
            "-O1",
            "-g",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer",
            "-shared",
            "-fPIC",
            f"-I{sysconfig.get_paths()['include']}",
            str(SOURCE),
            "-o",
            str(module),
        ],
        check=True,
    )
    env = {
        **os.environ,
        "LD_PRELOAD": f"{_runtime('libasan.so')}:{_runtime('libubsan.so')}",
        # CPython's own allocations are not ours to report
        "ASAN_OPTIONS": "detect_leaks=0",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }
    result = subprocess.run(
        [sys.executable, "-c", _FUZZ, str(module), "19", "6000"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "runtime error" not in result.stderr, result.stderr[-4000:]
    # the mutations must leave some dumps readable, or the decoder's paths went untried
    assert int(result.stdout.strip()) > 50


@pytest.mark.parametrize("name", ["libasan.so", "libubsan.so"])
def test_the_sanitizer_runtimes_are_there(name: str) -> None:
    assert Path(_runtime(name)).exists()
