"""File names as text that can be shown and stored.

A POSIX file name is bytes. Python decodes one that is not UTF-8 (``débug_rank_0`` written
in Latin-1) with lone surrogates, which opening the file needs but which UTF-8, and so
Arrow, Parquet and a terminal, refuse. Such names are shown and stored with the bytes
UTF-8 cannot take escaped (``d\\xe9bug_rank_0``)."""

from __future__ import annotations

import os
from pathlib import Path


def printable(path: str | Path) -> str:
    """``path`` as valid UTF-8 text: unchanged when it is, undecodable bytes escaped."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "backslashreplace")
    return text
