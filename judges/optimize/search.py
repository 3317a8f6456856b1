"""The optimisation run: plan, propose candidates on train, select on dev, report on test, save."""

from __future__ import annotations

import random
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

import dspy
import numpy as np

from personagap.judges.base import Judge, get_judge
from personagap.judges.lm import LMConfig, token_prices
from personagap.judges.optimize.data import (
    BudgetExhausted,
    Example,
    OptimizeError,
    base_name,
    dataset_classes,
    default_datasets,
    load_examples,
    split_examples,
    split_users,
)
from personagap.judges.optimize.metered import Meter, MeteredLM, judge_adapter, load_cache, save_cache
from personagap.judges.optimize.program_io import save_program
from personagap.judges.optimize.report import (
    OPTIMIZERS,
    STAGE_JUDGES,
    OptimizeResult,
    OptimizeSettings,
    Plan,
    reported_metrics,
)
from personagap.judges.optimize.scoring import (
    balanced_metric,
    class_weights,
    compare,
    corpus_score,
    evaluate,
    program_demos,
    program_id,
    table_metric,
    to_dspy,
)
from personagap.store import StoreError, opened
from personagap.store.judge_answers import program_cache_count


def plan_run(db: str | Path, settings: OptimizeSettings, lm: LMConfig) -> tuple[Plan, list[Example], Judge]:
    """Load the data, split the users and bound the calls; no LLM call.

    Raises:
        OptimizeError: Unknown judge for the stage, or too few labelled users/classes.
        StoreError: No items.
    """
    if settings.judge not in STAGE_JUDGES.get(settings.stage, ()):
        raise OptimizeError(f"judge {settings.judge!r} cannot be optimised for stage {settings.stage}; "
                            f"choose one of {', '.join(STAGE_JUDGES.get(settings.stage, ()))}")
    if settings.optimizer not in OPTIMIZERS:
        raise OptimizeError(f"unknown optimiser {settings.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    table_metric(settings.metric)
    judge = get_judge(settings.judge)
    examples, _, _ = load_examples(db, judge, datasets=settings.datasets, seed=settings.seed)
    if not examples:
        raise StoreError(f"{db}: no {settings.judge} items with a blind human label; import a release first")
    split = split_users([e.user_id for e in examples], settings.seed, settings.fractions, settings.n_users)
    sides = split_examples(examples, split, settings.max_items)
    classes = dataset_classes(db, judge, settings.datasets or default_datasets(judge))
    train_classes = {e.human for e in sides["train"]}
    if len(train_classes) < 2:
        raise OptimizeError(f"the train users' human labels have one class only ({', '.join(train_classes)}); "
                            "use more users or another --seed")
    n_train = len(sides["train"])
    prevalence = {c: sum(e.human == c for e in sides["train"]) / n_train for c in classes}
    max_calls = {"optimise": settings.budget, "dev": (1 + settings.candidates) * len(sides["dev"]),
                 "test": 2 * len(sides["test"])}
    name = base_name(judge)
    with opened(db, read_only=True) as con:
        n_cached = program_cache_count(con, lm.model, name)
    prices = token_prices(lm.model)
    est_cost = None
    if prices is not None and sides["dev"]:
        per_call = _prompt_tokens(judge, lm, sides["dev"][0], settings.max_demos)
        est_cost = sum(max_calls.values()) * prices.cost(per_call, lm.max_tokens)
    plan = Plan(settings, split, {k: len(v) for k, v in sides.items()}, prevalence, max_calls, est_cost, n_cached,
                classes)
    return plan, examples, judge


def _prompt_tokens(judge: Judge, lm: LMConfig, example: Example, n_demos: int) -> int:
    """A rough prompt size (characters / 4) of one call carrying ``n_demos`` demos like this example."""
    adapter = judge_adapter(judge, lm)
    demo = to_dspy(example, judge)
    messages = adapter.format(judge.signature, demos=[demo] * n_demos, inputs=example.task.inputs)
    return sum(len(str(m.get("content", ""))) for m in messages) // 4


@contextmanager
def _phase(meter: Meter, name: str, on_phase: Callable[[str], None] | None) -> Iterator[None]:
    meter.phase = name
    if on_phase is not None:
        on_phase(name)
    yield


def optimize(db: str | Path, settings: OptimizeSettings, lm: LMConfig, out: str | Path, *,
             on_plan: Callable[[Plan], None] | None = None,
             on_phase: Callable[[str], None] | None = None) -> OptimizeResult:
    """Optimise a judge on train users, select on dev users, report on test users, save the program.

    Args:
        db: The DuckDB file with the imported items and human labels (its ``judge_cache`` keeps answers).
        settings: Judge, optimiser, metric, budget, seed, ...
        lm: The model to optimise for.
        out: Where to save the program (DSPy's JSON format); the sidecar goes to :func:`sidecar_path`.
        on_plan: Called with the plan before the first LLM call (the CLI prints it).
        on_phase: Called with 'optimise', 'dev' and 'test' as each phase starts (progress lines; tests
            use it to see which requests each phase sent).

    Returns:
        What the run did and the before/after figures on test users.
    """
    started = time.monotonic()
    plan, examples, judge = plan_run(db, settings, lm)
    if on_plan is not None:
        on_plan(plan)
    sides = split_examples(examples, plan.split, settings.max_items)
    classes = plan.classes
    meter = Meter(budget=settings.budget, prices=token_prices(lm.model), cache=load_cache(db, judge, lm.model))
    metered = MeteredLM(lm, meter)
    adapter = judge_adapter(judge, lm)
    baseline = dspy.Predict(judge.signature)
    try:
        with _phase(meter, "optimise", on_phase):
            generated = _candidates(settings, judge, sides["train"], classes, metered, adapter)
        with _phase(meter, "dev", on_phase):
            candidates: list[tuple[str, dspy.Module, float]] = []
            for name, program in [("unoptimised", baseline), *generated]:
                ev = evaluate(program, judge, sides["dev"], metered, adapter, threads=settings.threads)
                candidates.append((name, program, corpus_score(settings.metric, sides["dev"], ev.labels, classes)))
        # Highest dev score wins; ties go to the earlier candidate (the unoptimised program first).
        best = max(range(len(candidates)), key=lambda i: (_rank(candidates[i][2]), -i))
        chosen_name, chosen, _ = candidates[best]
        with _phase(meter, "test", on_phase):
            before = evaluate(baseline, judge, sides["test"], metered, adapter, threads=settings.threads)
            after = before if chosen is baseline else evaluate(chosen, judge, sides["test"], metered, adapter,
                                                               threads=settings.threads)
    finally:
        save_cache(db, judge, lm.model, meter.new_entries)
    reported = reported_metrics(classes)
    test, n_items, n_users = compare(sides["test"], before.labels, after.labels, classes, reported)
    result = OptimizeResult(
        plan=plan, program_path=str(out), program_id=program_id(chosen, judge), chosen=chosen_name,
        candidates=[{"name": n, "demos": len(program_demos(p)), "dev_score": s} for n, p, s in candidates],
        test=test, test_items=n_items, test_users=n_users,
        failures={"before": sum(v is None for v in before.labels.values()),
                  "after": sum(v is None for v in after.labels.values())},
        calls=dict(meter.calls), cache_hits=meter.cache_hits, prompt_tokens=meter.prompt_tokens,
        completion_tokens=meter.completion_tokens, cost=meter.cost, budget_exhausted=meter.exhausted,
        seconds=time.monotonic() - started)
    save_program(chosen, out, judge, settings, lm, plan.split, examples, result)
    return result


def _rank(score: float) -> float:
    return float("-inf") if np.isnan(score) else score


def _candidates(settings: OptimizeSettings, judge: Judge, train: Sequence[Example], classes: Sequence[str],
                lm: MeteredLM, adapter: dspy.Adapter) -> list[tuple[str, dspy.Module]]:
    """Programs the optimiser proposes from train users only (never dev or test)."""
    weights = class_weights(train, classes)
    metric = balanced_metric(judge, train, weights)
    trainset = [to_dspy(e, judge) for e in train]
    out: list[tuple[str, dspy.Module]] = []
    # DSPy's optimisers print their progress on stdout; it would mix with our report (kept on stderr).
    with dspy.context(lm=lm, adapter=adapter), warnings.catch_warnings(), redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        if settings.optimizer == "bootstrap-fewshot":
            for i in range(settings.candidates):
                if lm.meter.exhausted:
                    break
                shuffled = list(trainset)
                random.Random(settings.seed + i).shuffle(shuffled)
                teleprompter = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=settings.max_bootstrapped,
                                                     max_labeled_demos=settings.max_demos, max_rounds=1, max_errors=1)
                try:
                    out.append((f"bootstrap-{i + 1}", teleprompter.compile(dspy.Predict(judge.signature),
                                                                           trainset=shuffled)))
                except BudgetExhausted:
                    break
        elif settings.optimizer == "mipro":
            try:
                import optuna  # noqa: F401  MIPROv2 searches with it
            except ImportError:
                raise OptimizeError("--optimizer mipro needs optuna: pip install optuna") from None
            teleprompter = dspy.MIPROv2(metric=metric, auto=None, num_candidates=settings.candidates,
                                        max_bootstrapped_demos=settings.max_bootstrapped,
                                        max_labeled_demos=settings.max_demos, num_threads=settings.threads,
                                        seed=settings.seed, verbose=False)
            try:
                # Minibatches keep a trial's cost at ~20 calls; MIPRO holds out part of train as its own valset.
                best = teleprompter.compile(dspy.Predict(judge.signature), trainset=trainset,
                                            num_trials=settings.candidates, minibatch=len(trainset) > 40,
                                            minibatch_size=20, minibatch_full_eval_steps=max(2, settings.candidates))
                out.append(("mipro", best))
            except BudgetExhausted:
                pass
        else:
            teleprompter = dspy.SIMBA(metric=metric, bsize=min(16, len(trainset)), num_candidates=settings.candidates,
                                      max_steps=2, max_demos=settings.max_demos, num_threads=settings.threads)
            try:
                best = teleprompter.compile(dspy.Predict(judge.signature), trainset=trainset, seed=settings.seed)
                out.append(("simba", best))
            except BudgetExhausted:
                pass
    return out
