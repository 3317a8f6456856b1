"""Label budgets: how many more human labels a stage needs, by simulation from the stored data (seeded).

Two questions, per judge and dataset:

* **Kappa precision** — how many users (and so items, at the data's items per user) until the 95% CI of
  the judge–human kappa has the target half-width? A simulated study of ``n`` users draws ``n`` of the
  stored users' confusion tables with replacement (the prevalence and agreement of the data as they
  are), and its CI is a user-clustered percentile bootstrap as in the reports (Poisson weights for speed;
  the tests check the budget with the reports' own bootstrap). The half-width at
  ``n`` is the median over simulated studies; the budget is the smallest ``n`` where it is at most the
  target (bracketed from the square-root law, then bisected).
* **Alternative-annotator test power** — how many items per annotator until the judge passes the test
  in 80% of simulated studies at its current advantage? A simulated study draws ``m`` of each tested
  annotator's items with replacement (keeping each item's pair of indicators), and runs the test
  (t-tests, Benjamini–Yekutieli, winning rate >= 0.5) exactly as :mod:`~personagap.analysis.alt_test`.

Both use common random numbers (one seed for every candidate size), so the search is monotone in
practice and a rerun gives the same budget.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from personagap.analysis.agreement import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    MIN_USERS_FOR_CI,
    FloatArray,
    bootstrap_estimate,
    kappa_from_tables,
    resample_weights,
)
from personagap.analysis.alt_test import (
    DEFAULT_EPSILON,
    DEFAULT_Q,
    MIN_HUMANS_PER_ITEM,
    MIN_ITEMS_PER_ANNOTATOR,
    Indicators,
    Scoring,
    benjamini_yekutieli,
    indicators,
    one_sided_p_rows,
)
from personagap.analysis.comparable import categories_for
from personagap.analysis.estimates import too_few_users_note
from personagap.analysis.robust import HumanSet, human_reference, individual_humans, judge_labels, user_tables

DEFAULT_HALFWIDTH = 0.05
DEFAULT_POWER = 0.8
DEFAULT_SIMULATIONS = 100
MAX_USERS = 100_000
MAX_ITEMS_PER_ANNOTATOR = 20_000


class KappaBudget(BaseModel):
    """Users and items needed for one judge's kappa CI to reach a half-width."""

    judge: str
    dataset: str
    rater_kind: str
    humans: HumanSet
    n_users: int
    n_items: int
    kappa: float
    halfwidth: float = Field(description="Half-width of the current 95% CI (the reports' bootstrap and CI rule: "
                                         "NaN below MIN_USERS_FOR_CI users).")
    target_halfwidth: float
    users_needed: int | None = Field(description="Users for the simulated median half-width <= target.")
    additional_users: int | None
    items_needed: int | None = Field(description="users_needed x the data's items per user.")
    additional_items: int | None
    projected_halfwidth: float | None = Field(description="Simulated median half-width at users_needed.")
    reason: str | None = Field(default=None, description="Why there is no budget, when there is none.")


class AltTestBudget(BaseModel):
    """Items per annotator needed for the alternative-annotator test to pass with the target power."""

    judge: str
    dataset: str
    rater_kind: str
    humans: HumanSet
    applicable: bool
    epsilon: float
    n_annotators: int = 0
    items_per_annotator: int = Field(default=0, description="Median items per tested annotator now.")
    advantage_probability: float | None = None
    current_power: float | None = Field(default=None, description="Simulated pass rate at the current items.")
    target_power: float
    items_per_annotator_needed: int | None = None
    additional_items_per_annotator: int | None = None
    projected_power: float | None = None
    reason: str | None = None


class Plan(BaseModel):
    """The label budget of one stage (``personagap plan``)."""

    stage: str
    humans: HumanSet
    target_halfwidth: float
    target_power: float
    seed: int
    simulations: int
    kappa: list[KappaBudget]
    alt_test: list[AltTestBudget]


