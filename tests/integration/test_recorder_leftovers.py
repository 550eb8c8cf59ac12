"""What a run leaves on disk is what the README says it leaves, and nothing else.

The README's table "What a run leaves on disk" is read here, row by row, and compared
with every file a real gloo job under ``fr-otel run -- torchrun`` leaves behind: a
healthy job, one where a rank skips a collective (the README's ``train.py``), and one
where a rank is killed outright. A file no row names, a row that says "every run" or "an
incident" and is missing, or a folder left empty fails the test, so the table and the
code cannot drift apart. Each rank used to leave its trigger FIFO, and each incident a
``.manifest.lock``.

Beside them, the parts that keep the list short on their own: the FIFO of a rank killed
outright is removed once its rank is dead (never while it lives), and the manifest's
lock is the incident folder's own, a lock file only where a folder cannot be locked.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import multiprocessing
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fr_otel import config
from fr_otel.archive import manifest
from fr_otel.demo.recorded_job import free_port
from fr_otel.recorder.adopt import remove_dead_triggers
from fr_otel.recorder.ring import ring_base
from fr_otel.recorder.triggers import trigger_path
from tests.jobs import STEERING, torchrun

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### What a run leaves on disk"
JOB = "train"
WORLD = 3
EVERY_RUN, AN_INCIDENT = "every run", "an incident"
"""The README's "left by" words for rows that must be there; any other is a condition
that may or may not come true in a run."""

SCRIPT = """\
import datetime, os, signal, torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
x = torch.ones(64)
for step in range(5):
    dist.all_reduce(x)
fault = os.environ.get("FAULT", "") if int(os.environ["RANK"]) == 2 else ""
if fault == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if fault != "skip":
    dist.all_reduce(x)  # rank 2 skips this one
dist.all_reduce(x)
"""
"""The README's ``train.py``, with its fault chosen by ``FAULT``: none, ``skip`` (the
README's) or ``kill``."""


@dataclass(frozen=True, kw_only=True)
class Leftover:
    """One row of the README's table."""

    pattern: str
    left_by: str
    regex: re.Pattern[str]

    @property
    def per_rank(self) -> bool:
        return "rank" in self.regex.groupindex


_PLACEHOLDER = re.compile(r"NNNNNN|(?<==)[JRI](?=/)|(?<=_)N$|\*")


def _regex(pattern: str) -> re.Pattern[str]:
    """The README's path, its placeholders (``J``, ``R``, ``I``, ``NNNNNN``, ``N``, ``*``)
    made into a regular expression over paths relative to the archive."""
    parts, end = [], 0
    for found in _PLACEHOLDER.finditer(pattern):
        parts.append(re.escape(pattern[end : found.start()]))
        parts.append(
            {
                "NNNNNN": r"(?P<rank>\d{6})",
                "N": r"(?P<rank>\d+)",
                "J": re.escape(JOB),
                "*": r"[^/]*",
            }.get(found.group(), r"[^/]+")
        )
        end = found.end()
    parts.append(re.escape(pattern[end:]))
    return re.compile("".join(parts))


def documented() -> list[Leftover]:
    """The rows of the README's table."""
    text = (ROOT / "README.md").read_text()
    assert SECTION in text, f"README.md has no {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]+?) \|", section, re.M)
    return [Leftover(pattern=path, left_by=left_by, regex=_regex(path)) for path, left_by in rows]


def test_the_readme_lists_what_a_run_leaves() -> None:
    rows = {row.pattern: row for row in documented()}
    assert rows["_rings/job=J/run=R/rank-NNNNNN.ring"].left_by == EVERY_RUN
    assert rows["job=J/incident=I/rank-NNNNNN.parquet"].left_by == AN_INCIDENT
    ring = rows["_rings/job=J/run=R/rank-NNNNNN.ring"].regex
    assert ring.fullmatch("_rings/job=train/run=2026-a/rank-000002.ring")
    assert not ring.fullmatch("_rings/job=train/run=2026-a/rank-000002.trigger")
    dump = rows["_fr_dumps/job=J/run=R/incident=I/comm_lib_trace_rank_N"].regex
    match = dump.fullmatch("_fr_dumps/job=train/run=r/incident=i/comm_lib_trace_rank_12")
    assert match is not None and match["rank"] == "12"


