"""Torch's own name for each op the hooks record, learned from torch's Flight Recorder
entries of the same (group, collective seq) at the mirror's reads (``frsource.FrMirror``),
and noted in the hooks' ring; where a rank's ring is read after it died without having
learned a name, from its peers' rings (``taught_by_peers``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING

from fr_otel.recorder.ring import RingContents, RingWriter
from fr_otel.recorder.torch_fr import first_items

if TYPE_CHECKING:  # pyarrow is imported where entries are read: not at install
    import pyarrow as pa

LEARN_TRIES = 3
"""Reads that may look for a hooked signature's records in torch's FR without finding one
before its torch op is given up (its rows keep the function called as their op): gloo's
``monitored_barrier`` is recorded by no FR entry, nor is anything where torch's FR is off,
and an entry may land just after the dump that should have held it."""
LEARN_KEYS = 8
"""Per signature still to learn, the newest of its hooked (group, seq) kept for the next
read: one that torch's FR holds is enough."""


@cache
def _false() -> pa.Scalar:
    import pyarrow as pa

    return pa.scalar(False, pa.bool_())


def _collective_names(entries: pa.StructArray, seqs: Iterable[int]) -> dict[tuple[str, int], str]:
    """(group name, collective seq) -> profiling name of the collectives among ``entries``
    whose seq is one of ``seqs`` (filtered as columns: the rest never become values)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = pa.array(sorted(set(seqs)), pa.int64())
    p2p = pc.fill_null(entries.field("is_p2p"), _false())
    seq = entries.field("collective_seq_id")
    picked = entries.filter(pc.and_(pc.is_in(seq, value_set=wanted), pc.invert(p2p)))
    return {
        (str(name), int(number)): str(profiling_name)
        for name, number, profiling_name in zip(
            first_items(picked.field("process_group")).to_pylist(),
            picked.field("collective_seq_id").to_pylist(),
            picked.field("profiling_name").to_pylist(),
            strict=True,
        )
        if number is not None and profiling_name
    }


class TorchOps:
    """Learns torch's own name for each hook signature's op, from torch's FR entries of the
    same (group, collective seq), and notes it in the hooks' ring
    (``RingWriter.note_torch_op``): the hooks see the function called
    (``reduce_scatter_tensor``), torch's FR the op that ran (``gloo:all_reduce``, gloo's
    fallback; NCCL's ``_reduce_scatter_base``), and an archive mixes rows of both, which
    the analyzer compares by op. A static table would be torch's and each backend's of one
    version.

    Its cost stops once every signature is settled (learned, point-to-point, or given up
    after ``LEARN_TRIES`` reads): then a look is a comparison of two counts, and the
    hooks' path never changes."""

    def __init__(self, main: RingWriter) -> None:
        self._main = main
        self._classified = 0
        """Signature indexes below it are settled or in ``_open``."""
        self._open: dict[int, int] = {}
        """Signature -> reads left to find one of its records in torch's FR."""
        self._keys: dict[int, deque[tuple[int, int]]] = {}
        """Signature -> the newest (group, seq) of its records no read has looked for."""
        self._cursor = 0
        """Main-ring records before it were looked at for ``_open`` signatures."""

    def waiting(self) -> bool:
        """Has the hooks' ring a record of a signature still to learn that no read has
        looked for yet? (A reason to read torch's FR at the next allowed time.)"""
        self._scan()
        return bool(self._keys)

    def _scan(self) -> None:
        end = self._main.next_record  # first: every signature its records use is counted
        count = self._main.signature_count()
        while self._classified < count:
            signature = self._main.signature(self._classified)
            # a send or recv is not learned: torch's FR names it as the hooks do, when
            # it records it at all (gloo's does not)
            if signature is not None and not signature.is_p2p:
                self._open[self._classified] = LEARN_TRIES
            self._classified += 1
        if self._open and end > self._cursor:
            for group, seq, signature_index in self._main.signature_keys(
                self._cursor, end, self._open
            ):
                keys = self._keys.get(signature_index)
                if keys is None:
                    keys = self._keys[signature_index] = deque(maxlen=LEARN_KEYS)
                keys.append((group, seq))
        self._cursor = end

    def learn(self, dumps: Iterable[pa.StructArray], counters: dict[str, int]) -> None:
        """After a read of torch's FR (``dumps``, taken once the groups had issued
        ``counters``): note the torch op of each signature one of whose records the dump
        holds. A signature whose records issued before the dump it lacks loses a try;
        records issued since wait for the next read."""
        self._scan()
        if not self._keys:
            return
        names = self._main.group_names()
        wanted: dict[tuple[str, int], int] = {}
        for signature_index, keys in self._keys.items():
            for group, seq in keys:
                name = names.get(group)
                if name is not None:
                    wanted[(name, seq)] = signature_index
        found: dict[tuple[str, int], str] = {}
        for entries in dumps:
            found.update(_collective_names(entries, (seq for _, seq in wanted)))
        from fr_otel.dumps.parse import split_profiling_name

        for key, signature_index in wanted.items():
            profiling_name = found.get(key)
            if profiling_name is None or signature_index not in self._open:
                continue
            backend, op, _ = split_profiling_name(profiling_name)
            if op == "coalesced":  # NCCL's entry for a batch of ops, not this one's
                continue
            self._main.note_torch_op(signature_index, op, backend)
            self._settle(signature_index)
        for signature_index, keys in list(self._keys.items()):
            # issued after the dump: the next read looks (a group gone since: never)
            later = [(g, seq) for g, seq in keys if seq > counters.get(names.get(g, ""), seq)]
            if len(later) == len(keys):
                continue
            tries = self._open[signature_index] - 1
            if tries <= 0:
                self._settle(signature_index)  # given up: the function called stays the op
                continue
            self._open[signature_index] = tries
            if later:
                self._keys[signature_index] = deque(later, maxlen=LEARN_KEYS)
            else:
                del self._keys[signature_index]

    def _settle(self, signature_index: int) -> None:
        self._open.pop(signature_index, None)
        self._keys.pop(signature_index, None)


