"""Stage-3 metrics as pure functions over arrays: no I/O, no LLM calls.

Pairwise labels are always in the item's canonical order ('A', 'B', 'tie'); a judge
that saw the answers swapped has ``swapped=True`` recorded, so "chose the answer shown
first" is ``(label == 'A') != swapped``. Rates with confidence intervals use the one CI
rule (:func:`~personagap.analysis.agreement.cluster_estimate`) over per-cluster sums (users or
questions), because items of one user are not independent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from personagap.analysis.agreement import (
    NAN_ESTIMATE,
    Estimate,
    FloatArray,
    Level,
    agreement,
    cluster_estimate,
    fleiss_kappa_ci,
    krippendorff_alpha_ci,
    per_cluster_sums,
)
from personagap.analysis.arrays import safe_div
from personagap.analysis.pairwise import PairwiseResult, pairwise_agreement
from personagap.vocabulary import DECISIVE


def clustered_rate(hits: npt.ArrayLike, clusters: npt.ArrayLike, *, level: float = 0.95) -> Estimate:
    """Share of True in ``hits`` with its user-clustered CI (the one CI rule).

    Args:
        hits: One boolean per counted item.
        clusters: Cluster (user/question) of each item.
        level: Confidence level.

    Returns:
        The rate and its CI; NaN for no items.
    """
    h = np.asarray(hits, dtype=bool)
    return rate_from_counts(clusters, h, np.ones(h.size), level=level)


def rate_from_counts(clusters: npt.ArrayLike, hits: npt.ArrayLike, counts: npt.ArrayLike, *,
                     level: float = 0.95) -> Estimate:
    """A rate and its CI from counted rows (one item, or a DuckDB group of items, each), the one CI rule.

    Args:
        clusters: The user (cluster) of each row.
        hits: Items of the row counted as hits.
        counts: Items of the row counted.
        level: Confidence level.

    Returns:
        Total hits over total items with its user-clustered CI over the users with a counted item; NaN for none.
    """
    per, _ = per_cluster_sums(np.column_stack([np.asarray(hits, dtype=float), np.asarray(counts, dtype=float)]),
                              clusters)
    per = per[per[:, 1] > 0]
    return NAN_ESTIMATE if per.size == 0 else rate_from_sums(per, level=level)


def rate_from_sums(per_user: FloatArray, *, level: float = 0.95) -> Estimate:
    """A rate and its CI from per-user sums (the one CI rule), as a DuckDB aggregate gives them.

    Args:
        per_user: ``(U, 2)``: per user, the items counted as hits and the items counted.
        level: Confidence level.

    Returns:
        Total hits over total items, with its user-clustered CI.
    """
    return cluster_estimate(_rate, np.asarray(per_user, dtype=float), level=level, bounds=(0.0, 1.0))


def gap_from_sums(per_user: FloatArray, *, level: float = 0.95) -> Estimate:
    """A paired accuracy gap and its CI from per-user sums (the one CI rule).

    Args:
        per_user: ``(U, 3)``: per user, hits with the profile, hits without it, and the paired items.
        level: Confidence level.

    Returns:
        (hits with - hits without) / items, with its user-clustered CI.
    """
    return cluster_estimate(_gap, np.asarray(per_user, dtype=float), level=level, bounds=(-1.0, 1.0))


def _rate(t: FloatArray) -> FloatArray:
    return safe_div(t[..., 0], t[..., 1])


def _gap(t: FloatArray) -> FloatArray:
    return safe_div(t[..., 0] - t[..., 1], t[..., 2])


def chose_first(labels: npt.ArrayLike, swapped: npt.ArrayLike) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Which decisive verdicts picked the answer shown first.

    Args:
        labels: Canonical verdicts 'A'/'B'/'tie' (failures removed).
        swapped: Whether each item was shown as (B, A).

    Returns:
        ``(decisive, first)``: ``decisive`` marks A/B verdicts; ``first`` (same length)
        whether the verdict names the answer shown first (meaningful where decisive).
    """
    lab = np.asarray(labels, dtype=object)
    sw = np.asarray(swapped, dtype=bool)
    decisive = np.isin(lab, DECISIVE)
    return decisive, (lab == "A") != sw


