"""`personagap` command line: a thin layer over :mod:`personagap.api`."""

from __future__ import annotations

import importlib
import sys
import tempfile
from pathlib import Path

import click

from personagap._cli_base import DEMO_STEPS, cli, run_or_exit

# Each stage registers its commands and demo step on import. Order = order in `personagap demo`.
COMMAND_MODULES = ("extraction", "relevance", "response", "train", "labels", "plan", "optimize", "route", "jury",
                   "dashboard")
for _name in COMMAND_MODULES:
    importlib.import_module(f"personagap.commands.{_name}")


DEMO_META_KEY = "demo"
"""Meta key marking a database `personagap demo` wrote (value '1'): only such a file is ever replaced."""


def _is_demo_db(path: Path) -> bool:
    """True when ``path`` is a PersonaGap database that `personagap demo` wrote."""
    from personagap.store.dataset_reads import file_meta_value

    return file_meta_value(path, DEMO_META_KEY) == [("1",)]


def _mark_demo_db(path: Path) -> None:
    from personagap.store import opened, set_meta

    with opened(path) as con:
        set_meta(con, {DEMO_META_KEY: "1"})


@cli.command()
@click.option("--db", type=click.Path(dir_okay=False), default=None,
              help="Where to write the demo database [default: a fresh file in a temporary folder]. An existing "
                   "file is replaced only if an earlier `personagap demo` wrote it; any other file is refused "
                   "(exit 2) unless --force.")
@click.option("--force", is_flag=True, help="Replace --db even if it is not a demo database (its data is deleted).")
def demo(db: str | None, force: bool) -> None:
    """Run the whole job offline on built-in SAMPLE data (not human judgments), stage by stage.

    Never deletes your data: an existing --db that is not a demo database is refused unless --force.
    """
    workdir = Path(tempfile.mkdtemp(prefix="personagap-demo-"))
    db_path = Path(db) if db else workdir / "demo.duckdb"
    if db_path.exists():
        if db_path.is_dir():
            click.echo(f"error: {db_path}: is a directory; give a database file", err=True)
            sys.exit(2)
        if not force and not _is_demo_db(db_path):
            click.echo(f"error: {db_path}: exists and is not a demo database; the demo would delete it. Choose "
                       "another --db, or add --force to replace it.", err=True)
            sys.exit(2)
        db_path.unlink()
        wal = db_path.with_name(db_path.name + ".wal")
        if wal.exists():
            wal.unlink()
    run_or_exit(lambda: _mark_demo_db(db_path))
    click.echo("PersonaGap demo on SAMPLE data written for this project (not human judgments, no LLM calls).")
    for step in DEMO_STEPS:
        click.echo(f"\n=== {step.title} ===\n")
        click.echo(run_or_exit(lambda step=step: step.run(workdir, db_path)))  # type: ignore[misc]
    click.echo(f"\nDemo database: {db_path}\nReal data: personagap import recenter PATH --db FILE")


def main() -> None:
    """Console-script entry point."""
    cli()
