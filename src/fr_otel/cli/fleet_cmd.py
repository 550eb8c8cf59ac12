"""``fr-otel fleet``: which hosts keep failing, over every incident of an archive."""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fr_otel import config
from fr_otel.cli._errors import EXIT_OK
from fr_otel.cli._options import engine_options, format_option, spark_engine
from fr_otel.errors import ArchiveError

if TYPE_CHECKING:
    from fr_otel.fleet.views import Scope

_DURATION = re.compile(r"^(\d+)\s*([mhdw])$")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_RANKING = "p_bound, z DESC"  # the strongest evidence first (docs/fleet.md)


def since_ns(text: str, now_ns: int | None = None) -> int:
    """``--since``: an ISO date or time (UTC unless it says), or a duration back from now
    (``30m``, ``12h``, ``7d``, ``2w``)."""
    found = _DURATION.match(text.strip().lower())
    if found is not None:
        now = time.time_ns() if now_ns is None else now_ns
        return now - int(found.group(1)) * _UNIT_S[found.group(2)] * 1_000_000_000
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither an ISO date (2026-01-31, 2026-01-31T12:00) nor a duration"
            " (30m, 12h, 7d, 2w)",
            param_hint="--since",
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp()) * 1_000_000_000


class _ArchiveOrURL(click.ParamType[Path | str]):
    """A folder that exists, or a URL of object storage (``s3://bucket/archive``), as is."""

    name = "archive"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Path | str:
        from fr_otel.fleet.object_store import url_scheme

        if isinstance(value, str) and url_scheme(value) not in (None, "file"):
            return value
        folder = click.Path(exists=True, file_okay=False, path_type=Path)
        return folder.convert(value.removeprefix("file://"), param, ctx)


@click.command("fleet")
@click.argument("archive", type=_ArchiveOrURL())
@click.option(
    "--since",
    default=None,
    metavar="DATE|DURATION",
    help="Only incidents since: an ISO date or time (UTC), or a duration back from now (7d).",
)
@click.option("--job", default=None, help="Only this job's incidents.")
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Hosts and findings to show.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Processes that analyse new incidents at once. Default: every core.",
)
@engine_options(
    "What runs the fleet views: DuckDB here, or Spark SQL (pip install 'fr-otel[spark]')."
)
@format_option(["text", "json"])
def fleet(
    archive: Path | str,
    since: str | None,
    job: str | None,
    top: int,
    workers: int | None,
    engine: str,
    spark_master: str,
    fmt: str,
) -> int:
    """Rank the hosts of ARCHIVE by how often its incidents blame them.

    Every incident is analysed once (kept in ARCHIVE/_fleet, made again when its rank
    files change). A host's rate is the share of its incidents that named one of its
    ranks culprit or straggler; a bad node's rate stands above the rest of the fleet's
    with 99.9% confidence over the whole fleet (docs/fleet.md), over at least two
    incidents. The views behind it (fleet_incidents, fleet_hosts, fleet_bad_nodes,
    fleet_latency) are in fr-otel sql. With --engine spark, each incident's analysis still
    runs here on DuckDB; only the views run on Spark, from the same SQL files.

    ARCHIVE may be a URL of object storage (s3://bucket/archive, with
    pip install 'fr-otel[s3]' for DuckDB and hadoop-aws for Spark): its incidents are not
    analysed here, the views read the facts made where they were archived.
    """
    from fr_otel.analysis.source import is_archive

    if isinstance(archive, Path) and not is_archive(archive):
        raise ArchiveError(f"{archive} is not an archive (no job=*/incident=*/*.parquet inside)")
    bound = since_ns(since) if since is not None else None
    report = _gather(archive, job, bound, top, config.import_workers(workers), engine, spark_master)
    if fmt == "json":
        sys.stdout.write(json.dumps(report, default=str) + "\n")
    else:
        click.echo(_text(report))
    return EXIT_OK


