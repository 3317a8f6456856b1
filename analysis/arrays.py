"""Array types and the one NaN-safe division the analysis modules share."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def safe_div(num: FloatArray, den: FloatArray) -> FloatArray:
    """``num / den`` elementwise, NaN where ``den`` is 0 (an undefined figure, never a warning or inf)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.asarray(num, dtype=float) / np.asarray(den, dtype=float)
    return np.where(np.asarray(den) == 0, np.nan, out)
