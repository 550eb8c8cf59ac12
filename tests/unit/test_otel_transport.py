"""OTLP delivery over real loopback traffic: both protocols, retries, splitting, deadlines,
the spool, and the exporter settings taken from the environment."""

from __future__ import annotations

import gzip
import logging
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from fr_otel import config
from fr_otel.archive import import_dumps
from fr_otel.errors import ConfigError
from fr_otel.otel import model
from fr_otel.otel.delivery import send_all
from fr_otel.otel.encode import encode_requests
from fr_otel.otel.exporter import AttemptResult, ExporterOptions, ExportOutcome, RequestExporter
from fr_otel.otel.grpc_exporter import GrpcExporter, grpc_target
from fr_otel.otel.http_exporter import GZIP_LEVEL, HttpExporter, parse_retry_after
from fr_otel.otel.payload import Payload, span_count
from fr_otel.otel.rpc_status import status_retry_delay
from fr_otel.otel.split import split_request
from fr_otel.otel.spool import REJECTED_DIR, resend, spool, spooled
from fr_otel.otel.transport import exporter_for
from fr_otel.otel.wire import encode_requests_fast
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.otlp_receiver import OtlpReceiver, rpc_status

PROTOCOLS = {"grpc": config.PROTOCOL_GRPC, "http": config.PROTOCOL_HTTP}
MiB = 1 << 20


def _table(root: Path, world: int, entries: int) -> pa.Table:
    write_fleet(simulate(FleetSpec(world=world, entries=entries, fault="gpu_hang")), root / "d")
    report = import_dumps([root / "d"], archive=root / "a", job="llama", incident="i1")
    return pa.concat_tables(pq.read_table(p) for p in report.files_written)


