"""The one CI rule written out independently of ``analysis/ci_rule.py``, for tests that recompute an interval.

Plain numpy and scipy: the figure's leave-one-user-out values on the unbounded scale of its range (logit for
``(0, 1)``, Fisher's z for ``(-1, 1)``, log for ``(0, inf)``, ``-log(1 - x)`` for ``(-inf, 1)``), the jackknife SE,
a t quantile on Satterthwaite's degrees of freedom ``(sum d^2)^2 / sum d^4`` (at most users - 1), mapped back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats


def _scale(bounds: tuple[float, float] | None) -> tuple[object, object]:
    if bounds == (0.0, 1.0):
        return (lambda x: math.log(x / (1 - x))), (lambda y: 1 / (1 + math.exp(-y)))
    if bounds == (-1.0, 1.0):
        return math.atanh, math.tanh
    if bounds == (0.0, math.inf):
        return math.log, math.exp
    if bounds == (-math.inf, 1.0):
        return (lambda x: -math.log(1 - x)), (lambda y: 1 - math.exp(-y))
    return (lambda x: x), (lambda y: y)


def rule_interval(point: float, leave: Sequence[float], bounds: tuple[float, float] | None = None,
                  level: float = 0.95) -> tuple[float, float]:
    """The interval the rule gives a figure ``point`` whose leave-one-user-out values are ``leave``."""
    forward, back = _scale(bounds)
    z = [forward(x) for x in leave]  # type: ignore[operator]
    u = len(z)
    mean = sum(z) / u
    squares = [(x - mean) ** 2 for x in z]
    se = math.sqrt((u - 1) / u * sum(squares))
    df = min(u - 1, sum(squares) ** 2 / sum(q * q for q in squares))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    centre = forward(point)  # type: ignore[operator]
    lo, hi = back(centre - half), back(centre + half)  # type: ignore[operator]
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return float(lo), float(hi)


def rule_interval_array(point: float, leave: np.ndarray, bounds: tuple[float, float] | None = None,
                        level: float = 0.95) -> tuple[float, float]:
    """:func:`rule_interval` of a numpy array of leave-one-out values."""
    return rule_interval(point, [float(x) for x in leave], bounds, level)
