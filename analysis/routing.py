"""Routing: the judge decides where it is confident, people label the rest; the guaranteed threshold; the human rate.

A judge's label is *kept* on an item when the judge gave one and its confidence reaches the threshold; every other
item is *routed* to people. The threshold is :func:`guaranteed_threshold`'s (issue 30): fixed-sequence testing from
the most confident threshold down, each step a user-clustered one-sided test of "accuracy on the kept items >=
target" (:func:`accuracy_lower_bound`), so that P(accuracy on the kept items < target) <= delta.
(:func:`personagap.analysis.coverage.choose_threshold`, chosen on half of the users, is the old ``--method split``.)

Two different rates come out of routing:

* the *routed labelling*'s rate (:func:`combined_rate`): the judge's label on kept items, a person's (the blind
  human reference, :mod:`personagap.analysis.comparable`) on routed ones -- the rate of the labels a user of the
  routed labels gets. It is not the human rate: where the judge errs on kept items it differs from it.
* the *human rate* (:func:`human_rate_with_audit`): what people would say on every item. The kept part needs
  people's labels on a random sample of the kept items (an audit, :func:`draw_audit`); without one the human rate
  rests on an assumption (:data:`ASSUMED`) and gets no interval.

While people have labelled only part of the routed (or audited) items, that part is estimated by a difference
estimator (prediction-powered inference with weight 1): the judge's own positives, corrected by the mean
human-minus-judge difference on the items people labelled, scaled up to all of them. It is unbiased when the
labelled items are a random sample -- the Annotate page's "routed to people" queue serves them in a seeded random
order for that reason, and the audit is a seeded random draw. Once every routed item is labelled the routed
correction is exact.

Every figure is a smooth function of per-user additive sums (:data:`TALLY`), so its interval is the one CI rule,
:func:`personagap.analysis.agreement.cluster_estimate`; ``benchmarks/calibration_routing.py`` measures its coverage
and the guarantee.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from personagap.analysis.agreement import Estimate, FloatArray, ci_list, cluster_estimate, json_safe_dict
from personagap.analysis.arrays import safe_div
from personagap.analysis.estimates import MIN_LABELLED_USERS, human_rate_from_users

TALLY = ("items", "kept_positive", "routed", "routed_judge_positive", "routed_labelled", "routed_human_positive",
         "routed_labelled_judge_positive", "audit_labelled", "audit_human_positive", "audit_judge_positive")
"""The per-user sums every routing figure is a function of (columns of :func:`route_sums`)."""
_N, _KP, _R, _RF, _RL, _RY, _RLF, _AL, _AY, _AJ = range(len(TALLY))
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


BoolArray = np.ndarray[Any, np.dtype[np.bool_]]


def route_sums(items: pd.DataFrame, threshold: float | None, positive: str, *, kept: BoolArray | None = None,
               audit: Collection[str] = ()) -> tuple[list[str], FloatArray]:
    """Per-user additive sums :data:`TALLY` ``(U, 10)``, users in sorted id order.

    Args:
        items: :data:`ITEM_COLUMNS` rows of one dataset and judge.
        threshold: The routing threshold (:func:`kept_mask`).
        positive: The category whose rate is estimated (labels compared as text).
        kept: Which items are kept (a cascade's union); None: :func:`kept_mask` of ``threshold``.
        audit: Item ids of the audit draw (:func:`draw_audit`); only kept ones with a person's label count.
    """
    kept = kept_mask(items, threshold) if kept is None else np.asarray(kept, dtype=bool)
    routed = ~kept
    judge_pos = (items["label"].astype(str) == positive).to_numpy() & items["label"].notna().to_numpy()
    labelled = items["human"].notna().to_numpy()
    human_pos = labelled & (items["human"].astype(str) == positive).to_numpy()
    audited = kept & labelled & items["item_id"].astype(str).isin(set(map(str, audit))).to_numpy()
    columns = (np.ones(len(items)), kept & judge_pos, routed, routed & judge_pos, routed & labelled,
               routed & human_pos, routed & labelled & judge_pos, audited, audited & human_pos, audited & judge_pos)
    users, index = _user_index(items)
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


def human_rate_with_audit(t: FloatArray) -> FloatArray:
    """The human rate from totals ``(..., 10)`` (:data:`TALLY`): :func:`combined_rate` with the kept part audited.

    ``(kept judge positives + kept * mean(human - judge on audited kept) + routed part) / items``, the routed part
    as in :func:`combined_rate`. Both corrections are difference estimators (unbiased when the audited items are a
    random sample of the kept ones and the labelled routed items of the routed ones); the kept correction is 0 when
    nothing is kept and undefined (NaN) when items are kept but no audited item carries a person's label.
    """
    t = np.asarray(t, dtype=float)
    kept = t[..., _N] - t[..., _R]
    audit = np.where(kept > 0, kept * safe_div(t[..., _AY] - t[..., _AJ], t[..., _AL]), 0.0)
    return combined_rate(t) + safe_div(audit, t[..., _N])


def _share(t: FloatArray) -> FloatArray:
    return safe_div(t[..., 0], t[..., 1])


ASSUMED = "assumed: the judge's kept labels are right (no audit sample of the kept items; --audit N draws one)"
"""What the human rate rests on without an audit sample (printed instead of its interval)."""


@dataclass(frozen=True)
class RoutingEstimate:
    """The stage's rate under routing, the human rate, all-human and all-judge, and what people still have to label.

    ``combined`` is the rate of the *routed labelling* (the judge's labels on kept items, people's on routed ones):
    what a user of the routed labels gets, not the human rate. ``human_rate`` estimates the human rate (what people
    would say on every item): from an audit sample of the kept items when there is one (``audited`` > 0), else it is
    the routed labelling's value with no interval, resting on :data:`ASSUMED`.
    """

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
    human_rate: Estimate | None = None
    audit_drawn: int = 0
    audited: int = 0

    @property
    def still_needed(self) -> int:
        """Routed items no person has labelled yet (the human labels routing still needs)."""
        return self.routed - self.routed_labelled

    @property
    def exact(self) -> bool:
        """Every routed item is labelled: the combined rate needs no correction."""
        return self.still_needed == 0

    @property
    def human_rate_basis(self) -> str:
        """What the human rate rests on: the audit, nothing to audit, or the assumption :data:`ASSUMED`."""
        if self.kept == 0:
            return "people's labels only (the judge keeps no item)"
        if self.audited > 0:
            return (f"audit: people's labels on {self.audited} of {self.audit_drawn} randomly drawn kept items, "
                    "plus people's labels on the routed items")
        if self.audit_drawn > 0:
            return ASSUMED.replace("(no audit sample of the kept items; --audit N draws one)",
                                   f"(none of the {self.audit_drawn} audit items drawn has a person's label yet)")
        return ASSUMED

    def to_json(self) -> dict[str, Any]:
        """Figures with their CIs and counts (NaN as null)."""
        def fig(e: Estimate) -> dict[str, Any]:
            return {"value": e.value, "ci": ci_list(e), "n_users": e.n_clusters}

        human = self.human_rate if self.human_rate is not None else Estimate(
            self.combined.value, (math.nan, math.nan), self.combined.n_clusters)
        return json_safe_dict({
            "positive": self.positive, "threshold": self.threshold, "combined": fig(self.combined),
            "combined_is": "the rate of the routed labelling (judge on kept items, people on routed ones), "
                           "not the human rate",
            "combined_kind": "exact" if self.exact else "corrected (people labelled part of the routed items)",
            "human_rate": fig(human), "human_rate_basis": self.human_rate_basis,
            "audit": {"drawn": self.audit_drawn, "labelled": self.audited},
            "all_human": fig(self.all_human), "all_judge": fig(self.all_judge), "items": self.items,
            "kept_by_judge": self.kept, "routed_to_people": self.routed, "routed_labelled": self.routed_labelled,
            "human_labels_still_needed": self.still_needed, "n_users": self.users,
            "n_labelled_users": self.labelled_users})


def routing_estimate(items: pd.DataFrame, threshold: float | None, positive: str, *, level: float = 0.95,
                     min_labelled_users: int = MIN_LABELLED_USERS, kept: BoolArray | None = None,
                     audit: Collection[str] | None = None) -> RoutingEstimate:
    """The routed labelling's rate of ``positive`` and the human rate, with their CIs.

    Args:
        items: :data:`ITEM_COLUMNS` rows of one dataset and judge (every item of the dataset, judged or not).
        threshold: The routing threshold; None routes every item to people.
        positive: The category whose rate is estimated.
        level: Confidence level of every interval.
        min_labelled_users: No combined or human-rate interval below this many users with a person's label while
            items are routed (the coverage harness passes 0 to measure the rule itself below the printed minimum).
        kept: Which items are kept (a cascade's union of kept items); None: :func:`kept_mask` of ``threshold``.
        audit: The audit draw's item ids (:func:`draw_audit`; kept items for people to label). None: no audit, so
            the human rate has no interval when items are kept (:data:`ASSUMED`).

    Returns:
        The combined figure (the routed labelling's rate), the human rate (audited: :func:`human_rate_with_audit`;
        else the combined value without an interval), the all-human figure (share of ``positive`` among the
        human references; no CI below :data:`~personagap.analysis.estimates.MIN_LABELLED_USERS` labelled users,
        as every human-only rate) and the all-judge figure (the judge's share among its parsed labels).

    Raises:
        ValueError: ``items`` lacks a column of :data:`ITEM_COLUMNS`, or has no rows.
    """
    missing = [c for c in ITEM_COLUMNS if c not in items.columns]
    if missing:
        raise ValueError(f"routing needs the item columns {', '.join(missing)}")
    if items.empty:
        raise ValueError("routing needs at least one item")
    users, per = route_sums(items, threshold, positive, kept=kept, audit=audit or ())
    combined = cluster_estimate(combined_rate, per, level=level, bounds=RATE_BOUNDS)
    human = _human_sums(items, positive)
    labelled_users = int((human[:, 1] > 0).sum())
    total = per.sum(axis=0)
    nan_ci = (math.nan, math.nan)
    if labelled_users < min_labelled_users and not math.isnan(combined.ci[0]) and total[_R] > 0:
        # Its routed part rests on the labelled users alone, as every human-only rate: the same minimum. (The rule
        # itself covered 0.938-0.958 from 10 users in benchmarks/calibration_routing_table.md, but human-only rates
        # undercovered below MIN_LABELLED_USERS (20) labelled users when users' item counts are very uneven:
        # analysis/ci_rule.py.)
        combined = Estimate(combined.value, nan_ci, combined.n_clusters, combined.n_undefined)
    kept_n = int(total[_N] - total[_R])
    human_rate: Estimate | None = None
    if kept_n == 0:
        human_rate = combined  # nothing kept: the routed labelling is people's labelling
    elif total[_AL] > 0:
        human_rate = cluster_estimate(human_rate_with_audit, per, level=level, bounds=RATE_BOUNDS)
        if labelled_users < min_labelled_users and not math.isnan(human_rate.ci[0]):
            human_rate = Estimate(human_rate.value, nan_ci, human_rate.n_clusters, human_rate.n_undefined)
    judged = items["label"].notna().to_numpy()
    judge_per = np.column_stack([per[:, _KP] + per[:, _RF], _per_user(items, judged)])
    drawn = 0 if audit is None else len(set(map(str, audit)))
    return RoutingEstimate(
        positive=positive, threshold=threshold, combined=combined,
        all_human=human_rate_from_users(human[human[:, 1] > 0], level),
        all_judge=cluster_estimate(_share, judge_per[judge_per[:, 1] > 0], level=level, bounds=RATE_BOUNDS),
        items=int(total[_N]), kept=kept_n, routed=int(total[_R]),
        routed_labelled=int(total[_RL]), users=len(users), labelled_users=labelled_users,
        human_rate=human_rate, audit_drawn=drawn, audited=int(total[_AL]))


def kept_digest(kept_ids: Collection[str]) -> str:
    """A short hash of a set of kept item ids: a stored audit draw counts only while the kept set is the same."""
    blob = "\x1f".join(sorted(set(map(str, kept_ids)))).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


def draw_audit(kept_ids: Collection[str], n: int, seed: int) -> list[str]:
    """A simple random sample of ``n`` kept items for people to label (all of them when fewer), in draw order.

    The draw depends only on the set of kept ids and the seed (ids are sorted first), so a rerun with the same
    kept items and seed draws the same items -- labels collected for the stored draw keep counting.

    Raises:
        ValueError: ``n`` is negative.
    """
    if n < 0:
        raise ValueError(f"the audit size must be >= 0, got {n}")
    ids = sorted(set(map(str, kept_ids)))
    rng = np.random.default_rng(seed)
    return [ids[i] for i in rng.permutation(len(ids))[:n]]


def _user_index(items: pd.DataFrame) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.intp]]:
    """The sorted user ids and each item's index among them (``np.unique(..., return_inverse=True)``'s result).

    Hashed, then only the distinct ids sorted: ``np.unique`` sorts every item's id (10^6 strings at 10^7 labels).
    """
    codes, users = pd.factorize(items["user_id"].astype(str).to_numpy(dtype=object), sort=True)
    return np.asarray(users, dtype=object), np.asarray(codes, dtype=np.intp)


def _per_user(items: pd.DataFrame, flag: np.ndarray[Any, np.dtype[np.bool_]]) -> FloatArray:
    _, index = _user_index(items)
    return np.asarray(np.bincount(index, weights=flag.astype(float), minlength=int(index.max()) + 1), dtype=float)


def _human_sums(items: pd.DataFrame, positive: str) -> FloatArray:
    """Per user (sorted ids): human positives and human-labelled items -- the all-human rate's sums."""
    labelled = items["human"].notna().to_numpy()
    positives = labelled & (items["human"].astype(str) == positive).to_numpy()
    return np.column_stack([_per_user(items, positives), _per_user(items, labelled)])


# ---------------------------------------------------------------------------------------------------------------
# The guaranteed threshold (issue 30): fixed-sequence testing with a user-clustered one-sided test.

MIN_USERS_FOR_TEST = 5
"""A threshold is tested only when its kept labelled items span this many users (fewer: the sequence does not
start there), and only when the bound could reach the target if every kept label were right. Both depend on the
confidences and item counts alone, never on who was right, so the test sequence stays fixed in advance as
fixed-sequence testing requires -- and a tiny top set that cannot pass does not end the sequence before it starts."""

DEFAULT_DELTA = 0.1


@dataclass(frozen=True)
class AccuracyBound:
    """A one-sided lower confidence bound of the accuracy on the kept items, over users."""

    accuracy: float
    lower: float
    n: int
    n_users: int
    effective_users: float

    def to_json(self) -> dict[str, Any]:
        """The bound and what it rests on."""
        return {"accuracy": self.accuracy, "lower_bound": self.lower, "n": self.n, "n_users": self.n_users,
                "effective_users": self.effective_users}


DfRule = Literal["kish", "users", "satterthwaite"]


def accuracy_lower_bound(correct: FloatArray, kept: FloatArray, target: float, delta: float, *,
                         df_rule: DfRule = "kish", se_floor: bool = True) -> AccuracyBound:
    """A user-clustered one-sided ``1 - delta`` lower bound of the pooled accuracy ``sum(correct) / sum(kept)``.

    The one-sided jackknife-t of the one CI rule (:func:`personagap.analysis.ci_rule.cluster_estimate`'s SE), with
    two changes the routing harness (``benchmarks/calibration_routing.py``) showed to be needed when users differ:

    * degrees of freedom from the Kish effective number of users ``(sum n_u)^2 / sum n_u^2`` minus 1, not users
      minus 1 -- a few heavy users carry the figure, and the t on ``U - 1`` degrees of freedom undercovers;
    * the SE is at least the binomial SE at the target, ``sqrt(target (1 - target) / n)``: where every kept label
      is right (common at the top of the confidence scale) the jackknife SE is 0 and the plain bound would be 1,
      accepting any target on a handful of items.

    Args:
        correct: Per user, kept labelled items the judge got right ``(U,)``.
        kept: Per user, kept labelled items ``(U,)`` (users with none are ignored).
        target: The accuracy to show.
        delta: One-sided error level, in (0, 1).
        df_rule: ``kish`` (the rule); the harness's candidates: ``users`` (users - 1) and ``satterthwaite`` (the one
            CI rule's, from the leave-one-out deviations, at most users - 1).
        se_floor: Floor the SE at the binomial SE at the target (False: the plain jackknife; the harness's
            candidate).

    Returns:
        The bound (NaN, never accepting, below :data:`MIN_USERS_FOR_TEST` users with kept items).
    """
    c = np.asarray(correct, dtype=float)
    k = np.asarray(kept, dtype=float)
    c, k = c[k > 0], k[k > 0]
    n_users, n = len(k), float(k.sum())
    if n_users == 0:
        return AccuracyBound(math.nan, math.nan, 0, 0, 0.0)
    point = float(c.sum() / n)
    effective = float(n * n / (k * k).sum())
    if n_users < MIN_USERS_FOR_TEST:
        return AccuracyBound(point, math.nan, int(n), n_users, effective)
    theta = (c.sum() - c) / (n - k)
    se_jack = math.sqrt((n_users - 1) / n_users * float(((theta - theta.mean()) ** 2).sum()))
    se = max(se_jack, math.sqrt(target * (1.0 - target) / n)) if se_floor else se_jack
    from scipy.special import stdtrit  # the t quantile alone: scipy.stats costs ~0.8 s at CLI start

    if df_rule == "kish":
        df = max(effective - 1.0, 1.0)
    elif df_rule == "users":
        df = n_users - 1.0
    else:
        dev = theta - theta.mean()
        fourth = float((dev**4).sum())
        df = max(min(n_users - 1.0, float((dev * dev).sum()) ** 2 / fourth if fourth > 0 else n_users - 1.0), 1.0)
    return AccuracyBound(point, point - float(stdtrit(df, 1.0 - delta)) * se, int(n), n_users, effective)


def floor3(x: float) -> float:
    """``x`` rounded down to 3 decimals: a lower bound printed never looks higher than it is (0.84997 -> 0.849)."""
    return math.floor(x * 1000.0) / 1000.0


@dataclass(frozen=True)
class ThresholdTest:
    """One step of the fixed sequence: the threshold, its bound, and whether accuracy >= target was shown."""

    min_confidence: float
    bound: AccuracyBound
    rejected: bool
    """The null "accuracy on the kept items < target" is rejected: the threshold may be used."""

    def to_json(self) -> dict[str, Any]:
        """``{min_confidence, accuracy, lower_bound, n, n_users, effective_users, rejected}``."""
        return {"min_confidence": self.min_confidence, **self.bound.to_json(), "rejected": self.rejected}


@dataclass(frozen=True)
class GuaranteedThreshold:
    """The lowest threshold fixed-sequence testing reached, with P(accuracy on kept items < target) <= delta."""

    target: float
    delta: float
    min_confidence: float | None
    """None: the first threshold tested was not shown to reach the target (or none could be tested)."""
    tests: tuple[ThresholdTest, ...]
    n_users: int
    """Users with an item the thresholds are chosen on (a judge label, a confidence, a person's label): every user
    considered, not those the chosen threshold's kept items come from (:attr:`kept_bound`)."""

    @property
    def kept_bound(self) -> AccuracyBound | None:
        """The bound at the chosen threshold: how many labelled items it keeps and from how many users (None: none).

        The guarantee rests on these items only; a threshold high enough to keep a few users' labels is chosen on
        those few users, however many users were considered (issue 32).
        """
        return next((t.bound for t in reversed(self.tests) if t.rejected), None)

    @property
    def stopped(self) -> str:
        """Why the sequence stopped, one line."""
        if not self.tests:
            return (f"no threshold keeps labelled items of {MIN_USERS_FOR_TEST} or more users, and enough of them "
                    "to reach the target even if every kept label were right: nothing can be tested")
        last = self.tests[-1]
        if last.rejected:
            return "every threshold tested reached the target: the lowest is used"
        b = last.bound
        return (f"stopped at >= {last.min_confidence:g}: accuracy {b.accuracy:.3f}, lower bound "
                f"{floor3(b.lower):.3f} < {self.target:g}")

    def to_json(self) -> dict[str, Any]:
        """The target, delta, the threshold, the tests run in order, and why the sequence stopped."""
        return json_safe_dict({
            "method": "ltt", "target": {"metric": "accuracy", "value": self.target, "source": "given"},
            "delta": self.delta, "min_confidence": self.min_confidence,
            "guarantee": f"P(accuracy on the kept items >= {self.target:g}) >= {1 - self.delta:g}",
            "test": "fixed-sequence, one-sided user-clustered jackknife-t (Kish df, binomial SE floor)",
            "tests": [t.to_json() for t in self.tests], "stopped": self.stopped, "n_users": self.n_users,
            "kept_labelled": None if self.kept_bound is None else {"n_items": self.kept_bound.n,
                                                                   "n_users": self.kept_bound.n_users}})


def calibration_arrays(items: pd.DataFrame) -> tuple[np.ndarray[Any, np.dtype[np.intp]], int, FloatArray, FloatArray]:
    """The items a threshold is chosen on (a judge label, a confidence and a person's label), as arrays.

    Returns:
        ``(user index, number of users, confidence, correct)``: per usable item its user's index, its confidence,
        and 1 where the judge's label equals the person's.
    """
    label = items["label"].to_numpy(dtype=object)
    human = items["human"].to_numpy(dtype=object)
    confidence = pd.to_numeric(items["confidence"], errors="coerce").to_numpy(dtype=float)
    usable = pd.notna(label) & pd.notna(human) & ~np.isnan(confidence)
    codes, users = pd.factorize(items["user_id"].to_numpy()[usable])
    correct = (label[usable].astype(str) == human[usable].astype(str)).astype(float)
    return np.asarray(codes, dtype=np.intp), len(users), confidence[usable], correct


def guaranteed_threshold(items: pd.DataFrame, target: float, *, delta: float = DEFAULT_DELTA,
                         df_rule: DfRule = "kish", se_floor: bool = True) -> GuaranteedThreshold:
    """Learn-then-Test: fixed-sequence testing of "accuracy on the kept items >= target" from high to low confidence.

    Thresholds are the confidences the judge stated on labelled items, most confident first, from the first that
    keeps labelled items of :data:`MIN_USERS_FOR_TEST` users. Each is tested at level ``delta`` with
    :func:`accuracy_lower_bound` (the null, accuracy below the target, is rejected when the bound reaches the
    target); the sequence stops at the first threshold not rejected, and the last rejected one is used. Testing in a
    fixed order at the full level controls the chance of using any threshold whose true accuracy is below the target
    at ``delta`` (Angelopoulos et al. 2021, Learn then Test; Jung et al. 2025, Trust or Escalate).

    Args:
        items: :data:`ITEM_COLUMNS` rows (only those with a judge label, a confidence and a person's label count).
        target: The accuracy the kept labels must have.
        delta: The allowed chance of missing it, in (0, 1).
        df_rule: As :func:`accuracy_lower_bound` (the harness compares candidates; the CLI uses the default).
        se_floor: As :func:`accuracy_lower_bound`.

    Raises:
        ValueError: ``delta`` or ``target`` is outside (0, 1).
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"--delta must be in (0, 1), got {delta:g}")
    if not 0.0 < target < 1.0:
        raise ValueError(f"the target accuracy must be in (0, 1) for a guarantee, got {target:g}")
    index, n_users, confidence, correct = calibration_arrays(items)
    tests: list[ThresholdTest] = []
    chosen: float | None = None
    for t in np.unique(confidence)[::-1]:
        at = confidence >= t
        kept = np.bincount(index[at], minlength=n_users).astype(float)
        if int((kept > 0).sum()) < MIN_USERS_FOR_TEST:
            continue  # not yet in the sequence: decided by confidences alone
        if se_floor and not accuracy_lower_bound(kept, kept, target, delta, df_rule=df_rule).lower >= target:
            # Even with every kept label right the bound could not reach the target (too few items for the
            # floor): a test that cannot reject would only end the sequence. Decided by the counts alone.
            continue
        right = np.asarray(np.bincount(index[at], weights=correct[at], minlength=n_users), dtype=float)
        bound = accuracy_lower_bound(right, kept, target, delta, df_rule=df_rule, se_floor=se_floor)
        rejected = bool(bound.lower >= target)
        tests.append(ThresholdTest(float(t), bound, rejected))
        if not rejected:
            break
        chosen = float(t)
    return GuaranteedThreshold(target, delta, chosen, tuple(tests), n_users)
