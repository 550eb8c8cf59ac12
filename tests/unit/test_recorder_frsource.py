"""The FR mirror's bookkeeping (``fr_otel.recorder.frsource.FrMirror``): which of torch's
entries it copies, when it reads, and when it calls an op overdue.

Real rings; torch's side is a stand-in (a group object with a counter and a list of FR
entries shaped as torch's JSON dump writes them), so each case is exact and fast. Real
torch jobs exercise the same code in ``tests/integration/test_recorder_workloads.py``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fr_otel.dumps.parse import raw_entries
from fr_otel.recorder import frsource
from fr_otel.recorder.frsource import FILL_SHARE, FrMirror
from fr_otel.recorder.ring import GroupInfo, RingWriter, Signature, read_ring, torch_ring_base
from fr_otel.recorder.slot import COMPLETED, STARTED
from fr_otel.recorder.torch_ops import LEARN_TRIES
from fr_otel.recorder.triggers import POLL_S

INFO = GroupInfo(name="0", desc="default_pg", ranks=(0, 1), backend="gloo", timeout_ms=8000)


class Torch:
    """What the mirror asks of torch: a group's counter and the FR buffer."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.reads = 0
        self.unrecorded = 0
        """Collectives issued that the FR buffer has no entry of (FR off, or an op such as
        gloo's monitored_barrier that its FR does not record)."""

    def _get_sequence_number_for_group(self) -> int:
        recorded = max((e["collective_seq_id"] for e in self.entries), default=0)
        return recorded + self.unrecorded

    def issue(self, op: str, *, retired: bool = True, age_s: float = 0.0) -> int:
        seq = self._get_sequence_number_for_group() + 1
        self.entries.append(
            {
                "record_id": len(self.entries),
                "process_group": ["0", "default_pg"],
                "collective_seq_id": seq,
                "p2p_seq_id": 0,
                "op_id": seq,
                "profiling_name": f"gloo:{op}",
                "time_created_ns": time.time_ns() - int(age_s * 1e9),
                "input_sizes": [[4]],
                "output_sizes": [[4]],
                "input_dtypes": ["Float"],
                "output_dtypes": ["Float"],
                "state": "scheduled",
                "retired": retired,
                "timeout_ms": 8000,
                "is_p2p": False,
            }
        )
        return seq

    def read(self) -> dict[str, pa.StructArray]:
        """The entries as ``torch_fr_entries`` hands them: columns."""
        self.reads += 1
        return {"_dump_fr_trace": raw_entries([dict(e) for e in self.entries])}


def _setup(tmp_path: Path, *, complete: bool = False) -> tuple[RingWriter, Torch, FrMirror]:
    main = RingWriter(
        tmp_path / "rank-000000", capacity=64, rank=0, world=2, job="j", backend="gloo"
    )
    torch = Torch()
    mirror = FrMirror(
        main=main,
        base=torch_ring_base(main.base),
        groups=lambda: {"0": torch},
        describe=lambda pg: (INFO, 8 * 10**9),
        timeout_s=None,
        read=torch.read,
        complete=complete,
        fr_capacity=2000,
    )
    return main, torch, mirror


def _hook(main: RingWriter, torch: Torch, op: str, *, runs_as: str | None = "") -> None:
    """A hooked call of ``op``: the slot first, then torch's entry, as the wrapper does it.
    Torch runs it as ``runs_as`` (by default ``op``; None: its FR records no entry)."""
    record = _begin(main, torch, op)
    if runs_as is None:
        torch.unrecorded += 1
    else:
        torch.issue(runs_as or op)
    main.finish(record, COMPLETED)


def _begin(main: RingWriter, torch: Torch, op: str) -> int:
    """A hooked call's slot, written before torch numbers the op."""
    group = main.intern_group(("0", INFO.ranks), INFO)
    sig = main.intern_signature(
        op,
        Signature(
            op=op,
            input_sizes=[[4]],
            output_sizes=[[4]],
            input_dtypes=["Float"],
            output_dtypes=["Float"],
            is_p2p=False,
        ),
    )
    seq = torch._get_sequence_number_for_group() + 1
    return main.begin(group, seq, 0, sig, 0, -1, STARTED)


