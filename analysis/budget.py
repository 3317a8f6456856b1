"""Label budgets: how many more human labels a stage needs, by simulation from the stored data (seeded).

Two questions, per judge and dataset, each on the dataset's scale as the reports compute it:

* **Precision of the headline figure, with assurance** — how many users (and so items, at the data's items per user)
  until the 95% CI of the judge–human headline figure (:func:`headline_metric`: quadratic-weighted kappa on ordinal
  scales, Cohen's kappa on nominal and pairwise ones) has the target half-width in 80% of studies (``assurance``),
  not merely in the median study (issue 21)? A simulated study of ``n`` users draws ``n`` of the stored users'
  confusion tables with replacement, and its CI is the one CI rule
  (:func:`personagap.analysis.ci_rule.cluster_estimate` on the study's users, as the reports print it). The stored
  users are a sample too, and with uneven users their between-user variance is usually below the population's, so
  each study also gets a plausible population variance (:func:`variance_ratios`: a scaled inverse chi-square on the
  CI rule's Satterthwaite degrees of freedom) and the assurance is predictive: over studies and over what the stored
  users leave unknown (issue 30; ``benchmarks/calibration_plan.py`` measures it world by world). The budget is the
  smallest ``n`` at which at least ``assurance`` of the simulated studies reach the target (bracketed from the
  square-root law, then bisected); its range is the budget at the 10th and 90th percentiles of the plausible
  variances. A half-width is precision, not coverage: a 95% interval of the target width still misses the truth 5%
  of the time.
* **Alternative-annotator test power** — how many items per annotator until the judge passes the test in 80% of
  simulated studies at its current advantage? The current advantage and winning rate are the report's own (the
  scale's scoring: :func:`personagap.analysis.panel.alt_test_scoring`); a simulated study draws each tested
  annotator's users (per-user means, as the test reads them) and runs the test (t-tests, Benjamini–Yekutieli,
  winning rate >= 0.5) exactly as :mod:`~personagap.analysis.alt_test`.

Both read what the reports read (:func:`plan_from_counts`): per-user counts of every judge against the reference,
and the labels of items several humans labelled, never every label. Both use common random numbers (one seed for
every candidate size), so the search is monotone in practice and a rerun gives the same budget.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from personagap.analysis.aggregated import JUDGE_KEYS, user_tables
from personagap.analysis.agreement import (
    DEFAULT_SEED,
    MIN_USERS_FOR_CI,
    FloatArray,
    cluster_estimate,
    estimate,
    get_metric,
    leave_one_out,
)
from personagap.analysis.alt_test import (
    DEFAULT_EPSILON,
    DEFAULT_Q,
    MIN_HUMANS_PER_ITEM,
    MIN_ITEMS_PER_ANNOTATOR,
    Indicators,
    Scoring,
    alt_test_rows,
    benjamini_yekutieli,
    indicators,
    one_sided_p_rows,
)
from personagap.analysis.comparable import judge_display
from personagap.analysis.estimates import too_few_users_note
from personagap.analysis.headline import headline_metric
from personagap.analysis.panel import alt_test_scoring, scored_labels
from personagap.analysis.robust import individual_humans, judge_labels
from personagap.records import DatasetScale
from personagap.scales import on_scale
from personagap.vocabulary import HumanSet

DEFAULT_HALFWIDTH = 0.05
DEFAULT_ASSURANCE = 0.8
#: The budget's range: the budgets at these percentiles of the plausible between-user variances.
RANGE_PERCENTILES = (10.0, 90.0)
HALFWIDTH_IS_NOT_COVERAGE = ("A half-width is precision, not coverage: a 95% interval of the target width still "
                             "misses the true figure 5% of the time (more with few users: see the README's "
                             "calibration table).")
DEFAULT_POWER = 0.8
DEFAULT_SIMULATIONS = 100
MAX_USERS = 100_000
MAX_ITEMS_PER_ANNOTATOR = 20_000


class KappaBudget(BaseModel):
    """Users and items needed for one judge's headline agreement CI to reach a half-width."""

    judge: str
    dataset: str
    rater_kind: str
    humans: HumanSet
    metric: str = Field(default="kappa", description="The figure sized: the scale's headline agreement, "
                                                     "'weighted_kappa' (quadratic) on ordinal scales, else 'kappa'.")
    scale: str | None = Field(default=None, description="The dataset's scale kind (nominal, ordinal, pairwise).")
    n_users: int
    n_items: int
    kappa: float = Field(description="The headline figure now (``metric``: weighted kappa on ordinal scales).")
    halfwidth: float = Field(description="Half-width of the current 95% CI, as the report prints it (the one CI "
                                         "rule: NaN below MIN_USERS_FOR_CI users).")
    target_halfwidth: float
    assurance: float = Field(description="Target share of simulated studies whose half-width is <= target.")
    users_needed: int | None = Field(description="Smallest number of users at which at least `assurance` of "
                                                 "simulated studies reach the target half-width.")
    users_needed_range: list[int | None] = Field(
        default_factory=list, description="users_needed if the population's between-user variance were the 10th or "
                                          "the 90th percentile of its plausible values (variance_factors; None: "
                                          "beyond reach).")
    range_resamples: int = Field(default=0, description="Plausible between-user variances drawn (one per simulated "
                                                        "study) behind variance_factors and the range.")
    variance_df: float | None = Field(default=None, description="Degrees of freedom of the stored users' variance "
                                                                "(Satterthwaite, the CI rule's): few when a few users "
                                                                "carry it, and the plausible variances spread wide.")
    variance_factors: list[float] | None = Field(
        default=None, description="10th, 50th and 90th percentiles of the population's between-user variance as a "
                                  "multiple of the stored users' (df / chi2_df on variance_df degrees of freedom); "
                                  "the plan is sized over all of them, not for the stored one.")
    projected_assurance: float | None = Field(default=None, description="Simulated share of studies reaching the "
                                                                        "target at users_needed, each with its own "
                                                                        "plausible between-user variance (what the "
                                                                        "plan promises: >= assurance).")
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
    scoring: Scoring = Field(default="accuracy", description="How the test scores alignment on the dataset's scale: "
                                                            "'neg_rmse' on ordinal scales, else 'accuracy'.")
    epsilon: float
    n_annotators: int = 0
    items_per_annotator: int = Field(default=0, description="Median items per tested annotator now.")
    advantage_probability: float | None = Field(default=None, description="The report's advantage probability (its "
                                                                          "own test), or, where the report tests no "
                                                                          "annotator, that of the simulated ones.")
    winning_rate: float | None = Field(default=None, description="The report's winning rate now (None where it tests "
                                                                 "no annotator).")
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


