"""`personagap` command line: a thin layer over :mod:`personagap.api`."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from personagap import __version__, api
from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
from personagap.human_data import DataError
from personagap.stages.relevance import render_relevance
from personagap.store import DEFAULT_DB, StoreError

T = TypeVar("T")

db_option = click.option("--db", type=click.Path(dir_okay=False), default=DEFAULT_DB, show_default=True,
                         help="DuckDB file to read/write (created on first import).")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="personagap")
def cli() -> None:
    """PersonaGap: which stage of your LLM personalization pipeline fails, and do your LLM judges agree
    with real humans?

    \b
    Typical session:
      personagap import recenter ../shared/data/recenter     # human + LLM labels into personagap.duckdb
      personagap report relevance                            # stage 2: judges vs humans, with 95% CIs
      personagap demo                                        # everything offline on built-in sample data
    """


@cli.group(name="import")
def import_() -> None:
    """Import a public human-label release into the DuckDB store (one transaction per import)."""


@import_.command("recenter")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@db_option
def import_recenter(path: str, db: str) -> None:
    """Import a Re-Centering release folder (stage2/ and/or pilot/, as in shared/data/recenter).

    Validates every file first; on any malformed row it names file, line and field and writes nothing.
    Re-importing the same files is idempotent.
    """
    click.echo(_run(lambda: api.import_recenter(path, db)).render())


@cli.group()
def report() -> None:
    """Print a stage's comparison of judges with humans."""


@report.command("relevance")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of tables.")
@click.option("--resamples", type=click.IntRange(min=10), default=DEFAULT_RESAMPLES, show_default=True,
              help="Bootstrap resamples (whole users are resampled) for every 95% CI.")
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Bootstrap seed.")
def report_relevance(db: str, as_json: bool, resamples: int, seed: int) -> None:
    """Stage 2: per judge, kappa vs the human majority with CI, over-selection, precision/recall/F1;
    then the pilot's human-human, LLM-LLM and human-LLM agreement."""
    result = _run(lambda: api.report_relevance(db, n_resamples=resamples, seed=seed))
    click.echo(json.dumps(result.to_json_dict(), indent=2) if as_json else render_relevance(result))


@cli.command()
@click.option("--db", type=click.Path(dir_okay=False), default=None,
              help="Where to write the demo database [default: a fresh file in a temporary folder].")
def demo(db: str | None) -> None:
    """Run the whole job offline on built-in SAMPLE data (not human judgments): import, then report."""
    from personagap.sample_data import write_sample_release

    workdir = Path(tempfile.mkdtemp(prefix="personagap-demo-"))
    db_path = Path(db) if db else workdir / "demo.duckdb"
    if db_path.exists():
        db_path.unlink()
    release = write_sample_release(workdir / "sample_release")
    click.echo("PersonaGap demo on SAMPLE data written for this project (not human judgments).\n")
    click.echo(_run(lambda: api.import_recenter(release, db_path)).render() + "\n")
    click.echo(render_relevance(_run(lambda: api.report_relevance(db_path))))
    click.echo(f"\nDemo database: {db_path}\nPoint it at real data: personagap import recenter PATH --db FILE")


def _run(action: Callable[[], T]) -> T:
    try:
        return action()
    except (DataError, StoreError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


def main() -> None:
    """Console-script entry point."""
    cli()

