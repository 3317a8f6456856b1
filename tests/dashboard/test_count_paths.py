"""The dashboard's count paths (issue 31) against per-label oracles: pairwise matrix, position/length bias, pilot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from personagap.analysis.pairwise import pairwise_agreement, pairwise_from_counts
from personagap.dashboard import data, queries
from personagap.store import opened
from personagap.store.dashboard_reads import agreement_counts, bias_labels, human_rater_counts
from tests.support import oracles


def _counts_of(labels: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int], list[str], list[str]]:
    """A long label frame counted as ``agreement_counts`` counts it (pairs once, rater_a < rater_b)."""
    wide = labels.merge(labels, on=["item_id", "cluster"], suffixes=("_a", "_b"))
    wide = wide[wide["rater_a"] < wide["rater_b"]].rename(columns={"cluster": "user_id"})
    pairs = wide.groupby(["rater_a", "rater_b", "user_id", "label_a", "label_b"]).size().rename("n").reset_index()
    items = labels.groupby("rater").size().astype(int).to_dict()
    return pairs, items, sorted(labels["cluster"].unique()), sorted(labels["label"].unique())


def _assert_same(counted, oracle) -> None:
    pd.testing.assert_frame_equal(counted.matrix, oracle.matrix, check_exact=True)
    pd.testing.assert_frame_equal(counted.overlap, oracle.overlap, check_exact=True)
    assert counted.n_clusters == oracle.n_clusters
    assert set(counted.tables) == set(oracle.tables)
    for key, tables in oracle.tables.items():
        np.testing.assert_array_equal(counted.tables[key], tables)
    assert counted.points == oracle.points
    assert counted.groups.keys() == oracle.groups.keys()
    for kind, g in oracle.groups.items():
        c = counted.groups[kind]
        assert (c.n_pairs, c.n_items, c.n_users) == (g.n_pairs, g.n_items, g.n_users)
        np.testing.assert_array_equal([c.mean_kappa.value, *c.mean_kappa.ci], [g.mean_kappa.value, *g.mean_kappa.ci])


def _sparse_labels(seed: int, raters: list[str], labels: list[object]) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for item in range(400):
        user = f"u{rng.integers(0, 25)}"
        for r in raters:
            if rng.random() < 0.75:  # sparse: pairs share different items, some pairs few
                rows.append({"item_id": f"i{item}", "rater": r, "label": labels[rng.integers(0, len(labels))],
                             "cluster": user})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_pairwise_from_counts_is_the_per_label_matrix(seed: int):
    raters = ["h1", "h2", "j-b", "j-a", "h0"]
    labels = _sparse_labels(seed, raters, ["no", "yes", "maybe"])
    groups = {r: "human" if r.startswith("h") else "judge" for r in raters}
    oracle = oracles.pairwise_per_label(labels, groups)
    _assert_same(pairwise_from_counts(*_counts_of(labels), groups), oracle)
    _assert_same(pairwise_agreement(labels, groups), oracle)  # the frame adapter: counted, then the count path
    # A pair below the overlap threshold: NaN in both, overlap still counted.
    few = labels[~((labels["rater"] == "h0") & (labels["item_id"].str.len() > 2))]
    oracle = oracles.pairwise_per_label(few, groups)
    assert oracle.matrix.isna().to_numpy().any()
    _assert_same(pairwise_from_counts(*_counts_of(few), groups), oracle)
    _assert_same(pairwise_agreement(few, groups), oracle)
    # Only pairs with a human scored: judge–judge keeps its overlap but no kappa.
    oracle = oracles.pairwise_per_label(labels, groups, anchor_group="human")
    assert "judge–judge" not in oracle.groups and np.isnan(oracle.matrix.loc["j-a", "j-b"])
    _assert_same(pairwise_from_counts(*_counts_of(labels), groups, anchor_group="human"), oracle)
    _assert_same(pairwise_agreement(labels, groups, anchor_group="human"), oracle)


@pytest.mark.parametrize("seed", [0, 1])
def test_pairwise_counts_code_twelve_ordinal_levels_in_order(seed: int):
    """Integer codes 0..11 with their levels: 10 and 11 follow 9 (sorting them as text would put them after 1)."""
    raters = ["h1", "h2", "h3", "j1"]
    labels = _sparse_labels(seed, raters, list(range(12)))
    groups = {r: "human" if r.startswith("h") else "llm" for r in raters}
    levels = np.arange(12, dtype=float) ** 1.5
    oracle = oracles.pairwise_per_label(labels, groups, metric="weighted_kappa", levels=levels)
    _assert_same(pairwise_agreement(labels, groups, metric="weighted_kappa", levels=levels), oracle)
    pairs, items, users, _ = _counts_of(labels)
    shuffled = [11, 3, 10, 0, 9, 1, 2, 8, 4, 7, 5, 6]
    _assert_same(pairwise_from_counts(pairs, items, users, shuffled, groups, metric="weighted_kappa",
                                      levels=levels), oracle)
    # A level no rater used still has its row and column: the codes are the scale's, passed as every code.
    unused = labels[labels["label"] != 4]
    oracle = oracles.pairwise_per_label(unused, groups, metric="weighted_kappa", levels=levels)
    _assert_same(pairwise_agreement(unused, groups, metric="weighted_kappa", levels=levels), oracle)
    pairs, items, users, _ = _counts_of(unused)
    _assert_same(pairwise_from_counts(pairs, items, users, range(12), groups, metric="weighted_kappa",
                                      levels=levels), oracle)


def test_pairwise_agreement_rejects_two_labels_per_item_and_rater():
    labels = pd.DataFrame({"item_id": ["i1", "i1", "i2"], "rater": ["h1", "h1", "h2"], "label": ["yes", "no", "no"],
                           "cluster": ["u1", "u1", "u2"]})
    with pytest.raises(ValueError, match="more than one label"):
        pairwise_agreement(labels, {"h1": "human", "h2": "human"})


def test_pairwise_agreement_with_no_shared_items():
    labels = pd.DataFrame({"item_id": ["i1", "i2"], "rater": ["h1", "h2"], "label": ["yes", "no"],
                           "cluster": ["u1", "u2"]})
    groups = {"h1": "human", "h2": "human"}
    _assert_same(pairwise_agreement(labels, groups, min_overlap=1),
                 oracles.pairwise_per_label(labels, groups, min_overlap=1))
    empty = labels.iloc[:0]
    _assert_same(pairwise_agreement(empty, groups), oracles.pairwise_per_label(empty, groups))


def test_store_counts_match_agreement_labels(recenter_db: Path):
    for dataset in ("recenter-pilot", "recenter-stage2"):
        labels = queries.agreement_labels(recenter_db, "relevance", dataset)
        with opened(recenter_db, read_only=True) as con:
            counts = agreement_counts(con, "relevance", dataset)
        pairs, items, users, categories = _counts_of(
            labels[["item_id", "rater", "label", "cluster"]].drop_duplicates(["item_id", "rater"]))
        got = counts.pairs.sort_values(["rater_a", "rater_b", "user_id", "label_a", "label_b"], ignore_index=True)
        pd.testing.assert_frame_equal(got, pairs.astype({"n": "int64"}), check_dtype=False)
        assert dict(zip(counts.raters["rater"], counts.raters["items"], strict=True)) == items
        assert (counts.users, counts.categories) == (users, categories)
        with opened(recenter_db, read_only=True) as con:  # the list patterns (too many codes for a bit mask)
            listed = agreement_counts(con, "relevance", dataset, mask_bits=0)
        pd.testing.assert_frame_equal(listed.pairs, counts.pairs)
        pd.testing.assert_frame_equal(listed.raters, counts.raters)
        assert (listed.users, listed.categories) == (counts.users, counts.categories)


def test_relevance_bias_counts_equal_per_label_oracle(recenter_db: Path):
    with opened(recenter_db, read_only=True) as con:
        labels = bias_labels(con, "relevance")
    expected = oracles.relevance_bias(labels)
    assert len(expected) > 10
    pd.testing.assert_frame_equal(data.relevance_bias.__wrapped__(str(recenter_db), "relevance"), expected,
                                  check_exact=True)


def test_pilot_report_reads_only_datasets_with_two_human_raters(recenter_db: Path):
    with opened(recenter_db, read_only=True) as con:
        raters = human_rater_counts(con, "relevance")
    assert raters["recenter-pilot"] >= 2
    report = data.pilot_report.__wrapped__(str(recenter_db))
    assert report is not None and report["dataset"] == "recenter-pilot"