@dataclass(frozen=True)
class Figure:
    """A registered agreement figure as a function of confusion-table totals (vectorised over leading axes)."""

    metric: str = "kappa"
    levels: tuple[float, ...] | None = None
    """The ordinal levels' values, for figures that read them (weighted kappa); None: not read."""

    def __call__(self, totals: FloatArray) -> FloatArray:
        """The figure of ``totals`` ``(..., K, K)``."""
        return get_metric(self.metric).on(totals, self.levels)


KAPPA = Figure()


# --------------------------------------------------------------------------- the between-user variance

def jackknife_variance(tables: FloatArray, figure: Figure = KAPPA) -> tuple[float, float]:
    """The one CI rule's variance of ``figure`` over these users, and how many users it rests on.

    The variance is ``(U - 1) / U * sum d_u^2`` with ``d_u`` the leave-one-user-out figures' deviations from their
    mean; its degrees of freedom are Satterthwaite's ``(sum d_u^2)^2 / sum d_u^4`` (at most ``U - 1``), the CI
    rule's own: few when a few users (heavy ones, ones unlike the rest, the holders of rare events) carry it.

    Returns:
        ``(variance, degrees of freedom)``; NaN variance when the figure or some leave-one-user-out figure is
        undefined (the rule then prints no interval); ``U - 1`` degrees of freedom when every ``d_u`` is 0.
    """
    point, theta = leave_one_out(figure, tables)
    n = theta.size
    if math.isnan(point) or not np.isfinite(theta).all() or n < 2:
        return math.nan, math.nan
    d = theta - theta.mean()
    square, fourth = float((d * d).sum()), float((d**4).sum())
    df = float(n - 1) if fourth == 0 else min(float(n - 1), square * square / fourth)
    return (n - 1) / n * square, df


