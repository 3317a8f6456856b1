"""Corrected estimates of the human rate when a judge labels many items and humans only some.

The naive judge yes-rate is biased by the judge's errors: a judge that says "yes" to 45% of attributes
when humans say "yes" to 19% overstates relevance more than twofold. Given items both labelled, we
report, per judge and beside the classical human-only estimate:

* **naive** — the judge's rate of the positive label over every item it labelled.
* **Rogan–Gladen** — ``(naive + specificity - 1) / (sensitivity + specificity - 1)``, clipped to
  [0, 1] (Rogan & Gladen 1978), with sensitivity and specificity measured against the human reference
  on the items both labelled. Its CI resamples whole users (the project's clustered bootstrap), so each
  resample re-measures the naive rate *and* the sensitivity and specificity: their uncertainty is in
  the interval.
* **PPI++** — prediction-powered inference for the mean (Angelopoulos et al. 2023, ``ppi_py``): the
  human labels on the labelled items, the judge's labels on them (the rectifier) and on the items
  humans did not label. Its CI is ppi_py's, which treats items as independent (it is not clustered).
* **human only** — the mean of the human reference with the clustered-bootstrap CI (and, for a
  like-for-like comparison with PPI, ppi_py's classical item-level interval).

Every user-clustered CI (naive, Rogan–Gladen, human only) follows the project's one CI rule: it is built by
:func:`~personagap.analysis.agreement.bootstrap_estimate` (no CI below
:data:`~personagap.analysis.agreement.MIN_USERS_FOR_CI` users, resamples where a figure is undefined counted
in ``ci_undefined``), and ``ci_note`` says why a row has none. ppi_py's intervals (``ppi_ci``,
``human_only_ci_iid``) are item-level, not a bootstrap over users, and stay as ppi_py gives them.

The quantity is the share of one label (``positive``, default "yes") among the human reference labels;
any other label counts as not positive. Human and judge labels are chosen by
:mod:`personagap.analysis.comparable` (via :mod:`personagap.analysis.robust`'s helpers).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import ppi_py
from pydantic import BaseModel, Field

from personagap.analysis.agreement import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    MIN_USERS_FOR_CI,
    Estimate,
    FloatArray,
    _div,
    bootstrap_estimate,
    bootstrap_tables,
    ci_list,
    json_safe_dict,
    resample_weights,
)
from personagap.analysis.robust import HumanSet, JudgeLabels, human_reference, judge_labels


class EstimateRow(BaseModel):
    """One judge's corrected estimates of the human rate of ``quantity`` on one dataset."""

    judge: str
    dataset: str
    quantity: str = Field(description="What is estimated, e.g. 'yes_rate' = share of human 'yes' labels.")
    rater_kind: str = ""
    humans: HumanSet = "blind"
    naive: float = Field(description="The judge's rate over every item it labelled.")
    naive_ci: list[float]
    sensitivity: float = Field(description="P(judge positive | human positive) on items both labelled.")
    specificity: float = Field(description="P(judge not positive | human not positive) on items both labelled.")
    rogan_gladen: float
    rogan_gladen_ci: list[float]
    ppi: float
    ppi_ci: list[float]
    human_only: float
    human_only_ci: list[float] = Field(description="User-clustered bootstrap CI.")
    human_only_ci_iid: list[float] = Field(description="Classical item-level CI (ppi_py), comparable to ppi_ci.")
    n_human: int = Field(description="Items with a human reference label.")
    n_judge: int = Field(description="Items the judge labelled (parsed).")
    n_both: int = Field(description="Items with both: where sensitivity, specificity and PPI's rectifier come from.")
    n_users: int
    ci_undefined: dict[str, int] = Field(
        default_factory=dict, description="Per bootstrap CI (naive, rogan_gladen, human_only), the resamples where "
                                          "the figure was undefined (left out of the interval).")
    ci_note: str | None = Field(default=None, description="Why the row has no CI (too few users), else null.")


def too_few_users_note(n_users: int) -> str | None:
    """Why a figure over ``n_users`` users has no CI (the one CI rule), or None when it has one."""
    if n_users >= MIN_USERS_FOR_CI:
        return None
    return f"too few users for a CI: {n_users} user{'s' if n_users != 1 else ''}, {MIN_USERS_FOR_CI} needed"


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


def sorted_codes(values: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[np.intp]]:
    """``np.unique(values, return_inverse=True)`` of user ids by hashing (sorting 10^5 strings took ~0.15 s a call).

    Returns:
        The distinct values in sorted order and each value's position among them.
    """
    codes, uniques = pd.factorize(np.asarray(values, dtype=object), sort=True)
    return np.asarray(uniques, dtype=object), codes.astype(np.intp)


