"""The incident report links each cell to its span in the trace viewer: for a recorded job
too, whose spans' trace ids include its run id (``otel.model.group_key``). A real 2-rank
gloo job under ``fr-otel run`` whose rank 1 skips an all_reduce; its incident exported as
OTLP JSON lines, as the recorder's spans are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fr_otel.cli import main
from fr_otel.report.build import build_report
from tests.jobs import fr_otel_run, torchrun

pytestmark = pytest.mark.gloo

_TRAIN = """
import datetime, os, torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
x = torch.ones(8)
for step in range(4):
    dist.all_reduce(x)
if int(os.environ["RANK"]) != 1:
    dist.all_reduce(x)  # rank 1 skips this one
dist.all_reduce(x)
"""


def test_every_cell_of_a_recorded_incident_links_to_its_exported_span(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(_TRAIN)
    code, archive, _ = fr_otel_run(
        tmp_path / "archive", "links", torchrun(script, 2), FR_OTEL_LIVE="0"
    )
    assert code != 0
    spans_file = tmp_path / "spans.jsonl"
    assert main(["export", str(archive), "--job", "links", "--otlp-json", str(spans_file)]) == 0
    exported: dict[tuple[str, str], int] = {}
    runs = set()
    for line in spans_file.read_text().splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            attributes = {a["key"]: a["value"] for a in resource["resource"]["attributes"]}
            rank = int(attributes["fr_otel.rank"]["intValue"])
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    exported[(span["traceId"], span["spanId"])] = rank
                    runs |= {
                        a["value"]["stringValue"]
                        for a in span["attributes"]
                        if a["key"] == "fr_otel.run_id"
                    }
    assert len(runs) == 1 and None not in runs, runs  # a recorded run: its id is in the trace ids

    grid = build_report(archive, job="links", trace_ids=True, span_ids=True).grid
    cells = list(zip(grid.cells["row"], grid.cells["trace"], grid.cells["span"], strict=True))
    assert len(cells) >= 2 * 4
    for row, trace, span in cells:
        assert exported.get((grid.traces[trace], span)) == grid.rows[row].rank, (row, span)
