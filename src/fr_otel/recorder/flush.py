"""One ring out to everywhere it must go: the Parquet archive, OTLP (or the spool), and
the raw Flight Recorder dump where torch has one. Bounded by a deadline, never raising.

The rank that declared the incident also sends the incident as a signal (its log record
and count, ``otel.incident``) with its flush, before its spans: alerts wait on it, and it
is two small requests where the spans may be many."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from fr_otel.archive.layout import partition_dir
from fr_otel.config import RecorderSettings
from fr_otel.otel.exporter import RequestExporter
from fr_otel.recorder.frmerge import merge_gpu_state
from fr_otel.recorder.ring import RingContents
from fr_otel.recorder.table import past_gaps, ring_table
from fr_otel.sinks.parquet import ParquetSink

logger = logging.getLogger(__name__)

LAUNCHER_INSTANCE = "launcher"
"""``service.instance.id`` ``<job>/launcher``: what ``fr-otel run`` sends itself."""


@dataclass(frozen=True, kw_only=True)
class Declaration:
    """This rank declared the incident (its declaration won): what its flush says of it."""

    trigger: str
    """Why (``model.INCIDENT_TRIGGERS``)."""
    counter: Any
    """The rank's ``otel.incident.IncidentCounter``."""
    record: int | None = None
    """The record of the collective that failed, where one did: the log record is in the
    trace of that collective."""


@dataclass(kw_only=True)
class FlushReport:
    """What one ring's flush did."""

    rank: int
    incident: str
    entries: int = 0
    archived: Path | None = None
    spans_sent: int = 0
    spans_spooled: int = 0
    incident_signal: str | None = None
    """What became of the declaration's log record and count (None: none to send)."""
    raw_dump: Path | None = None
    problems: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.archived is not None and not self.problems


def raw_dump_dir(settings: RecorderSettings, incident: str) -> Path:
    """Raw FR dumps of an incident, named as torch names them (``fr-otel import`` and
    ``torchfrtrace -p comm_lib_trace_rank_`` both read the folder). Outside the Parquet
    tree, under a ``_`` folder that dataset readers skip, like ``_rings`` and ``_spool``.
    A ``run=<run id>`` folder between job and incident gives the import the run id."""
    folder = settings.archive / "_fr_dumps" / f"job={settings.job}"
    if settings.run_id:
        folder = folder / f"run={settings.run_id}"
    return folder / partition_dir(Path(), settings.job, incident).name


def flush_ring(
    contents: RingContents,
    *,
    settings: RecorderSettings,
    incident: str,
    exporter: RequestExporter | None,
    deadline: float,
    already_sent: frozenset[int] = frozenset(),
    raw_dump: bytes | None = None,
    deferred: list[Callable[[float], None]] | None = None,
    declaration: Declaration | None = None,
) -> FlushReport:
    """Archive every record of ``contents`` under ``incident`` and send spans for those
    not in ``already_sent`` (what continuous mode exported while the job ran); with
    ``declaration``, the incident's log record and count first.

    ``deadline`` is a ``time.monotonic()`` value. Problems are reported, not raised. With
    ``deferred``, the sending is appended to it (called with the deadline) instead of
    done (the incident's signal goes first in it): a caller flushing several rings
    archives them all before it sends any, so a Collector that never answers cannot use
    up the time the local evidence needs.
    """
    started = time.monotonic()
    report = FlushReport(rank=contents.rank, incident=incident)
    table: pa.Table | None = None
    try:
        # a large group's members once, not copied into each row: the archive keeps them
        # in its files' footers and the spans as rank runs
        table = ring_table(
            past_gaps(contents),
            job=settings.job,
            incident=incident,
            dump_time_ns=time.time_ns(),
            members_as_dictionary=True,
        )
        table = merge_gpu_state(table, raw_dump)
        report.entries = table.num_rows
        archived = ParquetSink(archive=settings.archive).export(table)
        report.archived = archived.files[0] if archived.files else None
        report.problems.extend(archived.problems)
    except Exception as exc:  # a full disk must not stop the OTLP path
        report.problems.append(f"archive: {exc}")
    if raw_dump is not None:
        try:
            folder = raw_dump_dir(settings, incident)
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"comm_lib_trace_rank_{contents.rank}"
            # whole or absent: a dump cut short by a full disk would read as a bad file
            staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:
                staging.write_bytes(raw_dump)
                os.replace(staging, path)
            finally:
                staging.unlink(missing_ok=True)
            report.raw_dump = path
        except OSError as exc:
            report.problems.append(f"raw dump: {exc}")
    if declaration is not None and settings.otlp is not None:
        event = _declared_event(settings, contents, incident, declaration, table)

        def send_event(until: float) -> None:
            delivered = send_declaration(event, declaration.counter, settings, until)
            if delivered is not None:
                report.incident_signal = delivered.words()
                if delivered.lost:
                    report.problems.append(f"the incident's signal: {delivered.words()}")

        if deferred is not None:
            deferred.insert(0, send_event)
        else:
            send_event(deadline)
    if exporter is not None and table is not None:
        resource = span_resource(settings, contents)
        rows = table

        def send(until: float) -> None:
            _send(rows, already_sent, exporter, until, settings, report, resource)

        if deferred is not None:
            deferred.append(send)
        else:
            send(deadline)
    report.elapsed_s = time.monotonic() - started
    return report


