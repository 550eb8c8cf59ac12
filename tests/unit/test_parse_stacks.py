"""Stacks are converted once per distinct stack: by frame identity, else by content."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fr_otel.dumps import parse
from fr_otel.dumps.safe_pickle import load_plain, loads_plain
from fr_otel.schema import RECORD_SCHEMA
from fr_otel.sim import FleetSpec, simulate
from fr_otel.sim.writer import dumps_pickle
from tests.fr_dumps import FRAMES, fr_dump, fr_entry

DATA = Path(__file__).resolve().parents[1] / "data"
FRAME_LIST = RECORD_SCHEMA.field("frames").type


def _table(dump: dict[str, Any]) -> pa.Table:
    return parse.dump_to_table(
        dump, path="dump", source_format="pickle", job="j", incident="i", rank=0, dump_time_ns=5
    ).table


def _unshared(dump: dict[str, Any]) -> dict[str, Any]:
    """The same dump with every entry's frames copied: no frame object shared."""
    entries = [
        {**e, "frames": [dict(f) for f in e["frames"]]} if e.get("frames") is not None else e
        for e in dump["entries"]
    ]
    return {**dump, "entries": entries}


def _sharing(dump: dict[str, Any]) -> tuple[int, int, int]:
    """(frames, distinct frame objects, distinct frame values) over a dump's entries."""
    frames = [f for e in dump["entries"] for f in e.get("frames") or ()]
    values = {tuple(sorted(f.items())) for f in frames}
    return len(frames), len({id(f) for f in frames}), len(values)


def _count_call_sites(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    calls: list[object] = []
    real = parse.call_site

    def counting(frames: Any) -> str | None:
        calls.append(frames)
        return real(frames)

    monkeypatch.setattr(parse, "call_site", counting)
    return calls


def _gloo_dumps() -> list[Path]:
    paths = sorted(DATA.glob("gloo_*/**/comm_lib_trace_rank_*"))
    return [p for p in paths if not p.name.endswith(".json")]


def test_real_torch_dumps_share_frame_objects_between_entries() -> None:
    paths = _gloo_dumps()
    assert paths
    for path in paths:
        with path.open("rb") as handle:
            dump = load_plain(handle)
        frames, objects, values = _sharing(dump)
        # torch symbolises each captured frame once and the pickle memoises it: entries
        # share frame objects (the same line reached from two places can be two objects)
        assert objects <= values + 1 < frames, path
        stacks = [e["frames"] for e in dump["entries"]]
        assert len({id(s) for s in stacks}) == len(stacks)  # but a list per entry


def test_simulated_dumps_share_frames_like_torch() -> None:
    fleet = simulate(FleetSpec(world=8, entries=200, seed=3))
    dump = loads_plain(dumps_pickle(fleet.dumps[0]))
    frames, objects, values = _sharing(dump)
    assert objects == values < frames
    stacks = [e["frames"] for e in dump["entries"]]
    assert len({id(s) for s in stacks}) == len(stacks)


@pytest.mark.parametrize("path", _gloo_dumps()[:3], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rows_are_the_same_with_or_without_shared_frames(path: Path) -> None:
    with path.open("rb") as handle:
        dump = load_plain(handle)
    assert _table(_unshared(dump)).equals(_table(dump))


def test_equal_stacks_without_shared_frames_are_converted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = [{"name": "eval_step", "filename": "/job/eval.py", "line": 9}]
    entries = [fr_entry(record_id=i, seq=i + 1) for i in range(6)]
    for i, entry in enumerate(entries):
        entry["frames"] = [dict(f) for f in (FRAMES if i % 2 else other)]
    entries[4]["frames"] = None
    dump = loads_plain(pickle.dumps(fr_dump(entries), protocol=2))
    calls = _count_call_sites(monkeypatch)
    rows = _table(dump).to_pylist()
    assert len(calls) == 2
    assert [r["frames"] for r in rows] == [other, FRAMES, other, FRAMES, None, FRAMES]
    assert [r["call_site"] for r in rows] == [
        "/job/eval.py:9 in eval_step",
        "/job/train.py:21 in train_step",
        "/job/eval.py:9 in eval_step",
        "/job/train.py:21 in train_step",
        None,
        "/job/train.py:21 in train_step",
    ]


def test_shared_frames_skip_the_content_key(monkeypatch: pytest.MonkeyPatch) -> None:
    dump = fr_dump([fr_entry(record_id=i, seq=i + 1) for i in range(50)])  # one FRAMES list
    dump = loads_plain(pickle.dumps(dump, protocol=2))
    keyed: list[object] = []
    real = parse._content_key

    def counting(stack: Any) -> tuple[Any, ...] | None:
        keyed.append(stack)
        return real(stack)

    monkeypatch.setattr(parse, "_content_key", counting)
    calls = _count_call_sites(monkeypatch)
    _table(dump)
    assert len(keyed) == 1 and len(calls) == 1


def test_lines_equal_as_keys_but_not_as_frames_stay_apart() -> None:
    def stack(line: object) -> list[dict[str, Any]]:
        return [{"name": "step", "filename": "/job/train.py", "line": line}]

    entries = [{"frames": stack(line)} for line in (1, 1.0, 1, 1.0, 2.5)]
    frames, sites = parse._frames_and_sites(entries, FRAME_LIST, float("inf"))
    assert sites.to_pylist() == [
        "/job/train.py:1 in step",
        "/job/train.py:1.0 in step",
        "/job/train.py:1 in step",
        "/job/train.py:1.0 in step",
        "/job/train.py:2.5 in step",
    ]
    assert [f[0]["line"] for f in frames.to_pylist()] == [1, 1, 1, 1, 2]


def test_keys_the_conversion_ignores_do_not_split_stacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entries: list[dict[str, Any]] = [
        {"frames": [{"name": "step", "filename": "/job/a.py", "line": 3, "extra": [1]}]},
        {"frames": [{"line": 3, "filename": "/job/a.py", "name": "step"}]},
        {"frames": []},
    ]
    calls = _count_call_sites(monkeypatch)
    frames, sites = parse._frames_and_sites(entries, FRAME_LIST, float("inf"))
    assert len(calls) == 2
    assert sites.to_pylist() == ["/job/a.py:3 in step", "/job/a.py:3 in step", None]
    assert frames.to_pylist() == [[{"name": "step", "filename": "/job/a.py", "line": 3}]] * 2 + [[]]


def test_stacks_that_cannot_be_keyed_by_content_are_converted_on_their_own() -> None:
    assert parse._content_key([["not", "a", "dict"]]) is None
    assert parse._content_key([{"name": ["f"], "filename": "a.py", "line": 1}]) is None
    assert parse._content_key("abc") is None