def user_counts(judge: pd.Series, human: pd.Series, users: pd.Series,
                positive: str) -> tuple[FloatArray, npt.NDArray[Any]]:
    """Per-user counts ``(U, 6)`` behind the naive and Rogan–Gladen estimates, users in sorted id order.

    Args:
        judge: The judge's label per item id.
        human: The human reference label per item id.
        users: User id per item id (covering both).
        positive: The label whose rate is estimated.
    """
    items = judge.index.union(human.index)
    ids, index = sorted_codes(users.reindex(items).astype(str).to_numpy())
    j = judge.reindex(items)
    h = human.reindex(items)
    jpos, hpos = (j == positive).to_numpy(), (h == positive).to_numpy()
    jn, hn = j.notna().to_numpy(), h.notna().to_numpy()
    both = jn & hn
    cols = [jpos & jn, jn, both & jpos & hpos, both & ~jpos & hpos, both & jpos & ~hpos, both & ~jpos & ~hpos]
    counts = np.zeros((len(ids), len(cols)))
    for k, col in enumerate(cols):
        counts[:, k] = np.bincount(index, weights=col.astype(float), minlength=len(ids))
    return counts, ids


def _ppi(y: FloatArray, yhat: FloatArray, yhat_unlabeled: FloatArray, level: float) -> tuple[float, list[float]]:
    if y.size < 2:
        return float("nan"), [float("nan"), float("nan")]
    if yhat_unlabeled.size == 0:
        # Nothing beyond the labelled items: PPI++'s tuning then gives the classical estimate.
        lo, hi = ppi_py.classical_mean_ci(y, alpha=1.0 - level)
        return float(y.mean()), [float(np.ravel(lo)[0]), float(np.ravel(hi)[0])]
    point = ppi_py.ppi_mean_pointestimate(y, yhat, yhat_unlabeled)
    lo, hi = ppi_py.ppi_mean_ci(y, yhat, yhat_unlabeled, alpha=1.0 - level)
    return float(np.ravel(point)[0]), [float(np.ravel(lo)[0]), float(np.ravel(hi)[0])]


@lru_cache(maxsize=4)
def _resample_weights(n_clusters: int, n_resamples: int, seed: int) -> FloatArray:
    # The same draws for every judge of a dataset (a pure function of its arguments): drawn once, not per judge
    # (0.15 s each at 2,000 users). Read-only, as it is shared.
    weights = resample_weights(n_clusters, n_resamples, seed)
    weights.flags.writeable = False
    return weights


def human_rate(reference: pd.DataFrame, *, positive: str = "yes", n_resamples: int = DEFAULT_RESAMPLES,
               seed: int = DEFAULT_SEED, level: float = 0.95) -> tuple[Estimate, list[float]]:
    """The classical human-only estimate: the share of ``positive`` among the human reference labels.

    Returns:
        The user-clustered bootstrap :class:`~personagap.analysis.agreement.Estimate` (no CI below the minimum
        number of users) and ppi_py's classical item-level CI.
    """
    # Item order fixes the order of floating-point sums (ppi_py's variances): sort so a store read in any row order
    # (an export -> import round trip) gives identical figures.
    reference = reference.sort_index(kind="stable")
    y = (reference["label"] == positive).to_numpy(dtype=float)
    nan = float("nan")
    if y.size == 0:
        return Estimate(nan, (nan, nan), 0), [nan, nan]
    ids, index = sorted_codes(reference["user_id"].astype(str).to_numpy())
    per_user = np.column_stack([np.bincount(index, weights=y, minlength=len(ids)),
                                np.bincount(index, minlength=len(ids)).astype(float)])
    boot = bootstrap_tables(per_user, _resample_weights(len(ids), n_resamples, seed))
    est = bootstrap_estimate(float(y.mean()), _div(boot[:, 0], boot[:, 1]), len(ids), level)
    iid = [nan, nan]
    if y.size >= 2:
        lo, hi = ppi_py.classical_mean_ci(y, alpha=1.0 - level)
        iid = [float(np.ravel(lo)[0]), float(np.ravel(hi)[0])]
    return est, iid


