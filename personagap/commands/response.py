"""Stage 3 commands: import prism-judge / usr / personafeedback, judge response, report response."""

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
    fitting_judges,
    import_group,
    judge_group,
    llm_judge_options,
    refuse_repeats,
    report_group,
    require_fitting_data,
    require_lm,
    run_or_exit,
    target_options,
    weight_option,
    with_confidence,
)
from personagap.commands.optimize import judge_program, program_option

if TYPE_CHECKING:
    from personagap.analysis.weighting import Weight
    from personagap.judges.runner import LMConfig
    from personagap.stages import response as stage
else:
    stage = LazyModule("personagap.stages.response")


@import_group.command("prism-judge")
@click.argument("path", type=click.Path())
@db_option
def import_prism_judge(path: str, db: str) -> None:
    """Import PRISM personalised-judge files (one prism_*.jsonl or a folder of them).

    Each file's judge answers become a recorded judge (model and protocol read from the file
    name); unparseable answers are kept as failures. The participant's own preference is the
    human label. On any malformed row it names file, line and field and writes nothing.
    """
    click.echo(run_or_exit(lambda: stage.import_prism(path, db)).render(db))


@import_group.command("usr")
@click.argument("path", type=click.Path())
@db_option
def import_usr(path: str, db: str) -> None:
    """Import USR PersonaChat ratings (pc_usr_data.json, or the folder holding it): per-rater labels."""
    click.echo(run_or_exit(lambda: stage.import_usr(path, db)).render(db))


@import_group.command("personafeedback")
@click.argument("path", type=click.Path())
@db_option
def import_personafeedback(path: str, db: str) -> None:
    """Import a PersonaFeedback release folder (persona/*.jsonl, data/{general,specific}/{easy,medium,hard}.jsonl)."""
    click.echo(run_or_exit(lambda: stage.import_personafeedback(path, db)).render(db))


@judge_group.command("response")
@click.option("--judge", "judge_name", type=click.Choice(["pairwise", "persona-use", "trained"]), default=None,
              help="pairwise: which answer would this user prefer; persona-use: does the response use the persona; "
                   "trained: an offline preference model from `personagap train preference` (needs --model-path). "
                   "Without it, the judges that fit the stored datasets are listed.")
@click.option("--model-path", type=click.Path(dir_okay=False), default=None,
              help="With --judge trained: the saved model (its MODEL.json sidecar must sit beside it).")
@click.option("--no-profile", is_flag=True, help="Pairwise only: do not show the user's profile.")
@click.option("--both-orders", is_flag=True, help="Pairwise only: also judge each pair reversed (swap consistency).")
@click.option("--dataset", "datasets", multiple=True, help="Judge only this dataset (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Judge only the first N tasks.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the per-item position swap.")
@program_option
@llm_judge_options()
@db_option
def judge_response(judge_name: str | None, model_path: str | None, no_profile: bool, both_orders: bool,
                   datasets: tuple[str, ...], limit: int | None, seed: int, program: str | None,
                   lm: LMConfig | None, run: RunSettings, db: str) -> None:
    """Stage 3: run an LLM judge on the imported response items; labels land in the store.

    Answers are cached in the database: rerunning resumes and only asks again for missing or failed calls.
    Then: personagap report response.
    """
    if judge_name is None:
        raise click.UsageError(f"missing option '--judge'. {fitting_judges(db, 'response', datasets)}")
    if program is not None:
        refuse_repeats(run, "a --program run")
        judge_program("response", judge_name, db, program, lm, run, limit=limit, datasets=datasets)
        return
    if judge_name == "trained":
        refuse_repeats(run, "a trained judge (the same model gives the same answer)")
        click.echo(_judge_trained(db, model_path, datasets))
        return
    if judge_name == "persona-use" and no_profile:
        raise click.UsageError("--no-profile is for --judge pairwise: persona-use judges whether a response uses "
                               "the persona, so it needs the persona")
    require_fitting_data(db, "response", judge_name, datasets)
    llm = require_lm(lm, judge_name)
    echo_judge_run(db, judge_name, llm, run, lambda: stage.judge_response(
        db, judge_name, llm, profile=not no_profile, datasets=datasets or None, concurrency=run.concurrency,
        limit=limit, seed=seed, both_orders=both_orders, max_retries=run.max_retries, progress=run.progress))


def _judge_trained(db: str, model_path: str | None, datasets: tuple[str, ...]) -> str:
    """Label the imported pairwise items with a saved trained preference model (no LLM)."""
    from personagap.stages.trained import judge_response_trained

    if model_path is None:
        raise click.UsageError("--judge trained needs --model-path MODEL (train one: personagap train preference "
                               "--out MODEL)")

    # A model file it cannot use is a ModelFileError (one line, exit 2 through the one error map).
    return run_or_exit(lambda: judge_response_trained(db, model_path, datasets=datasets or None).render())


@report_group.command("response")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of tables.")
@target_options
@weight_option
@click.option("--baseline-condition", "baseline", default=None,
              help="The judge condition run without the profile (default: no-profile): each other condition of the "
                   "same judge is compared with it, the with/without-profile gap.")
def report_response(db: str, as_json: bool, target_accuracy: float | None,
                    target_kappa: float | None, weight: Weight, baseline: str | None) -> None:
    """Stage 3: per judge and dataset, accuracy and kappa vs humans with 95% CIs, and biases.

    Also failures, position and length bias (judges and humans), baselines, the
    with/without-profile gap and USR rater agreement; for judges that state a confidence (PRISM's certainty),
    calibration, agreement at each confidence and, with a target, a threshold checked on held-out users.
    """
    declared = {} if baseline is None else {"baseline": baseline}
    result = run_or_exit(lambda: stage.report_response(db, weight=weight, **declared))
    click.echo(with_confidence(db, "response", result, as_json, stage.render_response, target_accuracy,
                               target_kappa))


@demo_step("Stage 3 — response judgment")
def demo_response(workdir: Path, db: Path) -> str:
    """Write SAMPLE judge files in the PRISM release format, import them and report stage 3."""
    from personagap.sample_response import write_sample_prism

    folder = write_sample_prism(workdir / "sample_prism_judge")
    imported = stage.import_prism(folder, db)
    return imported.render(db) + "\n\n" + stage.render_response(stage.report_response(db))
