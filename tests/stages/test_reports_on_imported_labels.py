"""Data a team imports with ``import labels`` gets the agreement panel and the alternative-annotator test, per stage.

Made-up team files (tests/support/byo_data.py, written for the project): three blind human annotators on every item
(48 items each, above the test's 30-item minimum) and one LLM. The panel's MCC and balanced accuracy are
recomputed here with scikit-learn on the same (human majority, LLM) item pairs, taken from the rows the test wrote.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sklearn.metrics import balanced_accuracy_score, matthews_corrcoef

from personagap.cli import cli
from tests.support.byo_data import HUMANS, LLM, team_rows, write_rows

STAGES = {"relevance": ("yes", "no"), "response": ("A", "B", "tie"), "extraction": ("ok", "bad", "unsure")}


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return str(result.output)


def _pairs(rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(human majority, LLM) per item with a strict majority among the humans, from the written rows."""
    votes: dict[str, list[str]] = {}
    llm: dict[str, str] = {}
    for r in rows:
        if r.get("rater_kind") == "llm":
            llm[r["item_id"]] = str(r["label"])
        else:
            votes.setdefault(r["item_id"], []).append(str(r["label"]))
    human, judge = [], []
    for item in sorted(votes):
        top = Counter(votes[item]).most_common()
        if len(top) == 1 or top[0][1] > top[1][1]:
            human.append(top[0][0])
            judge.append(llm[item])
    return human, judge


def _judge_row(stage: str, report: dict[str, Any]) -> dict[str, Any]:
    if stage == "extraction":
        (row,) = [v for v in report["verifiers"] if v["verifier"] == LLM]
    else:
        (row,) = [j for j in report["judges"] if j["judge"] == LLM and j["dataset"] == "team"
                  and j.get("reference", "human") in ("human", "blind")]
    return row


@pytest.mark.parametrize("stage", list(STAGES))
def test_panel_and_alt_test_on_imported_labels(tmp_path: Path, stage: str) -> None:
    rows = team_rows(stage)
    assert {r["label"] for r in rows} <= set(STAGES[stage])
    per_annotator = Counter(r["rater"] for r in rows if r["rater"] in HUMANS)
    assert min(per_annotator.values()) >= 30 and Counter(Counter(r["item_id"] for r in rows).values()) == {4: 48}
    db = str(tmp_path / "team.duckdb")
    _cli("import", "labels", str(write_rows(tmp_path / "team.jsonl", rows)), "--stage", stage, "--dataset", "team",
         "--db", db)
    report = json.loads(_cli("report", stage, "--db", db, "--json"))

    (test,) = [t for t in report["alt_test"] if t["judge"] == LLM and t["dataset"] == "team"]
    assert test["applicable"] is True, test
    assert (test["n_annotators"], test["n_items"]) == (len(HUMANS), 48)
    assert test["items_by_annotator"] == {h: 48 for h in HUMANS}
    assert 0.0 <= test["winning_rate"] <= 1.0 and isinstance(test["passed"], bool)

    row = _judge_row(stage, report)
    human, judge = _pairs(rows)
    assert row["n"] == len(human) and len(set(human)) >= 2
    assert row["mcc"] == pytest.approx(matthews_corrcoef(human, judge))
    assert row["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(human, judge))
    for name in ("ac1", "pabak", "mcc", "balanced_accuracy"):
        assert math.isfinite(row[name]), name
    for name in ("ac1_ci", "mcc_ci", "balanced_accuracy_ci"):
        lo, hi = row[name]
        assert lo <= row[name[:-3]] + 1e-9 and row[name[:-3]] <= hi + 1e-9, name
    if stage == "relevance":  # yes/no: the prevalence and bias indices are defined, from the same pairs
        both_yes = sum(h == j == "yes" for h, j in zip(human, judge, strict=True))
        both_no = sum(h == j == "no" for h, j in zip(human, judge, strict=True))
        assert row["prevalence_index"] == pytest.approx((both_yes - both_no) / len(human))
        assert row["bias_index"] == pytest.approx((judge.count("yes") - human.count("yes")) / len(human))


def test_persona_use_section_names_an_imported_dataset(tmp_path: Path) -> None:
    rows = team_rows("response", shape="single")
    db = str(tmp_path / "team.duckdb")
    _cli("import", "labels", str(write_rows(tmp_path / "single.jsonl", rows)), "--stage", "response", "--dataset",
         "our-persona-use", "--db", db)
    report = json.loads(_cli("report", "response", "--db", db, "--json"))
    (section,) = report["single_responses"]
    assert section["dataset"] == "our-persona-use" and section["origin"] == "real"
    text = _cli("report", "response", "--db", db)
    # Titled with the dataset's question (the default one: the import named none), then the dataset.
    assert f"{section['question']}\n  our-persona-use: 48 responses" in text
    assert "USR PersonaChat" not in text
