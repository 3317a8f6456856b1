"""Stage 3's report records: what :func:`personagap.stages.response.report_response` returns, and its vocabulary."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from personagap.analysis.agreement import MIN_USERS_FOR_CI, json_safe_dict
from personagap.analysis.comparable import MAJORITY_RULE
from personagap.analysis.origins import OriginComparison, OriginField
from personagap.analysis.panel import PanelFields
from personagap.analysis.weighting import ItemEstimand, Weight, WeightFields

# The vocabulary the store's counts are keyed by, re-exported where the report's readers have always found it.
from personagap.store.response_counts import GVP_KIND as GVP_KIND
from personagap.store.response_counts import NO_PROFILE as NO_PROFILE
from personagap.store.response_counts import REVERSED as REVERSED
from personagap.vocabulary import SINGLE_KINDS as SINGLE_KINDS

USR_DATASET = "usr-personachat"


def condition_name(condition: str, *, quoted: bool = False) -> str:
    """A condition as the report prints it: the default (empty) condition named, never printed as nothing.

    Args:
        condition: A stored ``condition``.
        quoted: Put any other name in single quotes (in a sentence, where a name may hold spaces).

    Returns:
        ``(default condition)`` for ``''``, else the name (quoted if asked).
    """
    if not condition:
        return "(default condition)"
    return f"'{condition}'" if quoted else condition






class BaselineFlag(BaseModel):
    """A trivial baseline the judge does not beat on its own items (issue 32): within its accuracy's CI, or above."""

    baseline: str = Field(description="The baseline's key, as in ``baselines`` (e.g. 'always-shorter').")
    accuracy: float = Field(description="The baseline's accuracy on the judge's items.")
    relation: Literal["within", "above", "no CI"] = Field(
        description="'within': inside the judge's (item-weighted) accuracy CI; 'above': above its upper end; "
                    "'no CI': the judge's accuracy has no interval and the baseline is at or above it.")
    note: str = Field(description="The line the text report prints.")


class GroupAccuracy(BaseModel):
    """A judge's accuracy on one split or tier."""

    n: int
    accuracy: float


class JudgeResult(PanelFields, WeightFields, OriginField):
    """One judge (rater + condition) on one dataset, compared with the human label."""

    judge: str = Field(description="Rater, with its condition in brackets when it has one.")
    rater: str
    condition: str
    dataset: str
    rater_kind: str
    reference: str = Field(description="What the judge is compared with.")
    n: int = Field(description="Items both the judge (parsed) and the reference labelled.")
    n_users: int
    accuracy: float
    accuracy_ci: list[float]
    kappa: float
    kappa_ci: list[float]
    failures: int = Field(description="Answers that could not be parsed (never counted as verdicts).")
    failure_reasons: dict[str, int]
    accuracy_failures_as_wrong: float | None = Field(
        default=None, description="Accuracy counting failures on human-labelled items as wrong (as papers often do).")
    first_position_rate: float | None = Field(
        default=None, description="Among A/B verdicts, the share choosing the answer shown first (0.5 = no bias).")
    first_position_ci: list[float] | None = None
    longer_rate: float | None = Field(
        default=None, description="Among A/B verdicts on unequal lengths, the share choosing the longer answer.")
    longer_ci: list[float] | None = None
    tie_rate: float | None = None
    human_tie_rate: float | None = None
    accuracy_without_human_ties: float | None = None
    always_a_accuracy: float | None = Field(default=None, description="Baseline 'always A' on the same items.")
    always_longer_accuracy: float | None = Field(default=None,
                                                 description="Baseline 'always longer' on the same items.")
    baselines: dict[str, float] = Field(
        default_factory=dict, description="Pairwise: every trivial baseline (always-A, always-B, always-longer, "
                                          "always-shorter, always-tie where the scale has ties) -> its accuracy "
                                          "on the same items.")
    baseline_flags: list[BaselineFlag] = Field(
        default_factory=list, description="Baselines the judge does not beat: within (or above) its item-weighted "
                                          "accuracy CI.")
    swap_consistency: float | None = Field(default=None, description="Same verdict in both orders (needs +reversed).")
    swap_pairs: int = 0
    undefined_resamples: int = Field(default=0, description="Users whose leave-one-out kappa was undefined.")
    by_group: dict[str, GroupAccuracy] = Field(default_factory=dict, description="'split=...'/'tier=...' -> accuracy.")


class HumanBias(ItemEstimand, OriginField):
    """Position and length preferences of the human labels of one dataset."""

    dataset: str
    rater: str
    n: int
    n_users: int = 0
    first_position_rate: float | None = Field(description="None where the A/B order is not what the human saw.")
    first_position_ci: list[float] | None
    longer_rate: float
    longer_ci: list[float]
    tie_rate: float
    baselines: dict[str, float] = Field(description="Baseline -> accuracy against these human labels.")


class ProfileGap(ItemEstimand, OriginField):
    """One judge's accuracy with vs without the profile, on the items judged both ways."""

    rater: str
    dataset: str
    with_condition: str
    without_condition: str
    n: int = Field(description="Items both conditions judged (parsed) that have a human label: the only ones a "
                               "paired gap can use.")
    n_with: int = Field(default=0, description="Human-labelled items judged with the profile.")
    n_without: int = Field(default=0, description="Human-labelled items judged without the profile.")
    n_users: int = 0
    accuracy_with: float
    accuracy_without: float
    gap: float
    gap_ci: list[float]


class GenericVsPersonalized(ItemEstimand, OriginField):
    """How often a rater judged the personalised answer no better than the generic one."""

    rater: str
    condition: str
    dataset: str
    rater_kind: str
    n: int
    n_users: int = 0
    failures: int
    no_better_rate: float
    no_better_ci: list[float]
    personalized_preferred_rate: float


