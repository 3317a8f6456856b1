"""The three pipeline stages PersonaGap diagnoses, and what each compares."""

from personagap.stages.relevance import relevance_report

__all__ = ["relevance_report"]
