"""Agreement metrics as pure functions over confusion tables, and their user-clustered CIs.

Design: every two-rater figure (kappa, precision, recall, F1, yes-rates, over-selection) is a function of a
confusion table, and confusion tables add up over users. So we build one table per user once; the one CI rule
(:func:`~personagap.analysis.ci_rule.cluster_estimate`, a jackknife-t over users) needs only the total minus
each user's table. The CI rule lives in :mod:`~personagap.analysis.ci_rule` and several-rater agreement
(Fleiss, Krippendorff) in :mod:`~personagap.analysis.raters`; both are re-exported here, where callers import them.

Convention: ``table[..., h, j]`` counts items the human (reference) put in class
``h`` and the judge put in class ``j``. For binary labels class 1 is "yes".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from personagap.analysis.arrays import FloatArray as FloatArray
from personagap.analysis.arrays import IntArray as IntArray
from personagap.analysis.arrays import safe_div as safe_div
from personagap.analysis.ci_rule import CI_METHOD as CI_METHOD
from personagap.analysis.ci_rule import DEFAULT_SEED as DEFAULT_SEED
from personagap.analysis.ci_rule import MIN_USERS_FOR_CI as MIN_USERS_FOR_CI
from personagap.analysis.ci_rule import NAN_ESTIMATE as NAN_ESTIMATE
from personagap.analysis.ci_rule import Bounds as Bounds
from personagap.analysis.ci_rule import Estimate as Estimate
from personagap.analysis.ci_rule import Stat as Stat
from personagap.analysis.ci_rule import ci_list as ci_list
from personagap.analysis.ci_rule import ci_text as ci_text
from personagap.analysis.ci_rule import cluster_estimate as cluster_estimate
from personagap.analysis.ci_rule import interval_from_leave_outs as interval_from_leave_outs
from personagap.analysis.ci_rule import json_safe as json_safe
from personagap.analysis.ci_rule import json_safe_dict as json_safe_dict
from personagap.analysis.ci_rule import leave_one_out as leave_one_out
from personagap.analysis.ci_rule import per_cluster_sums as per_cluster_sums
from personagap.analysis.raters import Level as Level
from personagap.analysis.raters import alpha_from_coincidences as alpha_from_coincidences
from personagap.analysis.raters import alpha_user_coincidences as alpha_user_coincidences
from personagap.analysis.raters import fleiss_from_user_sums as fleiss_from_user_sums
from personagap.analysis.raters import fleiss_kappa as fleiss_kappa
from personagap.analysis.raters import fleiss_kappa_ci as fleiss_kappa_ci
from personagap.analysis.raters import fleiss_user_sums as fleiss_user_sums
from personagap.analysis.raters import krippendorff_alpha as krippendorff_alpha
from personagap.analysis.raters import krippendorff_alpha_ci as krippendorff_alpha_ci
from personagap.analysis.raters import unit_coincidences as unit_coincidences

_div = safe_div  # the name other modules import

LevelFn = Callable[[FloatArray, FloatArray], FloatArray]
"""A table metric that also reads the ordinal levels' numeric values (one per table row/column, low to high)."""


@dataclass(frozen=True)
class Metric:
    """A registered agreement metric computed from confusion tables.

    ``leveled`` is set for metrics of ordered scales that read the levels' values (weighted kappa, mean absolute
    difference); ``fn`` then computes them with equally spaced levels ``0..K-1``.
    """

    name: str
    fn: Callable[[FloatArray], FloatArray]
    higher_is_better: bool | None
    description: str
    binary_only: bool = True
    leveled: LevelFn | None = None
    ordinal_only: bool = False
    bounds: Bounds | None = None
    """The figure's range; its CI is cut to it (:func:`cluster_estimate`)."""
    parts: Callable[[FloatArray], FloatArray] | None = None
    """The rates in [0, 1] the figure averages (balanced accuracy: each class's recall), ``(..., P)``: where one sits
    at 0 or 1 the figure's spread over users cannot be measured (:func:`cluster_estimate` ``parts``)."""

    def on(self, tables: FloatArray, levels: npt.ArrayLike | None = None) -> FloatArray:
        """The metric of ``tables``, over the ordinal ``levels`` where it reads them (else they are ignored)."""
        if self.leveled is not None and levels is not None:
            return self.leveled(tables, np.asarray(levels, dtype=float))
        return self.fn(tables)


