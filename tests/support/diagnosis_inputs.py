"""Small random stores (hypothesis), and ``diagnose``'s inputs defined label by label in pandas with the rule's masks.

Shared by the tests of ``personagap.store.aggregates.diagnosis_inputs`` and of ``diagnose`` reading them once.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pandas as pd
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from personagap.analysis import comparable as c
from personagap.store import connect, upsert

_RATERS = (("ann", "human", c.BLIND), ("bob", "human", c.BLIND), ("cy", "human", c.SHOWN_LLM),
           ("maj", "human_majority", c.BLIND), ("gpt", "llm", c.BLIND), ("gpt", "llm", "no-profile"),
           ("fit", "trained", c.IN_SAMPLE))


@st.composite
def stores(draw: st.DrawFn) -> tuple[pd.DataFrame, pd.DataFrame]:
    items, labels = [], []
    for i in range(draw(st.integers(1, 12))):
        stage = draw(st.sampled_from(("relevance", "response", "extraction")))
        items.append((f"i{i}", draw(st.sampled_from(("d1", "d2"))), stage, f"u{i % 3}"))
        for rater, kind, condition in draw(st.lists(st.sampled_from(_RATERS), max_size=6, unique=True)):
            labels.append((f"i{i}", rater, kind, condition, draw(st.none() | st.sampled_from(("yes", "no")))))
    return (pd.DataFrame(items, columns=["item_id", "dataset", "stage", "user_id"]),
            pd.DataFrame(labels, columns=["item_id", "rater", "rater_kind", "condition", "label"]))


def write_store(path: Path, items: pd.DataFrame, labels: pd.DataFrame) -> None:
    with connect(path) as con:
        upsert(con, "items", items.assign(prompt_index=0, attribute=None, position=None, payload="{}")[
            ["item_id", "dataset", "stage", "user_id", "prompt_index", "attribute", "position", "payload"]])
        if not labels.empty:
            rows = labels.assign(raw=None, reason=None, run_id="r", meta=None,
                                 error=[None if v is not None else "unparseable: x" for v in labels["label"]])
            upsert(con, "labels", rows[["item_id", "rater", "rater_kind", "condition", "label", "raw", "reason",
                                        "error", "run_id", "meta"]])


STORE_EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])


@contextlib.contextmanager
def stored(items: pd.DataFrame, labels: pd.DataFrame) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection to a temporary store holding ``items`` and ``labels`` (:func:`write_store`)."""
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "d.duckdb"
        write_store(db, items, labels)
        with connect(db, read_only=True) as con:
            yield con


def same_frame(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    cols = list(expected.columns)
    assert list(got.columns) == cols
    a = got.sort_values(cols).reset_index(drop=True)
    b = expected.sort_values(cols).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, check_dtype=False)


def expected_inputs(labels: pd.DataFrame, items: pd.DataFrame) -> dict[str, pd.DataFrame]:
    judge = c.comparable_judge_mask(labels)
    blind = c.blind_human_mask(labels) & (labels["rater_kind"] == "human")
    anchored = c.anchored_human_mask(labels) & (labels["rater_kind"] == "human")
    parsed = labels["label"].notna()
    keys = ["stage", "dataset", "rater", "rater_kind", "condition"]
    failures = labels[judge & ~parsed].groupby(keys).size().rename("failures").reset_index()
    counted = labels[blind & parsed].groupby("item_id").size()
    multi = labels["item_id"].isin(counted[counted >= 2].index) & parsed
    humans = labels.loc[multi & blind, ["stage", "dataset", "item_id", "rater", "label", "user_id"]]
    judge_items = labels.loc[multi & judge, ["stage", "dataset", "item_id", "rater", "rater_kind", "condition",
                                             "label", "user_id"]]
    human_rows = []
    for (stage, dataset), rows in labels[parsed & (labels["rater_kind"] == "human")].groupby(["stage", "dataset"]):
        b, a = rows[blind.loc[rows.index]], rows[anchored.loc[rows.index]]
        human_rows.append((stage, dataset, b["rater"].nunique(), len(b), a["rater"].nunique(), len(a)))
    human_counts = pd.DataFrame(human_rows, columns=["stage", "dataset", "blind_raters", "blind_labels",
                                                     "anchored_raters", "anchored_labels"])
    inventory = pd.DataFrame([
        (stage, int((items["stage"] == stage).sum()), int((labels["stage"] == stage).sum()),
         int(((labels["stage"] == stage) & labels["rater_kind"].isin(["human", "human_majority"])).sum()),
         int(((labels["stage"] == stage) & judge).sum()))
        for stage in sorted(set(items["stage"]))],
        columns=["stage", "n_items", "n_labels", "n_human_labels", "n_judge_labels"])
    return {"failures": failures, "humans": humans, "judge_items": judge_items, "human_counts": human_counts,
            "inventory": inventory}
