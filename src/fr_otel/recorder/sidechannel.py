"""Incident ids shared through the job's c10d TCPStore, the side channel every rank already has.

torch itself signals dumps through the same store (key ``exception_dump``). fr_otel opens
**its own two client connections** to it: a TCPStore client runs one request at a time,
so a listener blocked in ``wait`` on torch's connection would stall every store call the
training thread makes (``new_group``, NCCL's own dump polling).

The listener polls with ``check`` rather than blocking in ``wait``: a thread blocked in a
native call when the interpreter exits aborts the process ("terminate called without an
active exception", observed with torchrun when one rank finishes before the others), and
a blocked ``wait`` cannot be interrupted. The poll interval grows with the job
(``poll_interval``) so that the store's server sees at most ~5,000 checks a second, a
fifth of what NCCL's own monitors send it.

Keys (under ``fr_otel/``, away from torch's):

* ``incident/<n>``: the id of the job's n-th incident. Whoever declares one writes it with
  ``compare_set(key, "", candidate)``, so when several ranks time out together the first
  id wins and every rank learns the same one.
* ``flushed/<id>``: a counter every rank (or the survivor that flushed a dead rank's ring
  for it) adds one to, so the declaring rank can wait for the job's flush to finish.

A store that stops answering (its host frozen, a partition that drops packets) leaves a
TCPStore client's request blocked for good, whatever the store's timeout: torch bounds
waits for keys, not replies. An incident must still be flushed, so every request of the
flush path (``declare``, ``mark_flushed``, ``flushed``) runs on a thread of its own and is
given up after ``ANSWER_S``: the channel is then unanswering (``StoreUnanswered``) and
asks nothing more, and the rank agrees on the incident with this host's ranks alone.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

_PREFIX = "fr_otel/"
ANSWER_S = 5.0
"""How long a request of the flush path waits for the store's reply: a healthy store
answers in milliseconds, even at 5,000 checks a second."""
_T = TypeVar("_T")


class StoreUnanswered(RuntimeError):
    """The job's store did not answer a request in time; the channel asks nothing more."""


POLL_FLOOR_S = 0.5
"""The least time between a rank's checks. Each costs the rank a store round trip (about
0.1 ms of CPU on gloo's TCPStore client): five times a second, a third of a microsecond
per call of a tight all_reduce loop, a third of what the whole recorder may add there.
Hearing of another rank's incident half a second later leaves most of the flush deadline
(5 s) for the flush: a rank whose peer crashed is told sooner by the launcher's SIGTERM,
which it flushes on."""


def poll_interval(world: int) -> float:
    """Seconds between a rank's checks: 0.5 s up to 2,500 ranks, 5 s at 25,000 and more."""
    return min(max(POLL_FLOOR_S, world / 5000.0), 5.0)


def incident_key(generation: int) -> str:
    return f"{_PREFIX}incident/{generation}"


def flushed_key(incident: str) -> str:
    return f"{_PREFIX}flushed/{incident}"


def tcp_store_address(store: Any) -> tuple[str, int] | None:
    """(host, port) of the TCPStore under any PrefixStore wrappers, or None."""
    seen = 0
    while hasattr(store, "underlying_store") and seen < 16:
        store = store.underlying_store
        seen += 1
    host, port = getattr(store, "host", None), getattr(store, "port", None)
    if isinstance(host, str) and isinstance(port, int):
        return host, port
    return None


class SideChannel:
    """Two private client connections to the job's TCPStore."""

    def __init__(self, host: str, port: int, *, connect_timeout_s: float = 30.0) -> None:
        from torch._C._distributed_c10d import TCPStore

        def client() -> Any:
            return TCPStore(
                host,
                port,
                is_master=False,
                wait_for_workers=False,
                timeout=datetime.timedelta(seconds=connect_timeout_s),
            )

        self._requests = client()
        self._listener = client()
        self._unanswered: str | None = None

    def _bounded(self, what: str, request: Callable[[], _T]) -> _T:
        """``request()``, or ``StoreUnanswered`` once it has not returned in ``ANSWER_S``
        (it is left blocked on a daemon thread: the store may never reply)."""
        if self._unanswered is not None:
            raise StoreUnanswered(self._unanswered)
        result: list[_T] = []
        failure: list[BaseException] = []
        done = threading.Event()

        def run() -> None:
            try:
                result.append(request())
            except BaseException as exc:  # handed to the caller
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=run, name="fr_otel-store", daemon=True).start()
        if not done.wait(ANSWER_S):
            self._unanswered = f"the job's store did not answer {what} within {ANSWER_S:.0f} s"
            raise StoreUnanswered(self._unanswered)
        if failure:
            raise failure[0]
        return result[0]

    def declare(self, generation: int, candidate: str) -> str:
        """Declare incident ``generation`` as ``candidate``; return the id that won."""
        key = incident_key(generation)
        value = self._bounded(
            "an incident's declaration", lambda: self._requests.compare_set(key, "", candidate)
        )
        return bytes(value).decode()

    def declared(self, generation: int) -> str | None:
        """The id of incident ``generation`` if it has been declared, else None."""
        key = incident_key(generation)
        if not self._listener.check([key]):
            return None
        return bytes(self._listener.get(key)).decode()

    def mark_flushed(self, incident: str) -> int:
        key = flushed_key(incident)
        return int(self._bounded("a flush's count", lambda: self._requests.add(key, 1)))

    def flushed(self, incident: str) -> int:
        key = flushed_key(incident)
        return int(self._bounded("the flushes' count", lambda: self._requests.add(key, 0)))