def chose_longer(labels: npt.ArrayLike, len_a: npt.ArrayLike,
                 len_b: npt.ArrayLike) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Which decisive verdicts picked the longer answer.

    Returns:
        ``(counted, longer)``: ``counted`` marks A/B verdicts on pairs of unequal length;
        ``longer`` whether the verdict names the longer answer.
    """
    lab = np.asarray(labels, dtype=object)
    a = np.asarray(len_a, dtype=float)
    b = np.asarray(len_b, dtype=float)
    counted = np.isin(lab, DECISIVE) & (a != b)
    return counted, (lab == "A") == (a > b)


def first_position_rate(labels: npt.ArrayLike, swapped: npt.ArrayLike, clusters: npt.ArrayLike) -> Estimate:
    """Position bias: among decisive verdicts, the share choosing the answer shown first (0.5 = none)."""
    decisive, first = chose_first(labels, swapped)
    return clustered_rate(first[decisive], np.asarray(clusters)[decisive])


def longer_rate(labels: npt.ArrayLike, len_a: npt.ArrayLike, len_b: npt.ArrayLike, clusters: npt.ArrayLike) -> Estimate:
    """Length bias: among decisive verdicts on pairs of unequal length, the share choosing the longer answer."""
    counted, longer = chose_longer(labels, len_a, len_b)
    return clustered_rate(longer[counted], np.asarray(clusters)[counted])


def judge_vs_human(human: npt.ArrayLike, judge: npt.ArrayLike, clusters: npt.ArrayLike, *,
                   extra: tuple[str, ...] = ()) -> dict[str, Estimate]:
    """Accuracy and Cohen's kappa of a judge against the human label, with user-clustered CIs.

    Args:
        human: Reference labels.
        judge: The judge's labels, aligned.
        clusters: Cluster (user) of each item.
        extra: More registered metrics on the same tables (e.g. the robust panel).
    """
    metrics = ("accuracy", "kappa", *extra)
    if np.asarray(human).size == 0:
        return dict.fromkeys(metrics, NAN_ESTIMATE)
    return agreement(human, judge, clusters, metrics=metrics)


def accuracy_gap(human: npt.ArrayLike, with_profile: npt.ArrayLike, without_profile: npt.ArrayLike,
                 clusters: npt.ArrayLike) -> tuple[float, float, Estimate]:
    """Paired accuracy gap (with profile minus without) on the same items, with its user-clustered CI.

    Args:
        human: Reference labels.
        with_profile: The judge's labels when shown the profile, aligned with ``human``.
        without_profile: Its labels without the profile, aligned likewise.
        clusters: Cluster of each item.

    Returns:
        ``(accuracy_with, accuracy_without, gap)``.
    """
    h = np.asarray(human, dtype=object)
    if h.size == 0:
        return float("nan"), float("nan"), NAN_ESTIMATE
    hit_with = (np.asarray(with_profile, dtype=object) == h).astype(float)
    hit_without = (np.asarray(without_profile, dtype=object) == h).astype(float)
    return gap_from_counts(clusters, hit_with, hit_without, np.ones(h.size))


def gap_from_counts(clusters: npt.ArrayLike, hits_with: npt.ArrayLike, hits_without: npt.ArrayLike,
                    counts: npt.ArrayLike, *, level: float = 0.95) -> tuple[float, float, Estimate]:
    """:func:`accuracy_gap` from counted rows (one item, or a DuckDB group of paired items, each).

    Args:
        clusters: The user (cluster) of each row.
        hits_with: Items of the row the judge got right with the profile.
        hits_without: Items of the row it got right without it.
        counts: Paired items of the row.
        level: Confidence level.

    Returns:
        ``(accuracy_with, accuracy_without, gap)``; NaN for no items.
    """
    per, _ = per_cluster_sums(np.column_stack([np.asarray(hits_with, dtype=float),
                                               np.asarray(hits_without, dtype=float),
                                               np.asarray(counts, dtype=float)]), clusters)
    per = per[per[:, 2] > 0]
    if per.size == 0:
        return float("nan"), float("nan"), NAN_ESTIMATE
    total = per.sum(axis=0)
    return float(total[0] / total[2]), float(total[1] / total[2]), gap_from_sums(per, level=level)


def rater_agreement(wide: pd.DataFrame, values: Sequence[float], clusters: npt.ArrayLike,
                    level: Level) -> dict[str, Estimate]:
    """Agreement among several raters on the same items: Krippendorff's alpha and Fleiss' kappa.

    Args:
        wide: Items x raters numeric codes, NaN where a rater did not rate an item.
        values: The scale's values (Fleiss counts each value as a category).
        clusters: Cluster of each item (row).
        level: Level of measurement for alpha ('nominal' for yes/no, 'ordinal' for 1-5).

    Returns:
        ``{'alpha': ..., 'fleiss': ...}``; Fleiss uses the items with the most common number
        of ratings (it needs equal counts) and is nominal whatever ``level`` says.
    """
    data = wide.to_numpy(dtype=float)
    cl = np.asarray(clusters)
    if data.size == 0:
        return {"alpha": NAN_ESTIMATE, "fleiss": NAN_ESTIMATE}
    alpha = krippendorff_alpha_ci(data.T, cl, level)
    counts = np.column_stack([(data == v).sum(axis=1) for v in values])
    per_item = counts.sum(axis=1)
    multi = per_item[per_item >= 2]
    if multi.size == 0:
        return {"alpha": alpha, "fleiss": NAN_ESTIMATE}
    modal = int(pd.Series(multi).mode().max())
    keep = per_item == modal
    return {"alpha": alpha, "fleiss": fleiss_kappa_ci(counts[keep], cl[keep])}


def rater_pairs(labels: pd.DataFrame, *, min_overlap: int = 10) -> PairwiseResult:
    """Cohen's kappa for every pair of raters (all in one group 'rater').

    Args:
        labels: Long frame with item_id, rater, label, cluster.
        min_overlap: Pairs sharing fewer items are left out.
    """
    groups = {str(r): "rater" for r in labels["rater"].unique()}
    return pairwise_agreement(labels, groups, min_overlap=min_overlap)



BASELINE_NAMES: dict[str, str] = {"always_a": "always-A", "always_b": "always-B", "always_longer": "always-longer",
                                  "always_shorter": "always-shorter", "always_tie": "always-tie"}
"""Each trivial pairwise judge's key in report rows (JSON ``baselines``), by the column of its hits in the store's
counts (``personagap.store.response_counts.BASELINE_SIDES``, which defines them: always A, always B, always the
longer answer, always the shorter one, always tie); the text writes it with a space ('always shorter')."""


BaselineRelation = Literal["within", "above", "no CI"]


def baseline_flags(accuracy: float, ci: Sequence[float] | None,
                   baselines: Mapping[str, float]) -> list[tuple[str, float, BaselineRelation]]:
    """The baselines a judge does not beat: its accuracy's CI holds theirs, or lies below it.

    A judge whose accuracy a trivial rule (always the shorter answer, say) matches within the judge's own interval
    is not shown to do anything the rule does not; one whose interval lies below the rule's accuracy does worse.
    Without an interval (too few users) a baseline at or above the judge's accuracy is flagged.

    Args:
        accuracy: The judge's (item-weighted) accuracy.
        ci: Its interval (NaN or None: none).
        baselines: Baseline key -> its accuracy on the same items (NaN ones are skipped).

    Returns:
        ``(baseline, its accuracy, relation)`` per flagged baseline, in the order given; ``relation`` is ``within``
        (inside the judge's CI, ends included), ``above`` (above the CI's upper end) or ``no CI`` (at or above the
        judge's accuracy, which has no interval).
    """
    lo, hi = (math.nan, math.nan) if ci is None or len(ci) != 2 else (float(ci[0]), float(ci[1]))
    out: list[tuple[str, float, BaselineRelation]] = []
    for name, value in baselines.items():
        if math.isnan(value) or math.isnan(accuracy):
            continue
        relation: BaselineRelation | None
        if math.isnan(lo) or math.isnan(hi):
            relation = "no CI" if value >= accuracy else None
        else:
            relation = "within" if lo <= value <= hi else "above" if value > hi else None
        if relation is not None:
            out.append((name, float(value), relation))
    return out


def baseline_flag_line(judge: str, judge_accuracy: float, baseline: str, accuracy: float,
                       relation: BaselineRelation) -> str:
    """One line for a flagged baseline: ``<judge> is within its CI of 'always shorter' (0.945)``."""
    name = f"'{baseline.replace('-', ' ')}' ({accuracy:.3f})"
    if relation == "within":
        return f"{judge} is within its CI of {name}"
    if relation == "above":
        return f"{judge} is below {name}: its accuracy {judge_accuracy:.3f} has a CI below the baseline's"
    return f"{judge} does no better than {name}: its accuracy {judge_accuracy:.3f} has no CI"
