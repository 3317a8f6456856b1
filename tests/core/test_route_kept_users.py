"""`personagap route` names the users the chosen threshold's kept labels come from, not every user (issue 32, item 4).

Hand-built relevance stores (written for this test, not human judgments): one person's label per item and a judge
whose confidence is high on a few users' items only, where it is always right, and 50 elsewhere, where it is right
on half. A high threshold then keeps those few users' labels alone, whatever the number of users considered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from click.testing import CliRunner

from personagap.analysis.coverage import split_users
from personagap.cli import cli
from personagap.labels_api import import_labels

DATASET, JUDGE = "kept-users", "sure-llm"
ROUTE = ["route", "--stage", "relevance", "--dataset", DATASET, "--judge", JUDGE, "--target-accuracy"]


def _rows(items: dict[str, list[tuple[float, bool]]]) -> list[dict[str, Any]]:
    """Per user, (confidence, judge right) per item; the person says "yes" on even items, "no" on odd ones."""
    rows: list[dict[str, Any]] = []
    for user, judged in items.items():
        for k, (confidence, right) in enumerate(judged):
            item, human = f"{user}/i{k}", "yes" if k % 2 == 0 else "no"
            label = human if right else {"yes": "no", "no": "yes"}[human]
            rows += [{"item_id": item, "user_id": user, "rater": JUDGE, "rater_kind": "llm", "label": label,
                      "confidence": confidence, "confidence_scale": "1-100", "prompt": f"Prompt {item}",
                      "attribute": f"Attribute {item}"},
                     {"item_id": item, "user_id": user, "rater": "ann", "rater_kind": "human", "label": human}]
    return rows


def _store(tmp_path: Path, items: dict[str, list[tuple[float, bool]]]) -> str:
    db = tmp_path / "r.duckdb"
    import_labels(pd.DataFrame(_rows(items)), stage="relevance", dataset=DATASET, db=db, categories=["no", "yes"])
    return str(db)


def _route(db: str, *args: str) -> tuple[dict[str, Any], str]:
    runner = CliRunner()
    out = runner.invoke(cli, [*ROUTE, *args, "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    text = runner.invoke(cli, [*ROUTE, *args, "--db", db])
    assert text.exit_code == 0, text.output
    return json.loads(out.output), " ".join(text.output.split())


def test_split_says_one_user_s_four_labels_not_the_whole_choosing_half(tmp_path: Path) -> None:
    users = [f"u{n:02d}" for n in range(44)]
    choose, held = split_users(users)
    # One choosing user holds the only labels at confidence 99 (4, all right), one held-out user 2 (right); every
    # other item is at 50, right on one of each user's two items: accuracy about 0.5, far from the 0.9 target.
    items: dict[str, list[tuple[float, bool]]] = {u: [(50.0, True), (50.0, False)] for u in users}
    items[choose[0]] = [(99.0, True)] * 4
    items[held[0]] = [(99.0, True)] * 2
    out, text = _route(_store(tmp_path, items), "0.9", "--method", "split")
    threshold = out["threshold"]
    assert threshold["min_confidence"] == 99.0 and threshold["n_users_chosen_on"] == len(choose)
    assert threshold["kept_labelled"] == {"n_items": 4, "n_users": 1}
    assert (threshold["held_out"]["n"], threshold["held_out"]["n_users"]) == (2, 1)
    assert (f"Kept where confidence >= 99 (1-100), chosen on 4 labelled items from 1 user (of {len(choose)} users "
            "in the choosing half).") in text
    assert f"on 2 labelled items from 1 user (of {len(held)} users held out)." in text
    assert f"chosen on {len(choose)} users" not in text


def test_ltt_says_whose_labels_the_guaranteed_threshold_keeps(tmp_path: Path) -> None:
    # Six users hold 10 items each at confidence 95, all right; 24 others hold 4 items at 50, right on half.
    # At >= 95: 60 items, accuracy 1, Kish df 5, SE floor sqrt(0.8 * 0.2 / 60) = 0.0516, bound
    # 1 - 1.476 * 0.0516 = 0.92 >= 0.8: kept. At >= 50: accuracy (60 + 48) / 156 = 0.69 < 0.8: stops.
    items: dict[str, list[tuple[float, bool]]] = {f"h{n}": [(95.0, True)] * 10 for n in range(6)}
    items |= {f"u{n:02d}": [(50.0, True), (50.0, False)] * 2 for n in range(24)}
    out, text = _route(_store(tmp_path, items), "0.8")
    threshold = out["threshold"]
    assert threshold["min_confidence"] == 95.0 and threshold["n_users"] == 30
    assert threshold["kept_labelled"] == {"n_items": 60, "n_users": 6}
    assert ("kept where confidence >= 95 (1-100): 60 items; P(accuracy on them >= 0.8) >= 0.9, by fixed-sequence "
            "testing over 2 thresholds, chosen on 60 labelled items from 6 users (of 30 users with people's labels)."
            ) in text
    assert "of 30 users)" not in text and "people's labels of 30 users" not in text


def test_no_threshold_has_no_kept_labels(tmp_path: Path) -> None:
    items = {f"u{n:02d}": [(50.0, True), (50.0, False)] for n in range(12)}
    out, _ = _route(_store(tmp_path, items), "0.8")
    assert out["threshold"]["min_confidence"] is None and out["threshold"]["kept_labelled"] is None