@pytest.fixture(scope="module")
def small_table(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    return _table(tmp_path_factory.mktemp("small"), world=4, entries=60)


@pytest.fixture(scope="module")
def expected(small_table: pa.Table) -> dict[bytes, tuple[int, Span]]:
    """span id -> (rank, span) as encoded, the reference every delivery is checked against."""
    out: dict[bytes, tuple[int, Span]] = {}
    for request in encode_requests(small_table):
        for rs in request.resource_spans:
            rank = next(a.value.int_value for a in rs.resource.attributes if a.key == model.RANK)
            for scope in rs.scope_spans:
                for span in scope.spans:
                    out[span.span_id] = (rank, span)
    assert len(out) == small_table.num_rows
    return out


@pytest.fixture(params=sorted(PROTOCOLS))
def receiver(request: pytest.FixtureRequest) -> Iterator[OtlpReceiver]:
    with OtlpReceiver(protocol=request.param) as started:
        yield started


def _exporter(receiver: OtlpReceiver, **environ: str) -> GrpcExporter | HttpExporter:
    settings = config.otlp_settings(
        receiver.endpoint, PROTOCOLS[receiver.protocol], environ=environ
    )
    assert settings is not None
    return exporter_for(settings)


def _assert_exactly_once(receiver: OtlpReceiver, expected: dict[bytes, tuple[int, Span]]) -> None:
    arrived = receiver.spans()
    counts = Counter(span.span_id for _, span in arrived)
    assert set(counts) == set(expected)
    assert max(counts.values()) == 1, "a span arrived twice"
    for resource, span in arrived:
        rank, sent = expected[span.span_id]
        assert span == sent  # ids, times, status and every attribute
        assert resource[model.RANK] == rank
        assert resource[model.SERVICE_NAME] == "llama"


# --- delivery --------------------------------------------------------------------------


def test_every_span_arrives_with_ids_attributes_and_headers(
    receiver: OtlpReceiver, small_table: pa.Table, expected: dict[bytes, tuple[int, Span]]
) -> None:
    exporter = _exporter(
        receiver,
        OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer%20s3cret,x-tenant=fr",
        OTEL_EXPORTER_OTLP_COMPRESSION="gzip",  # the default to an endpoint on another host
    )
    try:
        report = send_all(encode_requests(small_table, max_bytes=8_000), exporter, deadline_s=10)
    finally:
        exporter.shutdown()
    assert report.ok, report.reasons
    assert report.sent_spans == len(expected) and report.retries == 0
    assert report.sent_requests == len(receiver.requests) > 3
    _assert_exactly_once(receiver, expected)
    for item in receiver.received:
        assert item.headers["authorization"] == "Bearer s3cret"
        assert item.headers["x-tenant"] == "fr"
        assert item.headers["user-agent"].startswith("fr-otel/")
        if receiver.protocol == "http":
            # gzip: what travelled is much smaller than the request
            assert item.headers["content-encoding"] == "gzip"
            assert item.headers["content-type"] == "application/x-protobuf"
            assert item.wire_bytes < item.decoded_bytes / 3


def test_http_compression_none_sends_plain_protobuf(
    small_table: pa.Table, expected: dict[bytes, tuple[int, Span]]
) -> None:
    with OtlpReceiver(protocol="http") as receiver:
        exporter = _exporter(receiver, OTEL_EXPORTER_OTLP_TRACES_COMPRESSION="none")
        report = send_all(encode_requests(small_table), exporter, deadline_s=10)
        exporter.shutdown()
    assert report.ok
    _assert_exactly_once(receiver, expected)
    assert all("content-encoding" not in r.headers for r in receiver.received)
    assert all(r.wire_bytes == r.decoded_bytes for r in receiver.received)


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_http_sends_wire_encoded_requests_as_they_are_gzipped_at_the_fastest_level(
    small_table: pa.Table, expected: dict[bytes, tuple[int, Span]], compression: str
) -> None:
    """``encode_requests_fast``'s bytes (a ``bytes`` subclass that counts its spans) go out
    without a copy into plain bytes, and ``gzip`` is zlib's level 1 (``GZIP_LEVEL``): the
    export thread's CPU, not the last few bytes, is what training pays for."""
    requests = list(encode_requests_fast(small_table, max_bytes=20_000))
    with OtlpReceiver(protocol="http") as receiver:
        exporter = _exporter(receiver, OTEL_EXPORTER_OTLP_TRACES_COMPRESSION=compression)
        report = send_all(requests, exporter, deadline_s=10)
        exporter.shutdown()
    assert report.ok and report.sent_spans == small_table.num_rows
    _assert_exactly_once(receiver, expected)
    assert [r.decoded_bytes for r in receiver.received] == [len(r) for r in requests]
    if compression == "none":
        assert all(r.wire_bytes == r.decoded_bytes for r in receiver.received)
        return
    assert GZIP_LEVEL == 1
    fastest = [len(gzip.compress(r, compresslevel=1, mtime=0)) for r in requests]
    assert [r.wire_bytes for r in receiver.received] == fastest
    # the level shows in the size: the default level 9 would have sent fewer bytes
    assert sum(len(gzip.compress(r, mtime=0)) for r in requests) < sum(fastest)


def test_down_receiver_coming_back_gets_everything(
    receiver: OtlpReceiver, small_table: pa.Table, expected: dict[bytes, tuple[int, Span]]
) -> None:
    receiver.stop()
    exporter = _exporter(receiver)
    timer = receiver.restart_after(1.0)
    started = time.monotonic()
    try:
        report = send_all(encode_requests(small_table), exporter, deadline_s=15)
    finally:
        timer.cancel()
        exporter.shutdown()
    assert report.ok, report.reasons
    assert report.retries >= 1
    assert any("unavailable" in r.lower() or "refused" in r.lower() for r in report.reasons)
    assert time.monotonic() - started < 8
    _assert_exactly_once(receiver, expected)


def test_retryable_answers_are_retried_after_the_servers_delay(
    receiver: OtlpReceiver, small_table: pa.Table, expected: dict[bytes, tuple[int, Span]]
) -> None:
    # gRPC: RESOURCE_EXHAUSTED *with* RetryInfo is throttling, not "too large"
    receiver.fail(1, kind="throttle", retry_after_s=1.0)
    exporter = _exporter(receiver)
    started = time.monotonic()
    report = send_all(encode_requests(small_table), exporter, deadline_s=10)
    elapsed = time.monotonic() - started
    exporter.shutdown()
    assert report.ok and report.retries == 1 and report.splits == 0
    # backoff alone would have waited at most INITIAL_BACKOFF_S (0.5 s)
    assert 0.95 <= elapsed < 5
    _assert_exactly_once(receiver, expected)


def test_unavailable_is_retried_with_backoff(
    receiver: OtlpReceiver, small_table: pa.Table, expected: dict[bytes, tuple[int, Span]]
) -> None:
    receiver.fail(2, kind="unavailable")
    exporter = _exporter(receiver)
    report = send_all(encode_requests(small_table), exporter, deadline_s=10)
    exporter.shutdown()
    assert report.ok and report.retries == 2
    assert report.attempts == report.sent_requests + 2
    _assert_exactly_once(receiver, expected)


def test_too_large_requests_are_split_until_they_fit(
    receiver: OtlpReceiver, small_table: pa.Table, expected: dict[bytes, tuple[int, Span]]
) -> None:
    receiver.reject_above = 6_000
    exporter = _exporter(receiver)
    report = send_all(encode_requests(small_table), exporter, deadline_s=10)
    exporter.shutdown()
    assert report.ok, report.reasons
    assert report.splits >= 3 and report.retries == 0
    assert all(r.decoded_bytes <= 6_000 for r in receiver.received if r.answer == "ok")
    refused = {"413", "RESOURCE_EXHAUSTED"}
    assert any(r.answer in refused for r in receiver.received)
    _assert_exactly_once(receiver, expected)


def test_serialized_requests_are_sent_as_they_are_and_split_when_needed(
    receiver: OtlpReceiver, small_table: pa.Table, expected: dict[bytes, tuple[int, Span]]
) -> None:
    # what fr_otel.otel.wire produces: bytes, no message objects
    payloads = [r.SerializeToString() for r in encode_requests(small_table, max_bytes=20_000)]
    receiver.reject_above = 15_000
    exporter = _exporter(receiver)
    report = send_all(payloads, exporter, deadline_s=10)
    exporter.shutdown()
    assert report.ok and report.splits >= 1 and report.sent_spans == len(expected)
    _assert_exactly_once(receiver, expected)


def test_grpc_servers_own_message_limit_triggers_splitting(
    small_table: pa.Table, expected: dict[bytes, tuple[int, Span]]
) -> None:
    # grpc itself refuses: "received message after decompression larger than max"
    with OtlpReceiver(protocol="grpc", grpc_max_receive_bytes=16_384) as receiver:
        exporter = _exporter(receiver)
        report = send_all(encode_requests(small_table), exporter, deadline_s=10)
        exporter.shutdown()
    assert report.ok, report.reasons
    assert report.splits >= 1
    assert any("larger than max" in reason for reason in report.reasons)
    assert all(r.decoded_bytes <= 16_384 for r in receiver.received)
    _assert_exactly_once(receiver, expected)


def test_a_refused_request_is_rejected_not_retried(
    receiver: OtlpReceiver, small_table: pa.Table
) -> None:
    receiver.fail(1, kind="invalid")
    exporter = _exporter(receiver)
    requests = list(encode_requests(small_table, max_bytes=20_000))
    report = send_all(requests, exporter, deadline_s=10)
    exporter.shutdown()
    assert report.rejected == [requests[0]] and not report.unsent
    assert report.sent_requests == len(requests) - 1 and report.retries == 0
    assert any("400" in r or "INVALID_ARGUMENT" in r for r in report.reasons)


def test_20000_entries_arrive_as_several_requests_under_4_mib(tmp_path: Path) -> None:
    table = _table(tmp_path, world=8, entries=2500)
    assert table.num_rows == 20_000
    with OtlpReceiver(protocol="grpc", grpc_max_receive_bytes=4 * MiB) as receiver:
        exporter = _exporter(receiver)
        report = send_all(encode_requests(table), exporter, deadline_s=30)
        exporter.shutdown()
    assert report.ok and report.splits == 0
    sizes = [r.decoded_bytes for r in receiver.received]
    assert len(sizes) >= 3 and max(sizes) < 4 * MiB
    span_ids = [span.span_id for _, span in receiver.spans()]
    assert len(span_ids) == len(set(span_ids)) == 20_000


class _RaisesOnce:
    """An exporter with a bug on its first call."""

    def __init__(self, inner: RequestExporter) -> None:
        self.inner, self.calls = inner, 0

    def export(self, request: Payload, deadline: float) -> ExportOutcome:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("bug")
        return self.inner.export(request, deadline)

    def shutdown(self) -> None:
        self.inner.shutdown()


def test_an_exporter_bug_leaves_the_request_unsent_and_goes_on(small_table: pa.Table) -> None:
    requests = list(encode_requests(small_table, max_bytes=20_000))
    with OtlpReceiver(protocol="http") as receiver:
        exporter = _RaisesOnce(_exporter(receiver))
        report = send_all(requests, exporter, deadline_s=10)
        exporter.shutdown()
    assert report.unsent == [requests[0]] and not report.deadline_reached
    assert report.sent_requests == len(requests) - 1
    assert "exporter error: RuntimeError: bug" in report.reasons


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (made with the openssl command)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    root = tmp_path_factory.mktemp("tls")
    certificate, key = root / "cert.pem", root / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(certificate),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    return certificate, key


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_tls_with_the_configured_ca_certificate(
    protocol: str,
    tls_files: tuple[Path, Path],
    small_table: pa.Table,
    expected: dict[bytes, tuple[int, Span]],
) -> None:
    certificate, key = tls_files
    with OtlpReceiver(protocol=protocol, tls=tls_files) as receiver:
        assert receiver.endpoint.startswith("https://")
        exporter = _exporter(
            receiver,
            OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=str(certificate),
            # the receiver does not ask for one, but loading the pair must work
            OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE=str(certificate),
            OTEL_EXPORTER_OTLP_CLIENT_KEY=str(key),
        )
        report = send_all(encode_requests(small_table), exporter, deadline_s=10)
        exporter.shutdown()
        # without the CA the server is not trusted: retryable for gRPC, never accepted
        untrusted = _exporter(receiver)
        refused = send_all(encode_requests(small_table), untrusted, deadline_s=1)
        untrusted.shutdown()
    assert report.ok, report.reasons
    _assert_exactly_once(receiver, expected)
    assert refused.sent_requests == 0 and refused.unsent


# --- deadlines -------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_deadline_against_a_down_receiver_returns_everything_unsent_promptly(
    protocol: str, small_table: pa.Table
) -> None:
    receiver = OtlpReceiver(protocol=protocol).start()
    receiver.stop()  # a port nobody listens on any more
    exporter = _exporter(receiver)
    requests = list(encode_requests(small_table, max_bytes=20_000))
    deadline_s = 1.5
    started = time.monotonic()
    report = send_all(iter(requests), exporter, deadline_s=deadline_s)
    elapsed = time.monotonic() - started
    exporter.shutdown()
    # it ended because of the deadline, not long after it
    assert report.deadline_reached and elapsed < deadline_s * 1.5
    assert report.sent_requests == 0
    assert report.unsent == requests  # the requests themselves, in order, for the spool
    assert report.unsent_spans == small_table.num_rows


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_deadline_cuts_a_receiver_that_does_not_answer(
    protocol: str, small_table: pa.Table
) -> None:
    delay_s, deadline_s = 3.0, 1.0
    with OtlpReceiver(protocol=protocol, delay_s=delay_s) as receiver:
        exporter = _exporter(receiver)
        started = time.monotonic()
        report = send_all(encode_requests(small_table), exporter, deadline_s=deadline_s)
        elapsed = time.monotonic() - started
        exporter.shutdown()
        receiver.delay_s = 0
    # cut at the deadline: nearer to it than to the answer it did not wait for
    assert report.deadline_reached and elapsed < (deadline_s + delay_s) / 2
    assert report.unsent_spans == small_table.num_rows


