"""``fr-otel export --otlp`` talks: within a second it says that the Collector is
unreachable, why, and that it retries; it says which protocol it uses and why; a gRPC
``host:port`` works."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fr_otel.cli import main
from tests.otlp_receiver import OtlpReceiver


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("export")
    assert main(["simulate", str(root / "dumps"), "--world", "4", "--entries", "30"]) == 0
    assert (
        main(["import", str(root / "dumps"), "--archive", str(root / "a"), "--workers", "1"]) == 0
    )
    return root / "a"


def _closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _export(
    archive: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, list[tuple[float, str]], str]:
    """Run the CLI; return its exit code, its stderr lines with the seconds each arrived
    after the first, and its stdout."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment.update(env or {})
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fr_otel",
            "export",
            str(archive),
            "--spool",
            str(archive.parent / "spool"),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append((time.monotonic(), line.rstrip("\n")))

    reader = threading.Thread(target=read)
    reader.start()
    assert process.stdout is not None
    out = process.stdout.read()  # stderr is the reader's alone
    process.wait(timeout=60)
    reader.join(10)
    start = lines[0][0] if lines else 0.0
    return process.returncode, [(t - start, line) for t, line in lines], out


HTTP = "sending over OTLP/HTTP to http://127.0.0.1:{port}/v1/traces"
GRPC = "sending over OTLP/gRPC to 127.0.0.1:{port} (TLS"
CASES = {
    "http": (["--otlp", "http://127.0.0.1:{port}"], {}, HTTP),
    "grpc-flag": (["--otlp", "127.0.0.1:{port}", "--protocol", "grpc"], {}, GRPC),
    "grpc-env": (
        ["--otlp", "127.0.0.1:{port}"],
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        "(protocol grpc: OTEL_EXPORTER_OTLP_PROTOCOL)",
    ),
    "grpc-no-scheme": (
        ["--otlp", "127.0.0.1:{port}"],
        {},
        "(protocol grpc: the endpoint has no scheme)",
    ),
}


@pytest.mark.parametrize(("args", "env", "says"), CASES.values(), ids=CASES.keys())
def test_a_closed_port_is_said_at_once_with_the_reason(
    archive: Path, args: list[str], env: dict[str, str], says: str
) -> None:
    port = _closed_port()
    args = [a.format(port=port) for a in args]
    deadline_s = 4.0
    started = time.monotonic()
    code, lines, out = _export(archive, *args, "--deadline", str(deadline_s), env=env)
    took = time.monotonic() - started
    text = "\n".join(line for _, line in lines)
    assert code == 2, text
    assert lines[0][1].startswith("fr-otel: sending over OTLP/"), text
    assert says.format(port=port) in lines[0][1], text
    [(when, notice)] = [(t, line) for t, line in lines if "is unreachable" in line]
    # said at the first refusal, not once the retries are over
    assert when < deadline_s / 2, text
    assert "Connection refused" in notice or "connection refused" in notice.lower(), notice
    assert "retrying for up to" in notice and "then spooling" in notice
    assert "spans spooled in" in out and "refused" in out.lower(), out
    assert took < 30
    assert "Traceback" not in text


def test_http_protobuf_with_a_bare_host_port_explains_both_protocols(archive: Path) -> None:
    code, lines, _ = _export(archive, "--otlp", "collector:4317", "--protocol", "http/protobuf")
    text = "\n".join(line for _, line in lines)
    assert code == 2
    assert "has no scheme" in text
    assert "http://collector:4317" in text and "--protocol grpc" in text


def test_a_grpc_host_port_delivers(archive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with OtlpReceiver(protocol="grpc") as receiver:
        target = f"127.0.0.1:{receiver.port}"
        os.environ["OTEL_EXPORTER_OTLP_INSECURE"] = "true"
        try:
            code = main(["export", str(archive), "--otlp", target, "--deadline", "20"])
        finally:
            del os.environ["OTEL_EXPORTER_OTLP_INSECURE"]
        spans = receiver.spans()
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"sending over OTLP/gRPC to {target} (plaintext)" in captured.err
    assert len(spans) == 120
    assert "sent 120 spans" in captured.out


def test_progress_shows_on_a_terminal(archive: Path) -> None:
    import fcntl
    import pty
    import struct
    import termios

    with OtlpReceiver(protocol="http") as receiver:
        leader, follower = pty.openpty()
        # a terminal 100 columns wide (a new pty has none, and tqdm draws nothing in 0)
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
        environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        process = subprocess.Popen(
            [sys.executable, "-m", "fr_otel", "export", str(archive), "--otlp", receiver.endpoint],
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
            env=environment,
        )
        os.close(follower)
        out, _ = process.communicate(timeout=60)
        seen = b""
        with contextlib.suppress(OSError):  # EIO once the process has gone
            while chunk := os.read(leader, 65536):
                seen += chunk
        os.close(leader)
    assert process.returncode == 0, seen
    assert "sent 120 spans" in out
    assert b"exporting" in seen and b"/120" in seen and b"span" in seen
