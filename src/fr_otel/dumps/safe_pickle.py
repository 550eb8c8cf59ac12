"""A restricted unpickler for Flight Recorder dumps.

FR dumps are pickles, and unpickling an arbitrary pickle runs whatever code it names.
torch writes dumps with only dicts, lists, tuples, strings, numbers, bools and None, so
this unpickler refuses every opcode that would look up a global or an external object.
Nothing named by a refused pickle is imported or called: the refusal happens in
``find_class`` / ``persistent_load``, before any object exists.
"""

from __future__ import annotations

import gc
import io
import pickle
from typing import Any, BinaryIO, NoReturn


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle asked to import or call something: it is not a plain FR dump."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"refused to import {what}: an FR dump holds only plain data")


class _PlainDataUnpickler(pickle.Unpickler):
    # The C Unpickler calls these for GLOBAL, STACK_GLOBAL, INST, OBJ, EXT* and
    # PERSID/BINPERSID, the only ways a pickle can reach a callable. Refusing them
    # leaves REDUCE/BUILD/NEWOBJ with nothing to call.
    def find_class(self, module: str, name: str) -> NoReturn:
        raise UnsafePickleError(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> NoReturn:
        raise UnsafePickleError(f"persistent object {pid!r}")


_PREFETCH = 1 << 16


def load_plain(handle: BinaryIO) -> Any:
    """Unpickle one object from a binary file, allowing only plain containers and scalars.

    Give it a buffered file (one with ``peek``): the C unpickler then prefetches, where it
    would otherwise call ``read`` once per opcode (torch writes protocol 2, unframed).
    """
    # A dump is one big tree of small containers: the cyclic GC would rescan it many
    # times while it grows and find nothing to collect (torchfrtrace disables it too).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _PlainDataUnpickler(handle).load()
    finally:
        if gc_was_enabled:
            gc.enable()


def loads_plain(data: bytes) -> Any:
    """Unpickle ``data`` allowing only plain containers and scalars.

    Raises ``UnsafePickleError`` for a pickle that references any global, and the usual
    ``pickle.UnpicklingError`` / ``EOFError`` / ``ValueError`` for a damaged one.
    """
    return load_plain(io.BufferedReader(io.BytesIO(data), _PREFETCH))
