"""The alternative-annotator test: can this judge replace the human annotators? (Calderon et al., ACL 2025).

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

One degenerate case the paper leaves open: if every ``d`` of an annotator is equal, the t statistic is
undefined (scipy returns NaN). We take its limit as the variance goes to 0: p = 0 if the mean exceeds
``-epsilon``, else 1.

Which humans count comes from :mod:`personagap.analysis.comparable`: blind humans by default; anchored
humans (who saw an LLM's label first) only when asked, and the result says so in ``humans``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
from pydantic import BaseModel, Field
from scipy import stats

from personagap.analysis.agreement import json_safe_dict
from personagap.analysis.robust import HumanSet, individual_humans, judge_labels

Scoring = Literal["accuracy", "neg_rmse"]
DEFAULT_EPSILON = 0.2
DEFAULT_Q = 0.05
MIN_HUMANS_PER_ITEM = 2
MIN_ITEMS_PER_ANNOTATOR = 30


class AltTestResult(BaseModel):
    """The alternative-annotator test of one judge on one dataset."""

    judge: str
    dataset: str
    applicable: Literal[True] = True
    humans: HumanSet = Field(default="blind", description="Blind humans, or anchored ones (saw an LLM label).")
    rater_kind: str = ""
    scoring: Scoring = "accuracy"
    epsilon: float
    q: float = DEFAULT_Q
    n_items: int = Field(description="Items used: judged, with >= min humans, labelled by a tested annotator.")
    n_annotators: int = Field(description="Annotators tested (those with enough items).")
    winning_rate: float = Field(description="Share of annotators the judge beats (BY-corrected at q).")
    advantage_probability: float = Field(description="Mean over annotators of P(judge aligns at least as well).")
    passed: bool = Field(description="winning_rate >= 0.5: the judge may replace these annotators.")
    p_values: dict[str, float] = Field(description="Annotator -> one-sided t-test p-value (uncorrected).")
    won: list[str] = Field(default_factory=list, description="Annotators whose null BY rejects.")
    advantage_by_annotator: dict[str, float] = Field(default_factory=dict)
    items_by_annotator: dict[str, int] = Field(default_factory=dict)


class AltTestNotApplicable(BaseModel):
    """The test cannot run on this judge and dataset, and why."""

    judge: str
    dataset: str
    applicable: Literal[False] = False
    humans: HumanSet = "blind"
    rater_kind: str = ""
    reason: str


AltTestOutcome = AltTestResult | AltTestNotApplicable


# --------------------------------------------------------------------------- statistics

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

    With zero variance the t statistic is undefined; its limit is used (0 above the margin, else 1).
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
    constant = np.all(x == x[..., :1], axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (mean + epsilon) / (sd / math.sqrt(n))
    p: npt.NDArray[np.float64] = np.where(constant, np.where(mean > -epsilon, 0.0, 1.0), stats.t.sf(t, n - 1))
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

    @property
    def difference(self) -> npt.NDArray[np.float64]:
        """``W_judge - W_human`` per item (-1, 0 or 1)."""
        d: npt.NDArray[np.float64] = self.judge_wins - self.human_wins
        return d


@dataclass(frozen=True)
class Indicators:
    """Leave-one-annotator-out indicators of one judge, before any test."""

    annotators: list[AnnotatorIndicators]
    """Annotators with at least the minimum number of items, in name order."""
    n_items: int
    skipped: dict[str, int]
    """Annotators left out for too few items -> their item count."""


def indicators(judge: Mapping[str, Any], humans: pd.DataFrame, *, scoring: Scoring = "accuracy",
               min_humans_per_item: int = MIN_HUMANS_PER_ITEM,
               min_items_per_annotator: int = MIN_ITEMS_PER_ANNOTATOR) -> Indicators:
    """Steps 1–3 of the test: per annotator, per item, who aligns at least as well with the other humans.

    Args:
        judge: Item id -> the judge's label.
        humans: One row per (item, annotator): columns ``item_id``, ``rater``, ``label``.
        scoring: ``accuracy`` (categories) or ``neg_rmse`` (ordinal scores; labels must be numbers).
        min_humans_per_item: Items with fewer human labels are dropped.
        min_items_per_annotator: Annotators with fewer remaining items are not tested.
    """
    rows = humans[_judged(humans, judge)].drop_duplicates(["item_id", "rater"])
    per_item = rows.groupby("item_id")["rater"].transform("size")
    rows = rows[per_item >= min_humans_per_item]
    # Array operations over every (annotator, item) pair at once: a Python loop per pair took over a minute
    # at 10^6 labels. Pairs in (annotator, item) order, as the test's per-annotator lists.
    item = rows["item_id"].astype(str).to_numpy()
    rater = rows["rater"].astype(str).to_numpy()
    pred = np.array([judge[i] for i in rows["item_id"].to_numpy(dtype=object)], dtype=object)
    item_code = pd.factorize(item)[0]
    human_score, judge_score = _pair_scores(item_code, rows["label"].to_numpy(dtype=object), pred, scoring)
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
                                          (s_human >= s_judge).astype(float)))
        used.update(items)
    return Indicators(tested, len(used), skipped)


def _judged(humans: pd.DataFrame, judge: Mapping[str, Any]) -> npt.NDArray[np.bool_]:
    """Rows of ``humans`` on an item the judge labelled.

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

    Returns:
        ``(p_values, won, winning_rate, advantage_probability)``; NaN rates without annotators.
    """
    names = [a.annotator for a in ind.annotators]
    p = [one_sided_p(a.difference, epsilon) for a in ind.annotators]
    rejected = benjamini_yekutieli(p, q)
    won = [n for n, r in zip(names, rejected, strict=True) if r]
    if not names:
        return {}, [], float("nan"), float("nan")
    advantage = float(np.mean([a.judge_wins.mean() for a in ind.annotators]))
    return dict(zip(names, p, strict=True)), won, len(won) / len(names), advantage


def alt_test(judge: Mapping[str, Any], humans: pd.DataFrame, *, judge_name: str, dataset: str,
             humans_kind: HumanSet = "blind", rater_kind: str = "", scoring: Scoring = "accuracy",
             epsilon: float = DEFAULT_EPSILON, q: float = DEFAULT_Q,
             min_humans_per_item: int = MIN_HUMANS_PER_ITEM,
             min_items_per_annotator: int = MIN_ITEMS_PER_ANNOTATOR) -> AltTestOutcome:
    """Run the alternative-annotator test of one judge against per-annotator human labels.

    Args:
        judge: Item id -> the judge's (parsed) label.
        humans: Per-annotator labels: ``item_id``, ``rater``, ``label`` (one row per item and annotator).
        judge_name: Display name of the judge.
        dataset: Dataset key (for the record).
        humans_kind: ``blind`` or ``anchored`` (recorded; the caller chose the rows).
        rater_kind: The judge's kind (llm, trained, baseline), recorded.
        scoring: ``accuracy`` for categories, ``neg_rmse`` for ordinal scores.
        epsilon: Cost–benefit margin (the paper's default 0.2, for expert annotators).
        q: False discovery rate of the Benjamini–Yekutieli correction.
        min_humans_per_item: Items need this many human labels (at least 2).
        min_items_per_annotator: Annotators need this many items to be tested.

    Returns:
        :class:`AltTestResult`, or :class:`AltTestNotApplicable` with the reason.
    """
    if min_humans_per_item < 2:
        raise ValueError("the alt-test needs at least 2 humans per item (one left out, one to compare with)")

    def not_applicable(reason: str) -> AltTestNotApplicable:
        return AltTestNotApplicable(judge=judge_name, dataset=dataset, humans=humans_kind, rater_kind=rater_kind,
                                    reason=reason)

    if not judge:
        return not_applicable("the judge labelled no item")
    shared = humans[_judged(humans, judge)]
    counts = shared.groupby("item_id")["rater"].nunique()
    if counts.empty or counts.max() < min_humans_per_item:
        most = int(counts.max()) if not counts.empty else 0
        return not_applicable(f"no item the judge labelled has {min_humans_per_item} {humans_kind} human labels "
                              f"(at most {most} per item)")
    ind = indicators(judge, humans, scoring=scoring, min_humans_per_item=min_humans_per_item,
                     min_items_per_annotator=min_items_per_annotator)
    if not ind.annotators:
        best = max(ind.skipped.values(), default=0)
        return not_applicable(f"no annotator has {min_items_per_annotator} items with {min_humans_per_item}+ "
                              f"{humans_kind} humans and a judge label (most: {best}, over {len(ind.skipped)} "
                              "annotators)")
    p_values, won, winning_rate, advantage = decide(ind, epsilon=epsilon, q=q)
    return AltTestResult(
        judge=judge_name, dataset=dataset, humans=humans_kind, rater_kind=rater_kind, scoring=scoring,
        epsilon=epsilon, q=q, n_items=ind.n_items, n_annotators=len(ind.annotators),
        winning_rate=winning_rate, advantage_probability=advantage, passed=winning_rate >= 0.5,
        p_values=p_values, won=won,
        advantage_by_annotator={a.annotator: float(a.judge_wins.mean()) for a in ind.annotators},
        items_by_annotator={a.annotator: len(a.items) for a in ind.annotators})


def alt_test_rows(labels: pd.DataFrame, dataset: str, *, humans: HumanSet = "blind", scoring: Scoring = "accuracy",
                  epsilon: float = DEFAULT_EPSILON, q: float = DEFAULT_Q,
                  min_humans_per_item: int = MIN_HUMANS_PER_ITEM,
                  min_items_per_annotator: int = MIN_ITEMS_PER_ANNOTATOR) -> list[dict[str, Any]]:
    """The test for every comparable judge of ``dataset``, as report rows (JSON-safe dicts).

    Args:
        labels: Tidy labels of one stage (:func:`personagap.store.load_labels`); other datasets ignored.
        dataset: Dataset key.
        humans: ``blind`` (default) or ``anchored`` per-annotator labels, chosen by
            :mod:`personagap.analysis.comparable`; never mixed.
        scoring: ``accuracy`` for categories, ``neg_rmse`` for ordinal scores.
        epsilon: Cost–benefit margin.
        q: BY false discovery rate.
        min_humans_per_item: Items need this many human labels.
        min_items_per_annotator: Annotators need this many items.

    Returns:
        One dict per judge (``applicable`` true with the figures, or false with ``reason``); empty when
        the dataset has no judge labels.
    """
    frame = labels[labels["dataset"] == dataset]
    people = individual_humans(frame, humans)
    out = []
    for j in judge_labels(frame):
        # The same dict as Series.to_dict(), built from plain lists (a tenth of the time on Arrow-backed strings).
        judged = dict(zip(j.labels.index.tolist(), j.labels.tolist(), strict=True))
        result = alt_test(judged, people, judge_name=j.judge, dataset=dataset, humans_kind=humans,
                          rater_kind=j.rater_kind, scoring=scoring, epsilon=epsilon, q=q,
                          min_humans_per_item=min_humans_per_item, min_items_per_annotator=min_items_per_annotator)
        out.append(json_safe_dict(result.model_dump()))
    return out
