"""A running rank's current Python stack, on request.

The live check names a stalled group's laggard, and the person needs to see where that
rank is: "rank 3 is at ``data_loader.py:88``", not only "rank 3 is late". Only the rank
itself can read its training thread's stack (``sys._current_frames``), and its watch
thread is already awake on its trigger FIFO. So the agent writes ``STACK_REQUEST`` into
the FIFO, and the watch writes the main thread's stack beside the ring
(``<ring base>.stack``, JSON, written whole) instead of declaring an incident, which any
other bytes there still do (``echo > rank-000003.trigger``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import sysconfig
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fr_otel.stacks import is_library_frame

STACK_REQUEST = b"\x05"
"""The byte that asks a rank's watch for its stack (ASCII ENQ: no shell's ``echo`` writes
it by accident)."""
STACK_SUFFIX = ".stack"
MAX_FRAMES = 64
_OWN = str(Path(__file__).resolve().parents[1]) + "/"
"""fr_otel's own files: the recorder's frames are never where the user's code is."""
_STDLIB = tuple(
    path
    for path in {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")}
    if path
)


def stack_path(base: Path) -> Path:
    """The stack file of the rank whose ring is ``base`` (``ring.ring_base``)."""
    return base.with_suffix(STACK_SUFFIX)


@dataclass(frozen=True, kw_only=True)
class RankStack:
    """A rank's training thread, where it was when the rank answered."""

    rank: int
    taken_ns: int
    thread: str
    frames: list[dict[str, Any]]
    """Innermost first: ``name``, ``filename``, ``line``."""

    @property
    def user_frame(self) -> dict[str, Any] | None:
        """The innermost frame of the user's code: neither torch's, fr_otel's nor Python's
        own library (a rank waiting in ``queue.get`` is where it called it)."""
        for frame in self.frames:
            filename = str(frame.get("filename") or "")
            if not (
                is_library_frame(frame) or filename.startswith(_STDLIB) or filename.startswith(_OWN)
            ):
                return frame
        return None

    @property
    def where(self) -> str | None:
        """``file:line in function`` of ``user_frame``."""
        frame = self.user_frame
        if frame is None:
            return None
        return f"{frame['filename']}:{frame['line']} in {frame['name']}"

    @property
    def in_collective(self) -> bool:
        """Whether the thread is inside ``torch.distributed`` (waiting in a collective)
        rather than in host code."""
        return any("/torch/distributed/" in str(f.get("filename") or "") for f in self.frames)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "taken_ns": self.taken_ns,
            "thread": self.thread,
            "where": self.where,
            "in_collective": self.in_collective,
            "frames": self.frames,
        }


def write_stack(base: Path, rank: int) -> None:
    """The rank's side: write its main thread's stack to ``stack_path(base)`` (called by
    its watch thread)."""
    main = threading.main_thread()
    frame = sys._current_frames().get(main.ident or -1)
    frames = [
        {"name": f.name, "filename": f.filename, "line": f.lineno}
        for f in reversed(traceback.extract_stack(frame, limit=MAX_FRAMES))
    ]
    stack = RankStack(rank=rank, taken_ns=time.time_ns(), thread=main.name, frames=frames)
    path = stack_path(base)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(stack.to_json()))
    os.replace(temporary, path)


def request_stack(trigger: Path) -> bool:
    """The agent's side: ask the rank whose FIFO is ``trigger`` for its stack. False when
    the rank has no FIFO to ask (it ended, or never made one)."""
    try:
        fd = os.open(trigger, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        os.write(fd, STACK_REQUEST)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def read_stack(base: Path, since_ns: int) -> RankStack | None:
    """The stack the rank wrote at or after ``since_ns`` (None: not yet, or unreadable)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        data = json.loads(stack_path(base).read_text())
        if int(data["taken_ns"]) >= since_ns:
            return RankStack(
                rank=int(data["rank"]),
                taken_ns=int(data["taken_ns"]),
                thread=str(data["thread"]),
                frames=[
                    {"name": f["name"], "filename": f["filename"], "line": f["line"]}
                    for f in data["frames"]
                ],
            )
    return None
