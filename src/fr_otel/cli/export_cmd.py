"""``fr-otel export``: an incident's collectives as OpenTelemetry spans."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fr_otel.cli._errors import EXIT_BAD_INPUT, EXIT_OK

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import pyarrow as pa
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from fr_otel.config import OtlpSettings
    from fr_otel.otel.delivery import SendReport
    from fr_otel.otel.exporter import ExportOutcome, RequestExporter
    from fr_otel.otel.payload import Payload
    from fr_otel.sinks import ExportInput, ExportResult, RecordSink, SpanSink

SLOW_ANSWER_S = 1.0
"""Say so when the Collector has not answered within this long."""
STILL_DOWN_EVERY_S = 10.0
"""While retrying, say so again this often."""
_UNREACHABLE = (
    "refused",
    "unavailable",
    "failed to connect",
    "timed out",
    "timeout",
    "deadline",
    "name or service not known",
    "no route",
    "unreachable",
    "reset",
    "closed",
    "disconnected",
    "ssl",
    "handshake",
)


def _output_file(flag: str, what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A FILE option of a span file format."""
    return click.option(
        flag,
        flag.removeprefix("--").replace("-", "_"),
        type=click.Path(dir_okay=False, path_type=Path),
        help=f"{what} to this file.",
    )


@click.command("export")
@click.argument("archive", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--job", default=None, help="Job to export (default: the only one).")
@click.option(
    "--incident",
    default=None,
    help="Incident to export (default: the only one; with several, they are listed and"
    " the exit code is 2).",
)
@_output_file("--otlp-json", "Write OTLP JSON lines (the Collector's otlpjsonfile format)")
@click.option(
    "--otlp",
    "otlp",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[ENDPOINT]",
    help="Send over OTLP to ENDPOINT, or to $OTEL_EXPORTER_OTLP_ENDPOINT when none is given"
    " (headers, compression, timeout, certificates: the standard OTEL_EXPORTER_OTLP_*"
    " variables). http://host:4318 is OTLP/HTTP; host:4317 (no scheme) is OTLP/gRPC."
    " What cannot be delivered goes to the spool.",
)
@click.option(
    "--protocol",
    type=click.Choice(["grpc", "http/protobuf"], case_sensitive=False),
    default=None,
    help="OTLP protocol (default: $OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,"
    " $OTEL_EXPORTER_OTLP_PROTOCOL, else gRPC for an endpoint without a scheme and"
    " http/protobuf for a URL).",
)
@click.option(
    "--resend",
    is_flag=True,
    help="Deliver the spooled requests of an earlier export (or of the recorder, or of"
    " fr-otel analyze: spans, then incidents' log records and counts) over OTLP, then"
    " delete them.",
)
@click.option(
    "--spool",
    "spool_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where undeliverable requests wait. Default: ARCHIVE/_spool.",
)
@click.option(
    "--deadline",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    help="Seconds the whole OTLP export may take, retries included.",
)
@click.option(
    "--findings",
    is_flag=True,
    help="Also run the analyzer and export each finding as a verdict span in the trace of"
    " its collective; over OTLP, the verdict also goes out as the incident's log record"
    " (fr_otel.incident) and count (fr_otel.incidents).",
)
@click.option(
    "--findings-only",
    "findings_only",
    is_flag=True,
    help="Export the verdict spans alone, not the entries' spans: for an incident whose"
    " spans are already in the backend (sent by the recorder or an earlier export). They"
    " join the same traces, whose ids are derived, not stored. A healthy incident has"
    " none: nothing is sent, exit code 0.",
)
@_output_file("--jaeger-json", "Write Jaeger JSON (loads in Jaeger UI's Upload without a backend)")
def export(
    archive: Path,
    job: str | None,
    incident: str | None,
    otlp_json: Path | None,
    otlp: str | None,
    protocol: str | None,
    resend: bool,
    spool_dir: Path | None,
    deadline: float,
    findings: bool,
    findings_only: bool,
    jaeger_json: Path | None,
) -> int:
    """Export an incident's entries as spans: one trace per collective across ranks.

    With --findings-only, only the analyzer's verdict spans go out: the way to add the
    diagnosis to an incident whose spans the recorder (or an earlier export) already sent,
    without sending every entry again. Over OTLP, a verdict with findings also goes out as
    the incident's log record and count, to the same Collector.

    Exit code 0 when everything was delivered or written, 2 when some requests could
    only be spooled (send them later with --otlp --resend) or were refused, or the
    input is unusable. A rank file that cannot be read is named and left out.
    """
    if otlp_json is None and jaeger_json is None and otlp is None:
        raise click.UsageError(
            "say where to export: --otlp [ENDPOINT], --otlp-json FILE and/or --jaeger-json FILE"
        )
    if resend and otlp is None:
        raise click.UsageError("--resend sends over OTLP: add --otlp [ENDPOINT]")
    if protocol is not None and otlp is None:
        raise click.UsageError("--protocol is for --otlp: add --otlp [ENDPOINT]")
    if resend and (findings or findings_only):
        raise click.UsageError(
            "--resend delivers the spool as it is: export the findings in a separate"
            " fr-otel export --otlp --findings-only"
        )
    spool_dir = spool_dir if spool_dir is not None else archive / "_spool"
    settings, source = _settings(otlp, protocol) if otlp is not None else (None, "")
    started, started_ns = time.monotonic(), time.time_ns()
    if resend:
        from fr_otel.otel.spool import resend as resend_spooled

        assert settings is not None
        exporter = _Narrated(settings, source, deadline, spool_dir)
        exporter.start()
        try:
            report = resend_spooled(spool_dir, exporter, deadline)
        finally:
            exporter.shutdown()
        click.echo(
            f"resent {report.sent_spans} spans from {spool_dir};"
            f" {report.unsent_spans} still waiting" + _why(report)
        )
        others = _resend_other_signals(settings, spool_dir, started + deadline)
        return EXIT_OK if report.ok and others else EXIT_BAD_INPUT
    from fr_otel.sinks import export as export_incident
    from fr_otel.sinks.jaeger import JaegerJsonSink
    from fr_otel.sinks.otlpjson import OtlpJsonSink

    sinks: list[RecordSink] = []
    if otlp_json is not None:
        sinks.append(OtlpJsonSink(path=otlp_json))
    if jaeger_json is not None:
        sinks.append(JaegerJsonSink(path=jaeger_json))
    narrated: _Narrated | None = None
    if settings is not None:
        from fr_otel.sinks.otlp import OtlpSink

        narrated = _Narrated(settings, source, deadline, spool_dir)
        otlp_sink = OtlpSink(
            exporter=narrated, spool_dir=spool_dir, deadline_s=deadline, owns_exporter=True
        )
        sinks.append(_StartFirst(otlp_sink, narrated))
    where = ""
    exported_input: ExportInput | None = None

    def before(what: ExportInput) -> None:
        nonlocal where, exported_input
        exported_input = what
        where = f"job={what.incident.job} incident={what.incident.incident}"
        for problem in what.problems:
            click.echo(f"fr-otel: {problem} (exported without it)", err=True)
        if narrated is not None:
            narrated.total_spans = what.spans

    def file_written(result: ExportResult) -> None:
        # the OTLP sink says its result once its exporter is shut down (the progress
        # bar gone); a file's is said as soon as it is written
        if result.send is None:
            click.echo(f"exported {result.written} spans ({where}) to {result.target}")

    def sent(result: ExportResult) -> None:
        assert result.send is not None
        what = "verdict spans" if findings_only else "spans"
        message = f"sent {result.written} {what} ({where}) over OTLP to {result.target}"
        if result.spooled:
            message += (
                f"; {result.spooled} spans spooled in {spool_dir}{_why(result.send)}:"
                " send them later with --otlp --resend"
            )
        if result.rejected:
            message += f"; {result.rejected} spans refused by the receiver{_why(result.send)}"
        click.echo(message)

    try:
        exported = export_incident(
            archive,
            sinks,
            job=job,
            incident=incident,
            findings=findings or findings_only,
            findings_only=findings_only,
            before_export=before,
            after_each=file_written,
        )
    except KeyboardInterrupt as exc:
        _shutdown(sinks)
        unsent: ExportResult | None = getattr(exc, "export_result", None)
        if unsent is not None and unsent.spooled:
            click.echo(
                f"fr-otel: interrupted after sending {unsent.written} spans;"
                f" {unsent.spooled} spans spooled in {spool_dir}: send them later with"
                " --otlp --resend",
                err=True,
            )
        raise
    _shutdown(sinks)
    if not exported.results:  # findings only, and none
        click.echo(f"no findings ({where}): no verdict span to export")
        return EXIT_OK
    for result in exported.results:
        if result.send is not None:
            sent(result)
    signalled = True
    if settings is not None and exported_input is not None and exported_input.analysis:
        signalled = _signal(
            exported_input, settings, where, started_ns, started + deadline, spool_dir, archive
        )
    return EXIT_OK if exported.ok and signalled else EXIT_BAD_INPUT


def _signal(
    what: ExportInput,
    settings: OtlpSettings,
    where: str,
    started_ns: int,
    deadline: float,
    spool_dir: Path,
    archive: Path,
) -> bool:
    """The verdict's log record and count, after its spans (``--findings``): whether
    they were delivered (a healthy verdict has none to send)."""
    from fr_otel.cli._incident_signal import said, send_verdict

    assert what.analysis is not None
    delivered = send_verdict(
        what.analysis,
        settings,
        run_id=what.run_id,
        started_ns=started_ns,
        deadline=deadline,
        spool_dir=spool_dir,
        verdict_sent=True,
    )
    if delivered is None:
        return True
    resend = f"fr-otel export {archive} --otlp --resend" + (
        "" if spool_dir == archive / "_spool" else f" --spool {spool_dir}"
    )
    click.echo(said(delivered, settings, where, resend))
    return delivered.ok


def _resend_other_signals(settings: OtlpSettings, spool_dir: Path, deadline: float) -> bool:
    """Deliver the spooled log records and metrics (an incident's) after the spans, each to
    its own endpoint, by ``deadline`` (monotonic): whether nothing is left waiting."""
    from fr_otel.otel.signals import Signal
    from fr_otel.otel.spool import resend, spooled
    from fr_otel.otel.transport import exporter_for

    ok = True
    for signal in (Signal.LOGS, Signal.METRICS):
        folder = signal.spool_dir(spool_dir)
        if not spooled(folder):
            continue
        exporter = exporter_for(settings, signal)
        try:
            report = resend(spool_dir, exporter, max(deadline - time.monotonic(), 0.1), signal)
        finally:
            exporter.shutdown()
        sent = report.sent_requests
        click.echo(
            f"resent {sent} {signal.value} request{'' if sent == 1 else 's'} from {folder};"
            f" {len(report.unsent)} still waiting" + _why(report)
        )
        ok = ok and report.ok
    return ok


def _shutdown(sinks: list[RecordSink]) -> None:
    for sink in sinks:
        sink.shutdown()


def _why(report: SendReport) -> str:
    """The last failure that says something (not merely that time ran out)."""
    reasons = [r for r in report.reasons if r not in ("deadline reached", "interrupted")]
    if not reasons:
        return f" ({report.reasons[-1]})" if report.reasons else ""
    last = reasons[-1]
    if report.deadline_reached:
        return f" (deadline reached; last error: {last})"
    return f" ({last})"


def _settings(endpoint: str, protocol: str | None) -> tuple[OtlpSettings, str]:
    """The OTLP settings for ``--otlp [ENDPOINT]`` and ``--protocol``, and where the
    protocol came from."""
    from fr_otel import config
    from fr_otel.errors import ConfigError

    source = "--protocol" if protocol is not None else None
    if protocol is None:
        for variable in (
            config.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
            config.OTEL_EXPORTER_OTLP_PROTOCOL,
        ):
            if os.environ.get(variable, "").strip():
                source = variable
                break
    raw = endpoint or next(
        (
            os.environ[v].strip()
            for v in (config.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, config.OTEL_EXPORTER_OTLP_ENDPOINT)
            if os.environ.get(v, "").strip()
        ),
        "",
    )
    if source is None:
        if raw and "://" not in raw:
            protocol, source = config.PROTOCOL_GRPC, "the endpoint has no scheme"
        else:
            source = "the default"
    try:
        settings = config.otlp_settings(endpoint or None, protocol)
    except ConfigError as exc:
        if raw and "://" not in raw:
            raise ConfigError(
                f"endpoint {raw!r} has no scheme, and OTLP/HTTP ({source}) needs a URL:"
                f" for OTLP/HTTP give http://{raw}; for OTLP/gRPC, --protocol grpc"
            ) from exc
        raise
    if settings is None:
        raise click.UsageError(
            "no OTLP endpoint: pass --otlp ENDPOINT or set OTEL_EXPORTER_OTLP_ENDPOINT"
        )
    return settings, source


def _describe(settings: OtlpSettings) -> str:
    from fr_otel import config
    from fr_otel.otel.grpc_exporter import grpc_target

    if settings.protocol == config.PROTOCOL_GRPC:
        target, tls = grpc_target(settings.endpoint, insecure=settings.insecure)
        text = f"sending over OTLP/gRPC to {target} ({'TLS' if tls else 'plaintext'}"
        if tls and "://" not in settings.endpoint:
            text += (
                f"; for plaintext: http://{settings.endpoint} or OTEL_EXPORTER_OTLP_INSECURE=true"
            )
        return text + ")"
    return f"sending over OTLP/HTTP to {settings.endpoint}"


class _Narrated:
    """The exporter, saying what happens: the Collector unreachable and retried (within
    a second, with the reason), back again, and progress on a terminal."""

    def __init__(
        self, settings: OtlpSettings, source: str, deadline_s: float, spool_dir: Path
    ) -> None:
        self._settings = settings
        self._source = source
        self._deadline_s = deadline_s
        self.target = settings.endpoint
        self._spool_dir = spool_dir
        self.total_spans: int | None = None
        """For the progress bar, when known before ``start``."""
        self._inner: RequestExporter | None = None
        self._deadline = 0.0
        self._down_since: float | None = None
        self._last_said = 0.0
        self._attempts_down = 0
        self._lock = threading.Lock()
        self._bar: Any = None

    def start(self) -> None:
        """Connect, as sending begins: what follows is timed from here."""
        if self._inner is not None:
            return
        from fr_otel.otel.transport import exporter_for

        settings = self._settings
        click.echo(
            f"fr-otel: {_describe(settings)} (protocol {settings.protocol}: {self._source})",
            err=True,
        )
        self._inner = exporter_for(settings)
        self._deadline = time.monotonic() + self._deadline_s
        if self.total_spans and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total_spans, unit="span", desc="exporting", leave=False, file=sys.stderr
            )

    def _say(self, message: str) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.write(message, file=sys.stderr)
            else:
                click.echo(message, err=True)

    def export(self, request: Payload, deadline: float) -> ExportOutcome:
        from fr_otel.otel.exporter import AttemptResult
        from fr_otel.otel.payload import span_count

        timer = threading.Timer(SLOW_ANSWER_S, self._slow)
        timer.daemon = True
        if self._down_since is None:
            timer.start()
        self.start()
        assert self._inner is not None
        try:
            outcome = self._inner.export(request, deadline)
        finally:
            timer.cancel()
        now = time.monotonic()
        if outcome.result is AttemptResult.FAILURE_RETRYABLE:
            self._attempts_down += 1
            left = max(0.0, self._deadline - now)
            if self._down_since is None:
                self._down_since = now
                self._last_said = now
                self._say(
                    f"fr-otel: the Collector at {self.target} {self._state(outcome.detail)}:"
                    f" {outcome.detail}; retrying for up to {left:.0f} s (--deadline),"
                    f" then spooling what is left in {self._spool_dir}"
                )
            elif now - self._last_said >= STILL_DOWN_EVERY_S:
                self._last_said = now
                self._say(
                    f"fr-otel: still no delivery after {self._attempts_down} attempts in"
                    f" {now - self._down_since:.0f} s ({outcome.detail}); {left:.0f} s left"
                )
        elif outcome.result is AttemptResult.SUCCESS:
            if self._down_since is not None:
                self._say(f"fr-otel: the Collector at {self.target} answers again; sending")
                self._down_since = None
                self._attempts_down = 0
            if self._bar is not None:
                self._bar.update(span_count(request))
        return outcome

    @staticmethod
    def _state(detail: str) -> str:
        lowered = detail.lower()
        if any(word in lowered for word in _UNREACHABLE):
            return "is unreachable"
        return "refuses the spans for now"

    def _slow(self) -> None:
        self._say(
            f"fr-otel: no answer yet from the Collector at {self.target} after"
            f" {SLOW_ANSWER_S:.0f} s; still waiting"
        )

    def shutdown(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._inner is not None:
            self._inner.shutdown()


class _StartFirst:
    """The OTLP sink, which connects (and says so) only when its turn comes, after the
    files: a bad certificate is still said before any span is sent."""

    def __init__(self, sink: SpanSink, narrated: _Narrated) -> None:
        self._sink = sink
        self._narrated = narrated

    def export(self, table: pa.Table) -> ExportResult:
        self._narrated.start()
        return self._sink.export(table)

    def export_spans(
        self, table: pa.Table | None, extra: Sequence[ExportTraceServiceRequest]
    ) -> ExportResult:
        self._narrated.start()
        return self._sink.export_spans(table, extra)

    def shutdown(self) -> None:
        self._sink.shutdown()
