"""The table of finding kinds (``analysis/kinds.py``) is complete: every kind the analyzer
can emit, every evidence class it makes and every fault the simulator injects is in it,
every entry has each of its parts, and the doc's kinds section is generated from it.

Each check names what is missing, so adding a kind is led from here.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import fr_otel.analysis
from fr_otel.analysis import analyze
from fr_otel.analysis.findings import Analysis, Evidence, Finding, GroupRef
from fr_otel.analysis.kinds import (
    BY_NAME,
    CATEGORIES,
    FINDING_KINDS,
    KINDS,
    SIMULATED_FAULTS,
    with_kinds_section,
)
from fr_otel.sim import FleetSpec, simulate, write_fleet

ROOT = Path(__file__).resolve().parents[2]
ANALYSIS = ROOT / "src" / "fr_otel" / "analysis"


def _constant(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _emitted() -> dict[str, list[str]]:
    """Kind -> where the analysis names it as a finding's kind: a ``kind=`` argument, the
    kind a collector ``add`` s, what a ``*_kind`` function returns."""
    found: dict[str, list[str]] = {}
    for path in sorted(ANALYSIS.glob("*.py")):
        if path.name == "kinds.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str | None] = []
            if isinstance(node, ast.Call):
                names += [_constant(k.value) for k in node.keywords if k.arg == "kind"]
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr == "add" and node.args:
                    names.append(_constant(node.args[0]))
            elif isinstance(node, ast.FunctionDef) and node.name.endswith("_kind"):
                names += [_constant(r.value) for r in ast.walk(node) if isinstance(r, ast.Return)]
            for name in names:
                if name is not None:
                    found.setdefault(name, []).append(f"{path.name}:{node.lineno}")
    return found


def test_every_kind_the_analyzer_emits_is_in_the_table() -> None:
    emitted = _emitted()
    assert {k: w for k, w in emitted.items() if k not in BY_NAME} == {}, "add them to kinds.py"
    assert [k for k in KINDS if k not in emitted] == [], "kinds the analyzer never emits"


def _evidence_classes() -> dict[str, type[Evidence]]:
    """``module.Class`` -> every class of ``fr_otel.analysis`` that is an ``Evidence``."""
    found: dict[str, type[Evidence]] = {}
    for info in pkgutil.iter_modules(fr_otel.analysis.__path__):
        module = importlib.import_module(f"fr_otel.analysis.{info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Evidence)
                and value.__module__ == module.__name__
            ):
                found[f"{info.name}.{value.__name__}"] = value
    return found


def test_every_evidence_class_belongs_to_a_kind() -> None:
    classes = _evidence_classes()
    # a class another one extends is a base (findings.Evidence, divergence_evidence.SlotEvidence)
    bases = {
        name
        for name, cls in classes.items()
        for other in classes.values()
        if other is not cls and issubclass(other, cls)
    }
    named = {name for kind in FINDING_KINDS for name in kind.evidence}
    assert sorted(set(classes) - bases - named) == [], "evidence no kind in kinds.py names"
    assert sorted(named - set(classes)) == [], "kinds.py names evidence classes that do not exist"
    assert sorted(named & bases) == [], "kinds.py names base classes"


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_each_part(kind: str) -> None:
    entry = BY_NAME[kind]
    assert entry.category in CATEGORIES
    assert entry.words.strip(), f"{kind}: no words for the report"
    assert entry.meaning.strip(), f"{kind}: no meaning for docs/analysis.md"
    assert entry.evidence, f"{kind}: no evidence class"
    classes = _evidence_classes()
    for name in entry.evidence:
        cls = classes[name]
        # the text, JSON and HTML outputs all say a finding by its evidence's sentence
        writes = cls.headline is not Evidence.headline or cls.sentence is not Evidence.sentence
        assert writes, f"{kind}: {name} writes no sentence (headline or sentence)"


def test_no_two_kinds_share_a_name_or_words() -> None:
    assert len(set(KINDS)) == len(KINDS)
    words = [kind.words for kind in FINDING_KINDS]
    assert len(set(words)) == len(words), "two kinds the report would say alike"


@pytest.mark.parametrize("kind", KINDS)
def test_the_report_says_each_kind_in_its_words(kind: str) -> None:
    from fr_otel.report.html import _verdict

    finding = Finding(
        kind=kind,
        group=GroupRef(name="0", desc="default_pg", ranks=(0, 1)),
        collective_seq_id=1,
        op="all_reduce",
        culprit_ranks=[1],
        facts=Evidence(),
    )
    analysis = Analysis(
        job="j",
        incident="i",
        world_size=2,
        ranks=[0, 1],
        missing_dumps=[],
        findings=[finding],
        root_cause=0,
    )
    assert BY_NAME[kind].words in _verdict(analysis, ())


def test_the_simulator_injects_the_tables_faults() -> None:
    from fr_otel.sim.faults import _Planner

    assert len(set(SIMULATED_FAULTS)) == len(SIMULATED_FAULTS), "a fault under two kinds"
    assert [f for f in SIMULATED_FAULTS if not hasattr(_Planner, f"_{f}")] == [], (
        "faults sim/faults.py does not plan"
    )


@pytest.mark.parametrize(
    ("fault", "kind"), [(f, kind.name) for kind in FINDING_KINDS for f in kind.faults]
)
def test_each_simulated_fault_is_found_as_its_kind(tmp_path: Path, fault: str, kind: str) -> None:
    write_fleet(simulate(FleetSpec(world=16, entries=300, fault=fault)), tmp_path)
    analysis = analyze(tmp_path)
    assert analysis.root_cause is not None
    assert analysis.findings[analysis.root_cause].kind == kind


def test_the_kinds_doc_is_generated_from_the_table() -> None:
    doc = (ROOT / "docs" / "analysis.md").read_text()
    assert doc == with_kinds_section(doc), "run `make docs`"
