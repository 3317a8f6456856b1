"""The vectorised alt-test indicators, reference labels and estimates against simple per-item loops.

The loops below are the implementations these functions had before they were vectorised (obviously correct:
one item, one annotator at a time, exactly as the paper and the comparability rule read). On random label
sets with ties, missing labels, several raters per item, stored majorities and anchored conditions, the
vectorised functions must give the same figures to the last bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import pytest

from personagap.analysis import comparable as c
from personagap.analysis.agreement import json_safe_dict
from personagap.analysis.alt_test import SCORERS, Indicators, indicators
from personagap.analysis.codes import as_categories, sorted_codes
from personagap.analysis.robust import human_reference, judge_labels
from tests.support.oracles import estimate_rows, judge_estimates


def _loop_indicators(judge: Mapping[str, Any], humans: pd.DataFrame, scoring: str, min_humans: int,
                     min_items: int) -> tuple[list[tuple[str, list[str], list[float], list[float]]], int,
                                              dict[str, int]]:
    score = SCORERS[scoring]
    rows = humans[humans["item_id"].isin(list(judge))].drop_duplicates(["item_id", "rater"])
    per_item = rows.groupby("item_id")["rater"].transform("size")
    rows = rows[per_item >= min_humans]
    by_item: dict[str, dict[str, Any]] = {}
    for item, rater, label in zip(rows["item_id"], rows["rater"], rows["label"], strict=True):
        by_item.setdefault(str(item), {})[str(rater)] = label
    by_annotator: dict[str, list[str]] = {}
    for item, raters in sorted(by_item.items()):
        for rater in raters:
            by_annotator.setdefault(rater, []).append(item)
    tested, skipped, used = [], {}, set()
    for annotator in sorted(by_annotator):
        items = by_annotator[annotator]
        if len(items) < min_items:
            skipped[annotator] = len(items)
            continue
        w_judge, w_human = [], []
        for item in items:
            others = [lab for r, lab in by_item[item].items() if r != annotator]
            s_judge, s_human = score(judge[item], others), score(by_item[item][annotator], others)
            w_judge.append(float(s_judge >= s_human))
            w_human.append(float(s_human >= s_judge))
        tested.append((annotator, items, w_judge, w_human))
        used.update(items)
    return tested, len(used), skipped


def _as_tuples(ind: Indicators) -> tuple[list[tuple[str, list[str], list[float], list[float]]], int, dict[str, int]]:
    return ([(a.annotator, a.items, a.judge_wins.tolist(), a.human_wins.tolist()) for a in ind.annotators],
            ind.n_items, ind.skipped)


def _random_humans(rng: np.random.Generator, scoring: str) -> tuple[dict[str, Any], pd.DataFrame]:
    """Items with 0-11 raters (some twice), labels from a small scale so that ties are frequent."""
    rows, judge = [], {}
    scale = ["yes", "no", "maybe"] if scoring == "accuracy" else [0.1, 1.7, 2.3, 3.0, 4.9]
    for i in rng.permutation(150):
        item = f"i{i:03d}"
        if rng.random() < 0.9:
            judge[item] = scale[int(rng.integers(len(scale)))]
        for r in rng.permutation(12)[: int(rng.integers(0, 12))]:
            rows.append((item, f"a{r:02d}", scale[int(rng.integers(len(scale)))]))
            if rng.random() < 0.05:  # the same person twice: the first row counts
                rows.append((item, f"a{r:02d}", scale[int(rng.integers(len(scale)))]))
    if scoring == "neg_rmse":  # scores as stored: strings of numbers, with rounding-sensitive decimals
        judge = {k: str(v) for k, v in judge.items()}
        rows = [(i, r, str(v)) for i, r, v in rows]
    else:  # a few missing labels (NaN equals nothing, not even NaN)
        judge = {k: math.nan if rng.random() < 0.03 else v for k, v in judge.items()}
        rows = [(i, r, math.nan if rng.random() < 0.03 else v) for i, r, v in rows]
    return judge, pd.DataFrame(rows, columns=["item_id", "rater", "label"])


@pytest.mark.parametrize("scoring", ["accuracy", "neg_rmse"])
@pytest.mark.parametrize("seed", range(6))
def test_indicators_equal_the_per_item_loop(scoring: str, seed: int) -> None:
    judge, humans = _random_humans(np.random.default_rng(seed), scoring)
    for min_humans, min_items in ((2, 1), (3, 30), (2, 60)):
        expected = _loop_indicators(judge, humans, scoring, min_humans, min_items)
        got = _as_tuples(indicators(judge, humans, scoring=scoring,  # type: ignore[arg-type]
                                    min_humans_per_item=min_humans, min_items_per_annotator=min_items))
        assert got == expected
        if min_items == 1:  # not vacuous: annotators tested, with ties (both indicators 1) and strict wins
            pairs = [(w_j, w_h) for a in expected[0] for w_j, w_h in zip(a[2], a[3], strict=True)]
            assert {(1.0, 1.0), (1.0, 0.0), (0.0, 1.0)} <= set(pairs)


def test_indicators_without_rows() -> None:
    empty = pd.DataFrame({"item_id": pd.Series(dtype=object), "rater": pd.Series(dtype=object),
                          "label": pd.Series(dtype=object)})
    for scoring in ("accuracy", "neg_rmse"):
        assert _as_tuples(indicators({"x": "yes"}, empty, scoring=scoring)) == ([], 0, {})  # type: ignore[arg-type]


def _loop_reference(labels: pd.DataFrame, which: str) -> pd.Series:
    mask = c.blind_human_mask(labels) if which == "blind" else c.anchored_human_mask(labels)
    humans = labels[mask & labels["label"].notna() & (labels["condition"] != c.SHOWN_LLM_RATING)]
    if humans.empty:
        return pd.Series(dtype=object, name="human")
    is_major = humans["rater_kind"] == "human_majority"
    stored = humans[is_major].groupby("item_id")["label"].agg(lambda v: v.iloc[0] if v.nunique() == 1 else None)
    stored = stored[stored.notna()]
    rest = c.one_vote_per_rater(humans[~is_major & ~humans["item_id"].isin(stored.index)])
    voted = rest.groupby("item_id")["label"].agg(lambda v: c.majority_label(map(str, v)))
    return pd.concat([stored, voted[voted.notna()]]).rename("human").astype(object)


def _random_tidy(seed: int) -> pd.DataFrame:
    """Tidy labels of two datasets: stored majorities (some disagreeing), blind and anchored humans (some twice,
    some missing), three-way ratings, judges of three kinds (some in-sample, some unparsed)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in rng.permutation(400):
        item, user, ds = f"i{i:03d}", f"u{i % 37:02d}", "d1" if i % 5 else "d2"
        if rng.random() < 0.25:
            for _ in range(int(rng.integers(1, 3))):
                rows.append((item, "human_majority", "human_majority", str(rng.choice(["", c.ANCHORED_MAJORITY])),
                             str(rng.choice(["yes", "no"])), user, ds))
        for r in rng.permutation(8)[: int(rng.integers(0, 8))]:
            cond = str(rng.choice(["", "", "", c.SHOWN_LLM, c.CONVERTED_SHOWN_LLM, c.SHOWN_LLM_RATING, "overall"]))
            label = "necessary_explicit" if cond == c.SHOWN_LLM_RATING else rng.choice(["yes", "no", None])
            rows.append((item, f"a{r}", "human", cond, label, user, ds))
            if rng.random() < 0.2:
                rows.append((item, f"a{r}", "human", str(rng.choice([c.SHOWN_LLM, c.CONVERTED_SHOWN_LLM])),
                             str(rng.choice(["yes", "no"])), user, ds))
        for rater, kind in (("gpt", "llm"), ("claude", "llm"), ("lexical", "trained"), ("always-no", "baseline")):
            if rng.random() < 0.85:
                rows.append((item, rater, kind, str(rng.choice(["", "", c.IN_SAMPLE])),
                             rng.choice(["yes", "no", None]), user, ds))
    return pd.DataFrame(rows, columns=["item_id", "rater", "rater_kind", "condition", "label", "user_id", "dataset"])


