"""The compiled decoder (``dumps/_pickle_columns.c``) reads a pickle exactly as the general
path does (restricted unpickler, then ``dump_to_table``), or declines and leaves it to
that path: real gloo dumps from torch, simulated NCCL dumps, every format version and
pickle protocol, and damaged, hostile and oddly typed pickles, mutated at random too."""

from __future__ import annotations

import pickle
import random
import struct
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fr_otel.config import FR_OTEL_PURE_PYTHON
from fr_otel.dumps import columnar, load
from fr_otel.dumps.discover import DumpFile
from fr_otel.dumps.parse import decode_dump, dump_to_table
from fr_otel.errors import DumpError
from fr_otel.sim import FleetSpec, simulate
from fr_otel.sim.writer import dumps_pickle
from tests.fr_dumps import fr_dump, fr_entry

DATA = Path(__file__).resolve().parents[1] / "data"
_ARGS: dict[str, Any] = dict(
    path="dump", source_format="pickle", job="j", incident="i", rank=0, dump_time_ns=5
)


def _general(data: bytes) -> pa.Table:
    dump, _ = decode_dump(data, "dump")
    return dump_to_table(dump, **_ARGS).table


def _fast(data: bytes) -> pa.Table | None:
    decoded = columnar.decode_columns(data)
    if decoded is None:
        return None
    rest, entries = decoded
    return dump_to_table(rest, decoded=entries, **_ARGS).table


def _assert_same(data: bytes) -> None:
    fast = _fast(data)
    assert fast is not None, "the decoder declined a dump it should read"
    general = _general(data)
    for name in general.column_names:
        assert fast.column(name).equals(general.column(name)), name
    assert fast.schema == general.schema


def _real_pickles() -> list[Path]:
    return sorted(p for p in DATA.glob("*/**/*") if p.is_file() and p.read_bytes()[:1] == b"\x80")


def test_the_decoder_is_built() -> None:
    # CI builds it (setup.py; a C compiler is part of the machine). Where it is not built
    # every dump takes the general path, and the tests here fail to say so.
    assert columnar.AVAILABLE


def test_real_torch_dumps_decode_as_the_general_path_reads_them() -> None:
    paths = _real_pickles()
    assert len(paths) >= 20
    for path in paths:
        _assert_same(path.read_bytes())


@pytest.mark.parametrize("frames", [True, False], ids=["stacks", "no-stacks"])
def test_simulated_nccl_dumps_decode_the_same(frames: bool) -> None:
    fleet = simulate(
        FleetSpec(world=8, entries=300, seed=5, fault="size_mismatch", stack_traces=frames)
    )
    for rank in (0, 3, 7):
        _assert_same(dumps_pickle(fleet.dumps[rank]))


@pytest.mark.parametrize("version", ["2.3", "2.7", "2.10"])
@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_every_version_and_protocol_decodes_the_same(version: str, protocol: int) -> None:
    entries = [fr_entry(record_id=i, seq=i + 1, version=version) for i in range(5)]
    entries[2] = fr_entry(record_id=2, seq=3, version=version, state="scheduled")
    entries[3]["frames"] = None
    del entries[4]["frames"]
    _assert_same(pickle.dumps(fr_dump(entries, version=version), protocol=protocol))


def test_a_dump_without_entries_decodes_the_same() -> None:
    dump = fr_dump([])
    _assert_same(pickle.dumps(dump, protocol=2))
    del dump["entries"]
    _assert_same(pickle.dumps(dump, protocol=2))


def test_values_torch_never_writes_but_arrow_reads_decode_the_same() -> None:
    entries = [fr_entry(record_id=i, seq=i + 1) for i in range(4)]
    entries[0]["input_sizes"] = [[], [2**62, -1], [0]]  # scalars, huge and negative dims
    entries[0]["input_dtypes"] = ["Float", "Half", "BFloat16"]
    entries[1]["profiling_name"] = "nccl:all_reduce ünïcödé 🚀"
    entries[1]["frames"] = []
    entries[2]["process_group"] = ["0", "default_pg"]  # a list, where torch writes a tuple
    entries[2]["time_created_ns"] = -(2**63)
    entries[3]["unknown_future_field"] = {"nested": [1, 2]}
    _assert_same(pickle.dumps(fr_dump(entries), protocol=2))


