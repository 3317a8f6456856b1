"""The diagnosis's records: what ``personagap diagnose --json`` and the dashboard's Overview read.

Pure data (pydantic models and the constants their figures rest on); the analysis is in
:mod:`personagap.analysis.diagnosis` and :mod:`personagap.analysis.diagnosis_ceiling`, the text in
:mod:`personagap.analysis.diagnosis_text`.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from personagap.analysis.agreement import MIN_USERS_FOR_CI, json_safe_dict
from personagap.analysis.headline import headline_metric
from personagap.analysis.origins import OriginField
from personagap.analysis.panel import PanelFields
from personagap.analysis.weighting import Weight

STAGES: tuple[str, ...] = ("extraction", "relevance", "response")
STAGE_TITLES: dict[str, str] = {
    "extraction": "Stage 1 — attribute extraction",
    "relevance": "Stage 2 — relevance selection",
    "response": "Stage 3 — personalised response",
}
#: Judges with fewer shared items than this are listed but not eligible as best/worst, nor chosen for a gap.
MIN_ITEMS_FOR_RANKING = 20
#: Rater pairs sharing fewer items are left out of every mean pairwise kappa (ceiling and judge–human).
MIN_PAIR_OVERLAP = 10
#: A rater pair enters a mean pairwise kappa only when its shared items span at least this many users: leaving
#: one user out (the CI rule) then never removes a pair, so every recomputation averages the same pairs.
MIN_PAIR_USERS = 2
#: What the ``estimand`` of every pair figure (ceilings, gaps, their differences) means under each weighting.
ESTIMAND_HELP = ("What the row's figures estimate: 'items' (pooled over items; heavy users count most) or 'users' "
                 "(``diagnose --weight users``: each user's table of each rater pair divided by its own total, so "
                 "each user counts once in every pair, and pairs weigh by their users); see docs/methods.md.")


class JudgeScore(PanelFields, OriginField):
    """One judge's labels on one dataset of one stage, compared with the human reference."""

    stage: str
    dataset: str
    judge: str = Field(description="Display name: rater, plus [condition] when the protocol is not the default.")
    rater: str
    rater_kind: str
    condition: str
    n: int = Field(description="Items with both a parsed judge label and a human reference.")
    n_users: int
    failures: int = Field(description="Judge answers that could not be parsed (never counted as labels).")
    categories: list[str]
    confusion: list[list[int]] = Field(description="Rows: human label, columns: judge label (order: categories).")
    kappa: float
    kappa_ci: list[float]
    accuracy: float
    accuracy_ci: list[float]
    binary: bool = Field(description="Labels are yes/no, so yes-rates and over-selection are defined.")
    human_yes_rate: float | None = None
    judge_yes_rate: float | None = None
    over_selection: float | None = None
    over_selection_ci: list[float] | None = None
    precision: float | None = None
    recall: float | None = None
    f1: float | None = None
    undefined_resamples: int = Field(default=0, description="Users whose leave-one-out kappa was undefined.")

    @property
    def metric(self) -> str:
        """The scale's headline figure (:func:`personagap.analysis.headline.headline_metric`) this row leads with."""
        return "weighted_kappa" if headline_metric(self.scale) == "weighted_kappa" and self.weighted_kappa is not None \
            else "kappa"

    @property
    def headline(self) -> float:
        """The scale's headline agreement: quadratic-weighted kappa on ordinal scales, else Cohen's kappa."""
        return self.weighted_kappa if self.metric == "weighted_kappa" and self.weighted_kappa is not None \
            else self.kappa

    @property
    def headline_ci(self) -> list[float]:
        """The CI of :attr:`headline`."""
        return self.weighted_kappa_ci if self.metric == "weighted_kappa" and self.weighted_kappa_ci is not None \
            else self.kappa_ci


