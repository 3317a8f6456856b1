"""The pipeline view on the real Re-Centering release, recomputed here from the release files (independent code).

Stage 2: for every LLM selector (``stage2/llm_relevance/*.jsonl``: ``relevant``) and for the release's own pipeline
(``task5_items.jsonl``: the attributes in ``items`` are the ones it selected out of ``profile_attributes``), the
share of selected attributes the human majority (``task6_items.jsonl``: ``is_relevant``) calls irrelevant, the
share of human-relevant ones missed, and selected ÷ human-relevant. Stage 3: a row per model and input condition of
``stage3_responses/`` with no human verdict (``human`` null) and as many answers as the file has lines.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from personagap.cli import cli

PIPELINE_RATER = "recenter-pipeline"
MODES = {"attributes": "pipeline", "gt_attributes": "oracle"}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _human(root: Path) -> dict[tuple[str, int, str], bool]:
    out: dict[tuple[str, int, str], bool] = {}
    for row in _jsonl(root / "stage2" / "task6_items.jsonl"):
        index = int(row["prompt_id"].rsplit("_", 1)[1])
        for a in row["attributes"]:
            out.setdefault((row["user_id"], index, a["attribute"]), bool(a["is_relevant"]))
    return out


def _selections(root: Path) -> dict[str, dict[tuple[str, int, str], bool]]:
    out: dict[str, dict[tuple[str, int, str], bool]] = {}
    for path in sorted((root / "stage2" / "llm_relevance").glob("*.jsonl")):
        out[path.stem] = {(r["user_id"], int(r["prompt_index"]), a["attribute"]): bool(a["relevant"])
                          for r in _jsonl(path) for a in r["items"] if a.get("relevant") is not None}
    own: dict[tuple[str, int, str], bool] = {}
    for r in _jsonl(root / "stage2" / "task5_items.jsonl"):
        chosen = {c["attribute"] for c in r["items"]}
        for a in r["profile_attributes"]:
            own[(r["user_id"], int(r["prompt_index"]), a["attribute"])] = a["attribute"] in chosen
    out[PIPELINE_RATER] = own
    return out


def _expected(human: dict[tuple[str, int, str], bool], chosen: dict[tuple[str, int, str], bool]) -> dict[str, float]:
    c = Counter((human[k], v) for k, v in chosen.items() if k in human)
    tp, fp, fn = c[(True, True)], c[(False, True)], c[(True, False)]
    return {"irrelevant_selected": fp / (tp + fp), "missed_relevant": fn / (tp + fn),
            "over_selection": (tp + fp) / (tp + fn)}


@pytest.fixture(scope="module")
def diagnosis(recenter_db: Path) -> dict[str, Any]:
    out = CliRunner().invoke(cli, ["diagnose", "--db", str(recenter_db), "--json"])
    assert out.exit_code == 0, out.output
    data: dict[str, Any] = json.loads(out.output)
    return data


def test_stage2_rows_for_every_selector_and_the_release_pipeline(diagnosis: dict[str, Any], shared_data: Path
                                                                  ) -> None:
    root = shared_data / "recenter"
    human = _human(root)
    selections = _selections(root)
    rows = {(r["system"], r["quantity"]): r for r in diagnosis["pipeline"]
            if r["stage"] == 2 and r["dataset"] == "recenter-stage2"}
    assert {s for s, _ in rows} == set(selections)
    for system, chosen in selections.items():
        users = {k[0] for k in chosen if k in human}
        for quantity, value in _expected(human, chosen).items():
            row = rows[(system, quantity)]
            assert row["human"] == pytest.approx(value), (system, quantity)
            assert row["n_users"] == len(users)
            lo, hi = row["human_ci"]
            assert lo <= row["human"] <= hi
    # The study's finding, recomputed: each LLM selects more attributes than humans judge relevant.
    assert all(rows[(s, "over_selection")]["human"] > 1 for s in selections if s != PIPELINE_RATER)
    # Judges rate the release pipeline's selection: every LLM relevance labeller, naive and corrected.
    judges = {j["judge"] for j in rows[(PIPELINE_RATER, "irrelevant_selected")]["judges"]}
    assert judges == set(selections) - {PIPELINE_RATER}


def test_stage3_rows_by_model_and_condition_without_human_verdict(diagnosis: dict[str, Any], shared_data: Path
                                                                  ) -> None:
    folder = shared_data / "recenter" / "stage3_responses"
    expected = {}
    for path in folder.glob("eval_results_task5_*.jsonl"):
        m = re.fullmatch(r"eval_results_task5_(attributes|gt_attributes)_(.+)\.jsonl", path.name)
        if m:
            expected[(m[2], MODES[m[1]])] = len(_jsonl(path))
    rows = {(r["system"], r["input_condition"]): r for r in diagnosis["pipeline"]
            if r["stage"] == 3 and r["quantity"] == "no_better_than_generic" and r["input_condition"]}
    assert {k: r["n_items"] for k, r in rows.items()} == expected
    assert all(r["human"] is None and r["human_ci"] == [None, None] for r in rows.values())
    assert diagnosis["pipeline_verdict"]


def test_text_leads_with_the_pipeline_then_the_judges(recenter_db: Path, diagnosis: dict[str, Any]) -> None:
    out = CliRunner().invoke(cli, ["diagnose", "--db", str(recenter_db)])
    assert out.exit_code == 0, out.output
    text = out.output
    assert text.startswith("Which stage of your pipeline fails (by human verdict)")
    assert text.index(diagnosis["pipeline_verdict"]) < text.index("Can your judges tell you?")
    assert text.index("Can your judges tell you?") < text.index(diagnosis["verdict"])
    # Each answer set without a human verdict is one line saying how many pairs to label.
    missing = [r for r in diagnosis["pipeline"] if r["stage"] == 3 and r["quantity"] == "no_better_than_generic"
               and r["human"] is None]
    lines = [ln for ln in text.splitlines() if "no human verdict on these" in ln]
    assert len(lines) == len(missing)
    assert "nan" not in text and "None" not in text
