"""Stage-3 metrics on tiny inputs with hand-worked values, and against sklearn / statsmodels / krippendorff."""

from __future__ import annotations

import math

import krippendorff
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import accuracy_score, cohen_kappa_score
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

from personagap.analysis.comparable import majority_label
from personagap.analysis.response import (
    accuracy_gap,
    chose_first,
    chose_longer,
    clustered_rate,
    first_position_rate,
    judge_vs_human,
    longer_rate,
    rater_agreement,
)


def test_chose_first_undoes_the_swap() -> None:
    # Canonical A with no swap was shown first; canonical A with a swap was shown second.
    decisive, first = chose_first(["A", "A", "B", "B", "tie"], [False, True, False, True, False])
    assert decisive.tolist() == [True, True, True, True, False]
    assert first[decisive].tolist() == [True, False, False, True]


def test_first_position_rate_hand_worked() -> None:
    # 3 decisive verdicts shown first out of 4 decisive (the tie is not counted): 0.75.
    est = first_position_rate(["A", "A", "B", "B", "tie"], [False, False, True, False, False], [1, 1, 2, 2, 3])
    assert est.value == pytest.approx(0.75)
    # Two users (the tie of user 3 is not counted) are too few for a CI: none is given, and the estimate says so.
    assert est.too_few_users and est.n_clusters == 2 and all(math.isnan(c) for c in est.ci)
    many = first_position_rate(["A", "A", "B", "B", "tie"] * 3, [False, False, True, False, False] * 3,
                               list(range(15)))  # 12 decisive users: a CI
    assert many.value == pytest.approx(0.75) and not many.too_few_users
    assert 0.0 <= many.ci[0] <= many.value <= many.ci[1] <= 1.0


def test_longer_rate_skips_ties_and_equal_lengths() -> None:
    labels = ["A", "B", "A", "tie", "B"]
    len_a = [10, 10, 5, 1, 7]
    len_b = [5, 20, 5, 9, 3]
    counted, longer = chose_longer(labels, len_a, len_b)
    # Item 2 has equal lengths, item 3 is a tie: counted are 0, 1, 4; longer chosen in 0 and 1, not in 4.
    assert counted.tolist() == [True, True, False, False, True]
    assert longer[counted].tolist() == [True, True, False]
    assert longer_rate(labels, len_a, len_b, [0, 1, 2, 3, 4]).value == pytest.approx(2 / 3)


def test_clustered_rate_empty_is_nan_and_constant_has_no_zero_width_ci() -> None:
    assert math.isnan(clustered_rate([], []).value)
    est = clustered_rate([True] * 10, [f"u{i}" for i in range(10)])
    # A rate of 1 with or without any user: the jackknife would print [1, 1]; the rule prints none, and says why.
    assert est.value == 1.0 and math.isnan(est.ci[0]) and math.isnan(est.ci[1]) and est.n_undefined == 0
    assert "edge of its range" in est.reason


def test_clustered_rate_counts_whole_clusters() -> None:
    # Two clusters: u (all hits, 3 items) and v (no hits, 1 item).
    est = clustered_rate([True, True, True, False], ["u", "u", "u", "v"])
    assert est.value == pytest.approx(0.75)
    assert est.n_clusters == 2 and est.too_few_users and math.isnan(est.ci[0])  # 2 users: no CI


def test_judge_vs_human_matches_sklearn_three_classes() -> None:
    rng = np.random.default_rng(3)
    human = rng.choice(["A", "B", "tie"], size=200)
    judge = np.where(rng.random(200) < 0.6, human, rng.choice(["A", "B", "tie"], size=200))
    est = judge_vs_human(human, judge, rng.integers(0, 30, size=200))
    assert est["accuracy"].value == pytest.approx(accuracy_score(human, judge))
    assert est["kappa"].value == pytest.approx(cohen_kappa_score(human, judge))


def test_judge_vs_human_total_disagreement() -> None:
    est = judge_vs_human(["A", "B", "A", "B"], ["B", "A", "B", "A"], [1, 2, 3, 4])
    assert est["accuracy"].value == 0.0
    assert est["kappa"].value == -1.0


def test_accuracy_gap_hand_worked() -> None:
    human = ["A", "B"] * 10
    with_profile = ["A", "B"] * 10       # all right
    without_profile = ["B", "B"] * 10    # half right
    clusters = np.repeat(np.arange(10), 2)
    acc_with, acc_without, gap = accuracy_gap(human, with_profile, without_profile, clusters)
    assert (acc_with, acc_without) == (1.0, 0.5)
    assert gap.value == pytest.approx(0.5)
    # Every cluster gives a gap of 0.5: so does the figure without any one of them; a CI of no width would claim a
    # certainty ten users cannot give, so there is none, with the reason.
    assert math.isnan(gap.ci[0]) and gap.n_clusters == 10 and "does not change" in gap.reason


def test_rater_agreement_matches_statsmodels_and_krippendorff() -> None:
    rng = np.random.default_rng(5)
    truth = rng.integers(0, 2, size=60)
    data = np.stack([np.where(rng.random(60) < 0.85, truth, 1 - truth) for _ in range(3)], axis=1).astype(float)
    wide = pd.DataFrame(data, columns=["r1", "r2", "r3"])
    out = rater_agreement(wide, [0.0, 1.0], np.arange(60) // 5, "nominal")
    counts = np.column_stack([(data == v).sum(axis=1) for v in (0.0, 1.0)])
    assert out["fleiss"].value == pytest.approx(sm_fleiss(counts))
    assert out["alpha"].value == pytest.approx(krippendorff.alpha(reliability_data=data.T,
                                                                   level_of_measurement="nominal"))


def test_rater_agreement_with_missing_ratings_uses_modal_count_for_fleiss() -> None:
    # 4 raters, each item rated by 3 (like USR): NaN where a rater did not rate.
    data = np.array([[1, 1, 1, np.nan], [0, 0, np.nan, 0], [1, np.nan, 0, 1], [np.nan, 0, 0, 0]], dtype=float)
    out = rater_agreement(pd.DataFrame(data), [0.0, 1.0], [0, 1, 2, 3], "nominal")
    counts = np.array([[0, 3], [3, 0], [1, 2], [3, 0]])
    assert out["fleiss"].value == pytest.approx(sm_fleiss(counts))
    assert out["alpha"].value == pytest.approx(krippendorff.alpha(reliability_data=data.T,
                                                                   level_of_measurement="nominal"))


def test_majority_is_the_one_rule_unique_most_frequent_ties_undecided() -> None:
    wide = pd.DataFrame({"a": ["yes", "no", "yes", "A", "A"], "b": ["yes", "yes", None, "A", "A"],
                         "c": ["no", None, None, "B", "B"], "d": [None, None, None, "tie", "B"]})
    out = wide.apply(lambda row: majority_label(str(v) for v in row.dropna()), axis=1)  # the one rule, per item
    # 2-1 -> yes; 1-1 tie -> undecided; one vote -> it; A,A,B,tie -> A (most frequent, no strict majority needed);
    # A,A,B,B -> a 2-2 tie, undecided.
    assert out[0] == "yes" and pd.isna(out[1]) and out[2] == "yes" and out[3] == "A" and pd.isna(out[4])