def send_deferred(deferred: list[Callable[[float], None]], deadline: float) -> None:
    """Send what ``flush_ring`` deferred, in order, within ``deadline`` (monotonic)."""
    for send in deferred:
        send(deadline)
    deferred.clear()


def _send(
    table: pa.Table,
    already_sent: frozenset[int],
    exporter: RequestExporter,
    deadline: float,
    settings: RecorderSettings,
    report: FlushReport,
    resource: dict[str, str | int],
) -> None:
    import pyarrow.compute as pc

    from fr_otel.sinks.otlp import OtlpSink

    try:
        if already_sent:
            sent_before = pa.array(sorted(already_sent), type=pa.int64())
            table = table.filter(pc.invert(pc.is_in(table["record_id"], value_set=sent_before)))
        sink = OtlpSink(
            exporter=exporter,
            spool_dir=settings.spool_dir,
            deadline_s=max(deadline - time.monotonic(), 0.05),
            resource=resource,
        )
        sent = sink.export(table)
        report.spans_sent = sent.written
        if sent.rejected and sent.send is not None:
            report.problems.append(
                f"otlp: {sent.rejected} spans refused: {'; '.join(sent.send.reasons[-2:])}"
            )
        if sent.spooled:
            report.spans_spooled = sent.spooled
            logger.warning(
                "fr_otel: %s", spooled_message(sent.spooled, settings.spool_dir, settings)
            )
    except Exception as exc:  # reported, the archive already holds the rows
        report.problems.append(f"otlp: {exc}")


def _declared_event(
    settings: RecorderSettings,
    contents: RingContents,
    incident: str,
    declaration: Declaration,
    table: pa.Table | None,
) -> Any:
    """The declaration as an ``otel.incident.IncidentEvent``: the rank's resource, and the
    trace of the collective that failed (its span's, from the archived row)."""
    from fr_otel.otel import model
    from fr_otel.otel.incident import declared

    return declared(
        job=settings.job,
        incident=incident,
        trigger=declaration.trigger,
        rank=contents.rank,
        resource=model.resource_attributes(
            settings.job, contents.rank, span_resource(settings, contents)
        ),
        run_id=settings.run_id,
        trace_id=_trace_id_of(table, declaration.record),
    )


def _trace_id_of(table: pa.Table | None, record: int | None) -> bytes:
    """The trace id of ``record``'s span (b"": not in ``table``)."""
    if table is None or record is None:
        return b""
    try:
        import pyarrow.compute as pc

        from fr_otel.otel.encode import row_to_span

        rows = table.filter(pc.equal(table["record_id"], record)).to_pylist()
        return row_to_span(rows[0]).trace_id if rows else b""
    except Exception as exc:  # the log record goes without it
        logger.debug("no trace id for record %s: %r", record, exc)
        return b""


