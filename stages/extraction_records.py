"""Stage 1's report records: what :func:`personagap.stages.extraction.extraction_report` returns, and its vocabulary."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from personagap.analysis.agreement import MIN_USERS_FOR_CI, json_safe_dict
from personagap.analysis.comparable import JUDGE_KINDS, MAJORITY_RULE
from personagap.analysis.extraction import OFFLINE_THRESHOLD
from personagap.analysis.origins import OriginComparison, OriginField
from personagap.analysis.panel import PanelFields
from personagap.analysis.weighting import ItemEstimand, Weight, WeightFields
from personagap.vocabulary import ATTRIBUTE_KINDS as ATTRIBUTE_KINDS

if TYPE_CHECKING:
    pass


VERIFIER_KINDS = JUDGE_KINDS


PILOT_EXTRACTOR = "(not released)"


CALIBRATION_NOTE = ("offline matcher: containment of the gold value's content words in the attribute >= "
                    f"{OFFLINE_THRESHOLD:.3f}, chosen on the LAPS train split (Youden J; train TPR 0.851, FPR 0.053)")


class VerdictRow(ItemEstimand, OriginField):
    """Verdict rates of one rater group on one extractor's attributes."""

    dataset: str
    extractor: str
    rater: str = Field(description="'humans' (all human verdicts pooled), an annotator, or a verifier judge.")
    rater_kind: str
    n: int = Field(description="Parsed verdicts.")
    n_users: int
    failures: int = Field(default=0, description="Verifier answers that could not be parsed.")
    ok: float
    ok_ci: list[float]
    bad: float = Field(description="Over-generalisation rate: share marked unsupported or broader than the evidence.")
    bad_ci: list[float]
    unsure: float
    unsure_ci: list[float]


class HumanAgreement(ItemEstimand, OriginField):
    """Agreement among human verdicts on one dataset's attributes (three nominal categories)."""

    dataset: str
    annotators: int
    items: int = Field(description="Attributes with two or more human verdicts.")
    users: int
    alpha: float
    alpha_ci: list[float]
    fleiss: float
    fleiss_ci: list[float]
    fleiss_items: int
    fleiss_raters_per_item: int
    fleiss_users: int = Field(description="Users those items come from (one user: the CI cannot vary).")
    mean_pairwise_kappa: float
    mean_pairwise_kappa_ci: list[float]
    rater_pairs: int
    per_annotator: list[VerdictRow]


class VerifierAgreement(PanelFields, WeightFields, OriginField):
    """A verifier's verdicts against the per-item human majority (ties dropped)."""

    dataset: str
    verifier: str
    n: int
    n_users: int = 0
    kappa: float
    kappa_ci: list[float]
    undefined_resamples: int = Field(default=0, description="Users whose leave-one-out kappa was undefined.")
    accuracy: float
    accuracy_ci: list[float]


class ExtractorRun(OriginField):
    """What an extractor produced on a dataset."""

    dataset: str
    extractor: str
    units_attempted: int
    units_complete: int = Field(description="Histories whose every chunk parsed (only these are scored).")
    chunk_failures: int
    failure_reasons: dict[str, int]
    attributes: int


class MatchRow(ItemEstimand, OriginField):
    """Extraction precision/recall/F1 against gold on one split and category."""

    dataset: str
    extractor: str
    matcher: str
    split: str
    category: str
    units: int
    users: int
    attributes: int
    gold: int
    precision: float
    precision_ci: list[float]
    recall: float
    recall_ci: list[float]
    f1: float
    f1_ci: list[float]


class GoldSummary(OriginField):
    """Gold preferences available on one dataset split."""

    dataset: str
    split: str
    users: int
    units: int
    sessions: int
    sessions_without_gold: int
    gold: int
    categories: int


class ExtractionReport(BaseModel):
    """The stage-1 report."""

    human_agreement: list[HumanAgreement]
    acceptance: list[VerdictRow]
    verifiers: list[VerifierAgreement]
    extractors: list[ExtractorRun]
    gold: list[GoldSummary]
    matching: list[MatchRow]
    threshold: float = OFFLINE_THRESHOLD
    matcher_note: str = CALIBRATION_NOTE
    ci_level: float = 0.95
    majority_rule: str = MAJORITY_RULE
    min_users_for_ci: int = MIN_USERS_FOR_CI
    alt_test: list[dict[str, Any]] = Field(default_factory=list, description="Alternative-annotator test per "
                                           "verifier and dataset (blind human verdicts).")
    estimates: list[dict[str, Any]] = Field(default_factory=list, description="Corrected human 'ok' (acceptance) "
                                            "rate per verifier.")
    origin_comparison: list[OriginComparison] = Field(
        default_factory=list, description="Verifiers on both synthetic-persona and real-user datasets, side by side.")
    weight: Weight = Field(default="items", description="What the verifier rows' table figures weigh equally: "
                           "'items' (the default) or 'users' (--weight users); each row's ``estimand`` says it.")

    def to_json_dict(self) -> dict[str, Any]:
        """Return the report as JSON-safe data (NaN becomes null)."""
        return json_safe_dict(self.model_dump())
