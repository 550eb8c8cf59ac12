"""Every environment variable fr_otel reads, in one place.

It is long because it is the one owner of every variable fr_otel reads or sets: by the
project's rule each one's name, meaning, default, parsing and precedence live here, not in
the modules that use them.

Precedence everywhere: an explicit argument, then the specific variable, then the
generic one, then the default. A bad value in the environment logs a warning and falls
back to the default (a typo in a launcher script must not kill a training job); a bad
explicit argument raises ``ConfigError`` naming it.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from fr_otel.errors import ConfigError

logger = logging.getLogger(__name__)

FR_OTEL_ARCHIVE = "FR_OTEL_ARCHIVE"
"""Directory of the local Parquet archive. Default: ``./fr-otel-archive``."""

FR_OTEL_JOB = "FR_OTEL_JOB"
"""Job name used to partition the archive. Falls back to ``OTEL_SERVICE_NAME``, then ``default``."""

OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"
"""Standard OpenTelemetry service name: the job name when FR_OTEL_JOB is unset."""

OTEL_RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"
"""Standard OpenTelemetry resource attributes (``key=value,key2=value2``, values URL-encoded)
added to every rank's spans; fr_otel's own (``service.name``, ``fr_otel.rank`` ...) win."""

FR_OTEL_IMPORT_WORKERS = "FR_OTEL_IMPORT_WORKERS"
"""Processes used to import dumps, and to make the fleet facts (an analysis an incident).
Default: every core (``os.cpu_count()``)."""

FR_OTEL_TRACE_URL = "FR_OTEL_TRACE_URL"
"""Link template for the HTML report's cells, e.g. Jaeger's
``http://jaeger:16686/trace/{trace_id}?uiFind={span_id}``. Unset: no trace links."""

FR_OTEL_ANALYSIS_MEMORY = "FR_OTEL_ANALYSIS_MEMORY"
"""Memory the analysis (DuckDB) may hold before it spills to a temporary folder, as
``3GB``, ``500MB`` or ``2GiB``. Default: ``3GB``."""

DEFAULT_ARCHIVE = Path("fr-otel-archive")
DEFAULT_JOB = "default"
DEFAULT_ANALYSIS_MEMORY = "3GB"
"""An incident is often analysed on a login node, next to other people's work. At
thousands of ranks an unbounded analysis holds about twice this, and the limit costs it
only a little time in spilling; an incident of up to about a thousand ranks stays under
the limit, and nothing changes."""

ALL_VARIABLES: tuple[str, ...] = (
    FR_OTEL_ARCHIVE,
    FR_OTEL_JOB,
    OTEL_SERVICE_NAME,
    OTEL_RESOURCE_ATTRIBUTES,
    FR_OTEL_IMPORT_WORKERS,
    FR_OTEL_TRACE_URL,
    FR_OTEL_ANALYSIS_MEMORY,
)
"""Documented in the README's configuration table; a test keeps the two in step."""

_MEMORY_SIZE = re.compile(r"^\d+(\.\d+)?\s*([KMGT]i?B|[KMGT]|B)$", re.IGNORECASE)

_PARTITION_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def validate_partition_value(what: str, value: str) -> str:
    """Job and incident names become folder names (``job=<name>``): keep them path-safe."""
    if not _PARTITION_VALUE.match(value):
        raise ConfigError(
            f"{what} {value!r} is not usable as an archive folder name: use letters, digits,"
            " '.', '_' or '-' (at most 128, starting with a letter or digit)"
        )
    return value


