"""The one CI rule: every printed interval is a user-clustered jackknife-t over per-user additive sums.

Every figure (kappa, rates, Fleiss' kappa, alpha, a before/after difference) is a smooth function of totals that
add up over users, so leaving one user out is a subtraction: :func:`cluster_estimate`. The interval is built on the
figure's unbounded scale with a t quantile on Satterthwaite's degrees of freedom (:class:`IntervalRule`, :data:`RULE`),
chosen by ``benchmarks/calibration_uneven.py`` among candidates in worlds built to break it (uneven users, 1-3 items a
user, rare events, ties); ``docs/intervals.md`` says where it holds and where it does not. No interval is ever of
zero width: where no user's absence moves the figure, or it sits at its bound, none is given, with the reason; nor
an item-weighted one from fewer than :data:`UNEQUAL_ITEMS_MIN_USERS` users whose item counts are very unequal, nor
one of an average whose part (a class's recall) is 0 or 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from personagap.analysis.arrays import FloatArray
from personagap.text import NOT_AVAILABLE, number

DEFAULT_SEED = 0
MIN_USERS_FOR_CI = 10
"""Below this many users (clusters) no CI is given. Reports print "too few users for a CI" instead, always beside
the number of users. Under the current rule the first harness's worlds (``benchmarks/calibration_table.md``) reach
0.93 from 5 users, but the uneven worlds (``benchmarks/calibration_uneven_table.md``) were measured from 10 users
only: 10 is kept, nothing below it is claimed. Very unequal items per user need more
(:data:`UNEQUAL_ITEMS_MIN_USERS`)."""

MIN_LABELLED_USERS = max(MIN_USERS_FOR_CI, 20)
"""Fewest users with human labels for a CI of a figure that rests on them: a human rate (the pipeline view's
failure shares and their differences, the human-only estimate) and the corrections that lean on the labelled users
(Rogan–Gladen, PPI++).

