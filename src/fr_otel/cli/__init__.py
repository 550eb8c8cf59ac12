"""The ``fr-otel`` command line: one module per verb.

This package is the only place that prints, configures logging, or turns fr_otel's
typed errors into exit codes and one-line messages.
"""

from __future__ import annotations

import logging
import sys
from typing import NoReturn

import click

from fr_otel import __version__
from fr_otel.cli._errors import run_translating_errors, state
from fr_otel.cli._exit import end
from fr_otel.cli.analyze_cmd import analyze_
from fr_otel.cli.demo_cmd import demo
from fr_otel.cli.export_cmd import export
from fr_otel.cli.fleet_cmd import fleet
from fr_otel.cli.import_cmd import import_
from fr_otel.cli.incidents_cmd import incidents
from fr_otel.cli.mcp_cmd import mcp
from fr_otel.cli.run_cmd import run
from fr_otel.cli.simulate_cmd import simulate
from fr_otel.cli.snapshot_cmd import snapshot
from fr_otel.cli.sql_cmd import sql


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fr-otel")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def cli(verbose: int) -> None:
    """Diagnose NCCL watchdog timeouts from PyTorch Flight Recorder data.

    Import dumps into a Parquet archive, analyze them, query them with SQL, and
    simulate fleets to try it all on.

    \b
    Exit codes: 0 success (analyze: healthy), 1 analyze found problems,
    2 unusable input, 3 internal error (-v shows the traceback),
    130/143 interrupted (Ctrl-C/SIGTERM).
    """
    state.verbose = verbose
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(
        level=level, format="fr-otel: %(levelname)s: %(message)s", stream=sys.stderr
    )


cli.add_command(import_)
cli.add_command(analyze_)
cli.add_command(incidents)
cli.add_command(sql)
cli.add_command(fleet)
cli.add_command(mcp)
cli.add_command(export)
cli.add_command(simulate)
cli.add_command(demo)
cli.add_command(run)
cli.add_command(snapshot)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: the process's); return its exit code."""
    return run_translating_errors(cli, argv)


def entry() -> NoReturn:
    """The ``fr-otel`` console script (and ``python -m fr_otel``): ``main``, then the
    process ends (``_exit.end``)."""
    state.process_ends = True
    end(main())


__all__ = ["cli", "entry", "main"]