def job_name(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The job name: argument > FR_OTEL_JOB > OTEL_SERVICE_NAME > ``default``."""
    if explicit is not None:
        return validate_partition_value("job", explicit)
    env = _env(environ)
    for variable in (FR_OTEL_JOB, OTEL_SERVICE_NAME):
        value = env.get(variable, "").strip()
        if value:
            try:
                return validate_partition_value("job", value)
            except ConfigError as exc:
                logger.warning("ignoring %s: %s", variable, exc)
    return DEFAULT_JOB


def archive_dir(
    explicit: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> Path:
    """The archive directory: argument > FR_OTEL_ARCHIVE > ``./fr-otel-archive``."""
    if explicit is not None:
        return Path(explicit)
    value = _env(environ).get(FR_OTEL_ARCHIVE, "").strip()
    return Path(value) if value else DEFAULT_ARCHIVE


def trace_url(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The report's trace link template: argument > FR_OTEL_TRACE_URL > none. It must hold
    ``{trace_id}``; ``{span_id}`` is optional (Jaeger's ``uiFind`` selects the span)."""
    value = explicit if explicit is not None else _env(environ).get(FR_OTEL_TRACE_URL, "")
    value = value.strip()
    if not value:
        return None
    if "{trace_id}" not in value:
        raise ConfigError(
            f"trace URL template {value!r} has no {{trace_id}}"
            f" (set with --trace-url or {FR_OTEL_TRACE_URL})"
        )
    unknown = set(re.findall(r"\{([^{}]*)\}", value)) - {"trace_id", "span_id"}
    if unknown:
        raise ConfigError(
            f"trace URL template {value!r}: unknown placeholder {{{sorted(unknown)[0]}}};"
            " only {trace_id} and {span_id} are filled in"
        )
    return value


def import_workers(explicit: int | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Worker processes for imports and the fleet facts: argument > FR_OTEL_IMPORT_WORKERS >
    cpu count."""
    if explicit is not None:
        if explicit < 1:
            raise ConfigError(f"workers must be at least 1, got {explicit}")
        return explicit
    value = _env(environ).get(FR_OTEL_IMPORT_WORKERS, "").strip()
    if value:
        try:
            workers = int(value)
            if workers >= 1:
                return workers
        except ValueError:
            pass
        logger.warning("ignoring %s=%r: expected a positive integer", FR_OTEL_IMPORT_WORKERS, value)
    return os.cpu_count() or 1


def analysis_memory(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """DuckDB's memory limit for analyses: argument > FR_OTEL_ANALYSIS_MEMORY > ``3GB``."""
    if explicit is not None:
        if not _MEMORY_SIZE.match(explicit.strip()):
            raise ConfigError(f"memory limit {explicit!r} is not a size such as 3GB, 500MB or 2GiB")
        return explicit.strip()
    value = _env(environ).get(FR_OTEL_ANALYSIS_MEMORY, "").strip()
    if value:
        if _MEMORY_SIZE.match(value):
            return value
        logger.warning(
            "ignoring %s=%r: expected a size such as 3GB, 500MB or 2GiB",
            FR_OTEL_ANALYSIS_MEMORY,
            value,
        )
    return DEFAULT_ANALYSIS_MEMORY


# --- OTLP export (the OpenTelemetry SDK's exporter variables) --------------------------
#
# fr_otel honours the standard exporter variables so a job already configured for an
# OpenTelemetry SDK needs nothing new. Each trace-specific variable wins over its generic
# twin (the SDK specification's rule), and an explicit argument wins over both.

OTEL_EXPORTER_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
"""Collector base URL for every signal. For ``http/protobuf`` fr_otel appends ``/v1/traces``
to its path. No default: without an endpoint nothing is sent."""

OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
"""Collector URL for traces; wins over OTEL_EXPORTER_OTLP_ENDPOINT and is used as-is."""

OTEL_EXPORTER_OTLP_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
"""``grpc`` or ``http/protobuf`` (``http/json`` is not supported). Default: ``http/protobuf``."""

OTEL_EXPORTER_OTLP_TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
"""Protocol for traces; wins over OTEL_EXPORTER_OTLP_PROTOCOL."""

OTEL_EXPORTER_OTLP_HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"
"""Request headers (gRPC metadata) as ``key=value,key2=value2``, values URL-encoded."""

OTEL_EXPORTER_OTLP_TRACES_HEADERS = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
"""Headers for traces; when set it replaces OTEL_EXPORTER_OTLP_HEADERS (no merging)."""

OTEL_EXPORTER_OTLP_COMPRESSION = "OTEL_EXPORTER_OTLP_COMPRESSION"
"""``gzip`` or ``none``. Default in fr_otel: ``gzip``, over HTTP at zlib's fastest level 1
(``http_exporter.GZIP_LEVEL``): spans compress to about a tenth; ``none`` to an endpoint on this
machine (``LOCAL_DEFAULT_COMPRESSION``)."""

OTEL_EXPORTER_OTLP_TRACES_COMPRESSION = "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"
"""Compression for traces; wins over OTEL_EXPORTER_OTLP_COMPRESSION."""

OTEL_EXPORTER_OTLP_TIMEOUT = "OTEL_EXPORTER_OTLP_TIMEOUT"
"""Longest wait for one export request, in milliseconds. Default: 10000."""

OTEL_EXPORTER_OTLP_TRACES_TIMEOUT = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
"""Timeout for trace export requests (milliseconds); wins over OTEL_EXPORTER_OTLP_TIMEOUT."""

OTEL_EXPORTER_OTLP_CERTIFICATE = "OTEL_EXPORTER_OTLP_CERTIFICATE"
"""PEM file of the CA certificates that verify the Collector's TLS certificate."""

OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE = "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"
"""CA certificate file for traces; wins over OTEL_EXPORTER_OTLP_CERTIFICATE."""

OTEL_EXPORTER_OTLP_CLIENT_KEY = "OTEL_EXPORTER_OTLP_CLIENT_KEY"
"""PEM file of the client's private key, for mutual TLS."""

OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY = "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY"
"""Client private key for traces; wins over OTEL_EXPORTER_OTLP_CLIENT_KEY."""

OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
"""PEM file of the client's certificate chain, for mutual TLS."""

OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE = "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE"
"""Client certificate for traces; wins over OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE."""

OTEL_EXPORTER_OTLP_INSECURE = "OTEL_EXPORTER_OTLP_INSECURE"
"""``true`` for plaintext gRPC to an endpoint given without a scheme (``host:4317``).
An ``http://`` or ``https://`` scheme always wins. Default: ``false``."""

OTEL_EXPORTER_OTLP_TRACES_INSECURE = "OTEL_EXPORTER_OTLP_TRACES_INSECURE"
"""Insecure flag for traces; wins over OTEL_EXPORTER_OTLP_INSECURE."""

OTLP_VARIABLES: tuple[str, ...] = (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    OTEL_EXPORTER_OTLP_HEADERS,
    OTEL_EXPORTER_OTLP_TRACES_HEADERS,
    OTEL_EXPORTER_OTLP_COMPRESSION,
    OTEL_EXPORTER_OTLP_TRACES_COMPRESSION,
    OTEL_EXPORTER_OTLP_TIMEOUT,
    OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
    OTEL_EXPORTER_OTLP_CERTIFICATE,
    OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE,
    OTEL_EXPORTER_OTLP_CLIENT_KEY,
    OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY,
    OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
    OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE,
    OTEL_EXPORTER_OTLP_INSECURE,
    OTEL_EXPORTER_OTLP_TRACES_INSECURE,
)
"""The OTLP exporter variables fr_otel reads."""

PROTOCOL_GRPC = "grpc"
PROTOCOL_HTTP = "http/protobuf"
OTLP_PROTOCOLS = (PROTOCOL_GRPC, PROTOCOL_HTTP)
OTLP_COMPRESSIONS = ("gzip", "none")
DEFAULT_OTLP_PROTOCOL = PROTOCOL_HTTP
"""The SDK specification's default since 2023 (``grpc`` before)."""
DEFAULT_OTLP_COMPRESSION = "gzip"
"""Deviates from the SDK (no compression): spans are repetitive text and shrink ~10x even at
the fastest level (what OTLP/HTTP uses, ``http_exporter.GZIP_LEVEL``), which matters when
thousands of ranks flush at the same moment."""
LOCAL_DEFAULT_COMPRESSION = "none"
"""The default to an endpoint on this machine (a loopback address, ``localhost``, a Unix
socket): the node's own Collector (``agent.yaml``), which compresses what it forwards. There
bytes cost nothing and CPU is the training's: in continuous mode gzip takes a small but
steady share of every rank's CPU each step, for no gain."""
DEFAULT_OTLP_TIMEOUT_S = 10.0
OTLP_TRACES_PATH = "/v1/traces"


@dataclass(frozen=True, kw_only=True)
class OtlpSettings:
    """Where and how to send spans, resolved from arguments and the environment."""

    endpoint: str
    """For ``http/protobuf`` the full URL requests are POSTed to (path included); for
    ``grpc`` the target as configured (``http://host:4317``, ``https://…`` or ``host:4317``)."""
    protocol: str
    """``grpc`` or ``http/protobuf``."""
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    """Header names lower-cased (gRPC metadata keys must be). Left out of ``repr``: they
    often carry credentials, and settings end up in logs."""
    compression: str = DEFAULT_OTLP_COMPRESSION
    """``gzip`` or ``none``."""
    timeout_s: float = DEFAULT_OTLP_TIMEOUT_S
    """Longest wait for one request (each retry gets its own, within the overall deadline)."""
    certificate: Path | None = None
    client_key: Path | None = None
    client_certificate: Path | None = None
    insecure: bool = False
    """Only for a gRPC endpoint without a scheme; a scheme decides on its own."""


def _first_env(
    env: Mapping[str, str], specific: str, generic: str
) -> tuple[str, str] | tuple[None, None]:
    """(variable, value) of the first of the two that is set and not blank."""
    for variable in (specific, generic):
        value = env.get(variable, "").strip()
        if value:
            return variable, value
    return None, None


def _check_choice(what: str, value: str, choices: tuple[str, ...]) -> str:
    choice = value.strip().lower()
    if choice not in choices:
        raise ConfigError(f"{what} {value!r} is not supported: use one of {choices}")
    return choice


def _check_http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"endpoint {value!r} is not an http:// or https:// URL with a host"
            " (http/protobuf needs one, e.g. http://collector:4318)"
        )
    return value


def _append_traces_path(url: str) -> str:
    """The spec's rule for the generic endpoint: append ``/v1/traces``, no double slash."""
    parts = urlsplit(url)
    return parts._replace(path=parts.path.rstrip("/") + OTLP_TRACES_PATH).geturl()


def parse_otlp_headers(text: str, *, variable: str = "headers") -> dict[str, str]:
    """``k=v,k2=v2`` (W3C baggage style, values URL-encoded) -> a dict, names lower-cased.

    An entry without ``=`` or with an empty name is skipped with a warning: one typo must
    not drop the other headers (an auth token, typically).
    """
    headers: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name = unquote(name).strip().lower()
        if not sep or not name:
            logger.warning("ignoring malformed entry %r in %s: expected key=value", item, variable)
            continue
        headers[name] = unquote(value).strip()
    return headers


def _env_choice(
    env: Mapping[str, str],
    specific: str,
    generic: str,
    what: str,
    choices: tuple[str, ...],
    default: str,
) -> str:
    """One of ``choices`` from the variables; a bad value warns and falls back."""
    variable, value = _first_env(env, specific, generic)
    if variable is None or value is None:
        return default
    try:
        return _check_choice(what, value, choices)
    except ConfigError as exc:
        logger.warning("ignoring %s: %s", variable, exc)
        return default


def is_local_endpoint(endpoint: str) -> bool:
    """Whether ``endpoint`` (a URL, gRPC's ``host:port`` or ``unix:`` target) is on this
    machine by its text alone: a loopback address, ``localhost``, a Unix socket. No name is
    looked up."""
    text = endpoint.strip()
    if text.lower().startswith(("unix:", "unix-abstract:")):
        return True
    host = urlsplit(text if "://" in text else f"//{text}").hostname
    if host is None:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _env_endpoint(env: Mapping[str, str], protocol: str) -> str | None:
    for variable in (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT):
        value = env.get(variable, "").strip()
        if not value:
            continue
        if protocol == PROTOCOL_GRPC:
            return value  # gRPC ignores the path; any target grpc accepts is fine
        try:
            url = _check_http_url(value)
        except ConfigError as exc:
            logger.warning("ignoring %s: %s", variable, exc)
            continue
        # the signal-specific URL is used as-is; the generic one is a base URL
        return url if variable == OTEL_EXPORTER_OTLP_TRACES_ENDPOINT else _append_traces_path(url)
    return None


def _env_timeout_s(env: Mapping[str, str]) -> float:
    variable, value = _first_env(env, OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, OTEL_EXPORTER_OTLP_TIMEOUT)
    if variable is None or value is None:
        return DEFAULT_OTLP_TIMEOUT_S
    try:
        milliseconds = float(value)
        if milliseconds > 0 and milliseconds != float("inf"):
            return milliseconds / 1000.0
    except ValueError:
        pass
    logger.warning("ignoring %s=%r: expected a positive number of milliseconds", variable, value)
    return DEFAULT_OTLP_TIMEOUT_S


def _env_insecure(env: Mapping[str, str]) -> bool:
    variable, value = _first_env(
        env, OTEL_EXPORTER_OTLP_TRACES_INSECURE, OTEL_EXPORTER_OTLP_INSECURE
    )
    if variable is None or value is None:
        return False
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    logger.warning("ignoring %s=%r: expected true or false", variable, value)
    return False


def _env_path(env: Mapping[str, str], specific: str, generic: str) -> Path | None:
    _, value = _first_env(env, specific, generic)
    return Path(value) if value else None


def otlp_settings(
    endpoint: str | None = None,
    protocol: str | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    compression: str | None = None,
    timeout_s: float | None = None,
) -> OtlpSettings | None:
    """OTLP export settings, or ``None`` when no endpoint is configured anywhere.

    Each setting: argument > ``OTEL_EXPORTER_OTLP_TRACES_*`` > ``OTEL_EXPORTER_OTLP_*`` >
    default. An explicit ``endpoint`` for ``http/protobuf`` is used as-is when it has a
    path, and gets ``/v1/traces`` when it has none (``http://collector:4318``), so the
    Collector's address works as an argument; the environment follows the SDK rules.
    """
    env = _env(environ)
    resolved_protocol = (
        _check_choice("protocol", protocol, OTLP_PROTOCOLS)
        if protocol is not None
        else _env_choice(
            env,
            OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
            OTEL_EXPORTER_OTLP_PROTOCOL,
            "protocol",
            OTLP_PROTOCOLS,
            DEFAULT_OTLP_PROTOCOL,
        )
    )
    if endpoint is not None:
        url = endpoint.strip()
        if not url:
            raise ConfigError("endpoint must not be empty")
        if resolved_protocol == PROTOCOL_HTTP:
            url = _check_http_url(url)
            if urlsplit(url).path in ("", "/"):
                url = _append_traces_path(url)
        resolved_endpoint: str | None = url
    else:
        resolved_endpoint = _env_endpoint(env, resolved_protocol)
    if resolved_endpoint is None:
        return None

    if headers is not None:
        resolved_headers = {name.strip().lower(): value for name, value in headers.items()}
    else:
        variable, text = _first_env(
            env, OTEL_EXPORTER_OTLP_TRACES_HEADERS, OTEL_EXPORTER_OTLP_HEADERS
        )
        resolved_headers = (
            parse_otlp_headers(text, variable=variable) if variable and text is not None else {}
        )

    if timeout_s is not None:
        if not timeout_s > 0:
            raise ConfigError(f"timeout must be positive, got {timeout_s}")
        resolved_timeout = float(timeout_s)
    else:
        resolved_timeout = _env_timeout_s(env)

    return OtlpSettings(
        endpoint=resolved_endpoint,
        protocol=resolved_protocol,
        headers=resolved_headers,
        compression=(
            _check_choice("compression", compression, OTLP_COMPRESSIONS)
            if compression is not None
            else _env_choice(
                env,
                OTEL_EXPORTER_OTLP_TRACES_COMPRESSION,
                OTEL_EXPORTER_OTLP_COMPRESSION,
                "compression",
                OTLP_COMPRESSIONS,
                LOCAL_DEFAULT_COMPRESSION
                if is_local_endpoint(resolved_endpoint)
                else DEFAULT_OTLP_COMPRESSION,
            )
        ),
        timeout_s=resolved_timeout,
        certificate=_env_path(
            env, OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE, OTEL_EXPORTER_OTLP_CERTIFICATE
        ),
        client_key=_env_path(
            env, OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY, OTEL_EXPORTER_OTLP_CLIENT_KEY
        ),
        client_certificate=_env_path(
            env, OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE, OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE
        ),
        insecure=_env_insecure(env),
    )


ALL_VARIABLES = ALL_VARIABLES + OTLP_VARIABLES


# --- the in-rank recorder -----------------------------------------------------------------

FR_OTEL_MODE = "FR_OTEL_MODE"
"""``incident`` (default): spans only when an incident happens. ``continuous``: every
completed collective also becomes a span, exported in batches from a background thread."""

FR_OTEL_BUFFER_SIZE = "FR_OTEL_BUFFER_SIZE"
"""Entries kept per rank in the recorder's ring buffer. Default: 20000 (torchtitan's FR size)."""

FR_OTEL_FLUSH_DEADLINE = "FR_OTEL_FLUSH_DEADLINE"
"""Seconds each rank has to flush its buffer once an incident is known. Default: 5."""

FR_OTEL_TIMEOUT = "FR_OTEL_TIMEOUT"
"""Seconds a collective may stay pending before the recorder calls it an incident. Default:
three quarters of the process group's own timeout, so that the rank flushes before torch's
timeout aborts the op."""

FR_OTEL_STACK_DEPTH = "FR_OTEL_STACK_DEPTH"
"""Python frames kept per collective's call site (user frames, innermost first). Default: 8."""

FR_OTEL_EXPORT_INTERVAL = "FR_OTEL_EXPORT_INTERVAL"
"""Continuous mode: seconds between span batches. Default: 1."""

FR_OTEL_RING_DIR = "FR_OTEL_RING_DIR"
"""Where each rank keeps its memory-mapped ring buffer, which outlives a crashed rank.
Default: ``<archive>/_rings``. Keep it on a local disk."""

FR_OTEL_TRIGGER_SIGNAL = "FR_OTEL_TRIGGER_SIGNAL"
"""Signal an operator sends a rank to declare an incident (``SIGUSR2`` by default; ``none``
to leave signals alone). Only installed when the signal has no handler yet."""

FR_OTEL_DISABLE = "FR_OTEL_DISABLE"
"""``1`` makes ``install()`` and ``fr-otel run`` do nothing (a kill switch for launchers)."""

FR_OTEL_RUN_ID = "FR_OTEL_RUN_ID"
"""The launch this rank belongs to: one id shared by every rank of one run of the job.
Default: torchrun's ``TORCHELASTIC_RUN_ID`` when it is not torchrun's default ``none``,
else one ``fr-otel run`` makes for its command, else one rank 0 makes and shares through
the job's store. It keeps two runs of one job name apart: their ring folders, incident
ids, archive rows and span and trace ids (``fr_otel.otel.model``)."""

TORCHELASTIC_RUN_ID = "TORCHELASTIC_RUN_ID"
"""torchrun's ``--rdzv-id`` (``none`` unless given; ``--standalone`` makes a random one)."""

FR_OTEL_PURE_PYTHON = "FR_OTEL_PURE_PYTHON"
"""``1``: record collectives with the Python wrapper even where the compiled one was built,
and read dumps with the restricted unpickler, not the compiled decoder (to rule them out
when something looks wrong; it costs more CPU)."""

RECORDER_VARIABLES: tuple[str, ...] = (
    FR_OTEL_MODE,
    FR_OTEL_BUFFER_SIZE,
    FR_OTEL_FLUSH_DEADLINE,
    FR_OTEL_TIMEOUT,
    FR_OTEL_STACK_DEPTH,
    FR_OTEL_EXPORT_INTERVAL,
    FR_OTEL_RING_DIR,
    FR_OTEL_TRIGGER_SIGNAL,
    FR_OTEL_DISABLE,
    FR_OTEL_PURE_PYTHON,
    FR_OTEL_RUN_ID,
)

ALL_VARIABLES = ALL_VARIABLES + RECORDER_VARIABLES

RECORDER_MODES = ("incident", "continuous")
DEFAULT_BUFFER_SIZE = 20_000
DEFAULT_FLUSH_DEADLINE_S = 5.0
DEFAULT_STACK_DEPTH = 8
DEFAULT_EXPORT_INTERVAL_S = 1.0
"""Shorter than the OpenTelemetry SDK's 5 s batch delay: spans reach the Collector while an
incident unfolds. Longer batches do not make the export thread's work per span any
cheaper: they only move the work later."""
DEFAULT_TRIGGER_SIGNAL = "SIGUSR2"


@dataclass(frozen=True, kw_only=True)
class RecorderSettings:
    """Everything the in-rank recorder needs; ``install(**overrides)`` takes these names."""

    mode: str = "incident"
    buffer_size: int = DEFAULT_BUFFER_SIZE
    flush_deadline_s: float = DEFAULT_FLUSH_DEADLINE_S
    timeout_s: float | None = None
    """None: three quarters of each process group's own timeout."""
    stack_depth: int = DEFAULT_STACK_DEPTH
    export_interval_s: float = DEFAULT_EXPORT_INTERVAL_S
    archive: Path = DEFAULT_ARCHIVE
    ring_dir: Path | None = None
    """None: ``<archive>/_rings``."""
    job: str = DEFAULT_JOB
    run_id: str | None = None
    """None: rank 0 makes one when the recorder starts (``FR_OTEL_RUN_ID``)."""
    trigger_signal: str | None = DEFAULT_TRIGGER_SIGNAL
    otlp: OtlpSettings | None = None
    """None: no OTLP, the archive only."""
    resource: dict[str, str] = field(default_factory=dict)
    """Extra resource attributes of the spans (``OTEL_RESOURCE_ATTRIBUTES``)."""

    @property
    def rings(self) -> Path:
        return self.ring_dir if self.ring_dir is not None else self.archive / "_rings"

    @property
    def spool_dir(self) -> Path:
        """Same place ``fr-otel export`` spools to, so ``fr-otel export --resend`` finds it."""
        return self.archive / "_spool"


def _env_number(
    env: Mapping[str, str], variable: str, default: Any, kind: type, minimum: float
) -> Any:
    value = env.get(variable, "").strip()
    if not value:
        return default
    try:
        number = kind(value)
        if number >= minimum and number != float("inf"):
            return number
    except ValueError:
        pass
    logger.warning("ignoring %s=%r: expected a %s >= %s", variable, value, kind.__name__, minimum)
    return default


def _signal_name(value: Any) -> str | None:
    """``SIGUSR2``/``usr2`` -> ``SIGUSR2``; ``none``/empty/None -> None (no trigger signal)."""
    import signal

    if value is None or str(value).strip().lower() in ("", "none", "0", "off"):
        return None
    text = str(value).strip().upper()
    name = text if text.startswith("SIG") else "SIG" + text
    if not isinstance(getattr(signal, name, None), int):
        raise ConfigError(f"trigger_signal {value!r} is not a signal name (e.g. SIGUSR2 or none)")
    return name


def _check_override(name: str, value: Any) -> Any:
    """An explicit ``install()`` argument: wrong values raise, naming the argument."""
    if name == "mode":
        return _check_choice("mode", str(value), RECORDER_MODES)
    if name in ("buffer_size", "stack_depth") and (
        isinstance(value, bool) or not isinstance(value, int) or value < 1
    ):
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    if name in ("flush_deadline_s", "export_interval_s", "timeout_s"):
        if value is None and name == "timeout_s":
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 < value < float("inf")
        ):
            raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        return float(value)
    if name == "trigger_signal":
        return _signal_name(value)
    if name in ("archive", "ring_dir"):
        return None if value is None else Path(value)
    if name == "job":
        return validate_partition_value("job", str(value))
    if name == "run_id":
        return None if value is None else validate_partition_value("run id", str(value))
    return value


