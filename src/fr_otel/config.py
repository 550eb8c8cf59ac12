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
from pathlib import Path

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
