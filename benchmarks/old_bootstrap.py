"""The percentile cluster bootstrap the tool printed before issue 21, kept only for benchmarks' "before" columns.

Not part of the package: every printed interval is the one CI rule
(:func:`personagap.analysis.ci_rule.cluster_estimate`, a user-clustered jackknife-t), which draws no resamples.
``benchmarks/calibration.py`` measures this rule's coverage beside it and ``benchmarks/bootstrap_kappa.py`` its cost.
"""

from __future__ import annotations

import numpy as np

from personagap.analysis.arrays import FloatArray
from personagap.analysis.ci_rule import MIN_USERS_FOR_CI, Estimate

DEFAULT_RESAMPLES = 1000


def resample_weights(n_clusters: int, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> FloatArray:
    """Cluster bootstrap weights: row b counts how often each cluster is drawn in resample b."""
    rng = np.random.default_rng(seed)
    if n_clusters == 0:
        return np.zeros((n_resamples, 0))
    return rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_resamples).astype(float)


def bootstrap_tables(tables: FloatArray, weights: FloatArray) -> FloatArray:
    """Resampled totals ``(B, ...)`` of per-cluster arrays ``(U, ...)``."""
    return np.tensordot(weights, tables, axes=(1, 0))


def percentile_interval(samples: FloatArray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap samples, ignoring undefined resamples."""
    s = np.asarray(samples, dtype=float)
    s = s[~np.isnan(s)]
    if s.size == 0:
        return (float("nan"), float("nan"))
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(s, [tail, 100.0 - tail])
    return (float(lo), float(hi))


def bootstrap_estimate(point: float, samples: FloatArray, n_clusters: int, level: float = 0.95) -> Estimate:
    """A percentile bootstrap :class:`Estimate`; ``n_undefined`` counts the undefined resamples.

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