def _mirrored(mirror: FrMirror) -> list[tuple[int, str, int]]:
    contents = read_ring(mirror.ring.base, 0)
    return [(s[2], contents.signatures[s[4]].op, s[9]) for s in contents.slots]


def test_only_what_no_hook_recorded_is_copied(tmp_path: Path) -> None:
    main, torch, mirror = _setup(tmp_path)
    for _ in range(3):
        torch.issue("all_reduce")  # DDP's buckets: from C++, no hook
    _hook(main, torch, "barrier")  # then a hooked call
    assert mirror.tick() is None
    assert _mirrored(mirror) == [(s, "all_reduce", COMPLETED) for s in (1, 2, 3)]
    assert mirror.stats.mirrored == 3
    # nothing new: no read at all
    reads = torch.reads
    mirror._read_at = float("-inf")
    assert mirror.tick() is None and torch.reads == reads


def test_a_later_hooked_op_does_not_hide_the_unhooked_ones_before_it(tmp_path: Path) -> None:
    main, torch, mirror = _setup(tmp_path)
    _hook(main, torch, "all_reduce")
    assert mirror.tick() is None  # one read, for torch's name of the hooked op
    _hook(main, torch, "all_reduce")
    mirror._read_at = float("-inf")
    assert mirror.tick() is None  # all hooked: caught up without reading
    assert torch.reads == 1
    torch.issue("all_reduce")  # a bucket from C++
    _hook(main, torch, "all_reduce")  # the newest seq is hooked, the one before is not
    mirror._read_at = float("-inf")
    assert mirror.tick() is None
    assert torch.reads == 2
    assert _mirrored(mirror) == [(3, "all_reduce", COMPLETED)]


def test_reads_are_spaced_by_their_cost(tmp_path: Path) -> None:
    _main, torch, mirror = _setup(tmp_path)
    torch.issue("all_reduce")
    mirror.tick()
    torch.issue("all_reduce")
    mirror.tick()  # behind again, but within the interval after the first read
    assert torch.reads == 1
    mirror._read_at = float("-inf")
    mirror.tick()
    assert torch.reads == 2
    assert [s for s, _, _ in _mirrored(mirror)] == [1, 2]


def test_an_unhooked_op_running_past_its_timeout_is_overdue_once(tmp_path: Path) -> None:
    _main, torch, mirror = _setup(tmp_path)
    torch.issue("all_reduce", retired=False, age_s=7.0)  # 0.75 x 8 s = 6 s: overdue
    assert mirror.tick() == "timeout"
    assert _mirrored(mirror) == [(1, "all_reduce", STARTED)]
    assert mirror.tick() is None  # said once
    torch.entries[0]["retired"] = True  # it finished after all
    mirror.read()
    assert _mirrored(mirror) == [(1, "all_reduce", COMPLETED)]


def test_an_unhooked_op_within_its_timeout_is_not_overdue(tmp_path: Path) -> None:
    _main, torch, mirror = _setup(tmp_path)
    torch.issue("all_reduce", retired=False, age_s=1.0)
    assert mirror.tick() is None
    assert _mirrored(mirror) == [(1, "all_reduce", STARTED)]


def test_reads_are_spaced_by_their_cost_within_bounds(tmp_path: Path) -> None:
    _, _, mirror = _setup(tmp_path)
    mirror.stats.last_cost_s = 0.02  # a 2,000-entry dump here
    assert mirror._interval() == 8.0  # 400 times the cost
    mirror.stats.last_cost_s = 0.001
    assert mirror._interval() == 1.0  # never more often than once a second
    mirror.stats.last_cost_s = 1.0
    assert mirror._interval() == 30.0  # never later than 30 s
    mirror.rows.shortest_timeout_ns = 6 * 10**9
    assert mirror._interval() == 2.0  # nor than a third of the detection timeout


def test_each_read_is_followed_by_400_times_its_cost_and_a_cheap_one_brings_none_closer(
    tmp_path: Path,
) -> None:
    _, _, mirror = _setup(tmp_path)
    # torch's buffer filling: each read costs more than the last, and the median lags
    for cost in (0.002, 0.006, 0.02):
        mirror.stats.recent_costs.append(cost)
    mirror.stats.last_cost_s = 0.02
    assert mirror._interval() == 8.0  # the last read's 400 times, not the median's 2.4 s
    for cost in (0.02, 0.02, 0.002):  # then one read that found little to do
        mirror.stats.recent_costs.append(cost)
    mirror.stats.last_cost_s = 0.002
    assert mirror._interval() == 8.0  # the median's: the next read does not come sooner


