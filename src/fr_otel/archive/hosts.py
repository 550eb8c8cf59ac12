"""Where each rank of imported dumps ran: from the dump files' names, or a map a launcher
wrote.

A Flight Recorder dump does not say which host wrote it, but real jobs often put the host
in ``TORCH_FR_DUMP_TEMP_FILE``'s prefix, which ``dumps.discover.host_in_name`` reads.
``fr-otel import --hosts FILE`` names them instead (and wins over the names), as JSON or CSV:

- JSON: an object ``{"0": "node-a", "1": "node-a", ...}`` (rank -> host), or a list of
  objects ``[{"rank": 0, "host": "node-a", "local_rank": 0, "device": "GPU-..."}, ...]``;
- CSV: a header naming ``rank`` and ``host`` (and optionally ``local_rank``, ``device``),
  then one line per rank.

A map file that cannot be used is refused whole (``ConfigError`` naming the file, and the
line or entry, and the problem): a silently wrong host would blame the wrong machine.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fr_otel.errors import ConfigError

_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$")
"""A host name, FQDN or address as launchers write them (no spaces, no slashes)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Placement:
    """Where a rank ran: the ``schema.HOST_COLUMNS`` of its rows."""

    host: str | None
    local_rank: int | None
    device: str | None
    """The GPU's UUID (``GPU-...``), else its PCI bus id; None on CPU."""


HostMap = Mapping[int, Placement]
"""Global rank -> where it ran."""


def read_host_map(path: Path) -> dict[int, Placement]:
    """The map in ``path`` (JSON or CSV, see the module's docstring); ``ConfigError`` when
    it cannot be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"--hosts {path}: cannot be read ({detail})") from None
    if not text.strip():
        raise ConfigError(f"--hosts {path}: empty; expected a JSON or CSV rank -> host map")
    if text.lstrip()[:1] in "[{":
        return _from_json(path, text)
    return _from_csv(path, text)


def _fail(path: Path, where: str, problem: str) -> ConfigError:
    return ConfigError(f"--hosts {path}: {where}: {problem}")


def _from_json(path: Path, text: str) -> dict[int, Placement]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _fail(path, "not JSON", str(exc)) from None
    found: dict[int, Placement] = {}
    if isinstance(data, dict):
        for key, host in data.items():
            _add(path, found, f"entry {key!r}", {"rank": key, "host": host})
    elif isinstance(data, list):
        for index, item in enumerate(data):
            if not isinstance(item, dict):
                raise _fail(path, f"entry {index}", "not an object with rank and host")
            _add(path, found, f"entry {index}", item)
    else:
        raise _fail(path, "the document", "expected an object (rank -> host) or a list")
    return found


def _from_csv(path: Path, text: str) -> dict[int, Placement]:
    reader = csv.DictReader(io.StringIO(text))
    names = [n.strip() for n in reader.fieldnames or []]
    if "rank" not in names or "host" not in names:
        raise _fail(
            path,
            "line 1",
            f"the header must name rank and host (and optionally local_rank, device), not"
            f" {','.join(names) or 'nothing'}",
        )
    found: dict[int, Placement] = {}
    for row in reader:
        item = {(k or "").strip(): (v or "").strip() for k, v in row.items() if k is not None}
        _add(path, found, f"line {reader.line_num}", item)
    return found


def _add(path: Path, found: dict[int, Placement], where: str, item: Mapping[str, Any]) -> None:
    rank = _whole(item.get("rank"))
    if rank is None:
        raise _fail(path, where, f"rank {item.get('rank')!r} is not a non-negative integer")
    host = item.get("host")
    if not isinstance(host, str) or not _HOST.match(host):
        raise _fail(path, where, f"host {host!r} is not a host name")
    local = item.get("local_rank")
    local_rank = None if local in (None, "") else _whole(local)
    if local not in (None, "") and local_rank is None:
        raise _fail(path, where, f"local_rank {local!r} is not a non-negative integer")
    device = item.get("device")
    if device is not None and not isinstance(device, str):
        raise _fail(path, where, f"device {device!r} is not text")
    if rank in found:
        raise _fail(path, where, f"rank {rank} appears twice")
    found[rank] = Placement(host=host, local_rank=local_rank, device=device or None)


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None
