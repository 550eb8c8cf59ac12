"""Each incident's fleet facts, kept beside the archive's rows: who was to blame, where it
ran, and how long its collectives took.

``ARCHIVE/_fleet/roles/job=J/incident=I/roles.pq``: one row per rank of the incident, with
the incident's verdict on every row (a view then needs no list functions, which differ from
engine to engine). ``ARCHIVE/_fleet/latency/job=J/incident=I/latency.pq``: the incident's
completed collectives, counted and timed by op, size bucket, group kind and day.

The suffix is ``.pq``, not ``.parquet``, so that the archive's ``**/*.parquet`` readers
never take them for rank rows; a leading ``_`` keeps Spark's listing of the archive off
them too. Both are derived data, like ``_entries.*.duckdb``: each file's footer holds a key
of the incident's rank files (names, sizes, modification times) and fr_otel's version, and
a file whose key is not the current one is made again. Making one runs the incident's
analysis: ``refresh`` does it once per incident, not once per query.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

import fr_otel
from fr_otel.errors import FrOtelError

if TYPE_CHECKING:
    import pyarrow as pa

    from fr_otel.analysis.findings import Analysis


FLEET_DIR = "_fleet"
ROLES = "roles"
LATENCY = "latency"
SUFFIX = ".pq"
KEY = b"fr_otel.fleet_key"
FACTS_VERSION = "1"
"""Part of every key: a change of what the facts hold makes them again."""


def facts_path(archive: Path, table: str, job: str, incident: str) -> Path:
    return archive / FLEET_DIR / table / f"job={job}" / f"incident={incident}" / f"{table}{SUFFIX}"


def facts_glob(archive: Path | str, table: str) -> str:
    """Every incident's file of ``table`` (``ROLES``, ``LATENCY``), as a glob: under a
    folder, or under a URL (``s3://bucket/archive``, ``fleet.object_store``)."""
    if isinstance(archive, str):
        return f"{archive.rstrip('/')}/{FLEET_DIR}/{table}/job=*/incident=*/*{SUFFIX}"
    return (archive / FLEET_DIR / table / "job=*" / "incident=*" / f"*{SUFFIX}").as_posix()


def incident_key(folder: Path) -> str:
    """What the facts of the incident in ``folder`` depend on."""
    digest = hashlib.sha256(f"{FACTS_VERSION}\0{fr_otel.__version__}\0".encode())
    for path in sorted(folder.glob("*.parquet")):
        try:
            stat = path.stat()
        except OSError:
            continue
        digest.update(f"{path.name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:32]


@dataclass(kw_only=True)
class Refreshed:
    """What ``refresh`` did."""

    made: list[tuple[str, str]] = field(default_factory=list)
    current: int = 0
    """Incidents whose facts were already current."""
    failed: list[tuple[str, str, str]] = field(default_factory=list)
    """(job, incident, why) of incidents that could not be analysed: left out."""


def refresh(
    archive: Path,
    *,
    job: str | None = None,
    workers: int = 1,
    on_incident: Callable[[str, str], None] | None = None,
) -> Refreshed:
    """Make the facts of every incident (of ``job``) whose facts are missing or stale, and
    remove those of incidents no longer in the archive. ``workers`` processes analyse
    incidents at once (each analysis is a DuckDB session of its own, with its memory
    limit); ``on_incident`` is called as each incident's facts are made."""
    from fr_otel.archive.incidents import incident_folders

    done = Refreshed()
    folders = [f for f in incident_folders(archive) if job is None or f.job == job]
    with contextlib.closing(duckdb.connect()) as connection:
        stored = {
            (f.job, f.incident): _stored_key(
                connection, facts_path(archive, ROLES, f.job, f.incident)
            )
            for f in folders
        }
    stale: list[tuple[str, str, str]] = []
    for folder in folders:
        if folder.writer is not None:
            continue  # an import is writing it: next time
        key = incident_key(folder.folder)
        if stored[(folder.job, folder.incident)] == key:
            done.current += 1
        else:
            stale.append((folder.job, folder.incident, key))
    for (job_name, incident, _), failure in _make_all(archive, stale, workers):
        if failure is None:
            done.made.append((job_name, incident))
            if on_incident is not None:
                on_incident(job_name, incident)
        else:  # one incident's damage leaves the fleet's view to the rest
            done.failed.append((job_name, incident, failure))
    done.made.sort()
    done.failed.sort()
    _forget_removed(archive, {(f.job, f.incident) for f in folders}, job)
    return done


_INLINE_MAX = 2
"""Incidents below which a pool of workers costs more than it saves."""


def _make_all(
    archive: Path, stale: list[tuple[str, str, str]], workers: int
) -> Iterator[tuple[tuple[str, str, str], str | None]]:
    """Each of ``stale`` (job, incident, key) with why its facts could not be made (None
    when they were), in the order they are done."""
    if workers <= 1 or len(stale) <= _INLINE_MAX:
        for item in stale:
            yield item, _make(archive, *item)
        return
    from concurrent.futures import as_completed

    from fr_otel.archive.workers import new_pool, stop_pool

    pool = new_pool(min(workers, len(stale)))
    try:
        running = {pool.submit(_make, archive, *item): item for item in stale}
        for future in as_completed(running):
            yield running[future], future.result()
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def _make(archive: Path, job: str, incident: str, key: str) -> str | None:
    """Make one incident's facts files: None, or why they could not be made."""
    try:
        roles, latency = incident_facts(archive, job, incident)
    except FrOtelError as exc:
        return str(exc)
    for table, rows in ((LATENCY, latency), (ROLES, roles)):  # roles last: it holds the key
        _write(facts_path(archive, table, job, incident), rows, key)
    return None


def _stored_key(connection: duckdb.DuckDBPyConnection, path: Path) -> str | None:
    """The key ``path``'s footer holds (read by DuckDB: a query of current facts needs no
    pyarrow, a slow import)."""
    if not path.is_file():
        return None
    try:
        found = connection.execute(
            "SELECT value FROM parquet_kv_metadata(?) WHERE key = ?",
            [path.as_posix(), KEY],
        ).fetchall()
    except duckdb.Error:
        return None
    return bytes(found[0][0]).decode(errors="replace") if found else None


def _write(path: Path, table: pa.Table, key: str) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), KEY: key.encode()})
    staged = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, staged, compression="zstd")
    os.replace(staged, path)


