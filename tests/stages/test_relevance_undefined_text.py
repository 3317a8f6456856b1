"""The relevance report's undefined-figure text reads as the jackknife means it: users, not resamples."""

from __future__ import annotations

from typing import Any

import pandas as pd

from personagap.analysis.agreement import MIN_USERS_FOR_CI
from personagap.stages.relevance_labels import judge_agreements
from personagap.stages.relevance_text import _judge_table


def _labels(n_users: int) -> pd.DataFrame:
    """Only u0 has a "yes" (human and judge): without u0 every label is "no" and kappa is undefined."""
    rows: list[dict[str, Any]] = []
    for u in range(n_users):
        for k in range(4):
            label = "yes" if u == 0 and k % 2 else "no"
            for rater, kind in (("ann", "human"), ("gpt", "llm")):
                rows.append({"item_id": f"u{u}-{k}", "rater": rater, "rater_kind": kind, "condition": "",
                             "label": label, "user_id": f"u{u}", "dataset": "d", "stage": "relevance",
                             "error": None})
    return pd.DataFrame(rows)


def test_kappa_undefined_without_a_user_is_said_in_users() -> None:
    [row] = judge_agreements(_labels(MIN_USERS_FOR_CI), "d")
    assert row.n_users == MIN_USERS_FOR_CI and row.undefined_resamples == 1
    text = "\n".join(_judge_table([row]))
    assert "kappa undefined without 1 of the users (no CI)" in text
    assert "resamples" not in text
