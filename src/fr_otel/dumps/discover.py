"""Finding dump files and telling each one's rank from its name.

Real jobs name dumps ``<prefix><rank>`` (torch's ``DebugInfoWriter``), where the prefix
is whatever ``TORCH_FR_DUMP_TEMP_FILE`` said:

- ``nccl_trace_rank_<N>`` (older torch, the tutorial), ``comm_lib_trace_rank_<N>``
  (torch's current default), ``comm_traces/rank_<N>`` (torchtitan);
- the same with ``.json`` (or ``.pkl``/``.pickle``) appended by tools that dump JSON;
- ``<prefix>_quorum_<id>/<N>`` (torchft's dynamic file name, one folder per quorum);
- ``nccl_trace_rank_<host>_<N>`` and ``<host>.pci3_rank_<N>`` (host in the name, which
  the rows keep: ``host_in_name``; the rank is the last number);
- ``_fr_dumps/job=<J>/run=<R>/incident=<I>/comm_lib_trace_rank_<N>`` (torch's own dumps
  the recorder saved beside an incident), whose folders name the job and the incident.

The rank is always the trailing number of the file name. Files inside a directory that
do not end in a number (logs, READMEs, Parquet) are not dumps and are skipped; a file
named explicitly on the command line is always taken, so that a bad name is reported.

OTLP JSON lines files (spans, not dumps: ``fr-otel export --otlp-json``, the Collector's
file exporter and its rotated files) are found the same way, named or inside folders, and
kept apart (``Discovery.spans``): ``*.jsonl``, and ``*.json`` files that begin as the file
exporter writes them (a rotated ``spans-2026-08-22T10-15-00.123.json`` ends in a number,
yet is no rank's dump).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_DUMP_NAME = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?P<suffix>\.json|\.pkl|\.pickle)?$")
_QUORUM_DIR = re.compile(r"_quorum_(?P<quorum>[A-Za-z0-9.-]+)$")
_PARTITION_DIR = re.compile(r"(?:^|/)(job|incident)=([A-Za-z0-9][A-Za-z0-9._-]{0,127})(?=/)")
"""A ``job=J`` or ``incident=I`` folder (a valid archive folder name: ``config``)."""
_GLOB_CHARS = frozenset("*?[")
SPANS_SUFFIX = ".jsonl"
"""OTLP JSON lines: the suffix fr_otel and the Collector configs give span files."""
_SPANS_HEADS = (b'{"resourceSpans"', b'{"resource_spans"')


@dataclass(frozen=True, kw_only=True, slots=True)
class DumpFile:
    """One dump file and what its name says about it."""

    path: Path
    rank: int | None
    """Global rank from the file name; None when the name carries no rank."""
    quorum: str | None = None
    """torchft quorum id from the parent folder (``..._quorum_<id>/<rank>``)."""
    job: str | None = None
    """The job a ``job=J`` folder in the path names (the innermost such folder)."""
    incident: str | None = None
    """The incident an ``incident=I`` folder in the path names (the innermost)."""
    host: str | None = None
    """The host the name holds (``<host>.pci3_rank_N``: ``archive.hosts.host_in_name``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Discovery:
    """What a set of command-line paths expanded to."""

    files: list[DumpFile]
    missing: list[str]
    """Paths or globs that matched nothing."""
    empty: list[tuple[str, list[str]]] = field(default_factory=list)
    """Directories (or globs) that exist but hold no dump and no span file, with the first
    few file names they do hold."""
    spans: list[Path] = field(default_factory=list)
    """OTLP JSON lines files (see ``is_spans_file``), sorted, without duplicates."""


def parse_dump_name(path: Path) -> DumpFile:
    """Read the rank (and torchft quorum) off a dump file's name, and the job and
    incident off its folders (``job=J``, ``incident=I``, as the recorder saves torch's
    dumps: the run id's ``run=R`` is read with the file, ``parse.run_id_of``)."""
    match = _DUMP_NAME.match(path.name)
    quorum_match = _QUORUM_DIR.search(path.parent.name)
    quorum = quorum_match.group("quorum") if quorum_match else None
    # the innermost of each: later matches overwrite earlier ones
    folders = dict(_PARTITION_DIR.findall(path.as_posix()))
    return DumpFile(
        path=path,
        rank=int(match.group("rank")) if match is not None else None,
        quorum=quorum,
        job=folders.get("job"),
        incident=folders.get("incident"),
        host=host_in_name(match.group("prefix")) if match is not None else None,
    )


_DOTTED = re.compile(
    r"^(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*?[A-Za-z][A-Za-z0-9-]*)\.(?:[A-Za-z0-9-]*_)?rank_?$"
)
_TRACE = re.compile(r"(?:^|_)rank_(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*)_$")


def host_in_name(prefix: str) -> str | None:
    """The host in a dump file name's ``prefix`` (the name without its rank and suffix), or
    None where it names none. Real jobs often put it in ``TORCH_FR_DUMP_TEMP_FILE``:

    - ``<host>.pci3_rank_<N>``: the host, a dot, then a tag (a PCI slot, a job step) that
      ends in ``rank_``; the host is everything before the last dot of the prefix;
    - ``nccl_trace_rank_<host>_<N>`` (any ``..._rank_<host>_`` prefix): the host between
      ``rank_`` and the rank.
    """
    trace = _TRACE.search(prefix)
    if trace is not None and any(c.isalpha() for c in trace.group("host")):
        return trace.group("host")
    dotted = _DOTTED.match(prefix)
    if dotted is not None:
        return dotted.group("host")
    return None


def _looks_like_dump(name: str) -> bool:
    return _DUMP_NAME.match(name) is not None and not name.startswith(".")


def is_spans_file(path: Path) -> bool:
    """OTLP JSON lines: a ``*.jsonl`` file, or a ``*.json`` file that starts the way the
    Collector's file exporter starts one (``data.json``, a rotated
    ``data-2026-11-29T10-00-00.000.json``), not the way an FR JSON dump does."""
    if path.name.startswith("."):
        return False
    if path.suffix == SPANS_SUFFIX:
        return True
    if path.suffix != ".json" or not path.is_file():
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(64).lstrip()
    except OSError:
        return False
    return head.startswith(_SPANS_HEADS)


def _walk(directory: Path, others: list[str] | None = None) -> tuple[list[Path], list[Path]]:
    """(dumps, span files) under ``directory``; ``others`` collects a few other names."""
    dumps: list[Path] = []
    spans: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(root) / name
            if is_spans_file(path):
                spans.append(path)
            elif _looks_like_dump(name):
                dumps.append(path)
            elif others is not None and len(others) < 10:
                others.append(os.path.relpath(path, directory))
    return dumps, spans


def _identity(path: Path) -> tuple[int, int] | Path:
    """What makes two paths one file: its device and inode (links, and the same folder
    named twice, are one file), or its resolved path where it cannot be read. One stat,
    where ``resolve`` makes one syscall per path component, for every dump of the folder,
    and ``analyze`` lists the folder twice."""
    try:
        stat = path.stat()
    except OSError:
        return path.resolve()
    return stat.st_dev, stat.st_ino


def discover(paths: list[str | Path]) -> Discovery:
    """Expand files, directories (recursively) and globs into dump files and span files.

    The result is sorted by path and has no duplicates, so the same arguments always
    give the same order.
    """
    seen: dict[tuple[int, int] | Path, DumpFile] = {}
    spans_seen: dict[tuple[int, int] | Path, Path] = {}
    missing: list[str] = []
    empty: list[tuple[str, list[str]]] = []
    for raw in paths:
        text = str(raw)
        path = Path(text)
        candidates: list[Path] = []
        spans: list[Path] = []
        if path.is_dir():
            others: list[str] = []
            candidates, spans = _walk(path, others)
            if not candidates and not spans:
                empty.append((text, others))
        elif path.exists():
            (spans if is_spans_file(path) else candidates).append(path)
        elif _GLOB_CHARS & set(text):
            for hit in sorted(glob.glob(text, recursive=True)):
                hit_path = Path(hit)
                if hit_path.is_dir():
                    dumps_below, spans_below = _walk(hit_path)
                    candidates.extend(dumps_below)
                    spans.extend(spans_below)
                elif is_spans_file(hit_path):
                    spans.append(hit_path)
                elif _looks_like_dump(hit_path.name):
                    candidates.append(hit_path)
            if not candidates and not spans:
                missing.append(text)
        else:
            missing.append(text)
        for candidate in candidates:
            key = _identity(candidate)
            if key not in seen:
                seen[key] = parse_dump_name(candidate)
        for span_file in spans:
            spans_seen.setdefault(_identity(span_file), span_file)
    files = sorted(seen.values(), key=lambda f: str(f.path))
    return Discovery(
        files=files,
        missing=missing,
        empty=empty,
        spans=sorted(spans_seen.values(), key=str),
    )