def _forget_removed(archive: Path, present: set[tuple[str, str]], job: str | None) -> None:
    for table in (ROLES, LATENCY):
        for path in (archive / FLEET_DIR / table).glob(f"job=*/incident=*/*{SUFFIX}"):
            name = (
                path.parent.parent.name.removeprefix("job="),
                path.parent.name.removeprefix("incident="),
            )
            if (job is None or name[0] == job) and name not in present:
                path.unlink(missing_ok=True)


def incident_facts(archive: Path, job: str, incident: str) -> tuple[pa.Table, pa.Table]:
    """The roles and latency rows of one incident (its analysis runs here)."""
    from fr_otel.analysis.session import open_session

    with open_session(archive, job=job, incident=incident) as session:
        analysis = session.analysis
        connection = session.connection
        ranks = connection.execute(
            "SELECT rank, max(host), max(local_rank), max(device),"
            " max(coalesce(dump_time_ns, time_completed_ns, time_created_ns))"
            " FROM src_rows GROUP BY rank ORDER BY rank"
        ).fetchall()
        latency = latency_rows(connection, job, incident)
    return roles_table(analysis, job, incident, ranks), latency


def _ranks_text(ranks: Iterable[int]) -> str:
    return ",".join(str(r) for r in sorted(set(ranks)))


def roles_table(
    analysis: Analysis,
    job: str,
    incident: str,
    ranks: list[tuple[int, str | None, int | None, str | None, int | None]],
) -> pa.Table:
    """One row per rank: where it ran, what the analysis made of it, and the incident's
    verdict (the root cause's kind, or the first finding's; ``healthy`` without one)."""
    import pyarrow as pa

    from fr_otel.analysis.kinds import PERFORMANCE_KINDS

    findings = analysis.findings
    root = findings[analysis.root_cause] if analysis.root_cause is not None else None
    culprits: set[int] = set()
    stragglers: set[int] = set()
    waiting: set[int] = set()
    evidence: dict[int, str] = {}
    for index, finding in enumerate(findings):
        if finding.kind in PERFORMANCE_KINDS:
            stragglers.update(finding.culprit_ranks)
            named = finding.culprit_ranks
        elif root is None or index == analysis.root_cause:
            culprits.update(finding.culprit_ranks)
            waiting.update(finding.waiting_ranks)
            named = finding.culprit_ranks
        else:
            continue
        for rank in named:
            evidence.setdefault(rank, finding.summary)
    waiting -= culprits
    verdict = root.kind if root is not None else (findings[0].kind if findings else "healthy")
    hosts = {rank: host for rank, host, _, _, _ in ranks}
    # a rank named but without rows (a missing dump) still has a row: it took part
    known = {rank for rank, *_ in ranks}
    everyone = list(ranks) + [
        (rank, None, None, None, None)
        for rank in sorted((culprits | stragglers | set(analysis.missing_dumps)) - known)
    ]
    time_ns = max((t for *_, t in ranks if t is not None), default=None)
    day = (
        datetime.datetime.fromtimestamp(time_ns / 1e9, datetime.UTC).strftime("%Y-%m-%d")
        if time_ns is not None
        else None
    )
    rows = [
        {
            "job": job,
            "incident": incident,
            "rank": rank,
            "host": host,
            "local_rank": local_rank,
            "device": device,
            "culprit": rank in culprits,
            "straggler": rank in stragglers,
            "waiting": rank in waiting,
            "evidence": evidence.get(rank),
            "verdict": verdict,
            "summary": root.summary if root is not None else None,
            "culprit_ranks": _ranks_text(culprits),
            "culprit_hosts": ",".join(sorted({h for r in culprits if (h := hosts.get(r))})),
            "straggler_ranks": _ranks_text(stragglers),
            "world_size": analysis.world_size,
            "incident_time_ns": time_ns,
            "incident_day": day,
        }
        for rank, host, local_rank, device, _ in everyone
    ]
    return pa.Table.from_pylist(rows, schema=roles_schema())