def test_one_slow_read_does_not_hold_continuous_reads_back(tmp_path: Path) -> None:
    _, torch, mirror = _setup(tmp_path, complete=True)
    mirror._fr_capacity = 10
    for cost in (0.01, 0.01, 0.01, 0.01, 0.05):  # the last read slowed by the machine
        mirror.stats.recent_costs.append(cost)
    mirror.stats.last_cost_s = 0.05
    mirror._read_at = time.monotonic() - 50 * 0.01 - 0.1  # past the median's cap only
    for _ in range(9):  # 90% of torch's buffer, not yet read
        torch.issue("all_reduce")
    mirror.tick()
    assert torch.reads == 1  # the cap is 50 times the median, not the slow read's


def test_continuous_mode_reads_once_torch_s_buffer_is_nearly_full(tmp_path: Path) -> None:
    _, _, mirror = _setup(tmp_path, complete=True)
    target = FILL_SHARE * 2000
    assert mirror._until_full(0.0, 100) is None  # a first look: nothing to go by
    # 400 a second: the buffer fills in seconds, later looks will do
    assert mirror._until_full(0.25, 200) is None
    # the next look (a poll later) would come 0.1 s before the buffer fills: it reads now
    issued = int(target - 400 * (POLL_S + 0.1))
    wait = mirror._until_full(0.5, issued)
    assert wait is not None
    assert wait == pytest.approx((target - issued) / ((issued - 200) / 0.25))
    assert mirror._until_full(0.75, int(target)) == 0.0  # full: at once
    mirror._issued_at_read = int(target)  # a read brought them
    assert mirror._until_full(1.0, int(target) + 100) is None
    # a group destroyed: its count leaves the sum, and counting starts again from there
    assert mirror._until_full(1.25, 50) is None
    assert mirror._until_full(1.5, 50 + int(target)) == 0.0


def test_a_full_buffer_is_read_at_the_next_look_within_the_cost_cap(tmp_path: Path) -> None:
    _, torch, mirror = _setup(tmp_path, complete=True)
    mirror._fr_capacity = 10
    for _ in range(9):  # 90% of torch's buffer, not yet read
        torch.issue("all_reduce")
    mirror.tick()
    assert torch.reads == 1
    assert len(read_ring(mirror.ring.base, 0).slots) == 9
    mirror.stats.recent_costs.append(0.5)  # a read that cost half a second of CPU
    for _ in range(9):
        torch.issue("all_reduce")
    mirror.tick()  # full again, but 50 times the cost has not passed: no read
    assert torch.reads == 1
    mirror._read_at -= 50 * 0.5
    mirror.tick()
    assert torch.reads == 2
    assert len(read_ring(mirror.ring.base, 0).slots) == 18


def test_a_buffer_full_of_hooked_ops_is_not_read(tmp_path: Path) -> None:
    main, torch, mirror = _setup(tmp_path, complete=True)
    mirror._fr_capacity = 10
    _hook(main, torch, "all_reduce")
    mirror.tick()
    assert torch.reads == 1  # torch's name for the hooked op
    for _ in range(9):
        _hook(main, torch, "all_reduce")
    mirror._read_at = float("-inf")
    mirror.tick()
    mirror.tick()
    assert torch.reads == 1  # the rings hold every op: torch's dump would bring nothing
    torch.issue("all_reduce")  # one from C++
    for _ in range(8):
        _hook(main, torch, "all_reduce")
    mirror.tick()
    assert torch.reads == 2
    assert [s[2] for s in read_ring(mirror.ring.base, 0).slots] == [11]  # its seq


def test_entries_differing_only_in_their_shapes_get_their_own_signatures(tmp_path: Path) -> None:
    _main, torch, mirror = _setup(tmp_path)
    shapes = [[[2, 3]], [[2], [3]], [[]], [], [[2, 3]], [[6]]]
    for sizes in shapes:
        torch.issue("all_reduce")
        torch.entries[-1]["input_sizes"] = torch.entries[-1]["output_sizes"] = sizes
    mirror.read()
    contents = read_ring(mirror.ring.base, 0)
    found = [contents.signatures[s[4]].input_sizes for s in contents.slots]
    assert found == shapes
    assert len({s[4] for s in contents.slots}) == 5  # the repeated [[2, 3]] is shared


