"""The comparability rule's smaller promises, each one a mutant of ``bash .ci/mutation`` used to survive.

The SQL predicates select the rows the pandas masks select, the display name has one text in pandas and SQL, the
vectorised majority is the per-item one, and the category set counts exactly the labels on the scale.
"""

from __future__ import annotations

import itertools

import duckdb
import numpy as np
import pandas as pd

from personagap.analysis import comparable as c

_KINDS = ("human", "human_majority", "llm", "trained", "baseline", "simulated")
_CONDITIONS = (c.BLIND, c.SHOWN_LLM, c.SHOWN_LLM_RATING, c.CONVERTED_SHOWN_LLM, c.ANCHORED_MAJORITY, c.IN_SAMPLE,
               "no-profile", "overall")


def _every_kind_and_condition() -> pd.DataFrame:
    rows = [(f"i{n}", f"r{n}", kind, cond, "yes") for n, (kind, cond) in
            enumerate(itertools.product(_KINDS, _CONDITIONS))]
    return pd.DataFrame(rows, columns=["item_id", "rater", "rater_kind", "condition", "label"])


def _sql_rows(labels: pd.DataFrame, predicate: str) -> list[str]:
    with duckdb.connect() as con:
        con.register("labels", labels)
        return [r for (r,) in con.execute(f"SELECT rater FROM labels l WHERE {predicate} ORDER BY rater").fetchall()]


def test_the_sql_predicates_select_the_rows_the_masks_select() -> None:
    labels = _every_kind_and_condition()
    for mask, sql in ((c.blind_human_mask, c.blind_human_sql()), (c.anchored_human_mask, c.anchored_human_sql()),
                      (c.comparable_judge_mask, c.comparable_judge_sql())):
        expected = sorted(labels.loc[mask(labels), "rater"])
        assert expected and _sql_rows(labels, sql) == expected


def test_a_missing_condition_is_the_blind_one() -> None:
    labels = pd.DataFrame({"rater_kind": ["human", "llm", "trained"], "condition": [None, c.BLIND, np.nan],
                           "label": ["maybe", "yes", "no"], "item_id": ["x", "x", "x"]})
    assert c.roles(labels).tolist() == ["blind_human", "judge", "judge"]
    assert c.categories_for(labels) == ["maybe", "no", "yes"]


def test_judge_display_is_one_text_in_pandas_and_sql() -> None:
    assert c.judge_display("gpt", c.BLIND) == "gpt"
    assert c.judge_display("gpt", "no-profile") == "gpt [no-profile]"
    labels = _every_kind_and_condition()
    with duckdb.connect() as con:
        con.register("labels", labels)
        got = con.execute(f"SELECT rater, condition, {c.judge_display_sql()} FROM labels l").fetchall()
    assert [shown for _, _, shown in got] == [c.judge_display(r, cond) for r, cond, _ in got]


def test_sql_lists_quote_their_values() -> None:
    values = c._sql_list(["it's", "a"])
    with duckdb.connect() as con:
        [(got,)] = con.execute(f"SELECT [{values}]").fetchall()
    assert got == ["a", "it's"]


def test_majority_labels_is_majority_label_of_every_item() -> None:
    rng = np.random.default_rng(3)
    items = pd.Series(rng.choice([f"i{k}" for k in range(40)], size=200))
    votes = pd.Series(rng.choice(["yes", "no", "maybe"], size=200))
    per_item = {i: c.majority_label(votes[items == i]) for i in sorted(set(items))}
    expected = pd.Series({i: v for i, v in per_item.items() if v is not None}, name="label", dtype=object)
    assert None in per_item.values()  # some ties, so the test sees them dropped
    pd.testing.assert_series_equal(c.majority_labels(items, votes), expected.rename_axis("item_id"))


def test_categories_count_anchored_humans_and_every_judge_label_but_no_other_question() -> None:
    labels = pd.DataFrame([
        ("x", "ann", "human", c.SHOWN_LLM, "A"),  # only anchored humans labelled x (the pilot's task 2)
        ("x", "bob", "human", c.CONVERTED_SHOWN_LLM, "B"),
        ("x", "bob", "human", c.SHOWN_LLM_RATING, "necessary_explicit"),  # the three-way rating: another question
        ("x", "usr", "human", "overall", "4"),  # a human answering another question
        ("x", "gpt", "llm", c.BLIND, "tie"),
        ("x", "fit", "trained", c.IN_SAMPLE, "skip"),  # stored, never compared, still on the dataset's scale
        ("y", "gpt", "llm", c.BLIND, "unseen"),  # no human labelled y: not a category
    ], columns=["item_id", "rater", "rater_kind", "condition", "label"])
    assert c.categories_for(labels) == ["A", "B", "skip", "tie"]
    with duckdb.connect() as con:  # the SQL twin of the item filter keeps the same items
        con.register("labels", labels)
        kept = con.execute(f"SELECT DISTINCT item_id FROM labels l WHERE {c.human_labelled_sql()}").fetchall()
    assert kept == [("x",)]


def test_one_vote_per_rater_prefers_the_anchored_order_whatever_the_row_order() -> None:
    rows = [("x", "ann", c.ANCHORED_MAJORITY, "no"), ("x", "ann", c.CONVERTED_SHOWN_LLM, "no"),
            ("x", "ann", c.SHOWN_LLM, "yes"), ("x", "ann", c.BLIND, "maybe")]
    for order in itertools.permutations(rows):
        frame = pd.DataFrame(list(order), columns=["item_id", "rater", "condition", "label"])
        assert c.one_vote_per_rater(frame)["label"].tolist() == ["yes"]
    frame = pd.DataFrame([r for r in rows if r[2] != c.SHOWN_LLM][::-1], columns=["item_id", "rater", "condition",
                                                                                   "label"])
    assert c.one_vote_per_rater(frame)["condition"].tolist() == [c.CONVERTED_SHOWN_LLM]


def test_the_default_reference_is_the_blind_one() -> None:
    labels = pd.DataFrame([("x", "ann", "human", c.BLIND, "yes"), ("x", "bob", "human", c.SHOWN_LLM, "no")],
                          columns=["item_id", "rater", "rater_kind", "condition", "label"])
    assert c.reference_sql() == c.reference_sql("blind") != c.reference_sql("anchored")
    with duckdb.connect() as con:
        con.register("labels", labels)
        got = con.execute(f"WITH {c.reference_sql()} SELECT item_id, human FROM reference").fetchall()
    assert got == [("x", "yes")] == list(c.reference_labels(labels).items())