def variance_ratios(tables: FloatArray, *, simulations: int = DEFAULT_SIMULATIONS, seed: int = DEFAULT_SEED,
                    figure: Figure = KAPPA) -> FloatArray:
    """Plausible between-user variances of the population, as multiples of the stored users' own: one per study.

    The stored users are a sample, and with uneven users (a few heavy ones, ones unlike the rest, rare events) their
    variance is usually *below* the population's: the users that make it large are the ones a pilot tends to miss.
    Sizing from the stored variance (the plug-in) falls well short of the promise there; a fixed upper bound on it
    delivered 96% on balanced data and 70% with heterogeneous users (issues 21, 30). Here every simulated study gets
    its own population variance from the predictive distribution of a variance estimated on ``df`` degrees of
    freedom, ``V x df / chi2_df`` (the scaled inverse chi-square: the posterior of a normal variance under the
    reference prior, as in sizing from a pilot's variance), with ``df`` the Satterthwaite degrees of freedom of the
    stored users' jackknife variance (:func:`jackknife_variance`, the CI rule's own). With balanced users ``df`` is
    a fair share of the users (about ``U / 3`` for normal deviations) and the variances spread little; when a few
    users carry the variance ``df`` is small and the spread wide, so the plan grows where the stored users say least
    about the population. Counting users that carry the variance understates how well a balanced variance is known,
    so balanced data get more than promised (0.86-0.93 in ``benchmarks/calibration_plan_table.md``); 20-user pilots
    with very unequal item counts, which got less (0.69-0.73), now get no plan (the CI rule gives them no
    interval). (The basic bootstrap, ``V / V*`` over resamples of the stored users, was tried first: it cannot see
    heavier tails than the pilot's and delivered 0.66-0.73 on the skewed and unequal worlds.)

    Returns:
        ``(simulations,)`` ratios ``df / chi2_df`` (seeded); all 1 where the stored variance is zero or undefined
        (no interval to scale).
    """
    variance, df = jackknife_variance(np.asarray(tables, dtype=float), figure)
    # Identical users leave-one-out to the same figure up to rounding: no spread to scale (the CI rule prints none).
    if not math.isfinite(variance) or variance <= 1e-24:
        return np.ones(simulations)
    draws = np.random.default_rng([seed, 2]).chisquare(df, size=simulations)
    with np.errstate(divide="ignore"):  # a zero draw: a study with no bound on its variance, never reached
        return np.asarray(df / draws, dtype=float)


# --------------------------------------------------------------------------- simulated studies