def test_a_retry_after_beyond_the_deadline_gives_up_at_once(small_table: pa.Table) -> None:
    with OtlpReceiver(protocol="http") as receiver:
        receiver.fail(1, kind="unavailable", retry_after_s=30)
        exporter = _exporter(receiver)
        deadline_s = 5.0
        started = time.monotonic()
        report = send_all(encode_requests(small_table), exporter, deadline_s=deadline_s)
        exporter.shutdown()
    # at once: not after waiting out the deadline
    assert time.monotonic() - started < deadline_s / 2
    assert report.deadline_reached and report.unsent_spans == small_table.num_rows


# --- spool -----------------------------------------------------------------------------


class _StopAfter:
    """Delegates until ``delivered`` requests went through, then answers "unavailable"."""

    def __init__(self, inner: RequestExporter, delivered: int) -> None:
        self.inner, self.left = inner, delivered

    def export(self, request: Payload, deadline: float) -> ExportOutcome:
        if self.left <= 0:
            return ExportOutcome(AttemptResult.FAILURE_RETRYABLE, "gone", retry_after_s=60)
        outcome = self.inner.export(request, deadline)
        if outcome.result is AttemptResult.SUCCESS:
            self.left -= 1
        return outcome

    def shutdown(self) -> None:
        self.inner.shutdown()


