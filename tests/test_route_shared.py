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

JUDGE, CONDITION = "command-r-plus", "all-features"


@pytest.fixture(scope="module")
def prism_db(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from personagap.stages.response import import_prism

    db = tmp_path_factory.mktemp("prism_route") / "prism.duckdb"
    import_prism(shared_data / "prism_judge", db)
    return db


def test_route_on_prism_certainty_is_exact_and_held_out(prism_db: Path) -> None:
    result = CliRunner().invoke(cli, ["route", "--stage", "response", "--dataset", "prism-judge", "--judge",
                                      f"{JUDGE} [{CONDITION}]", "--target-accuracy", "0.85", "--positive", "A",
                                      "--db", str(prism_db), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    choice, est = out["threshold"], out["estimate"]
    t = choice["min_confidence"]
    assert t is not None and choice["chosen_on"]["accuracy"] >= 0.85
    assert choice["held_out"]["n_users"] >= 20  # reported on users it was not chosen on
    with opened(prism_db, read_only=True) as con:
        labels = load_labels(con, stage="response")
    judge = labels[(labels["rater"] == JUDGE) & (labels["condition"] == CONDITION) & labels["label"].notna()]
    confidence = judge["meta"].map(lambda m: json.loads(m)["confidence"] if isinstance(m, str) else None)
    kept = judge[pd.to_numeric(confidence) >= t].set_index("item_id")["label"]
    humans = labels[labels["rater_kind"].isin(["human", "human_majority"]) & (labels["condition"] == "")]
    human = humans.groupby("item_id")["label"].agg(lambda s: s.iloc[0] if s.nunique() == 1 else None).dropna()
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
