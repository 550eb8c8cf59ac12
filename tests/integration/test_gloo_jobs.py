"""Real gloo jobs: one live run, and the committed fixtures against their ground truth.

The dumps are read with plain ``pickle``/``json`` on purpose: these tests pin down what torch
writes, independently of fr_otel's own loader.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from fr_otel.demo.gloo_job import SCENARIOS, run_scenario
from fr_otel.demo.naming import dump_relpath

pytestmark = pytest.mark.gloo

DATA_DIR = Path(__file__).resolve().parents[1] / "data"


def _load_fixture_helper() -> Any:
    # ``tests`` is not a package, so load tests/data/fixtures.py by its path.
    spec = importlib.util.spec_from_file_location("gloo_fixtures", DATA_DIR / "fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fixture_dir = _load_fixture_helper().fixture_dir


def _load(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        dump: dict[str, Any] = pickle.load(f)
    return dump


def _at(dump: dict[str, Any], pg_desc: str, seq: int) -> dict[str, Any] | None:
    for e in dump["entries"]:
        if e["process_group"][1] == pg_desc and e["collective_seq_id"] == seq:
            entry: dict[str, Any] = e
            return entry
    return None


# --- one live job --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def size_mismatch_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("gloo_size_mismatch")
    return out, run_scenario("size_mismatch", out, world=3, naming="nccl", timeout_s=60)


def test_every_rank_writes_pickle_and_json(size_mismatch_run: tuple[Path, list[Path]]) -> None:
    out, paths = size_mismatch_run
    expected = [out / f"nccl_trace_rank_{r}{ext}" for r in range(3) for ext in ("", ".json")]
    assert paths == expected
    assert all(p.stat().st_size > 0 for p in paths)


def test_dumps_are_fr_2_10_with_entries(size_mismatch_run: tuple[Path, list[Path]]) -> None:
    out, _ = size_mismatch_run
    for rank in range(3):
        dump = _load(out / f"nccl_trace_rank_{rank}")
        assert dump["version"] == "2.10"
        assert dump["entries"]
        assert all(e["profiling_name"].startswith("gloo:") for e in dump["entries"])
        # Stack traces were asked for: the pickle has frames, the JSON never does.
        assert all(e["frames"] for e in dump["entries"])
        as_json = json.loads((out / f"nccl_trace_rank_{rank}.json").read_text())
        assert len(as_json["entries"]) == len(dump["entries"])
        assert "frames" not in as_json["entries"][0]


def test_culprit_last_entry_differs_in_size(size_mismatch_run: tuple[Path, list[Path]]) -> None:
    out, _ = size_mismatch_run
    truth = SCENARIOS["size_mismatch"]
    (culprit,) = truth.culprit_ranks
    last = {r: _load(out / f"nccl_trace_rank_{r}")["entries"][-1] for r in range(3)}
    for rank, entry in last.items():
        # The faulty op was recorded on every rank (same group, same seq, same op), is still
        # in flight when dumped, and only the culprit's size differs.
        assert entry["process_group"][1] == truth.pg_desc
        assert entry["collective_seq_id"] == truth.collective_seq_id
        assert entry["profiling_name"] == "gloo:all_reduce"
        assert entry["retired"] is False
        assert entry["input_sizes"] == ([[1000]] if rank == culprit else [[1024]])
    # Everything before the fault completed, gloo's only completion signal being ``retired``.
    for rank in range(3):
        earlier = _load(out / f"nccl_trace_rank_{rank}")["entries"][:-1]
        assert all(e["retired"] and e["state"] == "scheduled" for e in earlier)


def test_bad_arguments_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="name"):
        run_scenario("no_such_fault", tmp_path)
    with pytest.raises(ValueError, match="naming"):
        run_scenario("healthy", tmp_path, naming="slurm")
    with pytest.raises(ValueError, match="world"):
        run_scenario("healthy", tmp_path, world=2)


# --- committed fixtures --------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fixture_matches_its_scenario_json(name: str) -> None:
    folder = fixture_dir(name)
    meta = json.loads((folder / "scenario.json").read_text())
    truth = SCENARIOS[name]
    assert meta["scenario"] == truth.as_dict()
    assert meta["world"] == truth.world
    assert meta["fr_version"] == "2.10"
    assert set(meta["scenario"]) >= {
        "culprit_ranks",
        "pg_desc",
        "collective_seq_id",
        "expected_kind",
    }

    naming = meta["naming"]
    assert sorted(meta["files"], key=int) == [str(r) for r in range(truth.world)]
    dump_files = {p for p in folder.rglob("*") if p.is_file() and p.name != "scenario.json"}
    expected_files = {
        folder / dump_relpath(naming, r, json=j) for r in range(truth.world) for j in (False, True)
    }
    assert dump_files == expected_files

    dumps = {r: _load(folder / meta["files"][str(r)]["pickle"]) for r in range(truth.world)}
    for dump in dumps.values():
        assert dump["version"] == meta["fr_version"]
        assert dump["entries"]
    if truth.expected_kind == "none":
        assert all(e["retired"] for d in dumps.values() for e in d["entries"])
        return
    assert truth.pg_desc is not None and truth.collective_seq_id is not None
    # The majority recorded the ground-truth collective and it never finished.
    peers = [
        r for r, d in dumps.items() if r not in truth.culprit_ranks and _at(d, truth.pg_desc, 1)
    ]
    assert len(peers) >= 1
    seq = truth.collective_seq_id
    for rank in peers:
        entry = _at(dumps[rank], truth.pg_desc, seq)
        assert entry is not None, f"rank {rank} has no {truth.pg_desc} seq {seq}"
        assert entry["retired"] is False
    (culprit,) = truth.culprit_ranks
    _assert_culprit_shows(truth.expected_kind, dumps[culprit], dumps[peers[0]], truth.pg_desc, seq)


def _sig(entry: dict[str, Any] | None) -> tuple[Any, ...] | None:
    if entry is None:
        return None
    return (entry["profiling_name"], entry["input_sizes"], entry["input_dtypes"])


def _assert_culprit_shows(
    kind: str, culprit: dict[str, Any], peer: dict[str, Any], pg: str, seq: int
) -> None:
    """The culprit's entries at the ground-truth position differ from a peer's as ``kind`` says."""
    mine, theirs = _at(culprit, pg, seq), _at(peer, pg, seq)
    assert theirs is not None
    if kind == "missing_rank":
        assert mine is None
        return
    assert mine is not None
    assert mine["retired"] is False
    if kind == "skipped_collective":
        assert _sig(mine) == _sig(_at(peer, pg, seq + 1)) != _sig(theirs)
    elif kind == "reordered_collectives":
        assert _sig(mine) == _sig(_at(peer, pg, seq + 1))
        assert _sig(_at(culprit, pg, seq + 1)) == _sig(theirs)
    elif kind == "op_type_mismatch":
        assert mine["profiling_name"] != theirs["profiling_name"]
    elif kind == "size_mismatch":
        assert mine["input_sizes"] != theirs["input_sizes"]
    elif kind == "dtype_mismatch":
        assert mine["input_sizes"] == theirs["input_sizes"]
        assert mine["input_dtypes"] != theirs["input_dtypes"]
    elif kind == "all_to_all_splits":
        assert mine["profiling_name"] == theirs["profiling_name"] == "gloo:all_to_all"
        assert mine["input_sizes"] != mine["output_sizes"]
        assert theirs["input_sizes"] == theirs["output_sizes"]
    else:
        raise AssertionError(f"no check for kind {kind!r}")


def test_fixture_dir_names_the_regenerate_command() -> None:
    with pytest.raises(FileNotFoundError, match=r"generate_gloo\.py --only no_such_fault"):
        fixture_dir("no_such_fault")
