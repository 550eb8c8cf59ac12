"""collector-config/: every Collector config is valid for the pinned release, as far as
can be checked without a Collector binary.

The component types and their config keys are data with their sources
(collector-config/schema/components.yaml, keys.yaml). Span attribute names come from
``fr_otel.otel.model``, so a rename there fails here until the configs follow. A file named
``<base>.<extra>.yaml`` is an overlay: it is checked merged onto ``<base>.yaml``, the way
the Collector merges several ``--config`` files.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fr_otel.otel import model
from fr_otel.otel.encode import MAX_REQUEST_BYTES, row_to_span
from tests.collector_configs import with_defaults

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "collector-config"
# The ocb manifest of our own distribution: not a Collector config.
BUILDER = CONFIG_DIR / "builder.yaml"
COMPONENTS = yaml.safe_load((CONFIG_DIR / "schema" / "components.yaml").read_text())
KEYS = yaml.safe_load((CONFIG_DIR / "schema" / "keys.yaml").read_text())

KINDS = ("receivers", "processors", "exporters", "connectors", "extensions")
PIPELINE_SIGNALS = ("traces", "metrics", "logs", "profiles")
OPEN = "*"
LIST = "[]"

# What the span metrics may be broken down by (low cardinality), and what never.
SPAN_METRICS_DIMENSIONS = [model.OP, model.PG_DESC, model.STATE]
HIGH_CARDINALITY = {
    model.RANK,
    model.COLLECTIVE_SEQ_ID,
    model.P2P_SEQ_ID,
    model.RECORD_ID,
    model.PG_RANKS,
    model.PEER,
    model.INCIDENT,
    model.INPUT_SIZES,
    model.OUTPUT_SIZES,
    model.CODE_LINE,
    model.CODE_FILE,
    model.CODE_FUNCTION,
    model.SERVICE_INSTANCE_ID,
    model.PROCESS_PID,
    model.HOST_NAME,
}
# Resource attributes that identify one rank or process: not on span metrics.
PER_RANK_RESOURCE = [model.SERVICE_INSTANCE_ID, model.RANK, model.HOST_NAME, model.PROCESS_PID]
# Groups above this size lose their member list on the way to the viewers.
VIEW_MAX_GROUP = 64
VIEW_STATEMENT = (
    f'delete_key(attributes, "{model.PG_RANKS}") '
    f'where attributes["{model.PG_SIZE}"] > {VIEW_MAX_GROUP}'
)
# Scale the configs are sized for (README.md): one process group of every rank.
WORLD = 10_000


# --- loading ---------------------------------------------------------------------------


def deep_merge(base: Any, overlay: Any) -> Any:
    """The Collector's merge of several --config files: maps merge, anything else is replaced."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        merged = dict(base)
        for key, value in overlay.items():
            merged[key] = deep_merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(overlay)


def _base_of(path: Path) -> Path | None:
    parts = path.name.split(".")
    return path.with_name(f"{parts[0]}.yaml") if len(parts) > 2 else None


def config_files() -> list[Path]:
    return sorted(p for p in CONFIG_DIR.glob("*.yaml") if p != BUILDER)


def configs() -> dict[str, dict[str, Any]]:
    """Every config to validate: each base file, and each overlay merged onto its base."""
    out: dict[str, dict[str, Any]] = {}
    for path in config_files():
        loaded = with_defaults(yaml.safe_load(path.read_text()))
        base = _base_of(path)
        if base is None:
            out[path.name] = loaded
        else:
            merged = deep_merge(with_defaults(yaml.safe_load(base.read_text())), loaded)
            out[f"{base.name}+{path.name}"] = merged
    return out


CONFIGS = configs()
NAMES = sorted(CONFIGS)


def test_the_expected_configs_exist() -> None:
    assert {
        "local.yaml",
        "agent.yaml",
        "gateway.yaml",
        "gateway.yaml+gateway.s3.yaml",
        "gateway.yaml+gateway.static.yaml",
        "agent.yaml+agent.route.yaml",
    } <= set(NAMES)
    for path in config_files():
        base = _base_of(path)
        assert base is None or base.exists(), f"{path.name}: overlay without {base.name}"


# --- checker functions (each returns problems; the negative tests use them too) --------


