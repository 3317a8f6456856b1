"""The with/without-profile comparison does not depend on spelling (issue 32, item 7).

A hand-built pairwise dataset (written for this test, not human judgments): users u0-u9, two pairs each (20 items),
one blind person ``ann`` who says A on every pair, and one judge ``j`` run twice:

* with the profile (condition ``WITH``): A everywhere except users u0-u1 (B): 16/20 = 0.800;
* without it (condition ``WITHOUT``): A everywhere except users u0-u4 (B): 10/20 = 0.500; it also judged one more
  pair (u10, A; ann says A), which the other run did not, so it is not paired.

By hand: paired items 20 (21 judged without the profile, 20 with), gap (16 - 10) / 20 = +0.300.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from personagap.cli import cli


def _rows(with_condition: str, without_condition: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for user in range(11):
        for k in (0, 1) if user < 10 else (0,):
            base = {"item_id": f"u{user}/p{k}", "user_id": f"u{user}"}
            rows.append({**base, "rater": "ann", "label": "A", "prompt": f"Question {k}",
                         "response_a": f"answer a {k}", "response_b": f"the other answer {k}"})
            rows.append({**base, "rater": "j", "rater_kind": "llm", "condition": without_condition,
                         "label": "B" if user < 5 else "A"})
            if user < 10:
                rows.append({**base, "rater": "j", "rater_kind": "llm", "condition": with_condition,
                             "label": "B" if user < 2 else "A"})
    return rows


def _store(tmp: Path, with_condition: str, without_condition: str) -> str:
    path = tmp / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(with_condition, without_condition)),
                    encoding="utf-8")
    db = str(tmp / "s.duckdb")
    imported = CliRunner().invoke(cli, ["import", "labels", str(path), "--stage", "response", "--dataset", "pairs",
                                        "--db", db])
    assert imported.exit_code == 0, imported.output
    return db


def _report(db: str, *options: str) -> tuple[dict[str, Any], str]:
    runner = CliRunner()
    out = runner.invoke(cli, ["report", "response", "--db", db, "--json", *options])
    assert out.exit_code == 0, out.output
    text = runner.invoke(cli, ["report", "response", "--db", db, *options])
    assert text.exit_code == 0, text.output
    return json.loads(out.output), text.output


@pytest.fixture(scope="module")
def no_persona(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _store(tmp_path_factory.mktemp("no_persona"), "profile", "no persona")


def test_declared_baseline_gives_the_gap(no_persona: str) -> None:
    data, text = _report(no_persona, "--baseline-condition", "no persona")
    (gap,) = data["profile_gaps"]
    assert (gap["rater"], gap["with_condition"], gap["without_condition"]) == ("j", "profile", "no persona")
    assert (gap["n"], gap["n_with"], gap["n_without"], gap["n_users"]) == (20, 20, 21, 10)
    assert gap["accuracy_with"] == pytest.approx(0.8)
    assert gap["accuracy_without"] == pytest.approx(0.5)
    assert gap["gap"] == pytest.approx(0.3)
    assert data["baseline_condition"] == "no persona"
    assert data["profile_gap_note"] is None
    assert "j on pairs: profile 0.800 vs no persona 0.500 on the 20 items" in text


def test_missing_baseline_is_said_not_silent(no_persona: str) -> None:
    data, text = _report(no_persona)
    assert data["profile_gaps"] == []
    note = ("No with/without-profile comparison: the baseline condition 'no-profile' is not among the pairwise "
            "judges' conditions ('no persona', 'profile'); name the one run without the profile with "
            "--baseline-condition.")
    assert data["profile_gap_note"] == note
    assert note in text.splitlines()


def test_default_condition_is_named_not_blank(tmp_path: Path) -> None:
    data, text = _report(_store(tmp_path, "", "no-profile"))
    (gap,) = data["profile_gaps"]
    assert (gap["with_condition"], gap["without_condition"]) == ("", "no-profile")
    assert gap["gap"] == pytest.approx(0.3)
    assert "j on pairs: (default condition) 0.800 vs no-profile 0.500 on the 20 items" in text
    assert "pairs:  0.800" not in text


def test_default_condition_as_the_baseline(tmp_path: Path) -> None:
    data, text = _report(_store(tmp_path, "profile", ""), "--baseline-condition", "")
    (gap,) = data["profile_gaps"]
    assert (gap["with_condition"], gap["without_condition"]) == ("profile", "")
    assert gap["gap"] == pytest.approx(0.3)
    assert "profile 0.800 vs (default condition) 0.500" in text
