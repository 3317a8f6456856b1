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


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_pairwise_from_counts_is_the_per_label_matrix(seed: int):
    rng = np.random.default_rng(seed)
    raters = ["h1", "h2", "j-b", "j-a", "h0"]
    rows = []
    for item in range(400):
        user = f"u{rng.integers(0, 25)}"
        for r in raters:
            if rng.random() < 0.75:  # sparse: pairs share different items, some pairs few
                rows.append({"item_id": f"i{item}", "rater": r, "label": str(rng.choice(["no", "yes", "maybe"])),
                             "cluster": user})
    labels = pd.DataFrame(rows)
    groups = {r: "human" if r.startswith("h") else "judge" for r in raters}
    oracle = pairwise_agreement(labels, groups)
    _assert_same(pairwise_from_counts(*_counts_of(labels), groups), oracle)
    # A pair below the overlap threshold: NaN in both, overlap still counted.
    few = labels[~((labels["rater"] == "h0") & (labels["item_id"].str.len() > 2))]
    oracle = pairwise_agreement(few, groups)
    assert oracle.matrix.isna().to_numpy().any()
    _assert_same(pairwise_from_counts(*_counts_of(few), groups), oracle)


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
