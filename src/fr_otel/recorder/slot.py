"""The ring's slot: one collective in 64 bytes, the layout every writer and reader shares.

Three writers fill slots: ``RingWriter`` (``begin``/``append``/``finish``), the Python
hook (``Capture._wrapper``, which packs slots inline on the hot path) and the compiled
hook (``_fasthook.c``, which writes each field at its offset). This module is where the
layout is defined; the compiled hook's offsets and state codes are checked against
``layout()`` when it attaches to a ring, so a change here that the C code does not
follow fails at attach (the recorder then records through the Python hook), never as
slots written at the wrong place.
"""

from __future__ import annotations

import functools
import struct
from operator import itemgetter
from typing import Any, Final

FIELDS: Final = (
    ("record", "q"),
    ("group", "i"),
    ("seq", "q"),
    ("p2p_seq", "q"),
    ("signature", "i"),
    ("site", "i"),
    ("peer", "i"),
    ("created_ns", "q"),
    ("done_ns", "q"),
    ("state", "b"),
)
"""Name and struct code of every field, in order: record id, interned group, collective
and point-to-point sequence numbers (torch's), interned signature and call site, peer
(global rank, -1 for collectives), creation and completion times (ns since the epoch;
0 while running), state."""

SLOT: Final = struct.Struct("<" + "".join(code for _, code in FIELDS) + "7x")
"""The packed slot, little-endian, padded to 64 bytes."""
SLOT_SIZE: Final = SLOT.size

OFFSETS: Final = {
    name: struct.calcsize("<" + "".join(code for _, code in FIELDS[:i]))
    for i, (name, _) in enumerate(FIELDS)
}
"""Byte offset of each field inside a slot."""

DONE: Final = struct.Struct("<qb")
"""(completion time, state): what finishing an op rewrites, in one pack."""
DONE_OFFSET: Final = OFFSETS["done_ns"]
STATE_OFFSET: Final = OFFSETS["state"]
RECORD_ID: Final = struct.Struct("<q")
"""The slot's first field alone (a reader checks whether a slot still holds a record)."""

EMPTY, SCHEDULED, STARTED, COMPLETED, FAILED = 0, 1, 2, 3, 4
"""Slot states. ``FAILED`` ops are reported ``started``: they never completed."""
STATE_NAMES: Final = {SCHEDULED: "scheduled", STARTED: "started", COMPLETED: "completed"}
"""How slot states map to Flight Recorder's ``state``."""

if DONE_OFFSET + DONE.size - 1 != STATE_OFFSET:  # DONE must cover (done_ns, state)
    raise ImportError("slot layout: the state byte must follow the completion time")


def layout() -> dict[str, int]:
    """Every offset and state code a compiled writer must agree with (``Core.attach``)."""
    return {
        **{f"{name}_offset": offset for name, offset in OFFSETS.items()},
        "slot_size": SLOT_SIZE,
        "scheduled": SCHEDULED,
        "started": STARTED,
        "completed": COMPLETED,
    }


@functools.cache
def slot_dtype() -> Any | None:
    """The slot as a numpy structured dtype (``SLOT``'s fields at their offsets), for
    readers that decode many slots at once; None where numpy is not installed (torch runs
    without it; fr_otel's torch extra brings it)."""
    try:
        import numpy as np
    except ImportError:
        return None
    formats = {"q": "<i8", "i": "<i4", "b": "i1"}
    return np.dtype(
        {
            "names": [name for name, _ in FIELDS],
            "formats": [formats[code] for _, code in FIELDS],
            "offsets": [OFFSETS[name] for name, _ in FIELDS],
            "itemsize": SLOT_SIZE,
        }
    )


RECORD_OF: Final = itemgetter(0)
STATE_OF: Final = itemgetter(9)
"""A slot tuple's record id and state (``SLOT``'s first and last fields)."""
