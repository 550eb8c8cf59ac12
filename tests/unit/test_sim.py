"""The fleet simulator: dump shape, healthy invariants, each fault's symptoms, writers, CLI."""

from __future__ import annotations

import ast
import json
import os
import pickle
import pickletools
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fr_otel.cli.simulate_cmd import simulate as simulate_cmd
from fr_otel.errors import SimulationError
from fr_otel.sim import (
    FAULT_KINDS,
    TRUTH_FILENAME,
    Fleet,
    FleetSpec,
    resolve_layout,
    simulate,
    to_json_shape,
    write_fleet,
)

ENTRY_KEYS_2_10 = [
    "frames",
    "record_id",
    "pg_id",
    "process_group",
    "thread_name",
    "thread_id",
    "collective_seq_id",
    "p2p_seq_id",
    "op_id",
    "profiling_name",
    "time_created_ns",
    "duration_ms",
    "input_sizes",
    "input_dtypes",
    "output_sizes",
    "output_dtypes",
    "state",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
    "retired",
    "timeout_ms",
    "is_p2p",
]
PLAIN_TYPES = (dict, list, tuple, str, int, float, bool, type(None))


@cache
def fleet(world: int = 16, entries: int = 300, fault: str = "none", **kw: Any) -> Fleet:
    """Simulations are deterministic, so tests share them."""
    return simulate(FleetSpec(world=world, entries=entries, fault=fault, **kw))


def op_of(entry: dict[str, Any]) -> str:
    return str(entry["profiling_name"]).split(":", 1)[1].split(" ")[0]


def collectives(f: Fleet, pg: str) -> dict[int, dict[int, dict[str, Any]]]:
    """rank -> collective_seq_id -> entry, for the collectives of group ``pg``."""
    out: dict[int, dict[int, dict[str, Any]]] = defaultdict(dict)
    for rank, dump in f.dumps.items():
        for e in dump["entries"]:
            if e["process_group"][0] == pg and not e["is_p2p"]:
                out[rank][e["collective_seq_id"]] = e
    return out


def blocked_in(dump: dict[str, Any]) -> dict[str, Any] | None:
    """The oldest work (an entry with CUDA events) that has not completed."""
    batched = batched_ops(dump)
    for i, e in enumerate(dump["entries"]):
        if e["state"] != "completed" and i not in batched:
            entry: dict[str, Any] = e
            return entry
    return None


def batched_ops(dump: dict[str, Any]) -> set[int]:
    """Indices of send/recv entries recorded inside a batch_isend_irecv.

    The host records a batch back to back: its ops share one p2p_seq_id with the
    ``nccl:coalesced`` trailer that follows. NCCL gives those ops no CUDA events, so
    they stay ``scheduled`` for ever (pytorch#137969); only the trailer completes.
    """
    entries = dump["entries"]
    out: set[int] = set()
    for i in range(len(entries) - 1, -1, -1):
        e = entries[i]
        if e["profiling_name"] == "nccl:coalesced":
            j = i - 1
            while (
                j >= 0
                and entries[j]["p2p_seq_id"] == e["p2p_seq_id"]
                and op_of(entries[j]) in ("send", "recv")
                and entries[j]["process_group"] == e["process_group"]
            ):
                out.add(j)
                j -= 1
    return out


def in_batch(dump: dict[str, Any], e: dict[str, Any]) -> bool:
    return dump["entries"].index(e) in batched_ops(dump)


# -- spec and layout ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"world": 0, "entries": 10}, "world"),
        ({"world": 8, "entries": 0}, "entries"),
        ({"world": 8, "entries": 10, "tp": 3}, "tp"),
        ({"world": 8, "entries": 10, "tp": 2, "pp": 8}, "pp"),
        ({"world": 8, "entries": 10, "fault": "bogus"}, "fault"),
        ({"world": 1, "entries": 10, "fault": "gpu_hang"}, "fault"),
        ({"world": 8, "entries": 10, "fault_rank": 8}, "fault_rank"),
        ({"world": 8, "entries": 10, "version": "2"}, "version"),
        ({"world": 8, "entries": 10, "timeout_ms": 0}, "timeout_ms"),
    ],
)
def test_bad_spec_names_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(SimulationError, match=f"^{field}:"):
        FleetSpec(**kwargs)


