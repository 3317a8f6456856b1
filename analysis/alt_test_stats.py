"""The alternative-annotator test's statistics (Calderon, Reichart & Dror, ACL 2025), before any verdict.

Calderon, Reichart & Dror, "The Alternative Annotator Test for LLM-as-a-Judge: How to Statistically
Justify Replacing Human Annotators with LLMs" (ACL 2025). The procedure, as the paper defines it:

1. Keep the items labelled by at least ``min_humans_per_item`` humans (default 2) and by the judge.
2. For every human annotator ``j`` with at least ``min_items_per_annotator`` such items (default 30;
   fewer and the t-test's normality assumption fails, so ``j`` is skipped), leave ``j`` out. On each
   of ``j``'s items, score the judge and ``j`` by their alignment with the *remaining* humans:
   accuracy (share of the others' labels matched) for categories, negative RMSE for ordinal scores.
3. ``W_judge = 1[judge scores >= j]`` and ``W_human = 1[j scores >= judge]`` (both 1 on a tie). The
   advantage probability of ``j`` is the mean of ``W_judge``.
4. One-sided one-sample t-test of ``d = W_judge - W_human`` against the cost–benefit margin
   ``-epsilon`` (H0: mean(d) <= -epsilon; H1: mean(d) > -epsilon — the judge is at least as good as
   ``j`` once ``j`` is charged ``epsilon`` for being a costly human). This is the paper's
   ``ttest_1samp(W_human - W_judge, epsilon, alternative='less')`` with the sign flipped.
5. Benjamini–Yekutieli over the annotators' p-values at ``q`` (default 0.05); the judge "wins" against
   the annotators whose null it rejects.
6. **Winning rate** = share of annotators won; **advantage probability** = mean over annotators of their
   advantage probability; **passed** = winning rate >= 0.5.

Two departures, both on the side of fewer wins:

* **Clusters.** An annotator's items are not independent when several come from one user (the same prompt,
  the same persona): the t-test would count each as new evidence. Where the labels carry ``user_id``, each
  annotator's ``d`` is averaged per user first and the t-test runs over users (the cluster is the unit;
  :attr:`Indicators.cluster_unit` says which). Without users every item is its own cluster (the paper's test).
* **A constant difference vector** (every ``d`` of an annotator equal, e.g. every item a tie) has zero variance
  and no t statistic. Its p-value is NaN and it is never a win. The authors' notebook hands the vector to
  ``scipy.stats.ttest_1samp``, which (scipy 1.17) returns t = -inf and p = 0 for a vector above the margin, so
  run there it would count a win on zero variance; an annotator the judge only ever ties says nothing about
  whether the judge can replace them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.special import stdtr

Scoring = Literal["accuracy", "neg_rmse"]
DEFAULT_EPSILON = 0.2
"""The default cost–benefit margin: the authors' value for expert annotators (crowd 0.10, skilled 0.15)."""
DEFAULT_Q = 0.05
MIN_HUMANS_PER_ITEM = 2
MIN_ITEMS_PER_ANNOTATOR = 30
CLUSTER_UNIT_USER = "user"
CLUSTER_UNIT_ITEM = "item"


def benjamini_yekutieli(p_values: npt.ArrayLike, q: float = DEFAULT_Q) -> npt.NDArray[np.bool_]:
    """Which hypotheses the Benjamini–Yekutieli step-up procedure rejects at FDR ``q``.

    Sort the m p-values; find the largest rank k with ``p_(k) <= k / m * q / H_m`` where
    ``H_m = 1 + 1/2 + ... + 1/m``; reject the k smallest. Valid under any dependence (the annotators
    share items). NaN p-values are never rejected.
    """
    p = np.asarray(p_values, dtype=float)
    m = p.size
    rejected = np.zeros(m, dtype=bool)
    if m == 0:
        return rejected
    order = np.argsort(np.where(np.isnan(p), np.inf, p), kind="stable")
    harmonic = float(np.sum(1.0 / np.arange(1, m + 1)))
    thresholds = np.arange(1, m + 1) / m * q / harmonic
    below = np.nonzero(p[order] <= thresholds)[0]
    if below.size:
        rejected[order[: below[-1] + 1]] = True
    return rejected


def one_sided_p(d: npt.ArrayLike, epsilon: float) -> float:
    """p-value of H0 mean(d) <= -epsilon against H1 mean(d) > -epsilon (one-sample t-test).

    With zero variance the t statistic is undefined and the p-value is NaN (never a win; see the module's notes).
    """
    x = np.asarray(d, dtype=float)
    if x.size < 2:
        return float("nan")
    return float(one_sided_p_rows(x[None, :], epsilon)[0])


