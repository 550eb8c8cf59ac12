"""The live check's records on disk: ``ARCHIVE/_live/job=<job>/run=<run>/<id>.json``.

Beside ``_rings`` and ``_fr_dumps``, which are kept per job and run too. A desync's
verdict (``verdict.Verdict``) and a stall's suspect (``suspect.StallSuspect``) are each
one JSON object, written whole; ``read_records`` gives them back to ``fr-otel incidents``
and ``analyze``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

LIVE_DIR = "_live"
RECORD_VERSION = 1


class LiveRecord(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def job(self) -> str: ...

    @property
    def run_id(self) -> str | None: ...

    def to_dict(self) -> dict[str, Any]: ...


def record_path(archive: Path, record: LiveRecord) -> Path:
    folder = archive / LIVE_DIR / f"job={record.job}"
    if record.run_id:
        folder = folder / f"run={record.run_id}"
    return folder / f"{record.id}.json"


def write_record(archive: Path, record: LiveRecord) -> Path:
    """Write (or replace) a record; a reader never sees half of it."""
    path = record_path(archive, record)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(record.to_dict(), indent=2) + "\n")
    os.replace(partial, path)
    return path


@dataclass(frozen=True, kw_only=True)
class StoredRecord:
    """A record as read back: where it is, and its fields (``to_dict``'s)."""

    path: Path
    fields: dict[str, Any]

    @property
    def incident(self) -> str | None:
        value = self.fields.get("incident")
        return value if isinstance(value, str) else None

    @property
    def job(self) -> str | None:
        """The job whose folder (``job=<job>``) holds it, which ``read_records`` filters by."""
        for folder in (self.path.parent, self.path.parent.parent):  # run=<run> may be absent
            if folder.name.startswith("job="):
                return folder.name.removeprefix("job=")
        return None


@dataclass(frozen=True, kw_only=True)
class UnreadableRecord:
    path: Path
    problem: str


def read_records(
    archive: Path, job: str | None = None
) -> tuple[list[StoredRecord], list[UnreadableRecord]]:
    """Every record under ``archive`` (of one job, when given), oldest first by id, and
    the files that are not records, each with its problem."""
    root = archive / LIVE_DIR
    pattern = f"job={job}/**/*.json" if job is not None else "job=*/**/*.json"
    found: list[StoredRecord] = []
    bad: list[UnreadableRecord] = []
    for path in sorted(root.glob(pattern)):
        if path.name.startswith("."):
            continue  # being written
        try:
            fields = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            bad.append(UnreadableRecord(path=path, problem=str(exc)))
            continue
        if not isinstance(fields, dict) or not isinstance(fields.get("id"), str):
            bad.append(UnreadableRecord(path=path, problem="not a live check record (no id)"))
            continue
        found.append(StoredRecord(path=path, fields=fields))
    found.sort(key=lambda record: str(record.fields["id"]))
    return found, bad