def test_layouts() -> None:
    assert resolve_layout(1, None, None) == (1, 1, 1)
    assert resolve_layout(8, None, None) == (2, 2, 2)
    assert resolve_layout(256, None, None) == (2, 4, 32)
    assert resolve_layout(2, None, None, need_pp=True) == (1, 2, 1)
    assert resolve_layout(4, None, None, need_dp=True) == (2, 1, 2)
    with pytest.raises(SimulationError, match="pp"):
        resolve_layout(8, 2, 4, need_dp=True)
    with pytest.raises(SimulationError, match="data-parallel"):
        simulate(FleetSpec(world=8, entries=50, tp=2, pp=4, fault="all_to_all_splits"))


def test_group_names_are_global_counters_and_pg_ids_rank_local() -> None:
    f = fleet()
    assert f.mesh is not None
    for g in f.mesh.groups:
        assert g.name == str(g.gid)
    names_seen: Counter[str] = Counter()
    for rank, dump in f.dumps.items():
        pg_ids = {e["process_group"][0]: e["pg_id"] for e in dump["entries"]}
        assert sorted(pg_ids.values()) == list(range(len(pg_ids)))
        assert pg_ids["0"] == 0
        names_seen.update(pg_ids)
        assert set(pg_ids) == set(dump["pg_config"]), rank
    # tp, pp and dp groups are distinct names that also differ from pg_ids.
    assert len(names_seen) == len(f.mesh.groups)


# -- healthy fleet -----------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 16])
def test_healthy_fleet_invariants(world: int) -> None:
    f = fleet(world, 300)
    assert f.truth.kind == "none" and f.truth.culprit_ranks == ()
    first_ids = set()
    for rank, dump in f.dumps.items():
        entries = dump["entries"]
        assert len(entries) == 300
        ids = [e["record_id"] for e in entries]
        assert ids == list(range(ids[0], ids[0] + 300)), "record ids must be contiguous"
        assert ids[0] > 0, "the ring buffer must have wrapped"
        first_ids.add(ids[0])
        created = [e["time_created_ns"] for e in entries]
        assert created == sorted(created)
        batched = batched_ops(dump)
        for i, e in enumerate(entries):
            if i in batched:
                assert e["state"] == "scheduled" and not e["retired"]
                assert e["time_discovered_started_ns"] is None
                assert "duration_ms" not in e
                continue
            assert e["state"] == "completed" and e["retired"], (rank, e)
            assert e["time_discovered_completed_ns"] >= e["time_discovered_started_ns"]
            assert e["time_discovered_started_ns"] > e["time_created_ns"]
            waited = e["time_discovered_completed_ns"] - e["time_created_ns"]
            assert 0 < e["duration_ms"] * 1e6 < waited
        for status in dump["pg_status"].values():
            assert status["last_enqueued_collective"] == status["last_completed_collective"]
            assert status["last_started_collective"] == status["last_completed_collective"]
    if world == 16:
        assert len(first_ids) > 1, "ranks in different stages wrap at different points"


