"""A jury and its own jurors are left out of the group means (issue 32 item 20), by hand on four items."""

from __future__ import annotations

import pandas as pd
import pytest

from personagap.analysis.pairwise import pairwise_agreement, shared_juror_pairs

# Four items, one user each. Hand-computed Cohen's kappa (po: observed agreement, pe: chance agreement):
#   j1-j2: po 2/4, pe 1/2 -> 0;  j1-j3: identical -> 1;  j2-j3: as j1-j2 -> 0
#   J (3 ones, 1 zero) with j1, j2 or j3: po 3/4, pe 1/2*3/4 + 1/2*1/4 = 1/2 -> 1/2
LABELS = {"j1": [1, 0, 1, 0], "j2": [1, 0, 0, 1], "j3": [1, 0, 1, 0], "J": [1, 0, 1, 1]}


def _frame() -> pd.DataFrame:
    return pd.DataFrame([{"item_id": f"i{k}", "rater": r, "label": v, "cluster": f"u{k}"}
                         for r, values in LABELS.items() for k, v in enumerate(values)])


def test_shared_juror_pairs() -> None:
    got = shared_juror_pairs({"J": ["j1", "j2"], "K": ["j2", "j3"], "L": ["j4", "j5"]})
    assert got == {("J", "j1"), ("J", "j2"), ("K", "j2"), ("K", "j3"), ("J", "K"), ("L", "j4"), ("L", "j5")}


def test_group_mean_leaves_the_jury_and_its_jurors_out() -> None:
    groups = dict.fromkeys(LABELS, "judge")
    everything = pairwise_agreement(_frame(), groups, min_overlap=1)
    assert everything.groups["judge–judge"].mean_kappa.value == pytest.approx((0 + 1 + 0 + 0.5 * 3) / 6)
    # J is a jury of j1 and j2: J-j1 and J-j2 leave the mean; J-j3 (not its juror) stays.
    result = pairwise_agreement(_frame(), groups, min_overlap=1, exclude=shared_juror_pairs({"J": ["j1", "j2"]}))
    group = result.groups["judge–judge"]
    assert group.mean_kappa.value == pytest.approx((0 + 1 + 0 + 0.5) / 4)  # 0.375
    assert group.n_pairs == 4
    assert result.excluded == [("J", "j1"), ("J", "j2")]
    # The matrix keeps the pairs' figures (the page decides how to show them).
    assert result.matrix.loc["J", "j1"] == pytest.approx(0.5)
