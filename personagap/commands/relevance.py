"""Stage 2 commands: import recenter, report relevance."""

from __future__ import annotations

import json
from pathlib import Path

import click

from personagap import api
from personagap._cli_base import db_option, demo_step, import_group, report_group, run_or_exit
from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
from personagap.stages.relevance import render_relevance


@import_group.command("recenter")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@db_option
def import_recenter(path: str, db: str) -> None:
    """Import a Re-Centering release folder (stage2/ and/or pilot/, laid out as shared/data/recenter).

    Validates every file first; on any malformed row it names file, line and field and writes nothing.
    Re-importing the same files is idempotent.
    """
    click.echo(run_or_exit(lambda: api.import_recenter(path, db)).render())


@report_group.command("relevance")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of tables.")
@click.option("--resamples", type=click.IntRange(min=10), default=DEFAULT_RESAMPLES, show_default=True,
              help="Bootstrap resamples (whole users are resampled) for every 95% CI.")
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Bootstrap seed.")
def report_relevance(db: str, as_json: bool, resamples: int, seed: int) -> None:
    """Stage 2: per judge, kappa vs the human majority with CI, over-selection, precision/recall/F1;
    then the pilot's human-human, LLM-LLM and human-LLM agreement."""
    result = run_or_exit(lambda: api.report_relevance(db, n_resamples=resamples, seed=seed))
    click.echo(json.dumps(result.to_json_dict(), indent=2) if as_json else render_relevance(result))


@demo_step("Stage 2 — relevance selection")
def demo_relevance(workdir: Path, db: Path) -> str:
    """Import the sample Re-Centering-format release and report stage 2."""
    from personagap.sample_data import write_sample_release

    release = write_sample_release(workdir / "sample_recenter")
    summary = api.import_recenter(release, db)
    return summary.render() + "\n\n" + render_relevance(api.report_relevance(db))
