"""``HookedSeqs``: the ops the hooks recorded in one group, a run of consecutive collective
seqs and the rest one by one, asked as a set of (is p2p, seq) would be."""

from __future__ import annotations

import random

from fr_otel.recorder.hooked_seqs import HookedSeqs


def _as_set(hooked: HookedSeqs) -> set[tuple[bool, int]]:
    return {(False, seq) for seq in hooked.run} | hooked.others


def test_it_answers_as_the_set_of_what_was_added() -> None:
    """Random looks: consecutive runs (continuing or not), lists with gaps, p2p ops."""
    rng = random.Random(7)
    hooked, added = HookedSeqs(), set()
    seq = 1
    for _ in range(300):
        kind = rng.choice(["next", "next", "jump", "gappy", "old"])
        if kind == "next":
            collectives: range | list[int] = range(seq, seq + rng.randint(1, 40))
        elif kind == "jump":
            collectives = range(seq + 5, seq + 5 + rng.randint(1, 80))
        elif kind == "gappy":
            collectives = sorted(rng.sample(range(seq, seq + 30), 10))
        else:
            start = rng.randint(1, seq)
            collectives = range(start, start + 3)
        p2p = [rng.randint(1, 50) for _ in range(rng.randint(0, 2))]
        hooked.add(collectives, p2p)
        added |= {(False, s) for s in collectives} | {(True, s) for s in p2p}
        seq = max(seq, max(collectives, default=seq) + 1)
    assert _as_set(hooked) == added
    assert len(hooked) == len(added)
    for probe in range(seq + 10):
        assert ((False, probe) in hooked) == ((False, probe) in added)
        assert ((True, probe) in hooked) == ((True, probe) in added)
    for first in range(1, seq, 7):
        last = first + rng.randint(0, 20)
        want = all((False, s) in added for s in range(first, last + 1))
        assert hooked.covers(first, last) == want, (first, last)
    assert hooked.collective_seqs() == {s for p2p, s in added if not p2p}


def test_a_loop_of_hooked_collectives_is_one_run() -> None:
    hooked = HookedSeqs()
    for look in range(100):
        hooked.add(range(1 + 500 * look, 1 + 500 * (look + 1)))
    assert hooked.run == range(1, 50_001) and not hooked.others
    assert hooked.covers(1, 50_000) and not hooked.covers(1, 50_001)


def test_forgetting_keeps_the_newer_ops() -> None:
    hooked = HookedSeqs()
    hooked.add(range(1, 101), [3, 90])
    hooked.add([150, 152])
    hooked.forget_before(95)
    assert _as_set(hooked) == {(False, s) for s in range(95, 101)} | {
        (False, 150),
        (False, 152),
    }
    hooked.forget_before(200)
    assert len(hooked) == 0 and (False, 200) not in hooked
    hooked.add(range(200, 210))
    assert hooked.covers(200, 209)
