"""Every fleet view on DuckDB and on Spark SQL (local mode) over the same simulated fleet
archive gives the same rows, from the same view files (``fleet.views.view_sql``), and
``fr-otel fleet --engine spark`` prints what the DuckDB engine prints.

The same archive copied into a bucket of an S3 server (moto's server, a real S3 HTTP API on
loopback) gives the same rows on both engines, each through its own S3 client.

pyspark, Java, moto and s3fs are required here, never skipped: ``make test`` installs them
(requirements-dev.txt), CI has Java 17, and Spark fetches Hadoop's S3A jars from Maven
Central when its session starts. One Spark session serves the whole module.

Floats are compared with a relative tolerance of 1e-9: the engines sum doubles in
different orders (Spark per partition, then across them) and compute EXP and POWER with
different libraries (Java's and C's), which moves the last bits of a double; every other
value must be equal.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pyspark.sql import SparkSession

from fr_otel.cli import main
from fr_otel.fleet import facts, spark
from fr_otel.fleet.views import FLEET_VIEWS, Scope, register_fleet_views

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

_REL = 1e-9


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("spark_fleet") / "fleet"
    assert (
        main(
            [
                "simulate",
                str(folder),
                "--incidents",
                "16",
                "--fleet-hosts",
                "8",
                "--bad-hosts",
                "1",
                "--seed",
                "11",
            ]
        )
        == 0
    )
    assert facts.refresh(folder).failed == []
    return folder


@pytest.fixture(scope="module")
def session() -> Iterator[SparkSession]:
    with spark.spark_session("local[2]", conf=S3A_PACKAGES) as started:
        yield started


S3A_PACKAGES = {
    # Hadoop's S3A at the version of the Hadoop jars pyspark ships, with the two modules
    # of the AWS SDK it loads instead of the SDK's whole bundle (640 MB)
    "spark.jars.packages": ",".join(
        [
            "org.apache.hadoop:hadoop-aws:3.5.0",
            # the SDK version hadoop-aws 3.5.0 is built with (hadoop-project's pom)
            "software.amazon.awssdk:s3:2.35.4",
            "software.amazon.awssdk:s3-transfer-manager:2.35.4",
        ]
    ),
    "spark.jars.excludes": "software.amazon.awssdk:bundle",
}
"""Set when the module's session starts (packages load with its JVM); the S3 server's
address is a setting of the session later (``bucket``)."""


@pytest.fixture(scope="module")
def bucket(archive: Path, session: SparkSession) -> Iterator[str]:
    """``archive`` copied into a bucket of a real S3 API server (moto's, over HTTP on
    loopback), as ``aws s3 sync`` would copy it; yields its URL. DuckDB reads it through
    s3fs and Spark through Hadoop's S3A, each its own S3 client."""
    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    credentials = {"AWS_ACCESS_KEY_ID": "fleet-test", "AWS_SECRET_ACCESS_KEY": "fleet-test"}
    s3a = {
        "fs.s3a.endpoint": endpoint,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.endpoint.region": "us-east-1",
        "fs.s3a.access.key": credentials["AWS_ACCESS_KEY_ID"],
        "fs.s3a.secret.key": credentials["AWS_SECRET_ACCESS_KEY"],
    }
    try:
        with pytest.MonkeyPatch.context() as env:
            for name, value in {
                **credentials,
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_DEFAULT_REGION": "us-east-1",
            }.items():
                env.setenv(name, value)
            client = boto3.client("s3")
            client.create_bucket(Bucket="fleet")
            for path in sorted(archive.rglob("*")):
                if path.is_file():
                    key = f"archive/{path.relative_to(archive).as_posix()}"
                    client.upload_file(str(path), "fleet", key)
            for key, value in s3a.items():  # read when S3A first opens the bucket
                session.conf.set(key, value)
            yield "s3://fleet/archive"
    finally:
        for key in s3a:
            session.conf.unset(key)
        server.stop()


def _duckdb_rows(archive: Path | str, scope: Scope, query: str) -> list[dict[str, Any]]:
    with contextlib.closing(duckdb.connect()) as connection:
        register_fleet_views(connection, archive, scope)
        relation = connection.sql(query)
        return [dict(zip(relation.columns, row, strict=True)) for row in relation.fetchall()]


def _spark_rows(
    session: SparkSession, archive: Path | str, scope: Scope, query: str
) -> list[dict[str, Any]]:
    spark.register_fleet_views(session, archive, scope)
    return spark.rows(session, query)


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    """A row's values but its floats (whose last bits may differ), nulls first."""
    return tuple((v is not None, v) for v in row.values() if not isinstance(v, float))


