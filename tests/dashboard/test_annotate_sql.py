"""The Annotate queue's per-item counts in SQL (:func:`annotate.queue_scores`) against the per-label oracle.

The best judge's most common label breaks a tie by the label sorting first, whatever the rows' order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from personagap.dashboard import annotate
from personagap.store import connect, upsert

ORDERS = ("disagreement", "uncertain", "random")
METAS = ('{"confidence": 0.7}', '{"probability": 0.2}', '{"certainty": "80%"}', None, '{"confidence": true}',
         "[1]", '"x"', '{"confidence": 3}', '{"probability": 0.8}', '{"certainty": "NA"}')


def _labels(rows: list[tuple[str, str, str, str | None]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["item_id", "rater", "label", "meta"])


def test_a_tie_of_the_best_judges_labels_goes_to_the_label_sorting_first_in_any_row_order():
    rows = [("i1", "best", "yes", None), ("i1", "best", "no", None), ("i1", "o", "yes", None),
            ("i2", "best", "yes", None), ("i2", "best", "maybe", None), ("i2", "best", "yes", None),
            ("i3", "best", "b", None), ("i3", "best", "a", None), ("i3", "o", "b", None), ("i3", "o", "b", None)]
    for labels in (_labels(rows), _labels(rows[::-1])):
        scores = annotate.item_scores(labels, "best").set_index("item_id")
        assert scores["best_label"].to_dict() == {"i1": "no", "i2": "yes", "i3": "a"}
        # Others contradict the tie's winner: i1's "yes" differs from "no"; i3's two "b" from "a".
        assert scores[["other_n", "other_diff"]].to_dict("index") == {
            "i1": {"other_n": 1, "other_diff": 1}, "i2": {"other_n": 0, "other_diff": 0},
            "i3": {"other_n": 2, "other_diff": 2}}
        queue = annotate.order_items(["i1", "i2", "i3"], labels, "random", best_judge="best", seed=2)
        assert dict(zip(queue["item_id"], queue["stratum"], strict=True)) == {"i1": "no", "i2": "yes", "i3": "a"}
        uncertain = annotate.order_items(["i1", "i2", "i3"], labels, "uncertain", best_judge="best")
        # Inconsistency 1/2 (i1, i3; both wholly contradicted) before 1/3 (i2).
        assert set(uncertain["item_id"][:2]) == {"i1", "i3"} and uncertain["item_id"].iloc[2] == "i2"


def _random_store(path: Path, seed: int) -> tuple[list[str], pd.DataFrame]:
    rng = np.random.default_rng(seed)
    items = [f"t{k:03d}" for k in range(120)]
    rows = []
    for _ in range(900):
        rows.append({"item_id": f"t{rng.integers(0, 100):03d}", "rater": str(rng.choice(["b", "o1", "o2"])),
                     "condition": str(rng.choice(["", "order-b", "no-profile", "in-sample"])),
                     "rater_kind": str(rng.choice(["llm", "llm", "trained", "human"])),
                     "label": rng.choice(["yes", "no", "maybe", None]), "meta": rng.choice(np.array(METAS, object))})
    labels = pd.DataFrame(rows).drop_duplicates(["item_id", "rater", "condition"])
    with connect(path) as con:
        upsert(con, "items", pd.DataFrame({"item_id": items, "dataset": "d", "stage": "relevance", "user_id": "u",
                                           "prompt_index": 0, "attribute": None, "position": None, "payload": "{}"}))
        upsert(con, "items", pd.DataFrame({"item_id": ["x1"], "dataset": "other", "stage": "relevance",
                                           "user_id": "u", "prompt_index": 0, "attribute": None, "position": None,
                                           "payload": "{}"}))
        upsert(con, "labels", labels.assign(raw=None, reason=None, run_id="r",
                                            error=[None if v is not None else "x" for v in labels["label"]])[
            ["item_id", "rater", "rater_kind", "condition", "label", "raw", "reason", "error", "run_id", "meta"]])
    return items, labels


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sql_counts_give_the_per_label_oracles_queue_in_every_order(tmp_path: Path, seed: int):
    db = tmp_path / "q.duckdb"
    items, _ = _random_store(db, seed)
    stored_items, per_label = annotate.queue_inputs(db, "relevance", "d")
    assert stored_items == items
    for best in ("b", "o2", "nobody", ""):
        got_items, scores = annotate.queue_inputs(db, "relevance", "d", meta_of=best)
        assert got_items == items
        oracle = annotate.item_scores(per_label, best or None)
        assert scores["item_id"].tolist() == items  # every item, those without a judge label counted 0
        labelled = scores[scores["total"] > 0].reset_index(drop=True)
        pd.testing.assert_frame_equal(labelled, oracle.reset_index(drop=True), check_dtype=False)
        for order in ORDERS:
            for s in (0, 5):
                a = annotate.order_items(items, scores, order, best_judge=best or None, seed=s)
                b = annotate.order_items(items, per_label, order, best_judge=best or None, seed=s)
                pd.testing.assert_frame_equal(a, b)


def test_an_empty_dataset_and_the_certainty_ranks(tmp_path: Path):
    db = tmp_path / "q.duckdb"
    _random_store(db, 3)
    items, scores = annotate.queue_inputs(db, "relevance", "other", meta_of="b")
    assert items == ["x1"] and scores["total"].tolist() == [0]
    for order in ORDERS:
        assert list(annotate.order_items(items, scores, order, best_judge="b")["item_id"]) == ["x1"]
    values = pd.Series([0.3, 0.1, 0.3, 0.9, 0.1, 0.3])
    distinct = values.value_counts()
    twice = annotate._twice_ranks(distinct.index.to_numpy(float), distinct.to_numpy(np.int64))
    assert dict(zip(distinct.index, twice / 2, strict=True)) == values.rank().groupby(values).first().to_dict()
    # The mean percentile rank is one division: the same whatever order the ranks come in.
    assert annotate._mean_rank([7], [3], 6)[0] == 7 / 36 and np.isnan(annotate._mean_rank([0], [0], 6)[0])
