"""Pure analysis functions over stored labels: no I/O, no LLM calls.

Two-rater agreement lives in :mod:`personagap.analysis.agreement` (``agreement(...)``); every printed interval is
the one CI rule, :func:`~personagap.analysis.ci_rule.cluster_estimate` (a jackknife-t over users).
"""

from personagap.analysis.agreement import (
    METRICS,
    Estimate,
    cluster_estimate,
    fleiss_kappa,
    fleiss_kappa_ci,
    get_metric,
    krippendorff_alpha,
    krippendorff_alpha_ci,
    register_metric,
)
from personagap.analysis.pairwise import GroupAgreement, PairwiseResult, pairwise_agreement

__all__ = [
    "METRICS", "Estimate", "GroupAgreement", "PairwiseResult", "cluster_estimate", "fleiss_kappa", "fleiss_kappa_ci",
    "get_metric", "krippendorff_alpha", "krippendorff_alpha_ci", "pairwise_agreement", "register_metric",
]