def test_only_entries_newer_than_the_last_read_are_copied_and_a_gap_is_counted(
    tmp_path: Path,
) -> None:
    _main, torch, mirror = _setup(tmp_path)
    for _ in range(3):
        torch.issue("all_reduce")
    mirror.read()
    for _ in range(4):
        torch.issue("broadcast")
    del torch.entries[:4]  # torch's buffer wrapped: records 3 is gone unread
    mirror.read()
    assert [s for s, _, _ in _mirrored(mirror)] == [1, 2, 3, 5, 6, 7]
    assert mirror.stats.missed == 1


def test_collectives_torch_overwrote_unread_and_no_hook_recorded_are_noted_as_gaps(
    tmp_path: Path,
) -> None:
    main, torch, mirror = _setup(tmp_path)
    for _ in range(3):
        torch.issue("all_reduce")
    mirror.read()
    for _ in range(3):
        torch.issue("all_reduce")  # 4-6
    _hook(main, torch, "barrier")  # 7, in the ring already
    for _ in range(5):
        torch.issue("all_reduce")  # 8-12
    del torch.entries[:10]  # torch's buffer wrapped: seqs up to 10 are gone unread
    mirror.read()
    gaps = [(g.group, g.first, g.last) for g in read_ring(main.base).gaps]
    assert gaps == [("0", 4, 6), ("0", 8, 10)]
    assert mirror.stats.gaps == 2
    mirror.read()  # nothing lost since: nothing more said
    assert len(read_ring(main.base).gaps) == 2


def test_a_group_s_timeout_changed_at_run_time_is_each_entry_s_own_and_the_detection_s(
    tmp_path: Path,
) -> None:
    """torchtitan lowers every group's timeout after its first step
    (``_set_pg_timeout``): each entry says which one it ran under."""
    _main, torch, mirror = _setup(tmp_path)
    torch.issue("all_reduce")
    mirror.read()
    assert mirror.rows.shortest_timeout_ns == 6 * 10**9  # three quarters of 8 s
    for _ in range(2):
        torch.issue("all_reduce")
        torch.entries[-1]["timeout_ms"] = 2000
    mirror.read()
    contents = read_ring(mirror.ring.base, 0)
    timeouts = [(s[2], contents.groups[s[1]].timeout_ms) for s in contents.slots]
    assert timeouts == [(1, 8000), (2, 2000), (3, 2000)]
    assert {g.name for g in contents.groups.values()} == {"0"}
    assert mirror.rows.shortest_timeout_ns == 1_500_000_000


def test_entries_out_of_record_order_or_without_a_record_id_are_read_in_order(
    tmp_path: Path,
) -> None:
    _main, torch, mirror = _setup(tmp_path)
    for _ in range(4):
        torch.issue("all_reduce")
    torch.entries.reverse()  # a dump not oldest first
    torch.entries[0]["record_id"] = None  # and one entry without its id: left out
    mirror.read()
    assert [s for s, _, _ in _mirrored(mirror)] == [1, 2, 3]
    torch.issue("broadcast")  # record 4: only it is new at the next read
    mirror.read()
    assert [s for s, _, _ in _mirrored(mirror)] == [1, 2, 3, 5]
    assert mirror.stats.missed == 0


def test_a_read_during_the_wait_for_a_full_buffer_is_not_repeated(tmp_path: Path) -> None:
    _, torch, mirror = _setup(tmp_path, complete=True)
    mirror._fr_capacity = 10
    for _ in range(5):
        torch.issue("all_reduce")
    mirror._until_full = lambda now, issued: 0.2  # type: ignore[method-assign]
    waited: list[float] = []

    def flush_meanwhile(seconds: float) -> bool:  # what a flush does during the wait
        waited.append(seconds)
        mirror.read()
        return True

    mirror.tick(flush_meanwhile)
    assert waited == [0.2]
    assert torch.reads == 1  # the flush's: everything was in, the tick read nothing more
    mirror.tick(lambda seconds: True)
    assert torch.reads == 1  # nothing unread since
    torch.issue("all_reduce")
    mirror._read_at = float("-inf")  # past the cap: the next look reads
    mirror.tick(lambda seconds: False)  # unless the recorder is closing: it reads itself
    assert torch.reads == 1
    mirror.tick(lambda seconds: True)
    assert torch.reads == 2


