"""deploy/: the Grafana dashboards regenerate identically and name only what fr_otel emits,
the data sources they use are provisioned, and the compose file references only files that
exist, with every image pinned.

Nothing here runs Docker or Grafana: the checks are static, plus DuckDB running the
archive dashboard's SQL over a one-row archive written by fr_otel's own writer.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb
import pyarrow as pa
import pytest
import yaml

from fr_otel.archive.rows import write_rows
from fr_otel.otel import model
from fr_otel.schema import RECORD_SCHEMA
from tests.collector_configs import with_defaults

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
GRAFANA = DEPLOY / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "datasources.yaml"
PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "dashboards.yaml"
COMPOSE = DEPLOY / "compose.yaml"
COLLECTOR_LOCAL = ROOT / "collector-config" / "local.yaml"

DUCKDB_TYPE = "motherduck-duckdb-datasource"

# --- what fr_otel emits, straight from the span model -------------------------------------

SPAN_ATTRIBUTES = frozenset(model.SPAN_ATTRIBUTES)
RESOURCE_ATTRIBUTES = frozenset(key for key, _ in model.resource_attributes("job", 0))


def prom_label(attribute: str) -> str:
    """The Prometheus translation of an attribute name (the Collector's exporter)."""
    return attribute.replace(".", "_")


# The spanmetrics connector (namespace traces.span.metrics) as Prometheus sees it: its own
# labels besides the attributes it copies, and its series.
SPANMETRICS_OWN_LABELS = frozenset({"span_name", "span_kind", "status_code", "le"})
PROM_LABELS = SPANMETRICS_OWN_LABELS | {
    prom_label(a) for a in SPAN_ATTRIBUTES | RESOURCE_ATTRIBUTES
}
SPAN_METRICS = frozenset(
    {
        "traces_span_metrics_calls_total",
        "traces_span_metrics_duration_milliseconds_bucket",
        "traces_span_metrics_duration_milliseconds_sum",
        "traces_span_metrics_duration_milliseconds_count",
    }
)
# the incident count (fr_otel.otel.incident), a monotonic sum: the exporter adds _total
INCIDENTS_METRIC = prom_label(model.INCIDENTS_METRIC) + "_total"
PROM_METRICS = SPAN_METRICS | {INCIDENTS_METRIC}

# --- the name checkers ------------------------------------------------------------------

_TRACEQL_TOKEN = re.compile(
    r'(?P<string>"(?:[^"\\]|\\.)*")'
    r"|\b(?P<scope>span|resource|event|link|instrumentation)"
    r'\.(?P<name>"(?:[^"\\]|\\.)*"|[A-Za-z_][\w.]*)'
    r"|(?<![\w.])\.(?P<bare>[A-Za-z_][\w.]*)"
)


def traceql_problems(query: str) -> list[str]:
    """Attribute names in a TraceQL query that fr_otel never emits in that scope.

    ``span.X`` must be a span attribute and ``resource.X`` a resource attribute of the
    span model; other scopes and unscoped ``.X`` (span or resource: ambiguous) are
    refused. String literals are skipped.
    """
    problems = []
    for match in _TRACEQL_TOKEN.finditer(query):
        if match["string"]:
            continue
        if match["bare"]:
            problems.append(f"unscoped attribute .{match['bare']}")
            continue
        scope, name = match["scope"], match["name"].strip('"')
        allowed = {"span": SPAN_ATTRIBUTES, "resource": RESOURCE_ATTRIBUTES}.get(scope)
        if allowed is None or name not in allowed:
            problems.append(f"{scope}.{name}")
    return problems


_PROM_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def promql_names(expr: str, legend: str = "") -> tuple[set[str], set[str]]:
    """(labels, metrics) a PromQL expression and its legend format name."""
    text = _PROM_STRING.sub('""', expr)
    labels: set[str] = set()
    metrics: set[str] = set()
    for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", text):
        labels |= {name.strip() for name in group.split(",") if name.strip()}
    for matchers in re.findall(r"\{([^{}]*)\}", text):
        labels |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", matchers))
    for metric, name in re.findall(r"label_values\(\s*([\w:]+)\s*,\s*([\w]+)\s*\)", text):
        metrics.add(metric)
        labels.add(name)
    metrics |= set(re.findall(r"([A-Za-z_:][\w:]*)\s*(?=\{|\[)", text))
    labels |= set(re.findall(r"\{\{\s*([A-Za-z_]\w*)\s*\}\}", legend))
    return labels, metrics


def promql_problems(expr: str, legend: str = "") -> list[str]:
    """Label and metric names in a PromQL expression (and its legend) that the span
    metrics of fr_otel's spans do not have."""
    labels, metrics = promql_names(expr, legend)
    return sorted(
        [f"label {name}" for name in labels - PROM_LABELS]
        + [f"metric {name}" for name in metrics - PROM_METRICS]
    )


_GRAFANA_VARIABLE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)")


