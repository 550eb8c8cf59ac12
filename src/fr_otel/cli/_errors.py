"""Every error -> one clear line on stderr and an exit code that means one thing.

| code | meaning |
|---|---|
| 0 | success; for ``analyze``: no problems found |
| 1 | ``analyze`` only: the tool worked and found problems |
| 2 | unusable input: bad arguments, files that could not be used, nothing to work on |
| 3 | an internal error (a bug): one line, the traceback only with ``-v`` |
| 130, 143 | interrupted by Ctrl-C (SIGINT), stopped by SIGTERM |

This is the one place where exceptions become exit codes.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import traceback
from collections.abc import Iterator
from types import FrameType

import click

from fr_otel.errors import FrOtelError, Terminated

EXIT_OK = 0
EXIT_FINDINGS = 1
"""Reserved for ``analyze``: the tool worked and found problems."""
EXIT_BAD_INPUT = 2
"""Unusable input, a usage error, or some input files that could not be used."""
EXIT_INTERNAL = 3
"""A bug in fr_otel (or in a library under it): never confused with a diagnosis."""
EXIT_LIVE_ABORTED = 4
"""``fr-otel run``: the live check named a desync and ended the job
(``FR_OTEL_LIVE_POLICY=abort``); otherwise ``run`` exits with its command's code."""
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


class _State:
    verbose = 0
    """``-v`` count, set by the command group before the command runs."""
    end_quickly = False
    """The command leaves nothing to finish but its exit code (``_exit``)."""
    process_ends = False
    """The process ends once the command returns (the console script, ``_exit.end``), not
    an in-process caller's ``main`` (tests)."""


state = _State()


def _raise_terminated(signum: int, _frame: FrameType | None) -> None:
    raise Terminated(f"signal {signum}")


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """``SIGTERM`` raises ``Terminated`` (a ``KeyboardInterrupt``) in the main thread, so
    that commands stop the way Ctrl-C stops them: workers stopped, temporary files
    removed. Commands that hand signals to a child (``run``) install their own."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupted(exc: BaseException) -> int:
    if isinstance(exc, Terminated):
        click.echo("fr-otel: stopped by SIGTERM", err=True)
        return EXIT_TERMINATED
    click.echo("fr-otel: interrupted", err=True)
    return EXIT_INTERRUPTED


def _os_error(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def run_translating_errors(command: click.Command, argv: list[str] | None) -> int:
    with terminate_as_interrupt():
        try:
            result = command.main(args=argv, prog_name="fr-otel", standalone_mode=False)
        except click.exceptions.Abort as exc:
            return _interrupted(exc.__cause__ or exc)
        except KeyboardInterrupt as exc:
            return _interrupted(exc)
        except click.exceptions.Exit as exc:
            return int(exc.exit_code)
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
        except OSError as exc:  # the machine's trouble (permissions, full disk), not ours
            click.echo(f"fr-otel: error: {_os_error(exc)}", err=True)
            return EXIT_BAD_INPUT
        except Exception as exc:
            return _internal(exc)
    if isinstance(result, int):
        return result
    return EXIT_OK


def _internal(exc: Exception) -> int:
    first = (str(exc).strip().splitlines() or [""])[0]
    import duckdb

    from fr_otel.analysis.source import is_read_error
    from fr_otel.config import FR_OTEL_ANALYSIS_MEMORY, analysis_memory

    if isinstance(exc, duckdb.OutOfMemoryException):
        click.echo(
            f"fr-otel: error: DuckDB needs more memory than {FR_OTEL_ANALYSIS_MEMORY} allows"
            f" ({analysis_memory()}; past it, it spills to disk): raise it, e.g."
            f" {FR_OTEL_ANALYSIS_MEMORY}=8GB ({first})",
            err=True,
        )
        return EXIT_BAD_INPUT

    if is_read_error(exc):
        # DuckDB could not decode a file, and checking every page did not find which
        click.echo(f"fr-otel: error: cannot read the archive: {first}", err=True)
        if state.verbose:
            traceback.print_exception(exc, file=sys.stderr)
        return EXIT_BAD_INPUT
    click.echo(
        f"fr-otel: internal error: {type(exc).__name__}: {first}"
        + ("" if state.verbose else " (a bug in fr-otel; run with -v for the traceback)"),
        err=True,
    )
    if state.verbose:
        traceback.print_exception(exc, file=sys.stderr)
    return EXIT_INTERNAL