def test_a_flush_reads_torch_s_fr_while_the_watch_waits_for_a_full_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from fr_otel.config import RecorderSettings
    from fr_otel.recorder import recorder as recorder_module

    _, torch, mirror = _setup(tmp_path, complete=True)
    mirror._fr_capacity = 10
    torch.issue("all_reduce")
    mirror._until_full = lambda now, issued: 0.2  # type: ignore[method-assign]
    recorder = recorder_module.Recorder(RecorderSettings(mode="continuous"))
    recorder._mirror = mirror
    waiting, flushed = threading.Event(), threading.Event()

    def sleep(seconds: float) -> None:  # the watch's wait lasts until the flush is done
        waiting.set()
        assert flushed.wait(10)

    monkeypatch.setattr(recorder_module.time, "sleep", sleep)
    watch = threading.Thread(target=recorder._mirror_tick)
    watch.start()
    assert waiting.wait(10)
    flush = threading.Thread(target=recorder.read_torch_fr)
    flush.start()
    flush.join(5)
    blocked = flush.is_alive()  # it would wait for the watch's lock
    flushed.set()
    watch.join(10)
    flush.join(10)
    assert not blocked
    assert torch.reads == 1
    recorder._stopping.set()  # closing: a wait that ends then does not read
    torch.issue("all_reduce")
    mirror._read_at = float("-inf")  # past the cap: the look would read
    flushed.set()
    assert recorder._mirror_tick() is None
    assert torch.reads == 1


def _ops(base: Path) -> list[tuple[int, str, str | None, str | None]]:
    """(seq, op, profiling name, api) of each row of the rank's rings, as flushed."""
    from fr_otel.recorder.table import ring_table

    rows = ring_table(read_ring(base), job="j", incident="i", dump_time_ns=None).to_pylist()
    return sorted((r["collective_seq_id"], r["op"], r["profiling_name"], r["api"]) for r in rows)


