"""Continuous mode's export thread against a real OTLP receiver: batches leave on their
interval, and early once a quarter of the ring waits (the ring is the queue)."""

from __future__ import annotations

import time
from pathlib import Path

from fr_otel.config import RecorderSettings, otlp_settings
from fr_otel.otel import model
from fr_otel.otel.transport import exporter_for
from fr_otel.recorder.ring import GroupInfo, RingWriter, Signature
from fr_otel.recorder.slot import COMPLETED, FAILED, STARTED
from fr_otel.recorder.streaming import (
    BACKLOG_LOOKS,
    BACKLOG_POLL_S,
    SMALL_BATCH,
    SMALL_BATCH_INTERVALS,
    SpanStream,
)
from tests.otlp_receiver import OtlpReceiver

CAPACITY = 400


def _ring(tmp_path: Path) -> tuple[RingWriter, int, int, int]:
    writer = RingWriter(
        tmp_path / "rank-0", capacity=CAPACITY, rank=0, world=2, job="j", backend="gloo"
    )
    group = writer.intern_group(
        ("0", (0, 1)),
        GroupInfo(name="0", desc="default_pg", ranks=(0, 1), backend="gloo", timeout_ms=60_000),
    )
    signature = writer.intern_signature(
        "all_reduce",
        Signature(
            op="all_reduce",
            input_sizes=[[4]],
            output_sizes=[[4]],
            input_dtypes=["Float"],
            output_dtypes=["Float"],
            is_p2p=False,
            backend="gloo",
        ),
    )
    site = writer.intern_site("site", [("step", "/job/train.py", 9)])
    return writer, group, signature, site


def _issue(writer: RingWriter, ids: tuple[int, int, int], first_seq: int, count: int) -> None:
    group, signature, site = ids
    for seq in range(first_seq, first_seq + count):
        record = writer.begin(group, seq, 0, signature, site, -1, STARTED)
        writer.finish(record, COMPLETED)


def _stream(
    tmp_path: Path,
    receiver: OtlpReceiver,
    writer: RingWriter,
    *,
    watch_backlog: bool = True,
    interval_s: float = 3600.0,
) -> SpanStream:
    """A stream to ``receiver`` whose interval (by default) never comes within a test."""
    settings = RecorderSettings(
        mode="continuous",
        job="j",
        export_interval_s=interval_s,
        archive=tmp_path / "archive",
        otlp=otlp_settings(receiver.endpoint, "http/protobuf"),
    )
    assert settings.otlp is not None
    return SpanStream(
        writer=lambda: writer,
        settings=settings,
        exporter=exporter_for(settings.otlp),
        watch_backlog=watch_backlog,
    )


