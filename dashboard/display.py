"""Values for display: imported text escaped for Markdown, numbers and CIs as text, a dash for what is missing."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

MISSING = "—"


_MD_INLINE = re.compile(r"([\\`*_\[\]<>!~|$])")


_MD_LINE_START = re.compile(r"^(\s*)([#>+\-=])", re.MULTILINE)


_MD_ORDERED = re.compile(r"^(\s*\d+)([.)])", re.MULTILINE)


def md(value: Any) -> str:
    """Imported text made safe for Markdown: its Markdown characters escaped, so it shows as typed.

    ``![](http://host/p.png)`` becomes literal text (nothing is fetched), ``**x**`` stays starred.
    """
    out = _MD_INLINE.sub(r"\\\1", "" if value is None else str(value))
    out = out.replace("://", ":\\/\\/")  # no autolinked URLs either
    out = _MD_LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), out)
    return _MD_ORDERED.sub(lambda m: m.group(1) + "\\" + m.group(2), out)


def missing(v: Any) -> bool:
    """None, NaN, pandas NA: a value that must be shown as a dash, never as ``None``/``nan``."""
    if v is None:
        return True
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def num(v: Any, digits: int = 2) -> str:
    """A number for display (a dash when missing)."""
    return MISSING if missing(v) else f"{float(v):.{digits}f}"


def ci(bounds: list[float] | None, digits: int = 2) -> str:
    """A CI as ``[low, high]``; ``(no CI)`` when there is none (e.g. too few users to resample)."""
    if not bounds or all(missing(b) for b in bounds):
        return "(no CI)"
    return f"[{num(bounds[0], digits)}, {num(bounds[1], digits)}]"


def ci_phrase(bounds: list[float] | None) -> str:
    """``95% CI [low, high]``, or ``no CI (too few users)``."""
    return "no CI (too few users)" if ci(bounds) == "(no CI)" else f"95% CI {ci(bounds)}"


def text(v: Any) -> str:
    """Any cell for display: a dash for missing values."""
    return MISSING if missing(v) else str(v)
