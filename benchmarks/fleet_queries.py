"""Fleet queries: the four fleet views on DuckDB and on Spark (local mode), over one archive.

A simulated fleet's archive (``fr_otel.fleet.simulated``) with planted bad hosts:
``--incidents`` incidents, each of ``--min-ranks`` to ``--max-ranks`` ranks (whole hosts of
``--ranks-per-host``, drawn from a pool of ``--hosts``), most of them hung, some slow. Then,
in one run:

- the fleet facts (``ARCHIVE/_fleet``: each incident's analysis, reduced to its roles and
  latency rows) are made, timed apart: a one-time cost per incident, paid when it lands,
  by ``--workers`` processes (every core by default, as ``fr-otel fleet``); with
  ``--facts-in-turn``, made again by one process, the peer figure;
- each engine runs in a process of its own: it registers the fleet views over the facts
  (``fleet.views``, ``fleet.spark``) and reads every row of each view, ``--repeat`` times;
  the first read (what one ``fr-otel fleet`` pays) and the best are shown;
- peak memory: the RSS of the engine's process tree (the JVM is a child of PySpark's
  Python process), sampled from /proc every 20 ms;
- the rows of each view on both engines, compared as sorted multisets (floats to 9
  significant digits).

The two engines are the pair, as a peer is elsewhere: Spark's figure beside DuckDB's.

Goals (issue 46): the bad-node ranking puts every planted bad host above every healthy one;
DuckDB answers each fleet view in under 10 s; Spark's results equal DuckDB's.

``--year COPIES`` then times the views again over that many copies of the facts (each
copy's incidents renamed, its hosts spread over a 100,000-GPU fleet's 12,500), compacted
into one file per table: the year of docs/fleet.md's "At fleet scale", read once per view.

``--keep`` reuses the archive under ``--out`` when it was made with the same settings (with
the build times measured then), since generating a large fleet takes long.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

VIEWS = ("fleet_incidents", "fleet_hosts", "fleet_bad_nodes", "fleet_latency")
DUCKDB_GOAL_S = 10.0
SAMPLE_S = 0.02
YEAR_HOSTS = 12_500
"""A 100,000-GPU fleet's hosts, at 8 GPUs a host."""


def _plain(value: Any) -> Any:
    """A view's value as JSON carries it, the same from either engine."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    return value


def _run_views(
    engine: str, archive: Path, repeat: int, master: str, *, flat: bool = False
) -> dict[str, Any]:
    """In the engine's own process: register the views, then read each one ``repeat``
    times. ``flat``: the facts are one file per table (``_replicate``), whose rows' job and
    incident DuckDB must not take from the folder's names."""
    result: dict[str, Any] = {"views": {}}
    start = time.perf_counter()
    if engine == "duckdb":
        import duckdb

        from fr_otel.fleet.views import register_fleet_views

        connection = duckdb.connect()
        result["start_s"] = time.perf_counter() - start
        begun = time.perf_counter()
        if flat:
            _register_flat(connection, archive)
        else:
            register_fleet_views(connection, archive)

        def read(query: str) -> tuple[list[str], list[list[Any]]]:
            relation = connection.sql(query)
            return list(relation.columns), [list(row) for row in relation.fetchall()]

        result["register_s"] = time.perf_counter() - begun
        _time_views(result, read, repeat)
        connection.close()
    else:
        from fr_otel.fleet import spark

        with spark.spark_session(master) as session:
            result["start_s"] = time.perf_counter() - start
            begun = time.perf_counter()
            spark.register_fleet_views(session, archive)
            result["register_s"] = time.perf_counter() - begun

            def read(query: str) -> tuple[list[str], list[list[Any]]]:
                rows = spark.rows(session, query)
                columns = list(rows[0]) if rows else list(session.sql(query).columns)
                return columns, [list(row.values()) for row in rows]

            _time_views(result, read, repeat)
    return result


def _register_flat(connection: Any, archive: Path) -> None:
    from fr_otel.analysis.sqlfiles import sql_string
    from fr_otel.fleet import facts
    from fr_otel.fleet.views import FLEET_VIEWS, view_sql

    for table, name in ((facts.ROLES, "fleet_roles"), (facts.LATENCY, "fleet_latency_rows")):
        files = sql_string(facts.facts_glob(archive, table))
        connection.execute(
            f"CREATE TEMP VIEW {name} AS FROM read_parquet({files}, hive_partitioning = false)"
        )
    for name in FLEET_VIEWS:
        connection.execute(f"CREATE TEMP VIEW {name} AS {view_sql(name)}")


