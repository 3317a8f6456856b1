"""Routing: the judge decides where it is confident, people label the rest, and the stage's rate combines both.

A judge's label is *kept* on an item when the judge gave one and its confidence reaches the threshold
(:func:`personagap.analysis.coverage.choose_threshold` chooses it on half of the users, blind to the other half);
every other item is *routed* to people. The combined labelling is the judge's label on kept items and a person's
(the blind human reference, :mod:`personagap.analysis.comparable`) on routed ones; its rate of one category
(``positive``) is the stage's rate under routing.

While people have labelled only part of the routed items, the routed part is estimated by a difference estimator
(prediction-powered inference with weight 1): the judge's own (unconfident) positives over every routed item,
corrected by the mean human-minus-judge difference on the routed items people labelled, scaled up to all routed
items. It is unbiased when the labelled routed items are a random sample of the routed ones -- the Annotate page's
"routed to people" queue serves them in a seeded random order for that reason. Once every routed item is labelled
the correction is exact and the figure is the plain combined rate.

Every figure is a smooth function of per-user additive sums (:data:`TALLY`), so its interval is the one CI rule,
:func:`personagap.analysis.agreement.cluster_estimate`; ``benchmarks/calibration_routing.py`` measures its coverage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from personagap.analysis.agreement import Estimate, FloatArray, ci_list, cluster_estimate, json_safe_dict
from personagap.analysis.arrays import safe_div
from personagap.analysis.estimates import MIN_LABELLED_USERS, human_rate_from_users

TALLY = ("items", "kept_positive", "routed", "routed_judge_positive", "routed_labelled", "routed_human_positive",
         "routed_labelled_judge_positive")
"""The per-user sums every routing figure is a function of (columns of :func:`route_sums`)."""
_N, _KP, _R, _RF, _RL, _RY, _RLF = range(len(TALLY))
RATE_BOUNDS = (0.0, 1.0)
ITEM_COLUMNS = ("item_id", "user_id", "label", "confidence", "human")
"""One row per item of the dataset: the judge's parsed label (None: none or failed), its confidence (NaN: none
stated), and the blind human reference (None: no person has labelled it, or people tie)."""


def kept_mask(items: pd.DataFrame, threshold: float | None) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Which items keep the judge's label: it gave one, with a confidence at or above ``threshold``.

    Args:
        items: :data:`ITEM_COLUMNS` rows.
        threshold: The minimum confidence; None keeps nothing (no threshold reached the target).
    """
    if threshold is None:
        return np.zeros(len(items), dtype=bool)
    confidence = pd.to_numeric(items["confidence"], errors="coerce").to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        return np.asarray(items["label"].notna().to_numpy() & (confidence >= threshold), dtype=bool)


def route_sums(items: pd.DataFrame, threshold: float | None, positive: str) -> tuple[list[str], FloatArray]:
    """Per-user additive sums :data:`TALLY` ``(U, 7)``, users in sorted id order.

    Args:
        items: :data:`ITEM_COLUMNS` rows of one dataset and judge.
        threshold: The routing threshold (:func:`kept_mask`).
        positive: The category whose rate is estimated (labels compared as text).
    """
    kept = kept_mask(items, threshold)
    routed = ~kept
    judge_pos = (items["label"].astype(str) == positive).to_numpy() & items["label"].notna().to_numpy()
    labelled = items["human"].notna().to_numpy()
    human_pos = labelled & (items["human"].astype(str) == positive).to_numpy()
    columns = (np.ones(len(items)), kept & judge_pos, routed, routed & judge_pos, routed & labelled,
               routed & human_pos, routed & labelled & judge_pos)
    users, index = np.unique(items["user_id"].astype(str).to_numpy(), return_inverse=True)
    per = np.stack([np.bincount(index, weights=np.asarray(c, dtype=float), minlength=len(users)) for c in columns],
                   axis=-1)
    return [str(u) for u in users], np.asarray(per, dtype=float)


def combined_rate(t: FloatArray) -> FloatArray:
    """The combined rate from totals ``(..., 7)`` (:data:`TALLY`), vectorised over leading axes.

    ``(kept positives + routed judge positives + routed * mean(human - judge on labelled routed)) / items``;
    the correction is 0 where nothing is routed and undefined (NaN) where routed items exist but none is labelled.
    """
    t = np.asarray(t, dtype=float)
    correction = np.where(t[..., _R] > 0, t[..., _R] * safe_div(t[..., _RY] - t[..., _RLF], t[..., _RL]), 0.0)
    return safe_div(t[..., _KP] + t[..., _RF] + correction, t[..., _N])


def _share(t: FloatArray) -> FloatArray:
    return safe_div(t[..., 0], t[..., 1])


