"""Agreement at coverage: keep a judge's labels where its confidence is at least a threshold, and score what is kept.

For every confidence value the judge stated (its own scale), the curve gives the share of its labelled items kept
(coverage), their number, and accuracy and kappa against the blind human reference on them, each with the one
user-clustered CI (:func:`personagap.analysis.agreement.estimates`). At the lowest threshold every item is kept, so
that point is the judge's overall accuracy on the items with a confidence.

Choosing a threshold is selection: the threshold that reaches a target at the highest coverage is chosen on one
half of the users and its figures are reported on the other half (:func:`split_users`, a hash of the user id: the
same split every run, independent of the labels), never on the users it was chosen on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from personagap.analysis.agreement import Estimate, FloatArray, ci_list, estimates
from personagap.analysis.codes import sorted_codes
from personagap.records import DatasetScale
from personagap.scales import as_scale, on_scale

Metric = Literal["accuracy", "kappa"]
_METRICS: tuple[Metric, ...] = ("accuracy", "kappa")

CURVE_MIN_USERS_FOR_CI = 20
"""A point of a coverage curve gets a CI only when its kept items span this many users. Measured
(``benchmarks/conf_coverage_table.md``, 400 studies a cell): points spanning 10-19 users of a 50-user study covered
0.893 (MC SE 0.013), points spanning 20 or more users 0.936-0.947. High thresholds keep few items of few users,
and the jackknife undercovers there."""


@dataclass(frozen=True)
class Target:
    """What a threshold must reach: ``metric`` at least ``value``; ``source`` says where the value comes from."""

    metric: Metric
    value: float
    source: Literal["human ceiling", "given"]

    def to_json(self) -> dict[str, Any]:
        """``{metric, value, source}``."""
        return {"metric": self.metric, "value": self.value, "source": self.source}


@dataclass(frozen=True)
class CoveragePoint:
    """The judge's labels with confidence >= ``min_confidence``: how many are kept, and how well they agree."""

    min_confidence: float
    coverage: float
    n: int
    accuracy: Estimate
    kappa: Estimate

    def to_json(self) -> dict[str, Any]:
        """``{min_confidence, coverage, n, n_users, accuracy, accuracy_ci, kappa, kappa_ci}``."""
        return {"min_confidence": self.min_confidence, "coverage": self.coverage, "n": self.n,
                "n_users": self.accuracy.n_clusters, "accuracy": self.accuracy.value,
                "accuracy_ci": ci_list(self.accuracy), "kappa": self.kappa.value, "kappa_ci": ci_list(self.kappa),
                "ci_note": (f"no CI below {CURVE_MIN_USERS_FOR_CI} users at a threshold (it undercovers there)"
                            if (self.accuracy.n_clusters or 0) < CURVE_MIN_USERS_FOR_CI else None)}


@dataclass(frozen=True)
class ThresholdChoice:
    """A threshold chosen on some users (``chosen_users``) and reported on the others (``held_out_users``)."""

    target: Target
    min_confidence: float | None
    """None: no threshold reaches the target on the choosing users."""
    chosen_on: CoveragePoint | None
    held_out: CoveragePoint | None
    chosen_users: tuple[str, ...]
    held_out_users: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The target, the threshold, its figures on the choosing users and on the held-out users (counts only)."""
        return {"target": self.target.to_json(), "min_confidence": self.min_confidence,
                "chosen_on": None if self.chosen_on is None else self.chosen_on.to_json(),
                "held_out": None if self.held_out is None else self.held_out.to_json(),
                "n_users_chosen_on": len(self.chosen_users), "n_users_held_out": len(self.held_out_users),
                "split": "users by sha256(user id): even first byte choose, odd report"}


def split_users(users: list[str] | tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Split users into (choose, report) halves by a hash of their id: deterministic, blind to every label."""
    choose = tuple(sorted(u for u in set(users) if hashlib.sha256(u.encode("utf-8")).digest()[0] % 2 == 0))
    report = tuple(sorted(set(users) - set(choose)))
    return choose, report


