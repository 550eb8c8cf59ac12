"""The harness's free ports: every listener of a test gets its own."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.stack import collector, free_port


def test_free_port_never_hands_out_the_same_port_twice() -> None:
    # Closing a probe socket lets the kernel offer its port again at once; two services
    # given the same port would race to bind it (a CI run lost a Collector that way).
    ports = [free_port("127.0.0.6") for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_a_collectors_listeners_are_all_on_distinct_ports(tmp_path: Path) -> None:
    service = collector("c", ["agent.yaml"], tmp_path)
    addresses = [
        service.grpc,
        service.http,
        service.telemetry,
        service.env["FR_OTEL_PROMETHEUS_LISTEN"],
        service.env["FR_OTEL_HEALTH_LISTEN"],
    ]
    assert len(set(addresses)) == len(addresses)
