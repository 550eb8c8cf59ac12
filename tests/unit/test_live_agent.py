"""The live check's agent on real ring files, without a job: the analyzer confirms a
candidate and the verdict is said and recorded; a difference it finds legal is cleared
once, and its pattern costs no analysis again; a ring that cannot be read is said once
and the others are still compared."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fr_otel import config
from fr_otel.live.agent import SETTLE_SEQS, LiveCheck
from fr_otel.live.verdict import Verdict
from fr_otel.recorder.ring import ring_base
from tests.live_rings import WORLD, Rank, signature


@pytest.fixture
def settings(tmp_path: Path) -> config.RecorderSettings:
    return config.recorder_settings(
        {"archive": tmp_path / "archive", "job": "job", "run_id": "run"}
    )


@pytest.fixture
def ranks(settings: config.RecorderSettings) -> Iterator[list[Rank]]:
    made = [Rank(settings.rings, rank) for rank in WORLD]
    yield made
    for rank in made:
        rank.writer.close()


class _Said:
    def __init__(self) -> None:
        self.verdicts: list[Verdict] = []
        self.notices: list[str] = []

    def check(self, settings: config.RecorderSettings) -> LiveCheck:
        def end_job() -> None:
            raise AssertionError("the report policy never ends the job")

        return LiveCheck(
            settings=settings,
            live=config.LiveSettings(),
            on_verdict=self.verdicts.append,
            on_notice=self.notices.append,
            end_job=end_job,
        )


def _steps(ranks: list[Rank], count: int) -> None:
    for _ in range(count):
        for rank in ranks:
            rank.issue(signature("all_reduce", 1000))


def test_a_size_mismatch_is_confirmed_by_the_analyzer_and_recorded(
    settings: config.RecorderSettings, ranks: list[Rank]
) -> None:
    said = _Said()
    check = said.check(settings)
    _steps(ranks, 3)
    check.look()
    assert check.confirmations == 0  # the members agree: nothing to analyse
    for rank in ranks:
        rank.issue(signature("all_reduce", 1001 if rank.writer.rank == 1 else 1000), line=12)
    check.look()
    [verdict] = said.verdicts
    assert (verdict.kind, verdict.culprit_ranks, verdict.seq) == ("size_mismatch", [1], 4)
    assert verdict.call_site == "train.py:12 in step"
    assert verdict.running_ranks == [0, 1, 2]  # this process holds the rings: they run
    # nobody listens on the ranks' trigger FIFOs here: no incident, the record is written
    [path] = (settings.archive / "_live" / "job=job" / "run=run").glob("*.json")
    record = json.loads(path.read_text())
    assert record["incident"] is None and record["kind"] == "size_mismatch"
    assert record["divergence_ns"] <= record["known_ns"]
    assert any("no rank is left to flush" in notice for notice in said.notices)


def test_a_difference_the_analyzer_finds_legal_is_analysed_once_per_pattern(
    settings: config.RecorderSettings, ranks: list[Rank]
) -> None:
    """The root calls scatter from another line than its peers, every step: the first
    slot is analysed while its group moves on, then cleared; later steps cost nothing."""
    said = _Said()
    check = said.check(settings)
    for _ in range(SETTLE_SEQS + 1):
        for rank in ranks:
            root = rank.writer.rank == 0
            rank.issue(signature("scatter", 12 if root else 0), line=20 if root else 30)
        check.look()
    analysed = check.confirmations
    assert 0 < analysed <= SETTLE_SEQS + 1
    for _ in range(3):
        for rank in ranks:
            root = rank.writer.rank == 0
            rank.issue(signature("scatter", 12 if root else 0), line=20 if root else 30)
        check.look()
    assert check.confirmations == analysed
    assert said.verdicts == [] and said.notices == []


def test_a_ring_that_cannot_be_read_is_said_once_and_the_others_are_compared(
    settings: config.RecorderSettings, ranks: list[Rank]
) -> None:
    broken = ring_base(settings.rings, "job", 3, "run")
    broken.with_suffix(".ring").write_bytes(b"not a ring" * 100)
    broken.with_suffix(".meta").write_text("")
    said = _Said()
    check = said.check(settings)
    _steps(ranks, 2)
    check.look()
    check.look()
    assert [n for n in said.notices if "rank 3" in n and "blind" in n] == [said.notices[0]]
    assert len(said.notices) == 1
    for rank in ranks:
        rank.issue(
            signature("all_reduce", 1000, dtype="BFloat16" if rank.writer.rank == 2 else "Float")
        )
    check.look()
    [verdict] = said.verdicts
    assert (verdict.kind, verdict.culprit_ranks) == ("dtype_mismatch", [2])
