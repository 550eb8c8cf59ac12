"""Torch's own dumps as the recorder saves them beside an incident
(``ARCHIVE/_fr_dumps/job=J/run=R/incident=I/comm_lib_trace_rank_N``) import under the job
and run their folders name, so their spans are in the recorder's traces."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.otel import model
from tests.fr_dumps import fr_dump, fr_entry, write_pickle

RUNS = {"titan": "20261201T070000Z-aaaa1111", "llama": "20261201T070500Z-bbbb2222"}


def _save(saved: Path, job: str, incident: str, seqs: range) -> None:
    """Ranks 0 and 1's dumps of ``incident``, where the recorder's flush puts them."""
    for rank in (0, 1):
        entries = [fr_entry(record_id=seq - 1, seq=seq) for seq in seqs]
        write_pickle(
            saved / f"job={job}" / f"run={RUNS[job]}" / f"incident={incident}"
            f"/comm_lib_trace_rank_{rank}",
            fr_dump(entries),
        )


def _rows(folder: Path) -> list[dict[str, object]]:
    """The rows of every rank file under ``folder``."""
    return [
        row for file in sorted(folder.rglob("*.parquet")) for row in pq.read_table(file).to_pylist()
    ]


def _trace_ids(path: Path) -> set[str]:
    """Every span's trace id in ``fr-otel export --otlp-json``'s file."""
    return {
        span["traceId"]
        for line in path.read_text().splitlines()
        for resource_spans in json.loads(line)["resourceSpans"]
        for scope in resource_spans["scopeSpans"]
        for span in scope["spans"]
    }


def test_saved_dumps_of_two_jobs_import_each_under_its_own_job_and_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, every dump went under ``job=default`` (or ``FR_OTEL_JOB``'s job): trace
    ids derive from the job, and none of them was the recorder's."""
    monkeypatch.setenv("FR_OTEL_JOB", "from-the-environment")  # the dumps say theirs
    saved = tmp_path / "archive" / "_fr_dumps"
    _save(saved, "titan", "20261201T071000Z-aaaa1111-r1-timeout", range(1, 4))
    _save(saved, "llama", "20261201T071500Z-bbbb2222-r0-exception", range(1, 3))
    other = tmp_path / "other"
    assert main(["import", str(saved), "--archive", str(other)]) == 0
    assert sorted(p.name for p in other.glob("job=*")) == ["job=llama", "job=titan"]
    for job, entries in (("titan", 6), ("llama", 4)):
        rows = _rows(other / f"job={job}")
        assert len(rows) == entries
        assert {(r["job"], r["run_id"]) for r in rows} == {(job, RUNS[job])}

    out = tmp_path / "titan.jsonl"
    assert main(["export", str(other), "--job", "titan", "--otlp-json", str(out)]) == 0
    # a collective's trace is its group's (job and run included) and sequence number's
    expected = {
        model.trace_id(
            model.trace_key(
                job="titan",
                pg_name="0",
                pg_ranks=[0, 1],
                collective_seq_id=seq,
                is_p2p=False,
                rank=0,
                p2p_seq_id=0,
                run_id=RUNS["titan"],
            )
        ).hex()
        for seq in (1, 2, 3)
    }
    assert _trace_ids(out) == expected


def test_a_job_named_by_the_caller_wins_over_the_folders(tmp_path: Path) -> None:
    saved = tmp_path / "_fr_dumps"
    _save(saved, "titan", "i", range(1, 4))
    _save(saved, "llama", "i", range(1, 3))
    report = import_dumps([saved], archive=tmp_path / "a", job="mine")
    assert report.ok and report.job == "mine"
    assert sorted(p.name for p in (tmp_path / "a").glob("job=*")) == ["job=mine"]


def test_each_saved_incident_folder_is_an_incident_of_its_own(tmp_path: Path) -> None:
    """Two incidents of one run (a snapshot, then the crash), each rank's dump saved in
    each: before, the folders made one incident, and each rank's older dump was dropped
    as a duplicate of its newer one."""
    saved = tmp_path / "_fr_dumps"
    _save(saved, "titan", "20261201T071000Z-aaaa1111-r1-snapshot", range(1, 4))
    _save(saved, "titan", "20261201T071200Z-aaaa1111-r1-timeout", range(2, 6))
    archive = tmp_path / "a"
    report = import_dumps([saved], archive=archive)
    assert report.ok, report.problems
    assert len(report.incidents) == 2 and report.job == "titan"
    assert sorted(
        len(_rows(archive / "job=titan" / f"incident={i}")) for i in report.incidents
    ) == [6, 8]
    # ids derived from the dumps, never the folder's: that incident of the same archive
    # holds the recorder's own rank files, which these would replace
    assert not {
        "20261201T071000Z-aaaa1111-r1-snapshot",
        "20261201T071200Z-aaaa1111-r1-timeout",
    } & set(report.incidents)
    # and the same again lands in the same places
    again = import_dumps([saved], archive=archive)
    assert again.job_incidents == report.job_incidents
