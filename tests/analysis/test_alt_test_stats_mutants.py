"""Mutation-killing tests of the alternative-annotator statistics (analysis/alt_test_stats.py, the `ci` set of
.ci/mutation).

Expected values come from an independent implementation: the paper's procedure as a plain loop over annotators and
items (written here), scipy's one-sample t-test and statsmodels' Benjamini-Yekutieli.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from personagap.analysis import alt_test_stats as at

# A reference implementation of steps 1-3 --------------------------------------------------------------------------


def _loop_indicators(judge: dict[str, Any], humans: pd.DataFrame, scoring: str, min_humans: int,
                     min_items: int) -> dict[str, Any]:
    """Per annotator: items, W_judge, W_human, cluster of each item; and the skipped annotators' counts."""
    rows = [r for r in humans.to_dict("records") if r["item_id"] in judge]
    seen: set[tuple[str, str]] = set()
    kept = []
    for r in rows:  # the first label of an (item, rater) pair counts
        if (r["item_id"], r["rater"]) not in seen:
            seen.add((r["item_id"], r["rater"]))
            kept.append(r)
    by_item: dict[str, list[dict[str, Any]]] = {}
    for r in kept:
        by_item.setdefault(r["item_id"], []).append(r)
    by_item = {i: rs for i, rs in by_item.items() if len(rs) >= min_humans}

    def score(pred: Any, others: list[Any]) -> float:
        if scoring == "accuracy":
            return sum(bool(pred == o) for o in others) / len(others)
        return -math.sqrt(sum((float(pred) - float(o)) ** 2 for o in others) / len(others))

    out: dict[str, Any] = {"tested": {}, "skipped": {}}
    for annotator in sorted({r["rater"] for rs in by_item.values() for r in rs}):
        mine = sorted(i for i, rs in by_item.items() if any(r["rater"] == annotator for r in rs))
        if len(mine) < min_items:
            out["skipped"][annotator] = len(mine)
            continue
        wj, wh, users = [], [], []
        for i in mine:
            own = next(r for r in by_item[i] if r["rater"] == annotator)
            others = [r["label"] for r in by_item[i] if r["rater"] != annotator]
            sj, sh = score(judge[i], others), score(own["label"], others)
            wj.append(float(sj >= sh))
            wh.append(float(sh >= sj))
            users.append(own.get("user_id"))
        out["tested"][annotator] = (mine, wj, wh, users)
    return out


def _humans(seed: int, n_items: int = 40, raters: str = "ABCD", scale: int = 2) -> tuple[pd.DataFrame, dict[str, int]]:
    rng = np.random.default_rng(seed)
    items = [f"i{n:03d}" for n in range(n_items)]
    truth = rng.integers(0, scale, n_items)
    rows = []
    for r in raters:
        for n, i in enumerate(items):
            if rng.random() < 0.85:  # not every rater labels every item: items with 1 human are dropped
                label = truth[n] if rng.random() < 0.7 else rng.integers(0, scale)
                rows.append({"item_id": i, "rater": r, "label": int(label), "user_id": f"u{n * 3 % 7}"})
    judge = {i: int(truth[n] if rng.random() < 0.75 else rng.integers(0, scale)) for n, i in enumerate(items)}
    del judge[items[0]]  # an item the judge did not label is not used
    return pd.DataFrame(rows), judge


@pytest.mark.parametrize(("scoring", "scale"), [("accuracy", 2), ("accuracy", 3), ("neg_rmse", 5)])
@pytest.mark.parametrize("seed", range(3))
def test_indicators_equal_the_papers_loop(scoring: at.Scoring, scale: int, seed: int) -> None:
    humans, judge = _humans(seed, scale=scale)
    # One annotator labels few items: skipped, with its count (the first in name order: the others still tested).
    humans = humans[~((humans["rater"] == "A") & (humans["item_id"] > "i012"))]
    # A duplicate (item, rater) row: only the first counts.
    humans = pd.concat([humans, humans.iloc[[0]].assign(label=humans.iloc[0]["label"] + 1)], ignore_index=True)
    ind = at.indicators(judge, humans, scoring=scoring, min_humans_per_item=3, min_items_per_annotator=20)
    ref = _loop_indicators(judge, humans, scoring, 3, 20)
    assert ind.skipped == ref["skipped"] and ind.skipped
    assert [a.annotator for a in ind.annotators] == list(ref["tested"])
    for a in ind.annotators:
        items, wj, wh, users = ref["tested"][a.annotator]
        assert a.items == items and a.judge_wins.tolist() == wj and a.human_wins.tolist() == wh
        assert a.clusters is not None
        # Cluster codes: the same partition as the users, numbered in sorted user order.
        assert a.clusters.tolist() == [sorted(set(humans["user_id"])).index(u) for u in users]
    assert ind.n_items == len({i for v in ref["tested"].values() for i in v[0]})
    assert ind.cluster_unit == at.CLUSTER_UNIT_USER


