"""The memory-mapped ring (``fr_otel.recorder.ring``) and its table (``recorder.table``).

Everything here is real: real files under ``tmp_path``, real ``mmap`` and ``flock``, and
for the crash test a real child process that SIGKILLs itself after writing its ring.
Nothing is faked; torch is not needed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from fr_otel.recorder.ring import (
    HEADER_SIZE,
    GroupInfo,
    RingContents,
    RingFormatError,
    RingWriter,
    Signature,
    adopted,
    append_flushed,
    read_ring,
    ring_base,
    ring_bases,
    torch_ring_base,
)
from fr_otel.recorder.slot import COMPLETED, EMPTY, FAILED, SCHEDULED, SLOT_SIZE, STARTED
from fr_otel.recorder.table import ring_table
from fr_otel.schema import RECORD_SCHEMA
from fr_otel.stacks import call_site

GROUP = GroupInfo(
    name="0", desc="default_pg", ranks=(0, 1, 2, 3), backend="gloo", timeout_ms=600_000
)
SUBGROUP = GroupInfo(name="1", desc=None, ranks=None, backend=None, timeout_ms=None)
ALL_REDUCE = Signature(
    op="all_reduce",
    input_sizes=[[4, 8]],
    output_sizes=[[4, 8]],
    input_dtypes=["Float"],
    output_dtypes=["Float"],
    is_p2p=False,
)
SEND = Signature(
    op="send",
    input_sizes=[[16]],
    output_sizes=[],
    input_dtypes=["BFloat16"],
    output_dtypes=[],
    is_p2p=True,
)


def _called(signature: Signature) -> Signature:
    """``signature`` as the hooks' ring holds it: its op is the function called."""
    return replace(signature, api=signature.op)


FRAMES = [
    ("all_reduce", "/venv/lib/python3.11/site-packages/torch/distributed/c10d.py", 10),
    ("wrapper", "/venv/torch/distributed/c10d_logger.py", 83),
    ("train_step", "/job/train.py", 21),
    ("main", "/job/train.py", 40),
]


def _writer(tmp_path: Path, *, capacity: int = 8, rank: int = 3) -> RingWriter:
    return RingWriter(
        ring_base(tmp_path / "rings", "j1", rank),
        capacity=capacity,
        rank=rank,
        world=4,
        job="j1",
        backend="gloo",
    )


def _records(contents: RingContents) -> dict[int, tuple[int, ...]]:
    return {slot[0]: slot for slot in contents.slots}


# --- writing and reading ----------------------------------------------------------------


def test_ring_base_layout(tmp_path: Path) -> None:
    assert ring_base(tmp_path, "j1", 7) == tmp_path / "job=j1" / "rank-000007"