@pytest.mark.slow
@pytest.mark.parametrize("which", ["blind", "anchored"])
@pytest.mark.parametrize("seed", range(5))
def test_reference_labels_equal_the_per_item_loop(which: str, seed: int) -> None:
    labels = _random_tidy(seed)
    subsets = [labels, labels[labels["rater_kind"] != "human_majority"], labels[labels["rater_kind"] != "human"],
               labels.iloc[:0], labels[labels["item_id"] == labels["item_id"].iloc[0]]]
    for frame in subsets:
        pd.testing.assert_series_equal(c.reference_labels(frame, which), _loop_reference(frame, which))  # type: ignore[arg-type]
    assert len(_loop_reference(labels, which)) > 20



def _same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN, floats to the last bit."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and bool(a == b)


def _loop_estimates(labels: pd.DataFrame, dataset: str, humans: str) -> list[dict[str, Any]]:
    """Every judge on its own, the human-only estimate and the bootstrap draws recomputed for each (as before)."""
    frame = labels[labels["dataset"] == dataset]
    reference = human_reference(frame, humans)  # type: ignore[arg-type]
    judges = list(judge_labels(frame))
    if reference.empty or not ((reference["label"] == "yes").any() or any((j.labels == "yes").any() for j in judges)):
        return []
    return [json_safe_dict(judge_estimates(j, reference, dataset=dataset, humans=humans).model_dump())
            for j in judges if not j.labels.index.intersection(reference.index).empty]


