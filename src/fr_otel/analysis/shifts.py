"""Whether a rank that deviates from its group's majority skipped collectives or reordered
them: each hypothesis is tested against the rank's later slots, its call sites before it
stopped, the group's history at the same call site, and its own ops in other groups.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from fr_otel.analysis.slots import MAX_SHIFT, GroupView, Slot, matches_majority

MAX_REORDER_WINDOW = 4


def _skip_support(view: GroupView, rank: int, seq: int, k: int, *, by_site: bool) -> int | None:
    """How many of the rank's slots from ``seq`` on equal the majority's k slots later;
    None when one contradicts it."""
    _, last = view.windows.get(rank, (seq, seq - 1))
    support = 0
    for t in range(seq, last + 1):
        slot = view.slots.get((t, rank))
        ahead = view.majority.get(t + k)
        if slot is None or ahead is None or ahead.slot is None:
            continue
        if not matches_majority(slot, ahead, by_site=by_site):
            return None
        support += 1
    return support


def _reorder_support(view: GroupView, rank: int, seq: int, w: int) -> int | None:
    """w plus the slots after the window that line up again, when the rank's next w
    slots are the majority's next w in another order; None otherwise."""
    mine = [view.slots.get((t, rank)) for t in range(seq, seq + w)]
    theirs = [view.majority.get(t) for t in range(seq, seq + w)]
    if any(s is None for s in mine) or any(m is None or m.sig is None for m in theirs):
        return None
    my_sigs = [s.sig for s in mine if s is not None]
    their_sigs = [m.sig for m in theirs if m is not None]
    if my_sigs == their_sigs or Counter(my_sigs) != Counter(their_sigs):
        return None
    support = w
    _, last = view.windows.get(rank, (seq, seq - 1))
    for t in range(seq + w, last + 1):
        slot, majority = view.slots.get((t, rank)), view.majority.get(t)
        if slot is None or majority is None or majority.sig is None:
            continue
        if slot.sig != majority.sig:
            return None
        support += 1
    return support


def explain_shift(view: GroupView, rank: int, seq: int) -> tuple[str, int] | None:
    """The best of "skipped k collectives" and "reordered the next w": the hypothesis
    that explains most of the rank's later slots without contradiction."""
    slot, majority = view.slots.get((seq, rank)), view.majority[seq]
    # Called from the same place as its peers' op, the rank passed something else there:
    # then only a matching call site shows it moved on to a later collective.
    same_call_as_peers = (
        slot is not None
        and majority.slot is not None
        and slot.site is not None
        and slot.site == majority.slot.site
    )
    options: list[tuple[int, int, str, int]] = []
    for w in range(2, MAX_REORDER_WINDOW + 1):
        support = _reorder_support(view, rank, seq, w)
        if support:
            options.append((support, 1, "reorder", w))
    for k in range(1, MAX_SHIFT + 1):
        support = _skip_support(view, rank, seq, k, by_site=same_call_as_peers)
        if support:
            options.append((support, 0, "skip", k))
    if not options:
        return None
    _, _, kind, size = max(options, key=lambda o: (o[0], o[1], -o[3]))
    return kind, size


def skip_before_stop(view: GroupView, rank: int, stop: int) -> tuple[int, int] | None:
    """(seq, k) when ``rank``, whose last slot is ``stop``, skipped k collectives at seq
    before it stopped: from seq on, its slots were called from somewhere else than its
    peers' at the same seq and each equals, call site included, the peers' k later.

    The op, sizes and dtypes at those seqs can all agree (the same all_reduce on every
    step); only the call sites tell that the rank was a step ahead."""
    for seq in range(max(stop - MAX_SHIFT + 1, 0), stop + 1):
        slot, majority = view.slots.get((seq, rank)), view.majority.get(seq)
        if slot is None or majority is None or majority.slot is None:
            continue
        if slot.site is None or majority.slot.site is None or slot.site == majority.slot.site:
            continue
        for k in range(1, MAX_SHIFT + 1):
            ahead = [view.majority.get(t + k) for t in range(seq, stop + 1)]
            if all(
                m is not None and m.slot is not None and matches_majority(view.slots[(t, rank)], m)
                for t, m in zip(range(seq, stop + 1), ahead, strict=True)
                if (t, rank) in view.slots
            ) and any((t, rank) in view.slots for t in range(seq, stop + 1)):
                return seq, k
        return None
    return None