def recorder_settings(
    overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> RecorderSettings:
    """The recorder's settings: ``install()`` arguments > environment > defaults.

    An unknown override name or a bad override value raises ``ConfigError``; a bad value in
    the environment warns and falls back (a typo in a launcher must not kill training).
    """
    env = _env(environ)
    overrides = dict(overrides or {})
    known = {f for f in RecorderSettings.__dataclass_fields__}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown recorder setting(s) {unknown}: use {sorted(known)}")
    try:
        trigger = _signal_name(env.get(FR_OTEL_TRIGGER_SIGNAL, DEFAULT_TRIGGER_SIGNAL))
    except ConfigError as exc:
        logger.warning("ignoring %s: %s", FR_OTEL_TRIGGER_SIGNAL, exc)
        trigger = DEFAULT_TRIGGER_SIGNAL
    from_env: dict[str, Any] = {
        "mode": _env_choice(env, FR_OTEL_MODE, FR_OTEL_MODE, "mode", RECORDER_MODES, "incident"),
        "buffer_size": _env_number(env, FR_OTEL_BUFFER_SIZE, DEFAULT_BUFFER_SIZE, int, 1),
        "flush_deadline_s": _env_number(
            env, FR_OTEL_FLUSH_DEADLINE, DEFAULT_FLUSH_DEADLINE_S, float, 0.001
        ),
        "timeout_s": _env_number(env, FR_OTEL_TIMEOUT, None, float, 0.001),
        "stack_depth": _env_number(env, FR_OTEL_STACK_DEPTH, DEFAULT_STACK_DEPTH, int, 1),
        "export_interval_s": _env_number(
            env, FR_OTEL_EXPORT_INTERVAL, DEFAULT_EXPORT_INTERVAL_S, float, 0.001
        ),
        "archive": archive_dir(None, env),
        "ring_dir": Path(env[FR_OTEL_RING_DIR]) if env.get(FR_OTEL_RING_DIR, "").strip() else None,
        "job": job_name(None, env),
        "run_id": run_id(env),
        "trigger_signal": trigger,
    }
    for name, value in overrides.items():
        if name not in ("otlp", "resource"):
            from_env[name] = _check_override(name, value)
    otlp = overrides["otlp"] if "otlp" in overrides else otlp_settings(environ=env)
    resource = dict(overrides["resource"]) if "resource" in overrides else resource_attributes(env)
    return RecorderSettings(**{**from_env, "otlp": otlp, "resource": resource})


def run_id(environ: Mapping[str, str] | None = None) -> str | None:
    """FR_OTEL_RUN_ID, else torchrun's TORCHELASTIC_RUN_ID unless it is ``none``; None
    when neither names the run (then rank 0 makes one)."""
    env = _env(environ)
    for variable in (FR_OTEL_RUN_ID, TORCHELASTIC_RUN_ID):
        value = env.get(variable, "").strip()
        if not value or (variable == TORCHELASTIC_RUN_ID and value.lower() == "none"):
            continue
        try:
            return validate_partition_value("run id", value)
        except ConfigError as exc:
            logger.warning("ignoring %s: %s", variable, exc)
    return None


def new_run_id() -> str:
    """A run id nobody else has: when it was made (UTC, to the second) and 32 random
    bits, so runs sort by start and two launches in one second still differ."""
    import secrets
    import time

    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(4)}"