def _time_views(result: dict[str, Any], read: Any, repeat: int) -> None:
    for view in VIEWS:
        times = []
        for _ in range(repeat):
            begun = time.perf_counter()
            columns, rows = read(f"SELECT * FROM {view}")
            times.append(time.perf_counter() - begun)
        result["views"][view] = {
            "first_s": times[0],
            "best_s": min(times),
            "columns": columns,
            "rows": [[_plain(v) for v in row] for row in rows],
        }


def _tree_rss(root: int) -> int:
    """Bytes resident in ``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            statm = Path(f"/proc/{entry}/statm").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
        rss[int(entry)] = int(statm.split()[1]) * page
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


def _engine(
    engine: str, archive: Path, args: argparse.Namespace, repeat: int, *, flat: bool
) -> dict[str, Any]:
    """Run ``engine``'s views in a child process; its result and the tree's peak RSS."""
    out = args.out / f"{engine}.json"
    out.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--child", engine, "--out", str(args.out)]
    command += ["--archive", str(archive), "--repeat", str(repeat)]
    command += ["--spark-master", args.spark_master, *(["--flat"] if flat else [])]
    began = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss(child.pid))
            done.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    log, _ = child.communicate()
    done.set()
    sampler.join()
    wall = time.perf_counter() - began
    if child.returncode != 0 or not out.exists():
        tail = "\n".join(log.strip().splitlines()[-8:])
        return {"error": f"exit {child.returncode}: {tail}"}
    result: dict[str, Any] = json.loads(out.read_text())
    result["peak_rss"] = peak
    result["wall_s"] = wall
    return result


def _key(row: list[Any]) -> tuple[str, ...]:
    def one(value: Any) -> str:
        if isinstance(value, float):
            return "nan" if math.isnan(value) else f"{value:.9g}"
        return repr(value)

    return tuple(one(v) for v in row)


def _same(a: dict[str, Any], b: dict[str, Any]) -> tuple[bool, str]:
    if a["columns"] != b["columns"]:
        return False, f"columns {a['columns']} vs {b['columns']}"
    left, right = sorted(map(_key, a["rows"])), sorted(map(_key, b["rows"]))
    if left == right:
        return True, ""
    only = sorted(set(left) ^ set(right))
    return False, f"{len(only)} rows differ, e.g. {only[0] if only else '(counts)'}"


def _ranking(view: dict[str, Any], bad: list[str]) -> tuple[bool, str]:
    """Whether every planted bad host comes before every healthy one in the ranking's
    order (``p_bound``, then ``z`` descending: docs/fleet.md)."""
    columns = view["columns"]
    hosts = [dict(zip(columns, row, strict=True)) for row in view["rows"]]
    hosts.sort(key=lambda h: (h["p_bound"], -h["z"], h["host"]))
    places = [i for i, h in enumerate(hosts) if h["host"] in bad]
    met = len(places) == len(bad) and places == list(range(len(bad)))
    last_bad = hosts[places[-1]] if places else None
    first_good = next((h for h in hosts if h["host"] not in bad), None)
    flagged = sorted(h["host"] for h in hosts if h["bad_node"])

    def shown(host: dict[str, Any] | None) -> str:
        if host is None:
            return "-"
        return f"{host['host']} (p_bound {host['p_bound']:.3g}, z {_z(host['z'])})"

    return met, (
        f"planted {len(bad)} ({', '.join(bad)}); last bad host {shown(last_bad)}, first"
        f" healthy {shown(first_good)}; flagged bad_node: {', '.join(flagged) or 'none'}"
    )


def _z(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _facts_in_turn(archive: Path, built: dict[str, Any]) -> None:
    """The peer of the pooled facts: the same incidents' facts made again one after
    another (``workers=1``, how ``refresh`` made them before it had workers)."""
    from fr_otel.fleet import facts

    shutil.rmtree(archive / facts.FLEET_DIR)
    begun = time.perf_counter()
    refreshed = facts.refresh(archive, workers=1)
    in_turn_s = time.perf_counter() - begun
    print(
        f"  the same facts made in turn (1 process): {len(refreshed.made)} incidents in"
        f" {in_turn_s:.1f} s; {built.get('workers', 1)} workers took"
        f" {built['facts_s'] / in_turn_s:.2f}x that"
    )


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        name: getattr(args, name)
        for name in (
            "incidents",
            "min_ranks",
            "max_ranks",
            "ranks_per_host",
            "hosts",
            "bad_hosts",
            "slow_share",
            "seed",
        )
    }


def _build(args: argparse.Namespace, archive: Path) -> dict[str, Any]:
    """The archive and its facts, made now or (``--keep``) as made before."""
    from fr_otel.fleet import facts
    from fr_otel.fleet.simulated import FleetArchiveSpec, write_fleet_archive

    record = args.out / "build.json"
    settings = _settings(args)
    if args.keep and record.exists():
        built: dict[str, Any] = json.loads(record.read_text())
        if built["settings"] == settings and archive.is_dir():
            begun = time.perf_counter()
            refreshed = facts.refresh(archive, workers=args.workers)
            if refreshed.made:  # stale facts (another fr_otel version): made again now
                built["facts_s"] = time.perf_counter() - begun
                built["facts_made"] = len(refreshed.made)
                built["workers"] = args.workers
                built["load"] = os.getloadavg()[0]
                built["sizes"] = _sizes(archive)
                record.write_text(json.dumps(built, indent=2) + "\n")
            built["kept"] = True
            return built
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    for name in ("min_ranks", "max_ranks"):
        if getattr(args, name) % args.ranks_per_host:
            raise SystemExit(f"--{name.replace('_', '-')}: a multiple of --ranks-per-host")
    spec = FleetArchiveSpec(
        incidents=args.incidents,
        hosts=args.hosts,
        hosts_per_incident=args.min_ranks // args.ranks_per_host,
        max_hosts_per_incident=args.max_ranks // args.ranks_per_host,
        ranks_per_host=args.ranks_per_host,
        bad_hosts=args.bad_hosts,
        bad_share=0.9,
        slow_share=args.slow_share,
        seed=args.seed,
    )
    print(f"generating {args.incidents} incidents into {archive} ...", flush=True)
    begun = time.perf_counter()
    truth = write_fleet_archive(spec, archive)
    generate_s = time.perf_counter() - begun
    begun = time.perf_counter()
    refreshed = facts.refresh(archive, workers=args.workers)
    facts_s = time.perf_counter() - begun
    if refreshed.failed:
        raise SystemExit(f"incidents left out of the facts: {refreshed.failed[:3]}")
    built = {
        "settings": settings,
        "bad_hosts": truth.bad_hosts,
        "generate_s": generate_s,
        "facts_s": facts_s,
        "workers": args.workers,
        "facts_made": len(refreshed.made),
        "sizes": _sizes(archive),
        "load": os.getloadavg()[0],
    }
    record.write_text(json.dumps(built, indent=2) + "\n")
    built["kept"] = False
    return built


def _sizes(archive: Path) -> dict[str, dict[str, int]]:
    """Rows, bytes and files of the archive's rank rows and of each facts table."""
    import duckdb

    from fr_otel.fleet import facts

    globs = {
        "archive rows": (archive / "job=*" / "incident=*" / "*.parquet").as_posix(),
        "facts: roles": facts.facts_glob(archive, facts.ROLES),
        "facts: latency": facts.facts_glob(archive, facts.LATENCY),
    }
    sizes: dict[str, dict[str, int]] = {}
    with duckdb.connect() as connection:
        for name, glob in globs.items():
            files = [Path(f) for (f,) in connection.execute("FROM glob(?)", [glob]).fetchall()]
            [(rows,)] = connection.execute(
                "SELECT coalesce(sum(num_rows), 0) FROM parquet_file_metadata(?)",
                [glob],
            ).fetchall()
            sizes[name] = {
                "rows": int(rows),
                "bytes": sum(f.stat().st_size for f in files),
                "files": len(files),
            }
    return sizes