def test_spool_and_resend_deliver_everything_exactly_once(
    tmp_path: Path, small_table: pa.Table, expected: dict[bytes, tuple[int, Span]]
) -> None:
    receiver = OtlpReceiver(protocol="grpc").start()
    receiver.stop()
    exporter = _exporter(receiver)
    report = send_all(encode_requests(small_table, max_bytes=20_000), exporter, deadline_s=0.5)
    assert report.sent_requests == 0
    spool_dir = tmp_path / "spool"
    files = spool(report.unsent, spool_dir)
    assert len(files) == len(report.unsent) >= 4
    assert spool(report.unsent, spool_dir) == []  # same requests again: no duplicates
    assert spooled(spool_dir) == sorted(files)
    assert not list(spool_dir.glob(".*.tmp"))

    with receiver.start():
        # first pass: the receiver "goes away" after two requests; only those files go
        partial = resend(spool_dir, _StopAfter(exporter, 2), deadline_s=5)
        assert partial.sent_requests == 2 and partial.deadline_reached
        assert len(spooled(spool_dir)) == len(files) - 2
        assert len(partial.unsent) == len(files) - 2
        # second pass, with a size limit: the rest is split, sent, and the files removed
        receiver.reject_above = 12_000
        final = resend(spool_dir, exporter, deadline_s=10)
    exporter.shutdown()
    assert final.ok and final.splits >= 1, final.reasons
    assert spooled(spool_dir) == []
    _assert_exactly_once(receiver, expected)


