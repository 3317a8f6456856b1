"""Made-up rows on an ordered category set: humans who mostly agree on a hidden truth, judges who follow it less.

Written for PersonaGap's tests, not human judgments; with the project's majority rule recomputed independently.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

TRI = ("yes", "no", "maybe")


def make_rows(categories: tuple[str, ...], humans: list[str], judges: list[str], n_users: int, per_user: int,
          seed: int, item_column: str) -> pd.DataFrame:
    """Humans who mostly agree on a hidden truth and judges who follow it less often (deterministic)."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(n_users):
        for k in range(per_user):
            item, truth = f"u{u}-{k}", int(rng.integers(len(categories)))
            for rater, agree, kind in [(h, 0.75, "human") for h in humans] + [(j, 0.55, "llm") for j in judges]:
                pick = truth if rng.random() < agree else int(np.clip(truth + rng.choice([-1, 1]), 0,
                                                                      len(categories) - 1))
                rows.append({"item_id": item, "user_id": f"user{u}", "rater": rater, "rater_kind": kind,
                             "label": categories[pick], item_column: f"text of {item}"})
    return pd.DataFrame(rows)


def majority_reference(rows: pd.DataFrame) -> dict[str, str]:
    out = {}
    for item, g in rows[rows["rater_kind"] == "human"].groupby("item_id"):
        counts = Counter(g["label"]).most_common()
        if len(counts) == 1 or counts[0][1] > counts[1][1]:
            out[str(item)] = counts[0][0]
    return out


def aligned(rows: pd.DataFrame, rater: str, reference: dict[str, str]) -> tuple[list[str], list[str]]:
    mine = rows[rows["rater"] == rater].set_index("item_id")["label"]
    items = [i for i in mine.index if i in reference]
    return [reference[i] for i in items], [mine[i] for i in items]