METRICS: dict[str, Metric] = {}


TableFn = Callable[[FloatArray], FloatArray]
"""A function of confusion tables ``(..., K, K)``, vectorised over the leading axes."""


def register_metric(name: str, *, higher_is_better: bool | None, description: str, binary_only: bool = True,
                    bounds: Bounds | None = None, parts: TableFn | None = None) -> Callable[[TableFn], TableFn]:
    """Register a table metric under ``name``; duplicate names are an error.

    Args:
        name: Registry key, e.g. ``"kappa"``.
        higher_is_better: True/False for the dashboard's colouring; None where
            neither direction is better (rates, ratios near 1).
        description: One line for reports and tooltips.
        binary_only: The metric needs 2x2 tables.
        bounds: The figure's range (``(0, 1)`` for a rate), which its CI is cut to; None: unbounded.
        parts: The rates the figure averages (:attr:`Metric.parts`); None: the figure has none to check.
    """
    def add(fn: Callable[[FloatArray], FloatArray]) -> Callable[[FloatArray], FloatArray]:
        _add(Metric(name, fn, higher_is_better, description, binary_only, bounds=bounds, parts=parts))
        return fn
    return add


def _add(metric: Metric) -> None:
    if metric.name in METRICS:
        raise ValueError(f"duplicate metric {metric.name!r}")
    METRICS[metric.name] = metric


def register_level_metric(name: str, *, higher_is_better: bool | None, description: str,
                          bounds: Bounds | None = None) -> Callable[[LevelFn], LevelFn]:
    """Register a metric of ordered levels, ``fn(tables, levels)``; duplicate names are an error.

    Without levels (:meth:`Metric.on` with ``levels=None``) it is computed over equally spaced levels
    ``0..K-1``, the table's category order.

    Args:
        name: Registry key, e.g. ``"weighted_kappa"``.
        higher_is_better: As in :func:`register_metric`.
        description: One line for reports and tooltips.
        bounds: As in :func:`register_metric`.
    """
    def add(fn: LevelFn) -> LevelFn:
        def spaced(tables: FloatArray) -> FloatArray:
            return fn(tables, np.arange(np.shape(tables)[-1], dtype=float))

        _add(Metric(name, spaced, higher_is_better, description, binary_only=False, leveled=fn, ordinal_only=True,
                    bounds=bounds))
        return fn
    return add