def _replicate(archive: Path, into: Path, copies: int, hosts: int) -> dict[str, int]:
    """``copies`` copies of ``archive``'s facts as one file per table under ``into``: each
    copy's incidents renamed, and its hosts too, so that the pool grows to about
    ``YEAR_HOSTS``."""
    import duckdb

    from fr_otel.fleet import facts

    shutil.rmtree(into, ignore_errors=True)
    spread = max(1, math.ceil(YEAR_HOSTS / hosts))
    renamed = {
        "incident": "incident || '~' || CAST(k AS VARCHAR)",
        "host": f"host || '~' || CAST(k % {spread} AS VARCHAR)",
    }
    with duckdb.connect() as connection:
        for table in (facts.ROLES, facts.LATENCY):
            columns = facts.ROLES_COLUMNS if table == facts.ROLES else facts.LATENCY_COLUMNS
            names = ", ".join(f"{renamed.get(name, name)} AS {name}" for name, _ in columns)
            path = facts.facts_path(into, table, "year", "all")
            path.parent.mkdir(parents=True)
            connection.execute(
                f"COPY (SELECT {names} FROM read_parquet(?, union_by_name = true),"
                f" range({int(copies)}) AS copies(k)) TO '{path.as_posix()}'"
                " (FORMAT parquet, COMPRESSION zstd)",
                [facts.facts_glob(archive, table)],
            )
        roles = facts.facts_path(into, facts.ROLES, "year", "all").as_posix()
        [(rows, hosts_seen, incidents)] = connection.execute(
            "SELECT count(*), count(DISTINCT host), count(DISTINCT incident)"
            " FROM read_parquet(?, hive_partitioning = false)",
            [roles],
        ).fetchall()
        [(latency,)] = connection.execute(
            "SELECT count(*) FROM read_parquet(?, hive_partitioning = false)",
            [facts.facts_path(into, facts.LATENCY, "year", "all").as_posix()],
        ).fetchall()
    size = sum(path.stat().st_size for path in into.rglob(f"*{facts.SUFFIX}"))
    return {
        "roles": rows,
        "hosts": hosts_seen,
        "incidents": incidents,
        "latency": latency,
        "bytes": size,
    }


