"""``fr-otel import DIR`` reads the OTLP JSON lines files in a folder (a Collector's file
archive: its live file and its rotated ones), and names each file it cannot use."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.analysis import analyze
from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.dumps.discover import discover
from fr_otel.sim import FleetSpec, simulate, write_fleet

WORLD = 8


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, list[str]]:
    """An archive of a simulated incident, and its spans as OTLP JSON lines (one line per
    export request)."""
    dumps, archive = tmp_path / "dumps", tmp_path / "archive"
    write_fleet(
        simulate(FleetSpec(world=WORLD, entries=40, fault="skipped_collective", fault_rank=5)),
        dumps,
    )
    assert import_dumps([dumps], archive=archive, job="fold", incident="i").ok
    spans = tmp_path / "all.jsonl"
    assert main(["export", str(archive), "--otlp-json", str(spans)]) == 0
    lines = spans.read_text().splitlines()
    spans.unlink()
    return archive, lines


def _rows(archive: Path) -> list[tuple[int, int, str | None]]:
    return sorted(
        (row["rank"], row["record_id"], row["op"])
        for path in archive.rglob("*.parquet")
        for row in pq.read_table(path, columns=["rank", "record_id", "op"]).to_pylist()
    )


def _split_lines(lines: list[str]) -> list[str]:
    """One line per rank's resource: enough lines to spread over several files."""
    out = []
    for line in lines:
        data = json.loads(line)
        out += [json.dumps({"resourceSpans": [r]}) for r in data["resourceSpans"]]
    return out


def _collector_folder(folder: Path, lines: list[str]) -> None:
    """As the Collector's file exporter leaves it: rotated files (one named .json), the
    live file, a retried batch written twice, and files that are not spans."""
    folder.mkdir()
    third = len(lines) // 3
    rotated = folder / "2026" / "spans-2026-08-22T10-15-00.123.jsonl"
    rotated.parent.mkdir()
    rotated.write_text("\n".join(lines[:third]) + "\n")
    # a rotated file of a `path: .../data.json` exporter: ends in a number, is no rank's dump
    (folder / "data-2026-08-22T10-16-00.456.json").write_text(
        "\n".join(lines[third : 2 * third]) + "\n"
    )
    live = [*lines[2 * third :], lines[0]]  # the first batch again: delivered twice
    (folder / "spans.jsonl").write_text("\n".join(live) + "\n")
    (folder / "README.txt").write_text("the gateway's archive\n")


def test_discovery_keeps_span_files_apart_from_dumps(
    tmp_path: Path, exported: tuple[Path, list[str]]
) -> None:
    _, lines = exported
    folder = tmp_path / "otlp"
    _collector_folder(folder, _split_lines(lines))
    found = discover([folder])
    assert found.files == []
    assert [p.name for p in found.spans] == [
        "spans-2026-08-22T10-15-00.123.jsonl",
        "data-2026-08-22T10-16-00.456.json",
        "spans.jsonl",
    ]
    assert found.empty == [] and found.missing == []
    # named, globbed and inside the folder: each once
    again = discover([folder / "spans.jsonl", str(folder / "*.jsonl"), folder])
    assert len(again.spans) == 3


def test_import_of_a_folder_reads_its_span_files(
    tmp_path: Path, exported: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    original, lines = exported
    folder = tmp_path / "otlp"
    _collector_folder(folder, _split_lines(lines))
    rebuilt = tmp_path / "rebuilt"
    assert main(["import", str(folder), "--archive", str(rebuilt)]) == 0
    out = capsys.readouterr().out
    assert f"imported {WORLD} ranks" in out and "from 3 OTLP JSON lines file(s)" in out
    assert "(job=fold incident=i)" in out
    # every entry once, the batch written twice included
    assert _rows(rebuilt) == _rows(original)
    first, second = analyze(original), analyze(rebuilt)
    assert [(f.kind, f.culprit_ranks, f.collective_seq_id) for f in second.findings] == [
        (f.kind, f.culprit_ranks, f.collective_seq_id) for f in first.findings
    ]
    # and analyze takes the folder as it is
    assert main(["analyze", str(folder)]) == 1
    assert "rank 5" in capsys.readouterr().out


def test_a_foreign_or_truncated_span_file_is_named_and_the_rest_imported(
    tmp_path: Path, exported: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    original, lines = exported
    lines = _split_lines(lines)
    folder = tmp_path / "otlp"
    folder.mkdir()
    half = len(lines) // 2
    (folder / "good.jsonl").write_text("\n".join(lines[:half]) + "\n")
    # the live file copied while a line was being written
    cut = "\n".join(lines[half:]) + "\n" + lines[0][: len(lines[0]) // 2]
    (folder / "cut.jsonl").write_text(cut)
    (folder / "logs.jsonl").write_text('{"resourceLogs": []}\n')
    (folder / "zstd.jsonl").write_bytes(b"\x28\xb5\x2f\xfd\x00binary")
    (folder / "other.jsonl").write_text(
        json.dumps(
            {
                "resourceSpans": [
                    {"scopeSpans": [{"spans": [{"traceId": "ab" * 16, "spanId": "cd" * 8}]}]}
                ]
            }
        )
        + "\n"
    )
    (folder / "broken.jsonl").write_text(lines[0] + "\n{not json\n" + lines[1] + "\n")
    (folder / "nothing.jsonl").write_text("")
    rebuilt = tmp_path / "rebuilt"
    assert main(["import", str(folder), "--archive", str(rebuilt)]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert f"{folder / 'cut.jsonl'}: truncated: line {len(lines) - half + 1}, the last" in err
    assert f"of the {len(lines) - half} complete line(s) before it were read" in err
    assert f"{folder / 'logs.jsonl'}: foreign: line 1 is not OTLP trace data" in err
    assert f"{folder / 'zstd.jsonl'}: foreign: not OTLP JSON lines" in err
    assert f"{folder / 'other.jsonl'}: foreign: none of its 1 spans is fr_otel's" in err
    assert f"{folder / 'broken.jsonl'}: corrupt: line 2 is not JSON" in err
    assert f"{folder / 'nothing.jsonl'}: empty: the file has no line" in err
    assert "Traceback" not in err
    assert "6 file(s) failed" in captured.out
    # the good file and the cut file's complete lines: every entry
    assert _rows(rebuilt) == _rows(original)

    strict = tmp_path / "strict"
    assert main(["import", str(folder), "--archive", str(strict), "--strict"]) == 2
    assert not strict.exists() or not list(strict.rglob("*.parquet"))


def test_spans_and_dumps_in_one_folder_are_refused(
    tmp_path: Path, exported: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    _, lines = exported
    folder = tmp_path / "mixed"
    write_fleet(simulate(FleetSpec(world=2, entries=5)), folder)
    (folder / "spans.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["import", str(folder), "--archive", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "import OTLP JSON lines files (spans) separately from Flight Recorder dumps" in err
    assert "spans.jsonl" in err
    assert not (tmp_path / "a").exists()
