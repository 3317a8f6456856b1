"""Agreement among several raters (Fleiss' kappa, Krippendorff's alpha) and their user-clustered CIs.

Both are functions of sums that add up over users (per-item agreement and category totals; coincidence matrices),
so their intervals are :func:`~personagap.analysis.ci_rule.cluster_estimate` of per-user sums.
"""

from __future__ import annotations

from typing import Literal

import krippendorff
import numpy as np
import numpy.typing as npt

from personagap.analysis.arrays import FloatArray
from personagap.analysis.arrays import safe_div as _div
from personagap.analysis.ci_rule import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Estimate,
    bootstrap_estimate,
    bootstrap_tables,
    resample_weights,
)

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