ROLES_COLUMNS: tuple[tuple[str, str], ...] = (
    ("job", "VARCHAR"),
    ("incident", "VARCHAR"),
    ("rank", "BIGINT"),
    ("host", "VARCHAR"),
    ("local_rank", "BIGINT"),
    ("device", "VARCHAR"),
    ("culprit", "BOOLEAN"),
    ("straggler", "BOOLEAN"),
    ("waiting", "BOOLEAN"),
    ("evidence", "VARCHAR"),
    ("verdict", "VARCHAR"),
    ("summary", "VARCHAR"),
    ("culprit_ranks", "VARCHAR"),
    ("culprit_hosts", "VARCHAR"),
    ("straggler_ranks", "VARCHAR"),
    ("world_size", "BIGINT"),
    ("incident_time_ns", "BIGINT"),
    ("incident_day", "VARCHAR"),
)
"""The roles file's columns and their SQL types (docs/fleet.md)."""

LATENCY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("job", "VARCHAR"),
    ("incident", "VARCHAR"),
    ("day", "VARCHAR"),
    ("op", "VARCHAR"),
    ("group_kind", "VARCHAR"),
    ("size_bucket", "BIGINT"),
    ("calls", "BIGINT"),
    ("total_ms", "DOUBLE"),
    ("max_ms", "DOUBLE"),
)
"""The latency file's columns and their SQL types."""


def _arrow_schema(columns: tuple[tuple[str, str], ...]) -> pa.Schema:
    import pyarrow as pa

    types = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "BOOLEAN": pa.bool_()}
    return pa.schema([(name, types.get(kind, pa.float64())) for name, kind in columns])


def roles_schema() -> pa.Schema:
    return _arrow_schema(ROLES_COLUMNS)


_DTYPE_BYTES = {
    "Double": 8,
    "Long": 8,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "Float": 4,
    "Int": 4,
    "BFloat16": 2,
    "Half": 2,
    "Short": 2,
    "Byte": 1,
    "Char": 1,
    "Bool": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
}
"""Bytes per element of torch's dtype names as FR writes them; others count 4."""

_LATENCY_SQL = """
WITH done AS (
    SELECT
        op,
        CASE
            WHEN entry_p2p(is_p2p, op) THEN 'p2p'
            WHEN pg_desc IS NULL OR pg_desc = '' THEN 'undescribed'
            WHEN pg_desc = 'default_pg' THEN 'default_pg'
            ELSE regexp_replace(pg_desc, '[0-9]+$', '')
        END AS group_kind,
        coalesce(
            list_sum(list_transform(input_sizes, lambda s: coalesce(list_product(s), 1))), 0
        ) * coalesce(dtype_bytes[input_dtypes[1]], 4) AS size_bytes,
        coalesce(
            duration_ms,
            (time_completed_ns - time_started_ns) / 1e6,
            (time_completed_ns - time_created_ns) / 1e6
        ) AS latency_ms,
        CAST(to_timestamp(time_created_ns / 1e9) AS DATE) AS day
    FROM src_rows, (SELECT MAP($names, $bytes) AS dtype_bytes)
    WHERE state = 'completed' AND time_completed_ns IS NOT NULL AND time_created_ns > 0
)
SELECT
    $job AS job,
    $incident AS incident,
    strftime(day, '%Y-%m-%d') AS day,
    op,
    group_kind,
    CAST(CASE WHEN size_bytes < 1 THEN 0 ELSE pow(2, floor(log2(size_bytes))) END AS BIGINT)
        AS size_bucket,
    count(*) AS calls,
    sum(latency_ms) AS total_ms,
    max(latency_ms) AS max_ms
FROM done
WHERE latency_ms >= 0
GROUP BY ALL
ORDER BY ALL
"""


def latency_rows(connection: duckdb.DuckDBPyConnection, job: str, incident: str) -> pa.Table:
    """The incident's completed work, counted and timed by day, op, group kind and size
    bucket (the largest power of two not above its input's bytes). The latency is NCCL's
    own duration where timing was on, else from discovered start (or enqueue) to
    discovered completion, which the watchdog's polling rounds up."""
    relation = connection.sql(
        _LATENCY_SQL,
        params={
            "job": job,
            "incident": incident,
            "names": list(_DTYPE_BYTES),
            "bytes": list(_DTYPE_BYTES.values()),
        },
    )
    return relation.to_arrow_table().cast(latency_schema())


def latency_schema() -> pa.Schema:
    return _arrow_schema(LATENCY_COLUMNS)
