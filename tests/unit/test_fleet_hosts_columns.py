"""Where each rank ran, in the archive: a dump's file name or the import's ``--hosts`` map
fills ``host`` (and ``local_rank``, ``device``), a bad map is refused naming the file and
its problem, and archives of the schema versions before these columns still read (as null).
Real gloo dumps (tests/data), renamed as real jobs name them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.analysis import analyze
from fr_otel.archive.hosts import read_host_map
from fr_otel.cli import main
from fr_otel.dumps.discover import host_in_name
from fr_otel.errors import ConfigError
from fr_otel.schema import HOST_COLUMNS, SCHEMA_VERSION_KEY

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "gloo_skipped_collective"
HOSTS = {0: "node-a", 1: "node-a", 2: "node-b.cluster.local", 3: "node-b.cluster.local"}


def _copies(folder: Path, name: str) -> Path:
    """The fixture's four dumps as ``name.format(host=..., rank=...)``."""
    target = folder / "dumps"
    target.mkdir()
    for rank, host in HOSTS.items():
        shutil.copyfile(
            FIXTURE / "comm_traces" / f"rank_{rank}", target / name.format(host=host, rank=rank)
        )
    return target


def _placements(archive: Path) -> dict[int, set[tuple[str | None, int | None, str | None]]]:
    found: dict[int, set[tuple[str | None, int | None, str | None]]] = {}
    for path in archive.glob("job=*/incident=*/rank-*.parquet"):
        for row in pq.read_table(path, columns=["rank", *HOST_COLUMNS]).to_pylist():
            found.setdefault(row["rank"], set()).add(
                (row["host"], row["local_rank"], row["device"])
            )
    return found


@pytest.mark.parametrize("name", ["{host}.pci3_rank_{rank}", "nccl_trace_rank_{host}_{rank}"])
def test_the_host_in_a_dump_file_name_fills_host(tmp_path: Path, name: str) -> None:
    dumps = _copies(tmp_path, name)
    archive = tmp_path / "archive"
    assert main(["import", str(dumps), "--archive", str(archive), "--job", "j"]) == 0
    assert _placements(archive) == {rank: {(host, None, None)} for rank, host in HOSTS.items()}


def test_names_without_a_host_leave_it_null() -> None:
    for prefix in ("comm_lib_trace_rank_", "nccl_trace_rank_", "rank_", "nccl_trace_rank_3_"):
        assert host_in_name(prefix) is None, prefix
    assert host_in_name("gpu-17.pci0000:3b_rank_") is None  # not a tag: no host claimed
    assert host_in_name("node07.pci3_rank_") == "node07"


def test_a_hosts_map_fills_host_local_rank_and_device_and_wins_over_names(
    tmp_path: Path,
) -> None:
    dumps = _copies(tmp_path, "{host}.pci3_rank_{rank}")
    hosts = tmp_path / "hosts.csv"
    hosts.write_text(
        "rank,host,local_rank,device\n"
        + "".join(f"{r},rack1-{r // 2},{r % 2},GPU-{r}\n" for r in range(4))
    )
    archive = tmp_path / "archive"
    code = main(["import", str(dumps), "--archive", str(archive), "--hosts", str(hosts)])
    assert code == 0
    assert _placements(archive) == {r: {(f"rack1-{r // 2}", r % 2, f"GPU-{r}")} for r in range(4)}


def test_a_json_map_as_an_object_or_a_list(tmp_path: Path) -> None:
    as_object = tmp_path / "object.json"
    as_object.write_text(json.dumps({"0": "n0", "1": "n1"}))
    as_list = tmp_path / "list.json"
    as_list.write_text(json.dumps([{"rank": 0, "host": "n0", "local_rank": 0}]))
    assert {r: p.host for r, p in read_host_map(as_object).items()} == {0: "n0", 1: "n1"}
    [(rank, placement)] = read_host_map(as_list).items()
    assert (rank, placement.host, placement.local_rank, placement.device) == (0, "n0", 0, None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("rank,node\n0,a\n", "line 1: the header must name rank and host"),
        ("rank,host\n0,a\nx,b\n", "line 3: rank 'x' is not a non-negative integer"),
        ("rank,host\n0,a\n0,b\n", "line 3: rank 0 appears twice"),
        ("rank,host\n0,has space\n", "line 2: host 'has space' is not a host name"),
        ('{"0": "a", "1": 7}', "entry '1': host 7 is not a host name"),
        ('{"0": "a",', "not JSON"),
        ("", "empty"),
    ],
)
def test_a_bad_hosts_map_is_refused_naming_the_file_and_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    hosts = tmp_path / "hosts.map"
    hosts.write_text(text)
    with pytest.raises(ConfigError, match=r"--hosts .*hosts\.map: "):
        read_host_map(hosts)
    archive = tmp_path / "archive"
    code = main(["import", str(FIXTURE), "--archive", str(archive), "--hosts", str(hosts)])
    err = capsys.readouterr().err
    assert code != 0 and f"{hosts}: {problem}" in err, err
    assert "Traceback" not in err and not archive.exists()


