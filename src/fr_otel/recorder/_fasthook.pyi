from collections.abc import Callable
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

class RecordedCall:
    """The original called from C between the two halves of the Python code that records
    it (``capture._Recording``): no frame of the recorder in the traceback of what the
    original raises."""

    def __init__(
        self,
        original: Callable[..., Any],
        before: Callable[..., Any],
        after: Callable[[Any, Any], object],
        failed: Callable[[Any, BaseException], object],
    ) -> None:
        """``before(*args, **kwargs)`` -> a token, or None (the original is just called);
        then ``after(token, result)``, or ``failed(token, exception)`` for whatever the
        original raised, which is raised on."""
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