def test_equal_stacks_in_distinct_objects_are_one_stack() -> None:
    entries = [fr_entry(record_id=i, seq=i + 1) for i in range(6)]
    for i, entry in enumerate(entries):
        line = 10 + i % 2
        entry["frames"] = [{"name": "step", "filename": "/job/train.py", "line": line}]
    decoded = columnar.decode_columns(pickle.dumps(fr_dump(entries), protocol=2))
    assert decoded is not None
    _, columns = decoded
    assert len(columns.stacks) == 2
    assert columns.stack_index.to_pylist() == [0, 1, 0, 1, 0, 1]


def _str(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def test_a_repeated_key_keeps_its_last_value_as_pickle_does() -> None:
    entry = (
        b"}("
        + _str("record_id")
        + b"K\x01"
        + _str("process_group")
        + _str("0")
        + _str("default_pg")
        + b"\x86"
        + _str("profiling_name")
        + _str("gloo:all_reduce")
        + _str("state")
        + _str("completed")
        + b"u"
        + _str("state")
        + _str("scheduled")
        + b"s"  # SETITEM: state again
    )
    data = (
        b"\x80\x02}("
        + _str("version")
        + _str("2.10")
        + _str("pg_config")
        + b"}"
        + _str("entries")
        + b"]("
        + entry
        + b"eu."
    )
    _assert_same(data)
    table = _fast(data)
    assert table is not None and table.column("state").to_pylist() == ["scheduled"]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda e: e.update(record_id="3"), id="record_id-a-str"),
        pytest.param(lambda e: e.update(pg_id=True), id="pg_id-a-bool"),
        pytest.param(lambda e: e.update(timeout_ms=6.0), id="timeout-a-float"),
        pytest.param(lambda e: e.update(thread_id=140000), id="thread_id-an-int"),
        pytest.param(lambda e: e.update(duration_ms=1), id="duration-an-int"),
        pytest.param(lambda e: e.update(process_group="0"), id="group-a-str"),
        pytest.param(lambda e: e.update(op_id=2**70), id="an-int-past-64-bits"),
        pytest.param(lambda e: e.update(input_sizes=[[1, None]]), id="a-null-dim"),
        pytest.param(lambda e: e.update(input_dtypes=["Float", None]), id="a-null-dtype"),
        pytest.param(
            lambda e: e.update(frames=[{"name": "f", "filename": "a.py", "line": 1.0}]),
            id="a-float-line",
        ),
        pytest.param(
            lambda e: e.update(frames=[{"name": "f", "filename": None, "line": 1}]),
            id="a-null-filename",
        ),
        pytest.param(lambda e: e.update(frames=(FRAME,)), id="frames-a-tuple"),
        pytest.param(lambda e: e.update(state="bad \udc80 surrogate"), id="a-lone-surrogate"),
    ],
)
def test_what_the_decoder_declines_the_general_path_reads(change: Any) -> None:
    entries = [fr_entry(record_id=i, seq=i + 1) for i in range(3)]
    change(entries[1])
    data = pickle.dumps(fr_dump(entries), protocol=2)
    assert columnar.decode_columns(data) is None
    try:
        expected: pa.Table | str = _general(data)
    except DumpError as exc:
        expected = exc.problem
    assert _loaded(data) == (expected if isinstance(expected, str) else expected.to_pylist())


FRAME = {"name": "f", "filename": "a.py", "line": 1}