def test_categories_of_mixed_types_are_compared_as_themselves() -> None:
    # True/False/"unsure" labels: a label is equal only to the same value (True is not the string "True").
    humans, _ = _humans(6, scale=3)
    names = {0: True, 1: False, 2: "unsure"}
    humans = humans.assign(label=humans["label"].map(names))
    items = sorted(set(humans["item_id"]))
    judge = {i: names[k % 3] for k, i in enumerate(items)}
    ind = at.indicators(judge, humans, min_items_per_annotator=10)
    ref = _loop_indicators(judge, humans, "accuracy", 2, 10)
    assert [a.annotator for a in ind.annotators] == list(ref["tested"]) and ref["tested"]
    for a in ind.annotators:
        assert a.judge_wins.tolist() == ref["tested"][a.annotator][1]
        assert a.human_wins.tolist() == ref["tested"][a.annotator][2]


def test_indicators_defaults_are_the_papers() -> None:
    humans, judge = _humans(5, n_items=45, raters="ABC")
    ref = _loop_indicators(judge, humans, "accuracy", at.MIN_HUMANS_PER_ITEM, at.MIN_ITEMS_PER_ANNOTATOR)
    ind = at.indicators(judge, humans)
    assert [a.annotator for a in ind.annotators] == list(ref["tested"]) and ref["tested"]
    for a in ind.annotators:
        assert a.judge_wins.tolist() == ref["tested"][a.annotator][1]
    # At the default minimum of items an annotator is tested, one item short it is skipped with its count; an
    # item with a single human label is dropped (C's last item, n of them before the drop).
    n = at.MIN_ITEMS_PER_ANNOTATOR
    rows = [{"item_id": f"i{k:03d}", "rater": r, "label": (k * 7 + ord(r)) % 2}
            for k in range(n + 1) for r in "ABC" if ((k < n - 1 or k == n) if r == "C" else k < n)]
    edge = at.indicators({f"i{k:03d}": k % 2 for k in range(n + 1)}, pd.DataFrame(rows))
    assert [a.annotator for a in edge.annotators] == ["A", "B"] and edge.skipped == {"C": n - 1}
    assert edge.n_items == n


def test_without_users_every_item_is_its_own_cluster() -> None:
    humans, judge = _humans(1)
    for frame in (humans.drop(columns="user_id"), humans.assign(user_id=None)):
        ind = at.indicators(judge, frame, min_items_per_annotator=10)
        assert ind.cluster_unit == at.CLUSTER_UNIT_ITEM and ind.annotators
        for a in ind.annotators:
            assert a.clusters is None and a.n_clusters == len(a.items)
            assert a.cluster_difference.tolist() == (a.judge_wins - a.human_wins).tolist()


def test_an_item_without_a_user_is_a_cluster_of_its_own_after_every_user() -> None:
    humans, judge = _humans(2)
    del judge["i002"]
    judge["i000"] = 0
    lone = ["i000", "i001", "i009"]  # the first items too: their codes must not fall on a user's
    humans = humans.assign(user_id=humans["user_id"].where(~humans["item_id"].isin(lone), None))
    ind = at.indicators(judge, humans, min_items_per_annotator=10)
    users = sorted(set(humans["user_id"].dropna()))
    for a in ind.annotators:
        assert a.clusters is not None and a.clusters.dtype.kind == "i"
        codes = dict(zip(a.items, a.clusters.tolist(), strict=True))
        for i, code in codes.items():
            if i in lone:
                assert code >= len(users)
            else:
                assert code == users.index(humans.loc[humans["item_id"] == i, "user_id"].iloc[0])
        own = [codes[i] for i in lone if i in codes]
        assert len(set(own)) == len(own) >= 2
        assert a.n_clusters == len(set(codes.values()))


