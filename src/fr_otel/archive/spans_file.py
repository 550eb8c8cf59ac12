"""One OTLP JSON lines file read back into fr_otel's rows (``fr_otel.otel.otlp_import``),
what is wrong with it named like a bad dump's problem."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from fr_otel.dumps.parse import EXPANSION_FACTOR, EXPANSION_FLOOR
from fr_otel.errors import DumpError


@dataclass(frozen=True, kw_only=True, slots=True)
class SpansRead:
    """What one OTLP JSON lines file gave: fr_otel's rows, and what is wrong with it."""

    table: pa.Table | None
    """The rows of its fr_otel spans (of its complete lines, when it is cut short)."""
    problem: DumpError | None
    skipped: int = 0
    """Spans that are not fr_otel's (other services' spans in a Collector's archive)."""


def _span_members_bound(size: int) -> int:
    """How many ranks the member runs of ``size`` bytes of spans may name in all: what
    their rows' ``pg_ranks`` (8 bytes a member) may hold under the bound dumps have."""
    return (EXPANSION_FACTOR * size + EXPANSION_FLOOR) // 8


def read_spans_file(path: Path) -> SpansRead:
    """fr_otel's rows from an OTLP JSON lines file; never raises for a bad file.

    Problems, named like a bad dump's: ``missing``; ``empty`` (no line, or no span);
    ``foreign`` (not OTLP JSON lines, OTLP of another signal, or only other tools'
    spans); ``corrupt`` (a line inside that is not OTLP JSON); ``truncated`` (the last
    line cut short, as a file still being written or copied half-way has it: the
    complete lines before it are still read).
    """
    from fr_otel.otel.otlp_import import ExpandingSpansError, SpanRows

    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return SpansRead(table=None, problem=DumpError(path, "missing", "no such file"))
    except OSError as exc:
        return SpansRead(
            table=None,
            problem=DumpError(path, "missing", f"cannot be read: {exc.strerror or exc}"),
        )
    complete = 0
    cut_at: int | None = None
    with handle:
        rows = SpanRows(max_members=_span_members_bound(os.fstat(handle.fileno()).st_size))
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
                if complete == 0 and not line.lstrip().startswith(b"{"):
                    return SpansRead(table=None, problem=_not_json_lines(path))
                if not line.endswith(b"\n"):  # the last line, without its end
                    cut_at = number
                    break
                return SpansRead(
                    table=None,
                    problem=DumpError(path, "corrupt", f"line {number} is not JSON: {exc}"),
                )
            if not isinstance(data, dict) or not {"resourceSpans", "resource_spans"} & set(data):
                held = ", ".join(sorted(data)[:3]) if isinstance(data, dict) else "no object"
                return SpansRead(
                    table=None,
                    problem=DumpError(
                        path,
                        "foreign",
                        f"line {number} is not OTLP trace data (it holds {held or 'nothing'},"
                        " not resourceSpans): only spans are imported",
                    ),
                )
            try:
                rows.add_json(data)
            except ExpandingSpansError as exc:
                return SpansRead(table=None, problem=DumpError(path, "hostile", str(exc)))
            except (ValueError, TypeError) as exc:  # not OTLP JSON, or not fr_otel's JSON text
                return SpansRead(
                    table=None,
                    problem=DumpError(path, "corrupt", f"line {number} is not OTLP JSON: {exc}"),
                )
            complete += 1
    if complete == 0 and cut_at is None:
        return SpansRead(table=None, problem=DumpError(path, "empty", "the file has no line"))
    imported = rows.result()
    table = imported.table
    if cut_at is not None:
        read = (
            f"the {table.num_rows} entries of the {complete} complete line(s) before it were read"
            if complete
            else "no complete line precedes it: nothing was read"
        )
        problem = DumpError(
            path,
            "truncated",
            f"line {cut_at}, the last, is cut short (a file still being written, or copied"
            f" before it was complete); {read}",
        )
    elif table.num_rows == 0 and imported.skipped:
        problem = DumpError(
            path,
            "foreign",
            f"none of its {imported.skipped} spans is fr_otel's (no fr_otel.rank and"
            " fr_otel.record_id attributes)",
        )
    elif table.num_rows == 0:
        problem = DumpError(path, "empty", f"its {complete} line(s) hold no span")
    else:
        problem = None
    return SpansRead(table=table, problem=problem, skipped=imported.skipped)


def _not_json_lines(path: Path) -> DumpError:
    return DumpError(
        path,
        "foreign",
        "not OTLP JSON lines (its first line is not a JSON object); the Collector's file"
        " exporter writes them with format: json and no compression",
    )