def _seconds(result: dict[str, Any] | None, view: str, which: str) -> str:
    if result is None or "error" in result:
        return "-"
    return f"{result['views'][view][which]:.3f}"


def _compare(
    archive: Path, args: argparse.Namespace, repeat: int, *, flat: bool = False
) -> tuple[dict[str, dict[str, Any]], bool]:
    """Run each engine over ``archive`` and print the table: the engines' results, and
    whether every view's rows were equal on both."""
    engines = ["duckdb", "spark"] if args.engine == "both" else [args.engine]
    results: dict[str, dict[str, Any] | None] = {"duckdb": None, "spark": None}
    for engine in engines:
        results[engine] = _engine(engine, archive, args, repeat, flat=flat)
        if "error" in (results[engine] or {}):
            print(f"{engine}: failed: {results[engine]['error']}")  # type: ignore[index]
    duck, spark = results["duckdb"], results["spark"]
    ran = {name: r for name, r in results.items() if r is not None and "error" not in r}

    print()
    print("engine start and view registration, peak RSS of the process tree:")
    for name, result in ran.items():
        print(
            f"  {name:7} start {result['start_s']:6.2f} s, register {result['register_s']:6.2f} s,"
            f" whole process {result['wall_s']:6.1f} s, peak RSS {result['peak_rss'] / 2**20:,.0f}"
            " MiB"
        )
    print()
    print(
        f"{'view':18}{'duckdb s':>10}{'warm':>8}{'spark s':>10}{'warm':>8}{'rows':>9}  equal"
        f"   (first read; warm: best of {repeat})"
    )
    equal_all = True
    for view in VIEWS:
        some = next(iter(ran.values()), None)
        rows = len(some["views"][view]["rows"]) if some else 0
        if len(ran) == 2:
            same, why = _same(ran["duckdb"]["views"][view], ran["spark"]["views"][view])
            equal = "yes" if same else f"NO: {why}"
            equal_all &= same
        else:
            equal = "-"
        print(
            f"{view:18}{_seconds(duck, view, 'first_s'):>10}{_seconds(duck, view, 'best_s'):>8}"
            f"{_seconds(spark, view, 'first_s'):>10}{_seconds(spark, view, 'best_s'):>8}"
            f"{rows:9,}  {equal}"
        )
    return ran, equal_all


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--incidents", type=int, default=500)
    parser.add_argument("--min-ranks", type=int, default=64)
    parser.add_argument("--max-ranks", type=int, default=512)
    parser.add_argument(
        "--ranks-per-host",
        type=int,
        default=0,
        help="GPUs per host: 8, or fewer where the smallest incident would not span two hosts",
    )
    parser.add_argument("--hosts", type=int, default=256, help="the fleet's pool of hosts")
    parser.add_argument("--bad-hosts", type=int, default=8)
    parser.add_argument(
        "--slow-share", type=float, default=0.2, help="of the incidents, the share that are slow"
    )
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes making the facts (default: every core, as fr-otel fleet)",
    )
    parser.add_argument(
        "--facts-in-turn",
        action="store_true",
        help="also make the facts again in one process, the peer of --workers' figure",
    )
    parser.add_argument("--engine", choices=["both", "duckdb", "spark"], default="both")
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=3, help="reads of each view per engine")
    parser.add_argument("--out", type=Path, default=Path("bench-out/fleet"))
    parser.add_argument(
        "--keep", action="store_true", help="reuse the archive under --out if its settings match"
    )
    parser.add_argument(
        "--year",
        type=int,
        default=0,
        metavar="COPIES",
        help="then also time the views over COPIES copies of the facts in one file per table,"
        f" their hosts spread over {YEAR_HOSTS:,} (docs/fleet.md, 'At fleet scale')",
    )
    parser.add_argument("--child", choices=["duckdb", "spark"], help=argparse.SUPPRESS)
    parser.add_argument("--archive", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--flat", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from fr_otel import config

    args.workers = config.import_workers(args.workers)
    archive = args.archive or args.out / "archive"
    args.ranks_per_host = args.ranks_per_host or max(1, min(8, args.min_ranks // 2))
    if args.child:
        result = _run_views(args.child, archive, args.repeat, args.spark_master, flat=args.flat)
        (args.out / f"{args.child}.json").write_text(json.dumps(result))
        return

    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} (1 min) at start")
    built = _build(args, archive)
    sizes = built["sizes"]
    how = "as measured when the archive was made (--keep)" if built["kept"] else "now"
    print(
        f"fleet: {args.incidents} incidents of {args.min_ranks}-{args.max_ranks} ranks"
        f" ({args.ranks_per_host} per host) on {args.hosts} hosts, {args.bad_hosts} bad;"
        f" generated in {built['generate_s']:.0f} s ({how})"
    )
    print(
        f"fleet facts (_fleet/): {built['facts_made']} incidents analysed in"
        f" {built['facts_s']:.1f} s by {built.get('workers', 1)} worker process(es),"
        f" {built['facts_s'] / max(1, built['facts_made']):.2f} s per incident ({how};"
        f" load average {built['load']:.2f} then)"
    )
    if args.facts_in_turn:
        _facts_in_turn(archive, built)
    print(f"{'':16}{'rows':>14}{'MB':>10}{'files':>9}{'bytes/row':>11}")
    for name, size in sizes.items():
        per_row = size["bytes"] / size["rows"] if size["rows"] else 0.0
        print(
            f"{name:16}{size['rows']:14,}{size['bytes'] / 1e6:10.1f}{size['files']:9,}"
            f"{per_row:11.1f}"
        )

    ran, equal_all = _compare(archive, args, args.repeat)
    print()
    for name, result in ran.items():
        met, detail = _ranking(result["views"]["fleet_bad_nodes"], built["bad_hosts"])
        print(f"goal, every planted bad host ranked above every healthy one ({name}):", end=" ")
        print(f"{'met' if met else 'NOT met'}; {detail}")
    if "duckdb" in ran:
        slowest = max(v["first_s"] for v in ran["duckdb"]["views"].values())
        met = slowest < DUCKDB_GOAL_S
        print(
            f"goal, DuckDB answers each fleet view in under {DUCKDB_GOAL_S:.0f} s:"
            f" {'met' if met else 'NOT met'} (slowest first read {slowest:.3f} s)"
        )
    if len(ran) == 2:
        print(f"goal, Spark's results equal DuckDB's: {'met' if equal_all else 'NOT met'}")
    else:
        print("goal, Spark's results equal DuckDB's: not measured (one engine ran)")
    if args.year:
        year = args.out / "year"
        print()
        sized = _replicate(archive, year, args.year, args.hosts)
        print(
            f"{args.year} copies of the facts: {sized['roles']:,} roles rows, {sized['hosts']:,}"
            f" hosts, {sized['incidents']:,} incidents, {sized['latency']:,} latency rows;"
            f" {sized['bytes'] / 1e6:,.1f} MB in 2 files"
        )
        _compare(year, args, 1, flat=True)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) at the end")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
