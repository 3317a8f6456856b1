"""Agreement metrics as pure functions over arrays, with user-clustered bootstrap CIs.

Design: every two-rater figure (kappa, precision, recall, F1, yes-rates,
over-selection) is a function of a confusion table, and confusion tables add up
over users. So we build one table per user once, and a bootstrap resample of users
is just a weighted sum of those tables: ``W @ tables`` with ``W`` the (resamples x
users) multinomial counts. That makes 1,000 resamples over a million labels a
matrix product instead of a million-row loop per resample.

Convention: ``table[..., h, j]`` counts items the human (reference) put in class
``h`` and the judge put in class ``j``. For binary labels class 1 is "yes".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import krippendorff
import numpy as np
import numpy.typing as npt
from scipy import stats

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Level = Literal["nominal", "ordinal", "interval", "ratio"]

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
MIN_USERS_FOR_CI = 5
"""Below this many users (clusters) no CI is given: a bootstrap over 1 user has zero width, and over a
handful of users a percentile interval covers far less than its level. Reports print "too few users for
a CI" instead, always beside the number of users."""


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

    def on(self, tables: FloatArray, levels: npt.ArrayLike | None = None) -> FloatArray:
        """The metric of ``tables``, over the ordinal ``levels`` where it reads them (else they are ignored)."""
        if self.leveled is not None and levels is not None:
            return self.leveled(tables, np.asarray(levels, dtype=float))
        return self.fn(tables)


METRICS: dict[str, Metric] = {}


def register_metric(name: str, *, higher_is_better: bool | None, description: str,
                    binary_only: bool = True) -> Callable[[Callable[[FloatArray], FloatArray]],
                                                          Callable[[FloatArray], FloatArray]]:
    """Register a table metric under ``name``; duplicate names are an error.

    Args:
        name: Registry key, e.g. ``"kappa"``.
        higher_is_better: True/False for the dashboard's colouring; None where
            neither direction is better (rates, ratios near 1).
        description: One line for reports and tooltips.
        binary_only: The metric needs 2x2 tables.
    """
    def add(fn: Callable[[FloatArray], FloatArray]) -> Callable[[FloatArray], FloatArray]:
        _add(Metric(name, fn, higher_is_better, description, binary_only))
        return fn
    return add


def _add(metric: Metric) -> None:
    if metric.name in METRICS:
        raise ValueError(f"duplicate metric {metric.name!r}")
    METRICS[metric.name] = metric


def register_level_metric(name: str, *, higher_is_better: bool | None,
                          description: str) -> Callable[[LevelFn], LevelFn]:
    """Register a metric of ordered levels, ``fn(tables, levels)``; duplicate names are an error.

    Without levels (:meth:`Metric.on` with ``levels=None``) it is computed over equally spaced levels
    ``0..K-1``, the table's category order.

    Args:
        name: Registry key, e.g. ``"weighted_kappa"``.
        higher_is_better: As in :func:`register_metric`.
        description: One line for reports and tooltips.
    """
    def add(fn: LevelFn) -> LevelFn:
        def spaced(tables: FloatArray) -> FloatArray:
            return fn(tables, np.arange(np.shape(tables)[-1], dtype=float))

        _add(Metric(name, spaced, higher_is_better, description, binary_only=False, leveled=fn, ordinal_only=True))
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