def test_cluster_codes_and_p_values_do_not_depend_on_the_row_order() -> None:
    # A re-imported store returns the rows in another order: the same clusters, the same p-values to the bit.
    humans, judge = _humans(8)
    humans = humans.assign(user_id=humans["user_id"].where(~humans["item_id"].isin(["i003", "i020"]), None))
    shuffled = humans.sample(frac=1.0, random_state=1).reset_index(drop=True)
    first, second = (at.indicators(judge, h, min_items_per_annotator=10) for h in (humans, shuffled))
    for a, b in zip(first.annotators, second.annotators, strict=True):
        assert a.clusters is not None and b.clusters is not None
        assert dict(zip(a.items, a.clusters.tolist(), strict=True)) == dict(zip(b.items, b.clusters.tolist(),
                                                                                strict=True))
    assert at.decide(first)[0] == at.decide(second)[0]


def test_cluster_difference_is_the_mean_per_cluster_in_sorted_order() -> None:
    wj = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    wh = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    clusters = np.array([2, 0, 2, 5, 0, 5])
    a = at.AnnotatorIndicators("A", [f"i{k}" for k in range(6)], wj, wh, clusters)
    d = wj - wh
    expected = [d[clusters == c].mean() for c in sorted(set(clusters.tolist()))]
    assert a.cluster_difference.tolist() == pytest.approx(expected)
    assert a.difference.tolist() == d.tolist() and a.n_clusters == 3


# Scorers, pair scores ---------------------------------------------------------------------------------------------


def test_scorers_are_accuracy_and_negative_rmse() -> None:
    assert at.SCORERS["accuracy"]("y", ["y", "n", "y", "y"]) == pytest.approx(3 / 4)
    assert at.SCORERS["neg_rmse"](3, [1, 2, 4]) == pytest.approx(-math.sqrt((4 + 1 + 1) / 3))


def test_pair_scores_of_missing_labels_match_nothing() -> None:
    # Item 0: labels a, NaN, NaN, a; the judge says NaN. NaN equals nothing, itself included.
    labels = np.array(["a", float("nan"), float("nan"), "a"], dtype=object)
    pred = np.array([float("nan")] * 4, dtype=object)
    human, judged = at._pair_scores(np.zeros(4, dtype=np.intp), labels, pred, "accuracy")
    others = [[labels[k] for k in range(4) if k != j] for j in range(4)]
    assert human.tolist() == [sum(labels[j] == o for o in others[j]) for j in range(4)]
    assert judged.tolist() == [0, 0, 0, 0]


def test_pair_scores_of_no_rows_are_empty() -> None:
    scorings: tuple[at.Scoring, ...] = ("accuracy", "neg_rmse")
    for scoring in scorings:
        human, judged = at._pair_scores(np.zeros(0, dtype=np.intp), np.zeros(0, dtype=object),
                                        np.zeros(0, dtype=object), scoring)
        assert human.shape == (0,) and judged.shape == (0,)


def test_judged_mask_keeps_the_judges_items() -> None:
    humans = pd.DataFrame({"item_id": ["a", "b", "c", "a"]})
    assert at.judged_mask(humans, {"a": 1, "c": 0}).tolist() == [True, False, True, True]
    assert at.judged_mask(humans, set()).tolist() == [False] * 4


# The t-test and BY -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.2])
def test_one_sided_p_is_scipys_t_test(epsilon: float) -> None:
    rng = np.random.default_rng(4)
    for n in (2, 3, 15, 40):
        d = rng.integers(-1, 2, n).astype(float)
        d[:2] = [-1.0, 1.0]  # never constant
        expected = stats.ttest_1samp(d, -epsilon, alternative="greater").pvalue
        assert at.one_sided_p(d, epsilon) == pytest.approx(expected, rel=1e-10)
        other = np.concatenate([d[:2], np.ones(n - 2)])  # another mean: each row is tested on its own
        expected_other = stats.ttest_1samp(other, -epsilon, alternative="greater").pvalue
        assert at.one_sided_p_rows(np.stack([d, other]), epsilon) == pytest.approx([expected, expected_other],
                                                                                   rel=1e-10)
    # Indicators as booleans or integers are the numbers 1 and 0.
    wins = np.array([[True, False, True, True], [False, False, True, False]])
    expected_rows = [stats.ttest_1samp(r.astype(float), -epsilon, alternative="greater").pvalue for r in wins]
    assert at.one_sided_p_rows(wins, epsilon) == pytest.approx(expected_rows, rel=1e-10)
    assert at.one_sided_p(wins[0].astype(int), epsilon) == pytest.approx(expected_rows[0], rel=1e-10)


