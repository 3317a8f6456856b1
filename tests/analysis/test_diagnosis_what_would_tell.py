"""When ``diagnose`` cannot tell which stage fails most, it says what data would let it tell, and the command works.

Made-up team labels (tests/support/byo_data.py, written for the project), imported with ``personagap import labels``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from personagap.cli import cli
from tests.support.byo_data import HUMANS, LLM, team_rows, write_rows


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return str(result.output)


def _import(tmp_path: Path, db: str, stage: str, dataset: str, rows: list[dict[str, Any]]) -> None:
    _cli("import", "labels", str(write_rows(tmp_path / f"{dataset}.jsonl", rows)), "--stage", stage, "--dataset",
         dataset, "--db", db)


def _diagnose(db: str) -> dict[str, Any]:
    return dict(json.loads(_cli("diagnose", "--db", db, "--json")))


def test_one_human_per_item_asks_for_a_second_and_the_plan_command_runs(tmp_path: Path) -> None:
    db = str(tmp_path / "team.duckdb")
    # One annotator per item: no human ceiling, so no stage can be ranked.
    rows = [r for r in team_rows("relevance") if r["rater"] not in HUMANS[1:]]
    _import(tmp_path, db, "relevance", "team-one", rows)
    d = _diagnose(db)
    assert d["worst_stage"] is None and d["verdict"].startswith("Cannot tell")
    steps = dict(s.split(": ", 1) for s in d["next_steps"])
    assert "label at least two blind humans per item on team-one" in steps["stage 2 (relevance)"]
    assert "`personagap plan --stage relevance --dataset team-one`" in steps["stage 2 (relevance)"]
    assert "personagap import labels FILE --stage extraction" in steps["stage 1 (extraction)"]
    assert "personagap import labels FILE --stage response" in steps["stage 3 (response)"]
    assert d["verdict"].endswith("What would tell: " + "; ".join(d["next_steps"]) + ".")
    # The suggested command runs on this store.
    _cli("plan", "--stage", "relevance", "--dataset", "team-one", "--simulations", "10", "--db", db)


def test_humans_without_a_judge_ask_for_a_judge(tmp_path: Path) -> None:
    db = str(tmp_path / "team.duckdb")
    _import(tmp_path, db, "relevance", "team-rel", team_rows("relevance"))
    _import(tmp_path, db, "response", "team-humans", [r for r in team_rows("response") if r["rater"] in HUMANS])
    d = _diagnose(db)
    (step,) = [s for s in d["next_steps"] if s.startswith("stage 3 (response)")]
    assert "a judge on its human-labelled items (`personagap judge response --judge pairwise --model M`)" in step
    # Stage 2 has its ceiling and a gap; with only one stage comparable nothing asks for narrower CIs.
    assert not any(s.startswith("stage 2") for s in d["next_steps"])


def test_overlapping_gaps_ask_for_more_users(tmp_path: Path) -> None:
    db = str(tmp_path / "team.duckdb")
    _import(tmp_path, db, "relevance", "team-rel", team_rows("relevance"))
    _import(tmp_path, db, "response", "team-resp", team_rows("response"))
    d = _diagnose(db)  # 12 users each, the same noise: the CI of the difference of the gaps includes 0
    assert d["worst_stage"] is None and len(d["ranking"]) == 2
    assert "Cannot tell which stage fails most" in d["verdict"] and "includes" in d["verdict"]
    for stage in ("relevance", "response"):
        (step,) = [s for s in d["next_steps"] if f"({stage})" in s.split(":")[0]]
        assert f"`personagap plan --stage {stage} --dataset team-" in step and "more blind-labelled users" in step


def test_a_named_stage_asks_for_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "team.duckdb")
    rel = team_rows("relevance", n_users=30)
    first = {r["item_id"]: r["label"] for r in rel if r["rater"] == HUMANS[0]}
    rel = [r | {"label": first[r["item_id"]]} if r["rater"] == LLM else r for r in rel]  # a judge as good as a human
    rng = random.Random(1)
    resp = [r | {"label": rng.choice(["A", "B", "tie"])} if r["rater"] == LLM else r  # a judge at chance
            for r in team_rows("response", n_users=30)]
    _import(tmp_path, db, "relevance", "team-rel", rel)
    _import(tmp_path, db, "response", "team-resp", resp)
    d = _diagnose(db)
    assert d["worst_stage"] == "response"
    assert d["next_steps"] == [] and "What would tell" not in d["verdict"]