def study_halfwidths(tables: FloatArray, n_users: int, *, simulations: int = DEFAULT_SIMULATIONS,
                     seed: int = DEFAULT_SEED, level: float = 0.95, figure: Figure = KAPPA,
                     ratios: FloatArray | None = None) -> FloatArray:
    """CI half-widths of the headline figure in simulated studies of ``n_users`` users drawn from the stored ones.

    Each study's interval is the one CI rule on its own users, as the reports print it
    (:func:`~personagap.analysis.ci_rule.cluster_estimate` with the figure's range: a user drawn twice is left out
    twice, as in a study holding two such users), so no interval where the rule prints none.
    Its half-width is then scaled by the square root of the study's variance ratio (:func:`variance_ratios`):
    a half-width grows with the square root of the between-user variance.

    Args:
        tables: Per-user confusion tables ``(U, K, K)`` of the judge against the human reference.
        n_users: Users in each simulated study.
        simulations: Simulated studies.
        seed: Seed of the simulation: study ``s`` draws from its own stream, so a study of ``n + 1`` users holds
            the ``n`` users of the ``n``-user study (common random numbers keep the search monotone).
        level: Confidence level.
        figure: The figure (kappa, or weighted kappa with the scale's levels).
        ratios: ``(simulations,)`` variance ratios; None: the stored users' variance as it is (the plug-in).

    Returns:
        ``(simulations,)`` half-widths; NaN or inf where a study has no interval.
    """
    t = np.asarray(tables, dtype=float)
    users = t.shape[0]
    bounds = get_metric(figure.metric).bounds
    out = np.empty(simulations)
    for s in range(simulations):
        drawn = t[np.random.default_rng([seed, s]).integers(0, users, size=n_users)]
        # The interval exactly as a report prints it (its range, its transform, its degrees of freedom).
        e = cluster_estimate(figure, drawn, level=level, bounds=bounds)
        half = (e.ci[1] - e.ci[0]) / 2.0
        with np.errstate(invalid="ignore"):  # 0 x inf: a degenerate study, NaN, not reached
            out[s] = half if ratios is None else half * math.sqrt(float(ratios[s]))
    return out


def simulated_halfwidth(tables: FloatArray, n_users: int, *, simulations: int = DEFAULT_SIMULATIONS,
                        seed: int = DEFAULT_SEED, level: float = 0.95, figure: Figure = KAPPA,
                        ratios: FloatArray | None = None) -> float:
    """Median half-width of :func:`study_halfwidths` (NaN when no study has an interval)."""
    widths = study_halfwidths(tables, n_users, simulations=simulations, seed=seed, level=level, figure=figure,
                              ratios=ratios)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # every study without an interval: NaN, no budget
        return float(np.nanmedian(widths))


def reach_share(tables: FloatArray, n_users: int, target: float, *, simulations: int = DEFAULT_SIMULATIONS,
                seed: int = DEFAULT_SEED, level: float = 0.95, figure: Figure = KAPPA,
                ratios: FloatArray | None = None) -> float:
    """Share of simulated studies of ``n_users`` users whose CI half-width is at most ``target``.

    A study without an interval (too few users, or the figure undefined without some user) does not reach it.
    """
    widths = study_halfwidths(tables, n_users, simulations=simulations, seed=seed, level=level, figure=figure,
                              ratios=ratios)
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


def users_for_assurance(tables: FloatArray, halfwidth: float, *, target: float, assurance: float,
                        simulations: int, seed: int, level: float, figure: Figure = KAPPA,
                        ratios: FloatArray | None = None, raw: Callable[[int], FloatArray] | None = None,
                        guess: int | None = None) -> int | None:
    """Smallest number of users at which ``assurance`` of simulated studies reach ``target`` (None: beyond reach).

    Args:
        tables: Per-user tables ``(U, K, K)``.
        halfwidth: Their own current half-width (the search starts from the square-root law).
        target: Target half-width.
        assurance: Required share of studies.
        simulations: Simulated studies per candidate size.
        seed: Seed (the same for every size: common random numbers keep the search monotone in practice).
        level: Confidence level.
        figure: The figure sized.
        ratios: Per study, its between-user variance over the stored one (:func:`variance_ratios`); None: 1.
        raw: Size -> the studies' unscaled half-widths (:func:`study_halfwidths` without ratios), when the
            caller keeps them to search several times over the same studies; None: simulated here.
        guess: Where the search starts; None: the square-root law from ``halfwidth``.
    """
    def ok(n: int) -> bool:
        if raw is None:
            share = reach_share(tables, n, target, simulations=simulations, seed=seed, level=level, figure=figure,
                                ratios=ratios)
        else:
            with np.errstate(invalid="ignore"):  # 0 x inf: a degenerate study, not reached
                widths = raw(n) * (1.0 if ratios is None else np.sqrt(ratios))
            share = float(np.mean(np.nan_to_num(widths, nan=np.inf) <= target))
        return share >= assurance

    if guess is None:
        spread = 1.0 if ratios is None else float(np.median(ratios))
        guess = (math.ceil(tables.shape[0] * spread * (halfwidth / target) ** 2) if math.isfinite(spread)
                 else MAX_USERS)
    # A study of fewer users would have no CI at all, so the smallest budget is the CI rule's minimum.
    return smallest_sufficient(ok, guess, lowest=MIN_USERS_FOR_CI, highest=MAX_USERS)


