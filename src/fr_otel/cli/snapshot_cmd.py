"""``fr-otel snapshot``: every rank's buffer of a running job into the archive, training
goes on."""

from __future__ import annotations

from pathlib import Path

import click

from fr_otel import config
from fr_otel.cli._errors import EXIT_BAD_INPUT, EXIT_OK
from fr_otel.cli._options import archive_option, job_option


@click.command("snapshot")
@archive_option
@job_option
@click.option("--run", "run_id", default=None, help="Run id, when several runs of the job run.")
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the ranks to say the snapshot's id.",
)
def snapshot(archive: Path | None, job: str | None, run_id: str | None, wait: float) -> int:
    """Take a snapshot of a running job without stopping it.

    Run it on a host where the job runs: one live rank is asked through its trigger FIFO
    (as `echo > <ring dir>/job=J/run=R/rank-N.trigger` would), every rank of the job
    archives its whole buffer under one incident id, and training goes on. Prints that
    id. Exit 2 when no rank of the job runs here.
    """
    overrides: dict[str, object] = {}
    if archive is not None:
        overrides["archive"] = archive
    if job is not None:
        overrides["job"] = job
    if run_id is not None:
        overrides["run_id"] = run_id
    settings = config.recorder_settings(overrides)
    from fr_otel.recorder.snapshot import request_snapshot

    taken = request_snapshot(settings, wait_s=wait)
    run = f" (run {taken.run_id})" if taken.run_id else ""
    if taken.incident is None:
        click.echo(
            f"fr-otel: asked job {settings.job}{run} for a snapshot through {taken.trigger};"
            f" no rank said its id within {wait:g} s (see the ranks' log)",
            err=True,
        )
        return EXIT_BAD_INPUT
    click.echo(
        f"snapshot {taken.incident} of job {settings.job}{run}: every rank's buffer goes to"
        f" {settings.archive}; diagnose it with: fr-otel analyze {settings.archive}"
        f" --job {settings.job} --incident {taken.incident}"
    )
    return EXIT_OK
