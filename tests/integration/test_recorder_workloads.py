"""The live recorder on training code as people write it: DDP, FSDP2, DTensor, functional
collectives, ``ProcessGroup`` methods, object collectives, a 2-D device mesh, pipelining
and a compiled model (``tests/workloads/``), each run unchanged under
``fr-otel run -- torchrun`` on real gloo ranks, healthy and with a rank that hangs or
skips a collective. Most of these collectives never pass through ``torch.distributed``'s
Python functions: the recorder must take them from torch's own Flight Recorder.

Each faulty run checks that every rank's buffer is archived under one incident, that each
rank holds every collective torch's FR held (the scripts dump torch's buffer themselves,
``FR_DUMP_DIR``), that the spans reached a real OTLP receiver (the stand-in for the
Collector: it keeps every request for the test to read; ``tests/e2e`` run the real one,
``build/bin/otelcol-fr-otel``), and that ``fr-otel analyze`` names the culprit and its
group. A healthy run exits 0 with no incident.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from fr_otel.analysis import analyze
from fr_otel.cli import main
from fr_otel.dumps.safe_pickle import loads_plain
from fr_otel.otel import model
from fr_otel.recorder.ring import RingContents, read_ring, ring_bases
from tests.jobs import environment, torchrun
from tests.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.gloo

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"

WORLD = {"mesh2d": 4, "pipelining": 2}
"""Ranks per family (default 3)."""

FAULTY = [
    ("ddp", "hang"),
    ("ddp", "skip"),
    ("functional", "hang"),
    ("functional", "skip"),
    ("pg_methods", "hang"),
    ("pg_methods", "skip"),
    ("dtensor_tp", "hang"),
    ("dtensor_tp", "skip"),
    ("fsdp2", "hang"),
    ("fsdp2", "skip"),
    ("objects", "hang"),
    ("objects", "skip"),
    ("mesh2d", "hang"),
    ("mesh2d", "skip"),
    ("pipelining", "hang"),
    ("pipelining", "skip"),
    ("compiled", "hang"),
    ("compiled", "skip"),
    ("data_shuffle", "skip"),
]
HEALTHY = [
    "ddp",
    "functional",
    "pg_methods",
    "dtensor_tp",
    "fsdp2",
    "objects",
    "mesh2d",
    "pipelining",
    "compiled",
    "data_shuffle",
]


def _run(
    tmp_path: Path,
    family: str,
    fault: str,
    receiver: OtlpReceiver | None = None,
    **extra: str,
) -> tuple[int, Path, Path, str]:
    """``fr-otel run -- torchrun`` of one workload; (exit code, archive, FR dumps, log)."""
    archive, dumps = tmp_path / "archive", tmp_path / "fr"
    env = {
        "FAULT": fault,
        "PG_TIMEOUT": "6",
        "FR_DUMP_DIR": str(dumps),
        "OMP_NUM_THREADS": "1",
        **extra,
    }
    if receiver is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
    log = tmp_path / "run.log"
    with environment(env):
        command = torchrun(WORKLOADS / f"{family}.py", WORLD.get(family, 3))
        with log.open("w") as out:
            stderr, sys.stderr = sys.stderr, out
            try:
                code = main(["run", "--job", family, "--archive", str(archive), "--", *command])
            finally:
                sys.stderr = stderr
    return code, archive, dumps, log.read_text()


def _torch_entries(*folders: Path, rank: int) -> list[dict[str, Any]] | None:
    """Torch's own FR buffer of ``rank``, from the first folder that has its dump."""
    for folder in folders:
        path = folder / f"comm_lib_trace_rank_{rank}"
        if path.exists():
            entries: list[dict[str, Any]] = loads_plain(path.read_bytes()).get("entries", [])
            return entries
    return None


