"""Member lists of large groups travel as runs (``fr_otel.pg.rank_ranges``): exact both
ways, short for real layouts, and refused with a clear error when a span's text is not
one (it is input: ``fr-otel import`` reads it from any file)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fr_otel.archive import import_dumps
from fr_otel.archive.spans_file import read_spans_file
from fr_otel.otel import model
from fr_otel.otel.encode import encode_requests, row_to_span
from fr_otel.otel.jsonfile import read_otlp_json, to_otlp_json, write_otlp_json
from fr_otel.otel.otlp_import import import_traces
from fr_otel.otel.rankranges import from_ranges, to_ranges
from fr_otel.otel.wire import encode_requests_fast
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.rows import canonical_row, canonical_table

LAYOUTS = {
    "default group": (list(range(10_000)), "0-9999"),
    "dp group (tp=2, pp=4)": (list(range(3, 10_000, 8)), "3-9995/8"),
    "descending": (list(range(99, -1, -1)), "99-0"),
    "two hosts": ([*range(8), *range(64, 72)], "0-7,64-71"),
    "pairs": ([5, 9], "5,9"),
    "neighbours": ([5, 6], "5-6"),
    "one": ([7], "7"),
    "none": ([], ""),
    "repeats": ([4, 4, 4], "4,4,4"),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_layouts_are_short_and_exact(name: str) -> None:
    ranks, text = LAYOUTS[name]
    assert to_ranges(ranks) == text
    assert from_ranges(text) == ranks


def test_any_list_of_ranks_comes_back_exactly() -> None:
    rng = random.Random(7)
    for _ in range(3_000):
        ranks = [rng.randrange(0, rng.choice([4, 30, 5_000])) for _ in range(rng.randrange(0, 40))]
        if rng.random() < 0.3:
            ranks.sort(reverse=rng.random() < 0.5)
        assert from_ranges(to_ranges(ranks)) == ranks, ranks


@pytest.mark.parametrize(
    "text", ["a", "1-", "-1", "1/2", "1-5/0", "1--2", "1,,2", " 1", "1-2/x", "١"]
)
def test_text_that_is_not_runs_is_refused_naming_the_part(text: str) -> None:
    with pytest.raises(ValueError, match="is not a rank run") as caught:
        from_ranges(text)
    assert repr(text) in str(caught.value)


def test_runs_naming_more_ranks_than_any_job_are_refused_before_they_are_built() -> None:
    with pytest.raises(ValueError, match="more than 1,048,576 ranks"):
        from_ranges("0-999999999999")
    with pytest.raises(ValueError, match="more than 10 ranks"):
        from_ranges("0-5,0-5", limit=10)


def _attributes(ranks: list[int]) -> dict[str, object]:
    span = row_to_span(canonical_row(pg_ranks=ranks))
    values: dict[str, object] = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        values[kv.key] = (
            [v.int_value for v in kv.value.array_value.values]
            if kind == "array_value"
            else getattr(kv.value, kind)
        )
    return values


def test_spans_list_groups_up_to_64_members_and_give_larger_ones_as_runs() -> None:
    small = _attributes(list(range(model.PG_RANKS_LISTED_MAX)))
    assert small[model.PG_RANKS] == list(range(model.PG_RANKS_LISTED_MAX))
    assert model.PG_RANK_RANGES not in small
    big = _attributes(list(range(100_000)))
    assert big[model.PG_RANK_RANGES] == "0-99999"
    assert model.PG_RANKS not in big
    assert big[model.PG_SIZE] == 100_000
    # a member that is no rank (a broken dump) is kept as it is, in the list
    odd = _attributes([*range(100), -1])
    assert odd[model.PG_RANKS] == [*range(100), -1]


def test_a_100000_rank_group_costs_a_span_what_a_small_one_does() -> None:
    rows = [canonical_row(record_id=i, pg_ranks=list(range(100_000))) for i in range(50)]
    small = [canonical_row(record_id=i, pg_ranks=[0, 1]) for i in range(50)]
    big_bytes = sum(map(len, encode_requests_fast(canonical_table(rows))))
    small_bytes = sum(map(len, encode_requests_fast(canonical_table(small))))
    # the list was 5 B a member: 500 KB a span
    assert big_bytes < small_bytes + 50 * 100


def test_a_fleet_with_large_groups_round_trips_through_spans(tmp_path: Path) -> None:
    """Dumps of 128 ranks (groups of 2, 4, 16 and 128) -> spans -> rows: every member list
    and every id is what it was; the import's rows encode to the same bytes again."""
    write_fleet(simulate(FleetSpec(world=128, entries=40, fault="gpu_hang")), tmp_path / "d")
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "a", job="j", incident="i")
    assert not report.problems
    table = pa.concat_tables(pq.read_table(p) for p in report.files_written).sort_by(
        [("rank", "ascending"), ("record_id", "ascending")]
    )
    sizes = {len(r) for r in table.column("pg_ranks").to_pylist()}
    assert max(sizes) > model.PG_RANKS_LISTED_MAX >= min(sizes)
    path = tmp_path / "spans.jsonl"
    write_otlp_json(encode_requests(table), path)
    text = path.read_text()
    assert model.PG_RANK_RANGES in text
    read = read_spans_file(path)  # what fr-otel import reads a spans file with
    assert read.problem is None and read.table is not None
    back = read.table
    assert back.column("pg_ranks").to_pylist() == table.column("pg_ranks").to_pylist()
    assert _ids(back) == _ids(table)