def test_healthy_pg_config_is_valid_and_consistent() -> None:
    f = fleet()
    seen: dict[str, dict[str, str]] = {}
    for rank, dump in f.dumps.items():
        cfg = dump["pg_config"]
        assert list(cfg) == sorted(cfg), "std::map order"
        for name, info in cfg.items():
            assert info["name"] == name
            ranks = ast.literal_eval(info["ranks"])
            assert rank in ranks and len(set(ranks)) == len(ranks)
            assert seen.setdefault(name, info) == info, f"{name} differs on rank {rank}"
    descs = Counter(info["desc"] for info in seen.values())
    assert descs == {"default_pg": 1, "mesh_tp": 8, "mesh_pp": 8, "mesh_dp": 4}
    assert seen["0"]["ranks"] == str(list(range(16)))
    # Every member of a group lists it, and nobody else does.
    for name, info in seen.items():
        holders = [r for r, d in f.dumps.items() if name in d["pg_config"]]
        assert holders == sorted(ast.literal_eval(info["ranks"]))


def test_healthy_collectives_agree_across_members() -> None:
    f = fleet()
    cfg = {
        n: ast.literal_eval(i["ranks"]) for d in f.dumps.values() for n, i in d["pg_config"].items()
    }
    checked = 0
    for pg, ranks in cfg.items():
        by_rank = collectives(f, pg)
        common = set.intersection(*(set(by_rank[r]) for r in ranks)) if by_rank else set()
        for seq in common:
            es = [by_rank[r][seq] for r in ranks]
            assert len({op_of(e) for e in es}) == 1
            if op_of(es[0]) == "all_to_all":
                numel_in = sum(e["input_sizes"][0][0] * e["input_sizes"][0][1] for e in es)
                numel_out = sum(e["output_sizes"][0][0] * e["output_sizes"][0][1] for e in es)
                assert numel_in == numel_out
            else:
                assert (
                    len(
                        {repr((e["input_sizes"], e["output_sizes"], e["input_dtypes"])) for e in es}
                    )
                    == 1
                )
            checked += 1
    assert checked > 100


def test_p2p_naming_and_batches() -> None:
    f = fleet()
    dump = f.dumps[f.mesh.rank_at(0, 1, 0) if f.mesh else 2]
    entries = dump["entries"]
    names = {e["profiling_name"] for e in entries if e["is_p2p"]}
    assert "nccl:coalesced" in names
    assert any(n.startswith("nccl:recv 1<-0") for n in names)
    assert any(n.startswith("nccl:send 1->0") for n in names)
    for i, e in enumerate(entries):
        if e["profiling_name"] == "nccl:coalesced":
            assert e["input_sizes"] == [] and e["output_sizes"] == []
            # The trailer shares the batch's p2p_seq_id and the last op's op_id.
            if i > 0 and entries[i - 1]["p2p_seq_id"] == e["p2p_seq_id"]:
                assert entries[i - 1]["op_id"] == e["op_id"]
                assert any(f["name"] == "batch_isend_irecv" for f in entries[i - 1]["frames"])
                assert i - 1 in batched_ops(dump)
    # P2P entries carry the group's collective counter, which P2P never moves.
    assert {e["collective_seq_id"] for e in entries if e["is_p2p"]} == {0}


def test_entry_keys_frames_and_types() -> None:
    f = fleet()
    dump = f.dumps[3]
    assert list(dump) == ["version", "pg_config", "comm_lib_version", "pg_status", "entries"]
    frames_objects: set[int] = set()
    for e in dump["entries"]:
        expected = [k for k in ENTRY_KEYS_2_10 if k != "duration_ms" or "duration_ms" in e]
        assert list(e) == expected
        assert isinstance(e["process_group"], tuple) and isinstance(e["thread_id"], str)
        frames_objects.update(id(fr) for fr in e["frames"])
        assert e["frames"][0]["filename"].endswith("distributed_c10d.py")
    # Frame dicts are shared between entries, as torch's memoized pickles share them.
    assert len(frames_objects) < 60

    def walk(x: Any) -> None:
        assert type(x) in PLAIN_TYPES, type(x)
        if isinstance(x, dict):
            for k, v in x.items():
                walk(k)
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(dump)