def _fr_otel_run(tmp_path: Path, fault: str) -> tuple[int, Path, str]:
    """``fr-otel run -- torchrun`` of ``SCRIPT`` on ``WORLD`` ranks: (exit code, archive,
    output)."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    archive = tmp_path / "archive"
    env = {k: v for k, v in os.environ.items() if not k.startswith(STEERING)}
    env.update(FAULT=fault, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "fr_otel", "run", "--archive", str(archive)]
    command += ["--job", JOB, "--", *torchrun(script, WORLD)]
    done = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    return done.returncode, archive, (done.stdout + done.stderr)[-4000:]


def _kind(path: Path) -> str:
    mode = path.lstat().st_mode
    return "file" if stat.S_ISREG(mode) else "fifo" if stat.S_ISFIFO(mode) else "other"


def _check_left(archive: Path, expected: set[str], log: str) -> None:
    """Every file under ``archive`` is a row of the README's table whose "left by" is in
    ``expected`` (or, with an incident, any condition), every row "left by" one of
    ``expected`` is there (once per rank where the row is a rank's), and no folder is left
    empty."""
    rows = documented()
    allowed = rows if AN_INCIDENT in expected else [r for r in rows if r.left_by in expected]
    found: dict[str, set[int | None]] = {row.pattern: set() for row in rows}
    unlisted, empty = [], []
    for folder, dirs, files in os.walk(archive):
        if not dirs and not files:
            empty.append(Path(folder).relative_to(archive).as_posix())
        for name in files:
            path = Path(folder, name)
            relative = path.relative_to(archive).as_posix()
            matches = [(row, row.regex.fullmatch(relative)) for row in allowed]
            matched = [(row, m) for row, m in matches if m is not None]
            if not matched or _kind(path) != "file":
                unlisted.append(f"{relative} ({_kind(path)}, {path.lstat().st_size} bytes)")
            for row, match in matched:
                found[row.pattern].add(int(match["rank"]) if row.per_rank else None)
    assert not unlisted, f"not in the README's list: {unlisted}\n{log}"
    assert not empty, f"empty folders left: {empty}"
    for row in rows:
        if row.left_by in expected:
            want = set(range(WORLD)) if row.per_rank else {None}
            assert found[row.pattern] == want, (row.pattern, found[row.pattern], log)


@pytest.mark.gloo
def test_a_healthy_run_leaves_only_its_rings(tmp_path: Path) -> None:
    code, archive, log = _fr_otel_run(tmp_path, "")
    assert code == 0, log
    _check_left(archive, {EVERY_RUN}, log)


@pytest.mark.gloo
@pytest.mark.parametrize("fault", ["skip", "kill"])
def test_a_faulty_run_leaves_its_rings_and_its_incident(tmp_path: Path, fault: str) -> None:
    code, archive, log = _fr_otel_run(tmp_path, fault)
    assert code != 0, log
    [incident] = (archive / f"job={JOB}").glob("incident=*")
    assert len(list(incident.glob("rank-*.parquet"))) == WORLD, log
    _check_left(archive, {EVERY_RUN, AN_INCIDENT}, log)


@dataclass(frozen=True, kw_only=True)
class LiveRank:
    process: subprocess.Popen[str]
    fifo: Path
    settings: config.RecorderSettings


@contextlib.contextmanager
def _live_rank(tmp_path: Path) -> Iterator[LiveRank]:
    """A one-rank job under ``fr_otel.install()``, without ``fr-otel run``, that has
    recorded and now waits for a line on its standard input to exit."""
    code = """
        import sys, torch, torch.distributed as dist, fr_otel
        fr_otel.install()
        dist.init_process_group("gloo", rank=0, world_size=1)
        dist.all_reduce(torch.ones(4))
        print("ready", flush=True)
        sys.stdin.readline()
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(STEERING)}
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        FR_OTEL_ARCHIVE=str(tmp_path / "archive"),
        FR_OTEL_JOB=JOB,
        FR_OTEL_RUN_ID="run-1",
    )
    settings = config.recorder_settings(environ=env)
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        fifo = trigger_path(ring_base(settings.rings, JOB, 0, settings.run_id))
        assert stat.S_ISFIFO(fifo.lstat().st_mode)
        yield LiveRank(process=process, fifo=fifo, settings=settings)
    finally:
        process.kill()
        process.wait(30)


@pytest.mark.gloo
@pytest.mark.parametrize("end", ["exit", "SIGTERM"])
def test_a_rank_removes_its_fifo_when_it_ends(tmp_path: Path, end: str) -> None:
    with _live_rank(tmp_path) as rank:
        if end == "exit":
            assert rank.process.stdin is not None
            rank.process.stdin.write("\n")
            rank.process.stdin.flush()
        else:  # the launcher's: the rank flushes, then ends by the signal
            rank.process.send_signal(signal.SIGTERM)
        code = rank.process.wait(60)
        assert code == (0 if end == "exit" else -signal.SIGTERM)
        assert not rank.fifo.exists()
        assert rank.fifo.with_suffix(".ring").exists()  # the ring stays


@pytest.mark.gloo
def test_a_killed_ranks_fifo_is_removed_once_it_is_dead_and_never_before(tmp_path: Path) -> None:
    with _live_rank(tmp_path) as rank:
        remove_dead_triggers(rank.settings)  # its rank lives: an operator may write to it
        assert rank.fifo.exists()
        rank.process.send_signal(signal.SIGKILL)
        rank.process.wait(30)
        assert stat.S_ISFIFO(rank.fifo.lstat().st_mode)  # nothing ran in it to remove it
        remove_dead_triggers(rank.settings)  # what fr-otel run does after the job
        assert not rank.fifo.exists()


def _try_lock(path: str, answer: multiprocessing.queues.Queue[bool]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        answer.put(True)
    except OSError:
        answer.put(False)
    finally:
        os.close(fd)


def _lockable_by_another_process(path: Path) -> bool:
    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    process = context.Process(target=_try_lock, args=(str(path), answer))
    process.start()
    process.join(30)
    return bool(answer.get(timeout=5))


def test_the_manifest_lock_is_the_incident_folders_own(tmp_path: Path) -> None:
    folder = tmp_path / "job=j" / "incident=i"
    with manifest.exclusive(folder):
        assert not _lockable_by_another_process(folder)
    assert _lockable_by_another_process(folder)
    assert list(folder.iterdir()) == []


def test_where_a_folder_cannot_be_locked_a_lock_file_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = fcntl.flock

    def like_nfs(fd: Any, operation: int) -> None:
        # NFS locks a byte range for flock, which needs a file open for writing
        if stat.S_ISDIR(os.fstat(fd if isinstance(fd, int) else fd.fileno()).st_mode):
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", like_nfs)
    folder = tmp_path / "job=j" / "incident=i"
    with manifest.exclusive(folder):
        assert not _lockable_by_another_process(folder / ".manifest.lock")
    assert _lockable_by_another_process(folder / ".manifest.lock")
