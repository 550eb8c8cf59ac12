"""Recorder ring files written as a rank leaves them, for tests of what reads them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fr_otel.recorder.ring import GroupInfo, RingWriter, Signature, ring_base
from fr_otel.recorder.slot import COMPLETED, STARTED


def write_ring(
    base: Path,
    *,
    rank: int,
    world: int,
    job: str,
    seqs: Iterable[int],
    running_last: bool = False,
    site: tuple[str, str, int] | None = None,
    capacity: int = 8,
    run_id: str | None = None,
    close: bool = True,
    api: str | None = None,
    torch_op: str | None = None,
) -> RingWriter:
    """One all_reduce of 8 floats in the default group per sequence number, completed
    (the last one still running with ``running_last``), then the ring closed: unlocked,
    as a rank that died leaves it (``close=False``: held, as by a rank still running).
    ``api``: the function the hooks saw called instead (it is the op until torch's name
    for it, ``torch_op``, is learned)."""
    ranks = tuple(range(world))
    writer = RingWriter(
        base, capacity=capacity, rank=rank, world=world, job=job, backend="gloo", run_id=run_id
    )
    group = writer.intern_group(
        ("0", ranks),
        GroupInfo(name="0", desc="default_pg", ranks=ranks, backend="gloo", timeout_ms=5000),
    )
    signature = writer.intern_signature(
        api or "all_reduce",
        Signature(
            op=api or "all_reduce",
            api=api,
            input_sizes=[[8]],
            output_sizes=[[8]],
            input_dtypes=["Float"],
            output_dtypes=["Float"],
            is_p2p=False,
        ),
    )
    if torch_op is not None:
        writer.note_torch_op(signature, torch_op, "gloo")
    site_index = writer.intern_site(site, [site]) if site is not None else -1
    numbers = list(seqs)
    for seq in numbers:
        record = writer.begin(group, seq, 0, signature, site_index, -1, STARTED)
        if not (running_last and seq == numbers[-1]):
            writer.finish(record, COMPLETED)
    if close:
        writer.close()
    return writer


UNLEARNED_API, LEARNED_OP = "reduce_scatter_tensor", "all_reduce"
"""What ``write_half_learned`` rings call, and the torch op rank 0 learned for it."""


def write_half_learned(rings: Path, job: str) -> None:
    """Two ranks' rings of the same four collectives: ``UNLEARNED_API`` called on both,
    rank 0 having learned that torch runs it as ``LEARNED_OP``, rank 1 (dead before its
    first read of torch's FR) not yet."""
    for rank, learned in ((0, LEARNED_OP), (1, None)):
        write_ring(
            ring_base(rings, job, rank),
            rank=rank,
            world=2,
            job=job,
            seqs=range(1, 5),
            site=("step", "/job/train.py", 12),
            api=UNLEARNED_API,
            torch_op=learned,
        )