def test_pickles_hold_only_plain_types() -> None:
    data = pickle.dumps(fleet().dumps[5], protocol=2)
    banned = {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX"}
    ops = {op.name for op, _arg, _pos in pickletools.genops(data)}
    assert not ops & banned
    assert data[:2] == b"\x80\x02"


def test_determinism() -> None:
    a = simulate(FleetSpec(world=8, entries=120, fault="cross_pg_deadlock", seed=3))
    b = simulate(FleetSpec(world=8, entries=120, fault="cross_pg_deadlock", seed=3))
    c = simulate(FleetSpec(world=8, entries=120, fault="cross_pg_deadlock", seed=4))
    for r in range(8):
        pa = pickle.dumps(a.dumps[r], protocol=2)
        assert pa == pickle.dumps(b.dumps[r], protocol=2)
        assert pa != pickle.dumps(c.dumps[r], protocol=2)
    assert a.truth == b.truth


def test_timing_off_never_started() -> None:
    f = fleet(16, 200, "gpu_hang", timing=False)
    for dump in f.dumps.values():
        for e in dump["entries"]:
            assert e["state"] != "started"
            assert "duration_ms" not in e
            assert e["time_discovered_started_ns"] is None
        assert all(s["last_started_collective"] == -1 for s in dump["pg_status"].values())


def test_no_stack_traces_and_older_versions() -> None:
    f = fleet(8, 50, stack_traces=False, version="2.7")
    dump = f.dumps[1]
    assert list(dump) == ["version", "pg_config", "nccl_version", "pg_status", "entries"]
    assert dump["version"] == "2.7"
    for e in dump["entries"]:
        assert "frames" not in e and "thread_name" not in e and "thread_id" not in e
    old = fleet(8, 50, version="2.3").dumps[1]
    assert list(old) == ["version", "pg_config", "pg_status", "entries"]


def test_small_ring_and_lazy_dumps_rebuild_identically() -> None:
    f = simulate(FleetSpec(world=8, entries=3))
    assert all(len(d["entries"]) == 3 for d in f.dumps.values())
    big = simulate(FleetSpec(world=80, entries=20))
    first = pickle.dumps(big.dumps[0], protocol=2)
    for r in range(80):  # pushes rank 0 out of the 64-entry cache
        big.dumps[r]
    assert pickle.dumps(big.dumps[0], protocol=2) == first


# -- faults ------------------------------------------------------------------------------


def _key_entries(f: Fleet) -> tuple[dict[int, dict[int, dict[str, Any]]], tuple[int, ...], int]:
    t = f.truth
    assert t.pg_name is not None and t.pg_ranks is not None and t.collective_seq_id is not None
    return collectives(f, t.pg_name), t.pg_ranks, t.collective_seq_id


def _peers(f: Fleet) -> list[int]:
    assert f.truth.pg_ranks is not None
    return [r for r in f.truth.pg_ranks if r not in f.truth.culprit_ranks]


def test_every_fault_hangs_and_dumps_after_the_timeout() -> None:
    for kind in FAULT_KINDS[1:]:
        f = fleet(16, 300, kind)
        t = f.truth
        assert t.kind == kind
        assert (t.culprit_ranks == ()) == (kind == "network")
        stuck = [blocked_in(d) for d in f.dumps.values()]
        oldest = min(e["time_created_ns"] for e in stuck if e is not None)
        dump_times = [f.dump_time_ns(r) or 0 for r in range(16)]
        assert min(dump_times) - oldest >= 600_000 * 1_000_000, kind
        if t.collective_seq_id is not None:
            by_rank, _ranks, seq = _key_entries(f)
            majority = Counter(op_of(by_rank[r][seq]) for r in _peers(f) if seq in by_rank[r])
            assert majority.most_common(1)[0][0] == t.op, kind


def test_skipped_collective_shifts_the_culprits_seq() -> None:
    f = fleet(16, 300, "skipped_collective")
    by_rank, ranks, seq = _key_entries(f)
    (culprit,) = f.truth.culprit_ranks
    peer = _peers(f)[0]
    # The culprit's seq is the peers' seq + 1: same op and sizes one number earlier.
    mine, theirs = by_rank[culprit][seq], by_rank[peer][seq + 1]
    assert (op_of(mine), mine["input_sizes"]) == (op_of(theirs), theirs["input_sizes"])
    assert by_rank[peer][seq]["state"] == "started"
    assert all(by_rank[r][seq]["state"] != "completed" for r in ranks)


def test_missing_rank_never_reaches_the_collective() -> None:
    f = fleet(16, 300, "missing_rank")
    by_rank, _ranks, seq = _key_entries(f)
    (culprit,) = f.truth.culprit_ranks
    assert max(by_rank[culprit]) == seq - 1
    assert blocked_in(f.dumps[culprit]) is None, "the culprit's stream drained"
    for peer in _peers(f):
        assert by_rank[peer][seq]["state"] == "started"


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("op_type_mismatch", "profiling_name"),
        ("size_mismatch", "input_sizes"),
        ("dtype_mismatch", "input_dtypes"),
    ],
)
def test_mismatches_never_complete(kind: str, field: str) -> None:
    f = fleet(16, 300, kind)
    by_rank, ranks, seq = _key_entries(f)
    (culprit,) = f.truth.culprit_ranks
    peers = _peers(f)
    assert all(by_rank[p][seq][field] == by_rank[peers[0]][seq][field] for p in peers)
    assert by_rank[culprit][seq][field] != by_rank[peers[0]][seq][field]
    assert {by_rank[r][seq]["state"] for r in ranks} == {"started"}