def test_a_backlog_of_a_quarter_ring_leaves_before_the_interval(tmp_path: Path) -> None:
    writer, *ids = _ring(tmp_path)
    with OtlpReceiver(protocol="http") as receiver:
        stream = _stream(tmp_path, receiver, writer)
        stream.start()
        try:
            _issue(writer, (ids[0], ids[1], ids[2]), 1, CAPACITY // 4 - 1)
            time.sleep(1.0)
            assert receiver.spans() == [], "below a quarter of the ring: waits for the interval"
            _issue(writer, (ids[0], ids[1], ids[2]), CAPACITY // 4, 1)
            spans = receiver.wait_for_spans(CAPACITY // 4, timeout_s=10)
            assert len(spans) == CAPACITY // 4
            # the receiver holds the spans before its reply reaches the stream, which
            # counts them only then
            deadline = time.monotonic() + 10
            while stream.sent < CAPACITY // 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert stream.sent == CAPACITY // 4 and stream.dropped == 0
        finally:
            stream.stop()
            stream.join(timeout=5)
    writer.close()


def test_a_small_batch_waits_several_intervals_a_full_one_leaves_at_the_interval(
    tmp_path: Path,
) -> None:
    """A pass costs about as much for one span as for two hundred: a few spans wait
    ``SMALL_BATCH_INTERVALS`` intervals; ``SMALL_BATCH`` of them leave at the interval.
    The two waits are told apart by one bound between them, in intervals
    (``SMALL_BATCH_INTERVALS - 1.5``), so the margin grows with the interval: a second
    leaves the full batch 2.5 s for a loaded machine's delays."""
    interval = 1.0
    writer, *ids = _ring(tmp_path)
    with OtlpReceiver(protocol="http") as receiver:
        stream = _stream(tmp_path, receiver, writer, interval_s=interval)
        stream.start()
        try:
            time.sleep(interval * 1.5)  # the first pass (of nothing) is behind
            issued = time.monotonic()
            _issue(writer, (ids[0], ids[1], ids[2]), 1, 3)
            time.sleep(interval * 3)
            assert receiver.spans() == [], "three spans left at the interval"
            receiver.wait_for_spans(3, timeout_s=10)
            waited = time.monotonic() - issued
            assert waited >= interval * (SMALL_BATCH_INTERVALS - 1.5), waited
            stream.export_once()  # whatever the receiver has not counted yet
            sent = stream.sent
            time.sleep(interval * 0.5)
            _issue(writer, (ids[0], ids[1], ids[2]), 4, SMALL_BATCH)
            issued = time.monotonic()
            receiver.wait_for_spans(3 + SMALL_BATCH, timeout_s=10)
            waited = time.monotonic() - issued
            assert waited < interval * (SMALL_BATCH_INTERVALS - 1.5), waited
            assert len(receiver.spans()) == sent + SMALL_BATCH
        finally:
            stream.stop()
            stream.join(timeout=5)
    writer.close()


def _record_ids(receiver: OtlpReceiver) -> list[int]:
    return [
        next(a.value.int_value for a in span.attributes if a.key == model.RECORD_ID)
        for _, span in receiver.spans()
    ]


def test_each_record_leaves_once_in_flight_ones_when_they_finish(tmp_path: Path) -> None:
    """A pass sends what finished (failed included) and keeps its place at the oldest op
    still running; the next passes send that op once it finishes, and nothing twice."""
    writer, group, signature, site = _ring(tmp_path)
    with OtlpReceiver(protocol="http") as receiver:
        stream = _stream(tmp_path, receiver, writer)
        _issue(writer, (group, signature, site), 1, 5)  # records 0-4
        running = writer.begin(group, 6, 0, signature, site, -1, STARTED)  # record 5
        failed = writer.begin(group, 7, 0, signature, site, -1, STARTED)  # record 6
        writer.finish(failed, FAILED)
        _issue(writer, (group, signature, site), 8, 2)  # records 7, 8
        stream.export_once()
        assert sorted(_record_ids(receiver)) == [0, 1, 2, 3, 4, 6, 7, 8]
        assert (stream.cursor, stream.sent_ahead) == (running, {6, 7, 8})
        assert stream.already_sent() == {0, 1, 2, 3, 4, 6, 7, 8}

        stream.export_once()  # nothing new
        writer.finish(running, COMPLETED)
        _issue(writer, (group, signature, site), 10, 1)  # record 9
        stream.export_once()
        stream.export_once()
        assert sorted(_record_ids(receiver)) == list(range(10))
        assert (stream.cursor, stream.sent_ahead) == (10, set())
        assert stream.sent == 10 and stream.dropped == 0 and stream.failures == 0

        # the ring overwrote records before a pass came: counted, the rest still sent
        _issue(writer, (group, signature, site), 11, CAPACITY + 3)
        stream.export_once()
        assert stream.dropped == 3 and stream.sent == 10 + CAPACITY
        assert sorted(_record_ids(receiver)) == [*range(10), *range(13, 10 + CAPACITY + 3)]
    writer.close()


def test_a_ring_whose_writer_wakes_the_stream_leaves_without_polling(tmp_path: Path) -> None:
    writer, *ids = _ring(tmp_path)
    with OtlpReceiver(protocol="http") as receiver:
        stream = _stream(tmp_path, receiver, writer, watch_backlog=False)
        stream.start()
        try:
            _issue(writer, (ids[0], ids[1], ids[2]), 1, CAPACITY // 2)
            time.sleep(1.0)
            assert receiver.spans() == [], "no backlog polling: waits for the interval or a wake"
            stream.wake()
            assert len(receiver.wait_for_spans(CAPACITY // 2, timeout_s=10)) == CAPACITY // 2
        finally:
            stream.stop()
            stream.join(timeout=5)
            assert not stream.is_alive(), "stop() wakes the thread"
    writer.close()


def test_the_backlog_is_looked_at_as_often_as_the_record_rate_needs(tmp_path: Path) -> None:
    writer, *_ = _ring(tmp_path)
    settings = RecorderSettings(mode="continuous", job="j", archive=tmp_path / "a", otlp=None)
    stream = SpanStream(writer=lambda: writer, settings=settings, exporter=None)  # type: ignore[arg-type]
    # nothing written (DDP, whose collectives the hooks never see): once per interval
    assert stream._backlog_poll(0, 0.1, 1.0) == 1.0
    # a quarter ring (100 records) in 0.1 s: as often as allowed
    assert stream._backlog_poll(1000, 1.0, 1.0) == BACKLOG_POLL_S
    # 40 records a second: the backlog fills in 2.5 s, looked at 4 times
    quiet = SpanStream(writer=lambda: writer, settings=settings, exporter=None)  # type: ignore[arg-type]
    assert abs(quiet._backlog_poll(40, 1.0, 10.0) - 2.5 / BACKLOG_LOOKS) < 1e-9
    # the peak is forgotten by halves: a burst is not planned for forever
    assert stream._backlog_poll(0, 1.0, 1.0) == BACKLOG_POLL_S  # 500/s remembered
    for _ in range(6):
        stream._backlog_poll(0, 1.0, 1.0)
    assert stream._backlog_poll(0, 1.0, 1.0) == 1.0
    writer.close()
