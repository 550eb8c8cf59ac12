"""Fleet facts in object storage (``s3://bucket/archive``), read by DuckDB through fsspec.

DuckDB's own reader of ``s3://`` is its ``httpfs`` extension, which it downloads on first
use; a machine that cannot reach extensions.duckdb.org has none. DuckDB also reads any
fsspec file system a connection registers, and ``s3fs`` (``pip install 'fr-otel[s3]'``) is
fsspec's: it takes its credentials, region and endpoint where every AWS tool does
(``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``~/.aws``). Spark reads the same URLs through
Hadoop's S3A (``fleet.spark``). Only the fleet views read an archive here: its facts are made
where its incidents are written (``facts.refresh``) and copied with the rest.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from fr_otel.errors import MissingDependencyError

if TYPE_CHECKING:
    import duckdb

_URL = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.IGNORECASE)

EXTRAS = {"s3": "s3", "s3a": "s3"}
"""A URL's scheme, and fr_otel's extra that brings its fsspec file system. Other schemes
(``gs://``: gcsfs, ``abfs://``: adlfs) read the same way with their package installed."""


def url_scheme(archive: str) -> str | None:
    """``archive``'s scheme when it is a URL (``s3``, ``s3a``, ``gs``...), else None (a
    folder)."""
    found = _URL.match(archive)
    return found.group(1).lower() if found else None


def register(connection: duckdb.DuckDBPyConnection, url: str) -> None:
    """Let ``connection`` read ``url``'s file system (its scheme's fsspec implementation)."""
    scheme = url_scheme(url)
    if scheme is None or scheme == "file":
        return
    extra = EXTRAS.get(scheme)
    try:
        import fsspec

        # a fresh one: fsspec would hand back the first one made, with the credentials and
        # endpoint of the environment then
        filesystem = fsspec.filesystem(scheme, skip_instance_cache=True)
    except (ImportError, ValueError) as exc:
        hint = f"pip install 'fr-otel[{extra}]'" if extra else "its fsspec file system"
        raise MissingDependencyError(f"reading {scheme}:// archives needs {hint} ({exc})") from None
    if not connection.filesystem_is_registered(scheme):
        connection.register_filesystem(filesystem)


_PYTHON_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$", re.MULTILINE)


def reason(exc: Exception) -> str:
    """What went wrong in a DuckDB error raised while reading through fsspec: DuckDB gives
    the file system's whole Python traceback, whose last ``SomeError: text`` line says it."""
    found = _PYTHON_ERROR.findall(str(exc))
    if found:
        name, text = found[-1]
        return f"{name.rsplit('.', 1)[-1]}: {text}"
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
