from typing import Any

from fr_otel.recorder.capture import HookState

class Core:
    """The ring the compiled hooks of one recorder write."""

    attached: bool
    def attach(
        self, map: Any, capacity: int, header_size: int, next_offset: int, layout: dict[str, int]
    ) -> None:
        """Write into ``map`` from now on; ``layout`` (``slot.layout()``) must be the one
        compiled in, else ValueError."""
    def detach(self) -> None: ...
    def invalidate(self) -> None: ...

class FastHook:
    """A collective's recorder wrapper: the repeating case in C (see capture.py)."""

    recorded: int
    """Calls recorded in C; the others were handed to the Python wrapper."""

    def __init__(self, state: HookState) -> None:
        """Reads every field of ``state`` once; the dicts and lists stay shared."""
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
