"""A judge label's confidence: how it is stored in ``labels.meta`` and read back (one rule for every source).

Every source of a confidence -- a release (PRISM's ``certainty``), a bring-your-own ``confidence`` column, an LLM
judge's verbalised confidence or its answer tokens' probability, a trained judge's predicted probability -- writes
the same keys into the label's ``meta`` JSON (no schema change):

* ``confidence``: a finite number on the judge's own scale;
* ``confidence_scale``: that scale, ``"LO-HI"`` (e.g. ``"1-100"``, ``"1-5"``, ``"0-100"``) or ``"probability"``
  (0-1), or :data:`UNSTATED` when the source gives a number but not its scale;
* ``confidence_error``: instead of ``confidence`` when a stated confidence does not parse or lies outside its
  scale. The label itself still stands (it parsed on its own): a confidence is an extra field, and its failure is
  recorded as that field's failure, never turned into a label failure or into a made-up value.

Calibration needs a probability: :func:`as_probability` maps a scale linearly onto [0, 1] (its low end to 0, its
high end to 1), the one mapping every calibration figure uses.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import numpy.typing as npt

CONFIDENCE = "confidence"
SCALE = "confidence_scale"
ERROR = "confidence_error"
PROBABILITY = "probability"
"""The scale of a predicted probability (0-1)."""
UNSTATED = "unstated"
"""A numeric confidence whose source does not say its scale: ordered (coverage curves), but no probability."""
PROBABILITY_DIGITS = 4
"""Probabilities (token log-probabilities, trained judges) are stored rounded to this many decimals, so the store's
confidence aggregates grow with distinct values (at most 10^4 + 1), never with labels."""

_RANGE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*-\s*(-?\d+(?:\.\d+)?)\s*$")


def scale_bounds(scale: str) -> tuple[float, float]:
    """The low and high ends of a confidence scale.

    Args:
        scale: ``"LO-HI"`` (e.g. ``"1-100"``) or ``"probability"``.

    Returns:
        ``(lo, hi)`` with ``lo < hi``.

    Raises:
        ValueError: The scale is not one of these (including :data:`UNSTATED`).
    """
    if scale == PROBABILITY:
        return 0.0, 1.0
    m = _RANGE.match(scale)
    if m is None or float(m[1]) >= float(m[2]):
        raise ValueError(f"confidence scale {scale!r} is not 'LO-HI' (e.g. '1-100') or 'probability'")
    return float(m[1]), float(m[2])


def read_confidence(value: object, scale: str) -> tuple[float | None, str | None]:
    """Parse one stated confidence on its scale. Pure.

    Args:
        value: A number or numeric text (``"60"``, ``0.83``).
        scale: Its scale (:func:`scale_bounds`), or :data:`UNSTATED` (any finite number is kept).

    Returns:
        ``(confidence, None)``, or ``(None, error)`` when it is not a finite number or lies outside the scale.
    """
    if isinstance(value, bool):
        return None, f"unparseable: confidence {value!r} is not a number"
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip().rstrip("%").strip())
        except ValueError:
            return None, f"unparseable: confidence {value[:20]!r} is not a number"
    else:
        return None, f"unparseable: confidence {str(value)[:20]!r} is not a number"
    if not math.isfinite(number):
        return None, f"unparseable: confidence {value!r} is not a finite number"
    if scale != UNSTATED:
        lo, hi = scale_bounds(scale)
        if not lo <= number <= hi:
            return None, f"invalid: confidence {number:g} is outside its scale {scale}"
    return number, None


def confidence_meta(value: object, scale: str) -> dict[str, Any]:
    """The ``meta`` entries of one label's confidence: ``confidence`` + ``confidence_scale``, or the field's error.

    Args:
        value: The stated confidence (:func:`read_confidence`).
        scale: Its scale.
    """
    number, error = read_confidence(value, scale)
    if error is not None:
        return {SCALE: scale, ERROR: error}
    return {CONFIDENCE: number, SCALE: scale}


def probability_meta(p: float) -> dict[str, Any]:
    """The ``meta`` entries of a predicted probability (rounded to :data:`PROBABILITY_DIGITS` decimals)."""
    return confidence_meta(round(float(p), PROBABILITY_DIGITS), PROBABILITY)


def as_probability(values: npt.ArrayLike, scale: str) -> npt.NDArray[np.float64]:
    """Confidences on ``scale`` mapped linearly onto [0, 1]: the scale's low end is 0, its high end 1.

    Raises:
        ValueError: The scale has no stated ends (:func:`scale_bounds`).
    """
    lo, hi = scale_bounds(scale)
    return (np.asarray(values, dtype=float) - lo) / (hi - lo)
