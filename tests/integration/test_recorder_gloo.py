"""The live recorder in real multi-process gloo jobs, with real faults and a real OTLP receiver.

Every job here really fails the way production jobs do (a peer killed by gloo's abort on a
size mismatch, uncaught timeouts, a rank hung in host code) under a torchrun-like launcher
(``fr_otel.demo.recorded_job``: the store outlives every rank, the surviving ranks get
SIGTERM 0.1 s after the first failure). Nothing is faked; the only stand-in is the OTLP
receiver (``tests/otlp_receiver.py``) for the Collector: it keeps every request it takes,
for the tests to read. The real Collector (``build/bin/otelcol-fr-otel``) takes a recorded
incident in ``tests/e2e``.
"""

from __future__ import annotations

import json
import socket
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.analysis import analyze
from fr_otel.archive.layout import partition_dir
from fr_otel.cli import main
from fr_otel.demo.recorded_job import SCENARIOS, run_recorded
from fr_otel.otel import model
from tests.jobs import torchrun
from tests.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.gloo

FAULTS = [name for name in SCENARIOS if name != "healthy"]
JOB = "rec"


def _spans_by_rank(receiver: OtlpReceiver, incident: str) -> Counter[int]:
    counts: Counter[int] = Counter()
    for resource, span in receiver.spans():
        if span.name.startswith("fr_otel.live."):
            continue  # the live check's finding, which fr-otel run's agent sends: no rank's
        attributes = {a.key: a.value.string_value for a in span.attributes}
        if attributes.get(model.INCIDENT) == incident:
            counts[resource[model.RANK]] += 1
            # where the rank ran (a dead rank's own host and pid, from its ring) and the
            # job's OTEL_RESOURCE_ATTRIBUTES
            assert resource[model.HOST_NAME] == socket.gethostname()
            assert isinstance(resource[model.PROCESS_PID], int) and resource[model.PROCESS_PID] > 0
            assert resource["deployment.environment"] == "ci"
    return counts


@pytest.mark.parametrize("name", FAULTS)
def test_every_rank_is_archived_and_exported_under_one_incident(name: str, tmp_path: Path) -> None:
    scenario = SCENARIOS[name]
    archive = tmp_path / "archive"
    with OtlpReceiver(protocol="http").start() as receiver:
        run = run_recorded(
            name,
            archive,
            job=JOB,
            environment={
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=ci",
            },
        )
        logs = "\n".join(run.logs)
        assert run.incidents(), f"no incident archived; rank logs:\n{logs[-4000:]}"
        assert len(run.incidents()) == 1, run.incidents()
        incident = run.incidents()[0]
        folder = partition_dir(archive, JOB, incident)
        rows = {
            rank: pq.read_table(folder / f"rank-{rank:06d}.parquet").num_rows
            for rank in range(run.world)
            if (folder / f"rank-{rank:06d}.parquet").exists()
        }
        assert sorted(rows) == list(range(run.world)), f"ranks archived: {sorted(rows)}\n{logs}"
        assert all(count >= 12 for count in rows.values()), rows  # the warm-up is there
        manifest = json.loads((folder / "_incident.json").read_text())
        assert manifest["ranks"] == list(range(run.world))
        assert manifest["missing_ranks"] == []
        receiver.wait_for_spans(sum(rows.values()), timeout_s=10)
        assert _spans_by_rank(receiver, incident) == Counter(rows)

    analysis = analyze(archive, job=JOB, incident=incident)
    assert analysis.root_cause is not None, analysis.findings
    root = analysis.findings[analysis.root_cause]
    # a skipped collective whose peers never got past it is told by its call sites: the
    # culprit issued, from where its peers' next op came, the step before. In
    # skipped_in_subgroup the two back_group collectives are issued once, outside the
    # training step, so no earlier step tells the skip from issuing the wrong op there
    kinds = set(scenario.kinds) | ({"op_type_mismatch"} if name == "skipped_in_subgroup" else set())
    assert root.kind in kinds, root
    assert root.culprit_ranks == [scenario.culprit], root
    assert root.group.desc == scenario.pg_desc


