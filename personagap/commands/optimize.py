"""`personagap optimize`: DSPy optimisation of a judge toward human agreement (issue 16)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from personagap._cli_base import (
    RunSettings,
    cli,
    db_option,
    echo_run,
    fail,
    llm_judge_options,
    refuse_repeats,
    require_lm,
)

if TYPE_CHECKING:
    from personagap.judges.runner import LMConfig

# personagap.judges.optimize's OPTIMIZERS, SELECTION_METRICS and STAGE_JUDGES, spelt out: importing them would load
# DSPy at every CLI start. tests/core/test_optimize_cli_choices.py fails when the two drift apart.
OPTIMIZERS = ("bootstrap-fewshot", "mipro", "simba")
METRICS = ("kappa", "ac1", "balanced-accuracy")
DEFAULT_JUDGE = {"relevance": "relevance-per-attribute", "response": "pairwise"}


@cli.command("optimize")
@click.argument("stage", type=click.Choice(["relevance", "response"]))
@click.option("--judge", "judge_name", type=click.Choice(["relevance-per-attribute", "pairwise", "persona-use"]),
              default=None, help="Judge to optimise [default: relevance-per-attribute for relevance, pairwise for "
              "response].")
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="bootstrap-fewshot", show_default=True,
              help="DSPy optimiser proposing programs from the train users.")
@click.option("--metric", type=click.Choice(METRICS), default="kappa", show_default=True,
              help="Corpus-level metric that selects among the candidates on the dev users.")
@click.option("--budget", type=click.IntRange(min=0), default=200, show_default=True,
              help="At most this many LLM calls for the optimiser (dev and test evaluation are bounded by the plan).")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Where to save the program (DSPy JSON; sidecar PROGRAM.meta.json beside it) "
                   "[default: optimized-STAGE.json].")
@click.option("--dry-run", is_flag=True, help="Print the plan (split sizes, most calls, cost estimate) and exit.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the user split, the pairwise A/B order and the optimiser's draws (recorded).")
@click.option("--users", "n_users", type=click.IntRange(min=3), default=None,
              help="Use a seeded subset of this many users (a quick or cheap run).")
@click.option("--max-items", type=click.IntRange(min=1), default=None,
              help="At most N items per side (a seeded sample taken after the user split; a cheap run).")
@click.option("--candidates", type=click.IntRange(min=1), default=4, show_default=True,
              help="Programs the optimiser proposes (each is scored on dev).")
@click.option("--max-demos", type=click.IntRange(min=0), default=8, show_default=True,
              help="Most demonstrations in a program.")
@click.option("--dataset", "datasets", multiple=True, help="Only these imported datasets (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@llm_judge_options()
@db_option
def optimize_command(stage: str, judge_name: str | None, optimizer: str, metric: str, budget: int, out: str | None,
                     dry_run: bool, seed: int, n_users: int | None, max_items: int | None, candidates: int,
                     max_demos: int, datasets: tuple[str, ...], as_json: bool, lm: LMConfig | None,
                     run: RunSettings, db: str) -> None:
    """Optimise a judge's DSPy program toward agreement with humans; report before/after on held-out users.

    Users (never items) are split into train / dev / test with --seed. The optimiser sees train users only,
    scored per example by a class-balanced metric; candidates are selected on dev users by --metric; kappa,
    AC1 and over-selection (yes/no judges) or accuracy (pairwise) before/after, with user-clustered 95% CIs
    (none below 5 users) and the CI of the difference, come from test users only. Run the saved program as a
    judge: personagap judge STAGE --program PROGRAM.
    """
    from personagap.judges.optimize import OptimizeError, OptimizeSettings, optimize, plan_run

    refuse_repeats(run, "optimize")
    judge = judge_name or DEFAULT_JUDGE[stage]
    llm = require_lm(lm, judge)
    if llm.confidence != "none":
        raise click.UsageError("optimize scores answers, not confidences: leave out --confidence")
    settings = OptimizeSettings(stage=stage, judge=judge, optimizer=optimizer, metric=metric,  # type: ignore[arg-type]
                                budget=budget, seed=seed, n_users=n_users, candidates=candidates,
                                max_demos=max_demos, max_bootstrapped=min(4, max_demos), threads=run.concurrency,
                                datasets=datasets or None, max_items=max_items)
    path = out or f"optimized-{stage}.json"

    result: Any
    try:
        if dry_run:
            result = plan_run(db, settings, llm)[0]
        else:
            # The plan goes to stderr as the run starts (the result printed on stdout repeats it).
            result = optimize(db, settings, llm, path, on_plan=lambda p: click.echo(p.render() + "\n", err=True),
                              on_phase=lambda name: click.echo(f"[{name}]", err=True))
    except OptimizeError as exc:
        fail(f"error: {exc}")
    if dry_run:
        click.echo(result.render())
        click.echo("dry run: no LLM call made")
    elif as_json:
        click.echo(json.dumps(result.scores() | {"program": result.program_path, "program_id": result.program_id,
                                                 "calls": result.calls, "cache_hits": result.cache_hits,
                                                 "cost": result.cost}, indent=2))
    else:
        click.echo(result.render())


program_option = click.option(
    "--program", type=click.Path(dir_okay=False), default=None,
    help="Judge with a program saved by `personagap optimize` (its PROGRAM.meta.json sidecar beside it): a new "
         "judge version; its labels on the program's own train/dev users are stored as 'in-sample'.")


def judge_program(stage: str, judge_name: str, db: str, program: str, lm: LMConfig | None, run: RunSettings, *,
                  limit: int | None = None, datasets: tuple[str, ...] = ()) -> None:
    """`personagap judge STAGE --program PROGRAM`: run a saved program and print its summary (:func:`echo_run`).

    Errors are one line and exit 2; a run that labels nothing exits 1.

    Args:
        stage: 'relevance' or 'response' (the program's stage must match).
        judge_name: The command's --judge; must be the program's base judge.
        db: The database.
        program: The saved program's path.
        lm: The model to judge with (required).
        run: Concurrency, retries, progress.
        limit: Judge only the first N calls.
        datasets: Only these datasets [default: the program's].
    """
    from personagap.judges.optimize import OptimizeError, judge_with_program, load_program

    try:
        meta = load_program(program).meta
        if meta["stage"] != stage or meta["base_judge"] != judge_name:
            raise OptimizeError(f"{program}: a {meta['stage']} program for judge {meta['base_judge']!r}; run "
                                f"it with: personagap judge {meta['stage']} --judge {meta['base_judge']} --program")
        llm = require_lm(lm, meta["base_judge"])
        summary = judge_with_program(db, program, llm, datasets=datasets or None, concurrency=run.concurrency,
                                     limit=limit, max_retries=run.max_retries, progress=run.progress)
    except OptimizeError as exc:
        fail(f"error: {exc}")
    echo_run(summary)
