"""The fleet path, end to end with real processes: two nodes' agents (``agent.yaml``) and
two gateways (``gateway.yaml`` + ``gateway.static.yaml``: load balancing by trace id, a
static list of the gateways), each on its own loopback address, in front of a real Jaeger.

Addresses: the gateways listen on 127.0.0.2 and 127.0.0.3, the agents on 127.0.0.4 and
127.0.0.5, Jaeger on 127.0.0.1 (free ports on each). The load-balancing tier resolves its
peers with the **static** resolver (``FR_OTEL_GATEWAY_HOSTS``, the same list on both
gateways): a DNS name with several loopback addresses cannot be made here without editing
/etc/hosts, and static is what a fixed fleet would use. Each node's agent sends to "its"
gateway (agent 1 -> gateway 1, agent 2 -> gateway 2), as a DNS name's answers would spread
them; routing by trace id happens in the gateways whatever the entry point.

The incident is a simulated 8-rank NCCL fleet (ranks 0-3 on node 1, 4-7 on node 2), sent
with ``fr-otel export --otlp`` from each node to its agent. Gateway 2 is killed (SIGKILL)
while node 1's half streams through, node 2's half is sent while it is down, and it is
restarted on the same addresses and folders. Checked: every trace in exactly one gateway's
file archive and whole there; every span in Jaeger; nothing lost (counted); duplicates
(from retried requests) gone after ``fr-otel import``'s dedup, with the same diagnosis.

Stand-in, and why: Tempo is not built here (AGPL); the gateways' Tempo exporter points at a
closed loopback port and its persistent queue keeps retrying, which nothing else waits for.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from fr_otel.analysis import analyze
from fr_otel.archive import import_dumps
from fr_otel.cli import main
from tests.e2e import stack
from tests.e2e.spans import archive_spans, file_archive_spans, jaeger_spans, wait_for_jaeger
from tests.e2e.stack import running, wait_until

JOB = "fleet"
INCIDENT = "e2e-fleet"
WORLD = 8
ENTRIES = 1500
NODES = {1: range(0, 4), 2: range(4, 8)}
ROUTING_OVERLAYS = ("agent.route.yaml", "gateway.static.yaml")
"""What turns an agent into one that routes spans by trace id to their owners itself."""


def _archives(tmp_path: Path) -> tuple[Path, dict[int, Path]]:
    """The whole incident in one archive, and each node's ranks in an archive of its own."""
    dumps = tmp_path / "dumps"
    assert (
        main(
            [
                *("simulate", str(dumps), "--world", str(WORLD), "--entries", str(ENTRIES)),
                *("--fault", "skipped_collective", "--fault-rank", "5"),
            ]
        )
        == 0
    )
    whole = tmp_path / "archive"
    import_dumps([dumps], archive=whole, job=JOB, incident=INCIDENT)
    nodes = {}
    for node, ranks in NODES.items():
        nodes[node] = tmp_path / f"node{node}-archive"
        files = [dumps / f"nccl_trace_rank_{rank}" for rank in ranks]
        import_dumps(files, archive=nodes[node], job=JOB, incident=INCIDENT)
    return whole, nodes


