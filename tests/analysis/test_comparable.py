"""The one rule for comparable labels: roles, the majority rule, and the pandas and SQL references agreeing."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

from personagap.analysis import comparable as c


def test_roles_keep_kinds_and_protocols_apart() -> None:
    frame = pd.DataFrame({
        "rater_kind": ["human", "human_majority", "human", "human", "llm", "trained", "trained", "baseline", "human"],
        "condition": ["", "", c.SHOWN_LLM, c.CONVERTED_SHOWN_LLM, "", "", c.IN_SAMPLE, "no-profile", "overall"],
    })
    assert c.roles(frame).tolist() == ["blind_human", "blind_human", "anchored_human", "anchored_human", "judge",
                                       "judge", "excluded", "judge", "other"]
    assert [c.role(k, cond) for k, cond in zip(frame["rater_kind"], frame["condition"], strict=True)] \
        == c.roles(frame).tolist()
    assert [c.rater_group(k) for k in ("human", "human_majority", "llm", "trained", "baseline")] \
        == ["human", "human", "llm", "trained", "baseline"]


def test_majority_label_is_unique_most_frequent_and_ties_are_undecided() -> None:
    assert c.majority_label(["yes", "yes", "no"]) == "yes"
    assert c.majority_label(["yes", "yes", "no", "no"]) is None  # a 2-2 tie is not a majority
    assert c.majority_label(["A", "A", "B", "tie"]) == "A"
    assert c.majority_label([]) is None


def _random_labels(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(300):
        item = f"i{i}"
        if rng.random() < 0.2:  # a stored majority (sometimes two rows that disagree)
            for _ in range(int(rng.integers(1, 3))):
                rows.append((item, "human_majority", "human_majority", rng.choice(["", c.ANCHORED_MAJORITY]),
                             rng.choice(["yes", "no"])))
        for r in range(int(rng.integers(0, 5))):
            cond = rng.choice(["", c.SHOWN_LLM, c.CONVERTED_SHOWN_LLM, c.SHOWN_LLM_RATING, "overall"])
            label = "necessary_explicit" if cond == c.SHOWN_LLM_RATING else rng.choice(["yes", "no"])
            rows.append((item, f"a{r}", "human", cond, label))
            if rng.random() < 0.3:  # the same person again under another anchored condition
                rows.append((item, f"a{r}", "human", rng.choice([c.SHOWN_LLM, c.CONVERTED_SHOWN_LLM]),
                             rng.choice(["yes", "no"])))
        rows.append((item, "gpt", "llm", rng.choice(["", c.IN_SAMPLE]), rng.choice(["yes", "no"])))
    return pd.DataFrame(rows, columns=["item_id", "rater", "rater_kind", "condition", "label"])


@pytest.mark.parametrize("which", ["blind", "anchored"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pandas_and_sql_references_agree(which: str, seed: int) -> None:
    labels = _random_labels(seed)
    mine = c.reference_labels(labels, which).sort_index()  # type: ignore[arg-type]
    con = duckdb.connect()
    con.register("labels", labels)
    sql = con.execute(f"WITH {c.reference_sql(which)} SELECT item_id, human FROM reference ORDER BY 1").fetchall()  # type: ignore[arg-type]
    assert [(str(i), str(v)) for i, v in mine.items()] == [(str(i), str(v)) for i, v in sql]
    assert len(mine) > 20


def test_reference_counts_one_vote_per_person_and_never_a_rating() -> None:
    labels = pd.DataFrame([
        ("x", "a", "human", c.SHOWN_LLM, "yes"), ("x", "a", "human", c.CONVERTED_SHOWN_LLM, "yes"),
        ("x", "b", "human", c.SHOWN_LLM, "no"), ("x", "b", "human", c.SHOWN_LLM_RATING, "necessary_explicit"),
        ("y", "a", "human", "", "yes"), ("y", "b", "human", "", "no"), ("y", "gpt", "llm", "", "yes"),
    ], columns=["item_id", "rater", "rater_kind", "condition", "label"])
    # Item x: a says yes (twice, one vote), b says no: a tie, undecided. Item y: blind 1-1 tie, undecided.
    assert c.reference_labels(labels, "anchored").empty
    assert c.reference_labels(labels, "blind").empty
    assert c.reference_labels(labels[labels["rater"] != "b"], "anchored").to_dict() == {"x": "yes"}
