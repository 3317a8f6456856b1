"""``diagnose`` reads the parsed judge labels once (issue 20): its inputs equal their per-label definitions.

:func:`personagap.analysis.diagnosis_store.diagnose_store` hands the judge counts it has already counted
(:func:`personagap.store.aggregates.label_counts`) to :func:`personagap.store.aggregates.diagnosis_inputs`, which
then reads only the other labels for its summary. The frames must be those of the per-label definitions, as
without the counts (tests/analysis/test_diagnosis_inputs.py).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given

from personagap.analysis import comparable as c
from personagap.store import connect, load_labels
from personagap.store.aggregates import diagnosis_inputs, item_humans_table, label_counts, multi_human_labels
from tests.support.diagnosis_inputs import STORE_EXAMPLES, expected_inputs, same_frame, stored, stores, write_store


@pytest.mark.slow
@STORE_EXAMPLES
@given(stores())
def test_inputs_from_the_judge_counts_equal_their_definitions(store: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    items, labels = store
    with stored(items, labels) as con:
        judges = label_counts(con, None)[0]
        got = diagnosis_inputs(con, judge_counts=judges)
        rows = load_labels(con)
    for name, expected in expected_inputs(rows, items).items():
        same_frame(got[name], expected)


def test_the_judge_counts_are_what_is_summed(tmp_path: Path) -> None:
    # Counts that leave a judge out change the inventory: the summary is built from them, not read again.
    items = pd.DataFrame([("i0", "d1", "relevance", "u0")], columns=["item_id", "dataset", "stage", "user_id"])
    labels = pd.DataFrame([("i0", "ann", "human", "", "yes"), ("i0", "gpt", "llm", "", "no")],
                          columns=["item_id", "rater", "rater_kind", "condition", "label"])
    db = tmp_path / "d.duckdb"
    write_store(db, items, labels)
    with connect(db, read_only=True) as con:
        judges = label_counts(con, None)[0]
        full = diagnosis_inputs(con, judge_counts=judges)["inventory"]
        none = diagnosis_inputs(con, judge_counts=judges.iloc[0:0])["inventory"]
    assert int(full["n_judge_labels"].iloc[0]) == 1 and int(full["n_labels"].iloc[0]) == 2
    assert int(none["n_judge_labels"].iloc[0]) == 0 and int(none["n_labels"].iloc[0]) == 1


def _humans_per_item(frame: pd.DataFrame) -> pd.Series:
    # Blind individual humans: a judge's most over the items read is its blind top item's (deterministic; which
    # item an anchored tie picks is not).
    person = frame[(frame["rater_kind"] == "human") & (frame["condition"] == c.BLIND) & frame["label"].notna()]
    return person.groupby("item_id")["rater"].nunique()


@pytest.mark.slow
@STORE_EXAMPLES
@given(stores())
def test_the_shared_item_humans_give_the_same_inputs(store: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    # diagnose counts the humans per item once (item_humans_table) for the ceiling's items and the alt-test's.
    items, labels = store
    with stored(items, labels) as con:
        judges = label_counts(con, None)[0]
        with item_humans_table(con) as humans:
            got = diagnosis_inputs(con, judge_counts=judges, item_humans=humans)
            keys = list(items[["stage", "dataset"]].drop_duplicates().itertuples(index=False, name=None))
            shared = {(s, d): multi_human_labels(con, s, d, min_humans=2, item_humans=humans) for s, d in keys}
            # With the judges counted: the top items are looked for on the items with the most humans first.
            mine = {(s, d): judges[(judges["stage"] == s) & (judges["dataset"] == d)] for s, d in keys}
            fast = {key: multi_human_labels(con, *key, min_humans=2, item_humans=humans, judges=mine[key])
                    for key in keys}
        alone = {key: multi_human_labels(con, *key, min_humans=2) for key in shared}
        rows = load_labels(con)
    for name, expected in expected_inputs(rows, items).items():
        same_frame(got[name], expected)
    for key in shared:
        # The same items several humans labelled; each judge's top item (ties may pick another) as crowded.
        b = _humans_per_item(alone[key])
        for frame in (shared[key], fast[key]):
            a = _humans_per_item(frame)
            assert set(a[a >= 2].index) == set(b[b >= 2].index)
            assert _top_counts(frame, a) == _top_counts(alone[key], b)


def _top_counts(frame: pd.DataFrame, humans: pd.Series) -> dict[tuple[str, str], float]:
    # Per comparable judge, the most humans on an item it labelled among the items read: its top item's count
    # (other raters' labels come with whichever items are read).
    judged = frame[c.comparable_judge_mask(frame) & frame["label"].notna()]
    counts = humans.reindex(judged["item_id"]).fillna(0).to_numpy()
    return judged.assign(c=counts).groupby(["rater", "condition"])["c"].max().to_dict()


def test_the_item_with_most_humans_is_every_judges_top(tmp_path: Path) -> None:
    # Every judge labelled the item with the most humans: it is their top item, found without their other labels;
    # a judge that did not label it sends the search back to every judge label.
    from personagap.store.aggregates import _shared_tops

    items = pd.DataFrame([(f"i{k}", "d1", "relevance", f"u{k}") for k in range(3)],
                         columns=["item_id", "dataset", "stage", "user_id"])
    rows = [("i0", "ann", "human", "", "yes"), ("i0", "bob", "human", "", "no"), ("i1", "ann", "human", "", "yes")]
    rows += [(f"i{k}", judge, "llm", "", "yes") for k in range(3) for judge in ("gpt", "claude")]
    db = tmp_path / "d.duckdb"
    write_store(db, items, pd.DataFrame(rows + [("i2", "late", "llm", "", "no")],
                                   columns=["item_id", "rater", "rater_kind", "condition", "label"]))
    with connect(db, read_only=True) as con:
        judges = label_counts(con, None)[0]
        with item_humans_table(con) as humans:
            # The blind top (2 humans); the anchored one is any item with a human (none has an anchored human).
            keys = {(str(r), str(k), str(c)) for r, k, c in judges[["rater", "rater_kind", "condition"]].itertuples(
                index=False)}
            tops = _shared_tops(con, humans, "relevance", "d1", keys - {("late", "llm", "")})
            assert tops is not None and "i0" in tops and set(tops) <= {"i0", "i1"}
            assert _shared_tops(con, humans, "relevance", "d1", keys) is None
            # A judge of no label here (as the store-wide judge set may hold) refuses the shortcut, never misleads.
            assert _shared_tops(con, humans, "relevance", "d1", keys | {("elsewhere", "llm", "")}) is None
            fast = multi_human_labels(con, "relevance", "d1", min_humans=2, item_humans=humans,
                                      judges=judges[judges["rater"] != "late"])
        alone = multi_human_labels(con, "relevance", "d1", min_humans=2)
    assert "i0" in set(fast["item_id"]) <= {"i0", "i1"}  # i2 (no human) is no judge's top item
    assert "i0" in set(alone["item_id"])


@pytest.mark.slow
@STORE_EXAMPLES
@given(stores())
def test_the_alt_test_reads_what_its_definition_says_with_the_store_judges(
        store: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    # Called alone (no judges given: every judge of the store stands for the dataset's, two datasets may differ),
    # the read holds every label of the items several blind humans labelled, and each judge's item with the most
    # blind humans, as counted on every stored label.
    items, labels = store
    with stored(items, labels) as con:
        rows = load_labels(con)
        keys = list(items[["stage", "dataset"]].drop_duplicates().itertuples(index=False, name=None))
        got = {key: multi_human_labels(con, *key, min_humans=2) for key in keys}
    for (stage, dataset), frame in got.items():
        everything = rows[(rows["stage"] == stage) & (rows["dataset"] == dataset)]
        full, read = _humans_per_item(everything), _humans_per_item(frame)
        assert set(read[read >= 2].index) == set(full[full >= 2].index)
        crowded = set(full[full >= 2].index)
        assert set(frame.loc[frame["item_id"].isin(crowded), "rater"]) == set(
            everything.loc[everything["item_id"].isin(crowded), "rater"])
        assert _top_counts(frame, read) == _top_counts(everything, full)
