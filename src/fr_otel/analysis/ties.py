"""A tie for majority at a divergent slot, broken on evidence (``break_tie``), never by
file order: a tie left standing is reported with no culprit (``divergence``).
"""

from __future__ import annotations

from fr_otel.analysis.slots import MAX_SHIFT, GroupView, Majority, Slot


def break_tie(view: GroupView, seq: int) -> Majority | None:
    """A reference for a slot with no majority (a two-rank group never has one).

    First the replicas of this group (same description and size: the other dp or tp
    groups run the same program): the side they agreed on is the reference, when they
    back exactly one side. Then each rank's own history: the side whose ranks issued what
    they issued last time at the same call site, when exactly one side did.
    """
    sides: dict[int, list[Slot]] = {}
    for (t, _), slot in view.slots.items():
        if t == seq:
            sides.setdefault(slot.sig, []).append(slot)
    votes = view.siblings.get(seq, {})
    backed = [sig for sig in sides if votes.get(sig)]
    if len(backed) == 1:
        view.tie_breaks[seq] = f"{votes[backed[0]]} replica group(s) issued the same"
        return _majority_of(view, seq, sides, backed[0])
    consistent = [
        sig
        for sig, slots in sides.items()
        if all(view.precedent.get((seq, s.rank)) == sig for s in slots)
    ]
    changed = [
        sig
        for sig, slots in sides.items()
        if all(view.precedent.get((seq, s.rank)) not in (None, sig) for s in slots)
    ]
    if len(consistent) == 1 and len(changed) == len(sides) - 1:
        view.tie_breaks[seq] = "the other side changed what it issued at the same call site"
        return _majority_of(view, seq, sides, consistent[0])
    leader = _shift_leader(view, seq, sides)
    if leader is None:
        return None
    view.tie_breaks[seq] = (
        "the other side issued, from here on, what this side issued one or more collectives"
        " later: it skipped"
    )
    return _majority_of(view, seq, sides, leader)


def _follows(view: GroupView, rank: int, other: int, seq: int) -> bool:
    """Whether ``rank``'s slots from ``seq`` on are ``other``'s k slots later, for some k."""
    _, last = view.windows.get(rank, (seq, seq - 1))
    for k in range(1, MAX_SHIFT + 1):
        compared = 0
        for t in range(seq, last + 1):
            mine, theirs = view.slots.get((t, rank)), view.slots.get((t + k, other))
            if mine is None or theirs is None:
                continue
            if mine.sig != theirs.sig or (
                mine.site is not None and theirs.site is not None and mine.site != theirs.site
            ):
                compared = -1
                break
            compared += 1
        if compared > 0:
            return True
    return False


def _shift_leader(view: GroupView, seq: int, sides: dict[int, list[Slot]]) -> int | None:
    """Of two sides, the one the other follows shifted (it skipped): the reference."""
    if len(sides) != 2:
        return None
    (sig_a, side_a), (sig_b, side_b) = sides.items()
    a_follows = all(_follows(view, s.rank, side_b[0].rank, seq) for s in side_a)
    b_follows = all(_follows(view, s.rank, side_a[0].rank, seq) for s in side_b)
    if a_follows == b_follows:
        return None
    return sig_b if a_follows else sig_a


def _majority_of(view: GroupView, seq: int, sides: dict[int, list[Slot]], sig: int) -> Majority:
    old = view.majority[seq]
    return Majority(
        sig=sig,
        n=len(sides[sig]),
        runner_up_n=0,
        signatures=old.signatures,
        present=old.present,
        absent=old.absent,
        slot=min(sides[sig], key=lambda s: s.rank),
    )