def interpolate_sql(sql: str, values: dict[str, str]) -> str:
    """Grafana's variable interpolation for the DuckDB data source, for the formats the
    dashboards may use: ``${v:raw}`` as is, ``${v:sqlstring}`` as a quoted SQL string.
    Anything else is refused: the plugin's default format quotes, so a format must be
    explicit."""

    def replace(match: re.Match[str]) -> str:
        name, fmt = match[1], match[2]
        if name is None or fmt not in ("raw", "sqlstring"):
            raise ValueError(f"give {match[0]} an explicit :raw or :sqlstring format")
        value = values[name]
        return value if fmt == "raw" else "'" + value.replace("'", "''") + "'"

    return _GRAFANA_VARIABLE.sub(replace, sql)


def sql_problems(sql: str, archive: Path, values: dict[str, str]) -> list[str]:
    """Run the SQL on DuckDB over ``archive``: a column the archive lacks fails binding."""
    try:
        duckdb.sql(interpolate_sql(sql, {"archive": str(archive), **values})).fetchall()
    except (duckdb.Error, ValueError) as error:
        return [str(error).splitlines()[0]]
    return []


# --- reading the dashboards -------------------------------------------------------------


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in board.get("panels", []):
        found.append(panel)
        found.extend(panel.get("panels", []))  # a collapsed row's panels
    return found