def test_torch_s_name_for_a_hooked_op_is_learned_at_the_next_read_and_the_call_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gloo runs reduce_scatter_tensor as all_reduce, and its FR says so: the hooked rows
    carry torch's op, as rows of torch's own dumps do, and the function called as api."""
    main, torch, mirror = _setup(tmp_path)
    _hook(main, torch, "reduce_scatter_tensor", runs_as="all_reduce")
    _hook(main, torch, "all_gather_into_tensor", runs_as="all_gather")
    assert mirror.tick() is None
    assert torch.reads == 1  # at the first look: within seconds of the calls
    torch.issue("all_reduce")  # DDP's bucket, from C++: only torch's FR has it
    mirror._read_at = float("-inf")
    assert mirror.tick() is None
    assert _ops(main.base) == [
        (1, "all_reduce", "gloo:all_reduce", "reduce_scatter_tensor"),
        (2, "all_gather", "gloo:all_gather", "all_gather_into_tensor"),
        (3, "all_reduce", "gloo:all_reduce", None),
    ]
    # the meta file says it: a peer flushing this ring after the rank died reads it too
    lines = [json.loads(line) for line in main.base.with_suffix(".meta").read_text().split()]
    assert [(x["sig"], x["op"], x["backend"]) for x in lines if x["t"] == "torch_op"] == [
        (0, "all_reduce", "gloo"),
        (1, "all_gather", "gloo"),
    ]

    # learned once: the same calls again give the watch nothing to read for, nor to look
    # at the hooks' slots for
    def never(*args: object) -> None:
        raise AssertionError("the slots were scanned for signatures already learned")

    monkeypatch.setattr(main, "signature_keys", never)
    _hook(main, torch, "reduce_scatter_tensor", runs_as="all_reduce")
    _hook(main, torch, "all_gather_into_tensor", runs_as="all_gather")
    mirror._read_at = float("-inf")
    assert mirror.tick() is None
    assert torch.reads == 2
    assert [op for _, op, _, _ in _ops(main.base)][3:] == ["all_reduce", "all_gather"]


def test_a_hooked_op_learned_only_at_a_flush_s_read(tmp_path: Path) -> None:
    main, torch, mirror = _setup(tmp_path)
    mirror._read_at = time.monotonic()  # a read just now: the watch waits its interval
    _hook(main, torch, "all_to_all_single", runs_as="all_to_all")
    assert mirror.tick() is None and torch.reads == 0
    mirror.read()  # the flush's (or the rank's end's)
    assert _ops(main.base) == [(1, "all_to_all", "gloo:all_to_all", "all_to_all_single")]


def test_an_op_torch_s_fr_never_records_is_given_up_after_a_few_reads(tmp_path: Path) -> None:
    main, torch, mirror = _setup(tmp_path)
    reads = []
    for _ in range(LEARN_TRIES + 2):
        _hook(main, torch, "monitored_barrier", runs_as=None)  # gloo's FR records none
        mirror._read_at = float("-inf")
        mirror.tick()
        reads.append(torch.reads)
    assert reads == [*range(1, LEARN_TRIES + 1), LEARN_TRIES, LEARN_TRIES]
    # the function called stays the op
    assert {(op, api) for _, op, _, api in _ops(main.base)} == {
        ("monitored_barrier", "monitored_barrier")
    }


def test_a_record_hooked_after_the_dump_is_looked_for_at_the_next_read(tmp_path: Path) -> None:
    """The hook writes its slot before torch numbers the op: a dump taken in between lacks
    the entry, and that costs the signature nothing."""
    main, torch, mirror = _setup(tmp_path)
    _begin(main, torch, "reduce_scatter_tensor")  # torch has not issued it yet
    for _ in range(LEARN_TRIES + 1):
        mirror.read()
    torch.issue("all_reduce")
    mirror.read()
    assert _ops(main.base) == [(1, "all_reduce", "gloo:all_reduce", "reduce_scatter_tensor")]


def test_a_quiet_rank_with_unread_ops_is_read_once_soon_and_a_busy_one_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ops from C++ that no hook recorded, then nothing: a hung rank. It is read once its
    counters have stood still for QUIET_READ_S, long before the interval; not again while
    they stand still; and a rank whose counters keep moving waits for the interval."""
    clock = [1000.0]
    monkeypatch.setattr(frsource.time, "monotonic", lambda: clock[0])
    _main, torch, mirror = _setup(tmp_path)
    torch.issue("all_reduce")
    mirror.tick()
    assert torch.reads == 1
    monkeypatch.setattr(mirror, "_interval", lambda: 400.0)  # a costly read: 400 s apart
    torch.issue("all_reduce")  # the bucket it then hangs in
    for step in range(int(frsource.QUIET_READ_S / 0.25)):
        clock[0] += 0.25
        mirror.tick()
        assert torch.reads == 1, step  # quiet for less than QUIET_READ_S
    clock[0] += 0.25
    mirror.tick()
    assert torch.reads == 2 and [s for s, _, _ in _mirrored(mirror)] == [1, 2]
    for _ in range(20):  # still quiet: once per quiet spell
        clock[0] += 0.25
        mirror.tick()
    assert torch.reads == 2
    for _ in range(40):  # a busy rank: a new bucket every look, no quiet spell
        torch.issue("all_reduce")
        clock[0] += 0.25
        mirror.tick()
    assert torch.reads == 2


def test_what_the_hooks_saw_is_forgotten_without_reads(tmp_path: Path) -> None:
    """A job whose hooks record every collective never reads torch's FR; the hooked seqs
    the watch notes must still be bounded (they grew by every collective before)."""
    main, torch, mirror = _setup(tmp_path)
    _hook(main, torch, "all_reduce")
    mirror.tick()  # its first read: torch's name for the op
    reads = torch.reads
    keep = 4 * main.capacity
    for _ in range(3 * keep // (main.capacity // 2)):  # each look within the ring's reach
        for _ in range(main.capacity // 2):
            _hook(main, torch, "all_reduce")
        mirror._read_at = float("-inf")
        mirror.tick()
    assert torch.reads == reads  # all hooked: nothing to read
    assert keep <= len(mirror._hooked["0"]) <= 2 * keep + main.capacity // 2