def test_all_to_all_splits_unbalance_the_totals() -> None:
    f = fleet(16, 300, "all_to_all_splits")
    by_rank, ranks, seq = _key_entries(f)
    es = [by_rank[r][seq] for r in ranks]
    assert {op_of(e) for e in es} == {"all_to_all"}
    total_in = sum(e["input_sizes"][0][0] for e in es)
    total_out = sum(e["output_sizes"][0][0] for e in es)
    assert total_in != total_out
    assert {e["state"] for e in es} == {"started"}
    # The all_to_all before it balanced and completed.
    before = max(s for s, e in by_rank[ranks[0]].items() if s < seq and op_of(e) == "all_to_all")
    prev = [by_rank[r][before] for r in ranks]
    assert sum(e["input_sizes"][0][0] for e in prev) == sum(e["output_sizes"][0][0] for e in prev)
    assert {e["state"] for e in prev} == {"completed"}


def test_reordered_collectives_swap_two_seqs() -> None:
    f = fleet(16, 300, "reordered_collectives")
    by_rank, _ranks, seq = _key_entries(f)
    (culprit,) = f.truth.culprit_ranks
    peer = _peers(f)[0]
    assert by_rank[culprit][seq]["input_sizes"] == by_rank[peer][seq + 1]["input_sizes"]
    assert by_rank[culprit][seq + 1]["input_sizes"] == by_rank[peer][seq]["input_sizes"]
    assert by_rank[culprit][seq]["input_sizes"] != by_rank[peer][seq]["input_sizes"]


def test_cross_pg_deadlock_blocks_members_in_different_groups() -> None:
    f = fleet(16, 300, "cross_pg_deadlock")
    (culprit,) = f.truth.culprit_ranks
    mine = blocked_in(f.dumps[culprit])
    assert mine is not None
    blocked_groups = {mine["process_group"][0]}
    for peer in _peers(f):
        theirs = blocked_in(f.dumps[peer])
        assert theirs is not None
        assert theirs["process_group"][0] == f.truth.pg_name
        assert theirs["collective_seq_id"] == f.truth.collective_seq_id
        blocked_groups.add(theirs["process_group"][0])
    assert len(blocked_groups) == 2
    # Each waits for the other: the peer is a member of the group the culprit waits in.
    assert f.truth.pg_ranks is not None
    assert mine["process_group"][1] == "default_pg"


