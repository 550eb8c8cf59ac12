"""Options several commands share, written once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from fr_otel import config

archive_option = click.option(
    "--archive",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help=f"Parquet archive (default: ${config.FR_OTEL_ARCHIVE} or ./{config.DEFAULT_ARCHIVE}).",
)
"""``--archive``: where the recorder's ranks write (and their rings live, under ``_rings``)."""

job_option = click.option("--job", default=None, help=f"Job name (default: ${config.FR_OTEL_JOB}).")


def format_option(choices: list[str], help: str | None = None) -> Callable[[Any], Any]:
    """``--format`` (into ``fmt``): one of ``choices``, the first by default."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=choices[0],
        show_default=True,
        help=help,
    )
