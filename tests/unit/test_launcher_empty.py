"""``fr-otel run`` names an incident it declared for a failed job even when the archive
holds no rank of it, with the reason (real child processes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fr_otel.cli import main


def test_a_job_that_fails_before_any_group_gets_an_empty_incident_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "archive"
    script = "import torch.distributed; raise SystemExit(3)"
    code = main(
        ["run", "--job", "early", "--archive", str(archive), "--", sys.executable, "-c", script]
    )
    assert code == 3
    err = capsys.readouterr().err
    assert "-launcher-job_failed is empty: no rank of this run opened a ring" in err, err
    assert not list(archive.glob("job=early/incident=*"))
