"""The sinks and ``fr_otel.export``: one incident read from the archive, handed to each
sink in order; the span sinks write what the protobuf encoder would, from the wire
encoder's bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import fr_otel
from fr_otel.archive import import_dumps
from fr_otel.archive.incidents import Incident
from fr_otel.archive.read import read_incident
from fr_otel.errors import ArchiveError, ConfigError
from fr_otel.otel.encode import encode_requests
from fr_otel.otel.exporter import AttemptResult, ExportOutcome
from fr_otel.otel.jsonfile import to_otlp_json
from fr_otel.otel.payload import Payload, span_count
from fr_otel.sim import FleetSpec, simulate, write_fleet
from fr_otel.sinks import (
    ExportInput,
    ExportResult,
    JaegerJsonSink,
    MemorySink,
    OtlpJsonSink,
    OtlpSink,
    ParquetSink,
    RecordSink,
    SpanSink,
)


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sinks")
    spec = FleetSpec(world=4, entries=20, fault="skipped_collective", fault_rank=2)
    write_fleet(simulate(spec), root / "dumps")
    assert import_dumps([root / "dumps"], archive=root / "a", job="j", incident="i").ok
    return root / "a"


def test_every_sink_is_a_record_sink_and_the_span_sinks_take_spans(tmp_path: Path) -> None:
    sinks: list[object] = [
        ParquetSink(archive=tmp_path),
        OtlpJsonSink(path=tmp_path / "x.jsonl", resource={}),
        JaegerJsonSink(path=tmp_path / "x.json", resource={}),
        OtlpSink(exporter=_Down(), spool_dir=tmp_path, deadline_s=1, resource={}),
        MemorySink(),
    ]
    assert all(isinstance(sink, RecordSink) for sink in sinks)
    assert [isinstance(sink, SpanSink) for sink in sinks] == [False, True, True, True, True]


def test_export_hands_the_incident_to_each_sink_in_order(archive: Path) -> None:
    first, second = MemorySink(), MemorySink()
    seen: list[ExportInput] = []
    done: list[ExportResult] = []
    report = fr_otel.export(
        archive, [first, second], before_export=seen.append, after_each=done.append
    )
    assert report.incident == Incident(job="j", incident="i") and report.ok
    assert not report.problems and report.verdict_spans == 0
    [table] = first.tables
    assert second.tables == [table]
    assert set(table.column("rank").to_pylist()) == {0, 1, 2, 3}
    assert [r.written for r in report.results] == [table.num_rows] * 2 == [r.written for r in done]
    assert seen[0].spans == table.num_rows
    assert not first.shut_down  # the caller owns its sinks


def test_parquet_sink_writes_what_it_is_given(archive: Path, tmp_path: Path) -> None:
    table = read_incident(archive, Incident(job="j", incident="i")).table
    result = ParquetSink(archive=tmp_path / "copy").export(table)
    assert result.ok and result.written == table.num_rows and len(result.files) == 4
    copied = read_incident(tmp_path / "copy", Incident(job="j", incident="i")).table
    assert copied.equals(table)
    empty = ParquetSink(archive=tmp_path / "none").export(table.slice(0, 0))
    assert empty.problems == ["no entries to archive"] and not empty.ok


def test_file_sinks_write_the_protobuf_encoders_requests(archive: Path, tmp_path: Path) -> None:
    table = read_incident(archive, Incident(job="j", incident="i")).table
    resource = {"deployment.environment": "test"}
    sink = OtlpJsonSink(path=tmp_path / "spans.jsonl", resource=resource)
    result = sink.export(table)
    expected = [to_otlp_json(r) for r in encode_requests(table, resource=resource)]
    lines = [json.loads(line) for line in (tmp_path / "spans.jsonl").read_text().splitlines()]
    assert lines == expected
    assert result.written == table.num_rows and result.files == [tmp_path / "spans.jsonl"]
    jaeger = JaegerJsonSink(path=tmp_path / "spans.json", resource=resource).export(table)
    assert jaeger.written == table.num_rows
    assert json.loads((tmp_path / "spans.json").read_text())["data"]


def test_findings_only_needs_span_sinks(archive: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="findings are spans"):
        fr_otel.export(archive, [ParquetSink(archive=tmp_path)], findings_only=True)


def test_findings_go_after_the_entries_into_the_same_span_output(archive: Path) -> None:
    sink = MemorySink()
    report = fr_otel.export(archive, [sink], findings=True)
    assert report.verdict_spans == sum(span_count(r) for r in sink.extra) > 0
    assert report.results[0].written == sink.tables[0].num_rows + report.verdict_spans


class _Down:
    """An exporter whose receiver never answers."""

    endpoint = "http://nowhere:4318/v1/traces"

    def __init__(self) -> None:
        self.shut = False

    def export(self, request: Payload, deadline: float) -> ExportOutcome:
        return ExportOutcome(AttemptResult.FAILURE_RETRYABLE, "refused", retry_after_s=60)

    def shutdown(self) -> None:
        self.shut = True


def test_otlp_sink_spools_what_it_cannot_deliver(archive: Path, tmp_path: Path) -> None:
    table = read_incident(archive, Incident(job="j", incident="i")).table
    exporter = _Down()
    sink = OtlpSink(exporter=exporter, spool_dir=tmp_path / "spool", deadline_s=0.5, resource={})
    result = sink.export(table)
    assert result.spooled == table.num_rows and result.written == 0 and not result.ok
    assert result.target == exporter.endpoint
    assert result.send is not None and result.send.deadline_reached
    assert list((tmp_path / "spool").glob("*.otlp"))
    sink.shutdown()
    assert not exporter.shut  # not its own
    OtlpSink(exporter=exporter, spool_dir=tmp_path, deadline_s=1, owns_exporter=True).shutdown()
    assert exporter.shut


def test_a_damaged_rank_file_is_left_out_and_named(archive: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "a"
    shutil.copytree(archive, copy)
    [damaged] = copy.glob("job=j/incident=i/rank-000002.parquet")
    data = bytearray(damaged.read_bytes())
    data[4:600] = b"A" * 596  # its first pages; the footer at its end still reads
    damaged.write_bytes(bytes(data))
    rows = read_incident(copy, Incident(job="j", incident="i"))
    assert set(rows.table.column("rank").to_pylist()) == {0, 1, 3}
    [problem] = rows.problems
    assert problem.problem == "corrupt" and "rank-000002.parquet" in str(problem)
    assert rows.checked.unusable_ranks("j", "i") == {2}
    for path in copy.glob("job=j/incident=i/*.parquet"):
        path.write_bytes(b"")
    with pytest.raises(ArchiveError, match="none of its 4 Parquet rank files can be read"):
        read_incident(copy, Incident(job="j", incident="i"))


def test_read_incident_gives_the_canonical_schema_and_only_the_columns_asked(
    archive: Path,
) -> None:
    from fr_otel.schema import RECORD_SCHEMA

    rows = read_incident(archive, Incident(job="j", incident="i"))
    assert rows.table.schema.remove_metadata() == RECORD_SCHEMA.remove_metadata()
    runs = read_incident(archive, Incident(job="j", incident="i"), columns=["run_id"])
    assert runs.table.column_names == ["run_id"]
    assert runs.table.num_rows == rows.table.num_rows
    assert isinstance(runs.table, pa.Table)


def test_read_incident_reads_what_the_analyzers_src_view_reads(archive: Path) -> None:
    import duckdb

    from fr_otel.analysis.source import register_archive

    chosen = Incident(job="j", incident="i")
    table = read_incident(archive, chosen).table
    with duckdb.connect() as connection:
        register_archive(connection, archive, only=chosen)
        viewed = connection.sql("SELECT * FROM src").to_arrow_table()
    assert table.column_names == viewed.column_names
    for name in table.column_names:
        assert table.column(name).equals(viewed.column(name)), name


def test_file_and_archive_sinks_take_a_path_given_as_text(archive: Path, tmp_path: Path) -> None:
    table = read_incident(archive, Incident(job="j", incident="i")).table
    spans = OtlpJsonSink(path=str(tmp_path / "spans.jsonl"), resource={})  # type: ignore[arg-type]
    assert spans.export(table).written == table.num_rows
    assert (tmp_path / "spans.jsonl").stat().st_size > 0
    copy = ParquetSink(archive=str(tmp_path / "copy"))  # type: ignore[arg-type]
    assert copy.export(table).files
