from collections.abc import Callable
from typing import Any

class Core:
    """The ring the compiled hooks of one recorder write."""

    attached: bool
    def attach(self, map: Any, capacity: int, header_size: int, next_offset: int) -> None: ...
    def detach(self) -> None: ...
    def invalidate(self) -> None: ...

class FastHook:
    """A collective's recorder wrapper: the repeating case in C (see capture.py)."""

    recorded: int
    """Calls recorded in C; the others were handed to the Python wrapper."""

    def __init__(
        self,
        core: Core,
        original: Callable[..., Any],
        slow: Callable[..., Any],
        recorder: Any,
        groups: dict[Any, tuple[int, bool]],
        signatures: dict[Any, int],
        owner: list[Any],
        recent: dict[tuple[int, int, int, int], tuple[int, Any, Any]],
        library: dict[int, bool],
        seqs: list[Callable[[], int]],
        p2p_seqs: list[int],
        tensor_type: type,
        settle_later: Callable[[Any, int, Any], None],
        failed: Callable[[tuple[int, bool | None], BaseException], None],
        failed_internally: Callable[[BaseException], None],
        inputs_name: str | None,
        outputs_name: str | None,
        group_at: int,
        inputs_at: int,
        outputs_at: int,
        async_at: int,
        same: bool,
        slot_size: int,
        done_offset: int,
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
