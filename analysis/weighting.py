"""What a figure estimates: items pooled (heavy users count most) or each user once (issue 30).

Every table figure is a function of confusion tables summed over users, so it targets the *item-weighted* figure: a
user with 300 items counts 300 times as much as a user with one. The *user-weighted* figure divides each user's table
by its own total first (each user's proportions sum to 1) and then computes the same figure from the sum of those
proportion tables; its interval is the same rule (:func:`~personagap.analysis.ci_rule.cluster_estimate`) over the
per-user proportion tables, since leaving a user out still subtracts one table. The two differ when heavy users
judge differently from the rest, which is a finding about the data, not noise: :func:`weight_gap` measures the
difference with a paired leave-one-user-out jackknife (both figures from the same per-user tables, one stat).

Figures that are not functions of confusion tables (a rate of numerators over denominators such as position bias,
corrected prevalence, Fleiss' kappa or alpha among raters) keep their item weighting; rows say so
(``estimand`` ``"items"``, or :attr:`WeightFields.item_weighted` on a user-weighted judge row).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, Field

from personagap.analysis.agreement import Estimate, ci_list, ci_text, cluster_estimate, get_metric
from personagap.analysis.agreement import estimates as agreement_estimates
from personagap.analysis.arrays import FloatArray

Weight = Literal["items", "users"]
"""What a figure weighs equally: each item (pooled sums, the default) or each user (per-user proportions)."""
WEIGHTS: tuple[Weight, ...] = ("items", "users")
HEADLINE_FIGURES: tuple[str, ...] = ("kappa", "accuracy")
"""Figures every judge row carries under both weightings (``by_weight``)."""
GAP_FIGURE = "kappa"
"""The figure whose item-minus-user difference is tested (``weight_gap``)."""
GAP_TOLERANCE = 1e-9
"""How far from 0 an interval bound must lie to count as excluding it: users of equal size give identical figures,
whose difference and interval are 0 up to rounding (1e-17), which is no finding."""

def weight_note(weight: Weight) -> str:
    """The one header sentence a text report prints about its estimand."""
    if weight == "users":
        return ("Figures weight users (each user once: each user's table divided by its own total); the default, "
                "--weight items, pools items (heavy users count most).")
    return "Figures weight items (heavy users count most); --weight users weighs each user once."


def user_proportions(tables: npt.ArrayLike) -> FloatArray:
    """Each user's table divided by its own total, so that every user sums to 1; users without items are dropped.

    Args:
        tables: Per-user count tables ``(U, ...)``.

    Returns:
        Proportion tables ``(U', ...)`` for the ``U'`` users with at least one item, in the same order.
    """
    t = np.asarray(tables, dtype=float)
    if t.ndim < 1:
        raise ValueError(f"per-user tables need a leading user axis, got shape {t.shape}")
    totals = t.reshape(t.shape[0], -1).sum(axis=1)
    # A user without items has no proportions; keeping a zero table would count them as a user in the jackknife.
    keep = totals > 0
    props: FloatArray = t[keep] / totals[keep].reshape(-1, *([1] * (t.ndim - 1)))
    return props


def weighted_tables(tables: npt.ArrayLike, weight: Weight) -> FloatArray:
    """The per-user tables a figure of ``weight`` is computed from: counts (items) or proportions (users)."""
    if weight not in WEIGHTS:
        raise ValueError(f"weight must be one of {', '.join(WEIGHTS)}, got {weight!r}")
    return user_proportions(tables) if weight == "users" else np.asarray(tables, dtype=float)


def weighted_estimates(tables: npt.ArrayLike, metrics: tuple[str, ...], *, weight: Weight = "items",
                       levels: npt.ArrayLike | None = None, level: float = 0.95) -> dict[str, Estimate]:
    """:func:`~personagap.analysis.agreement.estimates` of ``metrics`` under ``weight``, each with the one CI rule.

    Args:
        tables: Per-user count tables ``(U, K, K)``.
        metrics: Registered metric names.
        weight: ``"items"`` (the counts as they are) or ``"users"`` (:func:`user_proportions`).
        levels: The ordinal levels' values, for metrics that read them.
        level: Confidence level.
    """
    return agreement_estimates(weighted_tables(tables, weight), metrics, level=level, levels=levels)


def weight_gap(tables: npt.ArrayLike, figure: str = GAP_FIGURE, *, levels: npt.ArrayLike | None = None,
               level: float = 0.95) -> Estimate:
    """The item-weighted minus the user-weighted ``figure``, with a paired leave-one-user-out interval.

    One stat computes both figures from the same users' count and proportion tables, stacked as ``(U, 2, K, K)``,
    so leaving a user out removes that user from both at once and the interval (the one rule,
    :func:`~personagap.analysis.ci_rule.cluster_estimate`) accounts for their correlation.

    Args:
        tables: Per-user count tables ``(U, K, K)``.
        figure: A registered table metric.
        levels: The ordinal levels' values, for metrics that read them.
        level: Confidence level.
    """
    counts = np.asarray(tables, dtype=float)
    counts = counts[counts.reshape(counts.shape[0], -1).sum(axis=1) > 0]
    metric = get_metric(figure)
    paired = np.stack([counts, user_proportions(counts)], axis=1)

    def difference(t: FloatArray) -> FloatArray:
        return metric.on(t[..., 0, :, :], levels) - metric.on(t[..., 1, :, :], levels)

    return cluster_estimate(difference, paired, level=level)


class WeightedFigures(BaseModel):
    """A judge row's headline figures under one weighting, each with its own interval."""

    kappa: float = Field(description="Cohen's kappa under this weighting.")
    kappa_ci: list[float]
    accuracy: float = Field(description="Share of items (items) or mean share per user (users) in agreement.")
    accuracy_ci: list[float]
    n_users: int = Field(description="Users the interval is over.")


class WeightGap(BaseModel):
    """The item-weighted minus the user-weighted figure, with its paired interval (:func:`weight_gap`)."""

    figure: str = Field(default=GAP_FIGURE, description="Which figure is compared.")
    items: float = Field(description="The figure weighting items.")
    users: float = Field(description="The figure weighting users.")
    difference: float = Field(description="items - users (> 0: heavy users agree more than the typical user).")
    ci: list[float]
    n_users: int
    n_undefined: int = Field(default=0, description="Users without whom the difference is undefined (then no CI).")
    differs: bool = Field(description="The interval excludes 0: heavy users behave differently (a finding).")


class WeightFields(BaseModel):
    """What a table figure row adds for issue 30: both weightings of the headline figures and their gap."""

    by_weight: dict[str, WeightedFigures] | None = Field(
        default=None, description="'items' and 'users' -> the headline figures (kappa, accuracy) under each "
                                  "weighting, each with its own interval, whatever --weight chose for the row.")
    weight_gap: WeightGap | None = Field(
        default=None, description="Kappa weighting items minus kappa weighting users, with a paired "
                                  "leave-one-user-out interval; differs when it excludes 0.")
    item_weighted: list[str] = Field(
        default_factory=list, description="Figures of this row that weight items although the row's estimand is "
                                          "users (they are not functions of confusion tables).")


class ItemEstimand(BaseModel):
    """A row of figures that are item-weighted only (pooled sums that are not confusion tables)."""

    estimand: Weight = Field(default="items", description="What the row's figures estimate: 'items' (pooled sums; "
                                                          "heavy users count most). No user-weighted version.")


def _figures(est: Mapping[str, Estimate]) -> WeightedFigures:
    kappa, accuracy = est["kappa"], est["accuracy"]
    n = kappa.n_clusters if kappa.n_clusters is not None else 0
    return WeightedFigures(kappa=kappa.value, kappa_ci=ci_list(kappa), accuracy=accuracy.value,
                           accuracy_ci=ci_list(accuracy), n_users=n)


def weight_fields(tables: npt.ArrayLike, est: Mapping[str, Estimate], *, weight: Weight,
                  levels: npt.ArrayLike | None = None, item_weighted: Iterable[str] = ()) -> dict[str, Any]:
    """A judge row's issue-30 keyword arguments: ``estimand``, ``by_weight``, ``weight_gap``, ``item_weighted``.

    Args:
        tables: The row's per-user count tables ``(U, K, K)``.
        est: The row's estimates under ``weight`` (:func:`weighted_estimates`), holding kappa and accuracy;
            reused for that weighting so no figure is computed twice.
        weight: The weighting of the row's figures.
        levels: The ordinal levels' values, for metrics that read them.
        item_weighted: The row's figures that stay item-weighted; listed only when ``weight`` is users.
    """
    other: Weight = "items" if weight == "users" else "users"
    both = {weight: _figures(est),
            other: _figures(weighted_estimates(tables, HEADLINE_FIGURES, weight=other, levels=levels))}
    gap = weight_gap(tables, levels=levels)
    lo, hi = gap.ci
    items, users = both["items"].kappa, both["users"].kappa
    return {"estimand": weight, "by_weight": {w: both[w] for w in WEIGHTS},
            "weight_gap": WeightGap(items=items, users=users, difference=gap.value, ci=ci_list(gap),
                                    n_users=gap.n_clusters or 0, n_undefined=gap.n_undefined,
                                    differs=not (math.isnan(lo) or math.isnan(hi)) and (lo > GAP_TOLERANCE
                                                                                        or hi < -GAP_TOLERANCE)),
            "item_weighted": list(item_weighted) if weight == "users" else []}


def gap_lines(rows: Iterable[tuple[str, WeightFields]]) -> list[str]:
    """One line per row whose item- and user-weighted kappa differ beyond their joint uncertainty (nothing else).

    Args:
        rows: ``(name, row)`` pairs, the name as the report prints the judge and its dataset.
    """
    lines = []
    for name, row in rows:
        g = row.weight_gap
        if g is None or not g.differs:
            continue
        e = Estimate(g.difference, (g.ci[0], g.ci[1]), g.n_users, g.n_undefined)
        lines.append(f"Heavy users behave differently: {name}: {g.figure} weighting items {g.items:.3f}, weighting "
                     f"users {g.users:.3f}, difference {g.difference:+.3f} {ci_text(e)} (beyond their joint "
                     f"uncertainty: a finding, not noise)")
    return ["", *lines] if lines else []



def judge_row_figures(tables: npt.ArrayLike, metrics: tuple[str, ...], *, weight: Weight = "items",
                      levels: npt.ArrayLike | None = None,
                      item_weighted: Iterable[str] = ()) -> tuple[dict[str, Estimate], dict[str, Any]]:
    """A judge row's estimates under ``weight`` and its issue-30 fields (:func:`weight_fields`), in one call.

    Args:
        tables: The row's per-user count tables ``(U, K, K)``.
        metrics: Registered metric names (kappa and accuracy among them).
        weight: The weighting of the row's figures.
        levels: The ordinal levels' values, for metrics that read them.
        item_weighted: The row's figures that are not table figures and so stay item-weighted.
    """
    est = weighted_estimates(tables, metrics, weight=weight, levels=levels)
    return est, weight_fields(tables, est, weight=weight, levels=levels, item_weighted=item_weighted)