def get_metric(name: str) -> Metric:
    """Return a registered metric, suggesting near names on a typo."""
    try:
        return METRICS[name]
    except KeyError:
        import difflib

        near = difflib.get_close_matches(name, METRICS, n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise KeyError(f"unknown metric {name!r}{hint}") from None


@register_metric("kappa", bounds=(-1.0, 1.0), higher_is_better=True, binary_only=False,
                 description="Cohen's kappa: agreement beyond chance (1 perfect, 0 chance, <0 worse).")
def kappa_from_tables(tables: FloatArray) -> FloatArray:
    """Cohen's kappa of confusion tables ``(..., K, K)``; NaN where undefined.

    Undefined means no items, or expected agreement of 1 (both raters used a
    single identical class), as in scikit-learn.
    """
    t = np.asarray(tables, dtype=float)
    n = t.sum(axis=(-2, -1))
    observed = _div(np.trace(t, axis1=-2, axis2=-1), n)
    expected = _div((t.sum(axis=-1) * t.sum(axis=-2)).sum(axis=-1), n * n)
    return _div(observed - expected, 1.0 - expected)


@register_metric("accuracy", bounds=(0.0, 1.0), higher_is_better=True, binary_only=False,
                 description="Share of items where judge and human give the same label.")
def accuracy_from_tables(tables: FloatArray) -> FloatArray:
    """Observed agreement of confusion tables."""
    t = np.asarray(tables, dtype=float)
    return _div(np.trace(t, axis1=-2, axis2=-1), t.sum(axis=(-2, -1)))


def _cells(t: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    t = np.asarray(t, dtype=float)
    if t.shape[-2:] != (2, 2):
        raise ValueError(f"binary metric needs 2x2 tables, got {t.shape[-2:]}")
    return t[..., 1, 1], t[..., 0, 1], t[..., 1, 0], t[..., 0, 0]  # tp, fp, fn, tn


@register_metric("precision", bounds=(0.0, 1.0), higher_is_better=True,
                 description="Of the attributes the judge selected, the share humans selected.")
def precision_from_tables(t: FloatArray) -> FloatArray:
    """Precision of the judge's "yes" against the human's."""
    tp, fp, _, _ = _cells(t)
    return _div(tp, tp + fp)


@register_metric("recall", bounds=(0.0, 1.0), higher_is_better=True,
                 description="Of the attributes humans selected, the share the judge selected.")
def recall_from_tables(t: FloatArray) -> FloatArray:
    """Recall of the human's "yes" by the judge."""
    tp, _, fn, _ = _cells(t)
    return _div(tp, tp + fn)


@register_metric("f1", bounds=(0.0, 1.0), higher_is_better=True, description="Harmonic mean of precision and recall.")
def f1_from_tables(t: FloatArray) -> FloatArray:
    """F1 of the judge's "yes" against the human's."""
    tp, fp, fn, _ = _cells(t)
    return _div(2 * tp, 2 * tp + fp + fn)


@register_metric("human_yes_rate", bounds=(0.0, 1.0), higher_is_better=None,
                 description="Share of items humans labelled yes.")
def human_yes_rate_from_tables(t: FloatArray) -> FloatArray:
    """Share of items with a human "yes"."""
    tp, fp, fn, tn = _cells(t)
    return _div(tp + fn, tp + fp + fn + tn)


@register_metric("judge_yes_rate", bounds=(0.0, 1.0), higher_is_better=None,
                 description="Share of items the judge labelled yes.")
def judge_yes_rate_from_tables(t: FloatArray) -> FloatArray:
    """Share of items with a judge "yes"."""
    tp, fp, fn, tn = _cells(t)
    return _div(tp + fp, tp + fp + fn + tn)


@register_metric("over_selection", bounds=(0.0, math.inf), higher_is_better=None,
                 description="Judge yes-count / human yes-count (1 = selects as many as humans).")
def over_selection_from_tables(t: FloatArray) -> FloatArray:
    """How many times more items the judge selects than humans do."""
    tp, fp, fn, _ = _cells(t)
    return _div(tp + fp, tp + fn)


def _level_distances(tables: FloatArray, levels: FloatArray) -> tuple[FloatArray, FloatArray]:
    t = np.asarray(tables, dtype=float)
    v = np.asarray(levels, dtype=float)
    if v.shape != (t.shape[-1],) or t.shape[-2] != t.shape[-1]:
        raise ValueError(f"{v.size} levels for tables of shape {t.shape}")
    return t, v[:, None] - v[None, :]


@register_level_metric("weighted_kappa", bounds=(-math.inf, 1.0), higher_is_better=True,
                       description="Quadratic-weighted Cohen's kappa: a near miss on an ordered scale costs less "
                                   "than a far one (1 perfect, 0 chance).")
def weighted_kappa_from_tables(tables: FloatArray, levels: FloatArray) -> FloatArray:
    """Quadratic-weighted kappa ``1 - sum(w O) / sum(w E)`` with ``w = (v_h - v_j)^2`` over the levels' values.

    The weights use the levels' numeric values, so on unequally spaced levels (1, 2, 5) a 2-vs-5 miss weighs
    9 times a 1-vs-2 miss. scikit-learn's ``cohen_kappa_score(weights="quadratic")`` uses the labels' *indices*
    instead; the two agree whenever the levels are equally spaced (kappa does not change when every weight is
    multiplied by the same number), which is every 1-5 or 0-10 rating scale. ``E`` is the product of the
    margins over ``n``. NaN with no items or when ``sum(w E)`` is 0 (both raters used one level).
    """
    t, diff = _level_distances(tables, levels)
    w = diff * diff
    n = t.sum(axis=(-2, -1))
    expected = t.sum(axis=-1)[..., :, None] * t.sum(axis=-2)[..., None, :]
    observed_cost = (t * w).sum(axis=(-2, -1))
    expected_cost = _div((expected * w).sum(axis=(-2, -1)), n)
    return np.where(n == 0, np.nan, 1.0 - _div(observed_cost, expected_cost))


@register_level_metric("mean_abs_diff", bounds=(0.0, math.inf), higher_is_better=False,
                       description="Mean absolute difference between judge and human level, in the scale's units "
                                   "(0 = always the same level).")
def mean_abs_diff_from_tables(tables: FloatArray, levels: FloatArray) -> FloatArray:
    """Mean ``|v_h - v_j|`` over items, in the levels' own units; NaN with no items."""
    t, diff = _level_distances(tables, levels)
    return _div((t * np.abs(diff)).sum(axis=(-2, -1)), t.sum(axis=(-2, -1)))


def _mid_ranks(counts: FloatArray) -> FloatArray:
    # The average rank of each level's items when all n are sorted (ties share their mean rank, as scipy does).
    return np.cumsum(counts, axis=-1) - counts + (counts + 1.0) / 2.0


@register_metric("spearman", bounds=(-1.0, 1.0), higher_is_better=True, binary_only=False,
                 description="Spearman rank correlation of judge and human levels (ties get mid-ranks).")
def spearman_from_tables(tables: FloatArray) -> FloatArray:
    """Spearman's rho from confusion tables ``(..., K, K)`` whose categories are in scale order.

    Every item of level ``k`` gets that level's mid-rank among the rater's ``n`` labels; rho is the Pearson
    correlation of the two raters' mid-ranks weighted by the table (``scipy.stats.spearmanr``). Only the order
    of the levels matters, not their spacing. NaN where a rater used one level only (no variance) or no items.
    """
    t = np.asarray(tables, dtype=float)
    rows, cols = t.sum(axis=-1), t.sum(axis=-2)
    n = t.sum(axis=(-2, -1))
    centre = (n + 1.0)[..., None] / 2.0  # the mean of n ranks, mid-ranks included
    rh, rj = _mid_ranks(rows) - centre, _mid_ranks(cols) - centre
    cov = (t * rh[..., :, None] * rj[..., None, :]).sum(axis=(-2, -1))
    var_h, var_j = (rows * rh * rh).sum(axis=-1), (cols * rj * rj).sum(axis=-1)
    with np.errstate(invalid="ignore"):
        scale = np.sqrt(var_h * var_j)
    # Variances of integer-weighted ranks are sums of squares: exactly 0 when one level only, so no tolerance.
    return _div(cov, scale)


@register_metric("alpha", bounds=(-math.inf, 1.0), higher_is_better=True, binary_only=False,
                 description="Krippendorff's alpha (ordinal) of the judge and the human reference.")
def ordinal_alpha_from_tables(tables: FloatArray) -> FloatArray:
    """Krippendorff's alpha (ordinal) of two raters from their confusion tables (categories in scale order).

    Each item is a unit with two values, so the coincidence matrix is ``T + T^T`` (Krippendorff 2011); the
    ordinal distance uses only the levels' order and frequencies, not their values.
    """
    t = np.asarray(tables, dtype=float)
    o = t + np.swapaxes(t, -1, -2)
    return alpha_from_coincidences(o, np.arange(t.shape[-1], dtype=float), "ordinal")


# --------------------------------------------------------------------------- building tables

def encode(*columns: npt.ArrayLike) -> tuple[list[IntArray], list[object]]:
    """Map label columns onto shared integer codes ``0..K-1`` (sorted categories).

    Returns:
        The coded columns and the category list (code i is ``categories[i]``).
    """
    arrays = [np.asarray(c, dtype=object) for c in columns]
    categories = sorted(set().union(*(set(a.tolist()) for a in arrays)), key=str)
    lookup = {c: i for i, c in enumerate(categories)}
    return [np.fromiter((lookup[v] for v in a), dtype=np.int64, count=len(a)) for a in arrays], categories


def cluster_tables(human: npt.ArrayLike, judge: npt.ArrayLike, clusters: npt.ArrayLike,
                   n_classes: int) -> tuple[FloatArray, npt.NDArray[np.object_]]:
    """Build one confusion table per cluster (user).

    Args:
        human: Integer codes of the reference labels.
        judge: Integer codes of the judge's labels, aligned with ``human``.
        clusters: Cluster id (e.g. user id) per item.
        n_classes: K.

    Returns:
        ``(tables, cluster_ids)`` with ``tables`` of shape ``(U, K, K)``.
    """
    h = np.asarray(human, dtype=np.int64)
    j = np.asarray(judge, dtype=np.int64)
    if h.shape != j.shape:
        raise ValueError(f"human and judge differ in length: {h.shape} vs {j.shape}")
    ids, cluster_index = np.unique(np.asarray(clusters), return_inverse=True)
    return indexed_tables(h, j, cluster_index, len(ids), n_classes), ids


def indexed_tables(human: IntArray, judge: IntArray, cluster_index: IntArray, n_clusters: int,
                   n_classes: int) -> FloatArray:
    """Confusion tables ``(n_clusters, K, K)`` from codes and a 0-based cluster index per item."""
    flat = (np.asarray(cluster_index, dtype=np.int64) * n_classes + human) * n_classes + judge
    counts = np.bincount(flat, minlength=n_clusters * n_classes * n_classes)
    return counts.reshape(n_clusters, n_classes, n_classes).astype(float)


def estimate(tables: FloatArray, metric: str, *, level: float = 0.95, levels: npt.ArrayLike | None = None) -> Estimate:
    """Point value of ``metric`` on the summed tables plus its user-clustered CI (:func:`cluster_estimate`).

    ``levels``: the ordinal levels' values, for metrics that read them (:func:`register_level_metric`).
    """
    return estimates(tables, (metric,), level=level, levels=levels)[metric]


def estimates(tables: FloatArray, metrics: tuple[str, ...], *, level: float = 0.95,
              levels: npt.ArrayLike | None = None, sizes: npt.ArrayLike | None = None) -> dict[str, Estimate]:
    """:func:`estimate` of several metrics on the same per-user tables (leave-one-user-out totals built once).

    Args:
        tables: Per-user tables ``(U, K, K)``.
        metrics: Registered metric names.
        level: Confidence level.
        levels: The K ordinal levels' values (table order), for metrics that read them; None: equally spaced.
        sizes: The items of every user of the data these users are a subset of (:func:`cluster_estimate`).
    """
    per = np.asarray(tables, dtype=float)
    out = {}
    for m in metrics:
        metric = get_metric(m)

        def stat(t: FloatArray, metric: Metric = metric) -> FloatArray:
            return metric.on(t, levels)

        out[m] = cluster_estimate(stat, per, level=level, bounds=metric.bounds, parts=metric.parts, sizes=sizes)
    return out


def agreement(human: npt.ArrayLike, judge: npt.ArrayLike, clusters: npt.ArrayLike, *,
              metrics: tuple[str, ...] = ("kappa",), level: float = 0.95) -> dict[str, Estimate]:
    """Judge-vs-human agreement with user-clustered CIs (:func:`cluster_estimate`).

    Args:
        human: Reference labels (any hashable values; binary metrics need exactly
            the codes 0/1, e.g. booleans).
        judge: Judge labels aligned with ``human``.
        clusters: The user (or question) each item belongs to; the interval leaves out
            whole clusters, since items of one user are not independent.
        metrics: Registered metric names.
        level: Confidence level.

    Returns:
        Metric name -> :class:`Estimate`.
    """
    h = np.asarray(human)
    j = np.asarray(judge)
    if any(get_metric(m).binary_only for m in metrics):
        codes = [np.asarray(h, dtype=np.int64), np.asarray(j, dtype=np.int64)]
        if codes[0].size and (codes[0].min() < 0 or codes[0].max() > 1 or codes[1].min() < 0 or codes[1].max() > 1):
            raise ValueError("binary metrics need labels coded 0/1")
        n_classes = 2
    else:
        codes, categories = encode(h, j)
        n_classes = max(len(categories), 1)
    tables, _ = cluster_tables(codes[0], codes[1], clusters, n_classes)
    return estimates(tables, metrics, level=level)


