"""Placeholder until the simulator's CLI lands (helper-1 replaces this file)."""

import click


@click.command("simulate")
def simulate() -> None:
    """Not built yet."""