@dataclass(frozen=True)
class KappaPlan:
    """What :func:`kappa_budget` finds for one judge."""

    kappa: float
    halfwidth: float
    users_needed: int | None
    projected_halfwidth: float | None
    projected_assurance: float | None
    users_range: tuple[int | None, int | None]
    variance_resamples: int
    variance_factors: tuple[float, float, float] | None = None
    metric: str = "kappa"
    variance_df: float | None = None
    reason: str = ""
    """Why the stored users have no interval, in the CI rule's words (e.g. items per user too unequal for their
    number), when that is why there is no plan."""


def kappa_budget(tables: FloatArray, *, target: float = DEFAULT_HALFWIDTH, assurance: float = DEFAULT_ASSURANCE,
                 simulations: int = DEFAULT_SIMULATIONS, seed: int = DEFAULT_SEED, level: float = 0.95,
                 metric: str = "kappa", levels: Iterable[float] | None = None) -> KappaPlan:
    """The headline figure now, the users needed for ``assurance`` of studies to reach ``target``, and a range.

    Args:
        tables: Per-user confusion tables ``(U, K, K)`` over the dataset's scale.
        target: Target half-width of the 95% CI.
        assurance: Share of studies that must reach it (over studies and over the population's between-user
            variance: :func:`variance_ratios`).
        simulations: Simulated studies per candidate size (and resamples of the stored users).
        seed: Seed of every simulation.
        level: Confidence level.
        metric: ``kappa`` or ``weighted_kappa`` (:func:`headline_metric` of the scale).
        levels: The ordinal levels' values, for ``weighted_kappa``.

    Returns:
        The plan; halfwidth NaN and users_needed None below
        :data:`~personagap.analysis.agreement.MIN_USERS_FOR_CI` users (no CI); users_needed None when the
        figure is undefined or constant, or even :data:`MAX_USERS` users would not do. The range is the budget
        if the population's between-user variance were the 10th or the 90th percentile of its plausible values
        (the stored users' variance times those percentiles of :func:`variance_ratios`).
    """
    t = np.asarray(tables, dtype=float)
    figure = Figure(metric, None if levels is None else tuple(float(v) for v in levels))
    now = estimate(t, metric, level=level, levels=figure.levels)
    halfwidth = (now.ci[1] - now.ci[0]) / 2.0
    nothing = KappaPlan(now.value, halfwidth, None, None, None, (None, None), 0, metric=metric, reason=now.reason)
    if math.isnan(halfwidth) or halfwidth == 0:  # too few users for a CI, or the figure undefined/constant
        return nothing
    ratios = variance_ratios(t, simulations=simulations, seed=seed, figure=figure)
    settings: dict[str, Any] = {"simulations": simulations, "seed": seed, "level": level, "figure": figure}
    seen: dict[int, FloatArray] = {}

    def raw(n: int) -> FloatArray:
        # The same studies serve the budget and its range (common random numbers): simulate each size once.
        if n not in seen:
            seen[n] = study_halfwidths(t, n, **settings)
        return seen[n]

    needed = users_for_assurance(t, halfwidth, target=target, assurance=assurance, ratios=ratios, raw=raw,
                                 **settings)
    if needed is None:
        return nothing
    with np.errstate(invalid="ignore"):  # 0 x inf: a degenerate study, not reached
        widths = raw(needed) * np.sqrt(ratios)
    reached = float(np.mean(np.nan_to_num(widths, nan=np.inf) <= target))
    low, mid, high = (float(v) for v in np.percentile(ratios, (RANGE_PERCENTILES[0], 50.0, RANGE_PERCENTILES[1]),
                                                   method="inverted_cdf"))
    # The half-width grows with the square root of the variance, so the budget roughly with the variance itself.
    bounds = tuple(None if not math.isfinite(f) else users_for_assurance(
        t, halfwidth, target=target, assurance=assurance, ratios=np.full(simulations, f), raw=raw,
        guess=max(MIN_USERS_FOR_CI, round(needed * f / max(mid, 1e-12))), **settings) for f in (low, high))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        median = float(np.nanmedian(widths))
    return KappaPlan(now.value, halfwidth, needed, median, reached, (bounds[0], bounds[1]), simulations,
                     (low, mid, high), metric, jackknife_variance(t, figure)[1])


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


