"""Defect 5: the corrected estimates and the trained verifier's AUC follow the one CI rule.

The one CI rule: no CI below ``MIN_USERS_FOR_CI`` users (the output says why), resamples where
a figure is undefined counted. Before, ``estimates.human_rate``, ``judge_estimates`` and
``stages.trained._auc_estimate`` called the percentile function directly and printed a 2-user CI.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from personagap.analysis.agreement import MIN_USERS_FOR_CI, ci_text
from personagap.analysis.estimates import MIN_LABELLED_USERS
from personagap.dashboard.render import estimates_table
from personagap.stages.trained_verifier import auc_estimate as _auc_estimate
from tests.support.oracles import estimate_rows

_BOOTSTRAP_CIS = ("naive_ci", "rogan_gladen_ci", "human_only_ci")


def _labels(n_users: int) -> pd.DataFrame:
    """Per user six items (seven for every other user, so users' rates differ): a blind human label and a judge
    label that is wrong on one item in three."""
    rows: list[dict[str, Any]] = []
    for u in range(n_users):
        for k in range(6 + (u % 2 == 0)):
            item, human = f"u{u}-{k}", "yes" if (u + k) % 3 == 0 else "no"
            judge = human if k % 3 else ("no" if human == "yes" else "yes")
            for rater, kind, label in (("ann", "human", human), ("gpt", "llm", judge)):
                rows.append({"item_id": item, "rater": rater, "rater_kind": kind, "condition": "", "label": label,
                             "user_id": f"u{u}", "dataset": "d"})
    return pd.DataFrame(rows)


def _has_ci(ci: list[float | None]) -> bool:
    return all(v is not None and not math.isnan(v) for v in ci)


def test_two_users_get_no_ci_and_are_told_why() -> None:
    [row] = estimate_rows(_labels(2), "d")
    assert row["n_users"] == 2
    assert not any(_has_ci(row[k]) for k in _BOOTSTRAP_CIS)
    assert row["ci_note"] == f"too few users for a CI: 2 users, {MIN_USERS_FOR_CI} needed"
    # The point estimates stay: only the intervals are withheld.
    assert row["human_only"] == pytest.approx(5 / 13)
    shown = estimates_table([row]).iloc[0]
    assert "too few users for a CI" in shown["humans only"] and "[" not in shown["humans only"]
    assert "too few users for a CI" in shown["Rogan–Gladen"] and "[" not in shown["Rogan–Gladen"]


def test_five_users_get_every_ci() -> None:
    # The human-based figures need MIN_LABELLED_USERS users with human labels (issue 21's harness), the others
    # MIN_USERS_FOR_CI users.
    [row] = estimate_rows(_labels(MIN_LABELLED_USERS), "d")
    assert row["n_users"] == MIN_LABELLED_USERS and row["ci_note"] is None
    assert all(_has_ci(row[k]) for k in (*_BOOTSTRAP_CIS, "ppi_ci"))
    lo, hi = row["human_only_ci"]
    assert lo <= row["human_only"] <= hi
    assert set(row["ci_undefined"]) == {"naive", "rogan_gladen", "ppi", "human_only"}
    assert "[" in estimates_table([row]).iloc[0]["humans only"]


def test_undefined_resamples_are_counted() -> None:
    # Only u0's humans say "yes": leaving u0 out leaves sensitivity, hence Rogan-Gladen, undefined. Enough users
    # for a CI, or nothing is computed to be undefined.
    labels = _labels(MIN_USERS_FOR_CI)
    no_yes = (labels["user_id"] != "u0") & (labels["rater"] == "ann")
    labels.loc[no_yes, "label"] = "no"
    [row] = estimate_rows(labels, "d")
    assert row["ci_undefined"]["rogan_gladen"] > 0 and row["ci_undefined"]["naive"] == 0


def test_auc_has_no_ci_below_the_minimum_users() -> None:
    rng = np.random.default_rng(0)
    y = np.tile([0, 1, 1, 0, 1, 0], 4)
    p = y * 0.4 + rng.random(y.size) * 0.7
    for n_users in (2, MIN_USERS_FOR_CI + 1):
        users = np.array([f"u{i % n_users}" for i in range(y.size)])
        est = _auc_estimate(y, p, users)
        assert est.value == pytest.approx(roc_auc_score(y, p)) and est.n_clusters == n_users
        assert (n_users >= MIN_USERS_FOR_CI) == (not math.isnan(est.ci[0]))
    assert ci_text(_auc_estimate(y, p, np.array([f"u{i % 2}" for i in range(y.size)]))) == \
        "(too few users for a CI: 2 users)"