def test_write_then_read_back(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    try:
        group = writer.intern_group("default", GROUP)
        sub = writer.intern_group("sub", SUBGROUP)
        sig = writer.intern_signature(("all_reduce", (4, 8)), ALL_REDUCE)
        send = writer.intern_signature(("send", (16,)), SEND)
        site = writer.intern_site("site", FRAMES)
        # interning again returns the same index and writes no second meta line
        assert writer.intern_group("default", GROUP) == group == 0
        assert sub == 1 and send == 1 and site == 0
        assert writer.intern_signature(("all_reduce", (4, 8)), ALL_REDUCE) == sig
        before = time.time_ns()
        r0 = writer.begin(group, 1, 0, sig, site, -1, STARTED)
        r1 = writer.begin(group, 2, 0, sig, site, -1, STARTED)
        r2 = writer.begin(sub, 0, 1, send, site, 2, SCHEDULED)
        writer.finish(r0, COMPLETED)
        writer.finish(r1, FAILED)
        writer.note_error(r1, "boom" * 1000)
        writer.note_flushed("inc-1")
        writer.sync()

        contents = read_ring(writer.base)
    finally:
        writer.close()

    assert (r0, r1, r2) == (0, 1, 2)
    assert contents.rank == 3 and contents.world == 4 and contents.job == "j1"
    assert contents.pid == os.getpid() and contents.backend == "gloo"
    assert contents.host and contents.created_ns > 0
    assert contents.groups == {0: GROUP, 1: SUBGROUP}
    # the hooks' ring keeps the function called as the api
    assert contents.signatures == {0: _called(ALL_REDUCE), 1: _called(SEND)}
    assert contents.sites == {0: FRAMES}
    assert contents.errors == {1: ("boom" * 1000)[:2000]}
    assert contents.flushed == {"inc-1"}
    meta = writer.base.with_suffix(".meta").read_text().splitlines()
    assert [json.loads(line)["t"] for line in meta] == [
        "rank",
        "group",
        "group",
        "sig",
        "sig",
        "site",
        "error",
        "flushed",
    ]

    records = _records(contents)
    assert sorted(records) == [0, 1, 2]
    _rec, grp, seq, p2p, sg, st, peer, created, done, state = records[0]
    assert (grp, seq, p2p, sg, st, peer, state) == (0, 1, 0, 0, 0, -1, COMPLETED)
    assert before <= created <= done
    assert records[1][9] == FAILED and records[1][8] >= records[1][7]
    assert records[2][1:7] == (1, 0, 1, 1, 0, 2)
    assert records[2][8] == 0 and records[2][9] == SCHEDULED
    assert writer.base.with_suffix(".ring").stat().st_size == HEADER_SIZE + 8 * SLOT_SIZE


def test_snapshot_matches_the_file_and_honours_first_record(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    try:
        group = writer.intern_group("g", GROUP)
        sig = writer.intern_signature("s", ALL_REDUCE)
        site = writer.intern_site("f", FRAMES)
        for seq in range(5):
            record = writer.begin(group, seq, 0, sig, site, -1, STARTED)
            if seq % 2 == 0:
                writer.finish(record, COMPLETED)
        writer.note_flushed("inc")
        snap = writer.snapshot()
        later = writer.snapshot(first_record=3)
        from_file = read_ring(writer.base)
        writer.note_flushed("later")
        assert writer.snapshot().flushed == {"inc", "later"}
    finally:
        writer.close()

    # a snapshot is a copy: what the writer learns later does not leak into it
    assert snap.flushed == {"inc"}
    assert snap.slots == from_file.slots
    assert [slot[0] for slot in snap.slots] == [0, 1, 2, 3, 4]
    assert [slot[0] for slot in later.slots] == [3, 4]
    assert snap.groups == from_file.groups and snap.signatures == from_file.signatures
    assert snap.sites == from_file.sites
    assert snap.rank == 3 and snap.world == 4 and snap.job == "j1" and snap.pid == os.getpid()


def test_wrap_around_keeps_the_newest_records(tmp_path: Path) -> None:
    writer = _writer(tmp_path, capacity=4)
    try:
        group = writer.intern_group("g", GROUP)
        sig = writer.intern_signature("s", ALL_REDUCE)
        site = writer.intern_site("f", FRAMES)
        records = [writer.begin(group, seq, 0, sig, site, -1, STARTED) for seq in range(10)]
        writer.finish(records[2], COMPLETED)  # slot 2 now holds record 6: ignored
        writer.finish(records[9], COMPLETED)
        contents = read_ring(writer.base)
        snap = writer.snapshot()
        tail = writer.snapshot(first_record=8)
        early = writer.snapshot(first_record=1)  # records 1..5 are gone
    finally:
        writer.close()

    assert [slot[0] for slot in contents.slots] == [6, 7, 8, 9]
    assert [slot[2] for slot in contents.slots] == [6, 7, 8, 9]  # collective seq
    states = {slot[0]: slot[9] for slot in contents.slots}
    assert states == {6: STARTED, 7: STARTED, 8: STARTED, 9: COMPLETED}
    assert _records(contents)[6][8] == 0  # the overwritten record's finish left no mark
    assert snap.slots == contents.slots
    assert [slot[0] for slot in tail.slots] == [8, 9]
    assert [slot[0] for slot in early.slots] == [6, 7, 8, 9]


@pytest.mark.parametrize("window", [1, 3, 7, 13, 100])
def test_started_finds_the_running_records_across_the_wrap(tmp_path: Path, window: int) -> None:
    writer = _writer(tmp_path, capacity=7)
    try:
        group = writer.intern_group("g", GROUP)
        sig = writer.intern_signature("s", ALL_REDUCE)
        site = writer.intern_site("f", FRAMES)
        assert writer.started(window) == []
        states = [STARTED, COMPLETED, SCHEDULED, STARTED, FAILED, STARTED, STARTED, COMPLETED]
        for seq in range(19):  # the ring wraps twice; records 12..18 remain
            record = writer.begin(group, seq, 0, sig, site, -1, STARTED)
            if states[seq % len(states)] != STARTED:
                writer.finish(record, states[seq % len(states)])
        expected = [
            (slot[0], slot[1], slot[7])
            for slot in writer.slots(writer.next_record - window)
            if slot[9] == STARTED
        ]
        found = writer.started(window)
    finally:
        writer.close()
    assert found == expected
    assert [record for record, _, _ in found] == [
        r for r in range(max(19 - window, 12), 19) if states[r % len(states)] == STARTED
    ]


@pytest.mark.parametrize("decoder", ["numpy", "struct"])
@pytest.mark.parametrize("first", [0, 9, 20, 27, 40])
def test_collective_keys_across_the_wrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decoder: str, first: int
) -> None:
    """Each group's collective seqs and p2p seqs of the records the ring still holds from
    ``first``, by either decoder: numpy's arrays, or struct where numpy is not installed."""
    if decoder == "struct":
        monkeypatch.setattr("fr_otel.recorder.ring.slot_dtype", lambda: None)
    writer = _writer(tmp_path, capacity=11)
    try:
        default = writer.intern_group("g", GROUP)
        sub = writer.intern_group("s", SUBGROUP)
        reduce_sig = writer.intern_signature("r", ALL_REDUCE)
        send_sig = writer.intern_signature("p", SEND)
        rows: list[tuple[int, ...]] = []
        for i in range(31):  # the ring wraps twice; records 20..30 remain
            group = sub if i % 3 == 0 else default
            p2p = i % 5 == 0
            state = EMPTY if i == 25 else (STARTED if i % 4 else COMPLETED)
            rows.append(
                (
                    group,
                    100 + i,
                    500 + i if p2p else 0,
                    send_sig if p2p else reduce_sig,
                    -1,
                    2 if p2p else -1,
                    1_000 + i,
                    0,
                    state,
                )
            )
        writer.append(rows)
        found = {
            group: [(False, seq) for seq in collectives] + [(True, seq) for seq in p2p]
            for group, (collectives, p2p) in writer.collective_keys(
                first, writer.next_record
            ).items()
        }
        # the FR mirror's look for the signatures it still learns torch's ops of
        by_signature = writer.signature_keys(first, writer.next_record, {reduce_sig})
    finally:
        writer.close()
    expected: dict[int, list[tuple[bool, int]]] = {}
    for record, (group, seq, p2p_seq, _, _, peer, _, _, state) in enumerate(rows):
        if record >= max(first, 20) and state != EMPTY:
            expected.setdefault(group, []).append((peer >= 0, p2p_seq if peer >= 0 else seq))
    assert {g: sorted(keys) for g, keys in found.items()} == {
        g: sorted(keys) for g, keys in expected.items()
    }
    assert sorted(by_signature) == sorted(
        (g, seq, reduce_sig) for g, keys in expected.items() for p2p, seq in keys if not p2p
    )
    if first <= 20:
        assert (False, 125) not in found[default] + found[sub]  # the slot still empty
        assert (True, 520) in found[default]  # a send: its own sequence number


def test_empty_ring_reads_as_no_slots(tmp_path: Path) -> None:
    writer = _writer(tmp_path, capacity=3)
    writer.close()
    contents = read_ring(writer.base)
    assert contents.slots == [] and contents.world == 4
    body = writer.base.with_suffix(".ring").read_bytes()[HEADER_SIZE:]
    assert len(body) == 3 * SLOT_SIZE and set(body) == {EMPTY}


def test_rank_restart_takes_the_file_over(tmp_path: Path) -> None:
    first = _writer(tmp_path)
    first.intern_group("g", GROUP)
    first.begin(0, 1, 0, 0, 0, -1, STARTED)
    # a live owner holds the lock: a second writer for the same rank is refused
    with pytest.raises(BlockingIOError):
        _writer(tmp_path)
    first.close()

    second = _writer(tmp_path, capacity=2)
    second.close()
    contents = read_ring(second.base)
    assert contents.slots == [] and contents.groups == {}
    assert second.base.with_suffix(".ring").stat().st_size == HEADER_SIZE + 2 * SLOT_SIZE


def test_ring_bases_lists_rings_per_job(tmp_path: Path) -> None:
    for job, rank in (("a", 1), ("a", 0), ("b", 5)):
        RingWriter(
            ring_base(tmp_path, job, rank), capacity=1, rank=rank, world=8, job=job, backend=None
        ).close()
    assert list(ring_bases(tmp_path, "a")) == [
        ring_base(tmp_path, "a", 0),
        ring_base(tmp_path, "a", 1),
    ]
    assert len(list(ring_bases(tmp_path))) == 3
    assert list(ring_bases(tmp_path, "zzz")) == []


# --- adoption and flush marks ------------------------------------------------------------


def test_adopted_only_once_the_owner_let_go(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    try:
        with adopted(writer.base) as mine:
            assert mine is False  # the owner holds the flock
    finally:
        writer.close()
    with adopted(writer.base) as mine:
        assert mine is True
        with adopted(writer.base) as again:
            assert again is False  # a second adopter is kept out too
    with adopted(writer.base) as mine:
        assert mine is True  # released on exit
    with adopted(tmp_path / "nowhere" / "rank-000000") as missing:
        assert missing is False


def test_append_flushed_adds_to_a_dead_ranks_meta(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    writer.note_flushed("inc-a")
    writer.close()
    append_flushed(writer.base, "inc-b")
    append_flushed(writer.base, "inc-b")
    assert read_ring(writer.base).flushed == {"inc-a", "inc-b"}


# --- damaged files ----------------------------------------------------------------------


def test_foreign_ring_file_is_rejected(tmp_path: Path) -> None:
    base = tmp_path / "rank-000000"
    base.with_suffix(".ring").write_bytes(b"GARBAGE!" + b"\0" * 200)
    base.with_suffix(".meta").write_text("")
    with pytest.raises(RingFormatError, match="not an fr_otel ring"):
        read_ring(base)
    base.with_suffix(".ring").write_bytes(b"FROT")  # shorter than a header
    with pytest.raises(RingFormatError):
        read_ring(base)


def test_truncated_ring_file_is_rejected(tmp_path: Path) -> None:
    writer = _writer(tmp_path, capacity=4)
    writer.close()
    ring = writer.base.with_suffix(".ring")
    data = ring.read_bytes()
    ring.write_bytes(data[: HEADER_SIZE + 2 * SLOT_SIZE])
    with pytest.raises(RingFormatError, match="truncated"):
        read_ring(writer.base)


def test_ring_with_another_slot_size_is_rejected(tmp_path: Path) -> None:
    writer = _writer(tmp_path, capacity=4)
    writer.close()
    ring = writer.base.with_suffix(".ring")
    data = bytearray(ring.read_bytes())
    data[8:12] = (SLOT_SIZE + 8).to_bytes(4, "little")
    ring.write_bytes(bytes(data))
    with pytest.raises(RingFormatError):
        read_ring(writer.base)


def test_meta_cut_short_in_its_last_line_is_tolerated(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    writer.intern_group("g", GROUP)
    writer.intern_signature("s", ALL_REDUCE)
    writer.close()
    meta = writer.base.with_suffix(".meta")
    with meta.open("ab") as handle:
        handle.write(b'{"t":"site","i":0,"frames":[["f","/a.py",')
    contents = read_ring(writer.base)
    assert contents.groups == {0: GROUP} and contents.signatures == {0: _called(ALL_REDUCE)}
    assert contents.sites == {}


def test_meta_with_more_than_one_bad_line_is_rejected(tmp_path: Path) -> None:
    """One torn line is what a dying owner leaves (survivors append after it); two are
    not ours."""
    writer = _writer(tmp_path)
    writer.close()
    meta = writer.base.with_suffix(".meta")
    with meta.open("ab") as handle:
        handle.write(b"not json\n")
    read_ring(writer.base)
    with meta.open("ab") as handle:
        handle.write(b"not json either\n")
    with pytest.raises(RingFormatError, match="line 3"):
        read_ring(writer.base)


def test_flush_mark_after_a_cut_short_meta_line_stays_readable(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    writer.intern_group("g", GROUP)
    writer.close()
    with writer.base.with_suffix(".meta").open("ab") as handle:
        handle.write(b'{"t":"site","i":0,"fr')  # the owner died mid-line
    append_flushed(writer.base, "inc")  # a survivor flushed the ring for it
    contents = read_ring(writer.base)
    assert contents.groups == {0: GROUP}
    assert "inc" in contents.flushed


# --- the point of it all: the ring outlives a SIGKILLed owner -----------------------------

_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from fr_otel.recorder.ring import GroupInfo, RingWriter, Signature, ring_base
    from fr_otel.recorder.slot import COMPLETED, FAILED, STARTED

    base = ring_base(Path(sys.argv[1]), "crash", 2)
    writer = RingWriter(base, capacity=16, rank=2, world=4, job="crash", backend="gloo")
    g = writer.intern_group("g", GroupInfo(
        name="0", desc="default_pg", ranks=(0, 1, 2, 3), backend="gloo", timeout_ms=1000))
    s = writer.intern_signature("s", Signature(
        op="all_reduce", input_sizes=[[2]], output_sizes=[[2]], input_dtypes=["Float"],
        output_dtypes=["Float"], is_p2p=False))
    f = writer.intern_site("f", [("train", "/job/train.py", 7)])
    records = [writer.begin(g, seq, 0, s, f, -1, STARTED) for seq in range(1, 7)]
    for record in records[:4]:
        writer.finish(record, COMPLETED)
    writer.finish(records[4], FAILED)
    writer.note_error(records[4], "size mismatch")
    print("written", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    print("still alive", flush=True)
    """
)


def test_ring_survives_its_owner_being_sigkilled(tmp_path: Path) -> None:
    rings = tmp_path / "rings"
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(rings)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout == "written\n"  # killed before Python could close anything

    base = ring_base(rings, "crash", 2)
    contents = read_ring(base)
    assert contents.rank == 2 and contents.world == 4 and contents.job == "crash"
    assert contents.pid is not None and contents.pid != os.getpid()
    assert contents.sites == {0: [("train", "/job/train.py", 7)]}
    assert contents.errors == {4: "size mismatch"}
    assert [slot[0] for slot in contents.slots] == [0, 1, 2, 3, 4, 5]
    assert [slot[2] for slot in contents.slots] == [1, 2, 3, 4, 5, 6]
    assert [slot[9] for slot in contents.slots] == [COMPLETED] * 4 + [FAILED, STARTED]
    assert all(slot[8] > 0 for slot in contents.slots[:5]) and contents.slots[5][8] == 0
    with adopted(base) as mine:
        assert mine is True  # the kernel dropped the dead owner's lock

    table = ring_table(contents, job="crash", incident="inc", dump_time_ns=1)
    assert table.column("state").to_pylist() == ["completed"] * 4 + ["started"] * 2


def test_adopted_is_false_while_another_process_owns_the_ring(tmp_path: Path) -> None:
    base = ring_base(tmp_path, "live", 0)
    code = (
        "import sys; from pathlib import Path; from fr_otel.recorder.ring import RingWriter;"
        "w = RingWriter(Path(sys.argv[1]), capacity=2, rank=0, world=1, job='live',"
        " backend=None); print('ready', flush=True); sys.stdin.readline()"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code, str(base)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline() == "ready\n"
        with adopted(base) as mine:
            assert mine is False
    finally:
        owner.kill()
        owner.wait(timeout=30)
    with adopted(base) as mine:
        assert mine is True


# --- as canonical rows -------------------------------------------------------------------


def _table_contents(tmp_path: Path) -> RingContents:
    writer = _writer(tmp_path)
    try:
        group = writer.intern_group("g", GROUP)
        sub = writer.intern_group("sub", SUBGROUP)
        sig = writer.intern_signature("ar", ALL_REDUCE)
        send = writer.intern_signature("send", SEND)
        site = writer.intern_site("f", FRAMES)
        bare = writer.intern_site("bare", [])
        r0 = writer.begin(group, 1, 0, sig, site, -1, STARTED)
        writer.finish(r0, COMPLETED)
        writer.begin(group, 2, 0, sig, site, -1, STARTED)  # r1: still running
        writer.begin(sub, 0, 1, send, bare, 2, SCHEDULED)  # r2: queued p2p send
        r3 = writer.begin(group, 3, 0, sig, site, -1, STARTED)
        writer.finish(r3, FAILED)
        writer.begin(9, 4, 0, sig, site, -1, STARTED)  # r4: group meta never written
        return read_ring(writer.base)
    finally:
        writer.close()


def test_ring_table_rows(tmp_path: Path) -> None:
    contents = _table_contents(tmp_path)
    table = ring_table(contents, job="j1", incident="inc-7", dump_time_ns=123)

    assert table.schema.equals(RECORD_SCHEMA, check_metadata=True)
    rows = table.to_pylist()
    assert [row["record_id"] for row in rows] == [0, 1, 2, 3]  # r4's group is unknown
    assert [row["state"] for row in rows] == ["completed", "started", "scheduled", "started"]
    assert [row["retired"] for row in rows] == [True, False, False, False]
    assert [row["peer"] for row in rows] == [None, None, 2, None]
    assert [row["is_p2p"] for row in rows] == [False, False, True, False]
    assert [row["collective_seq_id"] for row in rows] == [1, 2, 0, 3]
    assert rows[2]["p2p_seq_id"] == 1
    done = {slot[0]: slot[8] for slot in contents.slots}
    assert rows[0]["time_completed_ns"] == done[0] > 0
    assert rows[3]["time_completed_ns"] is None  # failed: never completed
    assert rows[1]["time_completed_ns"] is None

    first = rows[0]
    assert first["job"] == "j1" and first["incident"] == "inc-7" and first["rank"] == 3
    assert first["pg_id"] == 0 and first["pg_name"] == "0" and first["pg_desc"] == "default_pg"
    assert first["pg_ranks"] == [0, 1, 2, 3] and first["pg_ranks_inferred"] is False
    assert first["backend"] == "gloo" and first["profiling_name"] == "gloo:all_reduce"
    assert first["op"] == "all_reduce" and first["timeout_ms"] == 600_000
    assert first["input_sizes"] == [[4, 8]] and first["output_dtypes"] == ["Float"]
    assert first["dump_time_ns"] == 123 and first["source_format"] == "recorder"
    assert first["source_file"] == str(contents.base) + ".ring"
    frames = [{"name": n, "filename": f, "line": line} for n, f, line in FRAMES]
    assert first["frames"] == frames
    assert first["call_site"] == call_site(frames) == "/job/train.py:21 in train_step"

    send = rows[2]
    assert send["pg_ranks"] is None and send["backend"] is None
    assert send["profiling_name"] == "send" and send["timeout_ms"] is None
    assert send["frames"] is None and send["call_site"] is None
    assert send["input_dtypes"] == ["BFloat16"] and send["output_sizes"] == []


def test_ring_table_completed_only_and_first_record(tmp_path: Path) -> None:
    contents = _table_contents(tmp_path)
    finished = ring_table(contents, job="j1", incident="live", dump_time_ns=0, completed_only=True)
    assert finished.column("record_id").to_pylist() == [0, 3]
    assert finished.column("state").to_pylist() == ["completed", "started"]

    later = ring_table(contents, job="j1", incident="x", dump_time_ns=0, first_record=2)
    assert later.column("record_id").to_pylist() == [2, 3]
    assert (
        ring_table(contents, job="j1", incident="x", dump_time_ns=0, first_record=99).num_rows == 0
    )


def test_ring_table_of_an_empty_ring_has_the_schema(tmp_path: Path) -> None:
    table = ring_table(
        RingContents(base=tmp_path / "rank-000000", rank=0), job="j", incident="i", dump_time_ns=0
    )
    assert table.num_rows == 0
    assert isinstance(table, pa.Table) and table.schema.equals(RECORD_SCHEMA)


def test_the_meta_alone_is_the_meta_the_whole_read_gives(tmp_path: Path) -> None:
    """``read_ring(slots=False)`` (the live check's re-read when a meta file grows): the
    same groups, signatures, sites and flushes, the torch ring's merged in, no slots."""
    writer = _writer(tmp_path)
    mirror = writer.sibling(torch_ring_base(writer.base))
    try:
        group = writer.intern_group("default", GROUP)
        sig = writer.intern_signature(("all_reduce", (4, 8)), ALL_REDUCE)
        site = writer.intern_site("site", FRAMES)
        writer.begin(group, 1, 0, sig, site, -1, STARTED)
        writer.note_flushed("inc-1")
        theirs = mirror.intern_group("default", GROUP)
        mirror.begin(theirs, 2, 0, mirror.intern_signature("bucket", ALL_REDUCE), 0, -1, STARTED)
        writer.sync()
        mirror.sync()
        whole = read_ring(writer.base)
        meta = read_ring(writer.base, slots=False)
    finally:
        mirror.close()
        writer.close()
    assert len(whole.slots) == 2 and meta.slots == []
    assert (meta.groups, meta.signatures, meta.sites, meta.flushed) == (
        whole.groups,
        whole.signatures,
        whole.sites,
        whole.flushed,
    )
    assert len(meta.groups) == 2  # the torch ring's group, merged at its own index
