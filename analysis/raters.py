"""Agreement among several raters (Fleiss' kappa, Krippendorff's alpha) and their user-clustered CIs.

Both are functions of sums that add up over users (per-item agreement and category totals; coincidence matrices),
so their intervals are :func:`~personagap.analysis.ci_rule.cluster_estimate` of per-user sums.
"""

from __future__ import annotations

import math
from typing import Literal

import krippendorff
import numpy as np
import numpy.typing as npt

from personagap.analysis.arrays import FloatArray
from personagap.analysis.arrays import safe_div as _div
from personagap.analysis.ci_rule import Estimate, cluster_estimate, interval_from_leave_outs, leave_one_out

Level = Literal["nominal", "ordinal", "interval", "ratio"]


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


def fleiss_user_sums(counts: npt.ArrayLike, clusters: npt.ArrayLike) -> FloatArray:
    """Per-user sums ``(U, 2 + K)`` Fleiss' kappa is a function of: sum of per-item agreement, items, category totals.

    Args:
        counts: Items x categories counts, the same number (>= 2) of ratings on every item.
        clusters: The user of each item; users are in sorted id order.
    """
    c = np.asarray(counts, dtype=float)
    n = c.sum(axis=1)
    p_i = ((c * c).sum(axis=1) - n) / (n * (n - 1))
    ids, idx = np.unique(np.asarray(clusters), return_inverse=True)
    per = np.zeros((len(ids), 2 + c.shape[1]))
    np.add.at(per, idx, np.column_stack([p_i, np.ones_like(p_i), c]))
    return per


def fleiss_from_user_sums(totals: FloatArray) -> FloatArray:
    """Fleiss' kappa of totals ``(..., 2 + K)`` of :func:`fleiss_user_sums` (vectorised over leading axes)."""
    t = np.asarray(totals, dtype=float)
    return _fleiss_from_sums(t[..., 0], t[..., 1], t[..., 2:])


def fleiss_kappa_ci(counts: npt.ArrayLike, clusters: npt.ArrayLike, *, level: float = 0.95) -> Estimate:
    """Fleiss' kappa with its user-clustered CI (:func:`~personagap.analysis.ci_rule.cluster_estimate`)."""
    c = np.asarray(counts, dtype=float)
    fleiss_kappa(c)  # validates equal ratings per item (one clear error)
    return cluster_estimate(fleiss_from_user_sums, fleiss_user_sums(c, clusters), level=level, bounds=(-1.0, 1.0))


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


def alpha_user_coincidences(reliability_data: npt.ArrayLike, clusters: npt.ArrayLike,
                             values: npt.ArrayLike) -> FloatArray:
    """Per-user coincidence matrices ``(U, V, V)`` (units summed within their user; users in sorted id order).

    Args:
        reliability_data: Raters x units, NaN for missing.
        clusters: The user of each unit.
        values: The V values (codes) alpha is over.
    """
    vals = np.asarray(values, dtype=float)
    o_units = unit_coincidences(reliability_data, vals)
    ids, idx = np.unique(np.asarray(clusters), return_inverse=True)
    per = np.zeros((len(ids), len(vals), len(vals)))
    np.add.at(per, idx, o_units)
    return per


def krippendorff_alpha_ci(reliability_data: npt.ArrayLike, clusters: npt.ArrayLike, level: Level, *,
                          ci_level: float = 0.95) -> Estimate:
    """Krippendorff's alpha (package) with its user-clustered CI over per-user coincidences.

    Args:
        reliability_data: Raters x units, NaN for missing.
        clusters: Cluster (user) of each unit.
        level: Level of measurement.
        ci_level: Confidence level.
    """
    data = np.asarray(reliability_data, dtype=float)
    point = krippendorff_alpha(data, level)
    values = np.unique(data[~np.isnan(data)])

    def alpha(o: FloatArray) -> FloatArray:
        return alpha_from_coincidences(o, values, level)

    _, theta = leave_one_out(alpha, alpha_user_coincidences(data, clusters, values))
    # The point is the package's (the reference implementation); the leave-outs are the same formula on sums.
    return interval_from_leave_outs(point, theta, ci_level, bounds=(-math.inf, 1.0))
