"""multi_human_labels (issue 20, build item 3): what the alternative-annotator test reads, counted by DuckDB.

Guarantees checked on random stores against a pandas count of the same labels: every label of every item with
``min_humans`` distinct blind (or anchored) humans is returned, and for every judge the returned items include one
with as many humans of each protocol as the most it labelled (the test's "at most N per item" reason).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from personagap.analysis.comparable import ANCHORED, BLIND, SHOWN_LLM, blind_human_mask, comparable_judge_mask
from personagap.store import load_labels, multi_human_labels, opened, upsert


def _store(tmp_path: Path, seed: int) -> Path:
    """A random relevance dataset: 0-4 humans per item (blind or after seeing an LLM), 3 judges on most items and
    one only on items with at most one human."""
    rng = np.random.default_rng(seed)
    n_items = 60
    items = pd.DataFrame({"item_id": [f"i{k}" for k in range(n_items)], "dataset": "ds", "stage": "relevance",
                          "user_id": [f"u{k % 7}" for k in range(n_items)], "prompt_index": None,
                          "attribute": None, "position": None, "payload": None})
    rows = []
    for item in items["item_id"]:
        # Humans per item skewed low, so the single-human shortcut and the crowded items both occur.
        humans = rng.choice(6, size=rng.choice([0, 1, 1, 2, 3, 4]), replace=False)
        for h in humans:
            rows.append((item, f"h{h}", "human", SHOWN_LLM if rng.random() < 0.3 else BLIND))
        if len(humans) <= 1:
            rows.append((item, "j-lone", "llm", BLIND))  # a judge whose most crowded item has one human
        for j in ("j1", "j2", "j3"):
            if rng.random() < 0.8:
                rows.append((item, j, "llm", BLIND))
    labels = pd.DataFrame(rows, columns=["item_id", "rater", "rater_kind", "condition"]).assign(
        label=lambda f: np.where(rng.random(len(f)) < 0.5, "yes", "no"), raw=None, reason=None, error=None,
        run_id="r", meta=None)
    db = tmp_path / f"s{seed}.duckdb"
    with opened(db) as con:
        upsert(con, "items", items)
        upsert(con, "labels", labels)
    return db


def _humans_per_item(labels: pd.DataFrame, anchored: bool) -> pd.Series:
    mask = labels["condition"].isin(ANCHORED) & labels["rater_kind"].eq("human") if anchored \
        else blind_human_mask(labels)
    return labels[mask].groupby("item_id")["rater"].nunique()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("min_humans", [2, 3, 5])  # 5: no item is crowded, every judge's top item is read alone
def test_every_crowded_item_and_each_judges_most_crowded_item(tmp_path: Path, seed: int, min_humans: int) -> None:
    db = _store(tmp_path, seed)
    with opened(db, read_only=True) as con:
        everything = load_labels(con, stage="relevance")
        got = multi_human_labels(con, "relevance", "ds", min_humans=min_humans)
    for anchored in (False, True):
        per_item = _humans_per_item(everything, anchored)
        crowded = set(per_item.index[per_item >= min_humans])
        expected = everything[everything["item_id"].isin(crowded)]
        returned = got[got["item_id"].isin(crowded)]
        assert len(returned) == len(expected)  # every label of every crowded item, once
        judges = everything[comparable_judge_mask(everything) & everything["label"].notna()]
        kept = set(got["item_id"])
        for judge, rows in judges.groupby("rater"):
            most = per_item.reindex(rows["item_id"]).fillna(0).max()
            on_kept = per_item.reindex([i for i in rows["item_id"] if i in kept]).fillna(0)
            assert on_kept.max() == most, (judge, anchored)
