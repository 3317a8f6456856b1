"""`personagap` command line: a thin layer over :mod:`personagap.api`."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import click

from personagap._cli_base import DEMO_STEPS, cli, run_or_exit

# Each stage registers its commands and demo step on import. Order = order in `personagap demo`.
COMMAND_MODULES = ("extraction", "relevance", "response", "train", "labels", "plan", "optimize", "dashboard")
for _name in COMMAND_MODULES:
    importlib.import_module(f"personagap.commands.{_name}")


@cli.command()
@click.option("--db", type=click.Path(dir_okay=False), default=None,
              help="Where to write the demo database [default: a fresh file in a temporary folder].")
def demo(db: str | None) -> None:
    """Run the whole job offline on built-in SAMPLE data (not human judgments), stage by stage."""
    workdir = Path(tempfile.mkdtemp(prefix="personagap-demo-"))
    db_path = Path(db) if db else workdir / "demo.duckdb"
    if db_path.exists():
        db_path.unlink()
    click.echo("PersonaGap demo on SAMPLE data written for this project (not human judgments, no LLM calls).")
    for step in DEMO_STEPS:
        click.echo(f"\n=== {step.title} ===\n")
        click.echo(run_or_exit(lambda step=step: step.run(workdir, db_path)))  # type: ignore[misc]
    click.echo(f"\nDemo database: {db_path}\nReal data: personagap import recenter PATH --db FILE")


def main() -> None:
    """Console-script entry point."""
    cli()