def _threshold_tables(rows: pd.DataFrame, scale: DatasetScale) -> tuple[FloatArray, FloatArray]:
    """Thresholds (descending) and per-user tables ``(T, U, K, K)`` of the labels at or above each threshold."""
    confidence = rows["confidence"].to_numpy(dtype=float)
    thresholds = np.unique(confidence)[::-1]
    users, user = sorted_codes(rows["user_id"].astype(str))  # np.unique's sorted ids, by hashing
    s = as_scale(scale)
    k = len(s.categories)
    # Each count row adds its items to one cell (threshold value, user, human, label): one weighted bincount, as
    # user_tables counts (the same codes; a label off the scale raises there and here).
    h = _category_codes(rows["human"], scale)
    j = _category_codes(rows["label"], scale)
    value = np.searchsorted(-thresholds, -confidence).astype(np.int64)
    flat = ((value * len(users) + user.astype(np.int64)) * k + h) * k + j
    at = np.bincount(flat, weights=rows["n"].to_numpy(dtype=float), minlength=len(thresholds) * len(users) * k * k)
    return thresholds, np.cumsum(at.reshape(len(thresholds), len(users), k, k), axis=0)


def _category_codes(labels: pd.Series, scale: DatasetScale) -> npt.NDArray[np.int64]:
    """Each label's category on the scale (its position in ``categories``); a label off the scale raises.

    The distinct labels are put on the scale, not every row: a judge's 10^6 count rows hold a handful of labels.
    """
    codes, distinct = pd.factorize(labels, use_na_sentinel=False)  # a missing label is a value, and off the scale
    s = as_scale(scale)
    category = pd.Categorical(on_scale(pd.Series(distinct), s), categories=list(s.categories)).codes
    return np.asarray(np.asarray(category, dtype=np.int64)[codes], dtype=np.int64)


def _point(threshold: float, tables: FloatArray, every: FloatArray, level: float) -> CoveragePoint:
    """The point at ``threshold``.

    From the users' tables of the labels kept there (``tables``) and of every label (``every``), both ``(U, K, K)``.
    """
    kept = tables[tables.sum(axis=(1, 2)) > 0]  # users with no item kept are no cluster of this point
    n = float(kept.sum())
    n_all = float(every.sum())
    # Items per user are judged unequal or not on every user's labels: the users a threshold keeps can look even
    # exactly when they lack the heavy users (ci_rule's unequal-items step).
    figures = estimates(kept, _METRICS, level=level, sizes=every.sum(axis=(1, 2)))
    if kept.shape[0] < CURVE_MIN_USERS_FOR_CI:
        figures = {m: replace(e, ci=(float("nan"), float("nan"))) for m, e in figures.items()}
    return CoveragePoint(min_confidence=float(threshold), coverage=n / n_all, n=int(n),
                         accuracy=figures["accuracy"], kappa=figures["kappa"])


def coverage_curve(rows: pd.DataFrame, scale: DatasetScale, *, level: float = 0.95) -> list[CoveragePoint]:
    """Coverage, accuracy and kappa at every threshold the judge used, highest threshold first.

    Args:
        rows: One judge's confidence counts (``user_id``, ``confidence``, ``human``, ``label``, ``n``), on one
            confidence scale; labels and references on the dataset's scale.
        scale: The dataset's scale (kappa is scored over its categories, as in every report).
        level: Confidence level of every interval.

    Returns:
        One point per distinct confidence; the last keeps every item.
    """
    if rows.empty:
        return []
    thresholds, tables = _threshold_tables(rows, scale)
    return [_point(t, tables[i], tables[-1], level) for i, t in enumerate(thresholds)]


def choose_threshold(rows: pd.DataFrame, scale: DatasetScale, target: Target, *,
                     level: float = 0.95) -> ThresholdChoice:
    """The lowest threshold (highest coverage) reaching ``target`` on one half of the users, reported on the other.

    Args:
        rows: As :func:`coverage_curve`.
        scale: The dataset's scale.
        target: The figure to reach (its point estimate on the choosing users).
        level: Confidence level of the held-out figures' intervals.
    """
    # The distinct ids, not a Python string per count row.
    chosen_users, held_out_users = split_users([str(u) for u in rows["user_id"].astype(str).unique()])
    mine = rows[rows["user_id"].astype(str).isin(chosen_users)]
    theirs = rows[rows["user_id"].astype(str).isin(held_out_users)]
    reached = [p for p in coverage_curve(mine, scale, level=level)
               if getattr(p, target.metric).value >= target.value]
    if not reached:
        return ThresholdChoice(target, None, None, None, chosen_users, held_out_users)
    best = reached[-1]  # the curve runs from the highest threshold down: the last one reached covers most
    held_out = None
    if not theirs.empty:
        thresholds, tables = _threshold_tables(theirs, scale)
        # The held-out users' labels at or above the chosen threshold (their own values need not include it).
        at = np.flatnonzero(thresholds >= best.min_confidence)
        if at.size:
            held_out = _point(best.min_confidence, tables[at[-1]], tables[-1], level)
    return ThresholdChoice(target, best.min_confidence, best, held_out, chosen_users, held_out_users)