def recorder_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """FR_OTEL_DISABLE is set to a true value."""
    return _env(environ).get(FR_OTEL_DISABLE, "").strip().lower() in ("1", "true", "yes")


def pure_python(environ: Mapping[str, str] | None = None) -> bool:
    """FR_OTEL_PURE_PYTHON is set to a true value."""
    return _env(environ).get(FR_OTEL_PURE_PYTHON, "").strip().lower() in ("1", "true", "yes")


# --- pyarrow's allocator, which the recorder chooses when the user has not ----------------

ARROW_DEFAULT_MEMORY_POOL = "ARROW_DEFAULT_MEMORY_POOL"


def arrow_pool_chosen(environ: Mapping[str, str] | None = None) -> bool:
    """The user chose pyarrow's allocator (``ARROW_DEFAULT_MEMORY_POOL``, read by pyarrow
    itself): the recorder leaves it as it is."""
    return bool(_env(environ).get(ARROW_DEFAULT_MEMORY_POOL, "").strip())


# --- torch's Flight Recorder variables the recorder sets when the user has not -------------

TORCH_FR_BUFFER_SIZE = "TORCH_FR_BUFFER_SIZE"
TORCH_NCCL_TRACE_BUFFER_SIZE = "TORCH_NCCL_TRACE_BUFFER_SIZE"
TORCH_NCCL_DUMP_ON_TIMEOUT = "TORCH_NCCL_DUMP_ON_TIMEOUT"
TORCH_FR_DUMP_TEMP_FILE = "TORCH_FR_DUMP_TEMP_FILE"
TORCH_NCCL_DEBUG_INFO_TEMP_FILE = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
TORCH_NCCL_ASYNC_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
TORCH_DUMP_FILE_NAME = "comm_lib_trace_rank_"
"""torch appends the global rank to ``TORCH_FR_DUMP_TEMP_FILE``."""


