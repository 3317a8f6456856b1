"""A judge worse than a constant fails the alternative-annotator test; it is not "uninformative" (issue 32, item 2).

Hand-built relevance data (written for this test, not human judgments): 40 users with one item each, three blind
annotators who say "no" except on two items each, and a judge that always says "yes" -- wrong wherever the humans'
majority is "no", which is every item. On every item an annotator agrees with the other two at least as well as the
judge does, and strictly better on the 34 items where all three say "no" (1 against 0), so the judge wins against no
annotator at any epsilon. The constant "no" ties the annotators on those 34 items and beats the lone "yes"
annotator on the other six: it wins against every annotator (the skewed example of test_alt_test_verdict.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from click.testing import CliRunner

from personagap.analysis.alt_test import CONSTANT_JUDGE, FAILS_CONSTANT, SWEEP_EPSILONS, alt_test_rows
from personagap.cli import cli

JUDGE = "contrarian-llm"


def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    yes = {"A": {0, 1}, "B": {2, 3}, "C": {4, 5}}
    for n in range(40):
        item, user = f"u{n:02d}/rel", f"u{n:02d}"
        for k, rater in enumerate("ABC"):
            row = {"item_id": item, "user_id": user, "rater": rater, "label": "yes" if n in yes[rater] else "no"}
            if k == 0:
                row |= {"prompt": "Suggest a dinner recipe.", "attribute": "The user is vegetarian."}
            rows.append(row)
        rows.append({"item_id": item, "user_id": user, "rater": JUDGE, "rater_kind": "llm", "label": "yes"})
    return rows


def _tidy() -> pd.DataFrame:
    frame = pd.DataFrame(_rows()).fillna({"rater_kind": "human"})
    return frame.assign(dataset="d", condition="")[["item_id", "user_id", "rater", "rater_kind", "label",
                                                     "dataset", "condition"]]


def test_the_verdict_of_a_judge_a_constant_beats_is_fails() -> None:
    constant, judge = alt_test_rows(_tidy(), "d")
    assert constant["judge"] == CONSTANT_JUDGE and constant["passed"] and constant["winning_rate"] == 1.0
    assert [e["winning_rate"] for e in judge["epsilon_sweep"]] == [0.0] * len(SWEEP_EPSILONS)
    assert [e["constant_passed"] for e in judge["epsilon_sweep"]] == [True] * len(SWEEP_EPSILONS)
    assert not judge["passed"] and judge["verdict"] == FAILS_CONSTANT == "fails: a constant judge beats it"
    assert judge["verdict_reason"] == ("a constant judge that always says 'no' passes at epsilon 0.2 (winning rate "
                                       "1.00) and this judge does not (0.00)")


def test_report_json_and_text_say_the_judge_fails(tmp_path: Path) -> None:
    path = tmp_path / "team.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()), encoding="utf-8")
    db = str(tmp_path / "s.duckdb")
    runner = CliRunner()
    imported = runner.invoke(cli, ["import", "labels", str(path), "--stage", "relevance", "--dataset", "team",
                                   "--db", db])
    assert imported.exit_code == 0, imported.output
    out = runner.invoke(cli, ["report", "relevance", "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    rows = [t for t in json.loads(out.output)["alt_test"] if t["dataset"] == "team"]
    (judge,) = [t for t in rows if t["judge"] == JUDGE]
    (constant,) = [t for t in rows if t["judge"] == CONSTANT_JUDGE]
    assert judge["verdict"] == "fails: a constant judge beats it"
    assert constant["verdict"] == "uninformative on this data"
    text = runner.invoke(cli, ["report", "relevance", "--db", db])
    assert text.exit_code == 0, text.output
    line = f"    {JUDGE}: fails: a constant judge beats it at epsilon 0.2 (a constant judge that always says 'no' " \
           "passes at epsilon 0.2 (winning rate 1.00) and this judge does not (0.00)): winning rate 0.00"
    assert line in text.output
    assert f"{JUDGE}: uninformative" not in text.output


def test_a_judge_that_passes_beside_a_passing_constant_stays_uninformative() -> None:
    # The judge now gives the majority on every item: it passes like the constant, and the data cannot tell them apart.
    frame = _tidy()
    frame.loc[frame["rater"] == JUDGE, "label"] = "no"
    _, judge = alt_test_rows(frame, "d")
    assert judge["passed"] and judge["verdict"] == "uninformative on this data"