class RaterVsJudge(BaseModel):
    """A judge's agreement with one human rater (or the rater majority)."""

    estimand: Weight = Field(default="items", description="What the figures estimate: 'items' (pooled) or 'users' "
                                                          "(each user's table as proportions), as --weight chose.")

    judge: str
    rater: str
    n: int
    accuracy: float
    kappa: float
    kappa_ci: list[float]
    weighted_kappa: float | None = Field(default=None, description="Quadratic-weighted kappa; ordinal scales only.")
    weighted_kappa_ci: list[float] | None = None


class RatedAspect(ItemEstimand):
    """Another question the same raters answered about the same responses (a label condition, e.g. USR's Overall).

    Aspects are stored at import as data (meta ``aspects:response:<dataset>``: condition -> question, scale,
    categories); the report shows the raters' agreement on each, on its own scale.
    """

    condition: str
    question: str
    scale: str
    categories: list[str]
    n_items: int
    alpha: float = Field(description="Krippendorff's alpha at the aspect's level of measurement.")
    alpha_ci: list[float]


class SingleResponseReport(ItemEstimand, OriginField):
    """One single-response dataset, titled with its question: rater agreement on its scale, judges vs each rater.

    Its agreement among raters pools items (``estimand`` items); its ``judges`` rows follow the report's weighting.
    """

    dataset: str
    question: str = Field(description="What the raters were asked (the dataset's stored record).")
    scale: str = Field(description="nominal or ordinal.")
    categories: list[str] = Field(description="The scale's categories (ordinal: its levels, low to high).")
    n_items: int = Field(description="Items with at least one blind human label.")
    n_users: int = Field(description="Users (clusters: USR's dialogue contexts) of those items.")
    raters: dict[str, int] = Field(description="Rater -> items rated.")
    rater_label_rates: dict[str, dict[str, float]] = Field(description="Rater -> share of each category.")
    alpha: float = Field(description="Krippendorff's alpha among raters, at the scale's level of measurement.")
    alpha_ci: list[float]
    fleiss: float = Field(description="Fleiss' kappa among raters (categories unordered).")
    fleiss_ci: list[float]
    pair_kappa: dict[str, dict[str, float | None]] = Field(description="Cohen's kappa per rater pair.")
    rater_mean_kappa: dict[str, float | None] = Field(description="Per rater, mean kappa with the other raters.")
    reference_rates: dict[str, float] = Field(description="Share of each category in the human reference.")
    aspects: list[RatedAspect] = Field(default_factory=list)
    judges: list[RaterVsJudge]


class UsrReport(ItemEstimand, OriginField):
    """Deprecated: the old USR-shaped view of one yes/no single-response dataset (see ``single_responses``).

    Kept so that consumers of the former ``usr`` key keep working; every figure is copied from that dataset's
    :class:`SingleResponseReport` (``uses_knowledge_*`` = its ``alpha``/``fleiss``; ``overall_alpha`` = its
    ``overall`` aspect, if any).
    """

    dataset: str = USR_DATASET

    n_items: int
    n_contexts: int
    raters: dict[str, int] = Field(description="Rater -> items rated.")
    rater_yes_rate: dict[str, float]
    uses_knowledge_alpha: float
    uses_knowledge_alpha_ci: list[float]
    uses_knowledge_fleiss: float
    uses_knowledge_fleiss_ci: list[float]
    overall_alpha: float = Field(description="Krippendorff's alpha (ordinal) on Overall 1-5.")
    overall_alpha_ci: list[float]
    pair_kappa: dict[str, dict[str, float | None]] = Field(description="Cohen's kappa per rater pair (uses knowledge).")
    rater_mean_kappa: dict[str, float | None] = Field(description="Per rater, mean kappa with the other raters.")
    majority_yes_rate: float
    judges: list[RaterVsJudge]


class ResponseReport(BaseModel):
    """The stage-3 report."""

    judges: list[JudgeResult]
    humans: list[HumanBias]
    profile_gaps: list[ProfileGap]
    generic_vs_personalized: list[GenericVsPersonalized]
    single_responses: list[SingleResponseReport] = Field(
        default_factory=list, description="One section per single-response dataset, titled with its question.")
    usr: UsrReport | None = Field(default=None, description="Deprecated: single_responses' USR (or first yes/no) "
                                                            "section in the former USR-shaped fields.")
    alt_test: list[dict[str, Any]] = Field(default_factory=list, description="Alternative-annotator test per judge "
                                           "and dataset (needs several humans per item: USR, not PRISM).")
    estimates: list[dict[str, Any]] = Field(default_factory=list, description="Corrected human 'uses the persona' "
                                            "rate per judge (yes/no datasets only).")
    origin_comparison: list[OriginComparison] = Field(
        default_factory=list, description="Judges on both synthetic-persona and real-user datasets, side by side.")
    ci_level: float = 0.95
    majority_rule: str = MAJORITY_RULE
    min_users_for_ci: int = MIN_USERS_FOR_CI
    weight: Weight = Field(default="items", description="What the judge rows' table figures weigh equally: "
                           "'items' (the default) or 'users' (--weight users); each row's ``estimand`` says it.")
    baseline_condition: str = Field(default=NO_PROFILE, description="The judge condition without the profile that "
                                    "profile_gaps compares against (--baseline-condition).")
    profile_gap_note: str | None = Field(default=None, description="Why profile_gaps is empty although pairwise "
                                         "judges were read (e.g. the baseline condition is not in the data); null "
                                         "when a comparison was made or there is no pairwise judge.")

    def to_json_dict(self) -> dict[str, Any]:
        """Return the report as JSON-safe data (NaN becomes null)."""
        return json_safe_dict(self.model_dump())