def judge_estimates(judge: JudgeLabels, reference: pd.DataFrame, *, dataset: str, positive: str = "yes",
                    humans: HumanSet = "blind", n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                    level: float = 0.95,
                    human_only: tuple[Estimate, list[float]] | None = None) -> EstimateRow:
    """Naive, Rogan–Gladen, PPI++ and human-only estimates of the human rate of ``positive`` for one judge.

    Args:
        judge: The judge's labels (:func:`personagap.analysis.robust.judge_labels`).
        reference: :func:`personagap.analysis.robust.human_reference` of the same dataset.
        dataset: Dataset key (recorded).
        positive: The label whose rate is estimated.
        humans: Which humans the reference came from (recorded).
        n_resamples: Bootstrap resamples over users.
        seed: Bootstrap seed.
        level: Confidence level.
        human_only: :func:`human_rate` of ``reference`` with the same arguments, when the caller has it (it is
            the same for every judge of a dataset).
    """
    users = pd.concat([judge.users, reference["user_id"]])
    users = users[~users.index.duplicated()]
    counts, ids = user_counts(judge.labels, reference["label"], users, positive)
    naive, se, sp, rg = (float(x) for x in _rates(counts.sum(axis=0)))
    boot = _rates(bootstrap_tables(counts, _resample_weights(len(ids), n_resamples, seed)))
    naive_est = bootstrap_estimate(naive, boot[0], len(ids), level)
    rg_est = bootstrap_estimate(rg, boot[3], len(ids), level)

    # Sorted item ids: PPI's sums then run in one order whatever order the rows came in.
    labelled = judge.labels.index.intersection(reference.index).sort_values()
    unlabelled = judge.labels.index.difference(reference.index).sort_values()
    y = (reference.loc[labelled, "label"] == positive).to_numpy(dtype=float)
    yhat = (judge.labels.loc[labelled] == positive).to_numpy(dtype=float)
    yhat_u = (judge.labels.loc[unlabelled] == positive).to_numpy(dtype=float)
    ppi, ppi_ci = _ppi(y, yhat, yhat_u, level)
    human, human_iid = human_only or human_rate(reference, positive=positive, n_resamples=n_resamples, seed=seed,
                                                level=level)
    return EstimateRow(
        judge=judge.judge, dataset=dataset, quantity=f"{positive}_rate", rater_kind=judge.rater_kind, humans=humans,
        naive=naive, naive_ci=ci_list(naive_est), sensitivity=se, specificity=sp, rogan_gladen=rg,
        rogan_gladen_ci=ci_list(rg_est), ppi=ppi, ppi_ci=ppi_ci, human_only=human.value,
        human_only_ci=ci_list(human), human_only_ci_iid=human_iid, n_human=len(reference),
        n_judge=len(judge.labels), n_both=len(labelled), n_users=len(ids),
        ci_undefined={"naive": naive_est.n_undefined, "rogan_gladen": rg_est.n_undefined,
                      "human_only": human.n_undefined},
        ci_note=too_few_users_note(len(ids)))


def per_item_hits(labels: pd.Series, target: pd.Series) -> pd.Series:
    """``"yes"`` where an item's label equals its own target label, else ``"no"``; items without a target dropped.

    For quantities whose positive label differs by item, e.g. "the personalised answer is preferred" when the
    personalised answer is A on some items and B on others.
    """
    kept = labels[labels.index.isin(target.index)]
    hit = kept.to_numpy(dtype=object) == target.reindex(kept.index).astype(str).to_numpy(dtype=object)
    return pd.Series(np.where(hit, "yes", "no"), index=kept.index, dtype=object)


def estimate_rows(labels: pd.DataFrame, dataset: str, *, positive: str = "yes", humans: HumanSet = "blind",
                  positive_by_item: pd.Series | None = None, quantity: str | None = None,
                  n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                  level: float = 0.95) -> list[dict[str, Any]]:
    """Corrected estimates of the human rate of ``positive`` for every judge of ``dataset`` (report rows).

    Args:
        labels: Tidy labels of one stage (:func:`personagap.store.load_labels`); other datasets ignored.
        dataset: Dataset key.
        positive: The label whose human rate is estimated ("yes" for relevance and persona use).
        humans: Reference from blind (default) or anchored humans.
        positive_by_item: Instead of one ``positive`` label, the positive label of each item (item id ->
            label), e.g. the position of the personalised answer: the quantity is then the share of items
            whose label is their own positive one (stage 3: "humans prefer the personalised answer").
            Items without an entry are left out.
        quantity: Name of the quantity in the rows [default: ``<positive>_rate``, or ``hit_rate`` with
            ``positive_by_item``].
        n_resamples: Bootstrap resamples over users.
        seed: Bootstrap seed.
        level: Confidence level.

    Returns:
        One JSON-safe dict per judge sharing at least one item with the human reference; empty without a
        reference, without judges, or when nobody ever gave the ``positive`` label. Each estimate is of its
        own items: naive, Rogan–Gladen and PPI of the items the judge labelled, human-only of every item
        with a human reference (they differ where a judge covers a subset, e.g. one PRISM file).
    """
    frame = labels[labels["dataset"] == dataset]
    reference = human_reference(frame, humans)
    judges = list(judge_labels(frame))
    if positive_by_item is not None:
        hits = per_item_hits(reference["label"], positive_by_item)
        reference = pd.DataFrame({"label": hits, "user_id": reference["user_id"].reindex(hits.index)})
        judges = [replace(j, labels=per_item_hits(j.labels, positive_by_item)) for j in judges]
        positive, quantity = "yes", quantity or "hit_rate"
    used = (reference["label"] == positive).any() or any((j.labels == positive).any() for j in judges)
    if reference.empty or not used:
        return []  # no reference, or a label this dataset does not use (a "yes" rate of A/B preferences)
    out = []
    human = human_rate(reference, positive=positive, n_resamples=n_resamples, seed=seed, level=level)
    for j in judges:
        if j.labels.index.intersection(reference.index).empty:
            continue
        row = judge_estimates(j, reference, dataset=dataset, positive=positive, humans=humans,
                              n_resamples=n_resamples, seed=seed, level=level, human_only=human)
        if quantity:
            row.quantity = quantity
        out.append(json_safe_dict(row.model_dump()))
    return out
