"""Label budgets: how many more human labels a stage needs, by simulation from the stored data (seeded).

Two questions, per judge and dataset:

* **Kappa precision, with assurance** — how many users (and so items, at the data's items per user) until
  the 95% CI of the judge–human kappa has the target half-width in 80% of studies (``assurance``), not
  merely in the median study (sized for the median, only about a third of studies reached a 0.05 target:
  issue 21)? A simulated study of ``n`` users draws ``n`` of the stored users' confusion tables with
  replacement (the prevalence and agreement of the data as they are), and its CI is the one CI rule
  (:func:`personagap.analysis.agreement.interval_from_leave_outs` on the study's leave-one-user-out kappas,
  as the reports print it). The budget is the smallest ``n`` at which at least ``assurance`` of the
  simulated studies reach the target (bracketed from the square-root law, then bisected). The stored users
  are themselves a sample, so the budget is recomputed on ``replans`` resamples of them (users drawn with
  replacement) and its 10th-90th percentile range is given beside it. A half-width is precision, not
  coverage: a 95% interval of the target width still misses the truth 5% of the time.
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
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field
from scipy.stats import norm

from personagap.analysis.agreement import (
    DEFAULT_SEED,
    MIN_USERS_FOR_CI,
    FloatArray,
    estimate,
    interval_from_leave_outs,
    kappa_from_tables,
    leave_one_out,
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
DEFAULT_ASSURANCE = 0.8
#: Resamples of the stored users the budget is recomputed on, for its range.
DEFAULT_REPLANS = 20
#: The budget's range: these percentiles of the recomputed budgets.
RANGE_PERCENTILES = (10.0, 90.0)
HALFWIDTH_IS_NOT_COVERAGE = ("A half-width is precision, not coverage: a 95% interval of the target width still "
                             "misses the true kappa 5% of the time (more with few users: see the README's "
                             "calibration table).")
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
    halfwidth: float = Field(description="Half-width of the current 95% CI (the one CI rule: NaN below "
                                         "MIN_USERS_FOR_CI users).")
    target_halfwidth: float
    assurance: float = Field(description="Target share of simulated studies whose half-width is <= target.")
    users_needed: int | None = Field(description="Smallest number of users at which at least `assurance` of "
                                                 "simulated studies reach the target half-width.")
    users_needed_range: list[int | None] = Field(
        default_factory=list, description="10th and 90th percentiles of users_needed recomputed on resamples of "
                                          "the stored users (None: beyond reach in more than that share).")
    range_resamples: int = Field(default=0, description="Resamples of the stored users behind the range.")
    variance_margin: float | None = Field(default=None, description="Upper `assurance` bound of the between-user "
                                                                    "variance over its estimate: the target the "
                                                                    "simulated studies must reach is divided by its "
                                                                    "square root (the stored users are a sample).")
    projected_assurance: float | None = Field(default=None, description="Simulated share of studies reaching the "
                                                                        "target at users_needed.")
    additional_users: int | None
    items_needed: int | None = Field(description="users_needed x the data's items per user.")
    additional_items: int | None
    projected_halfwidth: float | None = Field(description="Simulated median half-width at users_needed (below the "
                                                          "target: sized for assurance, not for the median).")
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
    assurance: float = Field(description="Share of simulated studies that must reach the half-width.")
    halfwidth_note: str = Field(default=HALFWIDTH_IS_NOT_COVERAGE, description="What a half-width does not promise.")
    target_power: float
    seed: int
    simulations: int
    kappa: list[KappaBudget]
    alt_test: list[AltTestBudget]


# --------------------------------------------------------------------------- kappa

def study_halfwidths(tables: FloatArray, n_users: int, *, simulations: int = DEFAULT_SIMULATIONS,
                     seed: int = DEFAULT_SEED, level: float = 0.95) -> FloatArray:
    """Kappa-CI half-widths of simulated studies of ``n_users`` users drawn from the stored ones.

    Each study's interval is the one CI rule on its own users: its leave-one-user-out kappas (a user drawn twice
    is left out twice, as in a study holding two such users) through
    :func:`~personagap.analysis.agreement.interval_from_leave_outs`, so no interval below ``MIN_USERS_FOR_CI``.

    Args:
        tables: Per-user confusion tables ``(U, K, K)`` of the judge against the human reference.
        n_users: Users in each simulated study.
        simulations: Simulated studies.
        seed: Seed of the simulation.
        level: Confidence level.

    Returns:
        ``(simulations,)`` half-widths; NaN where a study has no interval.
    """
    t = np.asarray(tables, dtype=float)
    users = t.shape[0]
    rng = np.random.default_rng(seed)
    drawn = rng.multinomial(n_users, np.full(users, 1.0 / users), size=simulations)  # (S, U): copies of each user
    totals = np.tensordot(drawn.astype(float), t, axes=(1, 0))  # (S, K, K)
    points = kappa_from_tables(totals)
    leave_out = kappa_from_tables(totals[:, None] - t[None])  # (S, U): the study without one copy of each user
    out = np.empty(simulations)
    for k in range(simulations):
        e = interval_from_leave_outs(float(points[k]), np.repeat(leave_out[k], drawn[k]), level)
        out[k] = (e.ci[1] - e.ci[0]) / 2.0
    return out


def simulated_halfwidth(tables: FloatArray, n_users: int, *, simulations: int = DEFAULT_SIMULATIONS,
                        seed: int = DEFAULT_SEED, level: float = 0.95) -> float:
    """Median half-width of :func:`study_halfwidths` (NaN when no study has an interval)."""
    widths = study_halfwidths(tables, n_users, simulations=simulations, seed=seed, level=level)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # every study without an interval: NaN, no budget
        return float(np.nanmedian(widths))


def reach_share(tables: FloatArray, n_users: int, target: float, *, simulations: int = DEFAULT_SIMULATIONS,
                seed: int = DEFAULT_SEED, level: float = 0.95) -> float:
    """Share of simulated studies of ``n_users`` users whose kappa CI half-width is at most ``target``.

    A study without an interval (too few users, or kappa undefined without some user) does not reach it.
    """
    widths = study_halfwidths(tables, n_users, simulations=simulations, seed=seed, level=level)
    return float(np.mean(np.nan_to_num(widths, nan=np.inf) <= target))


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


def variance_margin(tables: FloatArray, assurance: float) -> float:
    """How much the stored users may understate the kappa's between-user variance: an upper bound over the estimate.

    Studies are simulated from the stored users, so stored users that happen to vary little plan too few users for
    every study (from a 47-user pilot the median-rule plan ranged 29-99 users; issue 21). As in sizing from a
    pilot's upper confidence limit of the variance (Browne 1995), the plan uses the variance's upper ``assurance``
    bound: the jackknife variance is a sum of squared deviations of the leave-one-user-out kappas, so its relative
    SE is ``r = sd / (mean * sqrt(U))`` of those squares (large when a few users dominate), and the bound is the
    log-normal ``exp(z_assurance * r)`` times the estimate (``sqrt(2 / U)`` for normal deviations: 1.19 at 47 users).

    Returns:
        The factor (>= 1; 1 where the variance is zero or undefined).
    """
    _, theta = leave_one_out(kappa_from_tables, tables)
    squares = (theta - theta.mean()) ** 2
    if not np.isfinite(squares).all() or squares.mean() == 0 or squares.size < 2:
        return 1.0
    r = float(squares.std(ddof=1) / (squares.mean() * math.sqrt(squares.size)))
    return math.exp(float(norm.ppf(assurance)) * r)


@dataclass(frozen=True)
class KappaPlan:
    """What :func:`kappa_budget` finds for one judge."""

    kappa: float
    halfwidth: float
    users_needed: int | None
    projected_halfwidth: float | None
    projected_assurance: float | None
    users_range: tuple[int | None, int | None]
    replans: int
    variance_margin: float = 1.0


def users_for_assurance(tables: FloatArray, halfwidth: float, *, target: float, assurance: float,
                        simulations: int, seed: int, level: float) -> int | None:
    """Smallest number of users at which ``assurance`` of simulated studies reach ``target`` (None: beyond reach).

    Args:
        tables: Per-user tables ``(U, K, K)``.
        halfwidth: Their own current half-width (the search starts from the square-root law).
        target: Target half-width.
        assurance: Required share of studies.
        simulations: Simulated studies per candidate size.
        seed: Seed (the same for every size: common random numbers keep the search monotone in practice).
        level: Confidence level.

    The studies must reach ``target`` tightened by :func:`variance_margin` (the stored users are a sample too).
    """
    # The half-width scales with the square root of the variance: tighten the target by the variance's margin.
    tight = target / math.sqrt(variance_margin(tables, assurance))

    def ok(n: int) -> bool:
        return reach_share(tables, n, tight, simulations=simulations, seed=seed, level=level) >= assurance

    guess = math.ceil(tables.shape[0] * (halfwidth / tight) ** 2)  # half-width ~ 1/sqrt(users)
    # A study of fewer users would have no CI at all, so the smallest budget is the CI rule's minimum.
    return smallest_sufficient(ok, guess, lowest=MIN_USERS_FOR_CI, highest=MAX_USERS)


def kappa_budget(tables: FloatArray, *, target: float = DEFAULT_HALFWIDTH, assurance: float = DEFAULT_ASSURANCE,
                 simulations: int = DEFAULT_SIMULATIONS, replans: int = DEFAULT_REPLANS, seed: int = DEFAULT_SEED,
                 level: float = 0.95) -> KappaPlan:
    """Current kappa and half-width, the users needed for ``assurance`` of studies to reach ``target``, its range.

    Returns:
        The plan; halfwidth NaN and users_needed None below
        :data:`~personagap.analysis.agreement.MIN_USERS_FOR_CI` users (no CI); users_needed None when kappa is
        undefined or even :data:`MAX_USERS` users would not do. The range recomputes the budget on ``replans``
        resamples of the stored users (seeded), as the 10th and 90th percentiles.
    """
    t = np.asarray(tables, dtype=float)
    now = estimate(t, "kappa", level=level)
    halfwidth = (now.ci[1] - now.ci[0]) / 2.0
    nothing = KappaPlan(now.value, halfwidth, None, None, None, (None, None), 0)
    if math.isnan(halfwidth) or halfwidth == 0:  # too few users for a CI, or kappa undefined/constant
        return nothing
    needed = users_for_assurance(t, halfwidth, target=target, assurance=assurance, simulations=simulations,
                                 seed=seed, level=level)
    if needed is None:
        return nothing
    widths = study_halfwidths(t, needed, simulations=simulations, seed=seed, level=level)
    reached = float(np.mean(np.nan_to_num(widths, nan=np.inf) <= target))
    return KappaPlan(now.value, halfwidth, needed, float(np.nanmedian(widths)), reached,
                     _budget_range(t, target=target, assurance=assurance, simulations=simulations, replans=replans,
                                   seed=seed, level=level), replans, variance_margin(t, assurance))


def _budget_range(tables: FloatArray, *, target: float, assurance: float, simulations: int, replans: int,
                  seed: int, level: float) -> tuple[int | None, int | None]:
    """Percentiles of the budget recomputed on resamples of the stored users (the pilot is a sample too)."""
    if replans == 0:
        return None, None
    rng = np.random.default_rng([seed, 1])
    users = tables.shape[0]
    budgets = []
    for _ in range(replans):
        again = tables[rng.integers(0, users, size=users)]
        e = estimate(again, "kappa", level=level)
        hw = (e.ci[1] - e.ci[0]) / 2.0
        found = None if math.isnan(hw) or hw == 0 else users_for_assurance(
            again, hw, target=target, assurance=assurance, simulations=simulations, seed=seed, level=level)
        budgets.append(math.inf if found is None else float(found))
    lo, hi = np.percentile(budgets, RANGE_PERCENTILES, method="inverted_cdf")
    return (None if math.isinf(lo) else int(lo)), (None if math.isinf(hi) else int(hi))


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
        # The test reads per-cluster means (prompt or user), so a simulated study draws whole clusters: as many
        # as ``items_per_annotator`` items fill at the current items per cluster. Drawing items would treat
        # them as independent and overstate power.
        per_cluster, n_c = a.cluster_difference, a.n_clusters
        m = n_c if items_per_annotator is None else max(2, round(items_per_annotator * n_c / len(a.items)))
        draws = rng.integers(0, n_c, size=(simulations, m))
        p[:, k] = one_sided_p_rows(per_cluster[draws], epsilon)
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
              humans: HumanSet = "blind", halfwidth: float = DEFAULT_HALFWIDTH,
              assurance: float = DEFAULT_ASSURANCE, replans: int = DEFAULT_REPLANS, power: float = DEFAULT_POWER,
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
        assurance: Share of simulated studies that must reach it.
        replans: Resamples of the stored users the kappa budget is recomputed on (its range).
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
                kp = kappa_budget(tables, target=halfwidth, assurance=assurance, simulations=simulations,
                                  replans=replans, seed=seed)
                needed, hw = kp.users_needed, kp.halfwidth
                per_user = len(shared) / tables.shape[0]
                reason = None if needed is not None else (
                    too_few_users_note(tables.shape[0]) or ("kappa is undefined or constant on these users"
                    if math.isnan(hw) or hw == 0 else f"more than {MAX_USERS} users would be needed"))
                kappa_rows.append(KappaBudget(
                    **base, n_users=tables.shape[0], n_items=len(shared), kappa=kp.kappa, halfwidth=hw,
                    target_halfwidth=halfwidth, assurance=assurance, users_needed=needed,
                    users_needed_range=list(kp.users_range) if needed is not None else [],
                    range_resamples=kp.replans, projected_assurance=kp.projected_assurance,
                    variance_margin=kp.variance_margin if needed is not None else None,
                    additional_users=None if needed is None else max(0, needed - tables.shape[0]),
                    items_needed=None if needed is None else math.ceil(needed * per_user),
                    additional_items=None if needed is None else max(0, math.ceil(needed * per_user) - len(shared)),
                    projected_halfwidth=kp.projected_halfwidth, reason=reason))
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
    return Plan(stage=stage, humans=humans, target_halfwidth=halfwidth, assurance=assurance, target_power=power,
                seed=seed,
                simulations=simulations, kappa=kappa_rows, alt_test=alt_rows)
