"""Corrected estimates of the human rate when a judge labels many items and humans only some.

The naive judge yes-rate is biased by the judge's errors: a judge that says "yes" to 45% of attributes
when humans say "yes" to 19% overstates relevance more than twofold. Given items both labelled, we
report, per judge and beside the classical human-only estimate:

* **naive** — the judge's rate of the positive label over every item it labelled (an interval for the
  judge's own rate, not the humans').
* **Rogan–Gladen** — ``(naive + specificity - 1) / (sensitivity + specificity - 1)``, clipped to
  [0, 1] (Rogan & Gladen 1978), with sensitivity and specificity measured against the human reference
  on the items both labelled; each leave-one-user-out figure re-measures all three.
* **PPI++** — prediction-powered inference for the mean (Angelopoulos et al. 2023), user-clustered
  (:mod:`personagap.analysis.ppi`): the human labels on the labelled items, the judge's labels on them and on
  the items humans did not label, with the power-tuning ``lam`` chosen for the user-clustered variance.
* **human only** — the share of the positive label among the human reference labels.

Every interval is the one CI rule, :func:`~personagap.analysis.agreement.cluster_estimate`, over per-user
additive sums: whole users are the independent units (one user's items are not). No interval below
:data:`~personagap.analysis.agreement.MIN_USERS_FOR_CI` users, and none for the human-only, Rogan–Gladen and
PPI++ figures below :data:`MIN_LABELLED_USERS` users with human labels (their human part rests on those users
only); ``ci_note`` says why a row lacks one, ``ci_undefined`` counts the users whose removal leaves a figure
undefined (no interval then).

The quantity is the share of one label (``positive``, default "yes") among the human reference labels;
any other label counts as not positive. Human and judge labels are chosen by
:mod:`personagap.analysis.comparable`; the rows are computed from the store's counts
(:func:`personagap.analysis.aggregated.estimate_rows_from_counts`, through :func:`estimate_row` here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, Field

from personagap.analysis.agreement import (
    MIN_USERS_FOR_CI,
    Estimate,
    ci_list,
    cluster_estimate,
)
from personagap.analysis.arrays import FloatArray
from personagap.analysis.arrays import safe_div as _div
from personagap.analysis.ci_rule import MIN_LABELLED_USERS as _MIN_LABELLED_USERS
from personagap.analysis.ppi import labelled_users, ppi_lambda, ppi_per_user, ppi_stat
from personagap.text import number
from personagap.vocabulary import HumanSet

# The minimum of labelled users is a rule of the one CI rule module; re-exported for this module's callers.
MIN_LABELLED_USERS = _MIN_LABELLED_USERS
RATE = (0.0, 1.0)
"""The range of the naive, human-only and PPI++ rates: their intervals are built on its logit scale."""


class EstimateRow(BaseModel):
    """One judge's corrected estimates of the human rate of ``quantity`` on one dataset."""

    judge: str
    dataset: str
    quantity: str = Field(description="What is estimated, e.g. 'yes_rate' = share of human 'yes' labels.")
    rater_kind: str = ""
    humans: HumanSet = "blind"
    naive: float = Field(description="The judge's rate over every item it labelled.")
    naive_ci: list[float] = Field(description="User-clustered CI of the judge's own rate.")
    sensitivity: float = Field(description="P(judge positive | human positive) on items both labelled.")
    specificity: float = Field(description="P(judge not positive | human not positive) on items both labelled.")
    rogan_gladen: float
    rogan_gladen_ci: list[float] = Field(description="User-clustered CI.")
    ppi: float = Field(description="User-clustered PPI++ estimate of the human rate.")
    ppi_ci: list[float] = Field(description="User-clustered CI (leave-one-user-out, lam re-tuned each time).")
    ppi_lambda: float = Field(description="PPI++'s power tuning: 0 = human labels only, 1 = plain PPI.")
    human_only: float
    human_only_ci: list[float] = Field(description="User-clustered CI.")
    n_human: int = Field(description="Items with a human reference label.")
    n_judge: int = Field(description="Items the judge labelled (parsed).")
    n_both: int = Field(description="Items with both: where sensitivity, specificity and PPI's rectifier come from.")
    n_users: int
    n_labelled_users: int = Field(description="Users with items both labelled (the rectifier's clusters).")
    ci_undefined: dict[str, int] = Field(
        default_factory=dict, description="Per CI (naive, rogan_gladen, ppi, human_only), the users whose removal "
                                          "leaves the figure undefined (the CI is then not given).")
    ci_note: str | None = Field(default=None, description="Why some CI of the row is not given, else null.")


