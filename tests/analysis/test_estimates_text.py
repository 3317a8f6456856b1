"""The corrected-estimates report line says what each estimate is and that its CI is user-clustered (issue 21)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from personagap.analysis.estimates import MIN_LABELLED_USERS, estimate_line
from tests.support.oracles import estimate_rows


def _labels(n_users: int, labelled_users: int) -> pd.DataFrame:
    # Made-up labels: 8 items a user, the judge wrong on one in four; humans label the first users' items.
    rng = np.random.default_rng(0)
    rows = []
    for u in range(n_users):
        for k in range(8):
            truth = bool(rng.random() < 0.3)
            judge = truth if k % 4 else not truth
            item = f"u{u}-{k}"
            rows.append((item, "gpt", "llm", judge, u))
            if u < labelled_users:
                rows.append((item, "hm", "human_majority", truth, u))
    return pd.DataFrame([{"item_id": i, "rater": r, "rater_kind": kind, "condition": "", "label": "yes" if y else "no",
                          "user_id": f"u{u}", "dataset": "d"} for i, r, kind, y, u in rows])


def test_line_names_each_estimate_with_its_interval() -> None:
    [row] = estimate_rows(_labels(MIN_LABELLED_USERS + 5, MIN_LABELLED_USERS), "d")
    line = estimate_line(row)
    for words in ("judge's own rate", "Rogan-Gladen", "PPI++", "human labels only", "user-clustered",
                  f"{MIN_LABELLED_USERS} with human labels"):
        assert words in line, words
    lo, hi = row["ppi_ci"]
    assert f"[{lo:.2f}, {hi:.2f}]" in line and row["ci_note"] is None


def test_line_says_why_an_interval_is_missing() -> None:
    # Enough users for the judge's own rate, too few with human labels for the corrected ones.
    [row] = estimate_rows(_labels(MIN_LABELLED_USERS + 5, MIN_LABELLED_USERS - 1), "d")
    assert row["naive_ci"][0] is not None and row["ppi_ci"] == [None, None] and row["human_only_ci"] == [None, None]
    line = estimate_line(row)
    assert f"{MIN_LABELLED_USERS - 1} users with human labels, {MIN_LABELLED_USERS} needed" in line
    assert "no human-only CI" in line and "no Rogan-Gladen or PPI++ CI" in line