def test_resend_moves_refused_requests_aside(tmp_path: Path, small_table: pa.Table) -> None:
    requests = list(encode_requests(small_table, max_bytes=20_000))
    spool(requests, tmp_path)
    (tmp_path / "00000000000000000001-0000001-000000-bad.otlp").write_bytes(b"\xff\xff garbage")
    with OtlpReceiver(protocol="http") as receiver:
        receiver.fail(1, kind="invalid")
        exporter = _exporter(receiver)
        report = resend(tmp_path, exporter, deadline_s=10)
        exporter.shutdown()
    assert report.sent_requests == len(requests) - 1 and len(report.rejected) == 1
    assert spooled(tmp_path) == []
    assert len(list((tmp_path / REJECTED_DIR).iterdir())) == 2  # the refused one + garbage


def test_resend_of_a_missing_spool_is_empty(tmp_path: Path) -> None:
    report = resend(tmp_path / "none", _NeverCalled(), deadline_s=1)
    assert report.ok and report.attempts == 0


class _NeverCalled:
    def export(self, request: Payload, deadline: float) -> ExportOutcome:
        raise AssertionError("no request expected")

    def shutdown(self) -> None:
        pass


# --- pieces ----------------------------------------------------------------------------


def test_split_keeps_every_span_with_its_resource(small_table: pa.Table) -> None:
    (request,) = encode_requests(small_table)
    assert len(request.resource_spans) == 4
    left, right = split_request(request) or pytest.fail("not split")
    assert len(left.resource_spans) == len(right.resource_spans) == 2
    (one_rank, _) = split_request(left) or pytest.fail("not split")
    halves = split_request(one_rank) or pytest.fail("not split")
    assert [len(h.resource_spans) for h in halves] == [1, 1]
    assert sum(span_count(h) for h in halves) == span_count(one_rank)
    for half in halves:
        assert half.resource_spans[0].resource == one_rank.resource_spans[0].resource
        assert half.resource_spans[0].scope_spans[0].scope.name == model.SCOPE_NAME
    single = ExportTraceServiceRequest()
    single.resource_spans.add().scope_spans.add().spans.add(name="x")
    assert split_request(single) is None


