"""The incident side channel (``fr_otel.recorder.sidechannel``) against a real c10d TCPStore.

Nothing is faked: each test starts a real ``TCPStore`` master on 127.0.0.1 (port 0, so
the kernel picks a free one) in this process, and the ``SideChannel`` clients open real
TCP connections to it, as the ranks of a job do. Needs torch (the CPU build will do).
"""

from __future__ import annotations

import datetime
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("torch.distributed")

import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore

from fr_otel.recorder import sidechannel
from fr_otel.recorder.sidechannel import (
    SideChannel,
    StoreUnanswered,
    flushed_key,
    incident_key,
    poll_interval,
    tcp_store_address,
)


@pytest.fixture
def store() -> Iterator[Any]:
    master = TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=10),
    )
    assert master.port > 0
    yield master


def _channel(store: Any) -> SideChannel:
    return SideChannel("127.0.0.1", store.port, connect_timeout_s=10)


def test_first_declared_incident_wins_for_every_rank(store: Any) -> None:
    rank0, rank1 = _channel(store), _channel(store)
    assert rank0.declared(1) is None and rank1.declared(1) is None

    assert rank0.declare(1, "20240101T000000Z-r0-timeout") == "20240101T000000Z-r0-timeout"
    # rank 1 timed out a moment later: it learns rank 0's id, not its own
    assert rank1.declare(1, "20240101T000001Z-r1-timeout") == "20240101T000000Z-r0-timeout"
    assert rank0.declare(1, "again") == "20240101T000000Z-r0-timeout"

    assert rank0.declared(1) == rank1.declared(1) == "20240101T000000Z-r0-timeout"
    assert rank1.declared(2) is None
    assert rank1.declare(2, "second") == "second"
    assert rank0.declared(2) == "second"
    # it is really in the job's store, under fr_otel's own key
    assert bytes(store.get(incident_key(1))).decode() == "20240101T000000Z-r0-timeout"


def test_simple_declare_and_declared(store: Any) -> None:
    a, b = _channel(store), _channel(store)
    assert a.declare(1, "a") == "a"
    assert b.declare(1, "b") == "a"
    assert a.declared(1) == "a" and b.declared(1) == "a"
    assert a.declared(2) is None


def test_flush_counters(store: Any) -> None:
    rank0, rank1 = _channel(store), _channel(store)
    assert rank0.flushed("inc") == 0  # reading does not count
    assert rank0.flushed("inc") == 0
    assert rank0.mark_flushed("inc") == 1
    assert rank1.mark_flushed("inc") == 2
    assert rank1.flushed("inc") == 2 and rank0.flushed("inc") == 2
    assert rank0.flushed("other") == 0
    assert int(bytes(store.get(flushed_key("inc"))).decode()) == 2


def test_keys_stay_out_of_torchs_way() -> None:
    assert incident_key(3) == "fr_otel/incident/3"
    assert flushed_key("x") == "fr_otel/flushed/x"


def test_tcp_store_address_unwraps_prefix_stores(store: Any) -> None:
    assert tcp_store_address(store) == ("127.0.0.1", store.port)
    wrapped = dist.PrefixStore("default_pg", store)
    assert tcp_store_address(wrapped) == ("127.0.0.1", store.port)
    twice = dist.PrefixStore("outer", dist.PrefixStore("inner", store))
    assert tcp_store_address(twice) == ("127.0.0.1", store.port)
    # the address found is usable: a channel made from it sees the same keys
    _channel(store).declare(1, "through-prefix")
    address = tcp_store_address(twice)
    assert address is not None
    assert SideChannel(*address, connect_timeout_s=10).declared(1) == "through-prefix"


def test_tcp_store_address_of_other_stores_is_none() -> None:
    assert tcp_store_address(dist.HashStore()) is None
    assert tcp_store_address(dist.PrefixStore("p", dist.HashStore())) is None
    assert tcp_store_address(object()) is None


def test_connecting_to_nothing_fails_within_the_timeout() -> None:
    with pytest.raises(Exception, match=r"(?i)timeout|connect|refused"):
        SideChannel("127.0.0.1", 1, connect_timeout_s=0.5)


@pytest.mark.parametrize(
    ("world", "expected"),
    [(1, 0.5), (8, 0.5), (2500, 0.5), (4000, 0.8), (5000, 1.0), (25_000, 5.0), (100_000, 5.0)],
)
def test_poll_interval_grows_with_the_job_within_bounds(world: int, expected: float) -> None:
    assert poll_interval(world) == pytest.approx(expected)


def test_poll_interval_keeps_the_store_below_5000_checks_a_second() -> None:
    for world in (1, 10, 999, 1001, 4000, 24_999, 25_000):
        interval = poll_interval(world)
        assert 0.5 <= interval <= 5.0
        assert world / interval <= 5000 + 1e-9


_SERVER = """
import datetime, sys, time
from torch._C._distributed_c10d import TCPStore
master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                  timeout=datetime.timedelta(seconds=60))
print(master.port, flush=True)
time.sleep(120)
"""


def test_a_store_that_stops_answering_is_given_up_and_asked_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store's process stopped (SIGSTOP): a request would block for good, whatever the
    store's timeout. The flush path's requests give up after ANSWER_S, then at once."""
    answer_s = 2.0
    monkeypatch.setattr(sidechannel, "ANSWER_S", answer_s)
    server = subprocess.Popen([sys.executable, "-c", _SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        channel = SideChannel("127.0.0.1", int(server.stdout.readline()), connect_timeout_s=10)
        assert channel.declare(0, "first") == "first"  # answering
        server.send_signal(signal.SIGSTOP)
        began = time.monotonic()
        with pytest.raises(StoreUnanswered, match="did not answer an incident's declaration"):
            channel.declare(1, "second")
        assert answer_s <= time.monotonic() - began < 3 * answer_s
        began = time.monotonic()
        with pytest.raises(StoreUnanswered):
            channel.flushed("first")
        assert time.monotonic() - began < answer_s / 2  # asked nothing more
    finally:
        server.kill()
        server.wait()