def test_one_sided_p_is_nan_for_one_value_or_a_constant_vector() -> None:
    assert math.isnan(at.one_sided_p([0.5], 0.2)) and math.isnan(at.one_sided_p([], 0.2))
    # Cluster means of one value that differ in the last bit are as constant as the value.
    d = np.full(12, 1 / 3)
    d[5] = 1 / 3 + 4e-16
    assert math.isnan(at.one_sided_p(d, 0.2))
    # A vector that differs by more than rounding is tested.
    d[5] = 1 / 3 + 1e-6
    assert at.one_sided_p(d, 0.2) == pytest.approx(stats.ttest_1samp(d, -0.2, alternative="greater").pvalue)
    rows = at.one_sided_p_rows(np.array([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]]), 0.2)
    assert math.isnan(rows[0]) and rows[1] == pytest.approx(
        stats.ttest_1samp([1.0, 0.0, 1.0], -0.2, alternative="greater").pvalue)


@pytest.mark.parametrize("q", [0.05, 0.2])
def test_by_leaves_nan_p_values_unrejected(q: float) -> None:
    p = np.array([0.001, np.nan, 0.004, 0.3, np.nan, 0.0001])
    got = at.benjamini_yekutieli(p, q)
    finite = ~np.isnan(p)
    # statsmodels over all m hypotheses, a NaN counted as p = 1 (never rejected, still one of the m).
    expected = multipletests(np.where(finite, p, 1.0), alpha=q, method="fdr_by")[0]
    assert got.tolist() == expected.tolist() and not got[~finite].any()
    assert at.benjamini_yekutieli([]).tolist() == []
    assert at.benjamini_yekutieli([np.nan, np.nan]).tolist() == [False, False]


def test_by_of_one_hypothesis_rejects_at_q_itself() -> None:
    # m = 1: H_1 = 1, the threshold is q; step-up rejects p <= q, so p = q itself is rejected.
    for q in (0.05, 0.1):
        assert at.benjamini_yekutieli([q], q).tolist() == [True]
        assert at.benjamini_yekutieli([q], q).tolist() == multipletests([q], alpha=q, method="fdr_by")[0].tolist()
        assert at.benjamini_yekutieli([q * 1.001], q).tolist() == [False]


@pytest.mark.parametrize("m", [2, 3, 5, 8])
def test_by_threshold_uses_the_harmonic_number_of_m(m: int) -> None:
    # The smallest p just under (just over) its threshold q / m / H_m: rejected (not), the others far above.
    q = 0.05
    threshold = q / m / sum(1 / k for k in range(1, m + 1))
    rest = [0.9] * (m - 1)
    assert at.benjamini_yekutieli([threshold * 0.999, *rest], q).tolist() == [True] + [False] * (m - 1)
    assert at.benjamini_yekutieli([threshold * 1.001, *rest], q).tolist() == [False] * m


def test_by_returns_booleans_and_treats_a_missing_p_value_as_nan() -> None:
    got = at.benjamini_yekutieli([0.0001, 0.9])
    assert got.dtype == np.bool_
    # A p-value read back from JSON as null (a NaN when written) is never rejected.
    assert at.benjamini_yekutieli([None, 0.0001]).tolist() == [False, True]


def test_by_default_q_is_the_papers() -> None:
    p = [at.DEFAULT_Q / 2, 0.9]  # m = 2, H_2 = 1.5: the threshold of the smallest is q / 2 / 1.5 < q / 2
    assert at.benjamini_yekutieli(p).tolist() == multipletests(p, alpha=at.DEFAULT_Q, method="fdr_by")[0].tolist()
    near = [at.DEFAULT_Q / 2 / 1.5 * 0.999, 0.9]
    assert at.benjamini_yekutieli(near).tolist() == [True, False]


