"""Pure analysis functions over stored labels: no I/O, no LLM calls."""

from personagap.analysis.agreement import (
    METRICS,
    Estimate,
    agreement,
    fleiss_kappa,
    fleiss_kappa_ci,
    get_metric,
    krippendorff_alpha,
    krippendorff_alpha_ci,
    register_metric,
)
from personagap.analysis.pairwise import GroupAgreement, PairwiseResult, pairwise_agreement

__all__ = [
    "METRICS", "Estimate", "GroupAgreement", "PairwiseResult", "agreement", "fleiss_kappa", "fleiss_kappa_ci",
    "get_metric", "krippendorff_alpha", "krippendorff_alpha_ci", "pairwise_agreement", "register_metric",
]
