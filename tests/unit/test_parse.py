"""Dump bytes -> canonical rows: encodings, versions, backends and damaged input."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fr_otel.dumps.membership import needs_membership
from fr_otel.dumps.parse import ParsedDump, decode_dump, dump_to_table, split_profiling_name
from fr_otel.errors import DumpError
from fr_otel.schema import RECORD_SCHEMA
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.fr_dumps import FRAMES, as_json_bytes, fr_dump, fr_entry


def _parsed(dump: dict[str, Any], *, rank: int = 0, members_column: bool = True) -> ParsedDump:
    """A decoded pickle dump's rows, as an import of file "d" makes them."""
    return dump_to_table(
        dump,
        path="d",
        source_format="pickle",
        job="j",
        incident="i",
        rank=rank,
        dump_time_ns=None,
        members_column=members_column,
    )


def _table(data: bytes, rank: int = 0) -> pa.Table:
    obj, fmt = decode_dump(data, "dump")
    return dump_to_table(
        obj, path="dump", source_format=fmt, job="j", incident="i", rank=rank, dump_time_ns=5
    ).table


def test_pickle_rows_match_entries() -> None:
    dump = fr_dump([fr_entry(record_id=7, seq=1), fr_entry(record_id=8, seq=2, state="started")])
    table = _table(pickle.dumps(dump, protocol=2), rank=1)
    assert table.schema == RECORD_SCHEMA
    rows = table.to_pylist()
    assert [r["record_id"] for r in rows] == [7, 8]
    first = rows[0]
    assert first["rank"] == 1
    assert (first["pg_name"], first["pg_desc"], first["pg_ranks"]) == ("0", "default_pg", [0, 1])
    assert first["pg_ranks_inferred"] is False
    assert (first["backend"], first["op"]) == ("nccl", "all_reduce")
    assert first["frames"] == FRAMES
    assert first["time_completed_ns"] is not None and first["duration_ms"] == 0.5
    assert rows[1]["time_completed_ns"] is None and rows[1]["duration_ms"] is None
    assert first["pg_last_completed_seq"] == 1
    assert (first["fr_version"], first["comm_lib_version"]) == ("2.10", "2.21.5")
    assert first["source_format"] == "pickle" and first["dump_time_ns"] == 5


def test_json_encoding_normalises_to_the_same_rows_without_frames() -> None:
    dump = fr_dump([fr_entry(record_id=0, seq=1, state="scheduled")])
    from_pickle = _table(pickle.dumps(dump, protocol=2)).to_pylist()[0]
    from_json = _table(as_json_bytes(dump)).to_pylist()[0]
    assert from_json["frames"] is None and from_json["call_site"] is None
    assert from_pickle["call_site"] == "/job/train.py:21 in train_step"
    assert from_json["time_completed_ns"] is None  # JSON wrote 0
    assert from_json["pg_last_enqueued_seq"] == 2  # JSON wrote "2"
    assert from_json["source_format"] == "json"
    ignore = {"frames", "call_site", "source_format"}
    assert {k: v for k, v in from_json.items() if k not in ignore} == {
        k: v for k, v in from_pickle.items() if k not in ignore
    }


@pytest.mark.parametrize(
    ("version", "library"), [("2.3", None), ("2.7", "2.20.3"), ("2.10", "2.21.5")]
)
def test_every_version_imports_with_missing_fields_null(version: str, library: str | None) -> None:
    dump = fr_dump([fr_entry(record_id=0, seq=1, version=version)], version=version)
    row = _table(pickle.dumps(dump, protocol=2)).to_pylist()[0]
    assert row["fr_version"] == version
    assert row["comm_lib_version"] == library
    expect_thread = version == "2.10"
    assert (row["thread_name"] is not None) is expect_thread
    assert (row["thread_id"] is not None) is expect_thread


def test_empty_json_dump_without_entries_key_is_valid() -> None:
    data = as_json_bytes(fr_dump([]))
    assert b'"entries"' not in data
    assert _table(data).num_rows == 0


def test_p2p_peer_is_mapped_from_group_local_to_global_rank() -> None:
    config = {"5": {"name": "5", "desc": "mesh_pp", "ranks": "[2, 6]"}}
    send = fr_entry(record_id=0, seq=0, pg=("5", "mesh_pp"), op="nccl:send 0->1", is_p2p=True)
    recv = fr_entry(record_id=1, seq=0, pg=("5", "mesh_pp"), op="nccl:recv 0<-1", is_p2p=True)
    rows = _table(pickle.dumps(fr_dump([send, recv], pg_config=config), protocol=2), 2).to_pylist()
    assert [(r["op"], r["peer"], r["pg_ranks"]) for r in rows] == [
        ("send", 6, [2, 6]),
        ("recv", 6, [2, 6]),
    ]


@pytest.mark.parametrize(
    ("ranks", "expected"),
    [
        ("[2, 6]", [2, 6]),  # NCCL's pg_config: a JSON string
        ([2, 6], [2, 6]),  # already a list
        ("[2, true]", [2, 1]),  # JSON's true is an int to Python: kept as one
        ("[2, 6.0]", None),  # anything but ints: the members are unknown
        ([2, "6"], None),
        ("[2, 6", None),  # not JSON
        ("[]", None),
    ],
)
def test_a_groups_member_list_is_ints_or_unknown(ranks: object, expected: object) -> None:
    config = {"5": {"name": "5", "desc": "mesh_pp", "ranks": ranks}}
    entry = fr_entry(record_id=0, seq=0, pg=("5", "mesh_pp"))
    rows = _table(pickle.dumps(fr_dump([entry], pg_config=config), protocol=2), 2).to_pylist()
    assert rows[0]["pg_ranks"] == expected


