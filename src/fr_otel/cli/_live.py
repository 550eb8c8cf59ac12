"""The live check's records as the CLI reads them: ``report.live_shown``'s, with each file
that is not a record named on stderr."""

from __future__ import annotations

from pathlib import Path

import click

from fr_otel.report.live_shown import Shown
from fr_otel.report.live_shown import live_records as _records


def live_records(archive: Path, job: str | None = None) -> list[Shown]:
    """The records under ``archive`` (of ``job``), oldest first; each file that is not a
    record the live check wrote is named on stderr and left out, never fatal."""
    shown, bad = _records(archive, job)
    for unreadable in bad:
        click.echo(
            f"fr-otel: {unreadable.path}: {unreadable.problem} (a live check record that"
            " cannot be read; left out)",
            err=True,
        )
    return shown