def _alt_budget(ind: Indicators, base: dict[str, Any], *, report: Mapping[str, Any] | None, scoring: Scoring,
                epsilon: float, q: float, power: float, simulations: int, seed: int, min_items: int) -> AltTestBudget:
    current = alt_test_power(ind, epsilon=epsilon, q=q, simulations=simulations, seed=seed)
    now = int(np.median([len(a.items) for a in ind.annotators]))
    tested = report is not None and bool(report.get("applicable"))
    # The figures the report prints, from the report's own test; the simulation's annotators otherwise.
    advantage = (float(report["advantage_probability"]) if report is not None and tested
                 else float(np.mean([a.judge_wins.mean() for a in ind.annotators])))

    def ok(m: int) -> bool:
        return alt_test_power(ind, m, epsilon=epsilon, q=q, simulations=simulations, seed=seed) >= power

    needed = smallest_sufficient(ok, now, lowest=min_items, highest=MAX_ITEMS_PER_ANNOTATOR)
    reason = None
    if needed is None:
        means = [float(a.cluster_difference.mean()) for a in ind.annotators]
        reason = (f"{power:.0%} power is out of reach: the judge trails every annotator by more than epsilon "
                  f"{epsilon:g} already (mean W_judge - W_human {max(means):+.3f} at best), so more items only "
                  "make the test surer that it does not pass" if max(means) <= -epsilon else
                  f"{power:.0%} power is out of reach at the current advantage (even {MAX_ITEMS_PER_ANNOTATOR} "
                  "items per annotator): the judge does not beat enough annotators by the margin")
    return AltTestBudget(
        **base, applicable=True, scoring=scoring, epsilon=epsilon, n_annotators=len(ind.annotators),
        items_per_annotator=now, advantage_probability=advantage,
        winning_rate=float(report["winning_rate"]) if report is not None and tested else None,
        current_power=current, target_power=power, items_per_annotator_needed=needed,
        additional_items_per_annotator=None if needed is None else max(0, needed - now),
        projected_power=None if needed is None else alt_test_power(ind, needed, epsilon=epsilon, q=q,
                                                                   simulations=simulations, seed=seed),
        reason=reason)