def too_few_users_note(n_users: int) -> str | None:
    """Why a figure over ``n_users`` users has no CI (the one CI rule), or None when it has one."""
    if n_users >= MIN_USERS_FOR_CI:
        return None
    return f"too few users for a CI: {n_users} user{'s' if n_users != 1 else ''}, {MIN_USERS_FOR_CI} needed"


def too_few_labelled_note(n_labelled: int, figures: str) -> str | None:
    """Why ``figures`` have no CI: too few users with human labels, or None when there are enough.

    Human only, Rogan–Gladen's sensitivity and specificity and PPI's rectifier are measured on the
    human-labelled users only: :data:`MIN_LABELLED_USERS` of them are needed, however many users the judge labelled.
    """
    if n_labelled >= MIN_LABELLED_USERS:
        return None
    return (f"no {figures} CI: {n_labelled} user{'s' if n_labelled != 1 else ''} with human labels, "
            f"{MIN_LABELLED_USERS} needed")


def rogan_gladen(apparent: npt.ArrayLike, sensitivity: npt.ArrayLike, specificity: npt.ArrayLike) -> FloatArray:
    """The Rogan–Gladen corrected prevalence, clipped to [0, 1]; NaN where ``se + sp = 1`` (an uninformative judge).

    Args:
        apparent: The judge's (apparent) positive rate.
        sensitivity: P(judge positive | truly positive).
        specificity: P(judge negative | truly negative).
    """
    p, se, sp = (np.asarray(x, dtype=float) for x in (apparent, sensitivity, specificity))
    denom = se + sp - 1.0
    out: FloatArray = np.clip(_div(p + sp - 1.0, np.where(np.abs(denom) < 1e-12, 0.0, denom)), 0.0, 1.0)
    return out


# Columns of the per-user counts: the bootstrap is a weighted sum of them (as the confusion tables).
_JUDGE_POS, _JUDGE_N, _TP, _FN, _FP, _TN = range(6)