LearnedOps = dict[tuple[str, str | None], set[str]]
"""(function called, backend) -> the torch ops ranks learned for it (``learned_ops``)."""


def learned_ops(rings: Iterable[RingContents]) -> LearnedOps:
    """What ``rings`` learned of torch's ops (``LearnedOps``)."""
    learned: LearnedOps = {}
    for contents in rings:
        for signature in contents.signatures.values():
            if signature.api is not None and signature.op != signature.api:
                learned.setdefault((signature.api, signature.backend), set()).add(signature.op)
    return learned


def taught(contents: RingContents, learned: LearnedOps) -> RingContents:
    """``contents``, each hooked signature whose torch op its rank had not learned taking
    the op that ``learned`` holds for the same function and backend, where it holds one.
    A rank learns torch's name for an op at a read of torch's FR, up to a second after
    its peers; a job that dies in that second leaves rings where that rank's
    ``reduce_scatter_tensor`` meets its peers' ``all_reduce``, and the analysis compares
    ops: a desync no rank made."""
    signatures = dict(contents.signatures)
    for index, signature in contents.signatures.items():
        if signature.api is None or signature.op != signature.api:
            continue
        ops = {
            op
            for (api, backend), found in learned.items()
            if api == signature.api and signature.backend in (None, backend)
            for op in found
        }
        if len(ops) == 1:
            signatures[index] = replace(signature, op=ops.pop())
    return (
        replace(contents, signatures=signatures) if signatures != contents.signatures else contents
    )


def taught_by_peers(rings: list[RingContents]) -> list[RingContents]:
    """One run's ``rings``, each ``taught`` what the others learned."""
    learned = learned_ops(rings)
    return [taught(contents, learned) for contents in rings] if learned else rings
