"""Typed errors -> one clear line on stderr and an exit code."""

from __future__ import annotations

import click

from fr_otel.errors import FrOtelError

EXIT_OK = 0
EXIT_FINDINGS = 1
"""Reserved for ``analyze``: the tool worked and found problems."""
EXIT_BAD_INPUT = 2
"""Unusable input, a usage error, or some input files that could not be used."""


def run_translating_errors(command: click.Command, argv: list[str] | None) -> int:
    try:
        result = command.main(args=argv, prog_name="fr-otel", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("fr-otel: aborted", err=True)
        return 130
    except click.UsageError as exc:
        exc.show()
        return EXIT_BAD_INPUT
    except click.ClickException as exc:
        click.echo(f"fr-otel: error: {exc.format_message()}", err=True)
        return EXIT_BAD_INPUT
    except FrOtelError as exc:
        click.echo(f"fr-otel: error: {exc}", err=True)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return EXIT_OK
    if isinstance(result, int):
        return result
    return EXIT_OK
