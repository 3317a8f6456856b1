"""Reading and driving a Streamlit AppTest page: its text, a button by label, the item on screen."""

from __future__ import annotations

import re

from streamlit.testing.v1 import AppTest


def page_text(at: AppTest) -> str:
    parts = [e.value for kind in ("title", "markdown", "caption", "info", "warning", "error", "success", "subheader")
             for e in getattr(at, kind)]
    parts += [m.label + " " + str(m.value) for m in at.metric]
    return "\n".join(str(p) for p in parts)


def button(at: AppTest, label: str):
    return next(b for b in at.button if b.label == label)


def served_item(at: AppTest) -> str:
    """The id of the item on screen (its caption ends in "item ID")."""
    return next(m.group(1) for c in at.caption if (m := re.search(r"item ([0-9a-f]{8,})$", str(c.value))))
