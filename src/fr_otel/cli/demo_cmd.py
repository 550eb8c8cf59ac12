"""``fr-otel demo``: a real gloo job with an injected fault, imported and queried."""

from __future__ import annotations

import io
import shutil
import time
from pathlib import Path

import click

from fr_otel.cli._errors import EXIT_BAD_INPUT, EXIT_OK

DEMO_SCENARIO = "skipped_collective"

# The last collectives each rank issued, per group: the rank that skipped one is a
# sequence number behind its peers, and its ops no longer line up with theirs.
DEMO_QUERY = """\
SELECT pg_desc AS "group", rank,
       max(collective_seq_id) AS last_seq,
       list(op || '#' || collective_seq_id ORDER BY record_id)[-3:] AS last_three
FROM read_parquet('{archive}/**/*.parquet', hive_partitioning = true)
GROUP BY ALL
ORDER BY "group", rank"""


@click.command("demo")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("demo-out"),
    show_default=True,
    help="Folder for the dumps and the archive (replaced on each run).",
)
@click.option("--world", type=click.IntRange(2, 8), default=4, show_default=True, help="Ranks.")
def demo(out: Path, world: int) -> int:
    """Run a small real gloo job with an injected desync and show what fr-otel sees.

    Starts WORLD processes with torch.distributed on the gloo backend (CPU, no GPU or
    collector needed). One rank skips a collective; every rank dumps its Flight
    Recorder buffer; the dumps are imported into OUT/archive, analysed, and queried
    with DuckDB.
    """
    try:
        from fr_otel.demo.gloo_job import run_scenario
        from fr_otel.demo.scenarios import SCENARIOS
    except ImportError as exc:  # torch is an optional dependency
        raise click.ClickException(
            f"the demo runs a real torch.distributed job and needs torch ({exc});"
            " install it with: pip install 'fr-otel[torch]'"
        ) from None
    import duckdb

    from fr_otel.analysis import analyze
    from fr_otel.archive import import_dumps
    from fr_otel.cli.analyze_cmd import render_text

    scenario = SCENARIOS[DEMO_SCENARIO]
    shutil.rmtree(out, ignore_errors=True)
    dumps, archive = out / "dumps", out / "archive"
    click.echo(f"1. Running a real {world}-rank gloo job: {scenario.description}")
    start = time.perf_counter()
    files = run_scenario(DEMO_SCENARIO, dumps, world=world)
    click.echo(f"   {len(files)} dump files in {dumps} ({time.perf_counter() - start:.1f}s)")

    click.echo(f"2. fr-otel import {dumps} --archive {archive} --job demo")
    report = import_dumps([dumps], archive=archive, job="demo")
    for problem in report.problems:
        click.echo(f"   {problem}", err=True)
    click.echo(f"   {report.summary()}")

    click.echo(f"3. fr-otel analyze {archive}")
    analysis = analyze(archive)
    buffer = io.StringIO()
    render_text(analysis, buffer)
    click.echo("\n".join("   " + line for line in buffer.getvalue().splitlines()))

    query = DEMO_QUERY.format(archive=archive.as_posix())
    click.echo("4. The same evidence in plain SQL: where did each rank stop? (DuckDB)")
    click.echo("\n".join("   " + line for line in query.splitlines()))
    with duckdb.connect() as connection:
        click.echo(str(connection.sql(query)))
    culprits = ", ".join(map(str, scenario.culprit_ranks)) or "none"
    named = analysis.findings[analysis.root_cause or 0].culprit_ranks if analysis.findings else []
    verdict = "named it" if sorted(named) == sorted(scenario.culprit_ranks) else "did NOT name it"
    click.echo(f"The injected fault was on rank {culprits}; fr-otel analyze {verdict}.")
    return EXIT_OK if report.ok else EXIT_BAD_INPUT