def alt_test_budgets(labels: pd.DataFrame, dataset: str, *, humans: HumanSet, scale: DatasetScale, power: float,
                     epsilon: float, q: float, min_humans_per_item: int, min_items_per_annotator: int,
                     simulations: int, seed: int) -> list[AltTestBudget]:
    """Every judge's alternative-annotator budget on one dataset, scored by the scale's rule as the report is.

    The current advantage and winning rate are the report's own (:func:`~personagap.analysis.alt_test.alt_test_rows`
    on :func:`~personagap.analysis.panel.scored_labels`, with :func:`~personagap.analysis.panel.alt_test_scoring`:
    negative RMSE on ordinal scales, accuracy on categories). Studies are simulated from the annotators the report
    tests, or, where it tests none (too few items each), from every annotator with two or more items.

    Args:
        labels: The labels the test reads (at least every label on items several humans labelled, and each judge's
            labels there: :func:`personagap.store.aggregates.multi_human_labels`, or every label of the dataset).
        dataset: Dataset key.
        humans: Blind or anchored annotators.
        scale: The dataset's scale.
        power: Target power.
        epsilon: The test's margin.
        q: The test's BY false discovery rate.
        min_humans_per_item: The test's minimum humans per item.
        min_items_per_annotator: The test's minimum items per annotator (also the smallest budget offered).
        simulations: Simulated studies per candidate size.
        seed: Seed of every simulation.
    """
    scoring = alt_test_scoring(scale)
    scored = scored_labels(labels[labels["dataset"] == dataset], scale)
    reports = {(r["judge"], r["rater_kind"]): r for r in alt_test_rows(
        scored, dataset, humans=humans, scoring=scoring, epsilon=epsilon, q=q, min_humans_per_item=min_humans_per_item,
        min_items_per_annotator=min_items_per_annotator)}
    people = individual_humans(scored, humans)
    out: list[AltTestBudget] = []
    for j in judge_labels(scored):
        base: dict[str, Any] = {"judge": j.judge, "dataset": dataset, "rater_kind": j.rater_kind, "humans": humans}
        report = reports.get((j.judge, j.rater_kind))
        judged = dict(zip(j.labels.index.tolist(), j.labels.tolist(), strict=True))
        ind = indicators(judged, people, scoring=scoring, min_humans_per_item=min_humans_per_item,
                         min_items_per_annotator=1)
        as_reported = [a for a in ind.annotators if len(a.items) >= min_items_per_annotator]
        tested = as_reported or [a for a in ind.annotators if len(a.items) >= 2]
        if not tested:
            out.append(AltTestBudget(
                **base, applicable=False, scoring=scoring, epsilon=epsilon, target_power=power,
                reason=f"no item has {min_humans_per_item}+ {humans} human labels and a judge label; "
                       "a budget needs some multi-rater items to simulate from"))
            continue
        out.append(_alt_budget(Indicators(tested, ind.n_items, ind.skipped, ind.cluster_unit), base, report=report,
                               scoring=scoring, epsilon=epsilon, q=q, power=power, simulations=simulations,
                               seed=seed, min_items=min_items_per_annotator))
    return out


# --------------------------------------------------------------------------- one stage

def judge_tables(counts: pd.DataFrame, scale: DatasetScale) -> Iterator[tuple[str, str, FloatArray, int]]:
    """Per judge, its per-user tables against the reference over the scale, as the report's judge rows build them.

    Args:
        counts: One dataset's judge counts (:func:`personagap.store.aggregates.label_counts`' columns).
        scale: The dataset's scale: a reference off it answers another question, and those items count as
            unmatched (as in the report).

    Yields:
        ``(judge display name, rater kind, tables (U, K, K), items with both labels)``, judges in key order.
    """
    if counts.empty:
        return
    counts = counts.assign(human=on_scale(counts["human"], scale, strict=False).where(counts["human"].notna()))
    for (rater, kind, condition), rows in counts.groupby(JUDGE_KEYS, sort=True):
        joined = rows[rows["human"].notna()]
        if joined.empty:
            continue
        tables, _ = user_tables(joined, scale)
        yield judge_display(str(rater), str(condition)), str(kind), tables, int(joined["n"].sum())