@pytest.mark.parametrize("install", ["after", "launcher"])
def test_install_after_init_or_by_the_launcher_records_the_same(
    install: str, tmp_path: Path
) -> None:
    run = run_recorded("size_mismatch", tmp_path / "archive", job=JOB, install=install)
    [incident] = run.incidents()
    analysis = analyze(tmp_path / "archive", job=JOB, incident=incident)
    assert analysis.root_cause is not None
    root = analysis.findings[analysis.root_cause]
    assert (root.kind, root.culprit_ranks) == ("size_mismatch", [1])
    # the groups made before install() have their members too
    manifest = json.loads(
        (partition_dir(tmp_path / "archive", JOB, incident) / "_incident.json").read_text()
    )
    assert {g["desc"]: g["ranks"] for g in manifest["groups"]} == {
        "default_pg": [0, 1, 2, 3],
        "front_group": [0, 1, 2],
        "back_group": [1, 2, 3],
    }


def test_stuck_rank_flushes_from_background_threads(tmp_path: Path) -> None:
    """The recorder's timeout fires while every main thread is still blocked (peers in the
    all_reduce, the culprit in host code): the incident is the watch thread's, and the
    culprit's buffer comes from its own listener thread, not from a survivor."""
    run = run_recorded("stuck_in_host", tmp_path / "archive", job=JOB)
    [incident] = run.incidents()
    assert incident.endswith("-timeout"), incident
    assert run.late_flushes == []
    culprit_log = run.logs[0]
    assert "flushed the ring of rank 0" not in "\n".join(run.logs)
    assert run.returncodes[0] == -15, culprit_log  # killed by the launcher, still in host code
    rows = pq.read_table(partition_dir(tmp_path / "archive", JOB, incident)).to_pylist()
    culprit = [r for r in rows if r["rank"] == 0]
    assert culprit and all(r["state"] == "completed" for r in culprit)
    peers_last = [
        max((r for r in rows if r["rank"] == rank), key=lambda r: r["record_id"])
        for rank in (1, 2, 3)
    ]
    # the peers' gradient all_reduce was still in flight when they flushed
    assert {r["state"] for r in peers_last} == {"started"}


def test_unchanged_script_under_fr_otel_run_and_torchrun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import datetime, os, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo', timeout=datetime.timedelta(seconds=5))\n"
        "rank = int(os.environ['RANK'])\n"
        "x = torch.ones(64)\n"
        "for step in range(5):\n"
        "    dist.all_reduce(x)\n"
        "if rank != 2:\n"
        "    dist.all_reduce(x)  # rank 2 skips this one\n"
        "dist.all_reduce(x)\n"
    )
    archive = tmp_path / "archive"
    command = torchrun(script, 3)
    with OtlpReceiver(protocol="grpc").start() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci")
        code = main(["run", "--job", "plain", "--archive", str(archive), "--", *command])
        assert code != 0  # the job failed, and fr-otel run passes its exit code on
        [folder] = list((archive / "job=plain").glob("incident=*"))
        rows = Counter(
            {rank: pq.read_table(folder / f"rank-{rank:06d}.parquet").num_rows for rank in range(3)}
        )
        receiver.wait_for_spans(sum(rows.values()), timeout_s=10)
        # every rank's whole buffer, over OTLP/gRPC too
        assert _spans_by_rank(receiver, folder.name.removeprefix("incident=")) == rows
    analysis = analyze(archive, job="plain")
    assert analysis.root_cause is not None, analysis.findings
    root = analysis.findings[analysis.root_cause]
    assert root.culprit_ranks == [2], root
    # rank 2 ran out of collectives, but its call sites show it was one step ahead: it
    # issued line 9's all_reduce as its seq 6, where its peers issued line 8's
    assert root.kind == "skipped_collective", root
    assert (root.collective_seq_id, root.evidence["skipped_seqs"]) == (6, [6])
    assert root.frames["majority"][0]["line"] == 8, root.frames
    assert root.frames["culprit"]["2"][0]["line"] == 9, root.frames
    assert root.frames["culprit"]["2"][0]["filename"] == str(script)


