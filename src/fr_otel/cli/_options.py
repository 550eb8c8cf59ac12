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


def engine_options(engine_help: str) -> Callable[[Any], Any]:
    """``--engine`` (duckdb or spark) and ``--spark-master``, for the commands that run the
    fleet views on either."""
    engine = click.option(
        "--engine",
        type=click.Choice(["duckdb", "spark"]),
        default="duckdb",
        show_default=True,
        help=engine_help,
    )
    master = click.option(
        "--spark-master",
        default="local[2]",
        show_default=True,
        metavar="URL",
        help="With --engine spark: the cluster (spark://host:7077, yarn) or local[N].",
    )
    return lambda command: engine(master(command))


def spark_engine() -> Any:
    """``fr_otel.fleet.spark``, or ``MissingDependencyError`` saying how to install it."""
    from fr_otel.errors import MissingDependencyError

    try:
        from fr_otel.fleet import spark
    except ImportError as exc:
        raise MissingDependencyError(
            f"--engine spark needs pyspark: pip install 'fr-otel[spark]' ({exc})"
        ) from None
    return spark
