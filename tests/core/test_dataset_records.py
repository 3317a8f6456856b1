"""The dataset record's reader (personagap.datasets.build_records): stored, legacy and inferred records."""

from __future__ import annotations

import json

import pandas as pd

from personagap.datasets import build_records, record_meta
from personagap.records import DatasetRecord, DatasetScale

COLUMNS = ["stage", "dataset", "rater_kind", "condition", "label"]


def _items(stage: str, kind: str, dataset: str = "d") -> pd.DataFrame:
    return pd.DataFrame({"stage": [stage], "dataset": [dataset], "item_kind": [kind], "n": [4]})


def _labels(stage: str, labels: list[str], dataset: str = "d") -> pd.DataFrame:
    return pd.DataFrame([(stage, dataset, "human", "", lab) for lab in labels], columns=COLUMNS)


def test_unlabelled_verification_dataset_is_on_the_verification_scale() -> None:
    (rec,) = build_records(_items("extraction", "verification"), pd.DataFrame(columns=COLUMNS), {}).values()
    assert rec.scale.categories == ("bad", "ok", "unsure") and not rec.declared


def test_ordinal_levels_are_in_numeric_order_and_one_per_value() -> None:
    meta = {"labels:r:response": json.dumps({"stage": "response", "scale": "ordinal", "categories": None})}
    (rec,) = build_records(_items("response", "single", "r"), _labels("response", ["10", "2", "2.0", "1"], "r"),
                           meta).values()
    assert rec.scale.kind == "ordinal" and rec.scale.levels() == (1.0, 2.0, 10.0)


def test_a_stored_record_wins_over_inference_and_round_trips() -> None:
    stored = DatasetRecord(stage="relevance", dataset="d", item_kind="relevance", question="Asked?", origin="synthetic",
                           scale=DatasetScale(kind="nominal", categories=("maybe", "no", "yes")), declared=True)
    (rec,) = build_records(_items("relevance", "relevance"), _labels("relevance", ["yes", "no"]),
                           record_meta(stored)).values()
    assert rec == stored


def test_pairwise_items_are_on_the_pairwise_scale_without_a_record() -> None:
    (rec,) = build_records(_items("response", "pairwise"), _labels("response", ["A", "B"]), {}).values()
    assert rec.scale == DatasetScale(kind="pairwise", categories=("A", "B", "tie"))
    assert rec.question == "Which of the two answers would this user prefer?"
