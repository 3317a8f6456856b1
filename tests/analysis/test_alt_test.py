"""The alternative-annotator test: a hand-worked example, BY and the t-test against references, real data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from personagap.analysis.alt_test import (
    AltTestNotApplicable,
    AltTestResult,
    alt_test,
    alt_test_rows,
    benjamini_yekutieli,
    indicators,
    one_sided_p,
)

# Hand-worked example: three annotators A, B, C and a judge on four items (binary labels).
#
#         A    B    C    judge
#   i1    y    y    y    n
#   i2    y    n    n    n
#   i3    n    n    y    n
#   i4    y    y    n    y
#
# Leave A out (others B, C). Accuracy = share of the others matched.
#   i1: judge n vs [y,y] = 0,   A y = 1   -> W_judge 0, W_human 1, d = -1
#   i2: judge n vs [n,n] = 1,   A y = 0   -> W_judge 1, W_human 0, d = +1
#   i3: judge n vs [n,y] = .5,  A n = .5  -> tie: both 1, d = 0
#   i4: judge y vs [y,n] = .5,  A y = .5  -> tie, d = 0
#   d_A = [-1, 1, 0, 0]; advantage_A = mean W_judge = 3/4
# Leave B out (others A, C): i1 d = -1; i2 judge n vs [y,n] .5 = B n .5 tie; i3 tie; i4 tie
#   d_B = [-1, 0, 0, 0]; advantage_B = 3/4
# Leave C out (others A, B): i1 d = -1; i2 tie (.5 vs .5); i3 judge n vs [n,n] 1 > C y 0: d = +1;
#   i4 judge y 1 > C n 0: d = +1
#   d_C = [-1, 0, 1, 1]; advantage_C = 3/4
# t-tests of H0 mean(d) <= -0.2 (df = 3):
#   A: mean 0,    sd = sqrt(2/3)  = .81650, se = .40825, t = (0 + .2) / .40825     = 0.48990
#   B: mean -.25, sd = sqrt(.25)  = .5,     se = .25,    t = (-.25 + .2) / .25     = -0.2
#   C: mean .25,  sd = sqrt(11/12)= .95743, se = .47871, t = (.25 + .2) / .47871   = 0.94002
# BY, m = 3, H_3 = 11/6: thresholds k/3 * .05 / (11/6) = .00909, .01818, .02727. The smallest p (C, ~.21) is far
# above .00909: nothing is rejected. Winning rate 0, advantage probability 3/4, not passed.
HUMANS = {"A": "yynyy", "B": "ynnyy", "C": "ynyny"}
ITEMS = ["i1", "i2", "i3", "i4"]
JUDGE = dict(zip(ITEMS, "nnny", strict=True))


def _humans(table: dict[str, str], items: list[str]) -> pd.DataFrame:
    return pd.DataFrame([{"item_id": i, "rater": r, "label": labels[k]}
                         for r, labels in table.items() for k, i in enumerate(items)])


def test_hand_worked_example() -> None:
    humans = _humans({r: v[:4] for r, v in HUMANS.items()}, ITEMS)
    ind = indicators(JUDGE, humans, min_items_per_annotator=4)
    d = {a.annotator: a.difference.tolist() for a in ind.annotators}
    assert d == {"A": [-1, 1, 0, 0], "B": [-1, 0, 0, 0], "C": [-1, 0, 1, 1]}
    result = alt_test(JUDGE, humans, judge_name="j", dataset="d", min_items_per_annotator=4)
    assert isinstance(result, AltTestResult)
    for name, t in {"A": 0.48990, "B": -0.2, "C": 0.94002}.items():
        assert result.p_values[name] == pytest.approx(stats.t.sf(t, 3), abs=1e-4)
    assert result.won == [] and result.winning_rate == 0.0 and not result.passed
    assert result.advantage_probability == pytest.approx(0.75)
    assert result.n_items == 4 and result.n_annotators == 3
    # Each figure states what it weights: without users on the items the t-tests run over items too.
    assert result.cluster_unit == "item"
    assert result.model_dump()["estimand"] == {"winning_rate": "items", "advantage_probability": "items"}
    by_user = result.model_copy(update={"cluster_unit": "user"})
    assert by_user.model_dump()["estimand"] == {"winning_rate": "users", "advantage_probability": "items"}


def test_a_judge_that_is_the_majority_passes() -> None:
    # The judge gives the majority label of A, B, C on each item: i1 y, i2 n, i3 n, i4 y. Repeated ten times
    # (40 items per annotator): d_A = [0, 1, 0, 0] x 10, d_B = all 0 (always tied with B), d_C = [0, 0, 1, 1] x 10.
    # A and C: mean .25 and .5 far above -0.2, p ~ 1e-9; B: zero variance, no t statistic -> p NaN, never a win.
    items = [f"i{k}-{r}" for r in range(10) for k in range(1, 5)]
    humans = _humans({r: v[:4] * 10 for r, v in HUMANS.items()}, items)
    judge = dict(zip(items, "ynny" * 10, strict=True))
    result = alt_test(judge, humans, judge_name="majority", dataset="d")
    assert isinstance(result, AltTestResult)
    assert np.isnan(result.p_values["B"]) and result.won == ["A", "C"]
    assert result.winning_rate == pytest.approx(2 / 3) and result.passed
    assert result.advantage_probability == pytest.approx(1.0)


def test_paper_formulation_and_scipy() -> None:
    # The paper tests W_human - W_judge against +epsilon with alternative='less'; ours flips the sign.
    rng = np.random.default_rng(3)
    for _ in range(20):
        w_judge = rng.integers(0, 2, 50).astype(float)
        w_human = np.where(w_judge == 1, rng.integers(0, 2, 50), 1).astype(float)
        eps = float(rng.uniform(0.05, 0.3))
        ours = one_sided_p(w_judge - w_human, eps)
        assert ours == pytest.approx(stats.ttest_1samp(w_human - w_judge, eps, alternative="less").pvalue)
        assert ours == pytest.approx(stats.ttest_1samp(w_judge - w_human, -eps, alternative="greater").pvalue)
    assert np.isnan(one_sided_p([-1.0, -1.0, -1.0], 0.2))


@pytest.mark.parametrize("seed", range(15))
def test_by_against_statsmodels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 25))
    p = rng.uniform(0, 0.02, m) if seed % 3 == 0 else rng.beta(0.3, 3, m)
    q = float(rng.choice([0.05, 0.1, 0.2]))
    expected = multipletests(p, alpha=q, method="fdr_by")[0]
    assert benjamini_yekutieli(p, q).tolist() == expected.tolist()


def test_by_step_up_by_hand() -> None:
    # m = 4, H_4 = 25/12; thresholds k/4 * .05 * 12/25 = .006, .012, .018, .024. p sorted .001, .013, .017, .5:
    # .013 > .012 but .017 <= .018 -> step-up rejects the three smallest (also the one above its own threshold).
    assert benjamini_yekutieli([0.5, 0.017, 0.001, 0.013]).tolist() == [False, True, True, True]


def test_not_applicable_reasons() -> None:
    single = pd.DataFrame({"item_id": ITEMS, "rater": ["A", "B", "A", "B"], "label": list("yyny")})
    result = alt_test(JUDGE, single, judge_name="j", dataset="d")
    assert isinstance(result, AltTestNotApplicable) and "at most 1 per item" in result.reason
    few = alt_test(JUDGE, _humans({r: v[:4] for r, v in HUMANS.items()}, ITEMS), judge_name="j", dataset="d")
    assert isinstance(few, AltTestNotApplicable) and "30 items" in few.reason
    assert few.model_dump()["applicable"] is False
    with pytest.raises(ValueError):
        alt_test(JUDGE, single, judge_name="j", dataset="d", min_humans_per_item=1)


def test_neg_rmse_for_ordinal_scores() -> None:
    # One item scored A 1, B 2, C 4, judge 3.
    #   leave A out, others [2, 4]: judge -sqrt((1 + 1) / 2) = -1      vs A -sqrt((1 + 9) / 2) = -2.236: d = +1
    #   leave B out, others [1, 4]: judge -sqrt((4 + 1) / 2) = -1.581  vs B -sqrt((1 + 4) / 2) = -1.581: tie, d = 0
    #   leave C out, others [1, 2]: judge -sqrt((4 + 1) / 2) = -1.581  vs C -sqrt((9 + 4) / 2) = -2.550: d = +1
    humans = pd.DataFrame({"item_id": ["i1"] * 3, "rater": ["A", "B", "C"], "label": ["1", "2", "4"]})
    ind = indicators({"i1": "3"}, humans, scoring="neg_rmse", min_items_per_annotator=1)
    assert {a.annotator: a.difference.tolist() for a in ind.annotators} == {"A": [1], "B": [0], "C": [1]}
    # Accuracy on the same labels: nobody matches anybody, all ties.
    ind = indicators({"i1": "3"}, humans, min_items_per_annotator=1)
    assert {a.annotator: a.difference.tolist() for a in ind.annotators} == {"A": [0], "B": [0], "C": [0]}


def _tidy(rows: list[tuple[str, str, str, str, str]]) -> pd.DataFrame:
    return pd.DataFrame([{"item_id": i, "rater": r, "rater_kind": k, "condition": c, "label": lab,
                          "user_id": "u" + i[-1], "dataset": "d"} for i, r, k, c, lab in rows])


def test_blind_and_anchored_humans_are_kept_apart() -> None:
    items = [f"i{k}" for k in range(40)]
    judge = {i: "no" if k % 5 == 0 else "yes" for k, i in enumerate(items)}
    rows = [(i, "llm1", "llm", "", judge[i]) for i in items]
    rows += [(i, "trained1", "trained", "in-sample", "yes") for i in items]  # excluded from every comparison
    rows += [(i, r, "human", "", "yes" if (k + n) % 3 else "no") for k, i in enumerate(items) for n, r in
             enumerate(["b1", "b2"])]
    # Anchored humans copy the LLM they were shown; the blind ones disagree with it on some items.
    rows += [(i, r, "human", "shown-llm", judge[i]) for i in items for r in ["a1", "a2", "a3"]]
    labels = _tidy(rows)
    # The constant judge's row comes first in each; the judge rows follow.
    blind = [r for r in alt_test_rows(labels, "d") if r["rater_kind"] != "baseline"]
    anchored = [r for r in alt_test_rows(labels, "d", humans="anchored") if r["rater_kind"] != "baseline"]
    assert [r["judge"] for r in blind] == ["llm1"] == [r["judge"] for r in anchored]
    assert set(blind[0]["p_values"]) == {"b1", "b2"} and blind[0]["humans"] == "blind"
    assert set(anchored[0]["p_values"]) == {"a1", "a2", "a3"} and anchored[0]["humans"] == "anchored"
    assert anchored[0]["advantage_probability"] == 1.0 and blind[0]["advantage_probability"] < 1.0


@pytest.mark.slow
def test_pilot_relevance(recenter_db: Path) -> None:
    from personagap.store import load_labels, opened

    with opened(recenter_db, read_only=True) as con:
        labels = load_labels(con, stage="relevance")
    blind = alt_test_rows(labels, "recenter-pilot")
    assert blind and all(r["applicable"] is False for r in blind)  # one blind annotator per item
    anchored = alt_test_rows(labels, "recenter-pilot", humans="anchored")
    # One row more: the constant judge's, run because some judge could be tested.
    assert len(anchored) == len(blind) + 1 and all(r["applicable"] for r in anchored)
    for r in anchored:
        assert r["n_annotators"] >= 2 and min(r["items_by_annotator"].values()) >= 30
        assert 0 <= r["winning_rate"] <= 1 and r["passed"] == (r["winning_rate"] >= 0.5)
        assert r["winning_rate"] == len(r["won"]) / r["n_annotators"]
    # A stricter margin can only lose annotators.
    strict = alt_test_rows(labels, "recenter-pilot", humans="anchored", epsilon=0.0)
    for a, s in zip(anchored, strict, strict=True):
        assert s["winning_rate"] <= a["winning_rate"]
        assert all(s["p_values"][k] >= a["p_values"][k] for k in a["p_values"])