def _assert_same(duck: list[dict[str, Any]], sparks: list[dict[str, Any]]) -> None:
    assert len(duck) == len(sparks)
    for d, s in zip(sorted(duck, key=_key), sorted(sparks, key=_key), strict=True):
        assert list(d) == list(s)  # the same columns in the same order
        for column, value in d.items():
            other = s[column]
            if isinstance(value, float) or isinstance(other, float):
                assert isinstance(value, float) and isinstance(other, float), column
                assert math.isclose(value, other, rel_tol=_REL), (column, d, s)
            else:
                assert type(value) is type(other) and value == other, (column, d, s)


@pytest.mark.parametrize("view", list(FLEET_VIEWS))
def test_every_view_gives_the_same_rows_on_both_engines(
    view: str, archive: Path, session: SparkSession
) -> None:
    query = f"SELECT * FROM {view}"
    duck = _duckdb_rows(archive, Scope(), query)
    assert duck, view  # a view with rows to compare
    _assert_same(duck, _spark_rows(session, archive, Scope(), query))


def test_the_bad_node_is_found_on_spark(archive: Path, session: SparkSession) -> None:
    query = "SELECT host FROM fleet_bad_nodes WHERE bad_node"
    found = _spark_rows(session, archive, Scope(), query)
    assert len(found) == 1 and found == _duckdb_rows(archive, Scope(), query)


def test_a_job_and_since_scope_the_same_incidents_on_both_engines(
    archive: Path, session: SparkSession
) -> None:
    """The scope's filter (``views.source_sql``) is engine-neutral too, latency's IN too."""
    scope = Scope(job="job1", since_ns=1767571200 * 1_000_000_000)  # 2026-01-05
    query = (
        "SELECT (SELECT count(*) FROM fleet_incidents) AS incidents,"
        " (SELECT count(*) FROM fleet_latency) AS latency,"
        " (SELECT CAST(sum(blamed) AS BIGINT) FROM fleet_hosts) AS blamed"
    )
    duck = _duckdb_rows(archive, scope, query)
    everything = _duckdb_rows(archive, Scope(), query)
    assert 0 < duck[0]["incidents"] < everything[0]["incidents"]
    assert 0 < duck[0]["latency"] < everything[0]["latency"]
    _assert_same(duck, _spark_rows(session, archive, scope, query))


def test_an_archive_without_facts_has_empty_views_on_both_engines(
    tmp_path: Path, session: SparkSession
) -> None:
    query = " UNION ALL ".join(f"SELECT '{v}' AS view, count(*) AS n FROM {v}" for v in FLEET_VIEWS)
    duck = _duckdb_rows(tmp_path, Scope(), query)
    assert {r["n"] for r in duck} == {0}
    _assert_same(duck, _spark_rows(session, tmp_path, Scope(), query))