class HumanCeiling(OriginField):
    """Mean pairwise agreement among blind humans who labelled the same items of one dataset.

    Cohen's kappa, or quadratic-weighted kappa on ordinal scales (``metric``), over one fixed set of pairs (those
    sharing at least :data:`MIN_PAIR_OVERLAP` items over at least :data:`MIN_PAIR_USERS` users), each weighted by
    its shared items: the interval recomputes exactly this figure on every leave-one-user-out total.
    """

    dataset: str
    metric: str = Field(default="kappa", description="The pairwise figure: 'kappa', or 'weighted_kappa' on "
                                                     "ordinal scales.")
    mean_kappa: float = Field(description="Mean pairwise kappa (``metric``), pairs weighted by their shared items "
                                           "(by their users when ``estimand`` is users).")
    ci: list[float]
    estimand: Weight = Field(default="items", description=ESTIMAND_HELP)
    n_raters: int
    n_pairs: int
    n_items: int
    n_users: int = Field(default=0, description="Users the interval is over (no CI below MIN_USERS_FOR_CI).")
    undefined_resamples: int = Field(default=0, description="Leave-one-user-out figures that were undefined "
                                                            "(then no CI).")
    alpha: float | None = Field(default=None, description="Krippendorff's alpha (ordinal) among these humans; "
                                                          "ordinal scales only. Always pools items (not a "
                                                          "confusion-table figure: no user-weighted version).")
    alpha_ci: list[float] | None = None
    item_weighted: list[str] = Field(
        default_factory=list, description="Figures of this row that weigh items although its estimand is users "
                                          "(the ordinal alpha). In JSON only where it names one.")

    @model_serializer(mode="wrap")
    def _without_empty_item_weighted(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Only a user-weighted ordinal ceiling has an item-weighted figure to name: an always-empty key on every
        # other ceiling would say nothing (and keep the default JSON as it was before --weight).
        data: dict[str, Any] = handler(self)
        if not self.item_weighted:
            data.pop("item_weighted", None)
        return data


class CeilingGap(OriginField):
    """How far one judge falls below the human ceiling of the same dataset, with a paired user-clustered CI.

    One judge's own gap: for the stage's best judge it is picked on the data it is measured on, so the verdict
    ranks stages by :class:`SelectedGap` instead.
    """

    stage: str
    dataset: str
    judge: str
    rater: str
    rater_kind: str
    condition: str
    metric: str = Field(default="kappa", description="The pairwise figure of both sides: 'kappa', or "
                                                     "'weighted_kappa' on ordinal scales.")
    judge_kappa: float = Field(description="Mean kappa (``metric``) of the judge with each blind human (same items), "
                                           "pairs weighted by their shared items.")
    judge_kappa_ci: list[float]
    ceiling: float = Field(description="Mean pairwise kappa (``metric``) among those blind humans.")
    ceiling_ci: list[float]
    gap: float = Field(description="ceiling - judge_kappa (> 0: the judge agrees with humans less than they do).")
    gap_ci: list[float] = Field(description="Paired: every leave-one-user-out total recomputes both sides.")
    estimand: Weight = Field(default="items", description=ESTIMAND_HELP)
    n_items: int = Field(description="Items the judge labelled among those the humans share.")
    n_users: int
    n_judge_pairs: int
    n_human_pairs: int
    undefined_resamples: int = Field(description="Leave-one-user-out gaps that were undefined (then no CI).")


class SelectedGap(OriginField):
    """A stage's best-judge gap with the choice of the judge accounted for (what the verdict ranks).

    With several eligible judges of one dataset, the users are split in two fixed halves (by a seeded hash of their
    id): the judge with the smallest gap on one half is measured on the other, both ways, and ``gap`` is the mean
    of the two measurements, so no figure is measured on the data that chose it. The interval is the one CI rule
    with the choice remade on every leave-one-user-out total. With one eligible judge there is nothing to choose:
    its gap on all users.
    """

    stage: str
    dataset: str
    metric: str = Field(description="'kappa', or 'weighted_kappa' on ordinal scales.")
    method: str = Field(description="'cross-fit' (several judges) or 'single judge'.")
    gap: float = Field(description="Ceiling minus the chosen judge's mean kappa with the humans, measured on users "
                                   "that did not choose it.")
    gap_ci: list[float]
    estimand: Weight = Field(default="items", description=ESTIMAND_HELP)
    chosen: list[str] = Field(description="Cross-fit: the judge chosen on each half (measured on the other); "
                                          "single judge: that judge.")
    n_judges: int = Field(description="Eligible judges the choice was among (at least MIN_ITEMS_FOR_RANKING items).")
    n_users: int
    undefined_resamples: int = Field(default=0, description="Leave-one-user-out figures that were undefined "
                                                            "(then no CI).")


class DatasetBest(OriginField):
    """One dataset of a stage: its own best judge beside its own human ceiling, or why it has none.

    Every figure is the dataset's headline (:mod:`personagap.analysis.headline`): a judge is never shown beside a
    ceiling of another kind or of another dataset, and datasets are never ranked against each other (the verdict
    ranks stages on one dataset each, :attr:`StageDiagnosis.selected_gap`).
    """

    stage: str
    dataset: str
    scale: str = Field(description="'nominal', 'ordinal' or 'pairwise' (the dataset's record).")
    metric: str = Field(description="The scale's headline figure, of the judges, the ceiling and the gap alike: "
                                    "'kappa', or 'weighted_kappa' on ordinal scales.")
    estimand: Weight = Field(default="items", description="What the figures of ``best``, ``worst``, ``ceiling`` "
                                                          "and ``gap`` estimate ('items' or 'users'; each says it).")
    n_judges: int = Field(description="Judges scored against the blind human reference on this dataset.")
    best: JudgeScore | None = Field(description="The judge with the highest headline figure against the blind "
                                                "human reference (among judges with MIN_ITEMS_FOR_RANKING items, "
                                                "else all); None without a scored judge.")
    worst: JudgeScore | None = Field(default=None, description="The lowest, by the same rule; None when the "
                                                               "dataset has one judge (it would be the best).")
    ceiling: HumanCeiling | None = Field(default=None, description="This dataset's blind human ceiling.")
    gap: CeilingGap | None = Field(default=None, description="The best judge's own gap to this ceiling: its mean "
                                                             "pairwise figure with each blind human vs theirs.")
    note: str | None = Field(default=None, description="Why there is no ceiling or no gap (one line), else None.")


class StageComparison(BaseModel):
    """The difference of two stages' selection-aware gaps, paired over the users they share."""

    stage: str = Field(description="The stage with the larger gap.")
    other: str
    difference: float = Field(description="stage's gap minus other's gap.")
    ci: list[float]
    estimand: Weight = Field(default="items", description=ESTIMAND_HELP)
    n_users: int = Field(description="Users of either stage (the interval's clusters).")
    n_shared_users: int = Field(description="Users (by id) in both stages' datasets: their items move together.")
    undefined_resamples: int = 0


class StageDiagnosis(BaseModel):
    """What the store says about one stage."""

    stage: str
    title: str
    status: str = Field(description="'no_data' | 'no_reference' | 'no_judges' | 'ok'.")
    message: str
    n_items: int
    n_labels: int
    n_human_labels: int
    n_judge_labels: int
    judges: list[JudgeScore] = Field(description="Sorted by kappa, best first (NaN last).")
    best: JudgeScore | None = Field(description="The best judge of the stage's ranked dataset only (a design "
                                                "choice, see diagnosis._ranked_dataset); every dataset's own best "
                                                "judge is in ``datasets``.")
    worst: JudgeScore | None = Field(description="The lowest judge of that same dataset (the best when it has one).")
    ceiling: HumanCeiling | None = Field(
        description="The ceiling of the dataset the stage is ranked on (the gap's, else the best judge's); None "
                    "when that dataset has none. Never a ceiling of another dataset: draw it only beside judges "
                    "of ceiling.dataset.")
    ceilings: list[HumanCeiling] = Field(default_factory=list, description="Every dataset's blind human ceiling.")
    gaps: list[CeilingGap] = Field(default_factory=list, description="Every judge's gap to its dataset's ceiling, "
                                                                     "smallest gap first.")
    gap: CeilingGap | None = Field(default=None, description="The judge with the smallest gap on the stage's "
                                                             "ranked dataset (its own gap: chosen on these data).")
    selected_gap: SelectedGap | None = Field(default=None, description="The stage's selection-aware best-judge gap "
                                                                       "(what the verdict ranks).")
    notes: list[str] = Field(default_factory=list, description="Why a ceiling or a gap is missing.")
    datasets: list[DatasetBest] = Field(default_factory=list, description="Per dataset with judges or a ceiling: "
                                                                          "its own best judge and its own ceiling "
                                                                          "(datasets are not ranked).")


class Diagnosis(BaseModel):
    """Per stage, the best and worst judge against humans, the human ceiling, the gap and the verdict."""

    stages: list[StageDiagnosis]
    worst_stage: str | None = Field(description="The stage whose best judge is furthest below its own dataset's "
                                                "human ceiling (selection-aware gap), when the CI of its difference "
                                                "with every other ranked stage excludes 0; else None.")
    verdict: str
    ranking: list[str] = Field(default_factory=list, description="Stages with a selection-aware gap, largest first.")
    comparisons: list[StageComparison] = Field(default_factory=list, description="The largest gap's stage against "
                                                                                 "every other ranked stage.")
    next_steps: list[str] = Field(default_factory=list, description="When the verdict cannot tell: per stage, what "
                                                                    "data would let it (also the verdict's last part).")
    seed: int
    ci_level: float = 0.95
    min_users_for_ci: int = MIN_USERS_FOR_CI
    estimand: Weight = Field(default="items", description="What the judges' scores, the ceilings, the gaps and "
                                                          "their differences weigh equally (``diagnose --weight``): "
                                                          "'items' or 'users'; every row says it too.")

    def stage(self, name: str) -> StageDiagnosis:
        """Return the diagnosis of one stage by name ('extraction', 'relevance', 'response')."""
        return next(s for s in self.stages if s.stage == name)

    def to_json_dict(self) -> dict[str, Any]:
        """Return JSON-safe data (NaN becomes null)."""
        return json_safe_dict(self.model_dump())




def finite(x: float | None) -> bool:
    """A figure that is there: not None and not NaN."""
    return x is not None and not math.isnan(x)
