"""Pure analysis functions over stored labels: no I/O, no LLM calls.

Two-rater agreement lives in :mod:`personagap.analysis.agreement` (``agreement(...)``); every printed interval is
the one CI rule, :func:`~personagap.analysis.ci_rule.cluster_estimate` (a jackknife-t over users).

The names below are loaded on first use (module ``__getattr__``): importing a submodule such as
:mod:`personagap.analysis.comparable` (which the store imports) must not load scipy.stats and krippendorff
through :mod:`~personagap.analysis.agreement`, or every CLI start-up, ``--help`` included, pays for them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_SOURCE = {
    **dict.fromkeys(("METRICS", "Estimate", "cluster_estimate", "fleiss_kappa", "fleiss_kappa_ci", "get_metric",
                     "krippendorff_alpha", "krippendorff_alpha_ci", "register_metric"), "agreement"),
    **dict.fromkeys(("GroupAgreement", "PairwiseResult", "pairwise_agreement"), "pairwise"),
}
"""Public name -> the submodule that defines it."""

__all__ = [
    "METRICS", "Estimate", "GroupAgreement", "PairwiseResult", "cluster_estimate", "fleiss_kappa", "fleiss_kappa_ci",
    "get_metric", "krippendorff_alpha", "krippendorff_alpha_ci", "pairwise_agreement", "register_metric",
]


def __getattr__(name: str) -> Any:
    """Load a public name's submodule on first access (PEP 562).

    Raises:
        AttributeError: ``name`` is neither a public name nor a submodule.
    """
    if name not in _SOURCE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_SOURCE[name]}"), name)
    globals()[name] = value  # cached: later accesses skip this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
