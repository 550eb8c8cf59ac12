"""``fr-otel mcp``: every tool answers through the mcp package's own in-process client, and
every operation an agent must not do is refused, with nothing written.

The archive is a real import of two committed real gloo jobs (``tests/data``): one where
rank 1 skipped an all_reduce, with a live check record naming it, and a healthy one. A
secret file sits beside the archive, and another in a folder whose name starts with the
archive's; SQL must read neither. No model is involved: the tests call the tools.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import duckdb
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult

from fr_otel.agents.readonly_sql import QueryLimits, lock_down
from fr_otel.agents.server import build_server
from fr_otel.cli import main
from fr_otel.live.records import write_record
from fr_otel.live.verdict import Verdict
from tests.fixtures import DATA, restore_dump_times

JOB = "train"
SECRET = "hunter2-not-for-agents"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``archive/`` (job train: incidents ``skip`` and ``ok``), ``secret.txt`` beside it and
    ``archive-other/secret.txt``."""
    root = tmp_path_factory.mktemp("mcp")
    for name, incident in (("gloo_skipped_collective", "skip"), ("gloo_healthy", "ok")):
        dumps = Path(shutil.copytree(DATA / name, root / incident))
        restore_dump_times(dumps)
        assert main(["import", str(dumps), "--archive", str(root / "archive"), "--job", JOB,
                     "--incident", incident, "--workers", "1"]) == 0  # fmt: skip
    write_record(
        root / "archive",
        Verdict(
            id="20261129T182224Z-live-skipped_collective-7",
            kind="skipped_collective",
            culprit_ranks=[1],
            group="0",
            group_desc="default_pg",
            seq=7,
            op="all_reduce",
            call_site="_worker.py:121 in _param_all_gather",
            summary="rank 1 skipped all_reduce",
            divergence_ns=1_764_440_544_000_000_000,
            known_ns=1_764_440_545_000_000_000,
            analysis_s=0.3,
            running_ranks=[0, 1, 2, 3],
            job=JOB,
            run_id=None,
            host="node-a",
            policy="report",
            incident="skip",
        ),
    )
    (root / "secret.txt").write_text(f"name,value\n{SECRET},1\n")
    (root / "archive-other").mkdir()
    (root / "archive-other" / "secret.txt").write_text(f"name,value\n{SECRET},1\n")
    return root


@pytest.fixture(scope="module")
def archive(root: Path) -> Path:
    return root / "archive"


@pytest.fixture(scope="module")
def server(archive: Path) -> MCPServer:
    return build_server(archive)