# decide ----------------------------------------------------------------------------------------------------------


def _annotator(name: str, d: list[int], clusters: list[int] | None = None) -> at.AnnotatorIndicators:
    dd = np.array(d, dtype=float)
    wj, wh = (dd >= 0).astype(float), (dd <= 0).astype(float)
    return at.AnnotatorIndicators(name, [f"i{k}" for k in range(len(d))], wj, wh,
                                  None if clusters is None else np.array(clusters))


@pytest.mark.parametrize(("epsilon", "q"), [(0.2, 0.05), (0.1, 0.05), (0.2, 0.3), (at.DEFAULT_EPSILON, at.DEFAULT_Q)])
def test_decide_is_the_t_test_then_by_then_the_rates(epsilon: float, q: float) -> None:
    rng = np.random.default_rng(11)
    anns = [_annotator("A", rng.choice([-1, 0, 1], 40, p=[0.1, 0.5, 0.4]).tolist()),
            _annotator("B", rng.choice([-1, 0, 1], 40, p=[0.4, 0.4, 0.2]).tolist()),
            _annotator("C", rng.choice([-1, 0, 1], 40, p=[0.05, 0.6, 0.35]).tolist(),
                       rng.integers(0, 8, 40).tolist()),
            _annotator("D", [0] * 40)]
    ind = at.Indicators(anns, 40, {})
    p, won, rate, advantage = at.decide(ind, epsilon=epsilon, q=q)
    expected_p = {}
    for a in anns:
        x = a.difference if a.clusters is None else np.array(
            [a.difference[a.clusters == c].mean() for c in np.unique(a.clusters)])
        expected_p[a.annotator] = (float("nan") if np.all(x == x[0]) else
                                   stats.ttest_1samp(x, -epsilon, alternative="greater").pvalue)
    assert list(p) == ["A", "B", "C", "D"] and math.isnan(p["D"])
    assert [p[k] for k in "ABC"] == pytest.approx([expected_p[k] for k in "ABC"])
    finite = np.array([expected_p[k] for k in "ABCD"])
    rejected = multipletests(np.where(np.isnan(finite), 1.0, finite), alpha=q, method="fdr_by")[0]
    assert won == [k for k, r in zip("ABCD", rejected, strict=True) if r]
    assert rate == pytest.approx(len(won) / 4)
    assert advantage == pytest.approx(np.mean([a.judge_wins.mean() for a in anns]))


def test_decide_defaults_and_no_annotators() -> None:
    d = [1] * 20 + [0] * 15 + [-1] * 5
    ind = at.Indicators([_annotator("A", d), _annotator("B", d[::-1][:30] + [1] * 10)], 40, {})
    assert at.decide(ind) == at.decide(ind, epsilon=at.DEFAULT_EPSILON, q=at.DEFAULT_Q)
    assert at.decide(ind) != at.decide(ind, epsilon=at.DEFAULT_EPSILON / 2)
    p, won, rate, advantage = at.decide(at.Indicators([], 0, {}))
    assert p == {} and won == [] and math.isnan(rate) and math.isnan(advantage)


def test_decide_rejects_at_the_q_it_is_given() -> None:
    ann = _annotator("A", [1] * 12 + [0] * 18 + [-1] * 10)
    p = stats.ttest_1samp(ann.difference, -at.DEFAULT_EPSILON, alternative="greater").pvalue
    ind = at.Indicators([ann], 40, {})
    assert at.decide(ind, q=p * 1.01)[1] == ["A"] and at.decide(ind, q=p * 0.99)[1] == []


def test_a_spread_above_rounding_is_tested_and_a_constant_row_warns_nothing() -> None:
    d = np.full(12, 0.5)
    d[3] += 1e-10  # far above the last bit, below numpy's default isclose tolerance
    assert at.one_sided_p(d, 0.2) == pytest.approx(stats.ttest_1samp(d, -0.2, alternative="greater").pvalue)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(at.one_sided_p_rows(np.zeros((2, 5)), 0.2)).all()
