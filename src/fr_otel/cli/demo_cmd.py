"""``fr-otel demo``: a real gloo job with an injected fault, imported and queried."""

from __future__ import annotations

import click


@click.command("demo")
def demo() -> int:
    """Run a small real gloo job with an injected desync and show what fr-otel sees."""
    raise click.ClickException("the demo is not built yet")