From ``benchmarks/calibration_estimates.py`` (issue 30's uneven worlds, 300 studies a cell): the human-only rate
covered 0.893 with 15 labelled users where a few heavy users differ from the rest (a sample that holds none of them
cannot cover; those that do covered 0.97), and 0.927 (MC SE 0.015, so not below 0.93) from 20 on; every other
world and estimate reached 0.93 from 15. Never fewer than :data:`MIN_USERS_FOR_CI`."""

CI_METHOD = "user-clustered jackknife-t, transformed scale, Satterthwaite df"
"""How every interval is made, as report headers name it (the one rule: :func:`cluster_estimate`)."""

Bounds = tuple[float, float]
"""A figure's range ``(low, high)``, e.g. ``(0, 1)`` for a rate, ``(-1, 1)`` for kappa."""
Stat = Callable[[FloatArray], FloatArray]
"""A figure as a function of totals ``(..., *shape)`` -> ``(...)``, vectorised over leading axes."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its user-clustered confidence interval.

    ``n_clusters`` is how many users (clusters) the interval is over (None where not clustered);
    ``n_undefined`` how many leave-one-user-out figures (:func:`cluster_estimate`) were undefined (e.g. a kappa
    with one class only): the interval then is not given, and reports say how many.
    """

    value: float
    ci: tuple[float, float]
    n_clusters: int | None = None
    n_undefined: int = 0
    effective_users: float | None = None
    reason: str = ""
    """Why no interval is given, when that is not too few users or undefined leave-outs (e.g. "effective users 2.3
    of 20: ..."): reports print it in place of the interval."""

    @property
    def too_few_users(self) -> bool:
        """The figure has fewer than :data:`MIN_USERS_FOR_CI` users, so no CI is given."""
        return self.n_clusters is not None and self.n_clusters < MIN_USERS_FOR_CI


NAN_ESTIMATE = Estimate(float("nan"), (float("nan"), float("nan")))


def per_cluster_sums(values: npt.ArrayLike, clusters: npt.ArrayLike) -> tuple[FloatArray, npt.NDArray[Any]]:
    """Per-user sums of per-item values: the additive input of :func:`cluster_estimate`.

    Args:
        values: Per-item values ``(n,)`` or ``(n, C)`` (hits, ones, numerators, denominators).
        clusters: The user (cluster) of each item.

    Returns:
        ``(per, ids)``: sums ``(U, ...)`` with users in sorted id order, and those ids.

    Raises:
        ValueError: ``values`` and ``clusters`` differ in length.
    """
    v = np.asarray(values, dtype=float)
    c = np.asarray(clusters)
    if v.shape[:1] != c.shape[:1]:
        raise ValueError(f"{v.shape[0] if v.ndim else 0} values for {c.shape[0] if c.ndim else 0} cluster ids")
    ids, idx = np.unique(c, return_inverse=True)
    per = np.zeros((len(ids), *v.shape[1:]))
    np.add.at(per, idx, v)
    return per, ids


def cluster_estimate(stat: Stat, per_cluster: npt.ArrayLike, *, level: float = 0.95,
                     bounds: Bounds | None = None, min_users: int | None = None, parts: Stat | None = None,
                     sizes: npt.ArrayLike | None = None) -> Estimate:
    """THE interval rule: a user-clustered jackknife-t interval of a smooth function of per-user sums.

    Every figure the tool prints is ``stat`` of totals that add up over users (confusion counts, numerators and
    denominators, coincidence matrices), so leaving user ``u`` out is ``total - per_cluster[u]``: U evaluations,
    no resample draw, memory O(U x cells). With ``theta_(u)`` the figure without user ``u``,
    ``SE = sqrt((U - 1) / U * sum_u (theta_(u) - mean)^2)`` and the interval is ``point +- t_{U-1} * SE``.
    The percentile cluster bootstrap it replaces covered 81-90% at 5-10 users; ``benchmarks/calibration.py``
    measures this rule for every printed figure (the table is in the README).

    Args:
        stat: Maps totals ``(..., *shape)`` to the figure ``(...)``, vectorised over leading axes; NaN where
            undefined.
        per_cluster: Per-user additive sums ``(U, *shape)``.
        level: Confidence level.
        bounds: The figure's range (a rate's ``(0, 1)``): the interval is built on the unbounded scale of that
            range (:class:`IntervalRule` ``transform``) and so stays inside it.
        min_users: No interval below this many users; None: :data:`MIN_USERS_FOR_CI` (a human rate passes
            :data:`MIN_LABELLED_USERS`).
        parts: The rates in [0, 1] the figure averages, as a function of the totals (balanced accuracy: each
            class's recall); where one of them is 0 or 1 on all users no interval is given
            (:attr:`IntervalRule.parts_at_edge`).
        sizes: The items of every user of the data the figure is drawn from, when the figure's users are a subset
            of them (a reliability bin, a coverage-curve point): whether items per user are very unequal is judged
            on these, not on the subset, whose few users may look even by chance exactly when they lack the heavy
            ones. None: the figure's own per-user sums.

    Returns:
        The point ``stat(per_cluster.sum(0))`` and its interval. No interval (NaN) below
        :data:`MIN_USERS_FOR_CI` users, when the point is undefined, or when some leave-one-user-out figure is
        undefined (one user carries the whole figure, so its spread cannot be estimated); ``n_undefined``
        counts those users.

    Raises:
        ValueError: ``per_cluster`` has no user axis, or ``level`` is not in (0, 1).
    """
    point, theta = leave_one_out(stat, per_cluster)
    return interval_from_leave_outs(point, theta, level, bounds=bounds, per_cluster=per_cluster, min_users=min_users,
                                    parts=None if parts is None else parts_of_total(parts, per_cluster), sizes=sizes)


def parts_of_total(parts: Stat, per_cluster: npt.ArrayLike) -> FloatArray:
    """The rates a figure averages, on the totals over all users (``parts`` of :func:`cluster_estimate`)."""
    return np.asarray(parts(np.asarray(per_cluster, dtype=float).sum(axis=0)), dtype=float).ravel()


def leave_one_out(stat: Stat, per_cluster: npt.ArrayLike) -> tuple[float, FloatArray]:
    """The figure on all users and without each user in turn: ``stat(total)``, ``stat(total - per_cluster[u])``.

    Raises:
        ValueError: ``per_cluster`` has no leading user axis.
    """
    per = np.asarray(per_cluster, dtype=float)
    if per.ndim < 1:
        raise ValueError(f"per_cluster needs a leading user axis, got shape {per.shape}")
    total = per.sum(axis=0)
    return float(np.asarray(stat(total), dtype=float)), np.asarray(stat(total[None, ...] - per), dtype=float)


DfMethod = Literal["users", "kish", "satterthwaite", "min"]


@dataclass(frozen=True)
class IntervalRule:
    """How leave-one-user-out values become an interval: the parameters of the one rule.

    Attributes:
        df: Degrees of freedom of the t quantile. ``users``: users - 1 (the rule before issue 30). ``kish``: Kish's
            effective number of users from their item counts, ``(sum n_u)^2 / sum n_u^2``, minus 1. ``satterthwaite``:
            ``(sum d_u^2)^2 / sum d_u^4`` of the leave-one-out deviations ``d_u``, the Satterthwaite degrees of freedom
            of the jackknife variance with each user's own term as its variance (a few users carrying the variance,
            because they are big or hold the rare events, leave few degrees of freedom), at most users - 1. ``min``:
            the smaller of ``kish`` and ``satterthwaite``.
        transform: Build the interval on a scale where the figure is unbounded and back-transform it: logit for a
            figure in (0, 1), Fisher's z (atanh) in (-1, 1), log in (0, inf), -log(1 - x) in (-inf, 1). The interval
            then stays inside the range without cutting, and is asymmetric near a bound (rare events).

    Guards that read the sample for signs of heavy users were measured and rejected (``docs/intervals.md``): a
    minimum effective number of users, Kish's effective users as a small share of the users, and Cochran's
    coefficient of variation of the mean size. Each withheld the intervals of samples that hold the heavy users,
    which covered, and kept those of samples that hold none, which missed. The unequal-items step
    (``unequal_cv``) differs: it withholds below ``unequal_min_users`` whenever sizes are very unequal at all.
    """

    df: DfMethod = "satterthwaite"
    transform: bool = True
    raw_at_edge: bool = True
    """Where the point is inside the range but a leave-one-out value sits on its bound (recall 1 without the one user
    who holds the misses), build the interval on the figure's own scale (cut to the range) instead of giving none.
    The harness found the same cells below 0.93 with and without it, and it prints recall in 81% of 10-user studies
    with 1-3 items a user instead of 52% (the independent audit had flagged the withheld intervals)."""
    unequal_cv: float | None = None
    """Items per user count as very unequal where their coefficient of variation (:func:`items_cv`) exceeds this;
    None: no such rule."""
    unequal_min_users: int = 0
    """Fewest users for an interval where the items per user are very unequal (``unequal_cv``)."""
    parts_at_edge: bool = False
    """No interval where a rate the figure averages (``parts``: a class's recall in balanced accuracy) is 0 or 1:
    the same reason a rate at its bound gets none, applied to the rates inside an average."""


UNEQUAL_ITEMS_CV = 0.6
"""Items per user count as very unequal above this coefficient of variation (1-3 items a user: 0.4; 5-15: 0.3)."""
UNEQUAL_ITEMS_MIN_USERS = 30
"""Fewest users for an item-weighted interval when the items per user are very unequal: at 20 users, where a tenth
of the users hold most items and judge differently, kappa covered 0.873 (a sample of 20 lacks them 12% of the time,
and nothing in it shows what it lacks); from 30 it covered 0.927-0.99 in every world of the harness."""

RULE = IntervalRule(unequal_cv=UNEQUAL_ITEMS_CV, unequal_min_users=UNEQUAL_ITEMS_MIN_USERS, parts_at_edge=True)
"""The rule every printed interval follows, chosen by ``benchmarks/calibration_uneven.py`` (table in
``benchmarks/calibration_uneven_table.md``)."""


def _transform(bounds: Bounds | None) -> tuple[Callable[[FloatArray], FloatArray], Callable[[FloatArray], FloatArray]]:
    """The map to an unbounded scale for a figure's range, and its inverse (identity for other ranges)."""
    if bounds == (0.0, 1.0):
        return (lambda x: np.log(x) - np.log1p(-x)), (lambda y: 1.0 / (1.0 + np.exp(-y)))
    if bounds == (-1.0, 1.0):
        return np.arctanh, np.tanh
    if bounds == (0.0, math.inf):
        return np.log, np.exp
    if bounds == (-math.inf, 1.0):
        return (lambda x: -np.log1p(-x)), (lambda y: -np.expm1(-y))
    return (lambda x: x), (lambda y: y)


def _edge_text(bounds: Bounds | None, point: float) -> str:
    edge = point if bounds is None else min(bounds, key=lambda b: abs(b - point))
    return f"the figure is at the edge of its range ({edge:g}) with or without a user"


def _beyond_text(bounds: Bounds | None) -> str:
    low, high = bounds if bounds is not None else (-math.inf, math.inf)
    return f"the figure or a leave-one-out value lies outside its range ({low:g}, {high:g})"


def effective_users(per_cluster: npt.ArrayLike) -> float:
    """Kish's effective number of users from the per-user totals' size (sum of absolute cells).

    One user of many items counts for more than one, many users of one item each for less than their number.
    """
    per = np.abs(np.asarray(per_cluster, dtype=float)).reshape(np.shape(per_cluster)[0], -1).sum(axis=1)
    square = float((per * per).sum())
    return float(per.sum()) ** 2 / square if square > 0 else 0.0


def items_cv(per_cluster: npt.ArrayLike) -> float:
    """The coefficient of variation of the users' sizes (items: the sum of each user's absolute cells).

    0 when every user is as big as every other (so always 0 for a user-weighted figure, whose per-user sums are
    shares). Large when a few heavy users hold most of the items: an item-weighted figure then leans on them.
    """
    per = np.abs(np.asarray(per_cluster, dtype=float)).reshape(np.shape(per_cluster)[0], -1).sum(axis=1)
    mean = float(per.mean()) if per.size else 0.0
    return float(per.std()) / mean if per.size > 1 and mean > 0.0 else 0.0


def interval_from_leave_outs(point: float, theta: FloatArray, level: float = 0.95, *,
                             min_users: int | None = None, bounds: Bounds | None = None,
                             rule: IntervalRule | None = None, per_cluster: npt.ArrayLike | None = None,
                             parts: FloatArray | None = None, sizes: npt.ArrayLike | None = None) -> Estimate:
    """The jackknife-t :class:`Estimate` from the point and the U leave-one-user-out values ``theta``.

    Args:
        point: The figure on all users.
        theta: The figure without each user (NaN where undefined).
        level: Confidence level.
        min_users: No interval below this many users; None: :data:`MIN_USERS_FOR_CI` (the calibration harness
            passes 2 to measure the rule itself below the printed minimum).
        bounds: The figure's range: the scale of the transform and the limits the interval is cut to.
        rule: The rule's parameters; None: :data:`RULE` (the harness passes candidates).
        per_cluster: The per-user sums: the users' sizes for the ``kish`` degrees of freedom and the unequal-items
            rule (:attr:`IntervalRule.unequal_cv`; skipped without them).
        parts: The rates in [0, 1] the figure averages, on all users (balanced accuracy: each class's recall). One
            at 0 or 1 (a class's recall of 1 from the few users who hold that class) shows no spread over users, as
            a rate at its bound does not: no interval then (:attr:`IntervalRule.parts_at_edge`).
        sizes: The items of every user of the data the figure's users are drawn from (:func:`cluster_estimate`);
            None: ``per_cluster``.

    Raises:
        ValueError: ``level`` is not in (0, 1), or the rule needs ``per_cluster`` and has none.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rule = RULE if rule is None else rule
    n = int(theta.size)
    nan_ci = (float("nan"), float("nan"))
    if n < (MIN_USERS_FOR_CI if min_users is None else max(min_users, 2)) or math.isnan(point):
        return Estimate(point, nan_ci, n, 0)
    undefined = int(np.isnan(theta).sum())
    if undefined:
        return Estimate(point, nan_ci, n, undefined)
    if rule.parts_at_edge and parts is not None:
        finite = parts[~np.isnan(parts)]
        if ((finite <= 0.0) | (finite >= 1.0)).any():
            return Estimate(point, nan_ci, n, 0, reason=(
                "a rate the figure averages (a class's recall) is 0 or 1 in this sample: its spread over users "
                "cannot be measured"))
    judged = per_cluster if sizes is None else sizes
    if rule.unequal_cv is not None and n < rule.unequal_min_users and judged is not None:
        cv = items_cv(judged)
        if cv > rule.unequal_cv:
            return Estimate(point, nan_ci, n, 0, reason=(
                f"items per user very unequal (CV {cv:.2f} > {rule.unequal_cv:g}): an item-weighted interval "
                f"needs {rule.unequal_min_users} users, as fewer may miss the heavy users it leans on"))
    forward, back = _transform(bounds) if rule.transform else _transform(None)
    with np.errstate(divide="ignore", invalid="ignore"):
        z_point = float(forward(np.asarray(point, dtype=float)))
        z_theta = np.asarray(forward(theta), dtype=float)
    if rule.raw_at_edge and math.isfinite(z_point) and not np.isnan(z_theta).any() and not np.isfinite(z_theta).all():
        forward, back = _transform(None)
        z_point, z_theta = float(point), np.asarray(theta, dtype=float)
    if not (math.isfinite(z_point) and np.isfinite(z_theta).all()):
        # On a bound the transform is infinite (a rate of 0 or 1); beyond it (a PPI++ estimate below 0) it is NaN.
        beyond = bool(np.isnan(z_point) or np.isnan(z_theta).any())
        at_edge = point if not math.isfinite(z_point) else float(np.asarray(theta)[~np.isfinite(z_theta)][0])
        return Estimate(point, nan_ci, n, 0, reason=_beyond_text(bounds) if beyond else _edge_text(bounds, at_edge))
    dev = z_theta - z_theta.mean()
    square = float((dev * dev).sum())
    if square <= 1e-24 * max(1.0, z_point * z_point):
        # Every leave-one-out value equals the point: the users show no spread to measure (a degenerate sample,
        # e.g. no human "yes" anywhere), never a zero-width interval.
        return Estimate(point, nan_ci, n, 0, reason="the figure does not change when any one user is left out")
    se = math.sqrt((n - 1) / n * square)
    satterthwaite = min(float(n - 1), square * square / float((dev**4).sum()))
    if rule.df == "users":
        df = float(n - 1)
    elif rule.df == "satterthwaite":
        df = satterthwaite
    else:
        if per_cluster is None:
            raise ValueError(f"the {rule.df!r} degrees of freedom need the per-user sums")
        kish = min(float(n - 1), effective_users(per_cluster) - 1.0)
        df = kish if rule.df == "kish" else min(kish, satterthwaite)
    if df <= 0.0:
        return Estimate(point, nan_ci, n, 0, effective_users=df + 1.0,
                        reason=f"effective users {df + 1.0:.1f} of {n}: one user carries the figure's variation")
    # The t quantile alone (scipy.special, imported here): scipy.stats costs ~0.8 s at every CLI start.
    from scipy.special import stdtrit

    half = float(stdtrit(df, 0.5 + level / 2.0)) * se
    lo, hi = float(back(np.asarray(z_point - half))), float(back(np.asarray(z_point + half)))
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return Estimate(point, (lo, hi), n, 0, effective_users=df + 1.0)


def ci_cell(ci: list[float] | None, n_users: int | None = None, *, missing: str = NOT_AVAILABLE) -> str:
    """A CI as a table cell: ``[lo, hi]``; empty without one; ``(too few users)`` below the CI rule's minimum.

    Args:
        ci: The stored ``[lo, hi]`` pair, or None.
        n_users: The users behind it, when the row keeps them (the one CI rule: no CI below
            :data:`MIN_USERS_FOR_CI` users).
        missing: The text of an absent bound.
    """
    if ci is None:
        return ""
    if n_users is not None and n_users < MIN_USERS_FOR_CI:
        return "(too few users)"
    return f"[{number(ci[0], 2, missing=missing)}, {number(ci[1], 2, missing=missing)}]"


def ci_text(e: Estimate | None = None, *, ci: list[float] | None = None, n_users: int | None = None,
            undefined: int = 0, digits: int = 2) -> str:
    """A CI as reports print it: ``[lo, hi] (N users)``, or why there is none.

    Pass an :class:`Estimate`, or a stored ``ci`` list with its ``n_users`` (report rows keep both). ``undefined``
    counts users without whom the figure is undefined (:func:`cluster_estimate`: then no interval).
    """
    reason = ""
    if e is not None:
        ci, n_users, undefined, reason = [e.ci[0], e.ci[1]], e.n_clusters, e.n_undefined, e.reason
    users = "" if n_users is None else f"{n_users} user{'s' if n_users != 1 else ''}"
    lo, hi = (ci or [float("nan"), float("nan")])
    if n_users is not None and n_users < MIN_USERS_FOR_CI:
        return f"(too few users for a CI: {users})"
    if reason:
        return f"[no CI: {reason}" + (f"; {users}]" if users else "]")
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        text = "[no CI" + (f"; {users}]" if users else "]")
    else:
        text = f"[{lo:.{digits}f}, {hi:.{digits}f}" + (f"; {users}]" if users else "]")
    if undefined:
        text += f" (undefined without {undefined} of the users)"
    return text


def ci_note_lines(notes: dict[str, str], indent: str = "    ") -> list[str]:
    """Why figures have no CI, one line per reason: the figures that share a reason are named on its line.

    Args:
        notes: Figure -> why its interval was withheld (a report row's ``ci_notes``), in the row's order.
        indent: Put before each line.

    Returns:
        ``"<indent>kappa, accuracy: no CI: <reason>"`` per distinct reason, in the order reasons first appear;
        beyond four figures the first three and how many more.
    """
    by_reason: dict[str, list[str]] = {}
    for figure, why in notes.items():
        by_reason.setdefault(why, []).append(figure)

    def named(figures: list[str]) -> str:
        return ", ".join(figures) if len(figures) <= 4 else f"{', '.join(figures[:3])} and {len(figures) - 3} more"

    return [f"{indent}{named(figures)}: no CI: {why}" for why, figures in by_reason.items()]


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