def _ids(table: pa.Table) -> list[tuple[bytes, bytes]]:
    return [
        (span.trace_id, span.span_id)
        for request in encode_requests(table)
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]


def test_a_span_whose_runs_are_not_runs_is_a_clear_import_problem(tmp_path: Path) -> None:
    request = next(
        iter(encode_requests(canonical_table([canonical_row(pg_ranks=list(range(100)))])))
    )
    data = to_otlp_json(request)
    for kv in data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]:
        if kv["key"] == model.PG_RANK_RANGES:
            kv["value"]["stringValue"] = "0-99,x"
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(data) + "\n")
    report = import_dumps([path], archive=tmp_path / "a")
    assert not report.files_written
    (problem,) = report.problems
    assert problem.path == str(path)
    assert problem.problem == "corrupt"
    assert "'x' is not a rank run" in str(problem)


def test_runs_that_would_expand_past_the_bound_dumps_have_are_refused_as_hostile(
    tmp_path: Path,
) -> None:
    """A few bytes of runs name a million ranks: 8 MB for each distinct text. Past 64
    times the file's size (plus 16 MiB), as for pickles, the file is refused before it is
    built; a file of the same shape with real groups still imports, and so does one whose
    rows all name the same million ranks (one list, shared by the rows)."""
    rows = [canonical_row(record_id=i, pg_ranks=list(range(100))) for i in range(200)]
    data = to_otlp_json(next(iter(encode_requests(canonical_table(rows)))))
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(data) + "\n")
    report = import_dumps([path], archive=tmp_path / "fine")
    assert not report.problems, report.problems
    assert _rows_of(report.files_written) == [list(range(100))] * 200
    spans = data["resourceSpans"][0]["scopeSpans"][0]["spans"]

    def runs(text: Callable[[int], str]) -> None:
        for index, span in enumerate(spans):
            for kv in span["attributes"]:
                if kv["key"] == model.PG_RANK_RANGES:
                    kv["value"]["stringValue"] = text(index)
        path.write_text(json.dumps(data) + "\n")

    runs(lambda _: "0-999999")
    report = import_dumps([path], archive=tmp_path / "one")
    assert not report.problems, report.problems
    (file,) = report.files_written
    assert pq.read_table(file)["pg_ranks"].null_count == 200  # the list is in the footer
    runs(lambda index: f"{index}-999999")
    report = import_dumps([path], archive=tmp_path / "bomb")
    assert not report.files_written
    (problem,) = report.problems
    assert (problem.path, problem.problem) == (str(path), "hostile")
    assert model.PG_RANK_RANGES in str(problem)
    # ValueError, not the class: other tests re-import fr_otel's modules
    with pytest.raises(ValueError, match="more than 1,000 ranks") as caught:
        import_traces(read_otlp_json(path), max_members=1_000)
    assert type(caught.value).__name__ == "ExpandingSpansError"


def _rows_of(files: list[Path]) -> list[list[int] | None]:
    return (
        pa.concat_tables(pq.read_table(p, columns=["pg_ranks"]) for p in files)
        .column("pg_ranks")
        .to_pylist()
    )
