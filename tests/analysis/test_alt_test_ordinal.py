"""The alternative-annotator test on ordinal ratings: scored by negative RMSE, as the paper does for scores.

Defect: the reports never passed the scale on (``report_extras`` called ``alt_test_rows`` with its default
``accuracy``), so 1-5 ratings were scored by exact match.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from personagap.analysis.alt_test import alt_test, indicators
from personagap.records import DatasetScale
from tests.support.oracles import relevance_report, report_extras

# Hand-worked example: annotators a, b, c rate one item 1, 2, 4; the judge says 3.
# Leave a out (others b, c = 2, 4):
#   judge: -sqrt(((3-2)^2 + (3-4)^2) / 2) = -1;   a: -sqrt(((1-2)^2 + (1-4)^2) / 2) = -sqrt(5)
#   -> judge >= a: W_judge 1, W_human 0.   By accuracy both match 0 of 2: a tie, W_judge 1, W_human 1.
# Leave b out (others a, c = 1, 4):
#   judge: -sqrt((4 + 1) / 2) = -sqrt(2.5);       b: -sqrt((1 + 4) / 2) = -sqrt(2.5)  -> tie: both 1.
# Leave c out (others a, b = 1, 2):
#   judge: -sqrt((4 + 1) / 2) = -sqrt(2.5);       c: -sqrt((9 + 4) / 2) = -sqrt(6.5)  -> W_judge 1, W_human 0.
ONE_ITEM = pd.DataFrame({"item_id": ["i"] * 3, "rater": ["a", "b", "c"], "label": ["1", "2", "4"]})


def test_hand_worked_ordinal_indicators() -> None:
    rmse = indicators({"i": "3"}, ONE_ITEM, scoring="neg_rmse", min_items_per_annotator=1)
    got = {a.annotator: (a.judge_wins.tolist(), a.human_wins.tolist()) for a in rmse.annotators}
    assert got == {"a": ([1.0], [0.0]), "b": ([1.0], [1.0]), "c": ([1.0], [0.0])}
    accuracy = indicators({"i": "3"}, ONE_ITEM, scoring="accuracy", min_items_per_annotator=1)
    assert {a.annotator: a.human_wins.tolist() for a in accuracy.annotators}["a"] == [1.0]  # exact match: a tie


def _ordinal_labels(seed: int, n_items: int = 40) -> pd.DataFrame:
    """Three annotators and a judge rating items 1-5 (a judge one level off now and then)."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 6, n_items)
    rows = []
    for i, t in enumerate(truth):
        user = f"u{i % 8}"
        for rater in ("h1", "h2", "h3"):
            v = int(np.clip(t + rng.integers(-1, 2), 1, 5))
            rows.append({"item_id": f"i{i}", "rater": rater, "rater_kind": "human", "condition": "", "label": str(v),
                         "user_id": user, "dataset": "ratings", "error": None})
        v = int(np.clip(t + rng.integers(-1, 2) * (rng.random() < 0.5), 1, 5))
        rows.append({"item_id": f"i{i}", "rater": "judge", "rater_kind": "llm", "condition": "", "label": str(v),
                     "user_id": user, "dataset": "ratings", "error": None})
    return pd.DataFrame(rows)