# --------------------------------------------------------------------------- kappa

def simulated_halfwidth(tables: FloatArray, n_users: int, *, simulations: int = DEFAULT_SIMULATIONS,
                        n_resamples: int = DEFAULT_RESAMPLES // 5, seed: int = DEFAULT_SEED,
                        level: float = 0.95) -> float:
    """Median kappa-CI half-width of simulated studies of ``n_users`` users drawn from the stored ones.

    Args:
        tables: Per-user confusion tables ``(U, K, K)`` of the judge against the human reference.
        n_users: Users in each simulated study.
        simulations: Simulated studies.
        n_resamples: Bootstrap resamples of each study (its CI, as in the reports).
        seed: Seed of the simulation.
        level: Confidence level.
    """
    t = np.asarray(tables, dtype=float)
    users = t.shape[0]
    rng = np.random.default_rng(seed)
    # Each simulated study: how often it drew each stored user.
    drawn = rng.multinomial(n_users, np.full(users, 1.0 / users), size=simulations)
    # Its bootstrap: the Poisson approximation of resampling its own users (each drawn user's weight ~ Poisson of
    # its draw count; Hanley & MacGibbon 2006) -- the multinomial is ~15x slower and the half-width is the same.
    weights = rng.poisson(drawn, size=(n_resamples, simulations, users)).astype(float)
    samples = kappa_from_tables(np.tensordot(weights, t, axes=(2, 0)))  # (resamples, simulations)
    points = kappa_from_tables(np.tensordot(drawn.astype(float), t, axes=(1, 0)))  # each study's own kappa
    # Each study's CI by the one CI rule (no CI below MIN_USERS_FOR_CI users), as its report would print it.
    cis = np.array([bootstrap_estimate(points[k], samples[:, k], n_users, level).ci for k in range(simulations)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # every study undefined (or too small): NaN, no budget
        return float(np.nanmedian((cis[:, 1] - cis[:, 0]) / 2.0))


def smallest_sufficient(ok: Callable[[int], bool], guess: int, *, lowest: int, highest: int) -> int | None:
    """The smallest integer in ``[lowest, highest]`` with ``ok`` true, assuming ``ok`` is monotone.

    Brackets from ``guess`` by doubling or halving, then bisects. None if even ``highest`` fails.
    """
    guess = min(max(guess, lowest), highest)
    if ok(guess):
        hi, lo = guess, guess
        while lo > lowest:
            lo = max(lowest, lo // 2)
            if not ok(lo):
                break
            hi = lo
        else:
            return lowest
    else:
        lo, hi = guess, guess
        while True:
            if hi >= highest:
                return None
            lo, hi = hi, min(highest, hi * 2)
            if ok(hi):
                break
    while hi - lo > 1:  # invariant: ok(hi), not ok(lo)
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def kappa_budget(tables: FloatArray, *, target: float = DEFAULT_HALFWIDTH, simulations: int = DEFAULT_SIMULATIONS,
                 seed: int = DEFAULT_SEED, level: float = 0.95) -> tuple[float, float, int | None, float | None]:
    """Current kappa, current half-width, users needed and the projected half-width there.

    Returns:
        ``(kappa, halfwidth, users_needed, projected_halfwidth)``; halfwidth NaN and users_needed None below
        :data:`~personagap.analysis.agreement.MIN_USERS_FOR_CI` users (no CI); users_needed None when kappa is
        undefined or even :data:`MAX_USERS` users would not do.
    """
    t = np.asarray(tables, dtype=float)
    users = t.shape[0]
    kappa = float(kappa_from_tables(t.sum(axis=0)))
    boot = kappa_from_tables(np.tensordot(resample_weights(users, DEFAULT_RESAMPLES, seed), t, axes=(1, 0)))
    lo, hi = bootstrap_estimate(kappa, boot, users, level).ci
    halfwidth = (hi - lo) / 2.0
    if math.isnan(halfwidth) or halfwidth == 0:  # too few users for a CI, or kappa undefined/constant
        return kappa, halfwidth, None, None

    def ok(n: int) -> bool:
        return simulated_halfwidth(t, n, simulations=simulations, seed=seed, level=level) <= target

    guess = math.ceil(users * (halfwidth / target) ** 2)  # half-width ~ 1/sqrt(users)
    # A study of fewer users would have no CI at all, so the smallest budget is the CI rule's minimum.
    needed = smallest_sufficient(ok, guess, lowest=MIN_USERS_FOR_CI, highest=MAX_USERS)
    projected = None if needed is None else simulated_halfwidth(t, needed, simulations=simulations, seed=seed,
                                                                level=level)
    return kappa, halfwidth, needed, projected


# --------------------------------------------------------------------------- alt-test power

def alt_test_power(ind: Indicators, items_per_annotator: int | None = None, *, epsilon: float = DEFAULT_EPSILON,
                   q: float = DEFAULT_Q, simulations: int = DEFAULT_SIMULATIONS, seed: int = DEFAULT_SEED) -> float:
    """Share of simulated studies in which the judge passes the alternative-annotator test.

    Args:
        ind: The judge's current leave-one-out indicators (:func:`personagap.analysis.alt_test.indicators`).
        items_per_annotator: Items each annotator labels in a simulated study (None: as many as now).
        epsilon: Cost–benefit margin.
        q: BY false discovery rate.
        simulations: Simulated studies.
        seed: Seed of the simulation.
    """
    rng = np.random.default_rng(seed)
    p = np.empty((simulations, len(ind.annotators)))
    for k, a in enumerate(ind.annotators):
        m = items_per_annotator or len(a.items)
        draws = rng.integers(0, len(a.items), size=(simulations, m))
        p[:, k] = one_sided_p_rows(a.difference[draws], epsilon)
    winning = np.array([benjamini_yekutieli(row, q).mean() for row in p])
    return float(np.mean(winning >= 0.5))


def _alt_budget(ind: Indicators, base: dict[str, Any], *, epsilon: float, q: float, power: float,
                simulations: int, seed: int, min_items: int) -> AltTestBudget:
    current = alt_test_power(ind, epsilon=epsilon, q=q, simulations=simulations, seed=seed)
    now = int(np.median([len(a.items) for a in ind.annotators]))
    advantage = float(np.mean([a.judge_wins.mean() for a in ind.annotators]))

    def ok(m: int) -> bool:
        return alt_test_power(ind, m, epsilon=epsilon, q=q, simulations=simulations, seed=seed) >= power

    needed = smallest_sufficient(ok, now, lowest=min_items, highest=MAX_ITEMS_PER_ANNOTATOR)
    reason = None if needed is not None else (
        f"{power:.0%} power is out of reach at the current advantage (even {MAX_ITEMS_PER_ANNOTATOR} items per "
        "annotator): the judge does not beat enough annotators by the margin")
    return AltTestBudget(
        **base, applicable=True, epsilon=epsilon, n_annotators=len(ind.annotators), items_per_annotator=now,
        advantage_probability=advantage, current_power=current, target_power=power,
        items_per_annotator_needed=needed,
        additional_items_per_annotator=None if needed is None else max(0, needed - now),
        projected_power=None if needed is None else alt_test_power(ind, needed, epsilon=epsilon, q=q,
                                                                   simulations=simulations, seed=seed),
        reason=reason)


# --------------------------------------------------------------------------- one stage

def plan_rows(labels: pd.DataFrame, datasets: list[str] | None = None, *, stage: str = "",
              humans: HumanSet = "blind", halfwidth: float = DEFAULT_HALFWIDTH, power: float = DEFAULT_POWER,
              epsilon: float = DEFAULT_EPSILON, q: float = DEFAULT_Q, scoring: Scoring = "accuracy",
              min_humans_per_item: int = MIN_HUMANS_PER_ITEM, min_items_per_annotator: int = MIN_ITEMS_PER_ANNOTATOR,
              simulations: int = DEFAULT_SIMULATIONS, seed: int = DEFAULT_SEED,
              declared: Mapping[str, Iterable[str]] | None = None) -> Plan:
    """The label budget of every judge of one stage's datasets.

    Args:
        labels: Tidy labels of one stage (:func:`personagap.store.load_labels`).
        datasets: Datasets to plan (default: every dataset in ``labels``).
        stage: The stage's name (recorded).
        humans: Plan against blind (default) or anchored humans.
        halfwidth: Target half-width of the kappa CI.
        power: Target power of the alternative-annotator test.
        epsilon: The test's cost–benefit margin.
        q: The test's BY false discovery rate.
        scoring: ``accuracy`` for categories, ``neg_rmse`` for ordinal scores.
        min_humans_per_item: The test's minimum humans per item.
        min_items_per_annotator: The test's minimum items per annotator (also the smallest budget offered).
        simulations: Simulated studies per candidate size.
        seed: Seed of every simulation.
        declared: Per dataset, its declared categories (the dataset record's scale); the tables are coded over
            :func:`~personagap.analysis.comparable.categories_for` of them and the labels, as in every report.
    """
    kappa_rows: list[KappaBudget] = []
    alt_rows: list[AltTestBudget] = []
    for dataset in datasets if datasets is not None else sorted(set(labels["dataset"])):
        frame = labels[labels["dataset"] == dataset]
        ref = human_reference(frame, humans)
        people = individual_humans(frame, humans)
        judges = list(judge_labels(frame))
        categories = categories_for(frame, (declared or {}).get(dataset))
        for j in judges:
            base: dict[str, Any] = {"judge": j.judge, "dataset": dataset, "rater_kind": j.rater_kind, "humans": humans}
            shared = j.labels.index.intersection(ref.index)
            if len(shared):
                tables, _ = user_tables(ref.loc[shared, "label"], j.labels.loc[shared], ref.loc[shared, "user_id"],
                                        categories)
                kappa, hw, needed, projected = kappa_budget(tables, target=halfwidth, simulations=simulations,
                                                            seed=seed)
                per_user = len(shared) / tables.shape[0]
                reason = None if needed is not None else (
                    too_few_users_note(tables.shape[0]) or ("kappa is undefined or constant on these users"
                    if math.isnan(hw) or hw == 0 else f"more than {MAX_USERS} users would be needed"))
                kappa_rows.append(KappaBudget(
                    **base, n_users=tables.shape[0], n_items=len(shared), kappa=kappa, halfwidth=hw,
                    target_halfwidth=halfwidth, users_needed=needed,
                    additional_users=None if needed is None else max(0, needed - tables.shape[0]),
                    items_needed=None if needed is None else math.ceil(needed * per_user),
                    additional_items=None if needed is None else max(0, math.ceil(needed * per_user) - len(shared)),
                    projected_halfwidth=projected, reason=reason))
            ind = indicators(j.labels.to_dict(), people, scoring=scoring, min_humans_per_item=min_humans_per_item,
                             min_items_per_annotator=1)
            tested = [a for a in ind.annotators if len(a.items) >= 2]
            if not tested:
                alt_rows.append(AltTestBudget(
                    **base, applicable=False, epsilon=epsilon, target_power=power,
                    reason=f"no item has {min_humans_per_item}+ {humans} human labels and a judge label; "
                           "a budget needs some multi-rater items to simulate from"))
                continue
            alt_rows.append(_alt_budget(Indicators(tested, ind.n_items, ind.skipped), base, epsilon=epsilon, q=q,
                                        power=power, simulations=simulations, seed=seed,
                                        min_items=min_items_per_annotator))
    return Plan(stage=stage, humans=humans, target_halfwidth=halfwidth, target_power=power, seed=seed,
                simulations=simulations, kappa=kappa_rows, alt_test=alt_rows)