def torch_fr_environment(
    settings: RecorderSettings, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, str], list[str]]:
    """What to set in the environment so torch's FR helps: (variables, warnings).

    Only unset variables are set, except ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1``: with it
    the watchdog's abort destroys the dump ("broken promise", pytorch#121055), so it is
    raised to 3 (torchtitan's choice) with a warning. torch reads these when a process
    group is created, so install the recorder before ``init_process_group``.

    torch's buffer size (``TORCH_FR_BUFFER_SIZE``, 2,000 by default) is left alone: the
    recorder keeps the history in its own rings and reads torch's buffer only for what
    its hooks did not see, and each read holds the GIL for a time that grows with that
    buffer (tens of milliseconds at the default, ten times that at ten times the size).
    """
    env = _env(environ)
    updates: dict[str, str] = {}
    warnings: list[str] = []
    if not env.get(TORCH_NCCL_DUMP_ON_TIMEOUT):
        updates[TORCH_NCCL_DUMP_ON_TIMEOUT] = "1"
    if not (env.get(TORCH_FR_DUMP_TEMP_FILE) or env.get(TORCH_NCCL_DEBUG_INFO_TEMP_FILE)):
        folder = settings.rings / f"job={settings.job}"
        updates[TORCH_FR_DUMP_TEMP_FILE] = str(folder.absolute() / TORCH_DUMP_FILE_NAME)
    if env.get(TORCH_NCCL_ASYNC_ERROR_HANDLING, "").strip() == "1":
        updates[TORCH_NCCL_ASYNC_ERROR_HANDLING] = "3"
        warnings.append(
            f"{TORCH_NCCL_ASYNC_ERROR_HANDLING}=1 loses Flight Recorder dumps on timeout"
            " (pytorch#121055); fr_otel set it to 3"
        )
    return updates, warnings