@pytest.mark.parametrize("stage", [None, 0, 1, 3])
def test_p2p_unmatched_leaves_a_send_without_recv(stage: int | None) -> None:
    # world 32: tp 2, pp 4, dp 4; rank 2 * stage sits at that stage.
    f = fleet(32, 300, "p2p_unmatched", fault_rank=None if stage is None else 2 * stage)
    t = f.truth
    assert t.p2p_seq_id is not None and t.pg_ranks is not None
    (culprit,) = t.culprit_ranks
    sender = next(r for r in t.pg_ranks if r != culprit and _sent_unmatched(f, r))
    send = next(
        e
        for e in f.dumps[sender]["entries"]
        if e["process_group"][0] == t.pg_name and e["p2p_seq_id"] == t.p2p_seq_id
    )
    assert op_of(send) in ("send", "coalesced")
    work = send if not in_batch(f.dumps[sender], send) else _trailer(f.dumps[sender], send)
    assert work["state"] == "started"
    # Since the last step both completed, the culprit posted one recv fewer from the
    # sender than the sender posted sends to it.
    local = t.pg_ranks.index(culprit), t.pg_ranks.index(sender)
    since = _last_step_start(f, (culprit, sender))
    sends = _count_after(f.dumps[sender], f"nccl:send {local[1]}->{local[0]}", since)
    recvs = _count_after(f.dumps[culprit], f"nccl:recv {local[0]}<-{local[1]}", since)
    assert sends - recvs == 1


def _last_step_start(f: Fleet, ranks: tuple[int, ...]) -> int:
    """The last default_pg seq both ranks completed (the end of the previous step)."""
    done = [
        {
            e["collective_seq_id"]
            for e in f.dumps[r]["entries"]
            if e["process_group"][0] == "0" and e["state"] == "completed"
        }
        for r in ranks
    ]
    return int(max(set.intersection(*done)))


def _count_after(dump: dict[str, Any], name: str, world_seq: int) -> int:
    entries = dump["entries"]
    start = next(
        i
        for i, e in enumerate(entries)
        if e["process_group"][0] == "0" and e["collective_seq_id"] == world_seq
    )
    return sum(1 for e in entries[start:] if e["profiling_name"] == name)