def queries(board: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(where, data source type, query) for every panel target and query variable."""
    found = []
    for panel in panels(board):
        for target in panel.get("targets", []):
            kind = (target.get("datasource") or panel.get("datasource") or {}).get("type")
            found.append((f"panel {panel.get('title')!r}", kind, target))
    for variable in board["templating"].get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            query = query if isinstance(query, dict) else {"query": query}
            found.append((f"variable {variable['name']}", variable["datasource"]["type"], query))
    return found


@pytest.fixture(scope="module")
def tiny_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One entry that never completed, written by fr_otel's archive writer."""
    root = tmp_path_factory.mktemp("archive")
    row: dict[str, Any] = dict.fromkeys(RECORD_SCHEMA.names)
    row.update(
        job="train",
        incident="2026-11-29",  # looks like a date: hive partitioning must keep a string
        rank=3,
        pg_name="0",
        pg_desc="default_pg",
        pg_ranks=[0, 1, 2, 3],
        pg_ranks_inferred=False,
        record_id=7,
        collective_seq_id=12,
        backend="nccl",
        op="all_reduce",
        state="scheduled",
        is_p2p=False,
        timeout_ms=600_000,
        dump_time_ns=1_764_400_000_000_000_000,
        call_site="/job/train.py:21 in train_step",
        source_format="simulator",
    )
    write_rows(pa.Table.from_pylist([row], schema=RECORD_SCHEMA), root)
    return root


ARCHIVE_VALUES = {"job": "train", "incident": "2026-11-29"}


# --- the generator (needs grafana-foundation-sdk, Python >= 3.11) ----------------------


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    pytest.importorskip("grafana_foundation_sdk")
    spec = importlib.util.spec_from_file_location(
        "fr_otel_deploy_generate", GRAFANA / "generate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_three_dashboards_are_checked_in() -> None:
    assert [p.name for p in DASHBOARDS] == ["archive.json", "incident.json", "job-overview.json"]


def test_generated_files_regenerate_identically(generator: ModuleType, tmp_path: Path) -> None:
    written = generator.generate(tmp_path)
    relative = sorted(str(p.relative_to(tmp_path)) for p in written)
    assert relative == sorted(
        [*(f"dashboards/{p.name}" for p in DASHBOARDS), str(DATASOURCES.relative_to(GRAFANA))]
    )
    stale = [r for r in relative if (tmp_path / r).read_bytes() != (GRAFANA / r).read_bytes()]
    assert stale == [], "run `python deploy/grafana/generate.py` and commit the result"
    again = generator.render()
    assert all((tmp_path / r).read_text() == text for r, text in again.items())


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_json_is_stable(path: Path) -> None:
    text = path.read_text()
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"


def test_generator_refuses_names_the_span_model_lacks(generator: ModuleType) -> None:
    assert generator.span(model.OP) == f"span.{model.OP}"
    assert generator.label(model.PG_DESC) == prom_label(model.PG_DESC)
    for helper, name in (
        (generator.span, "fr_otel.made_up"),
        (generator.span, model.JOB),  # a resource attribute, not a span attribute
        (generator.resource, model.INCIDENT),
        (generator.label, "fr_otel.made_up"),
        (generator.col, "made_up"),
    ):
        with pytest.raises(ValueError):
            helper(name)


# --- every name a query uses is one fr_otel emits -----------------------------------------


def test_the_checkers_reject_made_up_names(tiny_archive: Path) -> None:
    assert traceql_problems(f'{{ span.{model.OP} = "all_reduce" }}') == []
    assert traceql_problems('{ span.fr_otel.opp = "all_reduce" }') == ["span.fr_otel.opp"]
    assert traceql_problems(f'{{ resource.{model.INCIDENT} = "x" }}') != []  # wrong scope
    assert traceql_problems(f'{{ .{model.OP} = "x" }}') != []  # unscoped
    assert traceql_problems('{ name = "span.fr_otel.made_up" }') == []  # a string
    op = prom_label(model.OP)
    good = f'sum by ({op}) (rate(traces_span_metrics_calls_total{{status_code="x"}}[5m]))'
    assert promql_problems(good) == []
    assert promql_problems(good.replace(op, "fr_otel_opp")) != []
    assert promql_problems(good, legend="{{fr_otel_made_up}}") != []
    assert promql_problems(good.replace("calls_total", "calls")) != []
    source = "read_parquet('${archive:raw}/**/*.parquet', hive_partitioning = true)"
    assert sql_problems(f"SELECT rank FROM {source}", tiny_archive, ARCHIVE_VALUES) == []
    assert sql_problems(f"SELECT made_up FROM {source}", tiny_archive, ARCHIVE_VALUES) != []
    assert sql_problems(f"SELECT rank FROM {source} WHERE job = '$job'", tiny_archive, {}) != []


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_names_only_what_fr_otel_emits(path: Path, tiny_archive: Path) -> None:
    problems = []
    board = load(path)
    found = queries(board)
    assert found, "a dashboard without queries"
    for where, kind, query in found:
        if kind == "prometheus":
            issues = promql_problems(query.get("expr", query.get("query", "")))
            issues += promql_problems("", query.get("legendFormat", ""))
        elif kind == "tempo":
            issues = traceql_problems(query.get("query") or query.get("label") or "")
        elif kind == DUCKDB_TYPE:
            sql = query.get("rawSql", query.get("query", ""))
            issues = sql_problems(sql, tiny_archive, ARCHIVE_VALUES)
        else:
            issues = [f"no checker for data source type {kind!r}"]
        problems += [f"{where}: {issue}" for issue in issues]
    assert problems == []


def test_archive_queries_find_the_entry(tiny_archive: Path) -> None:
    """The archive dashboard's SQL runs on DuckDB and its filters match real values."""
    for where, _, query in queries(load(GRAFANA / "dashboards" / "archive.json")):
        sql = interpolate_sql(
            query.get("rawSql", query.get("query", "")),
            {"archive": str(tiny_archive), **ARCHIVE_VALUES},
        )
        assert duckdb.sql(sql).fetchall(), where


def test_the_incident_dashboard_asks_tempo_what_the_issue_asks() -> None:
    targets = {
        panel["title"]: panel["targets"][0]["query"]
        for panel in panels(load(GRAFANA / "dashboards" / "incident.json"))
        if panel.get("datasource", {}).get("type") == "tempo"
    }
    collectives = targets["Collectives of the incident"]
    assert f'span.{model.INCIDENT} = "$incident"' in collectives
    verdicts = targets["Verdicts"]
    assert f'name = "{model.VERDICT_SPAN_NAME}"' in verdicts
    assert f"span.{model.FINDING_CULPRIT_RANKS}" in verdicts
    missing = next(q for title, q in targets.items() if "missing ranks" in title)
    assert f"span.{model.PG_SIZE} = $pg_size" in missing
    assert missing.endswith("| count() < $pg_size")


# --- dashboards as Grafana needs them -----------------------------------------------------


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_has_what_grafana_requires(path: Path) -> None:
    board = load(path)
    assert board["title"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{8,40}", board["uid"])
    assert isinstance(board["schemaVersion"], int)
    assert "fr_otel" in board["tags"]
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids)) > 0
    for panel in panels(board):
        assert panel["type"] and panel["title"]
        grid = panel["gridPos"]
        assert 1 <= grid["w"] <= 24 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        if panel["type"] in ("text", "row"):
            continue
        assert panel["datasource"]["type"] and panel["datasource"]["uid"], panel["title"]
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
    names = [variable["name"] for variable in board["templating"]["list"]]
    assert len(names) == len(set(names))


def test_dashboard_uids_are_unique() -> None:
    uids = [load(path)["uid"] for path in DASHBOARDS]
    assert len(uids) == len(set(uids))


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_round_trips_through_the_sdk_model(generator: ModuleType, path: Path) -> None:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.runtime import UnknownDataquery
    from grafana_foundation_sdk.models.dashboard import Dashboard

    generator.register_sdk_variants()
    board = Dashboard.from_json(load(path))
    assert json.loads(json.dumps(board, cls=JSONEncoder)) == load(path)
    for panel in board.panels or []:
        for target in getattr(panel, "targets", None) or []:
            assert not isinstance(target, UnknownDataquery), panel.title


# --- data sources -------------------------------------------------------------------------


def provisioned() -> dict[str, dict[str, Any]]:
    return {ds["uid"]: ds for ds in yaml.safe_load(DATASOURCES.read_text())["datasources"]}


def test_every_data_source_the_dashboards_use_is_provisioned() -> None:
    sources = provisioned()
    for path in DASHBOARDS:
        board = load(path)
        refs = [p["datasource"] for p in panels(board) if p.get("datasource")]
        refs += [t["datasource"] for p in panels(board) for t in p.get("targets", [])]
        refs += [v["datasource"] for v in board["templating"]["list"] if v.get("datasource")]
        for ref in refs:
            assert ref["uid"] in sources, f"{path.name}: {ref}"
            assert sources[ref["uid"]]["type"] == ref["type"], f"{path.name}: {ref}"


def test_data_sources_name_only_what_fr_otel_emits() -> None:
    sources = provisioned()
    assert {ds["type"] for ds in sources.values()} >= {"prometheus", "tempo", DUCKDB_TYPE}
    tempo = next(ds for ds in sources.values() if ds["type"] == "tempo")["jsonData"]
    assert tempo["spanBar"]["tag"] in SPAN_ATTRIBUTES | RESOURCE_ATTRIBUTES
    to_metrics = tempo["tracesToMetrics"]
    assert to_metrics["datasourceUid"] in sources
    for tag in to_metrics["tags"]:
        assert tag["key"] in SPAN_ATTRIBUTES | RESOURCE_ATTRIBUTES
        assert tag["value"] == prom_label(tag["key"])
    for query in to_metrics["queries"]:
        assert promql_problems(query["query"]) == []
    duck = next(ds for ds in sources.values() if ds["type"] == DUCKDB_TYPE)
    assert duck["jsonData"]["path"] == ""  # in-memory: the SQL reads the Parquet files


# --- compose ------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


_DEFAULTED = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def resolve(value: str) -> str:
    """Compose interpolation with the defaults (``${VAR:-default}``); none may lack one."""

    def default(match: re.Match[str]) -> str:
        assert match[2] is not None, f"{match[0]} has no default"
        return match[2]

    return _DEFAULTED.sub(default, value)


def mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, target) of every volume, short or long syntax."""
    found = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            found.append((resolve(str(volume["source"])), volume["target"]))
        else:
            source, target = resolve(volume).split(":")[:2]
            found.append((source, target))
    return found


def is_bind(source: str) -> bool:
    return source.startswith((".", "/", "~"))


def test_compose_references_only_files_that_exist() -> None:
    doc = compose()
    named = set(doc.get("volumes") or {})
    missing = []
    for name, service in doc["services"].items():
        for source, _ in mounts(service):
            if is_bind(source):
                if not (DEPLOY / source).resolve().exists():
                    missing.append(f"{name}: {source}")
            else:
                assert source in named, f"{name}: volume {source} is not declared"
    assert missing == []


def test_compose_mounts_the_collector_config() -> None:
    collector = compose()["services"]["collector"]
    sources = [(DEPLOY / s).resolve() for s, _ in mounts(collector) if is_bind(s)]
    assert COLLECTOR_LOCAL.resolve() in sources


def test_compose_pins_every_image() -> None:
    for name, service in compose()["services"].items():
        image = service["image"]
        assert "$" not in image, f"{name}: {image}"
        repository, _, tag = image.partition("@")[0].rpartition(":")
        assert repository and "/" not in tag, f"{name}: {image} has no tag"
        assert "latest" not in tag, f"{name}: {image}"
        assert re.fullmatch(r"v?\d+\.\d+\.\d+(-[a-z]+)?", tag), f"{name}: {image}"


def test_compose_dependencies_exist() -> None:
    services = compose()["services"]
    for name, service in services.items():
        depends = service.get("depends_on") or []
        for dependency in depends if isinstance(depends, list) else list(depends):
            assert dependency in services, f"{name} depends on unknown {dependency}"


def test_compose_host_ports_do_not_collide() -> None:
    seen: dict[str, str] = {}
    for name, service in compose()["services"].items():
        for port in service.get("ports", []):
            parts = str(port).split("/")[0].split(":")
            if len(parts) < 2:
                continue  # container port only: a random host port
            host = ":".join(parts[:-1])
            assert host not in seen, f"{name} and {seen[host]} both publish {host}"
            seen[host] = name


def test_grafana_sees_the_provisioning_dashboards_and_archive() -> None:
    grafana = compose()["services"]["grafana"]
    targets = {(DEPLOY / s).resolve(): t for s, t in mounts(grafana) if is_bind(s)}
    assert targets[(GRAFANA / "provisioning").resolve()] == "/etc/grafana/provisioning"
    providers = yaml.safe_load(PROVIDERS.read_text())["providers"]
    assert [p["options"]["path"] for p in providers] == [targets[(GRAFANA / "dashboards")]]
    archive_variable = next(
        v
        for v in load(GRAFANA / "dashboards" / "archive.json")["templating"]["list"]
        if v["name"] == "archive"
    )
    assert archive_variable["query"] in targets.values()


def test_grafana_can_load_the_duckdb_plugin() -> None:
    grafana = compose()["services"]["grafana"]
    environment = grafana["environment"]
    # an unsigned plugin, loaded only when named; glibc only: not the Alpine image
    assert DUCKDB_TYPE in environment["GF_PLUGINS_ALLOW_LOADING_UNSIGNED_PLUGINS"].split(",")
    plugin, version, url = environment["GF_PLUGINS_PREINSTALL_SYNC"].split("@", 2)
    assert plugin == DUCKDB_TYPE
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert url.startswith("https://") and url.endswith(f"{plugin}-{version}.zip")
    assert grafana["image"].endswith("-ubuntu")


def test_tempo_and_prometheus_configs() -> None:
    services = compose()["services"]
    tempo = yaml.safe_load((DEPLOY / "tempo" / "tempo.yaml").read_text())
    # one trace per collective: room for 10,000 ranks' spans
    assert tempo["overrides"]["defaults"]["global"]["max_bytes_per_trace"] >= 10_000_000
    for protocol in tempo["distributor"]["receivers"]["otlp"]["protocols"].values():
        assert protocol["endpoint"].startswith("0.0.0.0:")
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = [
        target
        for job in prometheus["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    ]
    # the span metrics and incident counter (:8889), the Collector's own telemetry (:8888)
    assert targets == ["collector:8889", "collector:8888"]
    assert {target.split(":")[0] for target in targets} <= set(services)


# --- the Collector config the compose file mounts (written beside deploy/) ----------------


def _collector_local() -> dict[str, Any]:
    if not COLLECTOR_LOCAL.exists():
        pytest.skip("collector-config/local.yaml is not there yet")
    # as the Collector reads it with no variable set: each ${env:VAR:-default} its default
    loaded: dict[str, Any] = with_defaults(yaml.safe_load(COLLECTOR_LOCAL.read_text()))
    return loaded


def _components(config: dict[str, Any], section: str, kind: str) -> list[dict[str, Any]]:
    return [
        body or {}
        for name, body in (config.get(section) or {}).items()
        if name.split("/")[0] == kind
    ]


def test_collector_span_metrics_have_the_labels_the_dashboards_query() -> None:
    config = _collector_local()
    connectors = [
        *_components(config, "connectors", "spanmetrics"),
        *_components(config, "connectors", "span_metrics"),
    ]
    assert connectors, "no spanmetrics connector"
    used: set[str] = set()
    for path in DASHBOARDS:
        for _, kind, query in queries(load(path)):
            if kind == "prometheus":
                expr = query.get("expr", query.get("query", ""))
                labels, metrics = promql_names(expr, query.get("legendFormat", ""))
                if metrics & SPAN_METRICS:
                    used |= labels
    for connector in connectors:
        assert connector.get("namespace", "traces.span.metrics") == "traces.span.metrics"
        dimensions = {d["name"] for d in connector.get("dimensions", [])}
        produced = {prom_label(d) for d in dimensions} | SPANMETRICS_OWN_LABELS
        produced.add(prom_label(model.SERVICE_NAME))
        assert used <= produced, sorted(used - produced)


def test_the_incident_panel_asks_for_labels_the_count_has() -> None:
    from fr_otel.otel.incident import IncidentEvent, point_attributes

    event = IncidentEvent(
        job="j", incident="i", kind="hang", summary="", time_ns=1, resource=(), culprit_ranks=(3,)
    )
    has = {prom_label(a.key) for a in point_attributes(event)}
    used: set[str] = set()
    for path in DASHBOARDS:
        for _, kind, query in queries(load(path)):
            labels, metrics = (
                promql_names(query.get("expr", "")) if kind == "prometheus" else (set(), set())
            )
            if INCIDENTS_METRIC in metrics:
                used |= labels
    assert used and used <= has, sorted(used - has)


def test_collector_exports_what_compose_wires() -> None:
    config = _collector_local()
    services = compose()["services"]
    endpoints = [
        str(body.get("endpoint", "")) for body in _components(config, "exporters", "prometheus")
    ]
    assert any(e.endswith(":8889") for e in endpoints), endpoints
    collector_targets = [t for _, t in mounts(services["collector"])]
    for file_exporter in _components(config, "exporters", "file"):
        path = str(file_exporter["path"])
        assert any(path.startswith(t.rstrip("/") + "/") for t in collector_targets), path