def _loaded(data: bytes) -> Any:
    """``load_dump_file`` on ``data``: its rows, or the problem its error names."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "nccl_trace_rank_0"
        path.write_bytes(data)
        try:
            table = load.load_dump_file(DumpFile(path=path, rank=0), job="j", incident="i")
        except DumpError as exc:
            return exc.problem
    rows = table.table.to_pylist()
    for row in rows:  # the general path's table names the file; _general's names "dump"
        row["source_file"] = "dump"
        row["dump_time_ns"] = 5
    return rows


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param(b"\x80\x02cos\nsystem\nq\x00.", "hostile", id="a-global"),
        pytest.param(b"\x80\x02}q\x00(X\x07\x00\x00\x00versionq", "truncated", id="truncated"),
        pytest.param(b"\x80\x02]q\x00.", "foreign", id="a-list"),
        pytest.param(b"\x80\x02}q\x00X\x01\x00\x00\x00aK\x01s.", "foreign", id="no-version"),
        pytest.param(b"\x80\x02h\x07.", "corrupt", id="an-unset-memo"),
        pytest.param(b"\x80\x02e.", "corrupt", id="appends-without-a-mark"),
    ],
)
def test_damaged_and_hostile_pickles_are_left_to_the_general_path(
    data: bytes, problem: str
) -> None:
    assert columnar.decode_columns(data) is None
    assert _loaded(data) == problem


def test_entries_that_are_not_dicts_get_the_general_paths_error() -> None:
    dump = fr_dump([fr_entry(record_id=0, seq=1)])
    dump["entries"].append(["not", "an", "entry"])
    data = pickle.dumps(dump, protocol=2)
    assert columnar.decode_columns(data) is None
    assert _loaded(data) == "corrupt"


def test_every_prefix_of_a_dump_is_declined() -> None:
    data = pickle.dumps(fr_dump([fr_entry(record_id=i, seq=i + 1) for i in range(2)]), protocol=2)
    for end in range(len(data)):
        assert columnar.decode_columns(data[:end]) is None, end


def test_random_damage_never_crashes_and_never_reads_differently() -> None:
    base = pickle.dumps(fr_dump([fr_entry(record_id=i, seq=i + 1) for i in range(4)]), protocol=2)
    rng = random.Random(19)
    read = 0
    for _ in range(1500):
        data = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        fast = _fast(bytes(data))
        if fast is None:
            continue
        read += 1
        # whatever the decoder reads, the general path reads alike
        assert fast.equals(_general(bytes(data)))
    assert read > 50  # many changes (a digit, a letter) leave a readable dump


def test_a_self_containing_dump_is_declined_not_looped() -> None:
    # memo 0 is the top dict, stored into itself under pg_config: a cycle
    data = (
        b"\x80\x02}q\x00(X\x07\x00\x00\x00versionX\x04\x00\x00\x002.10"
        b"X\t\x00\x00\x00pg_configh\x00u."
    )
    assert columnar.decode_columns(data) is None


def test_a_pickle_that_multiplies_by_reference_is_declined_at_once() -> None:
    # the memo lets a few bytes name an object many times: a list of two references to
    # the list below it, forty deep, is 2**40 lists to whoever copies each reference
    tree: list[Any] = []
    for _ in range(40):
        tree = [tree, tree]
    dump = fr_dump([fr_entry(record_id=0, seq=1)], pg_config={"0": {"ranks": tree}})
    assert columnar.decode_columns(pickle.dumps(dump, protocol=2)) is None
    # and one big shape list named by every entry: 0.4 MB that would decode to 1.6 GB,
    # as much for the general path: not read at all, and said why
    shapes = [list(range(1000))] * 1000
    entries = [fr_entry(record_id=i, seq=i + 1, sizes=shapes) for i in range(100)]
    data = pickle.dumps(fr_dump(entries), protocol=2)
    assert len(data) < 500_000
    with pytest.raises(columnar.ExpandingPickleError):
        columnar.decode_columns(data)
    assert _loaded(data) == "hostile"


def _shape_bomb(entries: int) -> list[dict[str, Any]]:
    """Entries that all name one big shape list: 4 KB in a pickle, 8 MB decoded."""
    shapes = [list(range(1000))] * 1000
    return [fr_entry(record_id=i, seq=i + 1, sizes=shapes) for i in range(entries)]


def test_the_general_path_does_not_expand_what_the_decoder_declines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one field the decoder leaves to the general path (a record id written as text)
    # must not let the rest through: 0.2 MB that would decode to 0.8 GB
    entries = _shape_bomb(50)
    entries[0]["record_id"] = "0"
    data = pickle.dumps(fr_dump(entries), protocol=2)
    assert columnar.decode_columns(data) is None
    assert _loaded(data) == "hostile"
    # nor does the pure-Python switch, which takes the general path for every dump
    monkeypatch.setenv(FR_OTEL_PURE_PYTHON, "1")
    assert _loaded(pickle.dumps(fr_dump(_shape_bomb(50)), protocol=2)) == "hostile"


@pytest.mark.parametrize("pure", [False, True], ids=["decoder", "general-path"])
def test_one_long_string_in_every_entry_is_refused(
    monkeypatch: pytest.MonkeyPatch, pure: bool
) -> None:
    # 0.1 MB of thread name, named by 2,000 entries: 0.2 GB decoded
    if pure:
        monkeypatch.setenv(FR_OTEL_PURE_PYTHON, "1")
    name = "t" * 100_000
    entries = [fr_entry(record_id=i, seq=i + 1) for i in range(2000)]
    for entry in entries:
        entry["thread_name"] = name
    assert _loaded(pickle.dumps(fr_dump(entries), protocol=2)) == "hostile"
    assert len(_loaded(pickle.dumps(fr_dump(entries[:20]), protocol=2))) == 20


@pytest.mark.parametrize("pure", [False, True], ids=["decoder", "general-path"])
def test_one_long_stack_in_every_entry_is_not_copied_into_every_row(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pure: bool
) -> None:
    # each row copies its stack: 20,000 references to one frame, named by 1,000 entries,
    # are 0.2 MB that would decode to 0.8 GB of frames
    if pure:
        monkeypatch.setenv(FR_OTEL_PURE_PYTHON, "1")
    frame = {"name": "step", "filename": "/srv/job/train_loop.py", "line": 7}
    stack = [frame] * 20_000
    entries = [fr_entry(record_id=i, seq=i + 1) for i in range(1000)]
    for entry in entries:
        entry["frames"] = stack
    data = pickle.dumps(fr_dump(entries), protocol=2)
    assert len(data) < 250_000
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data)
    with pytest.raises(DumpError) as caught:
        load.load_dump_file(DumpFile(path=path, rank=0), job="j", incident="i")
    assert caught.value.problem == "hostile"
    assert str(path) in str(caught.value)
    assert f"these {len(data)} bytes" in str(caught.value)
    assert "256 times" in str(caught.value)
    # the same stack in a few entries is a dump like any other
    path.write_bytes(pickle.dumps(fr_dump(entries[:2]), protocol=2))
    table = load.load_dump_file(DumpFile(path=path, rank=0), job="j", incident="i").table
    assert table.column("frames").to_pylist()[1] == [frame] * 20_000


def test_a_memo_index_past_the_pickles_size_is_declined() -> None:
    assert columnar.decode_columns(b"\x80\x02]r\xff\xff\xff\x7f.") is None


def test_the_pure_python_switch_reads_with_the_general_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def refuse(data: bytes) -> None:
        raise AssertionError("the compiled decoder ran")

    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(fr_dump([fr_entry(record_id=0, seq=1)]), protocol=2))
    monkeypatch.setattr(columnar, "decode_columns", refuse)
    monkeypatch.setenv(FR_OTEL_PURE_PYTHON, "1")
    table = load.load_dump_file(DumpFile(path=path, rank=0), job="j", incident="i").table
    assert table.column("record_id").to_pylist() == [0]


def test_a_double_is_read_bit_for_bit() -> None:
    entry = fr_entry(record_id=0, seq=1)
    entry["duration_ms"] = struct.unpack("<d", bytes.fromhex("0123456789abcdef"))[0]
    _assert_same(pickle.dumps(fr_dump([entry]), protocol=2))