def _by_the_paper(labels: pd.DataFrame, epsilon: float = 0.2, q: float = 0.05) -> dict[str, float]:
    """The authors' procedure, written out: leave one annotator out, score = -RMSE to the remaining annotators,
    indicators with >=, one-sided t-test against epsilon (scipy), Benjamini-Yekutieli (statsmodels)."""
    humans = labels[labels["rater_kind"] == "human"]
    judge = labels[labels["rater_kind"] == "llm"].set_index("item_id")["label"].astype(float)
    p_values, advantages = [], []
    for annotator in sorted(humans["rater"].unique()):
        w_judge, w_human = [], []
        for item, rows in humans.groupby("item_id"):
            own = rows[rows["rater"] == annotator]["label"].astype(float)
            others = rows[rows["rater"] != annotator]["label"].astype(float).to_numpy()
            if own.empty or len(others) < 1:
                continue
            s_judge = -math.sqrt(np.mean((judge[item] - others) ** 2))
            s_human = -math.sqrt(np.mean((own.iloc[0] - others) ** 2))
            w_judge.append(float(s_judge >= s_human))
            w_human.append(float(s_human >= s_judge))
        x = np.subtract(w_human, w_judge)
        p_values.append(stats.ttest_1samp(x, epsilon, alternative="less").pvalue)
        advantages.append(float(np.mean(w_judge)))
    rejected = multipletests(p_values, alpha=q, method="fdr_by")[0]
    return {"winning_rate": float(np.mean(rejected)), "advantage_probability": float(np.mean(advantages)),
            **{f"p{i}": p for i, p in enumerate(p_values)}}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ordinal_alt_test_matches_the_papers_procedure(seed: int) -> None:
    labels = _ordinal_labels(seed)
    expected = _by_the_paper(labels)
    humans = labels[labels["rater_kind"] == "human"][["item_id", "rater", "label"]]
    judge = dict(zip(labels[labels["rater_kind"] == "llm"]["item_id"], labels[labels["rater_kind"] == "llm"]["label"],
                     strict=True))
    result = alt_test(judge, humans, judge_name="judge", dataset="ratings", scoring="neg_rmse")
    assert result.applicable
    assert result.winning_rate == pytest.approx(expected["winning_rate"])
    assert result.advantage_probability == pytest.approx(expected["advantage_probability"])
    assert list(result.p_values.values()) == pytest.approx([expected[f"p{i}"] for i in range(3)])


def test_reports_score_an_ordinal_dataset_by_negative_rmse() -> None:
    labels = _ordinal_labels(0)
    scale = DatasetScale(kind="ordinal", categories=("1", "2", "3", "4", "5"))
    tests, rates = report_extras(labels, ["ratings"], positive="yes", scales={"ratings": scale})
    constant, row = tests  # the constant judge's row first, scored the same way
    assert constant["rater_kind"] == "baseline" and constant["scoring"] == row["scoring"] == "neg_rmse"
    assert row["advantage_probability"] == pytest.approx(_by_the_paper(labels)["advantage_probability"])
    assert rates == []  # no "yes" rate on a 1-5 scale
    report = relevance_report(labels.assign(dataset="ratings"), scales={"ratings": scale})
    assert [t["scoring"] for t in report.alt_test] == ["neg_rmse", "neg_rmse"]
    (judge,) = report.judges
    assert judge.scale == "ordinal" and judge.weighted_kappa is not None and judge.over_selection is None


def test_an_ordinal_label_off_the_scale_is_no_rating_in_the_test() -> None:
    # A judge answering "n/a" or 7 on a 1-5 scale gave no rating: the test reads those items as not judged (as
    # the judge rows count them as failures), never as numbers (before: "could not convert string to float").
    labels = _ordinal_labels(1)
    scale = DatasetScale(kind="ordinal", categories=("1", "2", "3", "4", "5"))
    judge = labels.index[labels["rater"] == "judge"]
    off = labels.copy()
    off.loc[judge[:3], "label"] = ["n/a", "7", "0"]
    off.loc[judge[3], "label"] = "4.0"  # the level 4, spelled as a number: on the scale, kept
    tests, _ = report_extras(off, ["ratings"], positive=None, scales={"ratings": scale})
    dropped = labels.drop(judge[:3]).assign(label=lambda f: f["label"].where(f.index != judge[3], "4"))
    expected, _ = report_extras(dropped, ["ratings"], positive=None, scales={"ratings": scale})
    assert [t["advantage_probability"] for t in tests] == [t["advantage_probability"] for t in expected]
    assert [t["n_items"] for t in tests] == [t["n_items"] for t in expected]
    assert tests[1]["n_items"] < report_extras(labels, ["ratings"], positive=None,
                                               scales={"ratings": scale})[0][1]["n_items"]