TORCH_FR_DEFAULT_BUFFER_SIZE = 2000
"""torch's Flight Recorder default (FR format 2.10)."""


def torch_fr_buffer_size(environ: Mapping[str, str] | None = None) -> int:
    """How many entries torch's Flight Recorder keeps (its own variables, or its default)."""
    env = _env(environ)
    for variable in (TORCH_FR_BUFFER_SIZE, TORCH_NCCL_TRACE_BUFFER_SIZE):
        value = env.get(variable, "").strip()
        if value.isdigit():
            return int(value)
    return TORCH_FR_DEFAULT_BUFFER_SIZE


def torch_dump_prefix(environ: Mapping[str, str] | None = None) -> str | None:
    """The prefix torch writes its dump-on-timeout file to (the rank is appended)."""
    env = _env(environ)
    for variable in (TORCH_FR_DUMP_TEMP_FILE, TORCH_NCCL_DEBUG_INFO_TEMP_FILE):
        value = env.get(variable, "").strip()
        if value:
            return value
    return None


FR_OTEL_AUTOINSTALL = "FR_OTEL_AUTOINSTALL"
"""Set by ``fr-otel run`` for the processes it starts: install the recorder in each
process that imports ``torch.distributed``. Not meant to be set by hand."""

ALL_VARIABLES = (*ALL_VARIABLES, FR_OTEL_AUTOINSTALL)


