from collections.abc import Callable
from typing import Any

def install(callback: Callable[[], Any], limit_s: int, /) -> bool:
    """Call ``callback()`` in the aborting thread before SIGABRT ends the process, which
    ends within ``limit_s`` whatever happens; False where SIGABRT has another handler."""

def uninstall() -> None:
    """Give SIGABRT back its default action."""
