"""A directory of requests that could not be delivered yet, and their later delivery.

When the Collector cannot be reached before the deadline (a training job about to be
killed by its watchdog cannot wait), ``send_all`` hands back the unsent requests;
``spool`` writes each to its own file and ``resend`` delivers them later.

Layout: ``<spool_dir>/<creation ns>-<pid>-<seq>-<content hash>.otlp``, each file one
binary-protobuf ``ExportTraceServiceRequest`` (the OTLP/HTTP body, so ``curl
--data-binary @file -H 'Content-Type: application/x-protobuf'`` replays it by hand). Log
records and metrics (an incident's, ``otel.incident``) wait the same way in a folder of
their signal's, ``<spool_dir>/logs/`` and ``<spool_dir>/metrics/``
(``signals.Signal.spool_dir``): ``resend`` of that signal delivers them to its endpoint.

- Files are written atomically (temporary dot-file, fsync, ``os.replace``): a reader
  never sees half a request, and a crash leaves at most a stray ``.*.tmp`` file.
- Names sort by creation, so ``resend`` delivers oldest first.
- The content hash makes spooling the same request twice a no-op while the first copy
  is still waiting.
- ``resend`` deletes a file right after its request was accepted. Delivery is
  at-least-once: if the process dies between the receiver's answer and the unlink, the
  request is sent again next time. Span and trace ids are derived from the data
  (``fr_otel.otel.model``), so the duplicate carries identical ids and a receiver or a
  query can drop it.
- A request the receiver refuses for good (bad data, a lone span too large) is moved to
  ``<spool_dir>/rejected/`` rather than retried forever or silently deleted.
- One ``resend`` at a time per directory (an advisory lock): two concurrent senders would
  deliver the same files twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from google.protobuf.message import DecodeError

from fr_otel.errors import ConfigError
from fr_otel.otel.delivery import SendReport, send_all
from fr_otel.otel.exporter import RequestExporter
from fr_otel.otel.payload import Payload
from fr_otel.otel.signals import Signal, signal_of, signal_request

try:  # advisory locking is POSIX; elsewhere a second resend is simply not prevented
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

SUFFIX = ".otlp"
REJECTED_DIR = "rejected"
_LOCK_NAME = ".resend.lock"
_sequence = itertools.count()


def _digest(payload: bytes) -> str:
    return hashlib.blake2b(payload, digest_size=12).hexdigest()


def _serialize(request: Payload) -> bytes:
    if isinstance(request, bytes):
        return request
    # deterministic: the same request always gives the same bytes, hence the same hash
    payload: bytes = request.SerializeToString(deterministic=True)
    return payload


def spooled(spool_dir: Path) -> list[Path]:
    """The waiting request files of ``spool_dir``, oldest first."""
    if not spool_dir.is_dir():
        return []
    return sorted(p for p in spool_dir.iterdir() if p.suffix == SUFFIX and p.is_file())


def _fsync_dir(directory: Path) -> None:
    # makes the rename itself durable; not possible on every platform/filesystem
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_atomic(directory: Path, name: str, payload: bytes) -> Path:
    final = directory / name
    temporary = directory / f".{name}.{os.getpid()}.tmp"
    try:
        with temporary.open("wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, final)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return final


def _spool_one(directory: Path, payload: bytes, created_ns: int, waiting: set[str]) -> Path | None:
    digest = _digest(payload)
    if digest in waiting:
        logger.debug("request %s is already spooled", digest)
        return None
    name = f"{created_ns:020d}-{os.getpid():07d}-{next(_sequence) % 1_000_000:06d}-{digest}"
    path = _write_atomic(directory, name + SUFFIX, payload)
    waiting.add(digest)
    return path


def _waiting_digests(spool_dir: Path) -> set[str]:
    return {p.stem.rpartition("-")[2] for p in spooled(spool_dir)}


def spool(requests: Iterable[Payload], spool_dir: Path) -> list[Path]:
    """Write each request to its own file in ``spool_dir`` (a log or metrics request in its
    signal's folder there); return the files written.

    A request identical to one already waiting is skipped. Raises ``OSError`` when the
    directory cannot be written (the caller decides whether that is fatal).
    """
    spool_dir.mkdir(parents=True, exist_ok=True)
    waiting: dict[Path, set[str]] = {}
    written = []
    for request in requests:
        folder = signal_of(request).spool_dir(spool_dir)
        if folder not in waiting:
            folder.mkdir(exist_ok=True)
            waiting[folder] = _waiting_digests(folder)
        path = _spool_one(folder, _serialize(request), time.time_ns(), waiting[folder])
        if path is not None:
            written.append(path)
    for folder in {path.parent for path in written}:
        _fsync_dir(folder)
    if written:
        logger.info("spooled %d requests to %s", len(written), spool_dir)
    return written


@contextlib.contextmanager
def _exclusive(spool_dir: Path) -> Iterator[bool]:
    """Holds the directory's resend lock; yields False when another process has it."""
    if fcntl is None:  # pragma: no cover - Windows
        yield True
        return
    with (spool_dir / _LOCK_NAME).open("a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _reject(path: Path, spool_dir: Path) -> None:
    target = spool_dir / REJECTED_DIR
    target.mkdir(exist_ok=True)
    os.replace(path, target / path.name)
    logger.warning("moved %s to %s: the receiver refused it", path.name, target)


def _load(path: Path, signal: Signal = Signal.TRACES) -> bytes | None:
    """The file's request as bytes (sent as they are) of ``signal``, ``None`` when it is
    not one."""
    payload = path.read_bytes()
    try:
        signal.parse(payload)
    except DecodeError:
        return None
    return signal_request(signal, payload)


def resend(
    spool_dir: Path,
    exporter: RequestExporter,
    deadline_s: float,
    signal: Signal = Signal.TRACES,
) -> SendReport:
    """Deliver the spooled requests of ``signal``, oldest first, within ``deadline_s``
    seconds, through ``exporter`` (one for that signal: ``transport.exporter_for``).

    Each file is deleted right after its request was accepted. When the receiver splits
    a request (too large), the halves still undelivered are spooled again under the
    original's creation time and the original is deleted, so nothing goes twice. The
    report's ``unsent`` lists what is still waiting in the spool (those files stay);
    ``rejected`` what was moved to ``rejected/``. Never raises for network problems.
    """
    if not deadline_s > 0:
        raise ConfigError(f"deadline must be positive, got {deadline_s}")
    started = time.monotonic()
    deadline = started + deadline_s
    total = SendReport()
    spool_dir = signal.spool_dir(spool_dir)
    if not spool_dir.is_dir():
        return total
    with _exclusive(spool_dir) as owned:
        if not owned:
            total.note(f"another process is resending {spool_dir}")
            total.unsent.extend(
                r for p in spooled(spool_dir) if (r := _load(p, signal)) is not None
            )
            return total
        waiting = _waiting_digests(spool_dir)
        files = spooled(spool_dir)
        for index, path in enumerate(files):
            request = _load(path, signal)
            if request is None:
                total.note(f"{path.name}: not a readable OTLP request")
                _reject(path, spool_dir)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                total.deadline_reached = True
                total.note("deadline reached")
                total.unsent.append(request)
                total.unsent.extend(
                    r for p in files[index + 1 :] if (r := _load(p, signal)) is not None
                )
                break
            report = send_all([request], exporter, deadline_s=remaining)
            _settle(path, spool_dir, request, report, waiting)
            total.merge(report)
            if report.deadline_reached:
                total.unsent.extend(
                    r for p in files[index + 1 :] if (r := _load(p, signal)) is not None
                )
                break
    total.elapsed_s = time.monotonic() - started
    return total


def _settle(
    path: Path,
    spool_dir: Path,
    request: Payload,
    report: SendReport,
    waiting: set[str],
) -> None:
    """Make the spool match what ``report`` says happened to the file's request."""
    if report.ok:
        path.unlink()
        return
    if not report.sent_requests and not report.splits:
        if report.rejected:
            _reject(path, spool_dir)
        return  # untouched: it stays for the next resend
    # Split, and part of it went through: keep exactly the parts that did not.
    prefix = path.name.split("-", 1)[0]
    created_ns = int(prefix) if prefix.isdigit() else time.time_ns()  # a hand-placed file
    waiting.discard(path.stem.rpartition("-")[2])
    for part in report.unsent:
        _spool_one(spool_dir, _serialize(part), created_ns, waiting)
    for part in report.rejected:
        rejected = _spool_one(spool_dir, _serialize(part), created_ns, waiting)
        if rejected is not None:
            _reject(rejected, spool_dir)
    _fsync_dir(spool_dir)
    path.unlink()
