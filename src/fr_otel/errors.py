"""Typed errors that cross module boundaries. The CLI turns each into one line and an exit code."""

from __future__ import annotations

from pathlib import Path


class FrOtelError(Exception):
    """Base class of every error fr_otel raises on purpose."""


class DumpError(FrOtelError):
    """A Flight Recorder dump file that cannot be used.

    ``problem`` is a short machine-readable kind (``missing``, ``empty``, ``truncated``,
    ``corrupt``, ``foreign``, ``hostile``, ``unnamed``, ``duplicate``); ``detail`` says
    what exactly is wrong in words a user can act on.
    """

    def __init__(self, path: str | Path, problem: str, detail: str) -> None:
        from fr_otel.pathnames import printable

        self.path = printable(path)
        self.problem = problem
        self.detail = detail
        super().__init__(f"{self.path}: {problem}: {detail}")

    def __reduce__(self) -> tuple[type[DumpError], tuple[str, str, str]]:
        # import workers send these back to the parent process
        return (DumpError, (self.path, self.problem, self.detail))


class ArchiveError(FrOtelError):
    """An archive directory that cannot be written or read."""


class ConfigError(FrOtelError):
    """A setting (argument or environment variable) with an unusable value."""


class SimulationError(FrOtelError):
    """An impossible simulator request (bad world shape, unknown fault)."""


class MissingDependencyError(FrOtelError):
    """An optional dependency a command needs is not installed; the message says which
    extra brings it."""


class QueryRefused(FrOtelError):
    """A query an agent sent that the read-only SQL does not run (``agents.readonly_sql``):
    not one read-only statement, a table function outside the allowed ones, a file outside
    the archive, or past its time."""


class QueryFailed(FrOtelError):
    """A query an agent sent that DuckDB could not run (a mistake in it, not a refusal)."""


class IncidentChoiceError(ArchiveError):
    """An archive holds several incidents and none was named: never pick one silently.

    ``choices`` holds ``(job, incident)`` pairs, in the order they are listed.
    """

    def __init__(self, message: str, choices: list[tuple[str, str]]) -> None:
        self.choices = choices
        super().__init__(message)


class Terminated(KeyboardInterrupt):
    """``SIGTERM`` reached a command: it stops the way Ctrl-C stops it (cleaning up), and
    exits 143 (128 + the signal, as a shell reports it)."""