def test_retry_delay_is_read_from_a_grpc_status() -> None:
    assert status_retry_delay(rpc_status(14, "busy", 2.5)) == pytest.approx(2.5)
    assert status_retry_delay(rpc_status(14, "busy")) is None
    assert status_retry_delay(b"\xff\xff\xff") is None


def test_retry_after_header_forms() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


@pytest.mark.parametrize(
    ("endpoint", "insecure", "expected"),
    [
        ("http://collector:4317", False, ("collector:4317", False)),
        ("https://collector", True, ("collector:4317", True)),
        ("http://[::1]:5317/ignored/path", False, ("[::1]:5317", False)),
        ("collector:4317", False, ("collector:4317", True)),
        ("collector:4317", True, ("collector:4317", False)),
        ("unix:///run/otel.sock", True, ("unix:///run/otel.sock", False)),
    ],
)
def test_grpc_target(endpoint: str, insecure: bool, expected: tuple[str, bool]) -> None:
    assert grpc_target(endpoint, insecure=insecure) == expected


def test_tls_files_that_cannot_be_read_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="certificate"):
        GrpcExporter(
            "https://collector:4317",
            options=ExporterOptions(certificate=tmp_path / "missing.pem"),
        )
    with pytest.raises(ConfigError, match="TLS"):
        HttpExporter(
            "https://collector:4318/v1/traces",
            options=ExporterOptions(certificate=tmp_path / "missing.pem"),
        )


# --- settings --------------------------------------------------------------------------

G = "OTEL_EXPORTER_OTLP_"
T = "OTEL_EXPORTER_OTLP_TRACES_"


