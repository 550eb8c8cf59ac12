"""``fr-otel analyze``'s text verdict: who is at fault and who only waits, each consequence
indented under its cause; the JSON stays the documented contract."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from fr_otel.analysis import analyze
from fr_otel.cli import main
from fr_otel.cli.analyze_cmd import render_text
from fr_otel.report.words import listed, ranks_words

DATA = Path(__file__).resolve().parents[1] / "data"


def _finding_lines(text: str) -> list[str]:
    """The lines of the findings list (after the header), as printed."""
    return text.split(" of an earlier one\n\n", 1)[1].splitlines()


def test_a_consequence_shows_its_waiting_ranks_under_its_cause(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # rank 3 skipped its pair's all_reduce; rank 1, left waiting in the pair, never issued
    # default_pg's next collective: a consequence with no culprit, rank 1 waiting
    assert main(["analyze", str(DATA / "workload_subgroups_skip")]) == 1
    lines = _finding_lines(capsys.readouterr().out)
    assert lines[0] == "[0] skipped_collective (root cause); culprit ranks: 3"
    assert lines[1].startswith("    rank 3 skipped all_reduce")
    consequence = next(i for i, line in enumerate(lines) if "[1]" in line)
    assert lines[consequence] == (
        "    [1] missing_rank (consequence of [0]); culprit ranks: none; waiting (not at fault): 1"
    )
    assert lines[consequence + 1].startswith("        rank 1 never issued all_reduce")


def test_every_finding_is_shown_once_in_outline_order(tmp_path: Path) -> None:
    out = tmp_path / "dumps"
    args = ["simulate", str(out), "--world", "32", "--entries", "300", "--fault", "p2p_unmatched"]
    assert main([*args, "--seed", "3"]) == 0
    analysis = analyze(out)
    assert any(f.waiting_ranks and not f.culprit_ranks for f in analysis.findings)
    buffer = io.StringIO()
    render_text(analysis, buffer)
    heads = [line for line in _finding_lines(buffer.getvalue()) if line.lstrip().startswith("[")]
    assert len(heads) == len(analysis.findings)
    for index, (head, finding) in enumerate(zip(heads, analysis.findings, strict=True)):
        nested = finding.consequence_of is not None
        assert head.startswith("    [" if nested else "["), head
        assert head.lstrip().startswith(f"[{index}] {finding.kind} ")
        assert head.endswith(ranks_words(finding, limit=32)), head
        for rank in finding.waiting_ranks:
            assert str(rank) in head.split("waiting (not at fault): ")[1]


def test_long_rank_lists_are_cut_and_the_json_keeps_its_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert listed([5, 1, 3]) == "1, 3, 5"
    assert listed(list(range(40)), 32).endswith("30, 31 and 8 more")
    out = tmp_path / "dumps"
    args = ["simulate", str(out), "--world", "64", "--entries", "300", "--fault", "network"]
    assert main(args) == 0
    capsys.readouterr()
    # the JSON is Analysis.to_dict and the live check's record (none here), with the
    # fields docs/analysis.md describes
    assert main(["analyze", str(out), "--format", "json", "-o", str(tmp_path / "v.json")]) == 1
    verdict = json.loads((tmp_path / "v.json").read_text())
    assert verdict.pop("live") is None
    assert verdict == json.loads(json.dumps(analyze(out).to_dict(), default=str))
    assert set(verdict) == {
        *("job", "incident", "world_size", "ranks", "missing_dumps", "findings"),
        *("root_cause", "input_problems", "snapshot"),
    }
    assert {key for finding in verdict["findings"] for key in finding} == {
        *("kind", "process_group", "collective_seq_id", "op", "culprit_ranks"),
        *("waiting_ranks", "summary", "evidence", "frames", "consequence_of", "consequences"),
    }


def test_a_sampled_grid_keeps_culprits_first_then_some_waiting_ranks(tmp_path: Path) -> None:
    from fr_otel.report.grid import _sample_ranks

    out = tmp_path / "dumps"
    args = ["simulate", str(out), "--world", "32", "--entries", "300", "--fault", "gpu_hang"]
    assert main([*args, "--seed", "3"]) == 0
    analysis = analyze(out)
    culprits = {r for f in analysis.findings for r in f.culprit_ranks}
    waiting = {r for f in analysis.findings for r in f.waiting_ranks} - culprits
    assert culprits and len(waiting) >= 2
    for limit in (4, 8, 16):
        shown, step = _sample_ranks(list(range(32)), analysis, limit)
        assert step is not None and len(shown) <= limit
        assert culprits <= set(shown)
        # waiting ranks take at most half of the room the named ranks leave: the even
        # sample keeps the rest
        assert 1 <= len(waiting & set(shown)) <= limit // 2
