"""OTLP spans back to canonical rows: every column a span carries survives
encode -> OTLP JSON file -> import, for a real gloo dump set and a simulated NCCL fleet."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from fr_otel.analysis import analyze
from fr_otel.archive import import_dumps
from fr_otel.archive.layout import rank_file
from fr_otel.archive.spans_file import read_spans_file
from fr_otel.otel.encode import encode_requests
from fr_otel.otel.jsonfile import write_otlp_json
from fr_otel.otel.otlp_import import SOURCE_FORMAT, import_traces, spans_to_table
from fr_otel.schema import RECORD_SCHEMA
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.rows import SPAN_CARRIED, SPAN_NOT_CARRIED

GLOO = Path(__file__).resolve().parents[1] / "data" / "gloo_size_mismatch"


def _by_rank(table: pa.Table) -> pa.Table:
    return table.sort_by([("rank", "ascending"), ("record_id", "ascending")])


Imported = tuple[Path, pa.Table]
"""The archive and its rows, ordered by rank and record id."""


def _import(source: Path, archive: Path) -> Imported:
    report = import_dumps([source], archive=archive, job="llama", incident="i1")
    assert report.files_written
    table = pa.concat_tables(pq.read_table(p) for p in report.files_written)
    return archive, _by_rank(table)


@pytest.fixture(scope="module")
def gloo(tmp_path_factory: pytest.TempPathFactory) -> Imported:
    return _import(GLOO, tmp_path_factory.mktemp("gloo") / "archive")


@pytest.fixture(scope="module")
def nccl(tmp_path_factory: pytest.TempPathFactory) -> Imported:
    root = tmp_path_factory.mktemp("nccl")
    write_fleet(simulate(FleetSpec(world=8, entries=200, fault="gpu_hang")), root / "dumps")
    return _import(root / "dumps", root / "archive")


@pytest.fixture
def gloo_table(gloo: Imported) -> pa.Table:
    return gloo[1]


@pytest.fixture
def nccl_table(nccl: Imported) -> pa.Table:
    return nccl[1]


def _round_trip(table: pa.Table, path: Path) -> pa.Table:
    # a small budget: several requests (lines) per file
    written = write_otlp_json(encode_requests(table, max_bytes=50_000), path)
    assert written == table.num_rows
    read = read_spans_file(path)  # what fr-otel import reads a spans file with
    assert read.problem is None and read.table is not None
    back = read.table
    assert back.schema.equals(RECORD_SCHEMA)
    return _by_rank(back)


def _check(original: pa.Table, back: pa.Table) -> None:
    assert back.num_rows == original.num_rows
    for column in SPAN_CARRIED:
        assert back.column(column).to_pylist() == original.column(column).to_pylist(), column
    for column in SPAN_NOT_CARRIED:
        assert back.column(column).null_count == back.num_rows, column
    assert set(back.column("source_format").to_pylist()) == {SOURCE_FORMAT}
    assert not any(back.column("pg_ranks_inferred").to_pylist())
    rows = zip(original.to_pylist(), back.to_pylist(), strict=True)
    for before, after in rows:
        # a span carries the sequence number of its kind only
        if before["is_p2p"]:
            assert after["p2p_seq_id"] == before["p2p_seq_id"]
            assert after["collective_seq_id"] is None
        else:
            assert after["collective_seq_id"] == before["collective_seq_id"]
            assert after["p2p_seq_id"] is None
        # completion when completed; the dump time when still pending
        done = before["state"] == "completed" or (before["backend"] == "gloo" and before["retired"])
        if before["state"] == "completed":
            assert after["time_completed_ns"] == before["time_completed_ns"]
        else:
            assert after["time_completed_ns"] is None
        assert after["dump_time_ns"] == (None if done else before["dump_time_ns"])
        # retired where the span's status decides it
        if done and before["state"] != "completed":
            assert after["retired"] is True
        assert after["retired"] in (None, before["retired"])


def test_gloo_dumps_round_trip(gloo_table: pa.Table, tmp_path: Path) -> None:
    back = _round_trip(gloo_table, tmp_path / "gloo.jsonl")
    _check(gloo_table, back)
    assert set(back.column("backend").to_pylist()) == {"gloo"}
    assert back.column("call_site").null_count < back.num_rows


def test_nccl_fleet_round_trips(nccl_table: pa.Table, tmp_path: Path) -> None:
    back = _round_trip(nccl_table, tmp_path / "nccl.jsonl")
    _check(nccl_table, back)
    assert set(back.column("rank").to_pylist()) == set(range(8))
    states = set(back.column("state").to_pylist())
    assert {"completed", "started"} <= states
    assert any(back.column("is_p2p").to_pylist())
    assert back.column("peer").null_count < back.num_rows
    assert back.column("dump_time_ns").null_count < back.num_rows
    assert back.column("time_completed_ns").null_count < back.num_rows


def test_foreign_spans_are_skipped_and_counted(gloo_table: pa.Table) -> None:
    requests = list(encode_requests(gloo_table))
    foreign = requests[0].resource_spans[0].scope_spans[0].spans.add()
    foreign.name = "GET /health"
    foreign.attributes.append(KeyValue(key="http.method", value=AnyValue(string_value="GET")))
    result = import_traces(requests)
    assert result.skipped == 1
    assert result.table.num_rows == gloo_table.num_rows
    assert spans_to_table([ExportTraceServiceRequest()]).num_rows == 0


def test_job_falls_back_to_service_name(gloo_table: pa.Table) -> None:
    requests = list(encode_requests(gloo_table))
    for resource_spans in requests[0].resource_spans:
        kept = [a for a in resource_spans.resource.attributes if a.key != "fr_otel.job"]
        del resource_spans.resource.attributes[:]
        resource_spans.resource.attributes.extend(kept)
    assert set(spans_to_table(requests).column("job").to_pylist()) == {"llama"}


def _write_archive(table: pa.Table, archive: Path) -> None:
    for job, incident, rank in {
        (r["job"], r["incident"], r["rank"])
        for r in table.select(["job", "incident", "rank"]).to_pylist()
    }:
        mask = pc.and_(
            pc.and_(pc.equal(table["job"], job), pc.equal(table["incident"], incident)),
            pc.equal(table["rank"], rank),
        )
        path = rank_file(archive, job, incident, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.filter(mask), path)


def _findings(archive: Path) -> tuple[dict[str, object], list[dict[str, object]]]:
    result = analyze(archive).to_dict()
    findings = result.pop("findings")
    # the stacks of the evidence come from `frames`, which spans do not carry
    return result, [{k: v for k, v in f.items() if k != "frames"} for f in findings]


@pytest.mark.parametrize("which", ["gloo", "nccl"])
def test_round_tripped_table_analyses_the_same(
    which: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    archive, table = request.getfixturevalue(which)
    back = _round_trip(table, tmp_path / "spans.jsonl")
    _write_archive(back, tmp_path / "archive")
    before, after = _findings(archive), _findings(tmp_path / "archive")
    assert before[1], "the incident has findings"
    assert after == before
