"""A process group's member list as short text: ``0-9999``, ``3-9999/4``, ``0-3,8-11``.

A span of a large group cannot carry the member list as an int array: at 10,000 ranks the
list is 50 KB of every default-group span, and at 100,000 ranks a rank's flush of 2,000
entries runs to gigabytes of OTLP. Real layouts make every group a few arithmetic runs (tp, pp
and dp groups are strided, the default group contiguous), so the list is written as its
runs, in group-rank order: ``a`` is one rank, ``a-b`` every rank from a to b, ``a-b/s``
every s-th (descending when a > b). Lists that are not runs stay exact, only longer.
"""

from __future__ import annotations

from collections.abc import Sequence

MEMBERS_MAX = 1 << 20
"""The most members the text may name (10x the largest jobs): text from a span is input,
and ``0-999999999999`` would otherwise be a list no machine can hold."""


def to_ranges(ranks: Sequence[int]) -> str:
    """``ranks`` (non-negative, in group-rank order) as runs."""
    parts: list[str] = []
    count = len(ranks)
    i = 0
    while i < count:
        start = ranks[i]
        j = i + 1
        if j < count and ranks[j] != start:
            step = ranks[j] - start
            while j + 1 < count and ranks[j + 1] - ranks[j] == step:
                j += 1
            # two members are as short written out; a run of step 1 says the same in "a-b"
            if j - i >= 2 or (j - i == 1 and abs(step) == 1):
                end = ranks[j]
                parts.append(f"{start}-{end}" if abs(step) == 1 else f"{start}-{end}/{abs(step)}")
                i = j + 1
                continue
        parts.append(str(start))
        i += 1
    return ",".join(parts)


def from_ranges(text: str, *, limit: int = MEMBERS_MAX) -> list[int]:
    """``to_ranges``' inverse. Raises ``ValueError`` naming the part that is not a run, or
    when the runs name more than ``limit`` members."""
    ranks: list[int] = []
    if not text:
        return ranks
    for part in text.split(","):
        bounds, slash, step_text = part.partition("/")
        first, dash, last = bounds.partition("-")
        try:
            start = _rank(first)
            end = _rank(last) if dash else start
            step = _rank(step_text) if slash else 1
        except ValueError:
            raise ValueError(f"member ranges {_shown(text)}: {part!r} is not a rank run") from None
        if step == 0 or (slash and not dash):
            raise ValueError(f"member ranges {_shown(text)}: {part!r} is not a rank run")
        members = abs(end - start) // step + 1
        if len(ranks) + members > limit:
            raise ValueError(
                f"member ranges {_shown(text)} name more than {limit:,} ranks: more than any job"
            )
        ranks.extend(range(start, end + 1, step) if end >= start else range(start, end - 1, -step))
    return ranks


def _rank(text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise ValueError(text)
    return int(text)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")
