"""Ring files as the recorder's hooks write them, for the live check's tests."""

from __future__ import annotations

from pathlib import Path

from fr_otel.recorder.ring import GroupInfo, RingWriter, Signature, ring_base
from fr_otel.recorder.slot import COMPLETED, STARTED

WORLD = (0, 1, 2)


def signature(op: str, size: int, *, dtype: str = "Float", api: str | None = None) -> Signature:
    """One tensor of ``size`` elements in and out (none in for ``size`` 0: a scatter's
    non-source); ``api``: the function called, where torch's op name was learned since."""
    named = {"api": api} if api is not None else {}
    return Signature(
        op=op,
        input_sizes=[[size]] if size else [],
        output_sizes=[[size]],
        input_dtypes=[dtype] if size else [],
        output_dtypes=[dtype],
        is_p2p=False,
        **named,
    )


class Rank:
    """One rank's ring, written as the hooks write it."""

    def __init__(self, folder: Path, rank: int, capacity: int = 64) -> None:
        """``folder``: the ring folder (``<ring dir>/job=job/run=run/`` is made in it)."""
        self.base = ring_base(folder, "job", rank, "run")
        self.writer = RingWriter(
            self.base,
            capacity=capacity,
            rank=rank,
            world=len(WORLD),
            job="job",
            backend="gloo",
            run_id="run",
        )
        self.seq: dict[str, int] = {}

    def issue(
        self,
        what: Signature,
        *,
        group: str = "0",
        ranks: tuple[int, ...] = WORLD,
        line: int = 10,
        peer: int = -1,
        seq: int | None = None,
        writer: RingWriter | None = None,
    ) -> None:
        """One collective (or, with ``peer``, a point-to-point op), completed, called from
        ``train.py:<line>``; at the group's next seq unless ``seq`` is given."""
        writer = writer or self.writer
        index = writer.intern_group(
            (group, ranks),
            GroupInfo(name=group, desc="pg", ranks=ranks, backend="gloo", timeout_ms=30000),
        )
        sig = writer.intern_signature(repr(what), what)
        frames = [("step", "train.py", line)]
        site = writer.intern_site(tuple(frames), frames)
        if seq is None:
            seq = self.seq[group] = self.seq.get(group, 0) + (peer < 0)
        record = writer.begin(index, seq, 0, sig, site, peer, STARTED)
        writer.finish(record, COMPLETED)
