"""A large group's members, end to end with real processes: a simulated 128-rank NCCL
incident (groups of 2, 4, 16 and 128 ranks) is exported with ``fr-otel export --otlp``
to a real Collector running the shipped ``local.yaml``, which sends the spans on to a real
Jaeger and writes its OTLP JSON lines archive. Checked: in Jaeger, a 128-rank group's span
names its members as runs (``fr_otel.pg.rank_ranges``) and a small group's as the list
(``fr_otel.pg.ranks``); ``fr-otel import`` of the Collector's archive gives every row the
member list it had.

Stand-in, and why: Tempo is not built here (AGPL); its exporter points at a closed
loopback port and its queue retries, which nothing waits for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.otel import model
from tests.e2e import stack
from tests.e2e.spans import archive_spans, file_archive_spans, jaeger_spans, wait_for_jaeger
from tests.e2e.stack import free_port, running, tags, wait_until

JOB = "wide"
INCIDENT = "e2e-wide"
WORLD = 128
ENTRIES = 12


def _members(files: list[Path]) -> dict[tuple[int, int], list[int] | None]:
    table = pa.concat_tables(
        pq.read_table(p, columns=["rank", "record_id", "pg_ranks"]) for p in files
    )
    return {(row["rank"], row["record_id"]): row["pg_ranks"] for row in table.to_pylist()}


def test_a_large_groups_members_reach_jaeger_as_runs_and_import_back_whole(
    tmp_path: Path,
) -> None:
    dumps = tmp_path / "dumps"
    assert main(["simulate", str(dumps), "--world", str(WORLD), "--entries", str(ENTRIES)]) == 0
    archive = tmp_path / "archive"
    report = import_dumps([dumps], archive=archive, job=JOB, incident=INCIDENT)
    assert not report.problems
    sent = _members(report.files_written)
    sizes = {len(ranks or []) for ranks in sent.values()}
    assert max(sizes) == WORLD and min(sizes) <= model.PG_RANKS_LISTED_MAX, sizes
    expected = archive_spans(archive, JOB, INCIDENT)

    jaeger = stack.jaeger(tmp_path)
    collector = stack.collector(
        "collector",
        ["local.yaml"],
        tmp_path,
        env={
            "JAEGER_OTLP_ENDPOINT": jaeger.otlp_grpc,
            "TEMPO_OTLP_ENDPOINT": f"127.0.0.1:{free_port()}",  # no Tempo: see above
        },
    )
    with running(jaeger, collector):
        assert main(["export", str(archive), "--otlp", f"http://{collector.http}"]) == 0
        files = tmp_path / "otlp-archive"
        wait_until(
            f"the Collector's archive to hold the {len(expected)} spans",
            lambda: {s for _, s in file_archive_spans(files)} >= set(expected),
            timeout_s=60,
            interval_s=0.5,
        )
        wait_for_jaeger(jaeger, JOB, expected, timeout_s=60, interval_s=1)
        seen: dict[int, set[str]] = {}
        for _, span in jaeger_spans(jaeger, JOB):
            values = tags(span)
            size = int(values[model.PG_SIZE])
            if size > model.PG_RANKS_LISTED_MAX:
                assert model.PG_RANKS not in values, values
                if size == WORLD:
                    assert values[model.PG_RANK_RANGES] == f"0-{WORLD - 1}"
                seen.setdefault(size, set()).add(values[model.PG_RANK_RANGES])
            else:
                assert model.PG_RANK_RANGES not in values, values
                # Jaeger shows an array attribute as JSON text
                assert len(json.loads(values[model.PG_RANKS])) == size
        assert WORLD in seen, sorted(seen)

    back = tmp_path / "back"
    report = import_dumps(sorted(files.glob("spans*.jsonl")), archive=back)
    assert not report.problems, report.problems
    assert _members(report.files_written) == sent
