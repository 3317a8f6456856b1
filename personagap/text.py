"""Numbers as the terminal reports print them (intervals: :func:`personagap.analysis.ci_rule.ci_cell`).

This module sits in the bottom layer and knows no rule; a CI's cell applies the minimum-users rule, so it
lives beside the rule in :mod:`personagap.analysis.ci_rule`.
"""

from __future__ import annotations

import math

NOT_AVAILABLE = "n/a"
NOT_AVAILABLE_PADDED = "  n/a"
"""An absent figure in a right-aligned table column: as wide as ``0.000``."""


def number(v: float | None, digits: int = 3, *, missing: str = NOT_AVAILABLE) -> str:
    """A figure with ``digits`` decimals, or ``missing`` when there is none (None or NaN).

    Args:
        v: The figure.
        digits: Decimals shown.
        missing: The text of an absent figure (right-aligned tables pass a padded one).
    """
    return missing if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


__all__ = ["NOT_AVAILABLE", "NOT_AVAILABLE_PADDED", "number"]