def _as_old_schema(archive: Path, version: bytes) -> None:
    """Every rank file rewritten as fr_otel wrote it at schema ``version``: without the
    host columns, marked so."""
    for path in archive.glob("job=*/incident=*/rank-*.parquet"):
        table = pq.read_table(path)
        table = table.drop_columns(list(HOST_COLUMNS))
        metadata = {**(table.schema.metadata or {}), SCHEMA_VERSION_KEY: version}
        pq.write_table(table.replace_schema_metadata(metadata), path)
    for derived in archive.glob("job=*/incident=*/_*"):
        derived.unlink()  # an import's caches of the files as they were


@pytest.mark.parametrize("version", [b"1", b"2"])
def test_an_archive_of_an_older_schema_still_reads_with_null_hosts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: bytes
) -> None:
    archive = tmp_path / "archive"
    assert main(["import", str(FIXTURE), "--archive", str(archive), "--job", "j"]) == 0
    _as_old_schema(archive, version)
    assert not set(HOST_COLUMNS) & set(pq.read_schema(next(archive.rglob("rank-*.parquet"))).names)
    analysis = analyze(archive)
    assert [f.kind for f in analysis.findings][:1] == ["skipped_collective"]
    capsys.readouterr()
    query = "SELECT count(*) AS n, count(host) AS hosts, count(local_rank) AS locals FROM entries"
    assert main(["sql", str(archive), query, "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["n"] > 0 and row["hosts"] == 0 and row["locals"] == 0


def test_old_and_new_rank_files_read_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old"
    assert main(["import", str(FIXTURE), "--archive", str(old), "--job", "j"]) == 0
    _as_old_schema(old, b"1")
    dumps = _copies(tmp_path, "{host}.pci3_rank_{rank}")
    assert main(["import", str(dumps), "--archive", str(old), "--job", "k"]) == 0
    capsys.readouterr()
    query = "SELECT job, count(host) AS hosts FROM entries GROUP BY job ORDER BY job"
    assert main(["sql", str(old), query, "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["job"] for r in rows] == ["j", "k"]
    assert rows[0]["hosts"] == 0 and rows[1]["hosts"] > 0


def test_spans_read_back_take_the_host_from_their_resource() -> None:
    """The recorder's spans carry their rank's host as the resource's ``host.name``: an
    import of them (a Collector's file) keeps it on the rows."""
    from fr_otel.otel.encode import encode_requests
    from fr_otel.otel.otlp_import import import_traces
    from tests.rows import canonical_row, canonical_table

    table = canonical_table([canonical_row(rank=r, record_id=0) for r in range(2)])
    requests = list(encode_requests(table, resource={"host.name": "node-x7"}))
    back = import_traces(requests).table
    assert back.column("host").to_pylist() == ["node-x7", "node-x7"]
    assert back.column("local_rank").null_count == back.num_rows


def test_each_ranks_spans_carry_its_host_as_host_name() -> None:
    """Both encoders give each rank's resource the host its rows hold, over a configured
    host.name (one for every rank), and leave it as configured where the rows hold none."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from fr_otel.otel.encode import encode_requests
    from fr_otel.otel.wire import encode_requests_fast
    from tests.rows import canonical_row, canonical_table

    table = canonical_table(
        [canonical_row(rank=r, record_id=0, host=["n0", "n1", None][r]) for r in range(3)]
    )
    configured = {"host.name": "configured", "deployment.environment": "ci"}
    slow = list(encode_requests(table, resource=configured))
    fast = [
        ExportTraceServiceRequest.FromString(b)
        for b in encode_requests_fast(table, resource=configured)
    ]
    assert fast == slow
    hosts = {}
    for request in slow:
        for spans in request.resource_spans:
            attributes = {a.key: a.value for a in spans.resource.attributes}
            hosts[attributes["fr_otel.rank"].int_value] = attributes["host.name"].string_value
    assert hosts == {0: "n0", 1: "n1", 2: "configured"}


def test_a_ranks_placement_comes_from_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from fr_otel import config
    from fr_otel.recorder.placement import this_rank

    monkeypatch.setenv("FR_OTEL_HOST", "rack7-node3")
    monkeypatch.setenv("LOCAL_RANK", "5")
    # this machine has no GPU: gloo and NCCL alike name no device
    assert (this_rank("gloo").host, this_rank("gloo").local_rank) == ("rack7-node3", 5)
    assert this_rank("gloo").device is None and this_rank("cpu:gloo,cuda:nccl").device is None
    monkeypatch.delenv("FR_OTEL_HOST")
    monkeypatch.setenv("LOCAL_RANK", "five")
    assert config.host_name() == __import__("socket").gethostname()
    assert config.local_rank() is None
