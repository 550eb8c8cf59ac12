"""The Collector's file archive back into fr_otel: a real archive, exported as spans and
written the way the file exporter writes them (collector-config/gateway.yaml's
``file/archive``), imports with ``fr-otel import`` to the same rows.

The file exporter's ``format: json`` without compression writes each batch it receives as
one line: the ``ExportTraceServiceRequest`` as OTLP JSON (pdata's JSON marshaler: hex ids,
enums as integers, 64-bit integers as decimal strings, lowerCamelCase keys), then ``\\n``.
Rotation renames the full file to ``<stem>-<UTC time as 2006-01-02T15-04-05.000><ext>`` and
starts a new one. ``fr_otel.otel.jsonfile`` writes the same lines.

Both namings import: collector-config's ``spans.jsonl`` (the OTLP file spec's preferred
extension) and the file exporter's usual ``data.json``.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.otel.encode import encode_requests
from fr_otel.otel.jsonfile import to_otlp_json, write_otlp_json
from fr_otel.schema import COLUMNS
from tests.rows import SPAN_CARRIED, SPAN_NOT_CARRIED

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
GATEWAY = yaml.safe_load((ROOT / "collector-config" / "gateway.yaml").read_text())
ROTATED_AT = datetime(2026, 8, 22, 10, 15, 0, 123_000, tzinfo=timezone.utc)


CONFIG_PATH = PurePosixPath(GATEWAY["exporters"]["file/archive"]["path"])
NAMINGS = {"gateway.yaml": CONFIG_PATH.name, "data.json": "data.json"}


def archive_paths(current: str) -> tuple[str, str]:
    """The file exporter's current file and a rotated one, for the current file's name."""
    path = PurePosixPath(current)
    stamp = ROTATED_AT.strftime("%Y-%m-%dT%H-%M-%S.") + f"{ROTATED_AT.microsecond // 1000:03d}"
    return path.name, f"{path.stem}-{stamp}{path.suffix}"


def file_exporter_lines(table: pa.Table) -> list[str]:
    """The spans of ``table`` as the file exporter writes them: several batches, one line
    each (a small byte budget gives several requests)."""
    return [
        json.dumps(to_otlp_json(request), separators=(",", ":")) + "\n"
        for request in encode_requests(table, max_bytes=20_000)
    ]


def check_otlp_json_line(line: str) -> None:
    """One file exporter line: an ExportTraceServiceRequest in OTLP JSON."""
    assert line.endswith("\n") and "\n" not in line[:-1]
    message = json.loads(line)
    assert set(message) == {"resourceSpans"}
    for resource_spans in message["resourceSpans"]:
        assert set(resource_spans) <= {"resource", "scopeSpans", "schemaUrl"}
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                assert re.fullmatch(r"[0-9a-f]{32}", span["traceId"])
                assert re.fullmatch(r"[0-9a-f]{16}", span["spanId"])
                assert isinstance(span["kind"], int)
                assert re.fullmatch(r"\d+", span["startTimeUnixNano"])
                assert re.fullmatch(r"\d+", span["endTimeUnixNano"])
                assert isinstance(span.get("status", {}).get("code", 0), int)
                for attribute in span["attributes"]:
                    value = attribute["value"]
                    if "intValue" in value:
                        assert re.fullmatch(r"-?\d+", value["intValue"])


def span_view(row: dict[str, Any]) -> dict[str, Any]:
    """A canonical row as far as its span carries it."""
    out = {column: row[column] for column in SPAN_CARRIED}
    done = row["state"] == "completed" or (row["backend"] == "gloo" and bool(row["retired"]))
    out["collective_seq_id"] = None if row["is_p2p"] else row["collective_seq_id"]
    out["p2p_seq_id"] = row["p2p_seq_id"] if row["is_p2p"] else None
    out["time_completed_ns"] = row["time_completed_ns"] if row["state"] == "completed" else None
    out["dump_time_ns"] = None if done else row["dump_time_ns"]
    return out


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["job"], r["incident"], r["rank"], r["record_id"]))


def _rows(archive: Path) -> list[dict[str, Any]]:
    tables = [pq.read_table(p) for p in sorted(archive.rglob("*.parquet"))]
    assert tables, f"nothing in {archive}"
    return _sorted(pa.concat_tables(tables).to_pylist())


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, list[dict[str, Any]]]:
    archive = tmp_path_factory.mktemp("original") / "archive"
    report = import_dumps(
        [DATA / "gloo_skipped_collective"], archive=archive, job="gl", incident="i"
    )
    assert report.files_written
    table = pa.concat_tables(pq.read_table(p) for p in report.files_written)
    return table, _rows(archive)


@pytest.fixture(params=sorted(NAMINGS), ids=str)
def archive_dir(
    original: tuple[pa.Table, list[dict[str, Any]]], tmp_path: Path, request: pytest.FixtureRequest
) -> Path:
    """The file exporter's directory: a rotated file with the first batches, the current
    file with the rest."""
    lines = file_exporter_lines(original[0])
    assert len(lines) >= 2, "several batches"
    current, rotated = archive_paths(NAMINGS[request.param])
    half = len(lines) // 2
    out = tmp_path / "otlp"
    out.mkdir()
    (out / rotated).write_text("".join(lines[:half]), encoding="utf-8")
    (out / current).write_text("".join(lines[half:]), encoding="utf-8")
    return out


def test_the_archive_is_written_in_the_file_exporters_format(
    original: tuple[pa.Table, list[dict[str, Any]]], archive_dir: Path
) -> None:
    names = sorted(p.name for p in archive_dir.iterdir())
    stamp = r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}"
    assert names in (
        ["spans-2026-08-22T10-15-00.123.jsonl", "spans.jsonl"],
        ["data-2026-08-22T10-15-00.123.json", "data.json"],
    )
    assert re.fullmatch(rf"[a-z]+-{stamp}\.jsonl?", names[0])
    spans = 0
    for path in archive_dir.iterdir():
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                check_otlp_json_line(line)
                message = json.loads(line)
                spans += sum(
                    len(s["spans"]) for r in message["resourceSpans"] for s in r["scopeSpans"]
                )
    assert spans == original[0].num_rows


def test_fr_otels_own_json_lines_are_the_same_format(
    original: tuple[pa.Table, list[dict[str, Any]]], tmp_path: Path
) -> None:
    written = tmp_path / "spans.jsonl"
    write_otlp_json(encode_requests(original[0], max_bytes=20_000), written)
    ours = written.read_text(encoding="utf-8").splitlines(keepends=True)
    assert ours == file_exporter_lines(original[0])


def test_a_rotated_archive_round_trips_through_fr_otel_import(
    original: tuple[pa.Table, list[dict[str, Any]]], archive_dir: Path, tmp_path: Path
) -> None:
    files = sorted(str(p) for p in archive_dir.iterdir())
    back = tmp_path / "back"
    assert main(["import", *files, "--archive", str(back)]) == 0
    rows = _rows(back)
    before = original[1]
    assert len(rows) == len(before)
    assert [span_view(r) for r in rows] == [span_view(r) for r in before]
    for row in rows:
        assert all(row[column] is None for column in SPAN_NOT_CARRIED), row
        assert row["source_format"] == "otlp"
        assert set(row) == set(COLUMNS)
    for after, row in zip(rows, before, strict=True):
        assert after["retired"] in (None, row["retired"])


def test_a_batch_written_twice_imports_once(
    original: tuple[pa.Table, list[dict[str, Any]]], archive_dir: Path, tmp_path: Path
) -> None:
    files = sorted(archive_dir.iterdir())
    with files[0].open("a", encoding="utf-8") as handle:
        handle.write(files[0].read_text(encoding="utf-8").splitlines(keepends=True)[0])
    back = tmp_path / "back"
    # the Collector delivers at least once: a batch retried after a partial failure is
    # written again, and import keeps one row per (job, incident, rank, record_id)
    assert main(["import", *map(str, files), "--archive", str(back)]) == 0
    assert len(_rows(back)) == len(original[1])
