"""``fr-otel demo``: a real 4-rank gloo job under the recorder, with an injected desync."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import click

from fr_otel import TORCH_EXTRA_HINT
from fr_otel.cli._errors import EXIT_BAD_INPUT, EXIT_OK

DEMO_SCENARIO = "skipped_collective"
DEMO_JOB = "demo"

# Where did each rank stop? The rank that skipped a collective is a sequence number behind
# its peers in default_pg, and its last op is not theirs.
DEMO_QUERY = """\
SELECT pg_desc AS "group", rank,
       max(collective_seq_id) AS last_seq,
       list(op || '#' || collective_seq_id ORDER BY record_id)[-2:] AS last_two,
       arg_max(state, record_id) AS last_state
FROM read_parquet('{archive}/job={job}/*/*.parquet', hive_partitioning = true)
WHERE pg_desc = 'default_pg'
GROUP BY ALL
ORDER BY rank"""


@click.command("demo")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("demo-out"),
    show_default=True,
    help="Folder for the archive and the exported spans (replaced on each run).",
)
@click.option("--world", type=click.IntRange(4, 8), default=4, show_default=True, help="Ranks.")
def demo(out: Path, world: int) -> int:
    """Run a real gloo job under the recorder, let one rank desync, and diagnose it.

    Starts WORLD processes with torch.distributed on the gloo backend (CPU: no GPU and no
    Collector needed), each with fr_otel.install(). Rank 1 skips an all_reduce; its peers
    time out; every rank flushes its recorder buffer into OUT/archive under one incident
    (and over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set). Then the archive is analysed,
    exported as OTLP JSON lines, and queried with DuckDB.
    """
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # torch is an optional dependency
        raise click.ClickException(
            f"the demo runs a real torch.distributed job and needs torch, which is not"
            f" installed: {TORCH_EXTRA_HINT}"
        )
    try:
        from fr_otel.demo.recorded_job import SCENARIOS, run_recorded
    except ImportError as exc:
        raise click.ClickException(
            f"the demo needs torch and numpy ({exc}): {TORCH_EXTRA_HINT}"
        ) from None
    import duckdb

    from fr_otel import config
    from fr_otel.archive.layout import partition_dir
    from fr_otel.cli.analyze_cmd import render_text
    from fr_otel.report.build import build_report
    from fr_otel.report.html import render_html

    scenario = SCENARIOS[DEMO_SCENARIO]
    shutil.rmtree(out, ignore_errors=True)
    archive = (out / "archive").absolute()
    otlp = config.otlp_settings()

    click.echo(f"1. A real {world}-rank gloo job under fr_otel's recorder: {scenario.description}.")
    run = run_recorded(DEMO_SCENARIO, archive, world=world, job=DEMO_JOB)
    click.echo(f"   exit codes {run.returncodes} after {run.elapsed_s:.1f}s")
    incidents = run.incidents()
    if len(incidents) != 1:
        click.echo(f"   expected one incident, found {incidents}; the ranks said:", err=True)
        for rank, log in enumerate(run.logs):
            click.echo(f"--- rank {rank}\n{log[-1500:]}", err=True)
        return EXIT_BAD_INPUT
    incident = incidents[0]

    folder = partition_dir(archive, DEMO_JOB, incident)
    manifest = json.loads((folder / "_incident.json").read_text())
    click.echo(f"2. Archived: incident {incident} in {folder}")
    click.echo(
        f"   ranks {manifest['ranks']} (missing: {manifest['missing_ranks'] or 'none'});"
        f" groups {', '.join(g['desc'] or g['name'] for g in manifest['groups'])}"
    )
    if run.late_flushes:
        click.echo(f"   rings of ranks {run.late_flushes} were flushed by the launcher")
    if otlp is not None:
        spooled = list((archive / "_spool").glob("*.otlp"))
        click.echo(
            f"   spans sent by every rank to {otlp.endpoint}"
            + (f"; {len(spooled)} requests spooled in {archive / '_spool'}" if spooled else "")
        )

    spans_file = out / "spans.jsonl"
    from fr_otel.cli import main as cli_main

    click.echo(f"3. fr-otel export {archive} --otlp-json {spans_file}")
    cli_main(["export", str(archive), "--otlp-json", str(spans_file)])
    lines = spans_file.read_text().splitlines() if spans_file.exists() else []
    spans = sum(
        len(scope.get("spans", []))
        for line in lines
        for resource in json.loads(line).get("resourceSpans", [])
        for scope in resource.get("scopeSpans", [])
    )
    click.echo(f"   {spans} spans, one trace per collective across ranks (OTLP JSON lines)")

    click.echo(f"4. fr-otel analyze {archive}")
    # one analysis for the text and the page
    built = build_report(archive, job=DEMO_JOB, incident=incident)
    analysis = built.analysis
    buffer = io.StringIO()
    render_text(analysis, buffer)
    click.echo("\n".join("   " + line for line in buffer.getvalue().splitlines()))
    report = out / "report.html"
    click.echo(f"   fr-otel analyze {archive} --format html -o {report}")
    report.write_text(render_html(built), encoding="utf-8")
    click.echo(f"   open {report.absolute()} in a browser: the verdict and the cross-rank grid")

    query = DEMO_QUERY.format(archive=archive.as_posix(), job=DEMO_JOB)
    click.echo("5. The same evidence in plain SQL: where did each rank stop? (DuckDB)")
    click.echo("\n".join("   " + line for line in query.splitlines()))
    with duckdb.connect() as connection:
        click.echo(str(connection.sql(query)))

    named = analysis.findings[analysis.root_cause].culprit_ranks if analysis.root_cause else []
    if analysis.root_cause == 0 and analysis.findings:
        named = analysis.findings[0].culprit_ranks
    verdict = "named it" if named == [scenario.culprit] else "did NOT name it"
    click.echo(f"The injected fault was on rank {scenario.culprit}; fr-otel analyze {verdict}.")
    return EXIT_OK if named == [scenario.culprit] else EXIT_BAD_INPUT