@pytest.mark.parametrize(
    ("args", "environ", "expected"),
    [
        ({}, {}, None),
        ({}, {G + "PROTOCOL": "grpc"}, None),
        # the generic endpoint is a base URL: /v1/traces appended, without double slash
        ({}, {G + "ENDPOINT": "http://c:4318"}, ("http://c:4318/v1/traces", "http/protobuf")),
        ({}, {G + "ENDPOINT": "http://c:4318/"}, ("http://c:4318/v1/traces", "http/protobuf")),
        ({}, {G + "ENDPOINT": "https://c/otlp/"}, ("https://c/otlp/v1/traces", "http/protobuf")),
        # the traces one wins and is used as-is
        (
            {},
            {G + "ENDPOINT": "http://c:4318", T + "ENDPOINT": "http://t:9/custom"},
            ("http://t:9/custom", "http/protobuf"),
        ),
        # gRPC: the endpoint is a target, never given a path
        (
            {},
            {G + "ENDPOINT": "http://c:4317", G + "PROTOCOL": "grpc"},
            ("http://c:4317", "grpc"),
        ),
        (
            {},
            {G + "ENDPOINT": "c:4317", G + "PROTOCOL": "http/protobuf", T + "PROTOCOL": "grpc"},
            ("c:4317", "grpc"),
        ),
        # arguments win; an argument without a path gets /v1/traces for HTTP
        (
            {"endpoint": "http://a:4318", "protocol": "http/protobuf"},
            {T + "ENDPOINT": "http://t:1/x", G + "PROTOCOL": "grpc"},
            ("http://a:4318/v1/traces", "http/protobuf"),
        ),
        (
            {"endpoint": "http://a:4318/v1/traces"},
            {},
            ("http://a:4318/v1/traces", "http/protobuf"),
        ),
        ({"protocol": "grpc"}, {G + "ENDPOINT": "http://c:4317"}, ("http://c:4317", "grpc")),
        # bad environment values warn and fall back
        (
            {},
            {G + "ENDPOINT": "http://c:4318", G + "PROTOCOL": "http/json"},
            ("http://c:4318/v1/traces", "http/protobuf"),
        ),
        (
            {},
            {T + "ENDPOINT": "c:4318", G + "ENDPOINT": "http://c:4318"},
            ("http://c:4318/v1/traces", "http/protobuf"),
        ),
        ({}, {G + "ENDPOINT": "collector:4318"}, None),
    ],
)
def test_endpoint_and_protocol_precedence(
    args: dict[str, Any], environ: dict[str, str], expected: tuple[str, str] | None
) -> None:
    settings = config.otlp_settings(environ=environ, **args)
    got = None if settings is None else (settings.endpoint, settings.protocol)
    assert got == expected


E = {G + "ENDPOINT": "http://c:4318"}


@pytest.mark.parametrize(
    ("environ", "attribute", "expected"),
    [
        ({}, "headers", {}),
        ({G + "HEADERS": "A=1,b=x%2Cy%3D"}, "headers", {"a": "1", "b": "x,y="}),
        ({G + "HEADERS": "a=1", T + "HEADERS": "b=2"}, "headers", {"b": "2"}),
        ({G + "HEADERS": "a=1,oops,=2, c = 3 "}, "headers", {"a": "1", "c": "3"}),
        ({}, "compression", "gzip"),
        ({G + "COMPRESSION": "none"}, "compression", "none"),
        ({G + "COMPRESSION": "none", T + "COMPRESSION": "GZIP"}, "compression", "gzip"),
        ({G + "COMPRESSION": "brotli"}, "compression", "gzip"),
        ({}, "timeout_s", 10.0),
        ({G + "TIMEOUT": "2500"}, "timeout_s", 2.5),
        ({G + "TIMEOUT": "2500", T + "TIMEOUT": "500"}, "timeout_s", 0.5),
        ({G + "TIMEOUT": "-1"}, "timeout_s", 10.0),
        ({G + "TIMEOUT": "ten"}, "timeout_s", 10.0),
        ({}, "insecure", False),
        ({G + "INSECURE": "TRUE"}, "insecure", True),
        ({G + "INSECURE": "true", T + "INSECURE": "false"}, "insecure", False),
        ({G + "INSECURE": "yes"}, "insecure", False),
        ({G + "CERTIFICATE": "/a.pem", T + "CERTIFICATE": "/t.pem"}, "certificate", Path("/t.pem")),
        ({G + "CLIENT_KEY": "/k.pem"}, "client_key", Path("/k.pem")),
        ({T + "CLIENT_CERTIFICATE": "/c.pem"}, "client_certificate", Path("/c.pem")),
    ],
)
def test_exporter_settings_precedence(
    environ: dict[str, str], attribute: str, expected: object
) -> None:
    settings = config.otlp_settings(environ={**E, **environ})
    assert settings is not None
    assert getattr(settings, attribute) == expected