def autoinstall_requested(environ: Mapping[str, str] | None = None) -> bool:
    return _env(environ).get(FR_OTEL_AUTOINSTALL) == "1" and not recorder_disabled(environ)


# --- where a rank runs ----------------------------------------------------------------------

FR_OTEL_HOST = "FR_OTEL_HOST"
"""The host name the recorder writes on a rank's rows (``host``) and spans (``host.name``).
Default: ``socket.gethostname()``; set it where that name is not the one the fleet knows
the node by (a container's random name, a short name where the inventory has the FQDN)."""

LOCAL_RANK = "LOCAL_RANK"
"""torchrun's (and most launchers') index of a rank on its host: the ``local_rank`` column."""

ALL_VARIABLES = (*ALL_VARIABLES, FR_OTEL_HOST)


def host_name(environ: Mapping[str, str] | None = None) -> str:
    """FR_OTEL_HOST, else this machine's host name."""
    value = _env(environ).get(FR_OTEL_HOST, "").strip()
    if value:
        return value
    import socket

    return socket.gethostname()


def local_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """LOCAL_RANK as a non-negative int; None when unset (a bad value warns)."""
    value = _env(environ).get(LOCAL_RANK, "").strip()
    if not value:
        return None
    if value.isdigit():
        return int(value)
    logger.warning("ignoring %s=%r: not a non-negative integer", LOCAL_RANK, value)
    return None