@pytest.mark.parametrize(("family", "fault"), FAULTY, ids=[f"{f}-{x}" for f, x in FAULTY])
def test_a_faulty_workload_is_archived_whole_and_diagnosed(
    family: str, fault: str, tmp_path: Path
) -> None:
    with OtlpReceiver(protocol="grpc").start() as receiver:
        code, archive, dumps, log = _run(tmp_path, family, fault, receiver)
        assert code != 0, log[-3000:]
        truth = json.loads((dumps / "truth.json").read_text())
        world = truth["world"]
        incidents = list((archive / f"job={family}").glob("incident=*"))
        assert len(incidents) == 1, (incidents, log[-3000:])
        [folder] = incidents
        incident = folder.name.removeprefix("incident=")
        tables = {r: pq.read_table(folder / f"rank-{r:06d}.parquet") for r in range(world)}
        rows = Counter({r: t.num_rows for r, t in tables.items()})
        receiver.wait_for_spans(sum(rows.values()), timeout_s=15)
        spans: Counter[int] = Counter()
        for resource, span in receiver.spans():
            if span.name.startswith("fr_otel.live."):
                continue  # the live check's finding, sent by fr-otel run's agent: no rank's
            attributes = {a.key: a.value.string_value for a in span.attributes}
            if attributes.get(model.INCIDENT) == incident:
                spans[resource[model.RANK]] += 1
        assert spans == rows, log[-3000:]

    # torch's buffer as the script dumped it when its collective raised, else as the
    # recorder's flush archived it verbatim (a rank the launcher ended first never raised)
    [raw] = (archive / "_fr_dumps" / f"job={family}").glob(f"run=*/{folder.name}")
    truths = {r: _torch_entries(dumps, raw, rank=r) for r in range(world)}
    assert all(t is not None for t in truths.values()), truths.keys()
    for rank, entries in truths.items():
        table = tables[rank]
        held = {
            (r["pg_name"], r["collective_seq_id"]) for r in table.to_pylist() if not r["is_p2p"]
        }
        newest: dict[str, int] = {}
        for name, seq in held:
            newest[name] = max(newest.get(name, 0), seq)
        # every collective torch's FR held, up to the newest the rank had when it flushed
        # (the script dumps torch's buffer later, when its collective raises)
        torch_held = {
            (str(e["process_group"][0]), e["collective_seq_id"])
            for e in entries or []
            if not e.get("is_p2p")
            and e["collective_seq_id"] <= newest.get(str(e["process_group"][0]), 0)
        }
        assert torch_held, f"rank {rank}: torch's FR held nothing ({family})"
        assert torch_held <= held, (rank, sorted(torch_held - held))

    analysis = analyze(archive, job=family, incident=incident)
    assert analysis.root_cause is not None, analysis.findings
    root = analysis.findings[analysis.root_cause]
    assert root.culprit_ranks == truth["culprit_ranks"], root
    if truth.get("pg_desc"):
        assert root.group.desc == truth["pg_desc"], root
    if family == "ddp":
        _same_traces_as_torchs_own_dumps(tmp_path, archive, family, incident)


def _trace_ids(path: Path) -> dict[tuple[int, str, int], str]:
    """(rank, group name, collective seq) -> trace id, from ``fr-otel export --otlp-json``."""
    found: dict[tuple[int, str, int], str] = {}
    for line in path.read_text().splitlines():
        for resource_spans in json.loads(line)["resourceSpans"]:
            resource = {a["key"]: a["value"] for a in resource_spans["resource"]["attributes"]}
            rank = int(resource[model.RANK]["intValue"])
            for scope in resource_spans["scopeSpans"]:
                for span in scope["spans"]:
                    attributes = {a["key"]: a["value"] for a in span["attributes"]}
                    if model.COLLECTIVE_SEQ_ID not in attributes:
                        continue
                    key = (
                        rank,
                        attributes[model.PG_NAME]["stringValue"],
                        int(attributes[model.COLLECTIVE_SEQ_ID]["intValue"]),
                    )
                    found[key] = span["traceId"]
    return found


def _same_traces_as_torchs_own_dumps(
    tmp_path: Path, archive: Path, job: str, incident: str
) -> None:
    """The raw FR dumps archived beside the incident, imported and exported on their own,
    put each collective in the trace the recorder's spans are in."""
    [dumps] = (archive / "_fr_dumps" / f"job={job}").glob(f"run=*/incident={incident}")
    other = tmp_path / "from_torch"
    assert main(["import", str(dumps), "--archive", str(other), "--job", job]) == 0
    ours, theirs = tmp_path / "ours.jsonl", tmp_path / "theirs.jsonl"
    assert main(["export", str(archive), "--job", job, "--otlp-json", str(ours)]) == 0
    assert main(["export", str(other), "--job", job, "--otlp-json", str(theirs)]) == 0
    recorded, torch_own = _trace_ids(ours), _trace_ids(theirs)
    assert torch_own and set(torch_own) <= set(recorded)
    assert {k: recorded[k] for k in torch_own} == torch_own


