"""Stack frames: which are torch's own, and where the user's code called in.

Shared by the importer (the ``call_site`` column) and the analyzer (findings' stacks).
"""

from __future__ import annotations

import re
from typing import Any

# Frames of torch and of the plumbing around every call; the first frame that is none
# of these is the user's call site.
_LIBRARY_MARKERS = (
    "/site-packages/torch/",
    "/torch/distributed/",
    "/torch/nn/parallel/",
    "/torch/_dynamo/",
    "c10d_logger.py",
    "typing_extensions.py",
    "/multiprocessing/",
    "<string>",
    "<frozen ",
    "/fr_otel/recorder/capture.py",  # the recorder's own wrappers around torch's calls
)
MAX_FRAMES = 16
LIBRARY_FRAME_PATTERN = "|".join(re.escape(marker) for marker in _LIBRARY_MARKERS)
"""The same test as ``is_library_frame``, as a regular expression for SQL."""


def is_library_frame(frame: dict[str, Any]) -> bool:
    filename = str(frame.get("filename") or "")
    return any(marker in filename for marker in _LIBRARY_MARKERS)


def trimmed(frames: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """At most ``MAX_FRAMES`` frames, innermost first, as plain dicts."""
    if not frames:
        return []
    return [
        {"name": f.get("name"), "filename": f.get("filename"), "line": f.get("line")}
        for f in frames[:MAX_FRAMES]
    ]


def call_site(frames: list[dict[str, Any]] | None) -> str | None:
    """The innermost frame of the user's code: ``file:line in function``."""
    for frame in frames or []:
        if not is_library_frame(frame):
            return f"{frame.get('filename')}:{frame.get('line')} in {frame.get('name')}"
    return None