def _call(server: MCPServer, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    async def call() -> CallToolResult:
        async with Client(server) as client:
            return await client.call_tool(tool, arguments)

    return anyio.run(call)


def _answer(server: MCPServer, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = _call(server, tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def _refusal(server: MCPServer, tool: str, arguments: dict[str, Any]) -> str:
    result = _call(server, tool, arguments)
    text = " ".join(getattr(block, "text", "") for block in result.content)
    assert result.is_error, (tool, arguments, result.structured_content)
    assert result.structured_content is None
    return text


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``folder``: its size and modification time."""
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
    }


@contextlib.contextmanager
def _nothing_written(root: Path) -> Iterator[None]:
    before = _files(root)
    yield
    assert _files(root) == before


# --- the tools ------------------------------------------------------------------------


def test_the_four_tools_are_listed_and_say_they_only_read(server: MCPServer) -> None:
    async def tools() -> Any:
        async with Client(server) as client:
            return (await client.list_tools()).tools

    listed = anyio.run(tools)
    assert sorted(t.name for t in listed) == [
        "analyze_incident",
        "explain_finding",
        "list_incidents",
        "sql_query",
    ]
    for tool in listed:
        assert tool.annotations is not None and tool.annotations.read_only_hint, tool.name
        assert tool.description and "\n" not in tool.description


def test_list_incidents_names_each_incident_with_its_ranks_and_live_record(
    server: MCPServer,
) -> None:
    listed = _answer(server, "list_incidents", {})
    incidents = {i["incident"]: i for i in listed["incidents"]}
    assert sorted(incidents) == ["ok", "skip"]
    for incident in incidents.values():
        assert incident["job"] == JOB
        assert incident["ranks"] == [0, 1, 2, 3]
        assert incident["missing_ranks"] == []
        assert incident["entries"] > 0
        assert incident["unreadable_files"] == []
    assert incidents["ok"]["live_check"] == []
    assert len(incidents["skip"]["live_check"]) == 1
    assert "skipped_collective" in incidents["skip"]["live_check"][0]
    assert listed["live_records_naming_no_incident_here"] == []
    assert _answer(server, "list_incidents", {"job": JOB}) == listed


@pytest.mark.parametrize("incident", ["skip", "ok"])
def test_analyze_incident_is_the_json_of_fr_otel_analyze(
    server: MCPServer, archive: Path, tmp_path: Path, incident: str
) -> None:
    written = tmp_path / "analysis.json"
    args = ["analyze", str(archive), "--job", JOB, "--incident", incident, "--format", "json"]
    assert main([*args, "-o", str(written)]) == (1 if incident == "skip" else 0)
    cli = json.loads(written.read_text())
    assert _answer(server, "analyze_incident", {"job": JOB, "incident": incident}) == cli
    if incident == "skip":
        assert cli["findings"][cli["root_cause"]]["culprit_ranks"] == [1]
        assert cli["live"] is not None and cli["live"]["agrees"] is True
    else:
        assert cli["findings"] == [] and cli["live"] is None


def test_explain_finding_gives_its_evidence_call_sites_stacks_and_ranks(
    server: MCPServer,
) -> None:
    analysis = _answer(server, "analyze_incident", {"job": JOB, "incident": "skip"})
    root = analysis["root_cause"]
    explained = _answer(server, "explain_finding", {"job": JOB, "incident": "skip", "index": root})
    finding = analysis["findings"][root]
    assert explained["kind"] == finding["kind"] == "skipped_collective"
    assert explained["role"] == "root cause"
    assert explained["summary"] == finding["summary"]
    assert explained["evidence"] == finding["evidence"]
    assert explained["ranks"]["culprits"] == [1]
    assert explained["ranks"]["majority_rank"] in (0, 2, 3)
    assert explained["collective_seq_id"] == finding["collective_seq_id"] == 7
    # the culprit's call site and its peers', as the text verdict says them
    sites = {site["who"]: site["site"] for site in explained["call_sites"]}
    assert "_param_all_gather" in sites["rank 1"]
    assert "_grad_all_reduce" in sites["its peers"]
    assert explained["where"].startswith("rank 1 at ")
    # the culprit's stack against the majority's, the same frames as the analysis's
    stacks = {stack["who"]: stack for stack in explained["stacks"]}
    assert stacks["rank 1 (culprit)"]["frames"] == finding["frames"]["culprit"]["1"]
    majority = f"rank {explained['ranks']['majority_rank']} (majority)"
    assert stacks[majority]["frames"] == finding["frames"]["majority"]
    assert all(stack["frames"] for stack in explained["stacks"])
    assert explained["cause"] is None and explained["consequences"] == []


def test_explain_finding_says_a_consequence_s_cause_and_its_waiting_ranks(pristine: Path) -> None:
    """The shared simulated incident: rank 3 skipped a collective, and the ranks of a group
    it left wait in a later one (a consequence naming ranks that are not at fault)."""
    server = build_server(pristine)
    analysis = _answer(server, "analyze_incident", {"job": "j", "incident": "i"})
    root = analysis["root_cause"]
    consequence = analysis["findings"][root]["consequences"][0]
    cause = _answer(server, "explain_finding", {"job": "j", "incident": "i", "index": root})
    assert cause["consequences"][0]["index"] == consequence
    explained = _answer(
        server, "explain_finding", {"job": "j", "incident": "i", "index": consequence}
    )
    assert explained["role"] == f"consequence of finding {root}"
    assert explained["cause"]["index"] == root and explained["cause"]["kind"] == cause["kind"]
    waiting = explained["ranks"]["waiting_not_at_fault"]
    assert waiting and explained["ranks"]["culprits"] == []
    # its stacks never call a waiting rank a culprit
    for stack in explained["stacks"]:
        if stack["ranks"] and stack["ranks"][0] in waiting:
            assert stack["who"].endswith("(waiting, not at fault)")
    assert any(stack["who"].endswith("(waiting, not at fault)") for stack in explained["stacks"])


@pytest.mark.parametrize(
    ("incident", "index", "said"),
    [("skip", 1, "its findings are 0 to 0"), ("skip", -1, "no finding -1"), ("ok", 0, "healthy")],
)
def test_explain_finding_refuses_a_finding_that_is_not_there(
    server: MCPServer, incident: str, index: int, said: str
) -> None:
    text = _refusal(server, "explain_finding", {"job": JOB, "incident": incident, "index": index})
    assert said in text


def test_sql_query_answers_over_the_documented_views(server: MCPServer, archive: Path) -> None:
    counts = _answer(
        server,
        "sql_query",
        {"query": "SELECT incident, count(*) AS n FROM entries GROUP BY ALL ORDER BY ALL"},
    )
    assert counts["columns"] == ["incident", "n"]
    assert [row[0] for row in counts["rows"]] == ["ok", "skip"]
    assert counts["truncated"] is False
    described = _answer(server, "sql_query", {"query": "DESCRIBE collectives"})
    assert {"op", "joined", "not_joined"} <= {row[0] for row in described["rows"]}
    findings = _answer(
        server, "sql_query", {"query": "SELECT incident, kind, culprit_ranks FROM findings"}
    )
    assert findings["rows"] == [["skip", "skipped_collective", [1]]]
    # the archive's own files can be read, by path
    files = _answer(
        server, "sql_query", {"query": f"SELECT count(*) FROM glob('{archive}/*/*/*.parquet')"}
    )
    assert files["rows"] == [[8]]


def test_sql_query_returns_at_most_max_rows_and_max_bytes(archive: Path) -> None:
    capped = build_server(archive, limits=QueryLimits(max_rows=5))
    answer = _answer(capped, "sql_query", {"query": "SELECT range AS i FROM range(1000)"})
    assert answer["rows"] == [[0], [1], [2], [3], [4]] and answer["truncated"] is True
    exact = _answer(capped, "sql_query", {"query": "SELECT range FROM range(5)"})
    assert exact["row_count"] == 5 and exact["truncated"] is False
    small = build_server(archive, limits=QueryLimits(max_bytes=1000))
    wide = _answer(small, "sql_query", {"query": "SELECT repeat('x', 300) FROM range(10)"})
    assert 0 < wide["row_count"] < 10 and wide["truncated"] is True


# --- refusals: incidents that are not the archive's -----------------------------------


@pytest.mark.parametrize(
    ("job", "incident"),
    [
        ("nope", "skip"),
        (JOB, "nope"),
        ("../train", "skip"),
        ("train/..", "skip"),
        (JOB, "../ok"),
        (JOB, "skip/../ok"),
        ("job=train", "incident=skip"),
        ("/etc", "passwd"),
        ("", ""),
    ],
)
@pytest.mark.parametrize("tool", ["analyze_incident", "explain_finding"])
def test_a_job_or_incident_the_archive_does_not_hold_is_refused(
    server: MCPServer, root: Path, tool: str, job: str, incident: str
) -> None:
    arguments: dict[str, Any] = {"job": job, "incident": incident}
    if tool == "explain_finding":
        arguments["index"] = 0
    with _nothing_written(root):
        text = _refusal(server, tool, arguments)
    assert "has no job" in text or "has no incident" in text
    assert "its jobs: train" in text or "its incidents: ok, skip" in text


@pytest.mark.parametrize("job", ["nope", "../train", "train/.."])
def test_list_incidents_refuses_a_job_the_archive_does_not_hold(
    server: MCPServer, root: Path, job: str
) -> None:
    with _nothing_written(root):
        assert "has no job" in _refusal(server, "list_incidents", {"job": job})


# --- refusals: SQL --------------------------------------------------------------------


@pytest.mark.parametrize("inside", [True, False], ids=["in-the-archive", "beside-it"])
def test_copy_to_a_file_is_refused(server: MCPServer, root: Path, inside: bool) -> None:
    target = (root / "archive" if inside else root) / "copied.csv"
    with _nothing_written(root):
        text = _refusal(server, "sql_query", {"query": f"COPY entries TO '{target}'"})
    assert "this one is COPY" in text
    assert not target.exists()


def test_export_database_is_refused(server: MCPServer, root: Path) -> None:
    target = root / "exported"
    with _nothing_written(root):
        text = _refusal(server, "sql_query", {"query": f"EXPORT DATABASE '{target}'"})
    assert "this one is EXPORT" in text
    assert not target.exists()


@pytest.mark.parametrize(
    "query",
    ["ATTACH '{root}/other.duckdb' AS other", "ATTACH ':memory:' AS other", "DETACH memory"],
)
def test_attaching_another_database_is_refused(server: MCPServer, root: Path, query: str) -> None:
    with _nothing_written(root):
        text = _refusal(server, "sql_query", {"query": query.format(root=root)})
    assert "this one is ATTACH" in text or "this one is DETACH" in text
    assert not (root / "other.duckdb").exists()


@pytest.mark.parametrize(
    "query",
    [
        "CREATE TABLE t AS SELECT * FROM entries",
        "CREATE OR REPLACE VIEW entries AS SELECT 1",
        "CREATE MACRO m() AS 1",
        "INSERT INTO src_rank_files VALUES ('j', 'i', 9, 'x')",
        "UPDATE src_rank_files SET rank = 9",
        "DELETE FROM src_rank_files",
        "DROP VIEW entries",
        "ALTER VIEW entries RENAME TO e",
        "CHECKPOINT",
        "VACUUM",
        "BEGIN TRANSACTION",
    ],
)
def test_statements_that_change_the_database_are_refused(
    server: MCPServer, root: Path, query: str
) -> None:
    with _nothing_written(root):
        text = _refusal(server, "sql_query", {"query": query})
    assert "only read-only statements" in text


@pytest.mark.parametrize(
    "query",
    [
        "SELECT 1; COPY (SELECT 1) TO '{root}/two.csv'",
        "SELECT 1; SELECT 2",
        "COPY (SELECT 1) TO '{root}/two.csv'; SELECT 1",
    ],
)
def test_more_than_one_statement_is_refused(server: MCPServer, root: Path, query: str) -> None:
    with _nothing_written(root):
        text = _refusal(server, "sql_query", {"query": query.format(root=root)})
    assert "one statement at a time" in text
    assert not (root / "two.csv").exists()


@pytest.mark.parametrize(
    "function",
    ["read_text", "read_csv", "read_csv_auto", "read_json_objects", "read_blob", "read_parquet"],
)
@pytest.mark.parametrize("path", ["{root}/secret.txt", "/etc/passwd", "file:///etc/passwd"])
def test_a_file_outside_the_archive_is_not_read(
    server: MCPServer, root: Path, function: str, path: str
) -> None:
    query = f"SELECT * FROM {function}('{path.format(root=root)}')"
    with _nothing_written(root):
        text = _refusal(server, "sql_query", {"query": query})
    assert "DuckDB refused it" in text and "disabled by configuration" in text
    assert SECRET not in text and "root:" not in text


@pytest.mark.parametrize("query", ["FROM '{root}/secret.txt'", "SELECT * FROM '/etc/passwd'"])
def test_a_file_outside_the_archive_is_not_read_as_a_table_name(
    server: MCPServer, root: Path, query: str
) -> None:
    """A quoted path is a table name DuckDB would read as a file; not outside the archive."""
    with _nothing_written(root):
        text = _refusal(server, "sql_query", {"query": query.format(root=root)})
    assert "does not exist" in text
    assert SECRET not in text and "root:" not in text


@pytest.mark.parametrize(
    "path",
    [
        "{archive}/../secret.txt",
        "{archive}/job=train/../../secret.txt",
        "{archive}/./../secret.txt",
        "{archive}-other/secret.txt",
        "{archive}/../*.txt",
        "{archive}/../**",
    ],
)
def test_a_path_out_of_the_archive_is_not_read(
    server: MCPServer, root: Path, archive: Path, path: str
) -> None:
    target = path.format(archive=archive)
    for function in ("read_text", "glob"):
        with _nothing_written(root):
            text = _refusal(server, "sql_query", {"query": f"SELECT * FROM {function}('{target}')"})
        assert "DuckDB refused it" in text and SECRET not in text


def test_a_file_inside_the_archive_is_read(server: MCPServer, archive: Path) -> None:
    """The refusals above are of the place, not of the functions: the same call reads the
    archive's manifest."""
    manifest = next(archive.glob("job=train/incident=skip/_incident.json"))
    answer = _answer(server, "sql_query", {"query": f"SELECT content FROM read_text('{manifest}')"})
    assert json.loads(answer["rows"][0][0])["incident"] == "skip"


@pytest.mark.parametrize(
    "query",
    [
        "INSTALL httpfs",
        "FORCE INSTALL httpfs",
        "LOAD httpfs",
        "LOAD '{root}/evil.duckdb_extension'",
    ],
)
def test_extensions_are_neither_installed_nor_loaded(
    server: MCPServer, root: Path, query: str
) -> None:
    with _nothing_written(root):
        text = _refusal(server, "sql_query", {"query": query.format(root=root)})
    assert "this one is LOAD" in text


def test_the_network_is_not_reached(server: MCPServer, root: Path) -> None:
    """A real socket listens where the queries point; nobody connects to it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        for query in (
            f"SELECT * FROM read_csv('http://127.0.0.1:{port}/x.csv')",
            f"SELECT * FROM read_parquet('https://127.0.0.1:{port}/x.parquet')",
            f"SELECT * FROM read_text('s3://127.0.0.1:{port}/bucket/x')",
            f"SELECT * FROM glob('http://127.0.0.1:{port}/*')",
        ):
            with _nothing_written(root):
                text = _refusal(server, "sql_query", {"query": query})
            assert "DuckDB refused it" in text, query
        time.sleep(0.2)
        with pytest.raises(BlockingIOError):
            listener.accept()


@pytest.mark.parametrize(
    "query",
    [
        "SET enable_external_access = true",
        "SET allowed_directories = ['/']",
        "SET lock_configuration = false",
        "RESET enable_external_access",
        "RESET lock_configuration",
        "PRAGMA enable_profiling",
        "SET threads = 64",
        "USE memory",
    ],
)
def test_settings_cannot_be_changed(server: MCPServer, root: Path, query: str) -> None:
    with _nothing_written(root):
        text = _refusal(server, "sql_query", {"query": query})
    assert "this one is SET" in text or "this one is PRAGMA" in text


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM query('COPY (SELECT 1) TO ''{root}/hidden.csv''')",
        "SELECT * FROM query_table('entries')",
        "WITH c AS (SELECT * FROM checkpoint()) SELECT * FROM c",
        "SELECT (SELECT count(*) FROM enable_logging())",
        "SELECT * FROM entries, LATERAL (SELECT * FROM truncate_duckdb_logs())",
        "SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT 1'))",
        "SELECT * FROM duckdb_secrets()",
        "SELECT * FROM create_external_resource('t', MAP {{}}, 'n', NULL, false, 1, 1)",
        "SELECT * FROM main.READ_DUCKDB('{root}/x.duckdb')",
    ],
)
def test_table_functions_outside_the_allowed_ones_are_refused(
    server: MCPServer, root: Path, query: str
) -> None:
    with _nothing_written(root):
        text = _refusal(server, "sql_query", {"query": query.format(root=root)})
    assert "is not allowed here" in text
    assert not (root / "hidden.csv").exists()


def test_a_query_past_its_time_is_stopped(archive: Path, root: Path) -> None:
    hurried = build_server(archive, limits=QueryLimits(timeout_s=0.5))
    started = time.monotonic()
    with _nothing_written(root):
        text = _refusal(
            hurried,
            "sql_query",
            {"query": "SELECT sum(a.range * b.range) FROM range(1000000) a, range(1000000) b"},
        )
    assert "ran past its 0.5 s and was stopped" in text
    assert time.monotonic() - started < 30


def test_python_objects_are_not_read_by_name(archive: Path) -> None:
    """DuckDB reads a Python variable of the calling frame as a table by its name, unless
    told not to (no external access, no replacement scans): a locked connection does not
    read this test's local."""
    import pyarrow as pa

    secret_rows = pa.table({"secret": [SECRET]})
    with contextlib.closing(duckdb.connect()) as connection:
        assert connection.sql("SELECT * FROM secret_rows").fetchall() == [(SECRET,)]
    with contextlib.closing(duckdb.connect()) as connection:
        lock_down(connection, archive.resolve(), threads=1)
        with pytest.raises(duckdb.CatalogException, match="secret_rows does not exist"):
            connection.sql("SELECT * FROM secret_rows")
    assert secret_rows.num_rows == 1


def test_the_locked_settings_hold_without_the_statement_check(root: Path, archive: Path) -> None:
    """Were a statement to get past the check, DuckDB itself refuses: settings stay as
    they are, no file outside the archive is read or written, no extension loads."""
    with contextlib.closing(duckdb.connect()) as connection:
        lock_down(connection, archive.resolve(), threads=1)
        for statement in (
            "SET enable_external_access = true",
            "RESET allowed_directories",
            "SET lock_configuration = false",
            "SELECT * FROM enable_logging()",
        ):
            with pytest.raises(duckdb.InvalidInputException, match="configuration has been locked"):
                connection.execute(statement)
        for statement in (
            f"SELECT * FROM read_text('{root}/secret.txt')",
            f"COPY (SELECT 1) TO '{root}/outside.csv'",
            f"ATTACH '{root}/other.duckdb'",
            "LOAD httpfs",
        ):
            with pytest.raises(duckdb.PermissionException):
                connection.execute(statement)
        assert connection.execute(
            "SELECT current_setting('enable_external_access')"
        ).fetchone() == (False,)
    assert not (root / "outside.csv").exists() and not (root / "other.duckdb").exists()


# --- the command ----------------------------------------------------------------------


def test_fr_otel_mcp_serves_the_archive_over_stdio(archive: Path) -> None:
    """The real command in its own process, through the mcp package's stdio client."""
    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "fr_otel", "mcp", str(archive), "--max-rows", "3"]
    )

    async def session() -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        async with Client(parameters, read_timeout_seconds=120) as client:
            listed = await client.call_tool("list_incidents", {})
            rows = await client.call_tool("sql_query", {"query": "SELECT * FROM range(10)"})
            return listed.structured_content, rows.structured_content

    listed, rows = anyio.run(session)
    assert listed is not None and len(listed["incidents"]) == 2
    assert rows is not None and rows["row_count"] == 3 and rows["truncated"] is True


def test_without_the_mcp_package_the_command_says_which_extra_and_exits_2(
    archive: Path,
) -> None:
    probe = (
        "import sys; sys.modules['mcp'] = None\n"  # as if it were not installed
        "from fr_otel.cli import main\n"
        f"sys.exit(main(['mcp', {str(archive)!r}]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'fr-otel[mcp]'" in done.stderr
    assert done.stdout == ""


def test_the_command_refuses_a_folder_that_is_not_an_archive(tmp_path: Path) -> None:
    assert main(["mcp", str(tmp_path)]) == 2


def test_building_the_server_configures_no_logging(archive: Path) -> None:
    probe = (
        "import logging\n"
        "from pathlib import Path\n"
        "from fr_otel.agents.server import build_server\n"
        f"build_server(Path({str(archive)!r}))\n"
        "print(len(logging.getLogger().handlers))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "0"
