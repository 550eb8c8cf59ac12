"""A large group's members written once in each rank file's footer, not on every row: what
the archive's readers give back is the same rows, the same findings."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fr_otel.analysis import analyze
from fr_otel.analysis.source import open_source
from fr_otel.archive import footer_members, import_dumps
from fr_otel.archive.checks import check_rank_file
from fr_otel.archive.incidents import Incident
from fr_otel.archive.read import read_incident
from fr_otel.archive.rows import write_rows
from fr_otel.cli import main
from fr_otel.config import RecorderSettings, otlp_settings
from fr_otel.errors import DumpError
from fr_otel.otel import model
from fr_otel.otel.transport import exporter_for
from fr_otel.recorder.flush import flush_ring
from fr_otel.recorder.ring import read_ring, ring_base
from fr_otel.recorder.table import ring_table
from fr_otel.sim import FleetSpec, simulate, write_fleet
from fr_otel.sinks import MemorySink, OtlpJsonSink, export
from tests.otlp_receiver import OtlpReceiver
from tests.rings import write_ring
from tests.rows import canonical_row, canonical_table


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated 3-D job's dumps (tp, pp and dp groups, a desync)."""
    folder = tmp_path_factory.mktemp("footer") / "dumps"
    fleet = simulate(FleetSpec(world=8, entries=40, tp=2, fault="skipped_collective", seed=5))
    write_fleet(fleet, folder)
    return folder


@pytest.fixture(scope="module")
def incident_rows(dumps: Path) -> pa.Table:
    """The job's rows, as an import gives them."""
    archive = dumps.parent / "archive"
    report = import_dumps([dumps], archive=archive, job="j", incident="i")
    assert report.ok
    return read_incident(archive, Incident(job="j", incident="i")).table


def _written(rows: pa.Table, archive: Path, monkeypatch: pytest.MonkeyPatch, least: int) -> Path:
    monkeypatch.setattr(footer_members, "FOOTER_MIN_MEMBERS", least)
    write_rows(rows, archive)
    monkeypatch.undo()
    return archive


def _full_ring(tmp_path: Path, *, world: int, rank: int) -> Path:
    """The ring (its base path) of a rank of job ``big`` that issued 2,000 collectives in
    its ``world``-rank default group, under ``tmp_path/_rings``."""
    base = ring_base(tmp_path / "_rings", "big", rank)
    write_ring(base, rank=rank, world=world, job="big", seqs=range(1, 2001), capacity=2000)
    return base


def _src(archive: Path) -> list[tuple[object, ...]]:
    with open_source(archive) as source:
        return source.connection.execute("SELECT * FROM src ORDER BY rank, record_id").fetchall()


