"""`personagap route` on the shared PRISM release: command-r-plus with the full profile states a certainty (1-100).

Every PRISM item has its own user's verdict, so nothing is left for people to label and the routed rate is exact:
the judge's label on kept items, the user's on the others. Checked against a plain pandas count of the stored labels.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.dashboard import annotate
from personagap.store import load_labels, opened
from tests.support.stores import copy_store

JUDGE, CONDITION = "command-r-plus", "all-features"


@pytest.fixture(scope="module")
def prism_db(prism_release_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_store(prism_release_db, tmp_path_factory.mktemp("prism_route"))


def _route(db: Path, *extra: str) -> dict:
    result = CliRunner().invoke(cli, ["route", "--stage", "response", "--dataset", "prism-judge", "--judge",
                                      f"{JUDGE} [{CONDITION}]", "--target-accuracy", "0.85", "--positive", "A",
                                      "--db", str(db), "--json", *extra])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


def _stored(db: Path) -> tuple[pd.DataFrame, pd.Series, pd.Series]:
    """The judge's labels, their confidences, and the blind human reference, by plain pandas over stored labels."""
    with opened(db, read_only=True) as con:
        labels = load_labels(con, stage="response")
    judge = labels[(labels["rater"] == JUDGE) & (labels["condition"] == CONDITION) & labels["label"].notna()]
    confidence = pd.to_numeric(judge["meta"].map(
        lambda m: json.loads(m)["confidence"] if isinstance(m, str) else None))
    humans = labels[labels["rater_kind"].isin(["human", "human_majority"]) & (labels["condition"] == "")]
    human = humans.groupby("item_id")["label"].agg(lambda s: s.iloc[0] if s.nunique() == 1 else None).dropna()
    return labels, judge.assign(confidence=confidence.to_numpy()), human


def test_guaranteed_route_on_prism_tests_the_accuracy_it_claims(prism_db: Path) -> None:
    out = _route(prism_db)
    g = out["threshold"]
    assert out["method"] == "ltt" and g["min_confidence"] is not None
    _, judge, human = _stored(prism_db)
    # Each test's accuracy is the judge's accuracy on the items at or above its threshold that people labelled.
    for test in g["tests"]:
        at = judge[judge["confidence"] >= test["min_confidence"]].set_index("item_id")["label"]
        both = at.index.intersection(human.index)
        assert test["n"] == len(both)
        assert test["accuracy"] == pytest.approx(float((at[both] == human[both]).mean()))
    used = next(t for t in g["tests"] if t["min_confidence"] == g["min_confidence"])
    assert used["rejected"] and used["lower_bound"] >= 0.85 and not g["tests"][-1]["rejected"]
    # Every PRISM item has its user's verdict: an audit of the kept items is labelled at once.
    audited = _route(prism_db, "--audit", "50")
    assert audited["audit"]["drawn"] == audited["audit"]["labelled"] == min(50, audited["estimate"]["kept_by_judge"])
    hr = audited["estimate"]["human_rate"]
    assert hr["ci"][0] < audited["estimate"]["all_human"]["value"] < hr["ci"][1]


def test_route_on_prism_certainty_is_exact_and_held_out(prism_db: Path) -> None:
    out = _route(prism_db, "--method", "split")
    choice, est = out["threshold"], out["estimate"]
    t = choice["min_confidence"]
    assert t is not None and choice["chosen_on"]["accuracy"] >= 0.85
    assert choice["held_out"]["n_users"] >= 20  # reported on users it was not chosen on
    labels, judge, human = _stored(prism_db)
    kept = judge[judge["confidence"] >= t].set_index("item_id")["label"]
    items = sorted(set(labels["item_id"]))
    routed_label = human.reindex([i for i in items if i not in kept.index])
    assert routed_label.notna().all() and est["human_labels_still_needed"] == 0  # every PRISM item has its user
    expected = ((kept == "A").sum() + (routed_label == "A").sum()) / len(items)
    assert est["combined"]["value"] == pytest.approx(expected)
    assert est["combined_kind"] == "exact" and est["kept_by_judge"] == len(kept)
    assert est["all_human"]["value"] == pytest.approx((human == "A").mean())
    lo, hi = est["combined"]["ci"]
    assert lo < expected < hi
    assert sorted(annotate.routed_items(prism_db, "response", "prism-judge") or []) == sorted(routed_label.index)
