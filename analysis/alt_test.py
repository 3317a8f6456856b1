"""The alternative-annotator test with an honest verdict: can this judge replace the human annotators?

The statistics are the paper's (Calderon, Reichart & Dror, ACL 2025), in :mod:`~personagap.analysis.alt_test_stats`.
A bare "winning rate >= 0.5" can pass for reasons that say nothing about the judge, so every result also carries:

* **A constant judge.** The humans' majority class, given on every item the judge labelled, goes through the
  same test. When it passes and the judge passes too, the data cannot tell a judge from a constant: the verdict
  is "uninformative on this data", never "passed" (on a skewed yes/no task most items are ties, and a margin
  ``epsilon`` then does all the work). When it passes and the judge does not, a constant does better than the
  judge: the verdict is :data:`FAILS_CONSTANT` (the judge fails), never "uninformative".
* **Anchored humans give no verdict.** Humans who saw an LLM's label before answering (the comparability rule,
  :mod:`personagap.analysis.comparable`) are tested apart and never produce a "passed": a judge that matches
  them may only match the LLM they were shown.
* **An epsilon sweep** (:data:`SWEEP_EPSILONS`): the winning rate at each margin. The authors' guidance
  (:data:`EPSILON_GUIDANCE`) ties the margin to who the annotators are and how well they agree, so each result
  shows the humans' own agreement beside it. The default margin stays :data:`DEFAULT_EPSILON` (0.2, experts).
* **The unit of the test** (``cluster_unit``): items of one user are averaged per annotator before the t-test.
* **Warnings**: fewer than three blind annotators sharing items (the authors ask for three or more).

Which humans count comes from :mod:`personagap.analysis.comparable`: blind humans by default; anchored
humans (who saw an LLM's label first) only when asked, and the result says so in ``humans``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Final, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field, computed_field

from personagap.analysis.agreement import json_safe_dict, krippendorff_alpha
from personagap.analysis.alt_test_stats import (
    CLUSTER_UNIT_ITEM,
    CLUSTER_UNIT_USER,
    DEFAULT_EPSILON,
    DEFAULT_Q,
    MIN_HUMANS_PER_ITEM,
    MIN_ITEMS_PER_ANNOTATOR,
    SCORERS,
    AnnotatorIndicators,
    Indicators,
    Scoring,
    benjamini_yekutieli,
    decide,
    indicators,
    judged_mask,
    one_sided_p,
    one_sided_p_rows,
)
from personagap.analysis.robust import individual_humans, judge_labels
from personagap.vocabulary import HumanSet

__all__ = [
    "CLUSTER_UNIT_ITEM", "CLUSTER_UNIT_USER", "CONSTANT_JUDGE", "DEFAULT_EPSILON", "DEFAULT_Q", "EPSILON_GUIDANCE",
    "FAILS_CONSTANT",
    "MIN_BLIND_ANNOTATORS", "MIN_HUMANS_PER_ITEM", "MIN_ITEMS_PER_ANNOTATOR", "SCORERS", "SWEEP_EPSILONS",
    "AltTestNotApplicable", "AltTestOutcome", "AltTestResult", "AnnotatorIndicators", "Indicators", "Scoring",
    "alt_test", "alt_test_rows", "benjamini_yekutieli", "decide", "indicators", "one_sided_p", "one_sided_p_rows",
]

SWEEP_EPSILONS: tuple[float, ...] = (0.05, 0.10, 0.15, 0.20)
"""Margins every result is also tested at, so a reader can apply the guidance to their own annotators."""
EPSILON_GUIDANCE = ("choose epsilon by who the annotators are (Calderon et al.): crowd workers 0.10, skilled "
                    "0.15, experts 0.20; smaller when the humans agree little")
MIN_BLIND_ANNOTATORS = 3
"""The authors recommend at least three annotators: with two, the test asks which one the judge resembles."""
CONSTANT_JUDGE = "constant (majority class)"
"""Display name of the constant judge run beside every judge."""
BASELINE_KIND = "baseline"

FAILS_CONSTANT: Final = "fails: a constant judge beats it"
"""The verdict of a judge that does not pass where the constant judge passes (issue 32): worse than a constant."""

Verdict = Literal["passed", "not passed", "uninformative on this data", "fails: a constant judge beats it",
                  "no verdict: anchored humans", "not applicable"]


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
    passed: bool = Field(description="winning_rate >= 0.5: the paper's criterion alone; read ``verdict``.")
    p_values: dict[str, float] = Field(description="Annotator -> one-sided t-test p-value (uncorrected; NaN when "
                                                   "the annotator's differences are constant).")
    won: list[str] = Field(default_factory=list, description="Annotators whose null BY rejects.")
    advantage_by_annotator: dict[str, float] = Field(default_factory=dict)
    items_by_annotator: dict[str, int] = Field(default_factory=dict)
    verdict: Verdict = Field(description="What the result says: passed only when a constant judge does not pass "
                                         "and the humans are blind; where the constant judge passes, "
                                         "'uninformative on this data' if this judge passes too, else "
                                         "'fails: a constant judge beats it'.")
    verdict_reason: str = Field(description="Why, in one line.")
    epsilon_sweep: list[dict[str, Any]] = Field(
        default_factory=list, description="Per margin in SWEEP_EPSILONS: epsilon, winning_rate, passed (and the "
                                          "constant judge's constant_winning_rate, constant_passed).")
    constant_judge: dict[str, Any] | None = Field(
        default=None, description="The constant majority-class judge on the same items: label, winning_rate, "
                                  "advantage_probability, passed, won (None on the constant judge's own row).")
    cluster_unit: str = Field(description="Unit of the t-test: 'user' (items averaged per user) or 'item'.")
    clusters_by_annotator: dict[str, int] = Field(default_factory=dict)
    human_agreement: float | None = Field(default=None, description="The tested humans' own agreement on the "
                                                                    "items (Krippendorff's alpha).")
    human_agreement_measure: str | None = None
    n_blind_annotators: int | None = Field(default=None, description="Blind annotators sharing judged items.")
    warnings: list[str] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def estimand(self) -> dict[str, str]:
        """What each figure weights (issue 30).

        The winning rate's t-tests read per-user means of the judge's advantage where items carry users (each user
        once: ``users``); the advantage probability stays the paper's mean over items (``items``).
        """
        return {"winning_rate": "users" if self.cluster_unit == "user" else "items", "advantage_probability": "items"}


class AltTestNotApplicable(BaseModel):
    """The test cannot run on this judge and dataset, and why."""

    judge: str
    dataset: str
    applicable: Literal[False] = False
    humans: HumanSet = "blind"
    rater_kind: str = ""
    reason: str
    verdict: Verdict = "not applicable"


AltTestOutcome = AltTestResult | AltTestNotApplicable


def majority_class(labels: pd.Series) -> str:
    """The most frequent label (ties: the first in sorted order), as the constant judge gives it.

    Raises:
        ValueError: No label.
    """
    counts = Counter(labels.astype(str).tolist())
    if not counts:
        raise ValueError("no human label to take the majority class of")
    top = max(counts.values())
    return str(min(label for label, n in counts.items() if n == top))


def _outcome(ind: Indicators, epsilon: float, q: float) -> dict[str, Any]:
    p_values, won, winning_rate, advantage = decide(ind, epsilon=epsilon, q=q)
    return {"p_values": p_values, "won": won, "winning_rate": winning_rate, "advantage_probability": advantage,
            "passed": bool(winning_rate >= 0.5)}


def _verdict(humans_kind: HumanSet, passed: bool, winning_rate: float, epsilon: float,
             constant: dict[str, Any] | None, baseline_label: str | None) -> tuple[Verdict, str]:
    if humans_kind == "anchored":
        also = "" if constant is None or not constant["passed"] else "; a constant judge passes too"
        return "no verdict: anchored humans", ("these humans saw an LLM's label before answering: matching them "
                                               f"may only be matching that LLM{also}")
    if constant is not None and constant["passed"]:
        if not passed:
            # The constant passes and the judge does not: the judge is worse than always saying one label, which
            # is a finding about the judge, not a test that cannot tell (issue 32).
            return FAILS_CONSTANT, (f"a constant judge that always says {constant['label']!r} passes at epsilon "
                                    f"{epsilon:g} (winning rate {constant['winning_rate']:.2f}) and this judge "
                                    f"does not ({winning_rate:.2f})")
        return "uninformative on this data", (f"a constant judge that always says {constant['label']!r} passes "
                                              f"too at epsilon {epsilon:g}")
    reason = f"winning rate {winning_rate:.2f} {'>=' if passed else '<'} 0.5 at epsilon {epsilon:g}"
    if baseline_label is not None:
        # The constant judge passing is the sign of a test that cannot tell judges apart, never a headline.
        if passed:
            return "uninformative on this data", (f"a judge that always says {baseline_label!r} (the humans' "
                                                  f"majority class) passes at epsilon {epsilon:g}")
        reason = f"always says {baseline_label!r} (the humans' majority class); {reason}"
    elif constant is not None:
        reason += "; the constant judge does not pass"
    return ("passed" if passed else "not passed"), reason


def alt_test(judge: Mapping[str, Any], humans: pd.DataFrame, *, judge_name: str, dataset: str,
             humans_kind: HumanSet = "blind", rater_kind: str = "", scoring: Scoring = "accuracy",
             epsilon: float = DEFAULT_EPSILON, q: float = DEFAULT_Q,
             min_humans_per_item: int = MIN_HUMANS_PER_ITEM,
             min_items_per_annotator: int = MIN_ITEMS_PER_ANNOTATOR, baseline: bool = False) -> AltTestOutcome:
    """Run the alternative-annotator test of one judge, and of a constant judge on the same items, against humans.

    Args:
        judge: Item id -> the judge's (parsed) label.
        humans: Per-annotator labels: ``item_id``, ``rater``, ``label`` (one row per item and annotator), and
            optionally ``user_id`` (items then cluster by user: see :mod:`~personagap.analysis.alt_test_stats`).
        judge_name: Display name of the judge.
        dataset: Dataset key (for the record).
        humans_kind: ``blind`` or ``anchored`` (the caller chose the rows; anchored humans give no verdict).
        rater_kind: The judge's kind (llm, trained, baseline), recorded.
        scoring: ``accuracy`` for categories, ``neg_rmse`` for ordinal scores.
        epsilon: Cost–benefit margin (default 0.2, the authors' value for expert annotators).
        q: False discovery rate of the Benjamini–Yekutieli correction.
        min_humans_per_item: Items need this many human labels (at least 2).
        min_items_per_annotator: Annotators need this many items to be tested.
        baseline: ``judge`` is itself the constant judge (no constant judge is run beside it).

    Returns:
        :class:`AltTestResult`, or :class:`AltTestNotApplicable` with the reason.

    Raises:
        ValueError: ``min_humans_per_item`` below 2.
    """
    if min_humans_per_item < 2:
        raise ValueError("the alt-test needs at least 2 humans per item (one left out, one to compare with)")

    def not_applicable(reason: str) -> AltTestNotApplicable:
        return AltTestNotApplicable(judge=judge_name, dataset=dataset, humans=humans_kind, rater_kind=rater_kind,
                                    reason=reason)

    if not judge:
        return not_applicable("the judge labelled no item")
    shared = humans[judged_mask(humans, judge)]
    counts = shared.groupby("item_id")["rater"].nunique()
    if counts.empty or counts.max() < min_humans_per_item:
        most = int(counts.max()) if not counts.empty else 0
        return not_applicable(f"no item the judge labelled has {min_humans_per_item} {humans_kind} human labels "
                              f"(at most {most} per item)")
    settings: dict[str, Any] = {"scoring": scoring, "min_humans_per_item": min_humans_per_item,
                                "min_items_per_annotator": min_items_per_annotator}
    ind = indicators(judge, humans, **settings)
    if not ind.annotators:
        best = max(ind.skipped.values(), default=0)
        return not_applicable(f"no annotator has {min_items_per_annotator} items with {min_humans_per_item}+ "
                              f"{humans_kind} humans and a judge label (most: {best}, over {len(ind.skipped)} "
                              "annotators)")
    main = _outcome(ind, epsilon, q)
    sweep = [{"epsilon": e, "winning_rate": at["winning_rate"], "passed": at["passed"]}
             for e, at in ((e, _outcome(ind, e, q)) for e in SWEEP_EPSILONS)]
    constant: dict[str, Any] | None = None
    if not baseline:
        # The humans' majority class over the items the test uses, given on every item this judge labelled.
        tested = shared[judged_mask(shared, set(counts.index[counts >= min_humans_per_item]))]
        label = majority_class(tested["label"])
        fixed = indicators(dict.fromkeys(judge, label), humans, **settings)
        constant = {"label": label, **_outcome(fixed, epsilon, q)}
        for row in sweep:
            at = _outcome(fixed, row["epsilon"], q)
            row.update(constant_winning_rate=at["winning_rate"], constant_passed=at["passed"])
    verdict, reason = _verdict(humans_kind, main["passed"], main["winning_rate"], epsilon, constant,
                               str(next(iter(judge.values()))) if baseline else None)
    return AltTestResult(
        judge=judge_name, dataset=dataset, humans=humans_kind, rater_kind=rater_kind, scoring=scoring,
        epsilon=epsilon, q=q, n_items=ind.n_items, n_annotators=len(ind.annotators), **main,
        advantage_by_annotator={a.annotator: float(a.judge_wins.mean()) for a in ind.annotators},
        items_by_annotator={a.annotator: len(a.items) for a in ind.annotators},
        verdict=verdict, verdict_reason=reason, epsilon_sweep=sweep,
        constant_judge=None if constant is None else {k: v for k, v in constant.items() if k != "p_values"},
        cluster_unit=ind.cluster_unit, clusters_by_annotator={a.annotator: a.n_clusters for a in ind.annotators})


def human_agreement(people: pd.DataFrame, items: set[str], scoring: Scoring) -> float:
    """Krippendorff's alpha of the humans on ``items`` (nominal for categories, ordinal for scores).

    Alpha does not need to know who rated what, only each item's labels, so the reliability matrix has one row
    per label slot (at most the most humans on an item), not one per person.
    """
    rows = people[judged_mask(people, items)]
    if rows.empty:
        return float("nan")
    if scoring == "neg_rmse":
        values = rows["label"].astype(float).to_numpy()
    else:
        values = pd.factorize(rows["label"].astype(str))[0].astype(float)
    item_code = pd.factorize(rows["item_id"])[0]
    slot = pd.Series(item_code).groupby(item_code).cumcount().to_numpy()
    data = np.full((int(slot.max()) + 1, int(item_code.max()) + 1), np.nan)
    data[slot, item_code] = values
    return krippendorff_alpha(data, "ordinal" if scoring == "neg_rmse" else "nominal")


def _multi_rater_items(people: pd.DataFrame, judged: set[str], min_humans: int) -> set[str]:
    rows = people[judged_mask(people, judged)]
    per_item = rows.groupby("item_id")["rater"].nunique()
    return set(per_item.index[per_item >= min_humans].astype(str))


def alt_test_rows(labels: pd.DataFrame, dataset: str, *, humans: HumanSet = "blind", scoring: Scoring = "accuracy",
                  epsilon: float = DEFAULT_EPSILON, q: float = DEFAULT_Q,
                  min_humans_per_item: int = MIN_HUMANS_PER_ITEM,
                  min_items_per_annotator: int = MIN_ITEMS_PER_ANNOTATOR) -> list[dict[str, Any]]:
    """The test for every comparable judge of ``dataset``, and for the constant judge, as report rows.

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
        One JSON-safe dict per judge (``applicable`` true with the figures and ``verdict``, or false with
        ``reason``), preceded, when some judge could be tested, by the constant judge's row
        (:data:`CONSTANT_JUDGE`, ``rater_kind`` ``baseline``) on every item some judge labelled; empty when the
        dataset has no judge labels.
    """
    frame = labels[labels["dataset"] == dataset]
    people = individual_humans(frame, humans)
    blind = people if humans == "blind" else individual_humans(frame, "blind")
    settings: dict[str, Any] = {"dataset": dataset, "humans_kind": humans, "scoring": scoring, "epsilon": epsilon,
                                "q": q, "min_humans_per_item": min_humans_per_item,
                                "min_items_per_annotator": min_items_per_annotator}
    results: list[AltTestOutcome] = []
    every: dict[str, Any] = {}
    for j in judge_labels(frame):
        # The same dict as Series.to_dict(), built from plain lists (a tenth of the time on Arrow-backed strings).
        judged = dict(zip(j.labels.index.tolist(), j.labels.tolist(), strict=True))
        every.update(judged)
        results.append(alt_test(judged, people, judge_name=j.judge, rater_kind=j.rater_kind, **settings))
    if any(r.applicable for r in results):
        tested = _multi_rater_items(people, set(every), min_humans_per_item)
        label = majority_class(people[judged_mask(people, tested)]["label"])
        results.insert(0, alt_test(dict.fromkeys(every, label), people, judge_name=CONSTANT_JUDGE,
                                   rater_kind=BASELINE_KIND, baseline=True, **settings))
        shared = _multi_rater_items(blind, set(every), min_humans_per_item)
        n_blind = int(blind[judged_mask(blind, shared)]["rater"].nunique())
        level = "ordinal" if scoring == "neg_rmse" else "nominal"
        context = {"human_agreement": human_agreement(people, tested, scoring),
                   "human_agreement_measure": f"Krippendorff's alpha ({level})",
                   "n_blind_annotators": n_blind,
                   "warnings": [] if n_blind >= MIN_BLIND_ANNOTATORS else [
                       f"fewer than {MIN_BLIND_ANNOTATORS} blind annotators share items ({n_blind}): the authors ask "
                       "for three or more"]}
        results = [r.model_copy(update=context) if isinstance(r, AltTestResult) else r for r in results]
    return [json_safe_dict(r.model_dump()) for r in results]