@pytest.mark.parametrize("mode", ["incident", "continuous"])
@pytest.mark.parametrize("family", HEALTHY)
def test_a_healthy_workload_has_no_incident_and_analyses_healthy(
    family: str, mode: str, tmp_path: Path
) -> None:
    """No incident; the rings hold every collective torch's FR held when the rank
    ended (the scripts dump it last), and the run analyses as healthy from its archive
    (which, without an incident, reads the rings) and from its ring folder."""
    with OtlpReceiver(protocol="grpc").start() as receiver:
        code, archive, dumps, log = _run(tmp_path, family, "none", receiver, FR_OTEL_MODE=mode)
    assert code == 0, log[-3000:]
    assert not list((archive / f"job={family}").glob("incident=*")), log[-3000:]
    world = json.loads((dumps / "truth.json").read_text())["world"]
    for rank in range(world):
        contents = _ring_of(archive, family, rank)
        assert contents.ended is not None and contents.ended.how == "exit", (rank, log[-3000:])
        names = {i: g.name for i, g in contents.groups.items()}
        held = {(names[s[1]], s[2]) for s in contents.slots if s[6] < 0}
        torch_held = {
            (str(e["process_group"][0]), e["collective_seq_id"])
            for e in _torch_entries(dumps, rank=rank) or []
            if not e.get("is_p2p")
        }
        assert torch_held, f"rank {rank}: torch's FR held nothing ({family})"
        assert torch_held <= held, (rank, sorted(torch_held - held)[:10])
    for path in (archive, archive / "_rings"):
        out = tmp_path / f"verdict-{path.name}.json"
        verdict = main(["analyze", str(path), "--job", family, "--format", "json", "-o", str(out)])
        assert verdict == 0, out.read_text()[:3000]


def _ring_of(archive: Path, job: str, rank: int) -> RingContents:
    [base] = [b for b in ring_bases(archive / "_rings", job) if b.name == f"rank-{rank:06d}"]
    return read_ring(base)


def test_continuous_mode_sends_every_ddp_collective_once(tmp_path: Path) -> None:
    """DDP's bucket all-reduces and its construction-time broadcasts come from C++: each
    one torch's FR recorded becomes exactly one span while the job runs."""
    with OtlpReceiver(protocol="grpc").start() as receiver:
        code, archive, dumps, log = _run(
            tmp_path, "ddp", "none", receiver, FR_OTEL_MODE="continuous", STEPS="8"
        )
        assert code == 0, log[-3000:]
        world = json.loads((dumps / "truth.json").read_text())["world"]
        expected = {
            (rank, str(e["process_group"][0]), e["collective_seq_id"])
            for rank in range(world)
            for e in _torch_entries(dumps, rank=rank) or []
        }
        assert len(expected) > 12 * world  # buckets of 8 steps, and DDP's set-up
        receiver.wait_for_spans(len(expected), timeout_s=15)
        sent: Counter[tuple[int, str, int]] = Counter()
        for resource, span in receiver.spans():
            attributes = {a.key: a.value for a in span.attributes}
            sent[
                (
                    resource[model.RANK],
                    attributes[model.PG_NAME].string_value,
                    attributes[model.COLLECTIVE_SEQ_ID].int_value,
                )
            ] += 1
    assert set(sent) == expected, sorted(set(sent) ^ expected)[:10]
    assert set(sent.values()) == {1}, [k for k, n in sent.items() if n > 1][:10]
    assert not list((archive / "job=ddp").glob("incident=*"))


_SIGNALLED_DDP = """
import os, signal, time, torch, torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
rank = dist.get_rank()
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 32), nn.Linear(32, 4)))
for step in range(12):
    if step == 4 and rank == 1:
        os.kill(os.getpid(), signal.SIGUSR2)  # what `kill -USR2 <pid>` does
    model(torch.randn(4, 8)).sum().backward()
    time.sleep(0.2)
print("rank", rank, "finished")
"""