_HISTORY = """
WITH prev AS (
    -- the last time this rank issued the same collective from the same call site
    SELECT max(p.seq) AS seq
    FROM slots p
    WHERE p.gid = $gid AND p.rank = $rank AND p.seq < $seq AND p.sig = $sig AND p.site = $site
)
SELECT s.seq - prev.seq AS k, s.sig, s.site
FROM slots s, prev
WHERE s.gid = $gid AND s.rank = $rank AND s.seq > prev.seq AND s.seq <= prev.seq + $most
  AND s.seq < $seq
ORDER BY k
"""


def skip_by_history(view: GroupView, rank: int, seq: int) -> int | None:
    """k when ``rank`` issued at ``seq`` what the majority issued k collectives after the
    same collective, from the same call site, last time round (the previous step).

    Its peers may never get further than ``seq`` (gloo fails them at once), so their own
    later slots cannot show the shift; their history can. Call sites are required: op and
    sizes alone repeat too often."""
    slot, majority = view.slots.get((seq, rank)), view.majority.get(seq)
    reference = majority.slot if majority else None
    if view.connection is None or slot is None or reference is None:
        return None
    if slot.site is None or reference.site is None or slot.site == reference.site:
        return None
    rows = view.connection.execute(
        _HISTORY,
        {
            "gid": view.gid,
            "rank": reference.rank,
            "seq": seq,
            "sig": reference.sig,
            "site": reference.site,
            "most": MAX_SHIFT,
        },
    ).fetchall()
    for k, sig, site in rows:
        if sig == slot.sig and site == slot.site:
            # its later slots, where it has them, go on with the same step
            for j in range(1, MAX_SHIFT):
                later, expected = view.slots.get((seq + j, rank)), view.majority.get(seq + j + k)
                if later is None or expected is None or expected.slot is None:
                    break
                if not matches_majority(later, expected):
                    return None
            return int(k)
    return None


_OWN_RECORDS = """
SELECT record_id, gid, p2p, seq, op, h, site, peer, time_created_ns
FROM e
WHERE rank = $rank AND record_id > $after AND op <> 'coalesced'
ORDER BY record_id
LIMIT $most
"""


def skip_between_groups(view: GroupView, rank: int, seq: int, last: int) -> Slot | None:
    """The op ``rank`` issued instead of the group's collective ``seq``, when its own
    history shows it skipped that collective: after its collective ``last`` it issued,
    in every group and point-to-point, exactly what it had issued between its two
    collectives before (``last - 1`` and ``last``), and then what followed them there:
    the next step's first op instead of this step's collective.

    A pipeline stage that leaves out a step's broadcast and waits in the next step's
    receive shows only this way: the group never sees it again, and its peer, stuck in
    the broadcast, never posts the send it waits for, so the receive looks like the
    peer's fault. A rank stuck in host code before the collective issued nothing after
    the stretch, and is not a skip."""
    here, reference = view.slots.get((last, rank)), view.majority.get(seq)
    if view.connection is None or here is None or reference is None or seq != last + 1:
        return None
    if not matches_majority(here, reference):
        return None  # its last collective is not the one it would repeat here
    before = view.connection.execute(
        "SELECT first_record FROM slots WHERE gid = ? AND rank = ? AND seq = ?",
        [view.gid, rank, last - 1],
    ).fetchone()
    if before is None:
        return None
    span = here.record_id - before[0]
    rows = view.connection.execute(
        _OWN_RECORDS, {"rank": rank, "after": before[0], "most": 3 * span + 2}
    ).fetchall()

    def own_slot(row: tuple[Any, ...]) -> bool:
        return row[1] == view.gid and not row[2] and row[3] in (last - 1, last)

    def shape(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return (row[1], row[2], row[5], row[6], row[7])

    stretch = [shape(r) for r in rows if r[0] < here.record_id and not own_slot(r)]
    after = [r for r in rows if r[0] > here.record_id and not own_slot(r)]
    n = len(stretch)
    if (
        not n
        or len(after) <= n
        or any(shape(r) != stretch[i % n] for i, r in enumerate(after[: 2 * n]))
    ):
        return None
    record_id, _, _, _, op, h, site, _, created = after[n]
    return Slot(
        seq=seq,
        rank=rank,
        sig=h,
        site=site,
        ops=(op,),
        record_id=record_id,
        created_ns=created,
        dsig=0,
    )