def test_continuous_mode_with_the_collector_down_loses_nothing(tmp_path: Path) -> None:
    receiver = OtlpReceiver(protocol="http").start()
    endpoint = receiver.endpoint
    receiver.stop()  # the Collector is down for the whole job
    archive = tmp_path / "archive"
    run = run_recorded(
        "healthy",
        archive,
        job=JOB,
        environment={
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "FR_OTEL_MODE": "continuous",
            "FR_OTEL_EXPORT_INTERVAL": "0.5",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "500",
        },
    )
    assert run.returncodes == [0] * run.world, "\n".join(run.logs)[-3000:]
    assert run.incidents() == []
    spool = archive / "_spool"
    assert list(spool.glob("*.otlp")), "nothing was spooled"
    # every collective of every rank, from the rings the ranks left behind
    from fr_otel.recorder.ring import read_ring, ring_bases

    recorded = Counter(
        {
            contents.rank: len(contents.slots)
            for contents in (read_ring(b) for b in ring_bases(archive / "_rings", JOB))
        }
    )
    assert sorted(recorded) == list(range(run.world))
    with OtlpReceiver(protocol="http", port=receiver.port).start() as back:
        assert main(["export", str(archive), "--otlp", back.endpoint, "--resend"]) == 0
        back.wait_for_spans(sum(recorded.values()), timeout_s=10)
        delivered: Counter[int] = Counter()
        ids = set()
        for resource, span in back.spans():
            delivered[resource[model.RANK]] += 1
            ids.add((resource[model.RANK], span.span_id))
    assert delivered == recorded
    assert len(ids) == sum(recorded.values())  # each exactly once


def test_point_to_point_and_aliases_are_recorded_once_with_their_call_site(
    tmp_path: Path,
) -> None:
    """gloo's own FR records no send/recv at all; the recorder records blocking and async
    ones (gloo's async p2p works have no future: the watch polls them), and torch's alias
    functions (all_gather_into_tensor calls all_gather_single) once."""
    script = tmp_path / "p2p.py"
    script.write_text(
        "import os, time, torch, torch.distributed as dist, fr_otel\n"
        "recorder = fr_otel.install()\n"
        "dist.init_process_group('gloo')\n"
        "rank = int(os.environ['RANK'])\n"
        "t = torch.ones(4)\n"
        "dist.send(t, 1) if rank == 0 else dist.recv(t, 0)\n"
        "work = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)\n"
        "work.wait()\n"
        "dist.all_gather_into_tensor(torch.empty(8), t)\n"
        "dist.barrier()\n"
        # the watch marks the async p2p works done (they have no future): until it has
        "deadline = time.monotonic() + 60\n"
        "while recorder.capture.unfinished and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "assert not recorder.capture.unfinished, 'the watch never polled the p2p works'\n"
        "if rank == 0:  # every rank flushes before any leaves the closing barrier\n"
        "    recorder.wait_for_job(recorder.declare('operator'))\n"
        "dist.barrier()\n"
    )
    archive = tmp_path / "archive"
    command = torchrun(script, 2)
    assert main(["run", "--job", "p2p", "--archive", str(archive), "--", *command]) == 0
    [folder] = list((archive / "job=p2p").glob("incident=*"))
    rows = sorted(pq.read_table(folder).to_pylist(), key=lambda r: (r["rank"], r["record_id"]))
    site = f"{script}:{{}} in <module>"
    # rank 1 flushes from its listener, maybe once it is in the closing barrier too
    # the op is torch's (gloo's FR says all_gather), the function called is the api
    seen = [
        (r["rank"], r["op"], r["api"], r["peer"], r["state"], r["call_site"])
        for r in rows
        if r["call_site"] != site.format(17)
    ]
    assert seen == [
        (0, "send", "send", 1, "completed", site.format(6)),
        (0, "send", "send", 1, "completed", site.format(7)),
        (0, "all_gather", "all_gather_into_tensor", None, "completed", site.format(9)),
        (0, "barrier", "barrier", None, "completed", site.format(10)),
        (1, "recv", "recv", 0, "completed", site.format(6)),
        (1, "recv", "recv", 0, "completed", site.format(7)),
        (1, "all_gather", "all_gather_into_tensor", None, "completed", site.format(9)),
        (1, "barrier", "barrier", None, "completed", site.format(10)),
    ]
