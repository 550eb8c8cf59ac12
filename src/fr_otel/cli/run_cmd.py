"""``fr-otel run -- CMD``: run a training command with the recorder in every rank."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fr_otel import config
from fr_otel.cli._errors import EXIT_LIVE_ABORTED
from fr_otel.cli._options import archive_option, job_option

if TYPE_CHECKING:
    from fr_otel.live.agent import LiveCheck

LIVE_STOP_S = 30.0
"""How long the live check's last look (the rings as the job left them) may take."""


@click.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--mode",
    type=click.Choice(config.RECORDER_MODES),
    default=None,
    help="incident: spans only on an incident (default); continuous: every collective.",
)
@archive_option
@job_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(mode: str | None, archive: Path | None, job: str | None, command: tuple[str, ...]) -> int:
    """Run COMMAND (torchrun, python, srun ...) with the recorder installed in every rank.

    No code change: each Python process that imports torch.distributed installs the
    recorder. When a rank has an incident, every rank flushes its buffer into the archive
    (and over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set). Exits with COMMAND's code.

    Meanwhile a live check compares the ranks of this host: a desync (ranks that issued
    different collectives) is named within seconds, every rank flushes, and with
    FR_OTEL_LIVE_POLICY=abort the job is ended (exit 4). FR_OTEL_LIVE=0 turns it off.

    Example: fr-otel run --job llama -- torchrun --nproc-per-node 8 train.py
    """
    if command[0].startswith("-"):
        _explain_option(command)
    from fr_otel.recorder.launcher import child_environment
    from fr_otel.recorder.launcher import run as run_command

    overrides: dict[str, str] = {}
    if mode is not None:
        overrides[config.FR_OTEL_MODE] = mode
    if archive is not None:
        overrides[config.FR_OTEL_ARCHIVE] = str(archive)
    if job is not None:
        overrides[config.FR_OTEL_JOB] = config.validate_partition_value("job", job)
    if config.recorder_disabled():
        click.echo(f"fr-otel: {config.FR_OTEL_DISABLE} is set: no recorder", err=True)
    # the run id is fixed here, so that the live check finds the ranks' rings by it
    environment = child_environment(overrides)
    overrides[config.FR_OTEL_RUN_ID] = environment[config.FR_OTEL_RUN_ID]
    live = _start_live_check(config.recorder_settings(environ=environment))
    try:
        result = run_command(command, overrides)
    except FileNotFoundError as exc:
        raise click.ClickException(f"cannot run {command[0]!r}: {exc.strerror}") from None
    finally:
        if live is not None:
            live.stop(LIVE_STOP_S)
    settings = result.settings
    for report in result.late_flushes:
        if report.archived is None:  # a failed write is said as failed, never as flushed
            click.echo(
                f"fr-otel: could not archive the ring of rank {report.rank} (died without"
                f" flushing) into incident {report.incident}: {'; '.join(report.problems)}",
                err=True,
            )
            continue
        click.echo(
            f"fr-otel: flushed the ring of rank {report.rank} (died without flushing)"
            f" into incident {report.incident}",
            err=True,
        )
    from fr_otel.archive.layout import partition_dir

    for incident in result.incidents:
        if incident in result.empty:
            click.echo(f"fr-otel: incident {incident} is empty: {result.empty[incident]}", err=True)
            continue
        if not partition_dir(settings.archive, settings.job, incident).is_dir():
            continue
        click.echo(
            f"fr-otel: incident {incident} archived in {settings.archive};"
            f" diagnose it with: fr-otel analyze {settings.archive}"
            f" --job {settings.job} --incident {incident}",
            err=True,
        )
    if live is not None and live.aborted:
        return EXIT_LIVE_ABORTED
    # a command ended by a signal exits as a shell reports it: 128 + the signal (143 for
    # SIGTERM), not the negative number subprocess gives (which the OS wraps to 241)
    return 128 - result.returncode if result.returncode < 0 else result.returncode


def _start_live_check(settings: config.RecorderSettings) -> LiveCheck | None:
    """The node agent for this host's ranks (docs/live-diagnosis.md), unless turned off."""
    live = config.live_settings()
    if not live.enabled or config.recorder_disabled():
        return None

    def say(text: str) -> None:
        click.echo(f"fr-otel: {text}", err=True)

    try:
        from fr_otel.live.agent import LiveCheck
    except ImportError as exc:  # numpy: torch's installs bring it, fr-otel[torch] too
        say(f"live check off: {exc} (pip install 'fr-otel[torch]')")
        return None

    check = LiveCheck(
        settings=settings,
        live=live,
        on_verdict=lambda verdict: say(verdict.line()),
        on_suspect=lambda suspect: say(suspect.line()),
        on_notice=say,
        end_job=_end_job,
    )
    check.start()
    return check


def _end_job() -> None:
    """End the command as Ctrl-C or SIGTERM to ``fr-otel run`` would: the launcher hands
    the signal to the command (torchrun then stops every rank), from the main thread."""
    if callable(signal.getsignal(signal.SIGTERM)):
        os.kill(os.getpid(), signal.SIGTERM)


def _explain_option(command: tuple[str, ...]) -> None:
    """``fr-otel run --nproc-per-node 2 -- torchrun train.py``: an option fr-otel run does
    not have, before the command. Say where it goes instead of trying to run it."""
    option = command[0]
    rest = list(command[1:])
    if "--" in rest:
        before, after = rest[: rest.index("--")], rest[rest.index("--") + 1 :]
    else:
        before, after = [], rest
    launcher = after[0] if after else "torchrun"
    example = " ".join(["fr-otel run --", launcher, option, *before, *after[1:]])
    raise click.UsageError(
        f"{option} is not an option of fr-otel run, whose own options (--mode, --archive,"
        " --job) go before `--`; the command and its options go after it, as in:"
        f" {example}"
    )
