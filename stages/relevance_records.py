"""Stage 2's report records: a judge's row, the pilot's agreement among raters, the report, and its figures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from personagap.analysis.agreement import (
    MIN_USERS_FOR_CI,
    Estimate,
    ci_list,
    json_safe_dict,
)
from personagap.analysis.comparable import (
    MAJORITY_RULE,
    YES_NO,
)
from personagap.analysis.origins import OriginComparison, OriginField
from personagap.analysis.panel import (
    PanelFields,
    scale_metrics,
)
from personagap.analysis.weighting import ItemEstimand, Weight, WeightFields
from personagap.records import DatasetScale

REFERENCE = "human_majority"
STAGE = "relevance"
YES_NO_METRICS = ("over_selection", "human_yes_rate", "judge_yes_rate", "precision", "recall", "f1")
"""Stage-2 figures of a yes/no scale ("yes" = selected), on top of the scale's own figures."""
ANCHORED_TITLE = "anchored (annotators saw an LLM label)"


class JudgeAgreement(PanelFields, WeightFields, OriginField):
    """One judge's relevance labels compared with the human majority on the same items."""

    judge: str
    dataset: str
    rater_kind: str
    condition: str = ""
    reference: str = Field(default="blind", description="'blind' or 'anchored' human majority.")
    n: int = Field(description="Items both the judge (parsed) and the human majority labelled.")
    n_users: int
    failures: int = Field(description="Items the judge answered but whose answer could not be parsed.")
    failure_reasons: dict[str, int]
    unmatched: int = Field(description="Items the judge labelled that have no human label.")
    kappa: float
    kappa_ci: list[float]
    undefined_resamples: int = Field(default=0, description="Users whose leave-one-out kappa was undefined.")
    over_selection: float | None = Field(default=None, description="Yes/no scales only (None otherwise).")
    over_selection_ci: list[float] | None = None
    human_yes_rate: float | None = Field(default=None, description="Yes/no scales only.")
    judge_yes_rate: float | None = Field(default=None, description="Yes/no scales only.")
    precision: float | None = Field(default=None, description="Yes/no scales only.")
    precision_ci: list[float] | None = None
    recall: float | None = Field(default=None, description="Yes/no scales only.")
    recall_ci: list[float] | None = None
    f1: float | None = Field(default=None, description="Yes/no scales only.")
    f1_ci: list[float] | None = None
    accuracy: float


class GroupRow(ItemEstimand):
    """Mean pairwise Cohen's kappa within or across rater groups (pooled per pair: item-weighted only)."""

    pair_type: str
    mean_kappa: float
    ci: list[float]
    n_pairs: int
    n_users: int = 0
    undefined_resamples: int = 0


class MultiRaterReport(ItemEstimand, OriginField):
    """Agreement among individual raters on a dataset where several humans labelled the same items.

    Its alpha, Fleiss' kappa and mean pairwise kappa pool items (``estimand`` items); its ``judges`` rows follow
    the report's weighting.
    """

    dataset: str
    protocol: str = Field(default="blind", description="'blind', or the anchored title: never mixed.")
    raters: dict[str, str] = Field(description="Rater -> group ('human', 'llm', 'trained', 'baseline').")
    n_users: int = 0
    groups: list[GroupRow]
    human_alpha: float = Field(description="Krippendorff's alpha among the human annotators, at the scale's level "
                                           "(ordinal on ordinal scales, else nominal).")
    alpha_level: str = "nominal"
    human_alpha_ci: list[float]
    human_fleiss: float = Field(description="Fleiss' kappa on the items rated by the most common number of humans.")
    human_fleiss_ci: list[float]
    fleiss_items: int
    fleiss_raters_per_item: int
    fleiss_users: int = 0
    matrix: dict[str, dict[str, float | None]]
    overlap: dict[str, dict[str, int]]
    judges: list[JudgeAgreement] = Field(description="Each judge against this dataset's human majority.")


class RelevanceReport(BaseModel):
    """The stage-2 report: every judge against humans, then the pilot's rater agreement."""

    judges: list[JudgeAgreement]
    pilot: MultiRaterReport | None = Field(description="Blind labels only.")
    pilot_anchored: MultiRaterReport | None = Field(
        default=None, description="Labels given after seeing an LLM's label: reported apart, never a ceiling.")
    notes: list[str] = Field(default_factory=list)
    alt_test: list[dict[str, Any]] = Field(default_factory=list, description="Alternative-annotator test per judge "
                                           "and dataset (blind humans; the pilot's anchored humans apart).")
    estimates: list[dict[str, Any]] = Field(default_factory=list, description="Corrected human yes-rate per judge.")
    origin_comparison: list[OriginComparison] = Field(
        default_factory=list, description="Judges on both synthetic-persona and real-user datasets, side by side.")
    majority_rule: str = MAJORITY_RULE
    ci_level: float = 0.95
    min_users_for_ci: int = MIN_USERS_FOR_CI
    weight: Weight = Field(default="items", description="What the judge rows' table figures weigh equally: "
                           "'items' (the default) or 'users' (--weight users); each row's ``estimand`` says it.")

    def to_json_dict(self) -> dict[str, Any]:
        """Return the report as JSON-safe data (NaN becomes null)."""
        return json_safe_dict(self.model_dump())



def judge_metrics(scale: DatasetScale) -> tuple[str, ...]:
    """Registered figures of a stage-2 judge row: the scale's, plus selection figures on a yes/no scale."""
    return scale_metrics(scale) + (YES_NO_METRICS if scale.categories == YES_NO else ())


def selection_fields(est: Mapping[str, Estimate]) -> dict[str, Any]:
    """The yes/no figures of a judge row where it has them (:func:`judge_metrics` adds them on a yes/no scale)."""
    out: dict[str, Any] = {}
    for name in YES_NO_METRICS:
        if name in est:
            out[name] = est[name].value
            if name not in ("human_yes_rate", "judge_yes_rate"):
                out[f"{name}_ci"] = ci_list(est[name])
    return out