def resource_attributes(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``OTEL_RESOURCE_ATTRIBUTES`` as a dict (the headers' format; malformed entries warn)."""
    text = _env(environ).get(OTEL_RESOURCE_ATTRIBUTES, "")
    if not text.strip():
        return {}
    pairs = parse_otlp_headers(text, variable=OTEL_RESOURCE_ATTRIBUTES)
    # parse_otlp_headers lower-cases names (gRPC metadata needs it); attribute keys keep case
    keys = [unquote(item.partition("=")[0]).strip() for item in text.split(",") if "=" in item]
    return {key: pairs[key.lower()] for key in keys if key and key.lower() in pairs}


# --- the live check of ``fr-otel run`` ------------------------------------------------------

FR_OTEL_LIVE = "FR_OTEL_LIVE"
"""``0`` turns off ``fr-otel run``'s live check (on by default): the node agent that reads
this host's rings while the job runs and names a desync's culprit in seconds
(docs/live-diagnosis.md)."""

FR_OTEL_LIVE_POLICY = "FR_OTEL_LIVE_POLICY"
"""What ``fr-otel run`` does once the live check has named a desync: ``report`` (default:
say it, declare an incident so every rank flushes, let the job go on to its own timeout),
``abort`` (the same, then end the job once the ranks have flushed, and exit 4) or
``snapshot`` (as ``report``, and every local rank's current Python stack goes into the
verdict's record)."""

FR_OTEL_LIVE_INTERVAL = "FR_OTEL_LIVE_INTERVAL"
"""Seconds between two looks of the live check at this host's rings. Default: 0.5."""

FR_OTEL_LIVE_STALL_S = "FR_OTEL_LIVE_STALL_S"
"""Seconds a group's members may wait in a collective that another running member has not
issued before that member is named a stall suspect, with its current Python stack.
Default: 30, or 5 times the job's observed step if that is longer. Lower finds a stuck
rank sooner and names a merely slow one more often; a pause every rank shares is never a
stall."""

FR_OTEL_LIVE_STALL_INCIDENT = "FR_OTEL_LIVE_STALL_INCIDENT"
"""``1``: a stall suspect also declares an incident at once (every rank flushes). Default
``0``: a stall becomes an incident at the recorder's detection timeout, as without the
live check."""

LIVE_VARIABLES: tuple[str, ...] = (
    FR_OTEL_LIVE,
    FR_OTEL_LIVE_POLICY,
    FR_OTEL_LIVE_INTERVAL,
    FR_OTEL_LIVE_STALL_S,
    FR_OTEL_LIVE_STALL_INCIDENT,
)
"""Documented in docs/live-diagnosis.md's table too, which a test keeps in step with this."""
ALL_VARIABLES = (*ALL_VARIABLES, *LIVE_VARIABLES)

LIVE_POLICIES = ("report", "abort", "snapshot")
DEFAULT_LIVE_INTERVAL_S = 1.0
DEFAULT_LIVE_STALL_S = 30.0
"""Once a second: a desync is then seen within a second of its second collective, well
inside the 5 s its verdict is due in. Most of a look's cost is per look, not per
collective read (a stat, two preads and a /proc read per rank): beside a tight loop of
tiny all_reduces, looking twice a second cost the agent 1.5 µs per call per rank where
once a second costs 0.9."""


@dataclass(frozen=True, kw_only=True)
class LiveSettings:
    """The live check of ``fr-otel run`` (``FR_OTEL_LIVE*``)."""

    enabled: bool = True
    policy: str = "report"
    interval_s: float = DEFAULT_LIVE_INTERVAL_S
    stall_s: float = DEFAULT_LIVE_STALL_S
    stall_incident: bool = False


def live_settings(environ: Mapping[str, str] | None = None) -> LiveSettings:
    """The live check's settings from the environment (a bad value warns and falls back)."""
    env = _env(environ)
    return LiveSettings(
        enabled=_live_switch(env, FR_OTEL_LIVE, default=True),
        policy=_env_choice(
            env, FR_OTEL_LIVE_POLICY, FR_OTEL_LIVE_POLICY, "policy", LIVE_POLICIES, "report"
        ),
        interval_s=_env_number(env, FR_OTEL_LIVE_INTERVAL, DEFAULT_LIVE_INTERVAL_S, float, 0.01),
        stall_s=_env_number(env, FR_OTEL_LIVE_STALL_S, DEFAULT_LIVE_STALL_S, float, 0.1),
        stall_incident=_live_switch(env, FR_OTEL_LIVE_STALL_INCIDENT, default=False),
    )


def _live_switch(env: Mapping[str, str], variable: str, *, default: bool) -> bool:
    switch = env.get(variable, "").strip().lower()
    if switch and switch not in ("0", "1", "false", "true", "no", "yes", "off", "on"):
        logger.warning("ignoring %s=%r: expected 0 or 1", variable, switch)
        switch = ""
    if not switch:
        return default
    return switch in ("1", "true", "yes", "on")
