"""The laptop path, end to end with real processes: a real gloo job under the recorder
(``fr-otel run -- torchrun``) has an incident; its ranks send their spans over OTLP/HTTP to a
real Collector running the shipped ``local.yaml``, which sends them on to a real Jaeger
(v2, in-memory storage). What the UI reads (Jaeger's HTTP query API) is then checked
span by span against the ranks' own archive, and so is the Collector's file archive.

Stand-in, and why: Tempo (local.yaml's second viewer) is not built here (AGPL, not one of
the project's binaries), so its exporter points at a closed loopback port: its queue
retries in memory and nothing else waits for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fr_otel.analysis import analyze
from fr_otel.cli import main
from tests.e2e import stack
from tests.e2e.spans import (
    Expected,
    archive_spans,
    file_archive_spans,
    is_error,
    jaeger_span_count,
    jaeger_spans,
    ranks_by_trace,
    root_cause_trace_id,
)
from tests.e2e.stack import free_port, running, tags, wait_until

HERE = Path(__file__).resolve().parent
JOB = "laptop"
WORLD = 3


def run_job(tmp_path: Path, otlp_endpoint: str) -> tuple[Path, str, str]:
    """``fr-otel run -- torchrun`` of tests/e2e/train_skip.py: (archive, incident, log)."""
    archive = tmp_path / "archive"
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OMP_NUM_THREADS": "1",
    }
    command = [
        *(sys.executable, "-m", "fr_otel.run", "--archive", str(archive), "--job", JOB, "--"),
        *(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD)),
        *("--master-port", str(free_port()), str(HERE / "train_skip.py")),
    ]
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path
    )
    log = result.stdout + result.stderr
    assert result.returncode != 0, f"the job did not fail:\n{log[-3000:]}"
    incidents = sorted(p.name.split("=", 1)[1] for p in archive.glob(f"job={JOB}/incident=*"))
    assert len(incidents) == 1, f"incidents {incidents}:\n{log[-4000:]}"
    return archive, incidents[0], log


def _collector_to(jaeger: stack.Jaeger, workdir: Path) -> stack.Collector:
    return stack.collector(
        "collector",
        ["local.yaml"],
        workdir,
        env={
            "JAEGER_OTLP_ENDPOINT": jaeger.otlp_grpc,
            "TEMPO_OTLP_ENDPOINT": f"127.0.0.1:{free_port()}",  # no Tempo here: see above
        },
    )


def _holds(jaeger: stack.Jaeger, expected: dict[str, Expected]) -> bool:
    """Jaeger holds every one of the ranks' spans (the live check's verdict, sent to the same
    Collector, does not count towards them)."""
    try:
        return {s["spanID"] for _, s in jaeger_spans(jaeger, JOB)} >= set(expected)
    except OSError:
        return False


def _want_ranks(expected: dict[str, Expected]) -> dict[str, Counter[int]]:
    want: dict[str, Counter[int]] = {}
    for span in expected.values():
        want.setdefault(span.trace_id, Counter())[span.rank] += 1
    return want


def test_a_recorded_incident_arrives_whole_in_jaeger_through_local_yaml(tmp_path: Path) -> None:
    jaeger = stack.jaeger(tmp_path)
    collector = _collector_to(jaeger, tmp_path)
    with running(jaeger, collector):
        archive, incident, log = run_job(tmp_path, f"http://{collector.http}")
        expected = archive_spans(archive, JOB, incident)
        assert len(expected) >= WORLD * 6, log[-3000:]
        try:
            wait_until(
                f"Jaeger to hold the {len(expected)} spans",
                lambda: _holds(jaeger, expected),
                timeout_s=60,
            )
        except AssertionError:
            got = Counter(expected[s["spanID"]].rank for _, s in jaeger_spans(jaeger, JOB))
            want = Counter(e.rank for e in expected.values())
            spooled = sorted(p.name for p in (archive / "_spool").glob("*.otlp"))
            raise AssertionError(
                f"Jaeger has {dict(got)} spans by rank of {dict(want)}; spooled {spooled};"
                f" Collector log:\n{collector.tail(2000)}\njob log:\n{log[-6000:]}"
            ) from None
        everything = jaeger_spans(jaeger, JOB)
        # fr-otel run's live check sends its verdict to the same Collector when it names the
        # skip while the job runs: in the trace of a collective the ranks recorded
        live = [s for _, s in everything if s["operationName"].startswith("fr_otel.live.")]
        pairs = [
            (t, s) for t, s in everything if not s["operationName"].startswith("fr_otel.live.")
        ]
        traces = {e.trace_id for e in expected.values()}
        assert all(s["traceID"] in traces for s in live), [tags(s) for s in live]

        # every rank's every entry, once (raw: a span stored twice would be listed twice)
        delivered = Counter(span["spanID"] for _, span in pairs)
        assert set(delivered) == set(expected)
        assert max(delivered.values()) == 1, delivered.most_common(3)

        # one trace per collective (fr_otel's own trace id), every rank's span in it
        for _, span in pairs:
            assert span["traceID"] == expected[span["spanID"]].trace_id
        assert ranks_by_trace(pairs) == _want_ranks(expected)
        traces_of: dict[tuple[str, int | None], set[str]] = {}
        for span in expected.values():
            traces_of.setdefault((span.pg_name, span.collective_seq_id), set()).add(span.trace_id)
        assert all(len(ids) == 1 for ids in traces_of.values()), traces_of
        whole = [t for t, ranks in ranks_by_trace(pairs).items() if set(ranks) == set(range(WORLD))]
        assert len(whole) >= 6, "the all_reduces every rank issued"

        # the stuck collective: its spans have error status, and only those
        for _, span in pairs:
            assert is_error(span) == expected[span["spanID"]].error, tags(span)
        analysis = analyze(archive, job=JOB, incident=incident)
        assert analysis.root_cause is not None, analysis.findings
        culprit = WORLD - 1
        assert analysis.findings[analysis.root_cause].culprit_ranks == [culprit]
        stuck = {
            trace_id
            for trace_id, ranks in ranks_by_trace(pairs).items()
            if set(ranks) == set(range(WORLD)) - {culprit}
            and all(is_error(s) for t, s in pairs if s["traceID"] == trace_id)
        }
        assert len(stuck) == 1, "the all_reduce the peers waited in, without the culprit"
        [opened] = jaeger.traces_by_id(sorted(stuck))  # what the UI's trace view loads
        assert sorted(stack.span_rank(opened, s) for s in opened["spans"]) == [0, 1]

        # the Collector's file archive gives the same diagnosis as the ranks' archive
        otlp_dir = tmp_path / "otlp-archive"
        wait_until(
            "the Collector's file archive to hold every span",
            lambda: {s for _, s in file_archive_spans(otlp_dir)} >= set(expected),
            timeout_s=30,
        )
        rebuilt = tmp_path / "from-collector"
        # the folder as it is: the file exporter's live file (and any rotated ones)
        assert main(["import", str(otlp_dir), "--archive", str(rebuilt)]) == 0
        again = analyze(rebuilt, job=JOB, incident=incident)
        assert _diagnosis(again) == _diagnosis(analysis)

        # the analyzer's verdict, exported alone (the ranks sent their spans already),
        # lands in the culprit collective's trace
        code = main(
            ["export", str(archive), "--otlp", f"http://{collector.http}", "--findings-only"]
        )
        assert code == 0
        verdict_trace = root_cause_trace_id(analysis, expected)
        try:
            verdicts = wait_until(
                "the verdict span in Jaeger",
                lambda: [
                    span
                    for trace in jaeger.traces_by_id([verdict_trace])
                    for span in trace["spans"]
                    if span["operationName"] == "fr_otel.verdict"
                ],
                timeout_s=30,
            )
        except AssertionError:
            found = {
                span["traceID"]: tags(span)
                for _, span in jaeger_spans(jaeger, JOB)
                if span["operationName"] == "fr_otel.verdict"
            }
            raise AssertionError(
                f"no verdict in trace {verdict_trace} of {analysis.findings}; verdicts: {found}"
            ) from None
        root = [v for v in verdicts if tags(v).get("fr_otel.finding.root_cause") is True]
        assert root, [tags(v) for v in verdicts]
        assert str(culprit) in str(tags(root[0])["fr_otel.finding.culprit_ranks"])
        assert is_error(root[0])
        # every verdict, and no rank's span a second time
        wait_until(
            "every verdict span in Jaeger",
            lambda: (
                sum(s["operationName"] == "fr_otel.verdict" for _, s in jaeger_spans(jaeger, JOB))
                >= len(analysis.findings)
            ),
            timeout_s=30,
        )
        spans = jaeger_spans(jaeger, JOB)
        after = Counter(s["spanID"] for _, s in spans)
        assert max(after.values()) == 1, after.most_common(3)
        # besides the ranks' spans: the analyzer's verdicts, and the live check's verdict if
        # it named the skip while the job ran (fr-otel run's agent sends it to the same
        # Collector), in the trace of the collective the analyzer blames
        extra = {s["spanID"]: s for _, s in spans if s["spanID"] not in expected}
        names = Counter(s["operationName"] for s in extra.values())
        assert set(names) <= {"fr_otel.verdict", "fr_otel.live.verdict"}, names
        assert names["fr_otel.verdict"] == len(analysis.findings), names
        live = [s for s in extra.values() if s["operationName"] == "fr_otel.live.verdict"]
        assert [s["traceID"] for s in live] in ([], [verdict_trace]), [tags(s) for s in live]


def _diagnosis(analysis: object) -> list[tuple[object, ...]]:
    findings = analysis.findings  # type: ignore[attr-defined]
    return [
        (
            f.kind,
            tuple(f.culprit_ranks),
            f.group.desc,
            tuple(f.group.ranks),
            f.collective_seq_id,
            i == analysis.root_cause,  # type: ignore[attr-defined]
            f.consequence_of,
        )
        for i, f in enumerate(findings)
    ]


def test_collector_down_during_the_incident_then_resend_delivers_exactly_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Collector is down when the ranks flush: they spool (ARCHIVE/_spool). It comes
    back, ``fr-otel export --otlp --resend`` delivers the spool, and Jaeger holds every
    span exactly once."""
    jaeger = stack.jaeger(tmp_path)
    collector = _collector_to(jaeger, tmp_path)
    with running(jaeger):
        # the address the ranks are told about: nothing listens there yet
        archive, incident, log = run_job(tmp_path, f"http://{collector.http}")
        spool = archive / "_spool"
        assert list(spool.glob("*.otlp")), f"nothing spooled:\n{log[-3000:]}"
        expected = archive_spans(archive, JOB, incident)
        assert jaeger_span_count(jaeger, JOB) == 0
        with running(collector):
            code = main(["export", str(archive), "--otlp", f"http://{collector.http}", "--resend"])
            assert code == 0
            assert not list(spool.glob("*.otlp")), "the spool is emptied"
            assert f"resent {len(expected)} spans" in capsys.readouterr().out
            wait_until(
                f"Jaeger to hold the {len(expected)} spans",
                lambda: jaeger_span_count(jaeger, JOB) >= len(expected),
                timeout_s=60,
            )
            # a second resend has nothing left to send
            assert (
                main(["export", str(archive), "--otlp", f"http://{collector.http}", "--resend"])
                == 0
            )
            collector.stop()  # drains its queues into Jaeger
        delivered = Counter(span["spanID"] for _, span in jaeger_spans(jaeger, JOB))
        assert set(delivered) == set(expected)
        assert max(delivered.values()) == 1, delivered.most_common(3)
