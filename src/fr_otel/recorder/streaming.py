"""Continuous mode: finished collectives leave as spans, in batches, from a background thread.

The ring is the queue: the thread reads the slots written since its last pass, so the
training thread does nothing for export. The queue is bounded by the ring's size; records
the ring overwrote before they were sent are counted in ``dropped``. What the Collector
does not accept in time goes to the spool (``fr-otel export --resend`` or the next pass
delivers it).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from fr_otel.config import RecorderSettings
from fr_otel.otel.exporter import RequestExporter
from fr_otel.otel.repeats import RepeatedWarnings
from fr_otel.recorder.flush import span_resource
from fr_otel.recorder.ring import RingContents, RingWriter
from fr_otel.recorder.slot import COMPLETED, FAILED, RECORD_OF, SCHEDULED, STATE_OF

logger = logging.getLogger(__name__)

_FINISHED = frozenset({COMPLETED, FAILED})

CONTINUOUS_INCIDENT = ""
"""The ``incident`` of spans sent while no incident is known."""

BACKLOG_SHARE = 4
"""A pass starts before its interval once 1/4 of the ring waits to be sent: the ring is the
queue, and at a high call rate it would overwrite entries before the interval ends (the
OpenTelemetry SDK's batch processor likewise exports early once a batch is full)."""

BACKLOG_POLL_S = 0.1
"""How often, at most, the thread looks at the backlog (one integer read). It looks less
often while records come slowly: each wake-up takes the GIL from the training thread."""

BACKLOG_LOOKS = 4
"""Looks at the backlog while it could fill, at the highest rate seen lately."""

SMALL_BATCH = 64
SMALL_BATCH_INTERVALS = 5
"""Fewer than ``SMALL_BATCH`` records waiting leave at the interval only once
``SMALL_BATCH_INTERVALS`` intervals have passed since the last pass. A pass has a fixed cost
(the table, the encoder's columns, the request: a couple of orders of magnitude more CPU
than each further span adds), so a sparse stream (a barrier or a metrics all_reduce now
and then) would pay that cost every interval for a span or two. The OpenTelemetry SDK's batch
processor likewise waits up to 5 s unless a batch fills. An incident's flush sends what
waits, whatever its size."""


class SpanStream(threading.Thread):
    def __init__(
        self,
        *,
        writer: Callable[[], RingWriter | None],
        settings: RecorderSettings,
        exporter: RequestExporter,
        name: str = "fr_otel-export",
        watch_backlog: bool = True,
        warnings: RepeatedWarnings | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._writer = writer
        self._settings = settings
        self._exporter = exporter
        self._watch_backlog = watch_backlog
        """False for a ring whose writer calls ``wake()`` after it writes."""
        if warnings is None:
            from fr_otel.sinks.otlp import transport_warnings

            warnings = transport_warnings()
        self._warnings = warnings
        """A Collector that stays down fails every pass alike: said once, then summed up
        (share one among the streams of one exporter)."""
        self._halt = threading.Event()
        self._wake = threading.Event()
        self._peak_rate = 0.0
        """Records per second written lately (its highest, decaying per look)."""
        self._lock = threading.Lock()
        self.cursor = 0
        """Every record before it was sent or dropped."""
        self.sent_ahead: set[int] = set()
        """Records at or after the cursor that were already sent."""
        self.sent = 0
        self.spooled = 0
        self.dropped = 0
        self.failures = 0

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()

    def wake(self) -> None:
        """Records were written: a pass now rather than at the interval."""
        self._wake.set()

    def run(self) -> None:
        interval = self._settings.export_interval_s
        last = looked = time.monotonic()
        seen = self._next_record()
        poll = min(interval, BACKLOG_POLL_S) if self._watch_backlog else interval
        while not self._halt.is_set():
            woken = self._wake.wait(poll)
            if self._halt.is_set():
                break
            if woken:
                self._wake.clear()
            now = time.monotonic()
            written = self._next_record()
            if self._watch_backlog:
                poll = self._backlog_poll(written - seen, now - looked, interval)
            seen, looked = written, now
            if woken or self._due(written, now - last, interval) or self._backlog_full(written):
                self.export_once()
                last = time.monotonic()

    def _next_record(self) -> int:
        writer = self._writer()
        return writer.next_record if writer is not None else 0

    def _backlog_poll(self, written: int, elapsed: float, interval: float) -> float:
        """The next look: ``BACKLOG_LOOKS`` while the backlog could fill at the peak rate."""
        writer = self._writer()
        if writer is None or elapsed <= 0:
            return min(interval, BACKLOG_POLL_S)
        self._peak_rate = max(written / elapsed, self._peak_rate * 0.5)
        if not self._peak_rate:
            return interval
        fill_s = max(1, writer.capacity // BACKLOG_SHARE) / self._peak_rate
        return min(interval, max(BACKLOG_POLL_S, fill_s / BACKLOG_LOOKS))

    def _due(self, written: int, since_pass: float, interval: float) -> bool:
        """Is a pass due by time: at the interval, or later for a small batch."""
        if since_pass < interval:
            return False
        if written - self.cursor >= SMALL_BATCH:
            return True
        return since_pass >= SMALL_BATCH_INTERVALS * interval

    def _backlog_full(self, written: int) -> bool:
        writer = self._writer()
        if writer is None:
            return False
        return written - self.cursor >= max(1, writer.capacity // BACKLOG_SHARE)

    def already_sent(self) -> frozenset[int]:
        """Records an incident flush need not send again."""
        with self._lock:
            return frozenset(self.sent_ahead) | frozenset(range(self.cursor))

    def export_once(self, deadline_s: float | None = None) -> None:
        """One pass; ``deadline_s`` bounds the sending (default: five export intervals,
        at least 5 s)."""
        if deadline_s is None:
            deadline_s = max(self._settings.export_interval_s, 1.0) * 5
        with self._lock:
            try:
                self._export(deadline_s)
            except Exception as exc:  # counted; the next pass tries again
                self.failures += 1
                if self.failures == 1:
                    logger.warning("fr_otel continuous export failed: %r", exc)

    def _export(self, deadline_s: float) -> None:
        writer = self._writer()
        if writer is None:
            return
        end = writer.next_record
        oldest = end - writer.capacity
        if self.cursor < oldest:
            lost = oldest - self.cursor - sum(1 for r in self.sent_ahead if r < oldest)
            self.dropped += lost
            self.cursor = oldest
            self.sent_ahead = {r for r in self.sent_ahead if r >= oldest}
        contents = writer.snapshot(self.cursor, end)
        # per slot, only C loops (map, set) in the usual pass: every slot new and finished
        sent_ahead = self.sent_ahead
        candidates = (
            [s for s in contents.slots if s[0] not in sent_ahead] if sent_ahead else contents.slots
        )
        states = set(map(STATE_OF, candidates))
        if states <= _FINISHED:
            done = set(map(RECORD_OF, candidates))
        else:
            done = {s[0] for s in candidates if s[9] in _FINISHED}
        table = None
        if SCHEDULED in states:
            # queued on a GPU stream: torch's FR says which of them have run
            table = self._merged(dataclasses.replace(contents, slots=candidates))
            ran = pc.and_(
                pc.equal(table["state"], pa.scalar("completed", pa.string())),
                pc.invert(
                    pc.is_in(table["record_id"], value_set=pa.array(sorted(done), pa.int64()))
                ),
            )
            done.update(table.filter(ran)["record_id"].to_pylist())
        pending = (
            [s[0] for s in candidates if s[0] not in done] if len(done) < len(candidates) else []
        )
        if done:
            if table is None:
                finished = [s for s in candidates if s[0] in done] if pending else candidates
                table = self._table(dataclasses.replace(contents, slots=finished))
            else:
                table = table.filter(
                    pc.is_in(table["record_id"], value_set=pa.array(sorted(done), pa.int64()))
                )
            self._send(table, deadline_s, span_resource(self._settings, contents))
        self.cursor = min(pending) if pending else end
        # what was sent at or after the cursor (none once nothing is pending: the cursor
        # is then past every record of this pass)
        cursor = self.cursor
        ahead = {r for r in sent_ahead if r >= cursor}
        if pending:
            ahead.update(r for r in done if r >= cursor)
        self.sent_ahead = ahead

    def _table(self, contents: RingContents) -> pa.Table:
        from fr_otel.recorder.table import ring_table

        return ring_table(
            contents,
            job=self._settings.job,
            incident=CONTINUOUS_INCIDENT,
            dump_time_ns=time.time_ns(),
            members_as_dictionary=True,  # for spans only: no member list copied per row
        )

    def _merged(self, contents: RingContents) -> pa.Table:
        from fr_otel.recorder.flush import torch_fr_dump
        from fr_otel.recorder.frmerge import merge_gpu_state

        return merge_gpu_state(self._table(contents), torch_fr_dump())

    def _send(self, table: pa.Table, deadline_s: float, resource: dict[str, str | int]) -> None:
        from fr_otel.sinks.otlp import OtlpSink

        sink = OtlpSink(
            exporter=self._exporter,
            spool_dir=self._settings.spool_dir,
            deadline_s=deadline_s,
            resource=resource,
            resend_spool=True,
            warnings=self._warnings,
        )
        result = sink.export(table)
        self.sent += result.written
        if result.spooled:
            if not self.spooled:  # once: a Collector that is down stays down for a while
                from fr_otel.recorder.flush import spooled_message

                logger.warning(
                    "fr_otel: %s (said once; more may follow while it is down)",
                    spooled_message(result.spooled, self._settings.spool_dir, self._settings),
                )
            self.spooled += result.spooled
