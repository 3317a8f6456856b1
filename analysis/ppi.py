"""User-clustered PPI++: prediction-powered inference for a rate when one user's items are not independent.

PPI++ (Angelopoulos, Duchi & Zrnic 2023) estimates the human rate of a label from the humans' labels on the
items they labelled (``y``), the judge's labels on the same items (``f``) and the judge's labels on the items
humans did not label (``g``):

    theta(lam) = mean(y) + lam * (mean(g) - mean(f))

ppi_py's interval treats items as independent. Annotation campaigns label whole users, and a user's items share
the user: the item-level interval then covers 0.69-0.71 (issue 21). Here every figure is a function of per-user
sums, so users are the independent units:

* the estimator linearises into one term per user, ``psi_u(lam) = r_u + lam * d_u`` with
  ``r_u = (y_u - n_u ybar) / n`` and ``d_u = (g_u - N_u gbar) / N - (f_u - n_u fbar) / n``; both sum to zero
  over users;
* its cluster-robust (sandwich) variance is ``U / (U - 1) * sum_u psi_u(lam)^2``;
* ``lam`` minimises that variance (power tuning under clustering): ``lam = -sum r d / sum d^2``, clipped to
  [0, 1] as ppi_py clips it (0 gives the human-only estimate, 1 plain PPI).

The sums over users of ``r d``, ``d^2``, ``r^2`` are quadratic forms in the sums of the outer products
``v_u v_u^T`` of ``v_u = (1, n_u, y_u, f_u, N_u, g_u)``: so the per-user array :func:`ppi_per_user` is additive
over users, and the tuned estimator :func:`ppi_stat` is a smooth function of its total. A resampling interval
over users (the project's one CI rule) therefore re-tunes ``lam`` on every resample: the tuning's own
variability is in the interval.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from personagap.analysis.arrays import FloatArray
from personagap.analysis.arrays import safe_div as _div

# Positions in v_u = (1, n, y, f, N, g): users, labelled items, human positives on them, judge positives on them,
# unlabelled items, judge positives on them.
_ONE, _N_LAB, _Y, _F, _N_UNL, _G = range(6)
PPI_WIDTH = 6
"""Length of ``v_u``; a per-user PPI array is ``(U, PPI_WIDTH, PPI_WIDTH)``."""


def ppi_per_user(n_labelled: npt.ArrayLike, y: npt.ArrayLike, f: npt.ArrayLike, n_unlabelled: npt.ArrayLike,
                 g: npt.ArrayLike) -> FloatArray:
    """Per-user additive arrays ``(U, 6, 6)``: the outer product ``v_u v_u^T``, ``v_u = (1, n, y, f, N, g)``.

    Args:
        n_labelled: Per user, items with both a human and a judge label.
        y: Per user, human positives on those items.
        f: Per user, judge positives on those items.
        n_unlabelled: Per user, items only the judge labelled.
        g: Per user, judge positives on those items.

    Returns:
        The arrays; their sum over users (or any weighted sum, as a resample) is what :func:`ppi_stat` reads.
    """
    cols = [np.asarray(c, dtype=float) for c in (n_labelled, y, f, n_unlabelled, g)]
    v = np.column_stack([np.ones_like(cols[0]), *cols])
    out: FloatArray = v[:, :, None] * v[:, None, :]
    return out


def _forms(totals: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    # The means and the sums over users of r^2, r d and d^2, from the totals (..., 6, 6); NaN where undefined.
    t = np.asarray(totals, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _forms_of(t)


def _forms_of(t: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    first = t[..., _ONE, :]
    n, n_unl = first[..., _N_LAB], first[..., _N_UNL]
    ybar, fbar = _div(first[..., _Y], n), _div(first[..., _F], n)
    # No unlabelled item: the correction term is absent (gbar 0 and its weight 0), PPI++ is the human-only mean.
    gbar = np.where(n_unl > 0, _div(first[..., _G], np.where(n_unl > 0, n_unl, 1.0)), 0.0)
    inv_unl = np.where(n_unl > 0, 1.0 / np.where(n_unl > 0, n_unl, 1.0), 0.0)
    zeros = np.zeros_like(n)
    alpha = np.stack([zeros, -ybar / n, 1.0 / n, zeros, zeros, zeros], axis=-1)
    # No unlabelled item: nothing for the judge to add, so d_u = 0 for every user, lam = 0 and the estimate is the
    # human-only mean (not ybar - lam * fbar: the judge's labelled mean has no unlabelled mean to be compared with).
    has_unlabelled = (n_unl > 0)[..., None]
    beta = np.where(has_unlabelled, np.stack([zeros, fbar / n, zeros, -1.0 / n, -gbar * inv_unl, inv_unl], axis=-1),
                    0.0)
    srr = np.einsum("...i,...ij,...j->...", alpha, t, alpha)
    srd = np.einsum("...i,...ij,...j->...", alpha, t, beta)
    sdd = np.einsum("...i,...ij,...j->...", beta, t, beta)
    return ybar, fbar, gbar, srr, srd, sdd


def _lam(srd: FloatArray, sdd: FloatArray) -> FloatArray:
    # Where the judge's labels carry no variation (sdd 0) the correction cannot help: lam 0 (human-only).
    lam = np.clip(-_div(srd, sdd), 0.0, 1.0)
    return np.where(np.isnan(lam) & ~np.isnan(srd), 0.0, lam)


def ppi_lambda(totals: FloatArray) -> FloatArray:
    """The power-tuning ``lam`` that minimises the user-clustered variance, clipped to [0, 1]."""
    _, _, _, _, srd, sdd = _forms(totals)
    return _lam(srd, sdd)


def ppi_stat(totals: FloatArray) -> FloatArray:
    """Clustered PPI++ estimate of the human rate from totals ``(..., 6, 6)`` of :func:`ppi_per_user`.

    Vectorised over leading axes (resamples); NaN where no item is labelled.
    """
    ybar, fbar, gbar, _, srd, sdd = _forms(totals)
    out: FloatArray = ybar + _lam(srd, sdd) * (gbar - fbar)
    return out


def ppi_variance(totals: FloatArray) -> FloatArray:
    """The cluster-robust (sandwich) variance of :func:`ppi_stat` at its tuned ``lam``: ``U/(U-1) sum psi_u^2``.

    NaN with fewer than two users.
    """
    _, _, _, srr, srd, sdd = _forms(totals)
    lam = _lam(srd, sdd)
    users = np.asarray(totals, dtype=float)[..., _ONE, _ONE]
    out: FloatArray = _div(users, users - 1.0) * (srr + 2.0 * lam * srd + lam**2 * sdd)
    return out


def labelled_users(per_user: FloatArray) -> int:
    """How many users of a :func:`ppi_per_user` array have human-labelled items (the clusters of the rectifier)."""
    return int((np.asarray(per_user)[:, _ONE, _N_LAB] > 0).sum())
