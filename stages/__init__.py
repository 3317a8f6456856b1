"""The three pipeline stages PersonaGap diagnoses, and what each compares."""

from __future__ import annotations

from typing import Any

__all__ = ["relevance_report"]


def __getattr__(name: str) -> Any:
    # Lazy (PEP 562): importing one stage's module (``personagap.stages.extraction``) must not import stage 2's
    # report and what it pulls in (scipy.stats, the panel) before the command has even parsed its options.
    if name == "relevance_report":
        from personagap.stages.relevance import relevance_report

        return relevance_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