def test_fleet_command_prints_the_same_report_on_spark(
    archive: Path, session: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    """In this process the command finds the module's session running and leaves it so."""
    capsys.readouterr()
    assert main(["fleet", str(archive), "--format", "json", "--top", "20"]) == 0
    duck = json.loads(capsys.readouterr().out)
    command = ["fleet", str(archive), "--format", "json", "--top", "20", "--engine", "spark"]
    assert main([*command, "--spark-master", "local[1]"]) == 0
    on_spark = json.loads(capsys.readouterr().out)
    assert duck["bad_nodes"] and on_spark["bad_nodes"] == duck["bad_nodes"]
    ranking, duck_ranking = on_spark.pop("ranking"), duck.pop("ranking")
    assert [r["host"] for r in ranking] == [r["host"] for r in duck_ranking]  # p_bound, z DESC
    _assert_same(duck_ranking, ranking)
    assert on_spark == duck
    assert spark.rows(session, "SELECT 1 AS one") == [{"one": 1}]  # still running


def test_sql_runs_the_fleet_views_on_spark(
    archive: Path, session: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    query = (
        "SELECT host, incidents, blamed, culprit, straggler, bad_node, evidence"
        " FROM fleet_bad_nodes ORDER BY host"
    )
    capsys.readouterr()
    assert main(["sql", str(archive), query, "--format", "csv"]) == 0
    duck = capsys.readouterr().out
    assert main(["sql", str(archive), query, "--format", "csv", "--engine", "spark"]) == 0
    assert capsys.readouterr().out == duck and duck.count("\n") == 9

    assert main(["sql", str(archive), "SELECT nope FROM fleet_hosts", "--engine", "spark"]) != 0
    error = capsys.readouterr().err
    assert "query failed: [UNRESOLVED_COLUMN" in error and "SubqueryAlias" not in error


def test_the_readmes_spark_job_runs_on_a_running_session(
    archive: Path,
    session: SparkSession,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The README's spark-submit script, given the archive as spark-submit would, finds
    the session running (as it finds spark-submit's) and prints the ranking."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n### The fleet views on Spark\n", 1)[1].split("\n## ", 1)[0]
    [script] = re.findall(r"```python\n(.*?)```", section, re.S)
    monkeypatch.setattr(sys, "argv", ["fleet_views.py", str(archive)])
    capsys.readouterr()
    exec(compile(script, "fleet_views.py", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    [bad] = _duckdb_rows(archive, Scope(), "SELECT host FROM fleet_bad_nodes WHERE bad_node")
    lines = out.splitlines()
    header = r"\|\s*host\|\s*incidents\|\s*blamed\|\s*p_bound\|bad_node\|"
    assert re.fullmatch(header, lines[1]), out
    assert re.fullmatch(rf"\|{bad['host']}\|.*\|\s*true\|", lines[3]), out  # first: the bad node


def test_without_pyspark_the_spark_engine_says_what_to_install(archive: Path) -> None:
    code = (
        "import sys; sys.modules['pyspark'] = None; from fr_otel.cli import main;"
        f" sys.exit(main(['fleet', {str(archive)!r}, '--engine', 'spark']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode != 0 and "pip install 'fr-otel[spark]'" in done.stderr, done.stderr


def test_the_duckdb_engine_never_imports_pyspark(archive: Path) -> None:
    code = (
        "import sys; from fr_otel.cli import main;"
        f" assert main(['fleet', {str(archive)!r}, '--format', 'json']) == 0;"
        " assert 'pyspark' not in sys.modules, 'pyspark imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_view_reads_the_same_from_object_storage_on_both_engines(
    archive: Path, bucket: str, session: SparkSession
) -> None:
    """The archive in an S3 bucket: DuckDB (``s3://``, through fsspec) and Spark (the same
    URL, read as ``s3a://``) give the rows DuckDB gives over the local folder."""
    for view in FLEET_VIEWS:
        query = f"SELECT * FROM {view}"
        local = _duckdb_rows(archive, Scope(), query)
        assert local, view
        _assert_same(local, _duckdb_rows(bucket, Scope(), query))
        _assert_same(local, _spark_rows(session, bucket, Scope(), query))


def test_fleet_command_reads_object_storage_on_both_engines(
    archive: Path, bucket: str, session: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["fleet", str(archive), "--format", "json", "--top", "20"]) == 0
    local = json.loads(capsys.readouterr().out)
    for engine in ("duckdb", "spark"):
        assert main(["fleet", bucket, "--format", "json", "--top", "20", "--engine", engine]) == 0
        remote = json.loads(capsys.readouterr().out)
        assert remote.pop("archive") == bucket
        assert local["bad_nodes"] and remote["bad_nodes"] == local["bad_nodes"], engine
        _assert_same(local["ranking"], remote.pop("ranking"))
        assert remote == {k: v for k, v in local.items() if k not in ("archive", "ranking")}


def test_a_url_without_fleet_facts_is_refused_by_name(
    bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prefix that holds no facts (a typo, an archive copied without ``_fleet``) is an
    error naming it, not a report of an empty fleet."""
    capsys.readouterr()
    assert main(["fleet", "s3://fleet/no-such-archive"]) != 0
    error = capsys.readouterr().err
    assert "s3://fleet/no-such-archive holds no fleet facts" in error, error


def test_an_archive_url_without_its_file_system_says_what_to_install(
    capsys: pytest.CaptureFixture[str],
) -> None:
    capsys.readouterr()
    assert main(["fleet", "nosuchscheme://bucket/archive"]) != 0
    error = capsys.readouterr().err
    assert "nosuchscheme:// archives need" in error and "fsspec file system" in error, error


def test_an_unreachable_store_is_named_with_the_reason(
    bucket: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file system's error, not the Python traceback DuckDB wraps it in."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    capsys.readouterr()
    assert main(["fleet", bucket]) != 0
    error = capsys.readouterr().err
    assert f"{bucket}: cannot list it: EndpointConnectionError: Could not connect" in error, error
    assert "Traceback" not in error