def _div(num: FloatArray, den: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.asarray(num, dtype=float) / np.asarray(den, dtype=float)
    return np.where(np.asarray(den) == 0, np.nan, out)


@register_metric("kappa", higher_is_better=True, binary_only=False,
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


@register_metric("accuracy", higher_is_better=True, binary_only=False,
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


@register_metric("precision", higher_is_better=True,
                 description="Of the attributes the judge selected, the share humans selected.")
def precision_from_tables(t: FloatArray) -> FloatArray:
    """Precision of the judge's "yes" against the human's."""
    tp, fp, _, _ = _cells(t)
    return _div(tp, tp + fp)


@register_metric("recall", higher_is_better=True,
                 description="Of the attributes humans selected, the share the judge selected.")
def recall_from_tables(t: FloatArray) -> FloatArray:
    """Recall of the human's "yes" by the judge."""
    tp, _, fn, _ = _cells(t)
    return _div(tp, tp + fn)


@register_metric("f1", higher_is_better=True, description="Harmonic mean of precision and recall.")
def f1_from_tables(t: FloatArray) -> FloatArray:
    """F1 of the judge's "yes" against the human's."""
    tp, fp, fn, _ = _cells(t)
    return _div(2 * tp, 2 * tp + fp + fn)


@register_metric("human_yes_rate", higher_is_better=None, description="Share of items humans labelled yes.")
def human_yes_rate_from_tables(t: FloatArray) -> FloatArray:
    """Share of items with a human "yes"."""
    tp, fp, fn, tn = _cells(t)
    return _div(tp + fn, tp + fp + fn + tn)


@register_metric("judge_yes_rate", higher_is_better=None, description="Share of items the judge labelled yes.")
def judge_yes_rate_from_tables(t: FloatArray) -> FloatArray:
    """Share of items with a judge "yes"."""
    tp, fp, fn, tn = _cells(t)
    return _div(tp + fp, tp + fp + fn + tn)


@register_metric("over_selection", higher_is_better=None,
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


@register_level_metric("weighted_kappa", higher_is_better=True,
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


@register_level_metric("mean_abs_diff", higher_is_better=False,
                       description="Mean absolute difference between judge and human level, in the scale's units "
                                   "(0 = always the same level).")
def mean_abs_diff_from_tables(tables: FloatArray, levels: FloatArray) -> FloatArray:
    """Mean ``|v_h - v_j|`` over items, in the levels' own units; NaN with no items."""
    t, diff = _level_distances(tables, levels)
    return _div((t * np.abs(diff)).sum(axis=(-2, -1)), t.sum(axis=(-2, -1)))


def _mid_ranks(counts: FloatArray) -> FloatArray:
    # The average rank of each level's items when all n are sorted (ties share their mean rank, as scipy does).
    return np.cumsum(counts, axis=-1) - counts + (counts + 1.0) / 2.0


@register_metric("spearman", higher_is_better=True, binary_only=False,
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


@register_metric("alpha", higher_is_better=True, binary_only=False,
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


def resample_weights(n_clusters: int, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> FloatArray:
    """Cluster bootstrap weights: row b counts how often each cluster is drawn in resample b."""
    rng = np.random.default_rng(seed)
    if n_clusters == 0:
        return np.zeros((n_resamples, 0))
    return rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_resamples).astype(float)


@functools.lru_cache(maxsize=16)
def shared_resample_weights(n_clusters: int, n_resamples: int = DEFAULT_RESAMPLES,
                            seed: int = DEFAULT_SEED) -> FloatArray:
    """:func:`resample_weights`, drawn once per (clusters, resamples, seed) in a process and shared read-only.

    The same draw, so the same CIs; a report scores several judges over the same users, and at 20,000 users one
    draw of 1,000 resamples takes seconds.
    """
    weights = resample_weights(n_clusters, n_resamples, seed)
    weights.setflags(write=False)
    return weights


def bootstrap_tables(tables: FloatArray, weights: FloatArray) -> FloatArray:
    """Resampled totals ``(B, ...)`` of per-cluster arrays ``(U, ...)``."""
    return np.tensordot(weights, tables, axes=(1, 0))


def percentile_interval(samples: FloatArray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap samples, ignoring resamples where the figure is undefined."""
    s = np.asarray(samples, dtype=float)
    s = s[~np.isnan(s)]
    if s.size == 0:
        return (float("nan"), float("nan"))
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(s, [tail, 100.0 - tail])
    return (float(lo), float(hi))


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its user-clustered confidence interval.

    ``n_clusters`` is how many users (clusters) the interval is over (None where not clustered);
    ``n_undefined`` how many leave-one-user-out figures (:func:`cluster_estimate`; resamples for the
    deprecated :func:`bootstrap_estimate`) were undefined (e.g. a kappa with one class only): the interval then
    is not given (jackknife) or leaves them out (bootstrap), and reports say how many.
    """

    value: float
    ci: tuple[float, float]
    n_clusters: int | None = None
    n_undefined: int = 0

    @property
    def too_few_users(self) -> bool:
        """The bootstrap had fewer than :data:`MIN_USERS_FOR_CI` users, so no CI is given."""
        return self.n_clusters is not None and self.n_clusters < MIN_USERS_FOR_CI


NAN_ESTIMATE = Estimate(float("nan"), (float("nan"), float("nan")))


def bootstrap_estimate(point: float, samples: FloatArray, n_clusters: int, level: float = 0.95) -> Estimate:
    """The one way a bootstrap becomes an :class:`Estimate`: percentile CI, undefined resamples counted.

    Args:
        point: The figure on the original data.
        samples: The figure on each resample (NaN where undefined).
        n_clusters: Users (clusters) resampled; below :data:`MIN_USERS_FOR_CI` the CI is NaN.
        level: Confidence level.
    """
    s = np.asarray(samples, dtype=float)
    undefined = int(np.isnan(s).sum())
    if n_clusters < MIN_USERS_FOR_CI:
        return Estimate(float(point), (float("nan"), float("nan")), n_clusters, undefined)
    return Estimate(float(point), percentile_interval(s, level), n_clusters, undefined)


def cluster_estimate(stat: Callable[[FloatArray], FloatArray], per_cluster: npt.ArrayLike, *,
                     level: float = 0.95) -> Estimate:
    """THE interval rule: a user-clustered jackknife-t interval of a smooth function of per-user sums.

    Every figure the tool prints is ``stat`` of totals that add up over users (confusion counts, numerators and
    denominators, coincidence matrices), so leaving user ``u`` out is ``total - per_cluster[u]``: U evaluations,
    no resample draw, memory O(U x cells). With ``theta_(u)`` the figure without user ``u``,
    ``SE = sqrt((U - 1) / U * sum_u (theta_(u) - mean)^2)`` and the interval is ``point +- t_{U-1} * SE``.
    The percentile cluster bootstrap it replaces covered 81-90% at 5-10 users; the calibration harness
    (``benchmarks/calibration.py``) measures this rule for every printed figure.

    Args:
        stat: Maps totals ``(..., *shape)`` to the figure ``(...)``, vectorised over leading axes; NaN where
            undefined.
        per_cluster: Per-user additive sums ``(U, *shape)``.
        level: Confidence level.

    Returns:
        The point ``stat(per_cluster.sum(0))`` and its interval. No interval (NaN) below
        :data:`MIN_USERS_FOR_CI` users, when the point is undefined, or when some leave-one-user-out figure is
        undefined (one user carries the whole figure, so its spread cannot be estimated); ``n_undefined``
        counts those users.

    Raises:
        ValueError: ``per_cluster`` has no user axis, or ``level`` is not in (0, 1).
    """
    total, leave_out = _leave_one_out(np.asarray(per_cluster, dtype=float))
    return _jackknife_t(stat, total, leave_out, level)


def _leave_one_out(per: FloatArray) -> tuple[FloatArray, FloatArray]:
    if per.ndim < 1:
        raise ValueError(f"per_cluster needs a leading user axis, got shape {per.shape}")
    total = per.sum(axis=0)
    return total, total[None, ...] - per


def _jackknife_t(stat: Callable[[FloatArray], FloatArray], total: FloatArray, leave_out: FloatArray,
                 level: float) -> Estimate:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    n = int(leave_out.shape[0])
    point = float(np.asarray(stat(total), dtype=float))
    nan_ci = (float("nan"), float("nan"))
    if n < MIN_USERS_FOR_CI or math.isnan(point):
        return Estimate(point, nan_ci, n, 0)
    theta = np.asarray(stat(leave_out), dtype=float).reshape(n)
    undefined = int(np.isnan(theta).sum())
    if undefined:
        return Estimate(point, nan_ci, n, undefined)
    se = math.sqrt((n - 1) / n * float(((theta - theta.mean()) ** 2).sum()))
    half = float(stats.t.ppf(0.5 + level / 2.0, n - 1)) * se
    return Estimate(point, (point - half, point + half), n, 0)


def ci_text(e: Estimate | None = None, *, ci: list[float] | None = None, n_users: int | None = None,
            undefined: int = 0, n_resamples: int | None = None, digits: int = 2) -> str:
    """A CI as reports print it: ``[lo, hi] (N users)``, or why there is none, plus undefined resamples.

    Pass an :class:`Estimate`, or a stored ``ci`` list with its ``n_users`` (report rows keep both).
    """
    if e is not None:
        ci, n_users, undefined = [e.ci[0], e.ci[1]], e.n_clusters, e.n_undefined
    users = "" if n_users is None else f"{n_users} user{'s' if n_users != 1 else ''}"
    lo, hi = (ci or [float("nan"), float("nan")])
    if n_users is not None and n_users < MIN_USERS_FOR_CI:
        return f"(too few users for a CI: {users})"
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        text = "[no CI" + (f"; {users}]" if users else "]")
    else:
        text = f"[{lo:.{digits}f}, {hi:.{digits}f}" + (f"; {users}]" if users else "]")
    if undefined:
        text += f" ({undefined}{'/' + str(n_resamples) if n_resamples else ''} resamples undefined)"
    return text


def ci_list(e: Estimate) -> list[float]:
    """The interval as a ``[lo, hi]`` list (the JSON reports' shape)."""
    return [e.ci[0], e.ci[1]]


def json_safe(value: Any) -> Any:
    """Nested data with NaN floats replaced by None, so that it serialises as valid JSON (null)."""
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return json_safe_dict(value)
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def json_safe_dict(value: dict[str, Any]) -> dict[str, Any]:
    """:func:`json_safe` of a dict (a report's ``model_dump()``), typed as the dict it returns."""
    return {k: json_safe(v) for k, v in value.items()}


def estimate(tables: FloatArray, metric: str, weights: FloatArray | None = None, level: float = 0.95,
             levels: npt.ArrayLike | None = None) -> Estimate:
    """Point value of ``metric`` on the summed tables plus its user-clustered CI (:func:`cluster_estimate`).

    ``weights`` is deprecated and ignored (the CI no longer resamples); ``levels``: the ordinal levels' values,
    for metrics that read them (:func:`register_level_metric`).
    """
    return estimates(tables, (metric,), weights, level, levels)[metric]


def estimates(tables: FloatArray, metrics: tuple[str, ...], weights: FloatArray | None = None,
              level: float = 0.95, levels: npt.ArrayLike | None = None) -> dict[str, Estimate]:
    """:func:`estimate` of several metrics on the same per-user tables (leave-one-user-out totals built once).

    Args:
        tables: Per-user tables ``(U, K, K)``.
        metrics: Registered metric names.
        weights: Deprecated and ignored: the CI is :func:`cluster_estimate`'s, which draws no resamples. Kept so
            that callers still passing bootstrap weights do not break; to be removed.
        level: Confidence level.
        levels: The K ordinal levels' values (table order), for metrics that read them; None: equally spaced.
    """
    per = np.asarray(tables, dtype=float)
    if weights is not None:  # TRANSITION (issue 21): removed once the tests computing the bootstrap by hand move
        boot = bootstrap_tables(per, weights)
        return {m: bootstrap_estimate(float(get_metric(m).on(per.sum(axis=0), levels)),
                                      get_metric(m).on(boot, levels), int(per.shape[0]), level) for m in metrics}
    total, leave_out = _leave_one_out(per)
    out = {}
    for m in metrics:
        metric = get_metric(m)

        def stat(t: FloatArray, metric: Metric = metric) -> FloatArray:
            return metric.on(t, levels)

        out[m] = _jackknife_t(stat, total, leave_out, level)
    return out


def agreement(human: npt.ArrayLike, judge: npt.ArrayLike, clusters: npt.ArrayLike, *,
              metrics: tuple[str, ...] = ("kappa",), n_resamples: int = DEFAULT_RESAMPLES,
              seed: int = DEFAULT_SEED, level: float = 0.95) -> dict[str, Estimate]:
    """Judge-vs-human agreement with user-clustered CIs (:func:`cluster_estimate`).

    Args:
        human: Reference labels (any hashable values; binary metrics need exactly
            the codes 0/1, e.g. booleans).
        judge: Judge labels aligned with ``human``.
        clusters: The user (or question) each item belongs to; resampling draws
            whole clusters, since items of one user are not independent.
        metrics: Registered metric names.
        n_resamples: Deprecated and ignored (:func:`cluster_estimate` draws no resamples).
        seed: Deprecated and ignored, as ``n_resamples``.
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
    tables, ids = cluster_tables(codes[0], codes[1], clusters, n_classes)
    return estimates(tables, metrics, resample_weights(len(ids), n_resamples, seed), level)


# --------------------------------------------------------------------------- several raters

def fleiss_kappa(counts: npt.ArrayLike) -> float:
    """Fleiss' kappa from an items x categories count table with equal raters per item.

    Raises:
        ValueError: Items have different numbers of ratings, or fewer than two.
    """
    c = np.asarray(counts, dtype=float)
    per_item = c.sum(axis=1)
    if c.size == 0:
        return float("nan")
    if not np.all(per_item == per_item[0]) or per_item[0] < 2:
        raise ValueError("Fleiss' kappa needs the same number (>= 2) of ratings on every item")
    return float(_fleiss_from_sums(*_fleiss_sums(c)))


def _fleiss_sums(c: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    n = c.sum(axis=-1)
    agreement_i = _div((c * c).sum(axis=-1) - n, n * (n - 1))
    return np.nansum(agreement_i, axis=-1), np.asarray(c.shape[-2], dtype=float), c.sum(axis=-2)


def _fleiss_from_sums(sum_p: FloatArray, n_items: FloatArray, category_totals: FloatArray) -> FloatArray:
    p_bar = _div(sum_p, n_items)
    p_j = _div(category_totals, category_totals.sum(axis=-1, keepdims=True))
    p_e = (p_j * p_j).sum(axis=-1)
    return _div(p_bar - p_e, 1.0 - p_e)


def fleiss_kappa_ci(counts: npt.ArrayLike, clusters: npt.ArrayLike, *, n_resamples: int = DEFAULT_RESAMPLES,
                    seed: int = DEFAULT_SEED, level: float = 0.95) -> Estimate:
    """Fleiss' kappa with a cluster-bootstrap CI (its sums add up over clusters)."""
    c = np.asarray(counts, dtype=float)
    point = fleiss_kappa(c)
    n = c.sum(axis=1)
    p_i = ((c * c).sum(axis=1) - n) / (n * (n - 1))
    ids, idx = np.unique(np.asarray(clusters), return_inverse=True)
    per = np.zeros((len(ids), 2 + c.shape[1]))
    np.add.at(per, idx, np.column_stack([p_i, np.ones_like(p_i), c]))
    boot = bootstrap_tables(per, resample_weights(len(ids), n_resamples, seed))
    samples = _fleiss_from_sums(boot[:, 0], boot[:, 1], boot[:, 2:])
    return bootstrap_estimate(point, samples, len(ids), level)


def krippendorff_alpha(reliability_data: npt.ArrayLike, level: Level) -> float:
    """Krippendorff's alpha via the ``krippendorff`` package.

    Args:
        reliability_data: Raters x units matrix of numeric codes, NaN where a
            rater did not rate a unit.
        level: Level of measurement, always explicit (nominal for categories).
    """
    data = np.asarray(reliability_data, dtype=float)
    pairable = (~np.isnan(data)).sum(axis=0) >= 2
    if pairable.sum() == 0 or len(np.unique(data[:, pairable][~np.isnan(data[:, pairable])])) < 2:
        return float("nan")
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))


def unit_coincidences(reliability_data: npt.ArrayLike, values: npt.ArrayLike) -> FloatArray:
    """Per-unit coincidence matrices ``(units, V, V)`` (Krippendorff 2011, eq. for o_ck).

    Coincidences add up over units, which makes a cluster bootstrap of alpha a
    weighted sum, like the two-rater tables above.
    """
    data = np.asarray(reliability_data, dtype=float)
    vals = np.asarray(values, dtype=float)
    counts = np.stack([(data == v).sum(axis=0) for v in vals], axis=1).astype(float)  # units x V
    m = counts.sum(axis=1)
    outer = counts[:, :, None] * counts[:, None, :] - np.einsum("uv,vw->uvw", counts, np.eye(len(vals)))
    scale = np.where(m >= 2, 1.0 / np.maximum(m - 1, 1), 0.0)
    coincidences: FloatArray = outer * scale[:, None, None]  # numpy's stubs leave einsum untyped (Any)
    return coincidences


def alpha_from_coincidences(o: FloatArray, values: npt.ArrayLike, level: Level) -> FloatArray:
    """Krippendorff's alpha from (possibly batched) coincidence matrices ``(..., V, V)``."""
    o = np.asarray(o, dtype=float)
    vals = np.asarray(values, dtype=float)
    n_v = o.sum(axis=-1)
    n = n_v.sum(axis=-1)
    if level == "nominal":
        delta = np.broadcast_to(1.0 - np.eye(len(vals)), o.shape)
    elif level == "interval":
        delta = np.broadcast_to((vals[:, None] - vals[None, :]) ** 2, o.shape)
    elif level == "ratio":
        delta = np.broadcast_to(_div((vals[:, None] - vals[None, :]) ** 2,
                                     (vals[:, None] + vals[None, :]) ** 2), o.shape)
        delta = np.nan_to_num(delta)
    elif level == "ordinal":
        cum = np.cumsum(n_v, axis=-1)
        lo = np.minimum.outer(np.arange(len(vals)), np.arange(len(vals)))
        hi = np.maximum.outer(np.arange(len(vals)), np.arange(len(vals)))
        between = np.take(cum, hi, axis=-1) - np.take(cum, lo, axis=-1) + np.take(n_v, lo, axis=-1)
        delta = (between - (n_v[..., :, None] + n_v[..., None, :]) / 2.0) ** 2
    else:
        raise ValueError(f"unknown level {level!r}")
    observed = (o * delta).sum(axis=(-2, -1))
    expected = (n_v[..., :, None] * n_v[..., None, :] * delta).sum(axis=(-2, -1))
    alpha: FloatArray = 1.0 - (n - 1.0) * _div(observed, expected)  # numpy's stubs type sum(axis=...) as Any
    return alpha


def krippendorff_alpha_ci(reliability_data: npt.ArrayLike, clusters: npt.ArrayLike, level: Level, *,
                          n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                          ci_level: float = 0.95) -> Estimate:
    """Krippendorff's alpha (package) with a cluster-bootstrap CI over units.

    Args:
        reliability_data: Raters x units, NaN for missing.
        clusters: Cluster (user) of each unit.
        level: Level of measurement.
        n_resamples: Bootstrap resamples.
        seed: Resampling seed.
        ci_level: Confidence level.
    """
    data = np.asarray(reliability_data, dtype=float)
    point = krippendorff_alpha(data, level)
    values = np.unique(data[~np.isnan(data)])
    o_units = unit_coincidences(data, values)
    ids, idx = np.unique(np.asarray(clusters), return_inverse=True)
    per = np.zeros((len(ids), len(values), len(values)))
    np.add.at(per, idx, o_units)
    boot = bootstrap_tables(per, resample_weights(len(ids), n_resamples, seed))
    return bootstrap_estimate(point, alpha_from_coincidences(boot, values, level), len(ids), ci_level)