def type_of(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def pipelines(config: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    return (config.get("service") or {}).get("pipelines") or {}


def _defined(config: dict[str, Any], kind: str) -> dict[str, Any]:
    return config.get(kind) or {}


def undefined_components(config: dict[str, Any]) -> list[str]:
    problems = []
    for name, pipeline in pipelines(config).items():
        for role in ("receivers", "processors", "exporters"):
            for component in pipeline.get(role) or []:
                sections = [role] if role == "processors" else [role, "connectors"]
                if not any(component in _defined(config, s) for s in sections):
                    problems.append(f"pipeline {name}: {role[:-1]} {component!r} is not defined")
    for extension in (config.get("service") or {}).get("extensions") or []:
        if extension not in _defined(config, "extensions"):
            problems.append(f"service.extensions: {extension!r} is not defined")
    return problems


def _storage_references(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "storage" and isinstance(value, str):
                yield value
            else:
                yield from _storage_references(value)
    elif isinstance(node, list):
        for item in node:
            yield from _storage_references(item)


def unused_components(config: dict[str, Any]) -> list[str]:
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for pipeline in pipelines(config).values():
        for role in used:
            used[role] |= set(pipeline.get(role) or [])
    problems = []
    for role, names in used.items():
        for component in _defined(config, role):
            if component not in names:
                problems.append(f"{role[:-1]} {component!r} is defined but in no pipeline")
    for connector in _defined(config, "connectors"):
        if connector not in used["exporters"] or connector not in used["receivers"]:
            problems.append(
                f"connector {connector!r} must be an exporter of one pipeline and a receiver"
                " of another"
            )
    listed = set((config.get("service") or {}).get("extensions") or [])
    referenced = set(_storage_references({k: config.get(k) for k in KINDS}))
    for extension in _defined(config, "extensions"):
        if extension not in listed | referenced:
            problems.append(f"extension {extension!r} is defined but neither listed nor used")
    for storage in referenced - listed:
        problems.append(f"extension {storage!r} is used as storage but not in service.extensions")
    return problems


def unknown_types(config: dict[str, Any], components: dict[str, Any] = COMPONENTS) -> list[str]:
    problems = []
    for kind in KINDS:
        known = components.get(kind) or {}
        deprecated = (components.get("deprecated") or {}).get(kind) or {}
        for component in _defined(config, kind):
            kind_type = type_of(component)
            if kind_type in deprecated:
                problems.append(
                    f"{kind[:-1]} {component!r}: {kind_type!r} is a deprecated alias in"
                    f" {components['release']}, use {deprecated[kind_type]!r}"
                )
            elif kind_type not in known:
                problems.append(
                    f"{kind[:-1]} {component!r}: type {kind_type!r} is not a known"
                    f" {kind[:-1]} of {components['release']} (schema/components.yaml)"
                )
    return problems


def _key_problems(value: Any, schema: Any, where: str) -> Iterator[str]:
    if schema == OPEN or schema is None:
        if schema is None and isinstance(value, dict) and value:
            yield f"{where}: takes a value, not the keys {sorted(value)}"
        return
    if isinstance(value, list):
        items = schema.get(LIST)
        if items is None:
            yield f"{where}: a list where the schema has keys {sorted(schema)}"
            return
        for index, item in enumerate(value):
            if isinstance(item, dict):
                yield from _key_problems(item, items, f"{where}[{index}]")
        return
    if value is None:  # an empty section, e.g. `health_check:`
        return
    if not isinstance(value, dict):
        yield f"{where}: a value where the schema has keys {sorted(schema)}"
        return
    for key, sub in value.items():
        if key not in schema or key == LIST:
            yield f"{where}.{key}: not a known key"
        else:
            yield from _key_problems(sub, schema[key], f"{where}.{key}")


def unknown_keys(config: dict[str, Any], keys: dict[str, Any] = KEYS) -> list[str]:
    problems = []
    for kind in KINDS:
        for component, body in _defined(config, kind).items():
            entry = (keys.get(kind) or {}).get(type_of(component))
            if entry is None:
                problems.append(f"{kind}.{component}: no key schema in schema/keys.yaml")
                continue
            problems.extend(_key_problems(body, entry["keys"], f"{kind}.{component}"))
    return problems


def bad_pipeline_names(config: dict[str, Any]) -> list[str]:
    return [
        f"pipeline {name!r}: not <{'|'.join(PIPELINE_SIGNALS)}>[/name]"
        for name in pipelines(config)
        if name.split("/", 1)[0] not in PIPELINE_SIGNALS
    ]


def receiver_endpoints(config: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for receiver, body in _defined(config, "receivers").items():
        for protocol, settings in ((body or {}).get("protocols") or {}).items():
            yield receiver, protocol, settings or {}


def local_binds(config: dict[str, Any]) -> list[str]:
    return [
        f"{receiver}.{protocol}: endpoint {settings.get('endpoint')!r} is not 0.0.0.0:<port>"
        " (the receiver's default is localhost)"
        for receiver, protocol, settings in receiver_endpoints(config)
        if not str(settings.get("endpoint", "")).startswith("0.0.0.0:")
    ]


def memory_limiter_order(config: dict[str, Any]) -> list[str]:
    problems = []
    for name, pipeline in pipelines(config).items():
        types = [type_of(p) for p in pipeline.get("processors") or []]
        if "memory_limiter" not in types:
            problems.append(f"pipeline {name}: no memory_limiter")
            continue
        if types[0] != "memory_limiter":
            problems.append(f"pipeline {name}: memory_limiter is not first: {types}")
        if "batch" in types and types.index("batch") < types.index("memory_limiter"):
            problems.append(f"pipeline {name}: batch before memory_limiter: {types}")
    return problems


def _duration_s(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    assert match, f"not a duration: {text!r}"
    return float(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[2]]


def queue_problems(config: dict[str, Any]) -> list[str]:
    """exporterhelper's queue/batch validation (core v0.159.0
    exporter/exporterhelper/internal/queuebatch/config.go), with its defaults."""
    problems = []
    for component, body in _defined(config, "exporters").items():
        queues = [((body or {}).get("sending_queue"), component)]
        protocol = ((body or {}).get("protocol") or {}).get("otlp") or {}
        queues.append((protocol.get("sending_queue"), f"{component}.protocol.otlp"))
        for queue, where in queues:
            if not queue:
                continue
            sizer = queue.get("sizer", "requests")
            if queue.get("num_consumers", 10) <= 0 or queue.get("queue_size", 1000) <= 0:
                problems.append(f"{where}: num_consumers and queue_size must be positive")
            if queue.get("storage") and queue.get("wait_for_result"):
                problems.append(f"{where}: wait_for_result with a persistent queue")
            batch = queue.get("batch")
            if batch is None:
                continue
            batch_sizer = batch.get("sizer", sizer)
            if batch_sizer not in ("items", "bytes"):
                problems.append(f"{where}: batch supports only items or bytes, not {batch_sizer}")
            if _duration_s(str(batch.get("flush_timeout", "200ms"))) <= 0:
                problems.append(f"{where}: flush_timeout must be positive")
            low, high = batch.get("min_size", 8192), batch.get("max_size", 0)
            if high and high < low:
                problems.append(f"{where}: max_size {high} < min_size {low}")
            if batch_sizer == sizer and low > queue.get("queue_size", 1000):
                problems.append(f"{where}: min_size {low} > queue_size")
    return problems


# --- the checks, one per config ---------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_pipeline_component_is_defined(name: str) -> None:
    assert undefined_components(CONFIGS[name]) == []


@pytest.mark.parametrize("name", NAMES)
def test_every_defined_component_is_used(name: str) -> None:
    assert unused_components(CONFIGS[name]) == []


@pytest.mark.parametrize("name", NAMES)
def test_every_component_type_exists_in_the_pinned_release(name: str) -> None:
    assert unknown_types(CONFIGS[name]) == []


@pytest.mark.parametrize("name", NAMES)
def test_every_config_key_is_in_the_component_schema(name: str) -> None:
    assert unknown_keys(CONFIGS[name]) == []


@pytest.mark.parametrize("name", NAMES)
def test_pipeline_names_are_signal_types(name: str) -> None:
    assert bad_pipeline_names(CONFIGS[name]) == []
    assert pipelines(CONFIGS[name]), "no pipelines"


@pytest.mark.parametrize("name", NAMES)
def test_receivers_listen_on_all_interfaces(name: str) -> None:
    assert list(receiver_endpoints(CONFIGS[name])), "no receiver endpoints"
    assert local_binds(CONFIGS[name]) == []


@pytest.mark.parametrize("name", NAMES)
def test_grpc_receivers_take_fr_otels_largest_request(name: str) -> None:
    grpc = [
        (f"{receiver}.grpc", settings)
        for receiver, protocol, settings in receiver_endpoints(CONFIGS[name])
        if protocol == "grpc"
    ]
    assert grpc, "no gRPC receiver"
    for where, settings in grpc:
        mib = settings.get("max_recv_msg_size_mib")
        assert mib is not None, f"{where}: max_recv_msg_size_mib unset (gRPC's default is 4 MiB)"
        assert mib * 2**20 >= MAX_REQUEST_BYTES, f"{where}: {mib} MiB < {MAX_REQUEST_BYTES} B"


@pytest.mark.parametrize("name", NAMES)
def test_memory_limiter_comes_first_and_batch_after_it(name: str) -> None:
    assert memory_limiter_order(CONFIGS[name]) == []


@pytest.mark.parametrize("name", NAMES)
def test_sending_queues_pass_the_exporterhelper_validation(name: str) -> None:
    assert queue_problems(CONFIGS[name]) == []


@pytest.mark.parametrize("name", NAMES)
def test_requests_to_jaeger_and_tempo_stay_under_4_mib(name: str) -> None:
    """Jaeger's OTLP receiver keeps gRPC's 4 MiB default: batch by bytes."""
    for component, body in _defined(CONFIGS[name], "exporters").items():
        if type_of(component) == "otlp_grpc" and component.split("/")[-1] in ("jaeger", "tempo"):
            batch = body["sending_queue"]["batch"]
            assert batch["sizer"] == "bytes", component
            assert 0 < batch["max_size"] <= 4 * 2**20, component


def _span_metrics(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        body
        for component, body in _defined(config, "connectors").items()
        if type_of(component) == "span_metrics"
    ]


SPAN_METRICS_CONFIGS = [n for n in NAMES if _span_metrics(CONFIGS[n])]


def test_span_metrics_run_where_the_viewers_are() -> None:
    assert set(SPAN_METRICS_CONFIGS) >= {"local.yaml", "gateway.yaml"}


@pytest.mark.parametrize("name", SPAN_METRICS_CONFIGS)
def test_span_metrics_dimensions_are_the_span_models_low_cardinality_names(name: str) -> None:
    for connector in _span_metrics(CONFIGS[name]):
        names = [d["name"] for d in connector["dimensions"]]
        assert names == SPAN_METRICS_DIMENSIONS, "dimensions drifted from fr_otel.otel.model"
        every = names + [d["name"] for d in connector.get("calls_dimensions") or []]
        every += [d["name"] for d in (connector.get("histogram") or {}).get("dimensions") or []]
        every += [d["name"] for d in (connector.get("events") or {}).get("dimensions") or []]
        assert not set(every) & HIGH_CARDINALITY, "a rank- or sequence-like dimension"
        assert not connector.get("add_resource_attributes"), "resource attributes are per rank"
        assert set(connector.get("resource_metrics_key_attributes") or []) <= {model.SERVICE_NAME}
        # the dashboards (deploy/) query traces_span_metrics_duration_milliseconds_*
        assert connector.get("namespace") == "traces.span.metrics"
        assert connector["histogram"]["unit"] == "ms"


@pytest.mark.parametrize("name", SPAN_METRICS_CONFIGS)
def test_span_metrics_lose_per_rank_resource_attributes(name: str) -> None:
    config = CONFIGS[name]
    connectors = {c for c in _defined(config, "connectors") if type_of(c) == "span_metrics"}
    fed = [p for p in pipelines(config).values() if set(p.get("receivers") or []) & connectors]
    assert fed
    for pipeline in fed:
        deleted = [
            attribute["key"]
            for processor in pipeline.get("processors") or []
            if type_of(processor) == "resource"
            for attribute in config["processors"][processor]["attributes"]
            if attribute.get("action") == "delete"
        ]
        assert deleted == PER_RANK_RESOURCE


# --- log records and metrics: an incident's signal, the live check's -----------------------

SIGNAL_PROCESSORS = {"memory_limiter", "batch", "resource"}
"""What may stand between the otlp receiver and a log record's or a count's exporter: none
of these touches a log record's or a data point's attributes (the job, kind, incident and
culprits the alerts read)."""


def otlp_pipelines(config: dict[str, Any], signal: str) -> dict[str, dict[str, list[str]]]:
    """The ``signal`` pipelines that take what fr_otel sends to the ``otlp`` receiver."""
    return {
        name: pipeline
        for name, pipeline in pipelines(config).items()
        if name.split("/")[0] == signal and "otlp" in (pipeline.get("receivers") or [])
    }


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("signal", ["logs", "metrics"])
def test_the_otlp_receiver_takes_log_records_and_metrics(name: str, signal: str) -> None:
    """Each incident's log record (fr_otel.incident) and count (fr_otel.incidents) go
    where the spans go: a Collector without a pipeline for them answers 404 or
    UNIMPLEMENTED, and what the ranks spool for them never drains."""
    found = otlp_pipelines(CONFIGS[name], signal)
    assert found, f"no {signal} pipeline takes the otlp receiver"
    for pipeline in found.values():
        assert pipeline.get("exporters"), "a pipeline that exports nowhere"
        processors = {type_of(p) for p in pipeline.get("processors") or []}
        assert processors <= SIGNAL_PROCESSORS, processors - SIGNAL_PROCESSORS


@pytest.mark.parametrize("name", NAMES)
def test_the_incident_count_reaches_prometheus_or_goes_on_with_the_spans(name: str) -> None:
    """Where a config serves Prometheus (span metrics on :8889), the otlp metrics are served
    there too (fr_otel_incidents_total, which the alert rules read); where it does not (the
    agent), metrics and logs go on to wherever its spans go."""
    config = CONFIGS[name]
    prometheus = {e for e in _defined(config, "exporters") if type_of(e) == "prometheus"}
    metrics = otlp_pipelines(config, "metrics")
    if prometheus:
        assert any(set(p["exporters"]) & prometheus for p in metrics.values())
        return
    onward = {
        exporter
        for pipeline in otlp_pipelines(config, "traces").values()
        for exporter in pipeline["exporters"]
    }
    assert onward, "no otlp traces pipeline to follow"
    if {type_of(e) for e in onward} == {"load_balancing"}:
        # spans routed by trace id straight to their owner (agent.route.yaml): log records
        # and metrics, which no trace id routes, to any gateway, whose pipelines take them
        onward = {e for e in _defined(config, "exporters") if type_of(e) == "otlp_grpc"}
    for pipeline in (*metrics.values(), *otlp_pipelines(config, "logs").values()):
        assert set(pipeline["exporters"]) == onward


@pytest.mark.parametrize("name", SPAN_METRICS_CONFIGS)
def test_viewers_get_large_groups_without_their_member_list(name: str) -> None:
    config = CONFIGS[name]
    for pipeline_name, pipeline in pipelines(config).items():
        exporters = {type_of(e) for e in pipeline.get("exporters") or []}
        transforms = [p for p in pipeline.get("processors") or [] if type_of(p) == "transform"]
        statements = [
            statement
            for t in transforms
            for group in config["processors"][t]["trace_statements"]
            for statement in group["statements"]
        ]
        if exporters & {"otlp_grpc", "span_metrics"}:
            assert statements == [VIEW_STATEMENT], pipeline_name
        if exporters & {"file", "awss3"}:
            assert statements == [], f"{pipeline_name}: the archive keeps every attribute"


def test_a_collective_of_every_rank_fits_one_tempo_trace() -> None:
    """A span of a WORLD-rank group names its members as runs (fr_otel.pg.rank_ranges),
    not as the 50 KB list that made one collective's trace 100x Tempo's default limit
    (README.md, sizing): it is no larger than a span of a 64-rank group."""
    big = _span_bytes(WORLD)
    small = _span_bytes(VIEW_MAX_GROUP)
    assert big <= small
    assert WORLD * big < 15_000_000  # the README's max_bytes_per_trace


def _span_bytes(group: int) -> int:
    row = {
        "job": "llama-70b-pretrain",
        "incident": "20260822T101500Z-timeout",
        "run_id": None,
        "rank": 9_999,
        "pg_name": "0",
        "pg_desc": "default_pg",
        "pg_ranks": list(range(group)),
        "record_id": 19_999,
        "collective_seq_id": 123_456,
        "p2p_seq_id": None,
        "backend": "nccl",
        "op": "all_reduce",
        "peer": None,
        "is_p2p": False,
        "input_sizes": [[2048, 1, 5120]],
        "output_sizes": [[2048, 1, 5120]],
        "input_dtypes": ["BFloat16"],
        "output_dtypes": ["BFloat16"],
        "state": "scheduled",
        "retired": False,
        "time_created_ns": 1_787_000_000_000_000_000,
        "time_started_ns": None,
        "time_completed_ns": None,
        "dump_time_ns": 1_787_000_600_000_000_000,
        "timeout_ms": 600_000,
        "call_site": "/workspace/model/tensor_parallel.py:93 in backward",
    }
    return len(row_to_span(row).SerializeToString())


def test_agent_batches_fit_the_gateways_receive_limit() -> None:
    """An agent request holds at most send_batch_max_size spans, each at most one span of a
    WORLD-rank group; the gateway must take it (README.md, sizing)."""
    agent, gateway = CONFIGS["agent.yaml"], CONFIGS["gateway.yaml"]
    batch = agent["processors"]["batch"]["send_batch_max_size"]
    limit = min(
        settings["max_recv_msg_size_mib"] * 2**20
        for _, protocol, settings in receiver_endpoints(gateway)
        if protocol == "grpc"
    )
    assert batch * _span_bytes(WORLD) <= limit


def test_the_load_balancing_tier_routes_by_trace_id() -> None:
    config = CONFIGS["gateway.yaml"]
    balancers = {
        c: body for c, body in config["exporters"].items() if type_of(c) == "load_balancing"
    }
    assert balancers
    for body in balancers.values():
        assert body["routing_key"] == "traceID"
        assert "routing_attributes" not in body
        port = str(body["resolver"]["dns"]["port"])
        routed = [
            receiver
            for receiver, protocol, settings in receiver_endpoints(config)
            if protocol == "grpc" and settings["endpoint"].endswith(f":{port}")
        ]
        assert len(routed) == 1, f"no receiver on the resolver's port {port}"
        # the routed receiver feeds the backends, the router never re-routes
        for pipeline in pipelines(config).values():
            exporters = pipeline.get("exporters") or []
            if routed[0] in (pipeline.get("receivers") or []):
                assert not set(exporters) & set(balancers)
    agent = CONFIGS["agent.yaml"]
    queues = [e.get("sending_queue") or {} for e in agent["exporters"].values()]
    assert all(q.get("enabled") and q.get("storage") for q in queues), "persistent queue"


def test_agents_that_route_pick_the_owner_the_gateways_would() -> None:
    """agent.route.yaml's spans go straight to their owner's routed port: the same exporter
    as the gateways' route tier (its name, so gateway.static.yaml switches both), the same
    key and peers, and the agent's queue on its disk; logs and metrics are not routed."""
    agent = CONFIGS["agent.yaml+agent.route.yaml"]
    gateway = CONFIGS["gateway.yaml"]
    ours, theirs = agent["exporters"]["load_balancing"], gateway["exporters"]["load_balancing"]
    assert ours["routing_key"] == theirs["routing_key"] == "traceID"
    assert ours["resolver"] == theirs["resolver"]
    assert ours["protocol"] == theirs["protocol"]
    queue = ours["sending_queue"]
    assert queue["enabled"] and queue["storage"] in agent["service"]["extensions"]
    flows = pipelines(agent)
    assert flows["traces"]["exporters"] == ["load_balancing"]
    assert all(flows[kind]["exporters"] == ["otlp_grpc/gateway"] for kind in ("logs", "metrics"))
    # a fixed list: the gateways' own overlay switches the agents' resolver alike
    static = yaml.safe_load((CONFIG_DIR / "gateway.static.yaml").read_text())
    fixed = deep_merge(agent, static)["exporters"]["load_balancing"]["resolver"]
    assert fixed == deep_merge(gateway, static)["exporters"]["load_balancing"]["resolver"]


@pytest.mark.parametrize("name", NAMES)
def test_the_file_archive_is_what_fr_otel_import_reads(name: str) -> None:
    for component, body in _defined(CONFIGS[name], "exporters").items():
        if type_of(component) == "file":
            assert body.get("format", "json") == "json", "fr-otel import reads OTLP JSON lines"
            assert not body.get("compression"), "compressed files are length-prefixed records"
            assert not (body.get("group_by") or {}).get("enabled"), "group_by ignores rotation"
            assert body["path"].endswith((".jsonl", ".json")), "what fr-otel import takes"
            assert "rotation" in body


def test_every_fr_otel_name_in_the_configs_comes_from_the_span_model() -> None:
    known = set(model.SPAN_ATTRIBUTES) | {k for k, _ in model.resource_attributes("j", 0)}
    for path in config_files():
        for name in re.findall(r"\bfr_otel\.[a-z_.]*[a-z_]", path.read_text()):
            assert name in known, f"{path.name}: {name} is not defined in fr_otel.otel.model"


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)
    elif isinstance(node, str):
        yield node


@pytest.mark.parametrize("path", config_files(), ids=lambda p: p.name)
def test_placeholders_use_the_env_provider_syntax(path: Path) -> None:
    for value in _strings(yaml.safe_load(path.read_text())):
        for placeholder in re.findall(r"\$\{[^}]*\}", value):
            assert re.fullmatch(r"\$\{env:[A-Z][A-Z0-9_]*(:-[^}]*)?\}", placeholder), placeholder
        assert not re.search(r"\$[A-Za-z_]", value), f"bare $VAR in {value!r}: use ${{env:VAR}}"


def test_every_file_names_the_pinned_image() -> None:
    image = COMPONENTS["image"]
    assert image == f"otel/opentelemetry-collector-contrib:{COMPONENTS['release']}"
    for path in [*config_files(), CONFIG_DIR / "README.md"]:
        text = path.read_text()
        assert image in text or f"{image.split(':')[0]}:" not in text, path.name
        pins = set(re.findall(r"opentelemetry-collector-contrib:(\d[\w.]*)", text))
        assert pins <= {COMPONENTS["release"]}, f"{path.name} pins {pins}"
    assert image in (CONFIG_DIR / "README.md").read_text()


# --- the data files ---------------------------------------------------------------------


def test_every_known_type_is_built_into_the_release() -> None:
    for kind in KINDS:
        for kind_type, entry in COMPONENTS[kind].items():
            assert entry["module"] in COMPONENTS["manifest_modules"][kind], (kind, kind_type)
            assert entry["evidence"], (kind, kind_type)


def test_every_key_schema_has_a_source_and_a_known_type() -> None:
    for kind in KINDS:
        for kind_type, entry in (KEYS.get(kind) or {}).items():
            assert entry["source"], (kind, kind_type)
            assert kind_type in COMPONENTS[kind], (kind, kind_type)
            assert isinstance(entry["keys"], dict), (kind, kind_type)


# --- the same checkers catch a broken config ---------------------------------------------

BROKEN = """
receivers:
  otlp:
    protocols:
      grpc: {endpoint: localhost:4317}
processors:
  batch: {send_batch_size: 10, send_batch_maxsize: 20}
  memory_limiter: {check_interval: 1s, limit_mib: 100}
exporters:
  otlphttp:
    endpoint: http://jaeger:4318
    sending_queue: {batch: {sizer: bytes, min_size: 100, max_size: 10}}
  debug: {verbosity: basic}
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch, memory_limiter, attributes/typo]
      exporters: [otlphttp]
    spans:
      receivers: [otlp]
      exporters: [otlphttp]
"""


@pytest.mark.parametrize(
    ("checker", "expected"),
    [
        (undefined_components, "processor 'attributes/typo' is not defined"),
        (unused_components, "exporter 'debug' is defined but in no pipeline"),
        (unknown_types, "'otlphttp' is a deprecated alias in 0.161.0, use 'otlp_http'"),
        (unknown_keys, "processors.batch.send_batch_maxsize: not a known key"),
        (bad_pipeline_names, "pipeline 'spans'"),
        (local_binds, "otlp.grpc: endpoint 'localhost:4317'"),
        (memory_limiter_order, "memory_limiter is not first"),
        (queue_problems, "otlphttp: max_size 10 < min_size 100"),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_a_broken_config_is_caught(checker: Any, expected: str) -> None:
    problems = checker(yaml.safe_load(BROKEN))
    assert any(expected in p for p in problems), problems


def test_unknown_types_and_nested_keys_are_caught() -> None:
    config = yaml.safe_load(BROKEN)
    config["exporters"]["kafkaa"] = {}
    config["exporters"]["debug"] = {"verbosity": {"level": "basic"}}
    config["receivers"]["otlp"]["protocols"]["grpc"]["tls"] = {"insecure": True}
    problems = unknown_types(config) + unknown_keys(config)
    assert any("type 'kafkaa' is not a known exporter" in p for p in problems), problems
    assert any("exporters.debug.verbosity: takes a value" in p for p in problems), problems
    # a server's TLS has no `insecure` (that is the client side)
    assert any("grpc.tls.insecure: not a known key" in p for p in problems), problems


def test_a_connector_used_one_way_and_an_unlisted_storage_are_caught() -> None:
    config = yaml.safe_load(BROKEN)
    config["connectors"] = {"span_metrics": {}}
    config["extensions"] = {"file_storage/q": {}}
    config["exporters"]["otlphttp"]["sending_queue"] = {"storage": "file_storage/q"}
    config["service"]["pipelines"]["traces"]["exporters"].append("span_metrics")
    problems = unused_components(config)
    assert any("connector 'span_metrics' must be" in p for p in problems), problems
    assert any("'file_storage/q' is used as storage but not" in p for p in problems), problems


def test_overlays_merge_like_the_collector() -> None:
    merged = deep_merge({"a": {"b": [1], "c": 1}}, {"a": {"b": [2], "d": 2}})
    assert merged == {"a": {"b": [2], "c": 1, "d": 2}}


# --- our own distribution (collector-config/builder.yaml) and the images ---------------

BUILDER_MANIFEST = yaml.safe_load(BUILDER.read_text())
# Types the shipped configs use that the distribution cannot have: contrib's
# exporter/awss3exporter is served at no version by the Go module proxy the project's
# machines reach (403 "not available" / 404 for v0.148.0 to v0.165.1), so gateway.s3.yaml
# runs on the contrib image only (builder.yaml and collector-config/README.md say so).
NOT_BUILDABLE = {"exporters": {"awss3"}}
# The stable (v1.x) modules released with each beta release: ocb v0.161.0's
# DefaultStableOtelColVersion (cmd/builder/internal/builder/config.go).
STABLE_OF = {"0.161.0": "v1.67.0"}
# Jaeger tags its Go module v1.x and its v2 images 2.x, one release each: CHANGELOG.md
# "v1.76.0 / v2.13.0 (2025-12-03)".
JAEGER_IMAGE_OF = {"v1.76.0": "2.13.0"}


def _used_types() -> dict[str, set[str]]:
    used: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for config in CONFIGS.values():
        for kind in KINDS:
            used[kind] |= {type_of(c) for c in _defined(config, kind)}
    return used


def _gomods(kind: str) -> list[tuple[str, str]]:
    return [tuple(e["gomod"].split()) for e in BUILDER_MANIFEST.get(kind) or []]  # type: ignore[misc]


def test_the_distribution_builds_exactly_the_components_the_configs_use() -> None:
    used = _used_types()
    for kind in KINDS:
        built = {module for module, _ in _gomods(kind)}
        missing = NOT_BUILDABLE.get(kind, set())
        assert missing <= used[kind], f"{kind}: {missing - used[kind]} no longer used"
        wanted = {COMPONENTS[kind][t]["module"] for t in used[kind] - missing}
        assert built == wanted, kind
    # ${env:...} and --config=FILE need these two providers; nothing else is listed
    providers = {module.rsplit("/", 1)[1] for module, _ in _gomods("providers")}
    assert (
        {"envprovider", "fileprovider"}
        <= providers
        <= {"envprovider", "fileprovider", "yamlprovider"}
    )


def test_the_distribution_is_pinned_to_the_configs_release() -> None:
    release = COMPONENTS["release"]
    versions = {kind: {v for _, v in _gomods(kind)} for kind in (*KINDS, "providers")}
    for kind in KINDS:
        assert versions[kind] == {f"v{release}"}, kind
    assert versions["providers"] == {STABLE_OF[release]}
    assert BUILDER_MANIFEST["dist"]["version"] == release
    assert BUILDER_MANIFEST["dist"]["name"] == "otelcol-fr-otel"
    ocb = (ROOT / "tools" / "ocb" / "go.mod").read_text()
    assert re.search(rf"go\.opentelemetry\.io/collector/cmd/builder v{re.escape(release)}\b", ocb)
    # replaces pin transitive modules only, never a component
    for line in BUILDER_MANIFEST.get("replaces") or []:
        target = line.split("=>")[0].strip()
        assert target.startswith("github.com/aws/aws-sdk-go-v2/"), line


def test_compose_runs_the_releases_the_tests_build() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    assert compose["services"]["collector"]["image"] == COMPONENTS["image"]
    jaeger_mod = (ROOT / "tools" / "jaeger" / "go.mod").read_text()
    version = re.search(r"github\.com/jaegertracing/jaeger v(\S+)", jaeger_mod)
    assert version, "tools/jaeger/go.mod does not pin github.com/jaegertracing/jaeger"
    image = f"jaegertracing/jaeger:{JAEGER_IMAGE_OF['v' + version[1]]}"
    assert compose["services"]["jaeger"]["image"] == image