@dataclass(frozen=True)
class RoutingEstimate:
    """The stage's rate under routing, beside all-human and all-judge, and what people still have to label."""

    positive: str
    threshold: float | None
    combined: Estimate
    all_human: Estimate
    all_judge: Estimate
    items: int
    kept: int
    routed: int
    routed_labelled: int
    users: int
    labelled_users: int

    @property
    def still_needed(self) -> int:
        """Routed items no person has labelled yet (the human labels routing still needs)."""
        return self.routed - self.routed_labelled

    @property
    def exact(self) -> bool:
        """Every routed item is labelled: the combined rate needs no correction."""
        return self.still_needed == 0

    def to_json(self) -> dict[str, Any]:
        """Figures with their CIs and counts (NaN as null)."""
        def fig(e: Estimate) -> dict[str, Any]:
            return {"value": e.value, "ci": ci_list(e), "n_users": e.n_clusters}

        return json_safe_dict({
            "positive": self.positive, "threshold": self.threshold, "combined": fig(self.combined),
            "combined_kind": "exact" if self.exact else "corrected (people labelled part of the routed items)",
            "all_human": fig(self.all_human), "all_judge": fig(self.all_judge), "items": self.items,
            "kept_by_judge": self.kept, "routed_to_people": self.routed, "routed_labelled": self.routed_labelled,
            "human_labels_still_needed": self.still_needed, "n_users": self.users,
            "n_labelled_users": self.labelled_users})


def routing_estimate(items: pd.DataFrame, threshold: float | None, positive: str, *, level: float = 0.95,
                     min_labelled_users: int = MIN_LABELLED_USERS) -> RoutingEstimate:
    """The combined estimate of the rate of ``positive`` (judge on kept items, people on routed ones) with its CI.

    Args:
        items: :data:`ITEM_COLUMNS` rows of one dataset and judge (every item of the dataset, judged or not).
        threshold: The routing threshold; None routes every item to people.
        positive: The category whose rate is estimated.
        level: Confidence level of every interval.
        min_labelled_users: No combined interval below this many users with a person's label while items are
            routed (the coverage harness passes 0 to measure the rule itself below the printed minimum).

    Returns:
        The combined figure, the all-human figure (share of ``positive`` among the human references; no CI below
        :data:`~personagap.analysis.estimates.MIN_LABELLED_USERS` labelled users, as every human-only rate) and
        the all-judge figure (the judge's share of ``positive`` among its parsed labels), with their CIs.

    Raises:
        ValueError: ``items`` lacks a column of :data:`ITEM_COLUMNS`, or has no rows.
    """
    missing = [c for c in ITEM_COLUMNS if c not in items.columns]
    if missing:
        raise ValueError(f"routing needs the item columns {', '.join(missing)}")
    if items.empty:
        raise ValueError("routing needs at least one item")
    users, per = route_sums(items, threshold, positive)
    combined = cluster_estimate(combined_rate, per, level=level, bounds=RATE_BOUNDS)
    human = _human_sums(items, positive)
    labelled_users = int((human[:, 1] > 0).sum())
    if labelled_users < min_labelled_users and not math.isnan(combined.ci[0]) and per[:, _R].sum() > 0:
        # Its routed part rests on the labelled users alone, as every human-only rate: the same minimum. (The rule
        # itself covered 0.938-0.958 from 10 users in benchmarks/calibration_routing_table.md, but human-only rates
        # undercovered below 15 labelled users when users' item counts are very uneven: analysis/estimates.py.)
        combined = Estimate(combined.value, (math.nan, math.nan), combined.n_clusters, combined.n_undefined)
    judged = items["label"].notna().to_numpy()
    judge_per = np.column_stack([per[:, _KP] + per[:, _RF], _per_user(items, judged)])
    total = per.sum(axis=0)
    return RoutingEstimate(
        positive=positive, threshold=threshold, combined=combined,
        all_human=human_rate_from_users(human[human[:, 1] > 0], level),
        all_judge=cluster_estimate(_share, judge_per[judge_per[:, 1] > 0], level=level, bounds=RATE_BOUNDS),
        items=int(total[_N]), kept=int(total[_N] - total[_R]), routed=int(total[_R]),
        routed_labelled=int(total[_RL]), users=len(users), labelled_users=labelled_users)


def _per_user(items: pd.DataFrame, flag: np.ndarray[Any, np.dtype[np.bool_]]) -> FloatArray:
    _, index = np.unique(items["user_id"].astype(str).to_numpy(), return_inverse=True)
    return np.asarray(np.bincount(index, weights=flag.astype(float), minlength=int(index.max()) + 1), dtype=float)


def _human_sums(items: pd.DataFrame, positive: str) -> FloatArray:
    """Per user (sorted ids): human positives and human-labelled items -- the all-human rate's sums."""
    labelled = items["human"].notna().to_numpy()
    positives = labelled & (items["human"].astype(str) == positive).to_numpy()
    return np.column_stack([_per_user(items, positives), _per_user(items, labelled)])