def test_sigusr2_on_a_ddp_rank_archives_every_rank_and_training_goes_on(
    tmp_path: Path,
) -> None:
    """The signal arrives before any collective passed through a Python function (DDP's
    come from C++): the recorder is up since the group was made, so the signal is an
    operator's snapshot, not the default action that kills the rank."""
    script = tmp_path / "train.py"
    script.write_text(_SIGNALLED_DDP)
    archive = tmp_path / "archive"
    command = torchrun(script, 3)
    code = main(["run", "--job", "sig", "--archive", str(archive), "--", *command])
    assert code == 0
    [folder] = list((archive / "job=sig").glob("incident=*"))
    assert folder.name.endswith("-signal"), folder.name
    for rank in range(3):
        rows = pq.read_table(folder / f"rank-{rank:06d}.parquet").to_pylist()
        # DDP's construction broadcasts and the bucket all-reduces of the steps so far
        assert len([r for r in rows if r["op"] == "all_reduce"]) >= 4, (rank, len(rows))


_ABORTED_DDP = """
import datetime, os, time, torch, torch.distributed as dist
from torch import nn

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=6))
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(32, 96), nn.Linear(96, 96), nn.Linear(96, 8)), bucket_cap_mb=0.03
)
for step in range(40):
    if step == 12 and rank == 1:
        os.abort()  # SIGABRT, as gloo's std::terminate on a size mismatch: no Python runs
    model(torch.randn(4, 32)).sum().backward()
    time.sleep(0.25)
"""


def test_a_ddp_rank_killed_by_sigabrt_leaves_a_ring_with_its_cpp_collectives(
    tmp_path: Path,
) -> None:
    """All of the dead rank's collectives came from DDP's C++ reducer, and no Python runs
    after ``abort()``: the recorder's SIGABRT handler reads torch's FR before the process
    ends, so its ring holds every collective it issued, and the job's incident names it."""
    script = tmp_path / "train.py"
    script.write_text(_ABORTED_DDP)
    archive = tmp_path / "archive"
    command = torchrun(script, 3)
    code = main(["run", "--job", "abrt", "--archive", str(archive), "--", *command])
    assert code != 0
    [folder] = list((archive / "job=abrt").glob("incident=*"))
    rows = {r: pq.read_table(folder / f"rank-{r:06d}.parquet").to_pylist() for r in range(3)}
    assert folder.name.endswith("-r1-aborted"), folder.name
    dead = {(r["pg_name"], r["collective_seq_id"]) for r in rows[1]}
    peer = {(r["pg_name"], r["collective_seq_id"]) for r in rows[0]}
    # everything up to its abort: the peers are one step further (its buckets hang)
    assert dead < peer
    buckets = len([r for r in rows[1] if r["op"] == "all_reduce"])
    assert buckets >= 12, sorted(dead)  # each of its 12 backward passes
    assert len(peer - dead) <= -(-buckets // 12), sorted(peer - dead)
    analysis = analyze(archive, job="abrt")
    assert analysis.root_cause is not None, analysis.findings
    assert analysis.findings[analysis.root_cause].culprit_ranks == [1]


def test_install_in_the_script_records_a_ddp_hang_without_fr_otel_run(tmp_path: Path) -> None:
    """``fr_otel.install()`` in the training script, plain torchrun, no launcher."""
    script = tmp_path / "train.py"
    script.write_text(
        "import runpy, sys\n"
        "import fr_otel\n"
        "fr_otel.install()\n"
        f"sys.path.insert(0, {str(WORKLOADS)!r})\n"
        f"runpy.run_path({str(WORKLOADS / 'ddp.py')!r}, run_name='__main__')\n"
    )
    archive = tmp_path / "archive"
    env = {
        **os.environ,
        "FAULT": "hang",
        "PG_TIMEOUT": "6",
        "FR_OTEL_ARCHIVE": str(archive),
        "FR_OTEL_JOB": "inscript",
        "OMP_NUM_THREADS": "1",
    }
    command = torchrun(script, 3)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode != 0
    [folder] = list((archive / "job=inscript").glob("incident=*"))
    assert sorted(p.name for p in folder.glob("rank-*.parquet")) == [
        f"rank-{r:06d}.parquet" for r in range(3)
    ], done.stderr[-3000:]
    analysis = analyze(archive, job="inscript")
    assert analysis.root_cause is not None, analysis.findings
    root = analysis.findings[analysis.root_cause]
    assert (root.culprit_ranks, root.group.desc) == ([1], "default_pg"), root
