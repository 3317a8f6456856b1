"""Calibration of a judge's confidence against the blind human reference: Brier score, ECE, reliability bins.

On every scale a judge answers in, the event is the same: *the judge's label equals the item's human reference*
(:mod:`personagap.analysis.comparable`'s one rule). Its stated confidence, mapped onto [0, 1] by
:func:`personagap.confidence.as_probability`, is the probability it gives to being right. So a binary, pairwise,
nominal or ordinal judge is calibrated the same way: confidence in its answer vs the answer being right.

Every figure is a function of per-user additive sums (items, right answers, summed probabilities, summed squared
errors, per bin), so its interval is the one CI rule, :func:`personagap.analysis.agreement.cluster_estimate`
(whole users left out; no interval below its minimum number of users). The bins are
``sklearn.calibration.calibration_curve``'s uniform bins (same edges, same assignment of a value on an edge), and
the Brier score is ``sklearn.metrics.brier_score_loss`` of (right, probability); the tests check both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import pandas as pd

from personagap.analysis.agreement import (
    MIN_USERS_FOR_CI,
    Estimate,
    FloatArray,
    ci_list,
    cluster_estimate,
    interval_from_leave_outs,
    leave_one_out,
)
from personagap.analysis.codes import sorted_codes
from personagap.confidence import as_probability, scale_bounds

DEFAULT_BINS = 10
"""Reliability bins: ten equal-width bins of the probability, as reliability diagrams usually draw them."""
RATE = (0.0, 1.0)
"""The range of every calibration figure (agreement rates, Brier score and ECE of probabilities)."""
ECE_MIN_USERS_FOR_CI = 20
"""No ECE interval below this many users: ECE sums absolute per-bin gaps, so it is biased upward in small samples and
its interval covered 0.895 at 10 users (0.930 at 20, 0.943 at 50; ``benchmarks/conf_coverage_table.md``)."""
ECE_MIN_ITEMS_FOR_CI = 400
"""Nor below this many items (issue 30's audit, ``benchmarks/conf_coverage_table.md``): the upward bias of ECE shrinks
with the items per bin, not with the users, and the interval is centred on the biased point. With 1-3 items a user
the printed interval covered 0.82-0.89 at 20 users (40 items) and 0.88-0.94 at 50 (100 items). Without a minimum
(200 studies a size): 0.855-0.935 at 40-200 items, 0.915-0.965 at 350-400 items (none below 0.93 beyond Monte Carlo
error), 0.945 at 700; the uneven worlds' studies of 400+ items covered 0.94-0.99. A jackknife bias correction made it
worse (0.68-0.86 below 200 items). Still at the edge at 400: a debiased ECE would do better than a higher minimum."""


@dataclass(frozen=True)
class ReliabilityBin:
    """One bin of the reliability diagram: its edges on the judge's own scale, items, mean confidence, agreement."""

    lo: float
    hi: float
    n: int
    confidence: float
    """Mean stated confidence of the bin's items as a probability (:func:`personagap.confidence.as_probability`)."""
    agreement: Estimate
    """Share of the bin's items whose label equals the human reference, with its user-clustered CI."""

    def to_json(self) -> dict[str, Any]:
        """The report's shape: ``{lo, hi, n, confidence, agreement, agreement_ci, n_users}``."""
        return {"lo": self.lo, "hi": self.hi, "n": self.n, "confidence": self.confidence,
                "agreement": self.agreement.value, "agreement_ci": ci_list(self.agreement),
                "n_users": self.agreement.n_clusters}


@dataclass(frozen=True)
class Calibration:
    """A judge's calibration on one confidence scale."""

    scale: str
    n: int
    n_users: int
    brier: Estimate
    ece: Estimate
    bins: tuple[ReliabilityBin, ...]

    def to_json(self) -> dict[str, Any]:
        """``{brier, brier_ci, ece, ece_ci, n, n_users, bins: [...]}`` (NaN kept; the report makes it JSON-safe)."""
        return {"brier": self.brier.value, "brier_ci": ci_list(self.brier), "ece": self.ece.value,
                "ece_ci": ci_list(self.ece), "n": self.n, "n_users": self.n_users,
                "ece_note": ece_note(self.n_users, self.n), "bins": [b.to_json() for b in self.bins]}


def ece_note(n_users: int, n_items: int) -> str | None:
    """Why ECE has no interval with this many users and items (it undercovers there), or None when it may have one."""
    if n_users < ECE_MIN_USERS_FOR_CI:
        return f"no ECE interval below {ECE_MIN_USERS_FOR_CI} users (it undercovers)"
    if n_items < ECE_MIN_ITEMS_FOR_CI:
        return (f"no ECE interval below {ECE_MIN_ITEMS_FOR_CI} items ({n_items}): ECE is biased upward with few items "
                "a bin, and its interval undercovers")
    return None


def right_answers(rows: pd.DataFrame) -> pd.Series:
    """Whether each count row's judge label equals its human reference (compared as text, as every report does)."""
    return rows["label"].astype(str) == rows["human"].astype(str)


def bin_index(probability: FloatArray, n_bins: int = DEFAULT_BINS) -> np.ndarray[Any, np.dtype[np.intp]]:
    """Each probability's uniform bin, exactly as ``sklearn.calibration.calibration_curve`` assigns it."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return np.searchsorted(edges[1:-1], probability)


def per_user_sums(rows: pd.DataFrame, scale: str, n_bins: int = DEFAULT_BINS) -> tuple[list[str], FloatArray]:
    """Per-user additive sums per bin: ``(U, n_bins, 4)`` = items, right answers, summed probability, squared error.

    Args:
        rows: One judge's confidence counts (``user_id``, ``confidence``, ``human``, ``label``, ``n``), e.g.
            :func:`personagap.store.confidence.confidence_counts` rows of one judge and scale.
        scale: Their confidence scale.
        n_bins: Uniform probability bins.

    Returns:
        Sorted user ids and the sums.
    """
    p = as_probability(rows["confidence"].to_numpy(dtype=float), scale)
    n = rows["n"].to_numpy(dtype=float)
    right = right_answers(rows).to_numpy(dtype=float)
    users, user = sorted_codes(rows["user_id"].astype(str))  # np.unique's sorted ids, without sorting Python strings
    cell = user * n_bins + bin_index(p, n_bins)
    size = len(users) * n_bins
    sums = [np.bincount(cell, weights=w, minlength=size) for w in (n, n * right, n * p, n * (p - right) ** 2)]
    # With weights bincount returns float64; numpy's stubs type it as an integer array.
    return [str(u) for u in users], cast(FloatArray, np.stack(sums, axis=-1).reshape(len(users), n_bins, 4))


def _brier(t: FloatArray) -> FloatArray:
    return np.asarray(t[..., 3].sum(-1) / t[..., 0].sum(-1), dtype=float)


def _ece(t: FloatArray) -> FloatArray:
    # sum_b n_b/N |acc_b - conf_b| = sum_b |right_b - sum_p_b| / N: a function of the per-bin sums.
    return np.asarray(np.abs(t[..., 1] - t[..., 2]).sum(-1) / t[..., 0].sum(-1), dtype=float)


def _rate(t: FloatArray) -> FloatArray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(np.where(t[..., 1] > 0, t[..., 0] / t[..., 1], np.nan), dtype=float)


def calibration(rows: pd.DataFrame, scale: str, *, n_bins: int = DEFAULT_BINS, level: float = 0.95) -> Calibration:
    """Brier score, expected calibration error and reliability bins of one judge, each with a user-clustered CI.

    Args:
        rows: The judge's confidence counts on ``scale`` (see :func:`per_user_sums`); at least one row.
        scale: The confidence scale (``"1-100"``, ``"probability"``, ...): it must state its ends.
        n_bins: Uniform probability bins (empty bins are left out, as ``calibration_curve`` does).
        level: Confidence level of every interval.

    Raises:
        ValueError: No rows, or a scale without ends (:func:`personagap.confidence.scale_bounds`).
    """
    if rows.empty:
        raise ValueError("calibration needs at least one label with a confidence and a human reference")
    lo, hi = scale_bounds(scale)
    users, per = per_user_sums(rows, scale, n_bins)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    total = per.sum(axis=0)
    bins = []
    for b in np.flatnonzero(total[:, 0] > 0):
        # Users without items in the bin add nothing to it and are no cluster of its interval.
        in_bin = per[per[:, b, 0] > 0, b, :]
        bins.append(ReliabilityBin(
            lo=float(lo + edges[b] * (hi - lo)), hi=float(lo + edges[b + 1] * (hi - lo)), n=int(total[b, 0]),
            confidence=float(total[b, 2] / total[b, 0]),
            # Whether items per user are too unequal for the bin's few users is judged on every user's items:
            # a bin's subset can look even exactly when it lacks the heavy users (0.667 covered in that case).
            agreement=cluster_estimate(_rate, in_bin[:, [1, 0]], level=level, bounds=RATE,
                                       sizes=per[:, :, 0].sum(axis=1))))
    ece = interval_from_leave_outs(*leave_one_out(_ece, per), level,
                                   min_users=max(ECE_MIN_USERS_FOR_CI, MIN_USERS_FOR_CI), bounds=RATE)
    n_items = int(total[:, 0].sum())
    if len(users) >= ECE_MIN_USERS_FOR_CI and n_items < ECE_MIN_ITEMS_FOR_CI:
        nan = float("nan")
        ece = replace(ece, ci=(nan, nan), reason=ece_note(len(users), n_items) or "")
    return Calibration(scale=scale, n=n_items, n_users=len(users),
                       brier=cluster_estimate(_brier, per, level=level, bounds=RATE), ece=ece, bins=tuple(bins))