def plan_from_counts(counts: Callable[[str], pd.DataFrame], alt_labels: Callable[[str], pd.DataFrame],
                     datasets: Iterable[str], *, scales: Mapping[str, DatasetScale], stage: str = "",
                     humans: HumanSet = "blind", halfwidth: float = DEFAULT_HALFWIDTH,
                     assurance: float = DEFAULT_ASSURANCE, power: float = DEFAULT_POWER,
                     epsilon: float = DEFAULT_EPSILON, q: float = DEFAULT_Q,
                     min_humans_per_item: int = MIN_HUMANS_PER_ITEM,
                     min_items_per_annotator: int = MIN_ITEMS_PER_ANNOTATOR,
                     simulations: int = DEFAULT_SIMULATIONS, seed: int = DEFAULT_SEED) -> Plan:
    """The label budget of every judge of one stage's datasets: the one path behind ``personagap plan``.

    Args:
        counts: Dataset -> its judge counts against the ``humans`` reference
            (:func:`personagap.store.aggregates.label_counts`' judge rows).
        alt_labels: Dataset -> the labels the alternative-annotator test reads
            (:func:`personagap.store.aggregates.multi_human_labels`).
        datasets: Datasets to plan.
        scales: Dataset -> its scale (:func:`personagap.datasets.dataset_records`): it picks the headline figure
            (:func:`headline_metric`) and the test's scoring (:func:`~personagap.analysis.panel.alt_test_scoring`).
        stage: The stage's name (recorded).
        humans: Plan against blind (default) or anchored humans.
        halfwidth: Target half-width of the headline figure's CI.
        assurance: Share of studies that must reach it.
        power: Target power of the alternative-annotator test.
        epsilon: The test's cost–benefit margin.
        q: The test's BY false discovery rate.
        min_humans_per_item: The test's minimum humans per item.
        min_items_per_annotator: The test's minimum items per annotator (also the smallest budget offered).
        simulations: Simulated studies per candidate size.
        seed: Seed of every simulation.
    """
    kappa_rows: list[KappaBudget] = []
    alt_rows: list[AltTestBudget] = []
    for dataset in datasets:
        scale = scales[dataset]
        metric = headline_metric(scale)
        for judge, kind, tables, n_items in judge_tables(counts(dataset), scale):
            base: dict[str, Any] = {"judge": judge, "dataset": dataset, "rater_kind": kind, "humans": humans}
            kp = kappa_budget(tables, target=halfwidth, assurance=assurance, simulations=simulations, seed=seed,
                              metric=metric, levels=scale.levels() if scale.ordinal else None)
            needed, hw, n_users = kp.users_needed, kp.halfwidth, tables.shape[0]
            per_user = n_items / n_users
            reason = None if needed is not None else (
                too_few_users_note(n_users) or kp.reason or (f"{metric} is undefined or constant on these users"
                if math.isnan(hw) or hw == 0 else f"more than {MAX_USERS} users would be needed"))
            kappa_rows.append(KappaBudget(
                **base, metric=metric, scale=scale.kind, n_users=n_users, n_items=n_items, kappa=kp.kappa,
                halfwidth=hw, target_halfwidth=halfwidth, assurance=assurance, users_needed=needed,
                users_needed_range=list(kp.users_range) if needed is not None else [],
                range_resamples=kp.variance_resamples, projected_assurance=kp.projected_assurance,
                variance_factors=list(kp.variance_factors) if needed is not None and kp.variance_factors else None,
                variance_df=kp.variance_df,
                additional_users=None if needed is None else max(0, needed - n_users),
                items_needed=None if needed is None else math.ceil(needed * per_user),
                additional_items=None if needed is None else max(0, math.ceil(needed * per_user) - n_items),
                projected_halfwidth=kp.projected_halfwidth, reason=reason))
        alt_rows += alt_test_budgets(alt_labels(dataset), dataset, humans=humans, scale=scale, power=power,
                                     epsilon=epsilon, q=q, min_humans_per_item=min_humans_per_item,
                                     min_items_per_annotator=min_items_per_annotator, simulations=simulations,
                                     seed=seed)
    return Plan(stage=stage, humans=humans, target_halfwidth=halfwidth, assurance=assurance, target_power=power,
                seed=seed, simulations=simulations, kappa=kappa_rows, alt_test=alt_rows)