@pytest.mark.parametrize("agents_route", [False, True], ids=["gateways-route", "agents-route"])
def test_two_gateways_keep_every_trace_whole_and_lose_nothing_when_one_is_killed(
    tmp_path: Path, agents_route: bool
) -> None:
    """``agents-route``: the agents run ``agent.route.yaml`` (and ``gateway.static.yaml``,
    the gateways' list), and send each span straight to its owner's routed port: the
    gateways' load-balancing tier takes no span at all, and a trace whose owner is down
    waits in its agent's disk queue until the owner is back."""
    whole, nodes = _archives(tmp_path)
    expected = archive_spans(whole, JOB, INCIDENT)
    by_node = {node: archive_spans(path, JOB, INCIDENT) for node, path in nodes.items()}
    assert {**by_node[1], **by_node[2]} == expected
    traces = {span.trace_id for span in expected.values()}

    jaeger = stack.jaeger(tmp_path)
    # no Tempo: see above
    gateway_list = stack.static_gateways(["127.0.0.2", "127.0.0.3"], tmp_path, jaeger)
    gateways = dict(enumerate(gateway_list, start=1))
    routing = {
        "FR_OTEL_GATEWAY_HOSTS": gateway_list[0].env["FR_OTEL_GATEWAY_HOSTS"],
    }
    agents = {
        n: stack.collector(
            f"agent{n}",
            ["agent.yaml", *(ROUTING_OVERLAYS if agents_route else ())],
            tmp_path / f"agent{n}",
            host=host,
            env={
                "FR_OTEL_GATEWAY_ENDPOINT": gateways[n].grpc,
                **(routing if agents_route else {}),
            },
        )
        for n, host in {1: "127.0.0.4", 2: "127.0.0.5"}.items()
    }
    archives = {g: tmp_path / f"gateway{g}" / "otlp-archive" for g in gateways}

    def arrived() -> Counter[str]:
        return Counter(s for g in gateways for _, s in file_archive_spans(archives[g]))

    with running(jaeger, *gateways.values(), *agents.values()):
        # node 1 streams its half; gateway 2 dies as soon as it has taken some of it
        assert main(["export", str(nodes[1]), "--otlp", f"http://{agents[1].http}"]) == 0
        wait_until(
            "gateway 2 to receive spans",
            lambda: gateways[2].metric("otelcol_receiver_accepted_spans") > 0,
            timeout_s=30,
            interval_s=0.02,
        )
        gateways[2].kill()
        at_kill = len(arrived())
        # node 2's half is sent while gateway 2, its agent's gateway, is down
        assert main(["export", str(nodes[2]), "--otlp", f"http://{agents[2].http}"]) == 0
        time.sleep(3)
        assert len(arrived()) < len(expected), "gateway 1 alone cannot have everything"
        gateways[2].start()
        wait_until(
            f"the gateways' archives to hold the {len(expected)} spans",
            lambda: set(arrived()) >= set(expected),
            timeout_s=120,
            interval_s=0.5,
        )
        wait_for_jaeger(jaeger, JOB, expected, timeout_s=120, interval_s=2)
        in_jaeger = Counter(s["spanID"] for _, s in jaeger_spans(jaeger, JOB))
        shown = Counter(s["spanID"] for _, s in jaeger_spans(jaeger, JOB, raw=False))
        # which tier took the spans: the gateways' load-balancing tier (port 4317), or,
        # from routing agents, none of them
        routed_by_gateways = sum(
            g.metric("otelcol_receiver_accepted_spans", receiver="otlp") for g in gateway_list
        )

    assert (routed_by_gateways == 0) == agents_route, routed_by_gateways
    # nothing lost, nothing foreign
    written = arrived()
    assert set(written) == set(expected)
    assert at_kill < len(expected), "the kill came mid-stream"
    # every trace whole at exactly one gateway
    owner: dict[str, set[int]] = {}
    for g in gateways:
        for trace_id, _ in file_archive_spans(archives[g]):
            owner.setdefault(trace_id, set()).add(g)
    assert set(owner) == traces
    assert all(len(gs) == 1 for gs in owner.values()), [t for t, gs in owner.items() if len(gs) > 1]
    per_gateway = Counter(next(iter(gs)) for gs in owner.values())
    assert set(per_gateway) == {1, 2}, "both gateways own traces"
    for g in gateways:
        held = {s for _, s in file_archive_spans(archives[g])}
        owned = {t for t, gs in owner.items() if gs == {g}}
        assert held == {s for s, e in expected.items() if e.trace_id in owned}
    # Jaeger has every span, and only those; a retried request may store one twice, and
    # the UI (Jaeger's adjusters drop identical copies) shows each once
    assert set(in_jaeger) == set(expected)
    assert set(shown) == set(expected)
    assert max(shown.values()) == 1, shown.most_common(3)

    # duplicates from retried requests are dropped by fr-otel import's dedup
    duplicates = sum(written.values()) - len(written)
    rebuilt = tmp_path / "from-gateways"
    files = [str(f) for a in archives.values() for f in sorted(a.glob("spans*.jsonl"))]
    assert main(["import", *files, "--archive", str(rebuilt)]) == 0
    rows = archive_spans(rebuilt, JOB, INCIDENT)
    assert rows == expected
    print(
        f"\n{len(expected)} spans, {len(traces)} traces: gateway 1 owns {per_gateway[1]},"
        f" gateway 2 {per_gateway[2]}; {at_kill} in the archives when gateway 2 was killed;"
        f" {duplicates} written twice (dropped by the import); Jaeger raw"
        f" {sum(in_jaeger.values())} spans"
    )
    before = analyze(whole, job=JOB, incident=INCIDENT)
    after = analyze(rebuilt, job=JOB, incident=INCIDENT)
    assert after.root_cause is not None
    assert [(f.kind, f.culprit_ranks) for f in after.findings] == [
        (f.kind, f.culprit_ranks) for f in before.findings
    ]