def test_gloo_pg_config_is_not_trusted() -> None:
    broken = {"": {"name": "", "desc": "", "ranks": "[]"}}
    entry = fr_entry(record_id=0, seq=1, op="gloo:all_reduce")
    obj, fmt = decode_dump(pickle.dumps(fr_dump([entry], pg_config=broken), protocol=2), "d")
    parsed = dump_to_table(
        obj, path="d", source_format=fmt, job="j", incident="i", rank=0, dump_time_ns=None
    )
    assert parsed.table.column("pg_ranks").to_pylist() == [None]
    assert parsed.groups["0"].ranks is None and parsed.groups["0"].entries == 1
    assert parsed.backends == {"gloo"}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nccl:all_reduce", ("nccl", "all_reduce", None)),
        ("nccl:_all_gather_base", ("nccl", "_all_gather_base", None)),
        ("nccl:send 0->1", ("nccl", "send", 1)),
        ("nccl:recv 3<-2", ("nccl", "recv", 2)),
        ("gloo:barrier", ("gloo", "barrier", None)),
        ("nccl2:all_to_all_v", ("nccl2", "all_to_all_v", None)),
        ("coalesced", (None, "coalesced", None)),
    ],
)
def test_split_profiling_name(name: str, expected: tuple[str | None, str, int | None]) -> None:
    assert split_profiling_name(name) == expected


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "empty"),
        (pickle.dumps(fr_dump([fr_entry(record_id=0, seq=1)]), protocol=2)[:-40], "truncated"),
        (as_json_bytes(fr_dump([fr_entry(record_id=0, seq=1)]))[:-10], "truncated"),
        (b"\x89PNG\r\n\x1a\n....", "foreign"),
        (pickle.dumps({"weights": [1, 2, 3]}, protocol=2), "foreign"),
        (b'{"hello": "world"}', "foreign"),
        (pickle.dumps([1, 2], protocol=2), "foreign"),
        (b"\x80\x02}q\x00\xfe\xfe.", "corrupt"),
    ],
)
def test_damaged_input_is_named(data: bytes, problem: str) -> None:
    with pytest.raises(DumpError) as info:
        decode_dump(data, "/x/rank_3")
    assert info.value.problem == problem
    assert info.value.path == "/x/rank_3"
    assert str(info.value).startswith("/x/rank_3: ")


def test_entries_missing_required_fields_are_corrupt() -> None:
    entry = fr_entry(record_id=0, seq=1)
    del entry["process_group"]
    with pytest.raises(DumpError, match="entry 0 has no 'process_group'"):
        _parsed(fr_dump([entry]))


def test_odd_scalar_types_are_coerced() -> None:
    entry = fr_entry(record_id=0, seq=1)
    entry["thread_id"] = 12345  # an int, not the string torch writes
    entry["collective_seq_id"] = "1"
    table = _parsed(fr_dump([entry])).table
    row = table.to_pylist()[0]
    assert (row["thread_id"], row["collective_seq_id"]) == ("12345", 1)


def test_a_run_folder_in_a_dumps_path_names_its_run() -> None:
    from fr_otel.dumps.parse import run_id_of

    path = "/a/_fr_dumps/job=x/run=20261201T064000Z-3fa2b1c0/incident=i/comm_lib_trace_rank_0"
    assert run_id_of(path) == "20261201T064000Z-3fa2b1c0"
    assert run_id_of("dumps/nccl_trace_rank_0") is None
    assert run_id_of("dumps/rerun=1/x") is None


def test_every_row_carries_its_groups_members_as_pg_config_lists_them(tmp_path: Path) -> None:
    files = write_fleet(simulate(FleetSpec(world=16, entries=300, tp=2, pp=2)), tmp_path)
    for path in files[:4]:
        data = path.read_bytes()
        members = {
            name: sorted(int(r) for r in config["ranks"].strip("[]").split(","))
            for name, config in pickle.loads(data)["pg_config"].items()
        }
        table = _table(data)
        rows = table.select(["pg_name", "pg_ranks"]).to_pylist()
        assert len({r["pg_name"] for r in rows}) >= 3, "a rank of a 3D job is in 3 groups"
        for row in rows:
            assert sorted(row["pg_ranks"]) == members[row["pg_name"]], (path, row["pg_name"])


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_a_table_without_member_lists_is_the_same_rows_less_that_column(
    tmp_path: Path, backend: str
) -> None:
    files = write_fleet(simulate(FleetSpec(world=8, entries=200, tp=2)), tmp_path)
    dump = pickle.loads(files[3].read_bytes())
    if backend == "gloo":  # its pg_config is not trusted: no row has members
        for entry in dump["entries"]:
            entry["profiling_name"] = entry["profiling_name"].replace("nccl:", "gloo:")
    full, lean = _parsed(dump, rank=3), _parsed(dump, rank=3, members_column=False)
    assert lean.table.equals(full.table.drop_columns(["pg_ranks"]))
    assert lean.groups == full.groups
    # the groups tell whether rows lack members, with or without the column
    lacking = bool(full.table.column("pg_ranks").null_count)
    assert lacking is (backend == "gloo")
    assert needs_membership(lean.groups) is lacking