def _trailer(dump: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    return next(
        e
        for e in dump["entries"]
        if e["profiling_name"] == "nccl:coalesced"
        and e["p2p_seq_id"] == op["p2p_seq_id"]
        and e["process_group"] == op["process_group"]
    )


def _sent_unmatched(f: Fleet, rank: int) -> bool:
    blocked = blocked_in(f.dumps[rank])
    return blocked is not None and blocked["p2p_seq_id"] == f.truth.p2p_seq_id and blocked["is_p2p"]


def test_gpu_hang_culprit_scheduled_while_peers_started() -> None:
    f = fleet(16, 300, "gpu_hang")
    by_rank, _ranks, seq = _key_entries(f)
    (culprit,) = f.truth.culprit_ranks
    assert by_rank[culprit][seq]["state"] == "scheduled"
    assert blocked_in(f.dumps[culprit]) is by_rank[culprit][seq]
    for peer in _peers(f):
        assert by_rank[peer][seq]["state"] == "started"


def test_network_all_started_none_completed() -> None:
    f = fleet(16, 300, "network")
    by_rank, ranks, seq = _key_entries(f)
    assert f.truth.culprit_ranks == ()
    assert {by_rank[r][seq]["state"] for r in ranks} == {"started"}
    assert all(by_rank[r][seq - 1]["state"] == "completed" for r in ranks)


@pytest.mark.parametrize("world", [2, 4, 6])
def test_faults_on_tiny_worlds(world: int) -> None:
    for kind in FAULT_KINDS[1:]:
        f = fleet(world, 60, kind)
        assert f.truth.kind == kind
        assert any(blocked_in(d) is not None for d in f.dumps.values())


# -- writers and CLI ---------------------------------------------------------------------


def test_write_pickle_and_json_round_trip(tmp_path: Path) -> None:
    f = fleet(8, 50, "gpu_hang")
    pk = write_fleet(f, tmp_path / "pk", omit_ranks=[3], write_truth=True)
    assert [p.name for p in pk] == [f"nccl_trace_rank_{r}" for r in range(8) if r != 3]
    assert sorted(os.listdir(tmp_path / "pk")) == sorted([p.name for p in pk] + [TRUTH_FILENAME])
    for p in pk:
        rank = int(p.name.rsplit("_", 1)[1])
        with p.open("rb") as fh:
            assert pickle.load(fh) == f.dumps[rank]
        assert p.stat().st_mtime_ns == f.dump_time_ns(rank)
    truth = json.loads((tmp_path / "pk" / TRUTH_FILENAME).read_text())
    assert truth["truth"]["culprit_ranks"] == list(f.truth.culprit_ranks)

    js = write_fleet(f, tmp_path / "js", fmt="json", prefix="comm_lib_trace_rank_")
    assert sorted(os.listdir(tmp_path / "js")) == sorted(p.name for p in js)
    raw = js[0].read_bytes()
    assert b", " not in raw[:200] and raw.startswith(b'{"comm_lib_version":"2.21.5"')
    doc = json.loads(raw)
    assert doc == json.loads(json.dumps(to_json_shape(f.dumps[0])))
    assert doc["nccl_comm_state"] == {}
    assert all(isinstance(v, str) for s in doc["pg_status"].values() for v in s.values())
    for e in doc["entries"]:
        assert "frames" not in e and isinstance(e["process_group"], list)
        assert e["time_discovered_started_ns"] is not None
        assert e["time_discovered_completed_ns"] is not None
    assert to_json_shape({**f.dumps[0], "entries": []}).get("entries") is None


def test_write_keeps_edits_to_cached_dumps(tmp_path: Path) -> None:
    f = simulate(FleetSpec(world=4, entries=30))
    f.dumps[1]["entries"].pop()  # e.g. a test truncating one rank's ring
    (one, *_rest) = write_fleet(f, tmp_path, omit_ranks=[0])
    with one.open("rb") as fh:
        assert len(pickle.load(fh)["entries"]) == 29


def test_write_rejects_bad_arguments(tmp_path: Path) -> None:
    f = fleet(8, 50)
    with pytest.raises(SimulationError, match="omit_ranks"):
        write_fleet(f, tmp_path, omit_ranks=[8])
    with pytest.raises(SimulationError, match="prefix"):
        write_fleet(f, tmp_path, prefix="a/b")


def test_cli_writes_files_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "out"
    runner = CliRunner()
    args = [str(out), "--world", "8", "--entries", "40", "--fault", "missing_rank"]
    result = runner.invoke(simulate_cmd, [*args, "--omit-rank", "2", "--truth", "--no-timing"])
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1
    assert "7 dump files" in result.output and "missing_rank" in result.output
    assert "culprit: 4" in result.output
    assert (out / TRUTH_FILENAME).exists() and not (out / "nccl_trace_rank_2").exists()
    again = runner.invoke(simulate_cmd, args)
    assert again.exit_code == 2 and "not empty" in again.output
    bad = runner.invoke(simulate_cmd, [str(tmp_path / "x"), "--world", "4", "--omit-rank", "9"])
    assert bad.exit_code == 2 and "--omit-rank" in bad.output
    err = runner.invoke(simulate_cmd, [str(tmp_path / "y"), "--world", "0"])
    assert isinstance(err.exception, SimulationError)
    js = runner.invoke(
        simulate_cmd, [str(tmp_path / "z"), "--world", "2", "--entries", "5", "--format", "json"]
    )
    assert js.exit_code == 0 and (tmp_path / "z" / "nccl_trace_rank_1.json").exists()
