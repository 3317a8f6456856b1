"""PPI and the other corrected estimates do not depend on the order rows come in (an export -> import round trip).

Floating-point sums depend on their order; the estimates sort by item before summing, so a shuffled copy of
the same labels must give bit-identical rows. Made-up labels written for this test.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.support.oracles import estimate_rows


def _labels(seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(600):
        item, user = f"item-{k:04d}", f"user-{k % 37:02d}"
        truth = rng.random() < 0.3
        judge = truth if rng.random() < 0.8 else not truth
        rows.append({"item_id": item, "rater": "team-llm", "rater_kind": "llm", "condition": "",
                     "label": "yes" if judge else "no", "user_id": user, "dataset": "d"})
        if k % 4 == 0:  # humans label a quarter: PPI has unlabelled items to use
            rows.append({"item_id": item, "rater": "hm", "rater_kind": "human_majority", "condition": "",
                         "label": "yes" if truth else "no", "user_id": user, "dataset": "d"})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("data_seed", [1, 2])
def test_estimates_identical_whatever_the_row_order(data_seed: int) -> None:
    labels = _labels(data_seed)
    first = estimate_rows(labels, "d")
    assert first and first[0]["n_both"] == 150 and first[0]["n_judge"] == 600
    for seed in range(10):
        shuffled = labels.sample(frac=1.0, random_state=seed).reset_index(drop=True)
        # Exact equality (not approx): the round trip must reproduce the report byte for byte.
        assert estimate_rows(shuffled, "d") == first