def _rates(counts: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    c = np.asarray(counts, dtype=float)
    naive = _div(c[..., _JUDGE_POS], c[..., _JUDGE_N])
    se = _div(c[..., _TP], c[..., _TP] + c[..., _FN])
    sp = _div(c[..., _TN], c[..., _TN] + c[..., _FP])
    return naive, se, sp, rogan_gladen(naive, se, sp)


def ppi_user_sums(counts: FloatArray) -> FloatArray:
    """The per-user PPI++ arrays (:func:`personagap.analysis.ppi.ppi_per_user`) of per-user counts ``(U, 6)``.

    PPI's items are the judge's: users the judge labelled nothing of are left out (they carry no term).
    """
    c = np.asarray(counts, dtype=float)
    c = c[c[:, _JUDGE_N] > 0]
    both = c[:, _TP] + c[:, _FN] + c[:, _FP] + c[:, _TN]
    judge_pos_both = c[:, _TP] + c[:, _FP]
    return ppi_per_user(both, c[:, _TP] + c[:, _FN], judge_pos_both, c[:, _JUDGE_N] - both,
                        c[:, _JUDGE_POS] - judge_pos_both)


def _share(totals: FloatArray) -> FloatArray:
    return _div(totals[..., 0], totals[..., 1])


def human_rate_from_users(per_user: FloatArray, level: float = 0.95) -> Estimate:
    """The human-only rate and its user-clustered CI from per-user ``(positives, labels)`` ``(U, 2)``.

    No CI below :data:`MIN_LABELLED_USERS` users.
    """
    nan = float("nan")
    if np.asarray(per_user).shape[0] == 0:
        return Estimate(nan, (nan, nan), 0)
    return cluster_estimate(_share, per_user, level=level, bounds=RATE, min_users=MIN_LABELLED_USERS)


@dataclass(frozen=True)
class _JudgeFigures:
    naive: Estimate
    rogan_gladen: Estimate
    sensitivity: float
    specificity: float
    ppi: Estimate
    ppi_lambda: float
    n_labelled_users: int


def _judge_figures(counts: FloatArray, level: float) -> _JudgeFigures:
    # The one implementation behind both paths (labels in memory, the store's counts): per-user counts in, every
    # judge figure with its user-clustered CI out.
    _, se, sp, _ = (float(x) for x in _rates(counts.sum(axis=0)))
    naive = cluster_estimate(lambda t: _rates(t)[0], counts, level=level, bounds=RATE)
    ppi_users = ppi_user_sums(counts)
    n_labelled = labelled_users(ppi_users)
    rg = cluster_estimate(lambda t: _rates(t)[3], counts, level=level)
    # PPI++ estimates a rate: its interval is built on the logit scale of (0, 1) (the rule's transform). Without it
    # the symmetric interval covered 0.86-0.91 where "yes" is rare or heavy users differ, at 15-50 labelled users
    # (benchmarks/calibration_estimates_table.md, uneven worlds); a point or leave-one-out figure outside (0, 1)
    # then gets no interval, with the reason.
    ppi = cluster_estimate(ppi_stat, ppi_users, level=level, bounds=RATE)
    if n_labelled < MIN_LABELLED_USERS:
        # The corrections are measured on the labelled users: below the minimum of them, no interval.
        nan = (float("nan"), float("nan"))
        rg, ppi = replace(rg, ci=nan, reason=""), replace(ppi, ci=nan, reason="")
    return _JudgeFigures(naive, rg, se, sp, ppi, float(ppi_lambda(ppi_users.sum(axis=0))), n_labelled)


def estimate_row(counts: FloatArray, human: Estimate, *, judge: str, dataset: str, quantity: str, rater_kind: str,
                 humans: HumanSet, n_human: int, level: float = 0.95) -> EstimateRow:
    """One judge's row from its per-user counts ``(U, 6)`` (:func:`user_counts`' columns) and the human-only rate.

    Args:
        counts: Per-user counts of the judge's items and of the reference's, users in sorted id order.
        human: :func:`human_rate` of the dataset (the same for every judge).
        judge: Judge display name.
        dataset: Dataset key.
        quantity: What is estimated (e.g. ``yes_rate``).
        rater_kind: The judge's rater kind.
        humans: Which humans the reference came from.
        n_human: Items with a human reference label.
        level: Confidence level.
    """
    fig = _judge_figures(counts, level)
    # One reason per withheld interval; too few users in all withholds every one, so it says it alone.
    notes = [too_few_users_note(len(counts))]
    if notes[0] is None:
        notes = [too_few_labelled_note(human.n_clusters or 0, "human-only"),
                 too_few_labelled_note(fig.n_labelled_users, "Rogan-Gladen or PPI++")]
        # Enough users, yet no interval: the rule's own reason (no spread over users, a figure at its range's edge).
        notes += [f"no {name} CI: {e.reason}" for name, e in (("judge's own rate", fig.naive), ("human-only", human),
                                                              ("Rogan-Gladen", fig.rogan_gladen), ("PPI++", fig.ppi))
                  if e.reason and np.isnan(e.ci).any()]
    return EstimateRow(
        judge=judge, dataset=dataset, quantity=quantity, rater_kind=rater_kind, humans=humans,
        naive=fig.naive.value, naive_ci=ci_list(fig.naive), sensitivity=fig.sensitivity,
        specificity=fig.specificity, rogan_gladen=fig.rogan_gladen.value, rogan_gladen_ci=ci_list(fig.rogan_gladen),
        ppi=fig.ppi.value, ppi_ci=ci_list(fig.ppi), ppi_lambda=fig.ppi_lambda, human_only=human.value,
        human_only_ci=ci_list(human), n_human=n_human, n_judge=int(counts[:, _JUDGE_N].sum()),
        n_both=int(counts[:, _TP:].sum()), n_users=len(counts), n_labelled_users=fig.n_labelled_users,
        ci_undefined={"naive": fig.naive.n_undefined, "rogan_gladen": fig.rogan_gladen.n_undefined,
                      "ppi": fig.ppi.n_undefined, "human_only": human.n_undefined},
        ci_note="; ".join(n for n in notes if n) or None)


def estimate_line(e: Mapping[str, Any]) -> str:
    """One report line for an :class:`EstimateRow` dict: each estimate named by what it is, CIs user-clustered."""
    def fig(key: str) -> str:
        lo, hi = e.get(f"{key}_ci") or (None, None)
        ci = "" if lo is None or hi is None else f" [{number(lo, 2)}, {number(hi, 2)}]"
        return number(e.get(key), 2) + ci

    note = f"; {e['ci_note']}" if e.get("ci_note") else ""
    return (f"  {e['judge']} on {e['dataset']} ({e.get('humans', 'blind')} humans), {e['quantity']}: "
            f"judge's own rate {fig('naive')}; corrected with human labels: Rogan-Gladen (by the judge's sensitivity "
            f"and specificity) {fig('rogan_gladen')}, PPI++ (human labels plus the judge on unlabelled items) "
            f"{fig('ppi')}; human labels only {fig('human_only')} (CIs user-clustered; n human {e['n_human']}, "
            f"n judge {e['n_judge']}, {e.get('n_users', '?')} users, {e.get('n_labelled_users', '?')} with human "
            f"labels){note}")