@pytest.mark.parametrize(
    ("endpoint", "local"),
    [
        ("http://localhost:4318/v1/traces", True),
        ("localhost:4317", True),
        ("127.0.0.1:4317", True),
        ("http://127.0.0.2:4318", True),
        ("http://[::1]:4318", True),
        ("unix:///run/otel.sock", True),
        ("http://c:4318", False),
        ("10.0.0.1:4317", False),
        ("https://otel.example.com", False),
        ("dns:///localhost:4317", False),  # a name resolver's target: not read
    ],
)
def test_an_endpoint_on_this_machine_gets_no_compression_by_default(
    endpoint: str, local: bool
) -> None:
    assert config.is_local_endpoint(endpoint) == local
    protocol = "grpc" if "://" not in endpoint or endpoint.startswith(("unix", "dns")) else None
    environ = {G + "ENDPOINT": endpoint, **({G + "PROTOCOL": protocol} if protocol else {})}
    settings = config.otlp_settings(environ=environ)
    assert settings is not None
    assert settings.compression == ("none" if local else "gzip")
    # asked for, it is used whatever the endpoint
    settings = config.otlp_settings(environ={**environ, G + "COMPRESSION": "gzip"})
    assert settings is not None and settings.compression == "gzip"


def test_arguments_win_over_the_environment() -> None:
    settings = config.otlp_settings(
        environ={**E, G + "HEADERS": "a=1", G + "COMPRESSION": "none", G + "TIMEOUT": "100"},
        headers={"X-Key": "v"},
        compression="gzip",
        timeout_s=3,
    )
    assert settings is not None
    assert (settings.headers, settings.compression, settings.timeout_s) == (
        {"x-key": "v"},
        "gzip",
        3,
    )


def test_bad_environment_values_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fr_otel.config"):
        config.otlp_settings(environ={**E, G + "PROTOCOL": "http/json", G + "TIMEOUT": "x"})
    assert "OTEL_EXPORTER_OTLP_PROTOCOL" in caplog.text
    assert "OTEL_EXPORTER_OTLP_TIMEOUT" in caplog.text


@pytest.mark.parametrize(
    "args",
    [
        {"endpoint": "http://c:4318", "protocol": "http/json"},
        {"endpoint": "collector:4318", "protocol": "http/protobuf"},
        {"endpoint": "  "},
        {"endpoint": "http://c:4318", "compression": "zstd"},
        {"endpoint": "http://c:4318", "timeout_s": 0},
    ],
)
def test_bad_arguments_raise(args: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        config.otlp_settings(environ={}, **args)


def test_otlp_variables_are_all_named() -> None:
    assert len(set(config.OTLP_VARIABLES)) == 18
    assert all(v.startswith("OTEL_EXPORTER_OTLP_") for v in config.OTLP_VARIABLES)


def test_an_interrupted_send_hands_back_every_request_not_delivered(
    small_table: pa.Table,
) -> None:
    requests = list(encode_requests(small_table, max_bytes=2_000))
    assert len(requests) >= 4
    delivered: list[ExportTraceServiceRequest] = []

    class Interrupted:
        def export(self, request: Any, deadline: float) -> ExportOutcome:
            if len(delivered) == 2:
                raise KeyboardInterrupt  # Ctrl-C (or SIGTERM) while the third is sent
            delivered.append(request)
            return ExportOutcome(AttemptResult.SUCCESS)

        def shutdown(self) -> None:
            pass

    with pytest.raises(KeyboardInterrupt) as caught:
        send_all(iter(requests), Interrupted(), deadline_s=30)
    report = caught.value.send_report  # type: ignore[attr-defined]
    assert report.sent_requests == 2
    assert report.unsent == requests[2:]  # the one in flight and every one after it
    assert "interrupted" in report.reasons
