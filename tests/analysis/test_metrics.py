"""Metric functions against hand-worked values and reference implementations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score, f1_score, precision_score, recall_score
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa

from personagap.analysis import agreement as ag
from personagap.analysis.pairwise import pairwise_agreement
from tests.support.ci_oracle import rule_interval


def test_kappa_hand_worked() -> None:
    # human: 1 1 1 0 0 0 ; judge: 1 1 0 0 0 1 -> table [[2,1],[1,2]]
    # po = 4/6, pe = (3*3 + 3*3)/36 = 0.5 -> kappa = (2/3 - 1/2) / (1/2) = 1/3
    table = np.array([[2.0, 1.0], [1.0, 2.0]])
    assert ag.kappa_from_tables(table) == pytest.approx(1 / 3)


def test_kappa_total_disagreement_and_identical() -> None:
    assert ag.kappa_from_tables(np.array([[0.0, 2.0], [2.0, 0.0]])) == pytest.approx(-1.0)
    assert ag.kappa_from_tables(np.array([[3.0, 0.0], [0.0, 5.0]])) == pytest.approx(1.0)


def test_kappa_undefined_is_nan() -> None:
    assert math.isnan(ag.kappa_from_tables(np.zeros((2, 2))))
    # both raters always "no": expected agreement 1, kappa undefined (sklearn also gives nan)
    assert math.isnan(ag.kappa_from_tables(np.array([[4.0, 0.0], [0.0, 0.0]])))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_binary_metrics_match_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    human = rng.integers(0, 2, 500)
    judge = np.where(rng.random(500) < 0.7, human, rng.integers(0, 2, 500))
    users = rng.integers(0, 40, 500)
    est = ag.agreement(human, judge, users, metrics=("kappa", "precision", "recall", "f1", "over_selection",
                                                     "judge_yes_rate", "human_yes_rate"))
    assert est["kappa"].value == pytest.approx(cohen_kappa_score(human, judge))
    assert est["precision"].value == pytest.approx(precision_score(human, judge))
    assert est["recall"].value == pytest.approx(recall_score(human, judge))
    assert est["f1"].value == pytest.approx(f1_score(human, judge))
    assert est["over_selection"].value == pytest.approx(judge.sum() / human.sum())
    assert est["judge_yes_rate"].value == pytest.approx(judge.mean())
    assert est["human_yes_rate"].value == pytest.approx(human.mean())


def test_multiclass_kappa_matches_sklearn() -> None:
    rng = np.random.default_rng(4)
    human = rng.choice(["ok", "bad", "unsure"], 300)
    judge = np.where(rng.random(300) < 0.6, human, rng.choice(["ok", "bad", "unsure"], 300))
    est = ag.agreement(human, judge, np.arange(300) % 30, metrics=("kappa", "accuracy"))
    assert est["kappa"].value == pytest.approx(cohen_kappa_score(human, judge))
    assert est["accuracy"].value == pytest.approx(float((human == judge).mean()))


def test_ci_is_deterministic_and_brackets_the_estimate() -> None:
    # The one CI rule draws nothing: the deprecated seed and resample count change nothing.
    rng = np.random.default_rng(5)
    human = rng.integers(0, 2, 2000)
    judge = np.where(rng.random(2000) < 0.8, human, 1 - human)
    users = rng.integers(0, 100, 2000)
    a = ag.agreement(human, judge, users)["kappa"]
    c = ag.agreement(human, judge, users)["kappa"]
    assert a == c
    assert a.ci[0] < a.value < a.ci[1]
    assert 0.0 < a.ci[1] - a.ci[0] < 0.2


def test_cluster_bootstrap_resamples_whole_users() -> None:
    # Each user is all-agree or all-disagree: per-user dependence must widen the CI compared with item resampling.
    human = np.tile([1, 0], 500)
    user = np.repeat(np.arange(20), 50)
    judge = np.where(user % 2 == 0, human, 1 - human)
    clustered = ag.agreement(human, judge, user)["kappa"]
    by_item = ag.agreement(human, judge, np.arange(1000))["kappa"]
    assert clustered.value == pytest.approx(0.0)
    assert (clustered.ci[1] - clustered.ci[0]) > 3 * (by_item.ci[1] - by_item.ci[0])


def test_binary_metric_rejects_non_binary_codes() -> None:
    with pytest.raises(ValueError, match="0/1"):
        ag.agreement([0, 1, 2], [0, 1, 1], [1, 1, 1], metrics=("precision",))


def test_registry_rejects_duplicates_and_suggests_names() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        ag.register_metric("kappa", higher_is_better=True, description="x")(lambda t: t)
    with pytest.raises(KeyError, match="did you mean kappa"):
        ag.get_metric("kapa")


def test_fleiss_matches_statsmodels() -> None:
    rng = np.random.default_rng(6)
    ratings = rng.integers(0, 3, (60, 4))
    counts = np.stack([(ratings == k).sum(axis=1) for k in range(3)], axis=1)
    assert ag.fleiss_kappa(counts) == pytest.approx(sm_fleiss_kappa(counts, method="fleiss"))
    est = ag.fleiss_kappa_ci(counts, np.arange(60) // 3)
    assert est.value == pytest.approx(sm_fleiss_kappa(counts, method="fleiss"))
    assert est.ci[0] <= est.value <= est.ci[1]


def test_fleiss_hand_worked() -> None:
    # 2 items, 2 raters: both agree on item 1 (yes), disagree on item 2.
    # P1 = 1, P2 = 0 -> Pbar = 0.5; p_yes = 3/4, p_no = 1/4 -> Pe = 10/16; kappa = (0.5-0.625)/(0.375) = -1/3
    assert ag.fleiss_kappa([[0, 2], [1, 1]]) == pytest.approx(-1 / 3)


def test_fleiss_rejects_unequal_raters() -> None:
    with pytest.raises(ValueError, match="same number"):
        ag.fleiss_kappa([[0, 2], [1, 2]])


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_alpha_coincidence_matches_krippendorff_package(level: str) -> None:
    rng = np.random.default_rng(7)
    data = rng.integers(0, 4, (5, 80)).astype(float)
    data[rng.random(data.shape) < 0.3] = np.nan
    values = np.unique(data[~np.isnan(data)])
    mine = ag.alpha_from_coincidences(ag.unit_coincidences(data, values).sum(axis=0), values, level)
    assert mine == pytest.approx(ag.krippendorff_alpha(data, level), abs=1e-9)


def test_alpha_hand_worked_identical_and_ci() -> None:
    data = np.array([[1, 0, 1, 1, 0, 0], [1, 0, 1, 1, 0, 0]], dtype=float)
    est = ag.krippendorff_alpha_ci(data, np.arange(6), "nominal")
    assert est.value == pytest.approx(1.0)
    assert math.isnan(ag.krippendorff_alpha(np.array([[1.0, 1.0], [1.0, 1.0]]), "nominal"))


def test_pairwise_groups_hand_worked() -> None:
    import pandas as pd

    rows = []
    truth = [1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0]
    for i, t in enumerate(truth):
        rows += [(f"i{i}", "h1", t, f"u{i % 4}"), (f"i{i}", "h2", t, f"u{i % 4}"),
                 (f"i{i}", "m1", 1, f"u{i % 4}") if i % 3 == 0 else (f"i{i}", "m1", t, f"u{i % 4}")]
    frame = pd.DataFrame(rows, columns=["item_id", "rater", "label", "cluster"])
    result = pairwise_agreement(frame, {"h1": "human", "h2": "human", "m1": "llm"}, min_overlap=5)
    assert result.matrix.loc["h1", "h2"] == pytest.approx(1.0)
    expected = cohen_kappa_score(truth, [1 if i % 3 == 0 else t for i, t in enumerate(truth)])
    assert result.matrix.loc["h1", "m1"] == pytest.approx(expected)
    assert result.groups["human–human"].n_pairs == 1
    assert result.groups["human–llm"].mean_kappa.value == pytest.approx(expected)
    assert result.overlap.loc["h2", "m1"] == len(truth)


# --------------------------------------------------------------------------- CI level and trust (issue 11)

def test_default_ci_is_the_95_percent_jackknife_t_of_an_sklearn_loop() -> None:
    rng = np.random.default_rng(8)
    human = rng.integers(0, 2, 600)
    judge = np.where(rng.random(600) < 0.75, human, 1 - human)
    users = rng.integers(0, 30, 600)
    est = ag.agreement(human, judge, users, metrics=("kappa", "accuracy"))
    ids = np.unique(users)
    # The rule's interval on the scale of each metric's registered range (analysis/agreement.py): kappa in (-1, 1)
    # (Fisher's z), accuracy in (0, 1) (logit); Satterthwaite df, recomputed by tests/support/ci_oracle.py.
    for name, fn, bounds in (("kappa", cohen_kappa_score, (-1.0, 1.0)),
                             ("accuracy", lambda h, j: float(np.mean(h == j)), (0.0, 1.0))):
        leave = [float(fn(human[users != u], judge[users != u])) for u in ids]
        point = fn(human, judge)
        assert est[name].value == pytest.approx(point)
        assert est[name].ci == pytest.approx(rule_interval(point, leave, bounds))


def test_too_few_users_for_a_ci_is_said_with_the_user_count() -> None:
    human = np.array([1, 0, 1, 0, 1, 1, 0, 0, 1, 0] * 2)
    judge = np.array([1, 0, 0, 0, 1, 1, 0, 1, 1, 0] * 2)
    below = ag.agreement(human, judge, np.arange(20) % (ag.MIN_USERS_FOR_CI - 1))["kappa"]
    assert below.too_few_users and all(math.isnan(c) for c in below.ci)
    assert below.value == pytest.approx(cohen_kappa_score(human, judge))  # the point estimate stays
    assert ag.ci_text(below) == f"(too few users for a CI: {ag.MIN_USERS_FOR_CI - 1} users)"
    enough = ag.agreement(human, judge, np.arange(20) % ag.MIN_USERS_FOR_CI)["kappa"]
    assert not enough.too_few_users and not math.isnan(enough.ci[0])
    assert ag.ci_text(enough).endswith(f"; {ag.MIN_USERS_FOR_CI} users]")


def test_undefined_leave_outs_are_counted_and_reported() -> None:
    # User 0 holds the only "yes" items: without user 0 kappa has one class and is undefined, so no interval.
    human = np.array([1, 1] + [0, 0] * 11)
    judge = human.copy()
    users = np.repeat(np.arange(12), 2)
    est = ag.agreement(human, judge, users)["kappa"]
    assert est.value == 1.0 and est.n_undefined == 1 and math.isnan(est.ci[0])
    assert ag.ci_text(est) == "[no CI; 12 users] (undefined without 1 of the users)"