def _gather(
    archive: Path | str,
    job: str | None,
    bound: int | None,
    top: int,
    workers: int,
    engine: str,
    master: str,
) -> dict[str, Any]:
    from fr_otel.fleet.facts import refresh
    from fr_otel.fleet.views import Scope

    def note(job_name: str, incident: str) -> None:
        if sys.stderr.isatty():
            click.echo(f"fr-otel: analysed {job_name}/{incident}", err=True)

    if isinstance(archive, Path):  # a URL's facts were made where its incidents were written
        refreshed = refresh(archive, job=job, workers=workers, on_incident=note)
        for job_name, incident, why in refreshed.failed:
            click.echo(f"fr-otel: {job_name}/{incident}: left out ({why})", err=True)
    scope = Scope(job=job, since_ns=bound)
    with _views(engine, master, archive, scope) as rows:
        [totals] = rows(
            "SELECT count(*) AS incidents, count(DISTINCT job) AS jobs, min(time_ns) AS"
            " first_ns, max(time_ns) AS last_ns FROM fleet_incidents"
        )
        if isinstance(archive, str) and not totals["incidents"] and job is None and bound is None:
            raise ArchiveError(
                f"{archive} holds no fleet facts (_fleet/roles/job=*/incident=*/*.pq): make"
                " them with `fr-otel fleet ARCHIVE` where its incidents are written, then copy"
                " the archive"
            )
        [hosts] = rows("SELECT count(*) AS hosts FROM fleet_hosts")
        ranking = rows(f"SELECT * FROM fleet_bad_nodes ORDER BY {_RANKING}, host LIMIT {top}")
        findings = rows(
            "SELECT verdict, count(*) AS incidents, max(time_ns) AS last_ns,"
            " max(CONCAT(job, '/', incident)) AS example"
            f" FROM fleet_incidents GROUP BY verdict ORDER BY incidents DESC, verdict LIMIT {top}"
        )
        bad = rows(f"SELECT host FROM fleet_bad_nodes WHERE bad_node ORDER BY {_RANKING}, host")
    return {
        "archive": str(archive),
        "job": job,
        "since_ns": bound,
        **totals,
        **hosts,
        "bad_nodes": [r["host"] for r in bad],
        "ranking": ranking,
        "findings": findings,
    }


@contextlib.contextmanager
def _views(
    engine: str, master: str, archive: Path | str, scope: Scope
) -> Iterator[Callable[[str], list[dict[str, Any]]]]:
    """A query's rows as dicts, on ``engine``, with the fleet views of ``archive``."""
    if engine == "spark":
        spark = spark_engine()
        with spark.spark_session(master) as session:
            spark.register_fleet_views(session, archive, scope)
            yield lambda query: spark.rows(session, query)
        return
    import duckdb

    from fr_otel.fleet.views import register_fleet_views

    with contextlib.closing(duckdb.connect()) as connection:
        register_fleet_views(connection, archive, scope)

        def rows(query: str) -> list[dict[str, Any]]:
            try:
                relation = connection.sql(query)
                found = relation.fetchall()
            except duckdb.Error as exc:
                if isinstance(archive, Path):
                    raise
                from fr_otel.fleet.object_store import reason

                raise ArchiveError(f"{archive}: cannot read it: {reason(exc)}") from None
            return [dict(zip(relation.columns, row, strict=True)) for row in found]

        yield rows


def _day(ns: int | None) -> str:
    if ns is None:
        return "-"
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).strftime("%Y-%m-%d")


def _text(report: dict[str, Any]) -> str:
    from fr_otel.fleet.views import BAD_NODE_ALPHA

    sure = f"{(1 - BAD_NODE_ALPHA) * 100:g}%"
    scope = f" of job {report['job']}" if report["job"] else ""
    since = f" since {_day(report['since_ns'])}" if report["since_ns"] is not None else ""
    lines = [
        f"{report['incidents']} incidents{scope}{since} ({_day(report['first_ns'])} to"
        f" {_day(report['last_ns'])}), {report['jobs']} jobs, {report['hosts']} hosts",
        "",
    ]
    if report["bad_nodes"]:
        lines.append(
            f"BAD NODES (blamed above the fleet's rate, {sure} over every host): "
            + ", ".join(report["bad_nodes"])
        )
    else:
        lines.append(f"No bad node: none is blamed above the fleet's rate, {sure} over every host.")
    lines += ["", "Hosts, the strongest evidence of a rate above the rest of the fleet's first:"]
    header = f"  {'host':<24} {'incidents':>9} {'culprit':>7} {'straggler':>9} {'rate':>6}"
    lines.append(f"{header} {'base':>6} {'z':>6} {'confidence':>10}")
    for r in report["ranking"]:
        mark = "  BAD" if r["bad_node"] else ""
        lines.append(
            f"  {r['host']:<24} {r['incidents']:>9} {r['culprit']:>7} {r['straggler']:>9}"
            f" {r['rate']:>6.0%} {r['base_rate']:>6.0%} {r['z']:>6.2f}"
            f" {r['confidence']:>10.4f}{mark}"
        )
        if r["bad_node"] and r["evidence"]:
            lines.append(f"      latest: {r['evidence']}")
    lines += ["", "Top findings:"]
    for f in report["findings"]:
        lines.append(
            f"  {f['verdict']:<24} {f['incidents']:>5} incidents, latest {_day(f['last_ns'])}"
            f" (e.g. {f['example']})"
        )
    return "\n".join(lines)
