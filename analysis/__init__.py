"""Pure analysis functions over stored labels: no I/O, no LLM calls.

Two-rater agreement lives in :mod:`personagap.analysis.agreement` (``agreement(...)``).
"""

from personagap.analysis.agreement import (
    METRICS,
    Estimate,
    fleiss_kappa,
    fleiss_kappa_ci,
    get_metric,
    krippendorff_alpha,
    krippendorff_alpha_ci,
    register_metric,
)
from personagap.analysis.pairwise import GroupAgreement, PairwiseResult, pairwise_agreement

__all__ = [
    "METRICS", "Estimate", "GroupAgreement", "PairwiseResult", "fleiss_kappa", "fleiss_kappa_ci",
    "get_metric", "krippendorff_alpha", "krippendorff_alpha_ci", "pairwise_agreement", "register_metric",
]