def send_declaration(event: Any, counter: Any, settings: RecorderSettings, deadline: float) -> Any:
    """Send a declaration's ``event`` (``otel.incident.IncidentEvent``) and its count on
    ``counter`` by ``deadline`` (monotonic), spooling what the Collector does not take;
    what became of them (``IncidentDelivery``; None: no OTLP endpoint). Never raises."""
    if settings.otlp is None:
        return None
    from fr_otel.otel.incident_delivery import send_incident

    delivered = send_incident(
        event, counter, settings.otlp, deadline=deadline, spool_dir=settings.spool_dir
    )
    if delivered.spooled:
        logger.warning(
            "fr_otel: incident %s: %s in %s; deliver with: %s",
            event.incident,
            delivered.words(),
            settings.spool_dir,
            resend_command(settings.spool_dir, settings),
        )
    return delivered


def launcher_declaration(
    settings: RecorderSettings, incident: str, trigger: str, started_ns: int
) -> Callable[[float], None]:
    """The send of an incident ``fr-otel run`` declared itself (no rank could), for
    ``send_deferred``: its resource is the launcher (``<job>/launcher``)."""
    from fr_otel.otel.incident import IncidentCounter, declared, emitter_resource

    event = declared(
        job=settings.job,
        incident=incident,
        trigger=trigger,
        rank=None,
        resource=emitter_resource(settings.job, LAUNCHER_INSTANCE),
        run_id=settings.run_id,
    )
    counter = IncidentCounter(start_ns=started_ns)

    def send(until: float) -> None:
        delivered = send_declaration(event, counter, settings, until)
        if delivered is not None and delivered.lost:
            logger.warning("fr_otel: incident %s: %s", incident, delivered.words())

    return send


def span_resource(settings: RecorderSettings, contents: RingContents) -> dict[str, str | int]:
    """``OTEL_RESOURCE_ATTRIBUTES`` plus where the rank ran (from its ring: a dead rank's
    host and pid, not the flusher's)."""
    from fr_otel.otel import model

    resource: dict[str, str | int] = dict(settings.resource)
    if contents.host:
        resource[model.HOST_NAME] = contents.host
    if contents.pid:
        resource[model.PROCESS_PID] = contents.pid
    return resource


def torch_fr_dump() -> bytes | None:
    """This process's own Flight Recorder buffer (without stack traces: symbolising takes
    seconds). Torch keeps two, NCCL's and the generic one (gloo), and a CUDA build answers
    for both even where one is empty: the larger dump is the one that holds entries (a job
    with groups of both backends keeps only NCCL's here; the recorder's rings hold both)."""
    try:
        from torch._C import _distributed_c10d as c10d_ext
    except ImportError:
        return None
    found: list[bytes] = []
    for name in ("_dump_nccl_trace", "_dump_fr_trace"):
        function: Any = getattr(c10d_ext, name, None)
        if function is None:
            continue
        try:
            data = function(includeCollectives=True, includeStackTraces=False, onlyActive=False)
        except Exception:  # NCCL's recorder exists but has no process group
            continue
        if data:
            found.append(bytes(data))
    return max(found, key=len) if found else None


def spooled_message(spans: int, spool_dir: Path, settings: RecorderSettings) -> str:
    """Where spans the Collector did not take went, and the command that delivers them."""
    return (
        f"{spans} spans the Collector did not take are kept in {spool_dir}; deliver them"
        f" with: {resend_command(spool_dir, settings)}"
    )


def resend_command(spool_dir: Path, settings: RecorderSettings) -> str:
    """The command that delivers what waits in ``spool_dir``."""
    command = f"fr-otel export {settings.archive} --otlp --resend"
    if spool_dir != settings.archive / "_spool":
        command += f" --spool {spool_dir}"
    return command