def test_readers_give_back_every_row_as_a_file_with_lists_on_its_rows(
    incident_rows: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every group of more than one member goes to the footer in one archive, none in the other
    inline = _written(incident_rows, tmp_path / "inline", monkeypatch, 10**9)
    footer = _written(incident_rows, tmp_path / "footer", monkeypatch, 1)

    file = footer / "job=j" / "incident=i" / "rank-000003.parquet"
    raw = pq.read_table(file)
    assert raw.schema.metadata[b"fr_otel.schema_version"] == b"3"
    lifted = json.loads(raw.schema.metadata[footer_members.MEMBERS_KEY])
    assert len(lifted) >= 3, lifted  # rank 3's tp, pp, dp and default groups
    assert raw["pg_ranks"].null_count == raw.num_rows
    assert check_rank_file(file).footer_members() == lifted
    assert (
        pq.read_table(inline / "job=j" / "incident=i" / "rank-000003.parquet")[
            "pg_ranks"
        ].null_count
        == 0
    )

    assert _src(footer) == _src(inline)
    one = Incident(job="j", incident="i")
    assert read_incident(footer, one).table.equals(read_incident(inline, one).table)
    only = read_incident(footer, one, columns=["rank", "pg_ranks"]).table
    assert only.column_names == ["rank", "pg_ranks"]
    assert only.equals(read_incident(inline, one, columns=["rank", "pg_ranks"]).table)

    found = analyze(footer).to_dict()
    assert found["findings"], "the fleet's skipped collective is found"
    assert found["findings"] == analyze(inline).to_dict()["findings"]


def test_a_rank_of_a_100000_rank_job_flushes_its_incident_within_the_deadline(
    tmp_path: Path,
) -> None:
    # the recorder's own flush (archive and spans) of a full 2,000-entry ring: with the
    # group's list copied into every row it took 14 s and 3.3 GB, past the 5 s deadline
    base = _full_ring(tmp_path, world=100_000, rank=7)
    with OtlpReceiver(protocol="http") as receiver:
        settings = RecorderSettings(
            job="big",
            archive=tmp_path / "archive",
            otlp=otlp_settings(receiver.endpoint, "http/protobuf"),
        )
        assert settings.otlp is not None
        started = time.monotonic()
        report = flush_ring(
            read_ring(base),
            settings=settings,
            incident="crash",
            exporter=exporter_for(settings.otlp),
            deadline=started + settings.flush_deadline_s,
        )
        spans = receiver.wait_for_spans(2000)
    assert report.ok, report.problems
    assert report.elapsed_s < settings.flush_deadline_s
    assert report.archived is not None
    assert check_rank_file(report.archived).footer_members() == {"0": "0-99999"}
    assert len(spans) == 2000
    runs = {
        a.value.string_value
        for _, span in spans
        for a in span.attributes
        if a.key == model.PG_RANK_RANGES
    }
    assert runs == {"0-99999"}


def test_an_import_of_dumps_keeps_large_groups_members_in_the_footers(
    dumps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inline = tmp_path / "inline"
    assert import_dumps([dumps], archive=inline, job="j", incident="i", workers=1).ok
    # every group of more than one member counts as large: each dump's rows are one
    # dictionary column of its groups' lists, written once per file
    monkeypatch.setattr(footer_members, "FOOTER_MIN_MEMBERS", 1)
    footer = tmp_path / "footer"
    report = import_dumps([dumps], archive=footer, job="j", incident="i", workers=1)
    monkeypatch.undo()
    assert report.ok and len(report.rank_files) == 8

    for described in report.rank_files:
        assert described.members, described.path  # every rank is in a tp, pp and dp group
        assert pq.read_table(described.path)["pg_ranks"].null_count > 0
        # the import's account of each file is its footer's
        assert dataclasses.asdict(described) == dataclasses.asdict(check_rank_file(described.path))
    assert _src(footer) == _src(inline)
    found = analyze(footer).to_dict()
    assert found["findings"] and found["findings"] == analyze(inline).to_dict()["findings"]


def test_a_recorder_flush_of_a_100000_rank_group_writes_its_members_once(
    tmp_path: Path,
) -> None:
    # a rank's ring of 2,000 entries in a 100,000-rank default group, as `fr-otel run`
    # imports what a rank left: copied into each row it was 200 million integers
    _full_ring(tmp_path, world=100_000, rank=7)
    rings = tmp_path / "_rings"
    archive = tmp_path / "archive"
    assert main(["import", str(rings), "--archive", str(archive), "--incident", "crash"]) == 0

    (file,) = (archive / "job=big" / "incident=crash").glob("*.parquet")
    assert file.stat().st_size < 1_000_000
    assert json.loads(pq.read_metadata(file).metadata[footer_members.MEMBERS_KEY]) == {
        "0": "0-99999"
    }
    with open_source(archive) as source:
        assert source.connection.execute("SELECT count(*) FROM src").fetchone() == (2000,)
        # a few rows: each holds its 100,000-member list again once read
        rows = source.connection.execute(
            "SELECT collective_seq_id, len(pg_ranks), pg_ranks[1], pg_ranks[-1] FROM src"
            " WHERE collective_seq_id IN (1, 2000) ORDER BY 1"
        ).fetchall()
    assert rows == [(1, 100_000, 0, 99_999), (2000, 100_000, 0, 99_999)]
    manifest = json.loads((file.parent / "_incident.json").read_text())
    assert [len(g["ranks"]) for g in manifest["groups"]] == [100_000]


def test_spans_fr_otel_exported_of_a_16384_rank_group_import_back(tmp_path: Path) -> None:
    # 2,000 spans whose members are the runs "0-16383": each row's list counted against
    # the expansion bound, this file fr_otel wrote was refused as hostile
    _full_ring(tmp_path, world=16_384, rank=3)
    rings = tmp_path / "_rings"
    archive, spans = tmp_path / "archive", tmp_path / "spans.jsonl"
    assert main(["import", str(rings), "--archive", str(archive), "--incident", "crash"]) == 0
    assert main(["export", str(archive), "--otlp-json", str(spans)]) == 0

    report = import_dumps([spans], archive=tmp_path / "again")
    assert not report.problems, report.problems
    (file,) = report.files_written
    assert check_rank_file(file).footer_members() == {"0": "0-16383"}
    with open_source(tmp_path / "again") as source:
        assert source.connection.execute(
            "SELECT count(*), count(*) FILTER (WHERE pg_ranks_inferred) FROM src"
        ).fetchone() == (2000, 0)
        rows = source.connection.execute(
            "SELECT collective_seq_id, len(pg_ranks), pg_ranks[-1] FROM src"
            " WHERE collective_seq_id IN (1, 2000) ORDER BY 1"
        ).fetchall()
    assert rows == [(1, 16_384, 16_383), (2000, 16_384, 16_383)]


def test_ranks_whose_rows_come_interleaved_each_write_their_footer(tmp_path: Path) -> None:
    # two ranks' rows of a 2,048-rank group, each rank's table with its own dictionary of
    # member lists (as each ring's rows are), the second rank's rows between the first's:
    # Arrow can neither concatenate nor sort such a column by itself
    tables = []
    for rank in (0, 1):
        base = ring_base(tmp_path / "_rings", "wide", rank)
        write_ring(base, rank=rank, world=2048, job="wide", seqs=range(1, 7), capacity=8)
        tables.append(
            ring_table(
                read_ring(base),
                job="wide",
                incident="i",
                dump_time_ns=1,
                members_as_dictionary=True,
            )
        )
    first, second = tables
    assert pa.types.is_dictionary(first.schema.field("pg_ranks").type)
    mixed = pa.concat_tables([first.slice(0, 3), second, first.slice(3)])
    archive = tmp_path / "archive"
    written = write_rows(mixed, archive)

    assert len(written) == 2
    for file in written:
        assert check_rank_file(file).footer_members() == {"0": "0-2047"}
        assert pq.read_table(file)["collective_seq_id"].to_pylist() == [1, 2, 3, 4, 5, 6]
    with open_source(archive) as source:
        rows = source.connection.execute(
            "SELECT rank, count(*), min(len(pg_ranks)), max(pg_ranks[-1]) FROM src"
            " GROUP BY rank ORDER BY rank"
        ).fetchall()
    assert rows == [(0, 6, 2048, 2047), (1, 6, 2048, 2047)]


def test_an_incident_read_for_export_holds_each_long_member_list_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a data-parallel job: every entry in a 128-rank group, one with members in the footer
    dumps = tmp_path / "dumps"
    write_fleet(
        simulate(FleetSpec(world=128, entries=50, tp=1, pp=1, fault="skipped_collective")),
        dumps,
    )
    archive = tmp_path / "archive"
    assert import_dumps([dumps], archive=archive, job="j", incident="i").ok
    one = Incident(job="j", incident="i")
    (first, *_) = sorted(archive.glob("*/*/*.parquet"))
    assert not check_rank_file(first).footer_members(), "128 members stay on the rows"
    _written(pq.read_table(first), archive, monkeypatch, 100)  # rank 0's lists to its footer
    assert check_rank_file(first).footer_members()

    plain = read_incident(archive, one).table
    shared = read_incident(archive, one, shared_members=True).table
    members = shared["pg_ranks"].combine_chunks()
    assert pa.types.is_dictionary(members.type)
    assert len(members.dictionary) <= 2 * 128  # a list or two per rank file, not per row
    assert members.to_pylist() == plain["pg_ranks"].to_pylist()
    assert shared.drop_columns(["pg_ranks"]).equals(plain.drop_columns(["pg_ranks"]))
    assert {len(r) for r in members.to_pylist()} == {128}

    # what export sends: the same spans either way
    by_table = {}
    for name, table in (("plain", plain), ("shared", shared)):
        sink = OtlpJsonSink(path=tmp_path / f"{name}.jsonl")
        assert sink.export(table).written == plain.num_rows
        by_table[name] = sink.path.read_bytes()
    assert by_table["plain"] == by_table["shared"]
    memory = MemorySink()
    export(archive, [memory])
    (sent,) = memory.tables
    assert pa.types.is_dictionary(sent.schema.field("pg_ranks").type)


def test_a_name_whose_large_lists_differ_within_a_file_keeps_them_on_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # replicas that reuse a group name: one file never holds two of its lists in the footer
    rows = [
        canonical_row(rank=0, record_id=0, pg_name="r", pg_ranks=[0, 1, 2]),
        canonical_row(rank=0, record_id=1, pg_name="r", pg_ranks=[0, 1, 2]),
        canonical_row(rank=0, record_id=2, pg_name="r", pg_ranks=[4, 5, 6]),
        canonical_row(rank=0, record_id=3, pg_name="w", pg_ranks=[0, 1, 2, 3]),
        canonical_row(rank=0, record_id=4, pg_name="s", pg_ranks=[0, 1]),
    ]
    (file,) = _written(canonical_table(rows), tmp_path, monkeypatch, 2).glob("*/*/*.parquet")

    assert check_rank_file(file).footer_members() == {"w": "0-3"}
    assert pq.read_table(file)["pg_ranks"].to_pylist() == [
        [0, 1, 2],
        [0, 1, 2],
        [4, 5, 6],
        None,
        [0, 1],
    ]
    with open_source(tmp_path) as source:
        back = source.connection.execute("SELECT pg_ranks FROM src ORDER BY record_id").fetchall()
    assert [r for (r,) in back] == [[0, 1, 2], [0, 1, 2], [4, 5, 6], [0, 1, 2, 3], [0, 1]]


def test_a_damaged_footer_list_names_the_file_and_leaves_it_out(tmp_path: Path) -> None:
    rows = canonical_table([canonical_row(rank=r, record_id=0, pg_ranks=[0, 1]) for r in (0, 1)])
    write_rows(rows, tmp_path)
    bad = tmp_path / "job=job" / "incident=inc" / "rank-000001.parquet"
    table = pq.read_table(bad)
    pq.write_table(
        table.replace_schema_metadata(
            {**table.schema.metadata, footer_members.MEMBERS_KEY: b'{"0": "0-x"}'}
        ),
        bad,
    )
    with pytest.raises(DumpError) as raised:
        check_rank_file(bad)
    assert raised.value.path == str(bad) and raised.value.problem == "corrupt"
    assert "group members in its footer" in str(raised.value) and "'0-x'" in str(raised.value)
    with open_source(tmp_path) as source:
        assert source.connection.execute("SELECT DISTINCT rank FROM src").fetchall() == [(0,)]
        assert [p.path for p in source.import_problems] == [str(bad)]


def test_a_file_of_a_later_schema_is_refused_as_foreign(tmp_path: Path) -> None:
    write_rows(canonical_table([canonical_row(rank=0, record_id=0)]), tmp_path)
    (file,) = tmp_path.glob("*/*/*.parquet")
    table = pq.read_table(file)
    pq.write_table(
        table.replace_schema_metadata({**table.schema.metadata, b"fr_otel.schema_version": b"4"}),
        file,
    )
    with pytest.raises(DumpError, match="version 4; this fr_otel reads versions 1, 2, 3") as raised:
        check_rank_file(file)
    assert raised.value.problem == "foreign"
