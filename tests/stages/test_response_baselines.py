"""Every length/position baseline, and a judge a baseline explains, in ``report response`` (issue 32, item 15).

A hand-built pairwise release (written for this test, not human judgments), one blind person per pair, 20 users:

* k0 (every user): A is shorter (10 vs 30 characters); the person says A, except users 0-1 (B);
* k1 (every user): B is shorter (40 vs 20); the person says B, except users 17-19 (tie);
* k2 (users 0-9): equal lengths (25 vs 25); the person says A for users 0-5, B for users 6-9.

Hand counts over the 50 items: A 24, B 23, tie 3. Always A 24/50 = 0.48, always B 23/50 = 0.46, always tie 3/50 =
0.06; always longer (A on equal lengths): k0 -> B (2 hits), k1 -> A (0), k2 -> A (6): 8/50 = 0.16; always shorter (A
on equal lengths): k0 -> A (18), k1 -> B (17), k2 -> A (6): 41/50 = 0.82.

Judges: ``short-llm`` picks the shorter answer, but B on the equal-length items of users 6-9 (right there): 45/50 =
0.90; ``a-llm`` says A on k0 and k1 only (40 items): 18/40 = 0.45, and on its 40 items always A 0.45, always B
19/40 = 0.475, always longer 2/40 = 0.05, always shorter 35/40 = 0.875, always tie 3/40 = 0.075.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from personagap.analysis.response import BASELINE_NAMES, baseline_flags
from personagap.cli import cli
from personagap.store.response_counts import BASELINE_SIDES

LENGTHS = {0: (10, 30), 1: (40, 20), 2: (25, 25)}


def _human(user: int, k: int) -> str:
    if k == 0:
        return "B" if user < 2 else "A"
    if k == 1:
        return "tie" if user >= 17 else "B"
    return "A" if user < 6 else "B"


def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for user in range(20):
        for k in (0, 1, 2) if user < 10 else (0, 1):
            item, la, lb = f"u{user:02d}/p{k}", *LENGTHS[k]
            rows.append({"item_id": item, "user_id": f"u{user:02d}", "rater": "ann", "label": _human(user, k),
                         "prompt": f"Question {k}", "response_a": "a" * la, "response_b": "b" * lb})
            shorter = "A" if la <= lb else "B"
            rows.append({"item_id": item, "user_id": f"u{user:02d}", "rater": "short-llm", "rater_kind": "llm",
                         "label": "B" if k == 2 and user >= 6 else shorter})
            if k < 2:
                rows.append({"item_id": item, "user_id": f"u{user:02d}", "rater": "a-llm", "rater_kind": "llm",
                             "label": "A"})
    return rows


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    tmp = tmp_path_factory.mktemp("baselines")
    path = tmp / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()), encoding="utf-8")
    db = str(tmp / "s.duckdb")
    runner = CliRunner()
    imported = runner.invoke(cli, ["import", "labels", str(path), "--stage", "response", "--dataset", "pairs",
                                   "--db", db])
    assert imported.exit_code == 0, imported.output
    out = runner.invoke(cli, ["report", "response", "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    text = runner.invoke(cli, ["report", "response", "--db", db])
    assert text.exit_code == 0, text.output
    return json.loads(out.output), text.output


def _judge(data: dict[str, Any], name: str) -> dict[str, Any]:
    (row,) = [j for j in data["judges"] if j["judge"] == name and j["dataset"] == "pairs"]
    return row


def test_every_baseline_on_every_referenced_item(report: tuple[dict[str, Any], str]) -> None:
    data, text = report
    (humans,) = [h for h in data["humans"] if h["dataset"] == "pairs"]
    assert humans["n"] == 50
    assert humans["baselines"] == pytest.approx({"always-A": 0.48, "always-B": 0.46, "always-longer": 0.16,
                                                 "always-shorter": 0.82, "always-tie": 0.06})
    assert list(humans["baselines"]) == ["always-A", "always-B", "always-longer", "always-shorter", "always-tie"]
    assert ("baselines always A 0.480, always B 0.460, always longer 0.160, always shorter 0.820, always tie 0.060"
            in text)


def test_baselines_on_each_judge_s_own_items(report: tuple[dict[str, Any], str]) -> None:
    data, text = report
    short, only_a = _judge(data, "short-llm"), _judge(data, "a-llm")
    assert (short["n"], short["accuracy"]) == (50, pytest.approx(0.90))
    assert short["baselines"] == pytest.approx({"always-A": 0.48, "always-B": 0.46, "always-longer": 0.16,
                                                "always-shorter": 0.82, "always-tie": 0.06})
    assert (only_a["n"], only_a["accuracy"]) == (40, pytest.approx(0.45))
    assert only_a["baselines"] == pytest.approx({"always-A": 0.45, "always-B": 0.475, "always-longer": 0.05,
                                                 "always-shorter": 0.875, "always-tie": 0.075})
    # The old fields are the same counts.
    assert (only_a["always_a_accuracy"], only_a["always_longer_accuracy"]) == (pytest.approx(0.45),
                                                                               pytest.approx(0.05))
    assert "    baselines on the same items: always A 0.450, always B 0.475, always longer 0.050, always shorter " \
           "0.875, always tie 0.075" in text


def test_a_judge_within_its_ci_of_a_baseline_is_flagged(report: tuple[dict[str, Any], str]) -> None:
    data, text = report
    short = _judge(data, "short-llm")
    lo, hi = short["by_weight"]["items"]["accuracy_ci"]
    assert lo <= 0.82 <= hi and hi < 1.0  # the premise: 0.82 inside the judge's interval, nothing else is
    assert short["baseline_flags"] == [{"baseline": "always-shorter", "accuracy": pytest.approx(0.82),
                                        "relation": "within",
                                        "note": "short-llm is within its CI of 'always shorter' (0.820)"}]
    assert "    short-llm is within its CI of 'always shorter' (0.820)\n" in text


def test_a_judge_below_a_baseline_is_flagged_apart(report: tuple[dict[str, Any], str]) -> None:
    data, text = report
    only_a = _judge(data, "a-llm")
    lo, hi = only_a["by_weight"]["items"]["accuracy_ci"]
    assert lo <= 0.45 and 0.475 <= hi < 0.875  # premise, from the interval the report printed
    flags = {f["baseline"]: f["relation"] for f in only_a["baseline_flags"]}
    assert flags == {"always-A": "within", "always-B": "within", "always-shorter": "above"}
    assert "a-llm is within its CI of 'always A' (0.450)" in text
    assert "a-llm is below 'always shorter' (0.875): its accuracy 0.450 has a CI below the baseline's" in text


def test_the_flag_rule_by_hand() -> None:
    baselines = {"always-A": 0.5, "always-shorter": 0.945, "always-tie": float("nan")}
    assert baseline_flags(0.95, (0.90, 0.97), baselines) == [("always-shorter", 0.945, "within")]
    assert baseline_flags(0.95, (0.946, 0.97), baselines) == []  # just below the interval: the judge beats it
    assert baseline_flags(0.90, (0.85, 0.93), baselines) == [("always-shorter", 0.945, "above")]
    assert baseline_flags(0.94, (float("nan"), float("nan")), baselines) == [("always-shorter", 0.945, "no CI")]
    assert baseline_flags(0.96, None, baselines) == []


def test_one_definition_of_the_baselines() -> None:
    # The store counts each baseline's hits by one SQL definition; the report names exactly those.
    assert list(BASELINE_NAMES) == list(BASELINE_SIDES)
