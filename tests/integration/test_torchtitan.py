"""A real trainer under the recorder: torchtitan 0.3.0's ``torchtitan.train`` (the llama3
debug model, FSDP2) on 2 CPU gloo ranks, under ``fr-otel run -- torchrun`` and the
recorder's defaults.

torchtitan assumes a GPU in five places; ``tests/trainers/torchtitan_cpu.py`` works around
them without editing torchtitan (its docstring says each), and builds nothing else: the
model, FSDP2's all-gathers and reduce-scatters, the data loader and the optimizer are
torchtitan's. The tokenizer and the data set are made locally
(``tests/trainers/torchtitan_assets.py``): this machine reaches no model hub.

After its first step, torchtitan lowers every group's timeout to
``--comm.train_timeout_seconds`` (``_set_pg_timeout``): the recorder must follow it, in
what its records say and in when it calls a collective overdue.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.analysis import analyze
from fr_otel.cli import main
from fr_otel.recorder.ring import read_ring, ring_bases
from tests.jobs import environment, torchrun

pytestmark = pytest.mark.gloo

TRAINERS = Path(__file__).resolve().parents[1] / "trainers"
TRAIN_TIMEOUT_S = 12


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("titan-assets")
    subprocess.run(
        [sys.executable, str(TRAINERS / "torchtitan_assets.py"), str(folder)],
        check=True,
        timeout=120,
    )
    return folder


def _train(tmp_path: Path, assets: Path, steps: int, **env: str) -> tuple[int, Path, str]:
    """``fr-otel run`` of torchtitan's trainer on 2 ranks; (exit code, archive, log)."""
    archive = tmp_path / "archive"
    command = [
        *torchrun(TRAINERS / "torchtitan_cpu.py", 2),
        *("--module", "llama3", "--config", "llama3_debugmodel"),
        *("--hf_assets_path", str(assets / "tokenizer")),
        *("--dataloader.dataset_path", str(assets / "c4_test")),
        *("--dump_folder", str(tmp_path / "titan")),
        *("--training.steps", str(steps), "--training.local_batch_size", "2"),
        *("--training.seq_len", "128", "--training.disable_cuda_graphs"),
        *("--parallelism.data_parallel_shard_degree", "2"),
        *("--parallelism.spmd_backend", "partial_dtensor"),
        *("--comm.init_timeout_seconds", "120"),
        *("--comm.train_timeout_seconds", str(TRAIN_TIMEOUT_S)),
    ]
    variables = {
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf_home"),
        "WANDB_MODE": "disabled",
        **env,
    }
    log = tmp_path / "run.log"
    with environment(variables), log.open("w") as out:
        stderr, sys.stderr = sys.stderr, out
        try:
            code = main(["run", "--job", "titan", "--archive", str(archive), "--", *command])
        finally:
            sys.stderr = stderr
    return code, archive, log.read_text()


def test_a_healthy_torchtitan_run_is_healthy_and_its_records_follow_the_new_timeout(
    tmp_path: Path, assets: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, archive, log = _train(tmp_path, assets, steps=4)
    assert code == 0, log[-3000:]
    assert not list((archive / "job=titan").glob("incident=*")), log[-3000:]
    for path in (archive, archive / "_rings"):
        # two ranks sharing two cores with the test's own processes are slow by turns, a
        # rank at times through a whole step's collectives: four steps are too few
        # separate occasions to call either a straggler
        code = main(["analyze", str(path), "--job", "titan", "--format", "json"])
        report = json.loads(capsys.readouterr().out)
        assert report["root_cause"] is None, report["findings"]
        assert report["findings"] == [], [f["summary"] for f in report["findings"]]
        assert code == 0
    for base in ring_bases(archive / "_rings", "titan"):
        contents = read_ring(base)
        assert contents.ended is not None and contents.ended.how == "exit", base
        # FSDP2's collectives of the last steps, hooked and from torch's FR alike, ran
        # under the timeout torchtitan set after the first step
        newest = sorted(contents.slots, key=lambda s: s[7])[-20:]
        timeouts = {contents.groups[s[1]].timeout_ms for s in newest}
        assert timeouts == {TRAIN_TIMEOUT_S * 1000}, (base.name, timeouts)


def test_a_stalled_torchtitan_rank_is_named_by_the_recorder_before_gloo_s_timeout(
    tmp_path: Path, assets: Path
) -> None:
    """Rank 1 sleeps in host code before step 3 while rank 0 goes into its collectives:
    the recorder declares the incident at three quarters of the lowered timeout (its own
    detection, ``-timeout``, not gloo's error at the timeout), and the analysis names
    rank 1."""
    code, archive, log = _train(
        tmp_path, assets, steps=5, TITAN_STALL_RANK="1", TITAN_STALL_STEP="3"
    )
    assert code != 0, log[-3000:]
    [folder] = list((archive / "job=titan").glob("incident=*"))
    assert folder.name.endswith("-timeout"), (folder.name, log[-3000:])
    rows = pq.read_table(folder / "rank-000000.parquet").to_pylist()
    newest = sorted(rows, key=lambda r: r["time_created_ns"])[-10:]
    assert {r["timeout_ms"] for r in newest} == {TRAIN_TIMEOUT_S * 1000}
    incident = folder.name.removeprefix("incident=")
    analysis = analyze(archive, job="titan", incident=incident)
    assert analysis.root_cause is not None, analysis.findings
    assert analysis.findings[analysis.root_cause].culprit_ranks == [1]
