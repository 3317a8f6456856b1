"""The one headline agreement figure per scale: what every card, ``diagnose``, the reports and ``plan`` lead with.

ordinal -> quadratic-weighted kappa; nominal and pairwise -> Cohen's kappa. A judge's figure against the humans, the
human ceiling and the gap between them are all this figure of the dataset's scale, so a reader never sees an
unweighted kappa beside a weighted ceiling. The rule is defined here only; callers ask it (:func:`headline_metric`,
:func:`headline_name`) instead of testing ``scale == "ordinal"`` themselves.
"""

from __future__ import annotations

from typing import Literal

from personagap.records import DatasetScale, ScaleKind

HeadlineMetric = Literal["kappa", "weighted_kappa"]
"""The registered metric names (:func:`personagap.analysis.agreement.get_metric`) a headline can be."""

HEADLINE: dict[str, HeadlineMetric] = {"ordinal": "weighted_kappa", "nominal": "kappa", "pairwise": "kappa"}
"""Scale kind -> its headline figure."""

NAMES: dict[str, str] = {"kappa": "kappa", "weighted_kappa": "quadratic-weighted kappa"}
"""Headline metric -> how the text names it."""


def headline_metric(scale: DatasetScale | ScaleKind | str | None) -> HeadlineMetric:
    """The headline figure of ``scale`` (a scale, its kind, or None: nominal)."""
    kind = scale.kind if isinstance(scale, DatasetScale) else scale
    return HEADLINE.get(kind or "nominal", "kappa")


def headline_name(metric: str) -> str:
    """How the text names a headline metric ('kappa', 'quadratic-weighted kappa')."""
    return NAMES[metric]
