"""Numbers and intervals as the terminal reports print them: the one formatter beside ``agreement.ci_text``.

A report line with a users count says why it has no CI through :func:`personagap.analysis.agreement.ci_text`;
table cells, where the users column sits beside the figure, use the short :func:`interval`.
"""

from __future__ import annotations

import math

from personagap.analysis.agreement import MIN_USERS_FOR_CI

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


def interval(ci: list[float] | None, n_users: int | None = None, *, missing: str = NOT_AVAILABLE) -> str:
    """A CI as a table cell: ``[lo, hi]``; empty without one; ``(too few users)`` below the CI rule's minimum.

    Args:
        ci: The stored ``[lo, hi]`` pair, or None.
        n_users: The users behind it, when the row keeps them (the one CI rule: no CI below
            :data:`~personagap.analysis.agreement.MIN_USERS_FOR_CI` users).
        missing: The text of an absent bound.
    """
    if ci is None:
        return ""
    if n_users is not None and n_users < MIN_USERS_FOR_CI:
        return "(too few users)"
    return f"[{number(ci[0], 2, missing=missing)}, {number(ci[1], 2, missing=missing)}]"


__all__ = ["NOT_AVAILABLE", "NOT_AVAILABLE_PADDED", "interval", "number"]
