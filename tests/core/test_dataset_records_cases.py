"""The dataset record's reader, case by case: what a stored record, a legacy entry and the items each decide.

Written against the mutants that survived ``bash .ci/mutation`` on ``personagap/datasets.py``: each test is a
promise of the module docstring (a stored record wins over inference, one dataset's labels never reach another's
scale, an unlabelled verification dataset is on ok/bad/unsure and only then, ...).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from personagap.datasets import build_records, default_question, record_meta
from personagap.records import PAIRWISE_LABELS, DatasetRecord, DatasetScale

COLUMNS = ["stage", "dataset", "rater_kind", "condition", "label"]


def _items(stage: str, dataset: str, **kinds: int) -> pd.DataFrame:
    """Item counts per kind of one dataset, as ``dataset_records`` reads them."""
    return pd.DataFrame({"stage": stage, "dataset": dataset, "item_kind": list(kinds), "n": list(kinds.values())})


def _labels(stage: str, dataset: str, labels: list[str], kind: str = "human") -> pd.DataFrame:
    return pd.DataFrame([(stage, dataset, kind, "", lab) for lab in labels], columns=COLUMNS)


def _one(items: pd.DataFrame, labels: pd.DataFrame, meta: dict[str, str] | None = None) -> DatasetRecord:
    (rec,) = build_records(items, labels, meta or {}).values()
    return rec


def test_a_stored_item_kind_and_question_win_over_the_items() -> None:
    # The payload says pairwise, the import said single responses with a yes/no question: the record stands.
    stored = DatasetRecord(stage="response", dataset="d", item_kind="single", question="Fits?",
                           scale=DatasetScale(kind="nominal", categories=("no", "yes")), declared=True)
    rec = _one(_items("response", "d", pairwise=4), _labels("response", "d", ["yes", "no"]), record_meta(stored))
    assert rec == stored


def test_a_dataset_name_with_a_colon_round_trips() -> None:
    stored = DatasetRecord(stage="response", dataset="usr:tc", item_kind="single", question="Engaging?",
                           scale=DatasetScale(kind="ordinal", categories=("1", "2", "3")), declared=True)
    assert build_records(_items("response", "usr:tc", single=2), pd.DataFrame(columns=COLUMNS),
                         record_meta(stored)) == {("response", "usr:tc"): stored}


def test_a_kind_without_a_default_question_gets_none_made_up() -> None:
    assert default_question("relevance", "single") == ""
    assert default_question("relevance", "relevance") != ""


def test_a_legacy_entry_declares_categories_but_is_not_a_stored_record() -> None:
    meta = {"labels:d:relevance": json.dumps({"stage": "relevance", "categories": ["maybe", "no", "yes"]})}
    # No items stored for it yet: the stage says what its items are.
    rec = _one(_items("relevance", "other", relevance=0).iloc[:0], _labels("relevance", "d", ["yes", "no"]), meta)
    assert (rec.dataset, rec.item_kind) == ("d", "relevance")
    assert rec.scale == DatasetScale(kind="nominal", categories=("maybe", "no", "yes"))
    assert not rec.declared and rec.question == default_question("relevance", "relevance")


@pytest.mark.parametrize(("kinds", "expected"), [({"single": 3, "pairwise": 5}, "pairwise"),
                                                 ({"single": 5, "pairwise": 3}, "single"),
                                                 ({"single": 4, "pairwise": 4}, "pairwise")])
def test_the_most_common_item_kind_decides_and_a_tie_never_depends_on_row_order(kinds: dict[str, int],
                                                                                 expected: str) -> None:
    for order in (kinds, dict(reversed(kinds.items()))):
        assert _one(_items("response", "d", **order), pd.DataFrame(columns=COLUMNS)).item_kind == expected


def test_one_datasets_labels_never_reach_anothers_scale() -> None:
    items = pd.concat([_items("relevance", "a", relevance=3), _items("relevance", "b", relevance=3),
                       _items("response", "a", single=3)])
    labels = pd.concat([_labels("relevance", "a", ["yes", "no"]), _labels("relevance", "b", ["x", "y", "z"]),
                        _labels("response", "a", ["good", "bad"])])
    records = build_records(items, labels, {})
    assert records[("relevance", "a")].scale.categories == ("no", "yes")
    assert records[("relevance", "b")].scale.categories == ("x", "y", "z")
    assert records[("response", "a")].scale.categories == ("bad", "good")


def test_origin_is_real_unless_the_store_says_synthetic() -> None:
    items, labels = _items("relevance", "d", relevance=2), _labels("relevance", "d", ["yes"])
    assert _one(items, labels).origin == "real"
    assert _one(items, labels, {"origin:d": "synthetic"}).origin == "synthetic"
    assert _one(items, labels, {"origin:other": "synthetic"}).origin == "real"


def test_a_pairwise_dataset_holding_other_labels_keeps_the_whole_pairwise_scale() -> None:
    rec = _one(_items("response", "d", pairwise=3), _labels("response", "d", ["A", "B", "yes"]))
    assert rec.scale == DatasetScale(kind="nominal", categories=tuple(sorted({*PAIRWISE_LABELS, "yes"})))


def test_only_an_unlabelled_verification_dataset_falls_back_to_ok_bad_unsure() -> None:
    verdicts = _one(_items("extraction", "d", verification=2), _labels("extraction", "d", ["ok", "bad"]))
    assert verdicts.scale.categories == ("bad", "ok")  # what its raters used: no category added
    relevance = _one(_items("relevance", "d", relevance=2), pd.DataFrame(columns=COLUMNS))
    assert relevance.scale.categories == ("no", "yes")  # an unlabelled relevance dataset keeps the yes/no fallback


def test_ordinal_levels_count_every_judge_kind_and_no_other_rater() -> None:
    meta = {"labels:r:response": json.dumps({"stage": "response", "scale": "ordinal"})}
    labels = pd.concat([_labels("response", "r", ["2"]), _labels("response", "r", ["4"], "human_majority"),
                        _labels("response", "r", ["1"], "llm"), _labels("response", "r", ["5"], "trained"),
                        _labels("response", "r", ["3"], "baseline"), _labels("response", "r", ["9"], "simulated")])
    rec = _one(_items("response", "r", single=2), labels, meta)
    assert rec.scale == DatasetScale(kind="ordinal", categories=("1", "2", "3", "4", "5"))


@pytest.mark.parametrize(("stage", "kind"), [("extraction", "verification"), ("relevance", "relevance"),
                                             ("response", "single")])
def test_a_dataset_without_items_takes_its_stages_item_kind(stage: str, kind: str) -> None:
    meta = {f"labels:d:{stage}": json.dumps({"stage": stage, "categories": ["p", "q"]})}
    rec = _one(pd.DataFrame(columns=["stage", "dataset", "item_kind", "n"]), pd.DataFrame(columns=COLUMNS), meta)
    assert (rec.stage, rec.item_kind, rec.scale.categories) == (stage, kind, ("p", "q"))
