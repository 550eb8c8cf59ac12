"""Warnings that would repeat for as long as their cause lasts, said once and then summed up.

A recorder in continuous mode sends a batch every second or so: while its Collector is
down, each batch fails the same way, and a job of a thousand ranks would log a thousand
warnings a second that say nothing new. A kind of warning is said the first time, then at
most once per ``every_s`` with the count of those held back since; once its cause is over
(``resolved``), the next one is said at once again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SUMMARY_EVERY_S = 60.0
"""How often, at most, a repeating warning is said again (with its count)."""


@dataclass
class _Held:
    said_at: float
    held: int = 0


@dataclass(kw_only=True)
class RepeatedWarnings:
    """Collapses repeats of each kind of warning of ``logger``; safe to share by threads."""

    logger: logging.Logger
    every_s: float = SUMMARY_EVERY_S
    clock: Callable[[], float] = time.monotonic
    _kinds: dict[str, _Held] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def warning(self, kind: str, message: str, *args: object) -> None:
        """Log ``message % args`` unless a warning of ``kind`` was said within ``every_s``."""
        now = self.clock()
        with self._lock:
            state = self._kinds.get(kind)
            if state is None:
                self._kinds[kind] = _Held(said_at=now)
                held, since = 0, 0.0
            elif now - state.said_at < self.every_s:
                state.held += 1
                return
            else:
                held, since = state.held, now - state.said_at
                state.said_at, state.held = now, 0
        if held:
            self.logger.warning(
                message + " (%d more like it in the last %.0f s)", *args, held, since
            )
        else:
            self.logger.warning(message, *args)

    def resolved(self, kind: str) -> None:
        """The cause of ``kind`` is over: say how many were held back, if any, and say the
        next one at once."""
        with self._lock:
            state = self._kinds.pop(kind, None)
        if state is not None and state.held:
            self.logger.info(
                "%d more warnings of kind %r were held back; that is over now", state.held, kind
            )


def warn(
    warnings: RepeatedWarnings | None,
    logger: logging.Logger,
    kind: str,
    message: str,
    *args: object,
) -> None:
    """Through ``warnings`` when there is one, else straight to ``logger``."""
    if warnings is None:
        logger.warning(message, *args)
    else:
        warnings.warning(kind, message, *args)
