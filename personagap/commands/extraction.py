"""Stage 1 commands: import laps|extraction, judge extraction, report extraction, and the demo step."""

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

if TYPE_CHECKING:
    from personagap.analysis.weighting import Weight
    from personagap.judges.runner import LMConfig
    from personagap.stages import extraction as stage1
else:
    stage1 = LazyModule("personagap.stages.extraction")


@import_group.command("laps")
@click.argument("path", type=click.Path())
@db_option
def import_laps(path: str, db: str) -> None:
    """Import LAPS dialogues and their gold preferences (a folder of <topic>_dataset_<split>.json, or one file).

    Validates every file first; on any malformed field it names the file and JSON path and writes nothing.
    """
    result = run_or_exit(lambda: stage1.import_laps(path, db))
    click.echo(result.render())


@import_group.command("extraction")
@click.argument("path", type=click.Path())
@db_option
def import_extraction(path: str, db: str) -> None:
    """Import your pipeline's extracted attributes, human verdicts and gold (JSONL).

    The format is documented in personagap.human_data.extraction. Names file, line and field on any error
    and writes nothing.
    """
    result = run_or_exit(lambda: stage1.import_extraction(path, db))
    click.echo(result.render())


@report_group.command("extraction")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of tables.")
@click.option("--no-categories", is_flag=True, help="Leave out per-category precision/recall rows.")
@target_options
@weight_option
def report_extraction(db: str, as_json: bool, no_categories: bool,
                      target_accuracy: float | None, target_kappa: float | None, weight: Weight) -> None:
    """Stage 1: human agreement on verdicts, acceptance, verifier-human kappa, precision/recall vs gold.

    Acceptance and over-generalisation (share marked bad) per extractor and rater; precision, recall and
    F1 against gold preferences overall and per category, with user-clustered 95% CIs.
    """
    result = run_or_exit(lambda: stage1.report_extraction(db, weight=weight))
    click.echo(with_confidence(db, "extraction", result, as_json,
                               lambda r: stage1.render_extraction(r, categories=not no_categories),
                               target_accuracy, target_kappa))


@judge_group.command("extraction")
@click.option("--judge", "judge_name", type=click.Choice(["extract", "verify", "match", "trained"]), required=True,
              help="extract: attributes from each user's conversations (chunked); verify: ok/bad/unsure per "
                   "extracted attribute; match: same/different per (extracted attribute, gold preference); "
                   "trained: ok/bad per extracted attribute by an offline verifier from `personagap train verifier` "
                   "(needs --model-path, no LLM).")
@click.option("--model-path", type=click.Path(dir_okay=False), default=None,
              help="With --judge trained: the saved verifier (its MODEL.json sidecar must sit beside it).")
@click.option("--dataset", "datasets", multiple=True, help="Only these imported datasets (repeatable; default all).")
@click.option("--split", "splits", multiple=True, help="Only histories of these splits, e.g. val (repeatable).")
@click.option("--extractor", default=None, help="verify/match: only this extractor's attributes (its rater name).")
@click.option("--max-chars", type=click.IntRange(min=200), default=None,
              help="extract: characters per chunk of a history [default: 6000].")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="extract: the first N histories; verify/match: the first N calls.")
@llm_judge_options(default_max_tokens=1024)
@db_option
def judge_extraction(judge_name: str, model_path: str | None, datasets: tuple[str, ...], splits: tuple[str, ...],
                     extractor: str | None, max_chars: int | None, limit: int | None, lm: LMConfig | None,
                     run: RunSettings, db: str) -> None:
    """Stage 1: run an LLM extractor, verifier or matcher on imported items; store its answers as labels.

    Answers are cached in the database: rerunning resumes and only asks again for missing or failed calls.
    Then: personagap report extraction.
    """
    if judge_name == "trained":
        refuse_repeats(run, "a trained judge (the same model gives the same answer)")
        click.echo(_judge_trained(db, model_path, datasets, splits, extractor))
        return
    if judge_name == "extract":
        # Extracted attributes are free text, not labels on one scale: K samples have no majority to vote.
        refuse_repeats(run, "--judge extract (its answers are free-text attributes, not labels)")
    llm = require_lm(lm, judge_name)
    echo_judge_run(db, judge_name, llm, run, lambda: stage1.judge_extraction(
        db, judge_name, llm, datasets=datasets or None, splits=splits or None, extractor=extractor,
        max_chars=max_chars, concurrency=run.concurrency, limit=limit, max_retries=run.max_retries,
        progress=run.progress))


def _judge_trained(db: str, model_path: str | None, datasets: tuple[str, ...], splits: tuple[str, ...],
                   extractor: str | None) -> str:
    """Label the extracted attributes with a saved trained verifier (no LLM)."""
    from personagap.stages.trained import judge_extraction_trained

    if model_path is None:
        raise click.UsageError("--judge trained needs --model-path MODEL (train one: personagap train verifier "
                               "--out MODEL)")

    # A model file it cannot use is a ModelFileError (one line, exit 2 through the one error map).
    return run_or_exit(lambda: judge_extraction_trained(db, model_path, datasets=datasets or None,
                                                       splits=splits or None, extractor=extractor).render())


@demo_step("Stage 1 — attribute extraction")
def demo_extraction(workdir: Path, db: Path) -> str:
    """Import the SAMPLE LAPS-format dialogues and extraction JSONL, and report stage 1 (offline matcher)."""
    from personagap.sample_extraction import write_sample_extraction

    laps_dir, jsonl = write_sample_extraction(workdir / "sample_extraction")
    laps = stage1.import_laps(laps_dir, db)
    extraction = stage1.import_extraction(jsonl, db)
    return (laps.render() + "\n" + extraction.render() + "\n\n"
            + stage1.render_extraction(stage1.report_extraction(db)))
