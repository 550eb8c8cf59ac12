"""docs/architecture.md's package table says what each package may import: the code agrees.

Every ``import`` in ``src/fr_otel`` (inside functions too) is read with ``ast`` and checked
against the table's "may import" column: the fr_otel packages and third-party
distributions it names. A new dependency between packages, or a package the table does
not list, fails here until the table says so.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "fr_otel"
DOC = ROOT / "docs" / "architecture.md"

DISTRIBUTIONS = {
    "opentelemetry-proto": "opentelemetry",
    "protobuf": "google",
    "grpc": "grpc",
}
"""Distribution names the table uses -> the module they are imported as."""


def _names(text: str) -> set[str]:
    """``a, b (qualifier, more), c`` -> {a, b, c}."""
    text = re.sub(r"\([^)]*\)", "", text).replace("`", "")
    words = {w.strip().split()[0] for w in text.split(",") if w.strip()}
    return {w for w in words if w != "-"}


def _table() -> dict[str, tuple[set[str], set[str] | None]]:
    """Package -> (fr_otel packages it may import, third-party modules or None for any)."""
    rows: dict[str, tuple[set[str], set[str] | None]] = {}
    for line in DOC.read_text().splitlines():
        match = re.match(r"\| `(fr_otel(?:\.\w+)?)` \|.*\| ([^|]*) \|$", line)
        if match is None:
            continue
        package, allowed = match.group(1), match.group(2)
        if "everything above" in allowed:
            rows[package] = ({"*"}, None)
            continue
        names = _names(allowed.replace(";", ","))
        ours = {n for n in names if (SRC / n).is_dir() or (SRC / f"{n}.py").is_file()}
        rows[package] = (ours, {DISTRIBUTIONS.get(n, n) for n in names - ours})
    return rows


def _package(path: Path) -> str:
    """The table's package of a source file."""
    parts = path.relative_to(SRC).with_suffix("").parts
    if len(parts) == 1 and parts[0] in ("__init__", "__main__", "run"):
        return "fr_otel"
    return f"fr_otel.{parts[0]}"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "fr_otel":
                found.update(f"fr_otel.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return found


SOURCES = sorted(p for p in SRC.rglob("*.py") if "boot" not in p.parts)


def test_every_package_is_in_the_table() -> None:
    table = _table()
    missing = sorted({_package(p) for p in SOURCES} - set(table))
    assert not missing, f"docs/architecture.md's package table lacks {missing}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_are_the_ones_the_table_allows(path: Path) -> None:
    package = _package(path)
    ours, theirs = _table()[package]
    wrong: list[str] = []
    for name in sorted(_imports(path)):
        top = name.split(".")[0]
        if top == "fr_otel":
            target = ".".join(name.split(".")[:2])
            short = target.removeprefix("fr_otel.")
            if target in (package, "fr_otel") or short.startswith("__") or "*" in ours:
                continue
            if short not in ours:
                wrong.append(name)
        elif top in sys.stdlib_module_names or top == "__future__":
            continue
        elif theirs is not None and top not in theirs:
            wrong.append(name)
    assert not wrong, (
        f"{path.relative_to(ROOT)} ({package}) imports {wrong}, which docs/architecture.md's"
        " table does not allow it"
    )


def _own_private_module(path: Path, module: str, name: str) -> bool:
    """``from fr_otel.pkg import _module`` inside ``pkg``: a package's own private module."""
    folder = SRC.parent.joinpath(*module.split("."))
    return folder == path.parent and any(folder.glob(f"{name}.*"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_imports_another_modules_private_names(path: Path) -> None:
    private = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fr_otel")
        for alias in node.names
        if alias.name.startswith("_")
        and not alias.name.startswith("__")
        and not _own_private_module(path, node.module or "", alias.name)
    ]
    assert not private, f"{path.relative_to(ROOT)} imports private names {private}"


HEAVY = ("duckdb", "pyarrow", "numpy", "torch")
"""Modules that cost a command 0.05-2 s to import: loaded only on the paths that use them."""


@pytest.mark.parametrize("module", ["fr_otel.cli", "fr_otel.run"])
def test_starting_the_cli_loads_no_heavy_module(module: str) -> None:
    """``fr-otel run`` (every launch of a job under it), ``--help`` and every command start
    from these: once, a report helper's import of the analysis made each of them load
    duckdb and pyarrow, 65 ms -> 213 ms."""
    import subprocess

    probe = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert loaded == []


def test_analysing_dumps_loads_duckdb_while_the_import_workers_run(tmp_path: Path) -> None:
    """Opening an analysis loads no DuckDB; analysing dumps loads it and the passes while
    the import's workers convert the dumps (``source._load_analysis``), not before. (Asked
    again while DuckDB opens its database, it finds them loaded.)"""
    import json
    import subprocess

    from fr_otel.sim import FleetSpec, simulate, write_fleet

    write_fleet(simulate(FleetSpec(world=16, entries=50)), tmp_path / "dumps")
    probe = f"""
import json, multiprocessing, sys
from fr_otel.analysis import session, source
said = {{"at_start": "duckdb" in sys.modules, "calls": []}}
real = source._load_analysis
def spy():
    workers = len(multiprocessing.active_children()) > 0
    said["calls"].append(["duckdb" in sys.modules, workers])
    real()
    said["calls"][-1].append("fr_otel.analysis.engine" in sys.modules)
source._load_analysis = spy
session.analyze({str(tmp_path / "dumps")!r})
print(json.dumps(said))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    said = json.loads(done.stdout)
    assert said["at_start"] is False
    # [DuckDB loaded before, workers running, the passes loaded after]
    assert said["calls"] == [[False, True, True], [True, False, True]]
