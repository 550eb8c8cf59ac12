"""Every environment variable fr_otel reads, in one place.

Precedence everywhere: an explicit argument, then the specific variable, then the
generic one, then the default. A bad value in the environment logs a warning and falls
back to the default (a typo in a launcher script must not kill a training job); a bad
explicit argument raises ``ConfigError`` naming it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from fr_otel.errors import ConfigError

logger = logging.getLogger(__name__)

FR_OTEL_ARCHIVE = "FR_OTEL_ARCHIVE"
"""Directory of the local Parquet archive. Default: ``./fr-otel-archive``."""

FR_OTEL_JOB = "FR_OTEL_JOB"
"""Job name used to partition the archive. Falls back to ``OTEL_SERVICE_NAME``, then ``default``."""

OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"
"""Standard OpenTelemetry service name: the job name when FR_OTEL_JOB is unset."""

FR_OTEL_IMPORT_WORKERS = "FR_OTEL_IMPORT_WORKERS"
"""Processes used to import dumps. Default: every core (``os.cpu_count()``)."""

DEFAULT_ARCHIVE = Path("fr-otel-archive")
DEFAULT_JOB = "default"

ALL_VARIABLES: tuple[str, ...] = (
    FR_OTEL_ARCHIVE,
    FR_OTEL_JOB,
    OTEL_SERVICE_NAME,
    FR_OTEL_IMPORT_WORKERS,
)
"""Documented in the README's configuration table; a test keeps the two in step."""

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


def import_workers(explicit: int | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Worker processes for imports: argument > FR_OTEL_IMPORT_WORKERS > cpu count."""
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
"""``gzip`` or ``none``. Default in fr_otel: ``gzip`` (spans compress to about 12 %)."""

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
"""Deviates from the SDK (no compression): spans are repetitive text and shrink ~8x, which
matters when thousands of ranks flush at the same moment."""
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
                DEFAULT_OTLP_COMPRESSION,
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