def one_sided_p_rows(d: npt.ArrayLike, epsilon: float) -> npt.NDArray[np.float64]:
    """:func:`one_sided_p` of every row of ``d`` (samples x items), for power simulations."""
    x = np.asarray(d, dtype=float)
    n = x.shape[-1]
    mean = x.mean(axis=-1)
    sd = x.std(axis=-1, ddof=1)
    # Exact equality, not sd == 0: cluster means of one value can differ in the last bit, and such a vector is
    # as constant as the indicators it averages.
    constant = np.all(np.isclose(x, x[..., :1], rtol=0.0, atol=1e-12), axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (mean + epsilon) / (sd / math.sqrt(n))
    # stdtr(df, -t) is the t distribution's survival function, without importing scipy.stats (~0.8 s a command).
    p: npt.NDArray[np.float64] = np.where(constant, np.nan, stdtr(n - 1, -t))
    return p


def _accuracy(pred: Any, others: list[Any]) -> float:
    return float(np.mean([pred == o for o in others]))


def _neg_rmse(pred: Any, others: list[Any]) -> float:
    return -math.sqrt(float(np.mean([(float(pred) - float(o)) ** 2 for o in others])))


SCORERS: dict[str, Callable[[Any, list[Any]], float]] = {"accuracy": _accuracy, "neg_rmse": _neg_rmse}
"""Alignment of one label with the remaining humans' labels of the item (higher = better aligned)."""


@dataclass(frozen=True)
class AnnotatorIndicators:
    """Per-item indicators of one left-out annotator: does the judge (does the human) align at least as well?"""

    annotator: str
    items: list[str]
    judge_wins: npt.NDArray[np.float64]
    human_wins: npt.NDArray[np.float64]
    clusters: npt.NDArray[Any] | None = None
    """The cluster (user) of each item; None: every item is its own cluster."""

    @property
    def difference(self) -> npt.NDArray[np.float64]:
        """``W_judge - W_human`` per item (-1, 0 or 1)."""
        d: npt.NDArray[np.float64] = self.judge_wins - self.human_wins
        return d

    @property
    def cluster_difference(self) -> npt.NDArray[np.float64]:
        """``W_judge - W_human`` averaged per cluster, clusters in sorted order: what the t-test reads."""
        if self.clusters is None:
            return self.difference
        _, index = np.unique(self.clusters, return_inverse=True)
        means: npt.NDArray[np.float64] = (np.bincount(index, weights=self.difference) / np.bincount(index))
        return means

    @property
    def n_clusters(self) -> int:
        """Clusters the annotator's items fall into (the t-test's sample size)."""
        return len(self.items) if self.clusters is None else int(np.unique(self.clusters).size)


@dataclass(frozen=True)
class Indicators:
    """Leave-one-annotator-out indicators of one judge, before any test."""

    annotators: list[AnnotatorIndicators]
    """Annotators with at least the minimum number of items, in name order."""
    n_items: int
    skipped: dict[str, int]
    """Annotators left out for too few items -> their item count."""
    cluster_unit: str = CLUSTER_UNIT_ITEM
    """What the t-test treats as independent: ``user`` (items averaged per user) or ``item``."""


def indicators(judge: Mapping[str, Any], humans: pd.DataFrame, *, scoring: Scoring = "accuracy",
               min_humans_per_item: int = MIN_HUMANS_PER_ITEM,
               min_items_per_annotator: int = MIN_ITEMS_PER_ANNOTATOR) -> Indicators:
    """Steps 1–3 of the test: per annotator, per item, who aligns at least as well with the other humans.

    Args:
        judge: Item id -> the judge's label.
        humans: One row per (item, annotator): columns ``item_id``, ``rater``, ``label``, and optionally
            ``user_id``: where present, items cluster by user (an item without a user is its own cluster).
        scoring: ``accuracy`` (categories) or ``neg_rmse`` (ordinal scores; labels must be numbers).
        min_humans_per_item: Items with fewer human labels are dropped.
        min_items_per_annotator: Annotators with fewer remaining items are not tested.
    """
    rows = humans[judged_mask(humans, judge)].drop_duplicates(["item_id", "rater"])
    per_item = rows.groupby("item_id")["rater"].transform("size")
    rows = rows[per_item >= min_humans_per_item]
    # Array operations over every (annotator, item) pair at once: a Python loop per pair took over a minute
    # at 10^6 labels. Pairs in (annotator, item) order, as the test's per-annotator lists.
    item = rows["item_id"].astype(str).to_numpy()
    rater = rows["rater"].astype(str).to_numpy()
    pred = np.array([judge[i] for i in rows["item_id"].to_numpy(dtype=object)], dtype=object)
    item_code = pd.factorize(item)[0]
    human_score, judge_score = _pair_scores(item_code, rows["label"].to_numpy(dtype=object), pred, scoring)
    clusters = _clusters(rows, item)
    order = np.lexsort((item, rater))
    names, starts, sizes = np.unique(rater[order], return_index=True, return_counts=True)
    tested: list[AnnotatorIndicators] = []
    skipped: dict[str, int] = {}
    used: set[str] = set()
    for annotator, first, size in zip(names.tolist(), starts.tolist(), sizes.tolist(), strict=True):
        if size < min_items_per_annotator:
            skipped[annotator] = size
            continue
        pick = order[first:first + size]
        items = item[pick].tolist()
        s_judge, s_human = judge_score[pick], human_score[pick]
        tested.append(AnnotatorIndicators(annotator, items, (s_judge >= s_human).astype(float),
                                          (s_human >= s_judge).astype(float),
                                          None if clusters is None else clusters[pick]))
        used.update(items)
    return Indicators(tested, len(used), skipped, CLUSTER_UNIT_ITEM if clusters is None else CLUSTER_UNIT_USER)


def _clusters(rows: pd.DataFrame, item: npt.NDArray[Any]) -> npt.NDArray[np.int64] | None:
    """Each row's cluster code: its user's, or its item's own where the user is missing; None without users."""
    if "user_id" not in rows.columns or not rows["user_id"].notna().any():
        return None
    # Codes in sorted order, not in row order: the t-test then sums the same clusters in the same order whatever
    # order the store returned the rows in (an exported and re-imported store gives byte-identical p-values).
    user_code = pd.factorize(rows["user_id"], sort=True)[0]  # -1 where missing
    # An item without a user is a cluster of its own, numbered after every user.
    item_code = pd.factorize(item, sort=True)[0] + int(user_code.max()) + 1
    out: npt.NDArray[np.int64] = np.where(user_code >= 0, user_code, item_code).astype(np.int64)
    return out


def judged_mask(humans: pd.DataFrame, judge: Container[Any]) -> npt.NDArray[np.bool_]:
    """Rows of ``humans`` on an item in ``judge`` (the items a judge labelled: a mapping or a set).

    Membership by the mapping's own hashing: pandas' ``isin`` on Arrow-backed strings took ~0.5 s per call at
    10^6 labels.
    """
    items = humans["item_id"].to_numpy(dtype=object)
    return np.fromiter((i in judge for i in items), dtype=bool, count=len(items))


def _pair_scores(item_code: npt.NDArray[np.intp], labels: npt.NDArray[Any], pred: npt.NDArray[Any],
                 scoring: Scoring) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Per row (one annotator's label of an item), its own and the judge's alignment with the item's other rows.

    Returns values that order as :data:`SCORERS`' scores do, exactly: for accuracy the number of other labels
    matched (the score is that count over the same number of others), for ``neg_rmse`` the score itself,
    computed as :func:`_neg_rmse` computes it (the others in row order, numpy's sum of one row).
    """
    n = len(item_code)
    if n == 0:
        return np.zeros(0), np.zeros(0)
    if scoring == "accuracy":
        codes = pd.factorize(np.concatenate([labels, pred]))[0].astype(np.int64)
        # A missing label (NaN) equals nothing, itself included, as in ``==``: each gets a code of its own.
        missing = codes < 0
        codes[missing] = codes.max() + 1 + np.arange(int(missing.sum()))
        own, judged = codes[:n], codes[n:]
        width = int(codes.max()) + 1
        base = item_code.astype(np.int64) * width
        # How often each (item, label) occurs; the judge's label of the item is looked up among them.
        uniq, inverse, counts = np.unique(base + own, return_inverse=True, return_counts=True)
        at = np.minimum(np.searchsorted(uniq, base + judged), len(uniq) - 1)
        judge_count = np.where(uniq[at] == base + judged, counts[at], 0)
        return counts[inverse.ravel()] - 1, judge_count - (own == judged)
    values = np.array([float(v) for v in labels], dtype=float)
    guess = np.array([float(v) for v in pred], dtype=float)
    size = np.bincount(item_code)[item_code]
    # Rows grouped by their item's size, then item, then row order: each item's labels are one matrix row.
    order = np.lexsort((np.arange(n), item_code, size))
    human_score, judge_score = np.empty(n), np.empty(n)
    for m in np.unique(size).tolist():
        block = order[size[order] == m].reshape(-1, m)
        matrix = values[block]
        for slot in range(m):
            others = np.ascontiguousarray(np.delete(matrix, slot, axis=1))
            rows = block[:, slot]
            human_score[rows] = -np.sqrt(np.mean((matrix[:, slot:slot + 1] - others) ** 2, axis=1))
            judge_score[rows] = -np.sqrt(np.mean((guess[rows][:, None] - others) ** 2, axis=1))
    return human_score, judge_score


def decide(ind: Indicators, *, epsilon: float = DEFAULT_EPSILON,
                    q: float = DEFAULT_Q) -> tuple[dict[str, float], list[str], float, float]:
    """Steps 4–6: p-values, BY over annotators, winning rate and advantage probability.

    The t-test reads each annotator's :attr:`AnnotatorIndicators.cluster_difference` (per-user means where the
    items carry users); the advantage probability stays the paper's item-level mean of ``W_judge``.

    Returns:
        ``(p_values, won, winning_rate, advantage_probability)``; NaN rates without annotators.
    """
    names = [a.annotator for a in ind.annotators]
    p = [one_sided_p(a.cluster_difference, epsilon) for a in ind.annotators]
    rejected = benjamini_yekutieli(p, q)
    won = [n for n, r in zip(names, rejected, strict=True) if r]
    if not names:
        return {}, [], float("nan"), float("nan")
    advantage = float(np.mean([a.judge_wins.mean() for a in ind.annotators]))
    return dict(zip(names, p, strict=True)), won, len(won) / len(names), advantage

