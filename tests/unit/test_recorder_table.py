"""``ring_table`` against the rule it implements, written out one slot at a time: the
column-wise build (fast paths for one group, signature, peer-less collectives and
unfiltered slots included) must give the same rows."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fr_otel.otel.wire import encode_requests_fast
from fr_otel.recorder.ring import GroupInfo, RingContents, Signature
from fr_otel.recorder.slot import COMPLETED, FAILED, SCHEDULED, STARTED, STATE_NAMES
from fr_otel.recorder.table import ring_table
from fr_otel.schema import RECORD_SCHEMA
from fr_otel.stacks import call_site

GROUPS = {
    0: GroupInfo(name="0", desc="default_pg", ranks=(0, 1, 2, 3), backend="nccl", timeout_ms=600),
    5: GroupInfo(name="5", desc=None, ranks=None, backend=None, timeout_ms=None),
    7: GroupInfo(name="tp", desc="mesh_tp", ranks=(1, 3), backend="gloo", timeout_ms=0),
}
SIGNATURES = {
    # a hooked call whose torch op was learned: NCCL runs it as _reduce_scatter_base
    0: Signature(
        op="_reduce_scatter_base",
        input_sizes=[[4, 8]],
        output_sizes=[[1, 8]],
        input_dtypes=["Float"],
        output_dtypes=["Float"],
        is_p2p=False,
        backend="nccl",
        api="reduce_scatter_tensor",
    ),
    1: Signature(
        op="send",
        input_sizes=[[16]],
        output_sizes=[],
        input_dtypes=["BFloat16"],
        output_dtypes=[],
        is_p2p=True,
        backend="gloo",
        api="send",
    ),
    # an older ring's signature: no backend of its own, its group's is used
    2: Signature(
        op="all_gather",
        input_sizes=[[2], [3, 1]],
        output_sizes=[[]],
        input_dtypes=["Float", "Half"],
        output_dtypes=["Float"],
        is_p2p=False,
    ),
}
SITES = {
    0: [
        ("all_reduce", "/venv/lib/python3.11/site-packages/torch/distributed/c10d.py", 10),
        ("train_step", "/job/train.py", 21),
    ],
    1: [],
    # 2: never written to the meta file
}


def _expected(contents: RingContents, slot: tuple[int, ...], dump_time_ns: int) -> dict[str, Any]:
    record, group, seq, p2p_seq, sig, site, peer, created, done, state = slot
    info, signature = contents.groups[group], contents.signatures[sig]
    frames = [
        {"name": n, "filename": f, "line": line} for n, f, line in contents.sites.get(site, [])
    ]
    backend = signature.backend if signature.backend is not None else info.backend
    completed = state == COMPLETED
    row: dict[str, Any] = dict.fromkeys(RECORD_SCHEMA.names)
    row.update(
        job="j",
        incident="i",
        rank=contents.rank,
        pg_id=group,
        pg_name=info.name,
        pg_desc=info.desc,
        pg_ranks=list(info.ranks) if info.ranks is not None else None,
        pg_ranks_inferred=False,
        record_id=record,
        collective_seq_id=seq,
        p2p_seq_id=p2p_seq,
        backend=backend,
        op=signature.op,
        profiling_name=signature.op if backend is None else f"{backend}:{signature.op}",
        peer=peer if peer >= 0 else None,
        input_sizes=signature.input_sizes,
        output_sizes=signature.output_sizes,
        input_dtypes=signature.input_dtypes,
        output_dtypes=signature.output_dtypes,
        state=STATE_NAMES.get(state, "started"),
        time_created_ns=created,
        time_completed_ns=done if completed and done else None,
        retired=completed,
        timeout_ms=info.timeout_ms,
        is_p2p=signature.is_p2p,
        frames=frames or None,
        call_site=call_site(frames),
        api=signature.api,
        dump_time_ns=dump_time_ns,
        source_file=str(contents.base) + ".ring",
        source_format="recorder",
    )
    return row


def _contents(tmp_path: Path, slots: list[tuple[int, ...]]) -> RingContents:
    return RingContents(
        base=tmp_path / "rank-000002",
        rank=2,
        groups=dict(GROUPS),
        signatures=dict(SIGNATURES),
        sites=dict(SITES),
        slots=slots,
    )


def _slots(seed: int, count: int, *, groups: list[int], sigs: list[int]) -> list[tuple[int, ...]]:
    rng = random.Random(seed)
    out = []
    for record in range(100, 100 + count):
        state = rng.choice([COMPLETED, COMPLETED, FAILED, STARTED, SCHEDULED])
        out.append(
            (
                record,
                rng.choice(groups),
                rng.randrange(0, 1 << 40),
                rng.randrange(0, 50),
                rng.choice(sigs),
                rng.choice([0, 1, 2]),
                rng.choice([-1, -1, 0, 3]),
                rng.randrange(0, 1 << 62),
                rng.choice([0, rng.randrange(1, 1 << 62)]),
                state,
            )
        )
    return out


CASES = {
    # one group, one signature, no peers, all completed: continuous mode's steady state
    "steady": [(r, 0, r + 1, 0, 0, 0, -1, 1_000 + r, 2_000 + r, COMPLETED) for r in range(50)],
    "one_slot_never_completed": [(9, 7, 1, 0, 1, 1, 3, 5, 0, FAILED)],
    "mixed": _slots(1, 200, groups=[0, 5, 7], sigs=[0, 1, 2]),
    "unknown_groups_and_signatures": _slots(2, 60, groups=[0, 5, 9], sigs=[0, 2, 4]),
    "unknown_groups": _slots(3, 40, groups=[0, 9], sigs=[0]),
    "unknown_signatures": _slots(4, 40, groups=[0, 5], sigs=[2, 4]),
    "completed_with_no_time": [(1, 0, 1, 0, 0, 0, -1, 7, 0, COMPLETED)],
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(("first_record", "completed_only"), [(0, False), (120, True), (0, True)])
@pytest.mark.parametrize("as_dictionary", [False, True])
def test_ring_table_is_the_slot_by_slot_rule(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    first_record: int,
    completed_only: bool,
    as_dictionary: bool,
) -> None:
    from fr_otel.recorder import table as module

    # these groups are small: make them count as large
    monkeypatch.setattr(module, "_DICTIONARY_MIN_MEMBERS", 1)
    contents = _contents(tmp_path, CASES[case])
    table = ring_table(
        contents,
        job="j",
        incident="i",
        dump_time_ns=77,
        first_record=first_record,
        completed_only=completed_only,
        members_as_dictionary=as_dictionary,
    )
    kept = [
        s
        for s in contents.slots
        if s[0] >= first_record
        and (not completed_only or s[9] in (COMPLETED, FAILED))
        and s[1] in contents.groups
        and s[4] in contents.signatures
    ]
    expected = pa.Table.from_pylist(
        [_expected(contents, slot, 77) for slot in kept], schema=RECORD_SCHEMA
    )
    large = any(g.ranks and len(g.ranks) > 1 for g in (contents.groups[s[1]] for s in kept))
    if as_dictionary and large:  # continuous mode's: each row's list an index into the groups'
        assert pa.types.is_dictionary(table.schema.field("pg_ranks").type)
        members = table.column("pg_ranks").combine_chunks().dictionary_decode()
        table = table.set_column(
            table.schema.get_field_index("pg_ranks"), RECORD_SCHEMA.field("pg_ranks"), members
        )
        assert list(encode_requests_fast(table)) == list(encode_requests_fast(expected))
    assert table.schema.equals(RECORD_SCHEMA, check_metadata=True)
    assert table.to_pylist() == expected.to_pylist()


@pytest.mark.parametrize("kept_bytes", [4 << 20, 0])
@pytest.mark.parametrize("as_dictionary", [False, True])
def test_tables_of_successive_passes_share_nothing_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept_bytes: int, as_dictionary: bool
) -> None:
    """What one pass converted is kept for the next (continuous mode's passes look alike):
    passes of other sizes, and a group or signature changed under the same id, still
    give the slot-by-slot rows; so do passes too wide to keep."""
    from fr_otel.recorder import table as module

    monkeypatch.setattr(module, "_REPEATED_BYTES", kept_bytes)
    monkeypatch.setattr(module, "_REPEATED", {})
    monkeypatch.setattr(module, "_DICTIONARY_MIN_MEMBERS", 1)  # these small groups count as large
    for count, group, signature in [(3, 0, 0), (70, 0, 0), (10, 0, 0), (10, 7, 2), (80, 0, 0)]:
        slots = [(r, 0, r, 0, 0, 0, -1, 1_000 + r, 2_000 + r, COMPLETED) for r in range(count)]
        contents = _contents(tmp_path, slots)
        # the ring's id 0 now stands for another group and signature
        contents.groups[0] = GROUPS[group]
        contents.signatures[0] = SIGNATURES[signature]
        expected = [_expected(contents, slot, 5) for slot in slots]
        table = ring_table(
            contents, job="j", incident="i", dump_time_ns=5, members_as_dictionary=as_dictionary
        )
        assert table.to_pylist() == pa.Table.from_pylist(expected, schema=RECORD_SCHEMA).to_pylist()


def test_small_groups_keep_their_lists_even_for_spans(tmp_path: Path) -> None:
    """The dictionary column pays off past 1,024 members; below, a pass keeps the list
    column (cheaper to build and encode for the few rows of a pass)."""
    slots = [(r, 7, r, 0, 0, 0, -1, 1_000 + r, 2_000 + r, COMPLETED) for r in range(5)]
    contents = _contents(tmp_path, slots)
    table = ring_table(contents, job="j", incident="i", dump_time_ns=5, members_as_dictionary=True)
    assert table.schema.equals(RECORD_SCHEMA, check_metadata=True)
    contents.groups[7] = GroupInfo(
        name="tp", desc="mesh_tp", ranks=tuple(range(2048)), backend="nccl", timeout_ms=0
    )
    table = ring_table(contents, job="j", incident="i", dump_time_ns=5, members_as_dictionary=True)
    assert pa.types.is_dictionary(table.schema.field("pg_ranks").type)
    assert table.column("pg_ranks").to_pylist() == [list(range(2048))] * 5