@pytest.mark.parametrize("seed", range(3))
def test_estimate_rows_equal_judge_by_judge(seed: int) -> None:
    labels = _random_tidy(seed)
    for dataset in ("d1", "d2"):
        for humans in ("blind", "anchored"):
            expected = _loop_estimates(labels, dataset, humans)
            got = estimate_rows(labels, dataset, humans=humans)  # type: ignore[arg-type]
            assert _same(got, expected)
            assert len(expected) == 4 or humans == "anchored"


@pytest.mark.parametrize("n", [0, 1, 7, 500])
def test_sorted_codes_are_numpy_unique(n: int) -> None:
    values = np.array([f"user{u}" for u in np.random.default_rng(n).integers(0, 60, n)] + ["nan", "Z", "é"][: n],
                      dtype=object)
    expected_ids, expected_index = np.unique(values, return_inverse=True)
    # As an array, and as the Series a store read gives (pandas' own text dtype, and Python objects).
    for given in (values, pd.Series(values, dtype=str), pd.Series(values, dtype=object)):
        ids, index = sorted_codes(given)
        assert ids.tolist() == expected_ids.tolist() and index.tolist() == expected_index.tolist()


def test_a_missing_user_id_is_refused_not_coded() -> None:
    with pytest.raises(ValueError, match="missing user id"):
        sorted_codes(pd.Series(["u1", None, "u2"], dtype=str))



@pytest.mark.parametrize("n", [0, 1, 7, 500])
def test_categories_keep_every_value_and_the_text_order(n: int) -> None:
    rng = np.random.default_rng(n)
    pool = ["b", "a", "é", "Z", "a b", None]
    frame = pd.DataFrame({"key": pd.Series([pool[k] for k in rng.integers(0, len(pool), n)], dtype=str),
                          "n": rng.integers(1, 5, n)})
    coded = as_categories(frame, ["key"])
    assert isinstance(coded["key"].dtype, pd.CategoricalDtype)
    assert list(coded["key"].cat.categories) == sorted(frame["key"].dropna().unique())
    assert coded["key"].isna().tolist() == frame["key"].isna().tolist()
    assert coded["key"].dropna().astype(str).tolist() == frame["key"].dropna().tolist()
    # Grouping gives the same groups, in the same order, with the same sums (no unseen category as a group).
    expected = frame.groupby("key", sort=True)["n"].sum()
    got = coded.groupby("key", sort=True)["n"].sum()
    assert [str(k) for k in got.index] == [str(k) for k in expected.index] and got.tolist() == expected.tolist()
    assert frame["key"].dtype == "str"  # the caller's frame is left as it was
