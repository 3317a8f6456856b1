"""Stage 2 commands: import recenter, report relevance."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from personagap._cli_base import (
    LazyModule,
    RunSettings,
    db_option,
    demo_step,
    echo_judge_run,
    import_group,
    judge_group,
    llm_judge_options,
    refuse_repeats,
    report_group,
    require_lm,
    run_or_exit,
    target_options,
    weight_option,
    with_confidence,
)
from personagap.commands.optimize import judge_program, program_option

if TYPE_CHECKING:
    from personagap import api
    from personagap.analysis.weighting import Weight
    from personagap.judges.runner import LMConfig
    from personagap.stages import relevance as stage2
else:
    api = LazyModule("personagap.api")
    stage2 = LazyModule("personagap.stages.relevance")


@import_group.command("recenter")
@click.argument("path", type=click.Path())
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
@target_options
@weight_option
def report_relevance(db: str, as_json: bool, target_accuracy: float | None,
                     target_kappa: float | None, weight: Weight) -> None:
    """Stage 2: every judge vs the blind human majority, then the pilot's rater agreement.

    Per judge: kappa with 95% CI (and the users it rests on), over-selection, yes-rates, precision/recall/F1,
    failures by reason; then the pilot's mean pairwise kappa per rater group (humans, LLMs, trained models and
    baselines kept apart), Krippendorff's alpha and Fleiss' kappa from blind labels, and the same figures for
    labels given after seeing an LLM's label, reported apart as anchored. Majority: the unique most frequent
    label; a tie is undecided. For judges that state a confidence: calibration and agreement at each confidence.
    """
    result = run_or_exit(lambda: api.report_relevance(db, weight=weight))
    click.echo(with_confidence(db, "relevance", result, as_json, stage2.render_relevance, target_accuracy,
                               target_kappa))


@demo_step("Stage 2 — relevance selection")
def demo_relevance(workdir: Path, db: Path) -> str:
    """Import the sample Re-Centering-format release and report stage 2."""
    from personagap.sample_data import write_sample_release

    release = write_sample_release(workdir / "sample_recenter")
    summary = api.import_recenter(release, db)
    return summary.render() + "\n\n" + stage2.render_relevance(api.report_relevance(db))


@judge_group.command("relevance")
@click.option("--judge", "judge_name",
              type=click.Choice(["relevance-per-attribute", "relevance-batched", "trained"]),
              default="relevance-per-attribute", show_default=True,
              help="Per attribute: one YES/NO call per (user, prompt, attribute), the study's protocol. "
                   "Batched: one call per (user, prompt) returning the relevant subset. "
                   "Trained: an offline model from `personagap train relevance` (needs --model-path, no LLM).")
@click.option("--model-path", type=click.Path(dir_okay=False), default=None,
              help="With --judge trained: the saved model (its MODEL.json sidecar must sit beside it).")
@click.option("--dataset", "datasets", multiple=True, default=("recenter-stage2",), show_default=True,
              help="Which imported dataset's items to judge (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Judge only the first N calls.")
@program_option
@llm_judge_options()
@db_option
def judge_relevance(judge_name: str, model_path: str | None, datasets: tuple[str, ...], limit: int | None,
                    program: str | None, lm: LMConfig | None, run: RunSettings, db: str) -> None:
    """Stage 2: ask an LLM which attributes matter for each imported prompt; store its labels as a judge.

    Results are written as they arrive and cached in the database: rerunning the same command resumes a
    killed run and sends requests only for items that are missing or failed. Compare with humans afterwards:
    personagap report relevance.
    """
    if program is not None:
        refuse_repeats(run, "a --program run")
        judge_program("relevance", judge_name, db, program, lm, run, limit=limit, datasets=datasets)
        return
    if judge_name == "trained":
        refuse_repeats(run, "a trained judge (the same model gives the same answer)")
        click.echo(_judge_trained(db, model_path, datasets))
        return
    llm = require_lm(lm, judge_name)
    echo_judge_run(db, judge_name, llm, run, lambda: api.judge_relevance(
        db, judge_name, llm, datasets=datasets, concurrency=run.concurrency, limit=limit,
        max_retries=run.max_retries, progress=run.progress))


def _judge_trained(db: str, model_path: str | None, datasets: tuple[str, ...]) -> str:
    """Label the imported relevance items with a saved trained matcher (no LLM)."""
    from personagap.stages.trained import judge_relevance_trained

    if model_path is None:
        raise click.UsageError("--judge trained needs --model-path MODEL (train one: personagap train relevance "
                               "--out MODEL)")

    # A model file it cannot use is a ModelFileError (one line, exit 2 through the one error map).
    return run_or_exit(lambda: judge_relevance_trained(db, model_path, datasets=datasets).render())
