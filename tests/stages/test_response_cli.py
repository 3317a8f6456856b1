"""Stage-3 CLI: the demo step, the report contract, and live judging against a loopback OpenAI server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score

from personagap.cli import cli
from personagap.commands.response import demo_response
from personagap.judges.response import NO_PROFILE
from personagap.stages import response as stage
from tests.support.openai_server import ScriptedOpenAIServer, last_user_message

MODEL = "openai/scripted"


def test_demo_step_is_offline_and_reports_sample_failures(tmp_path: Path) -> None:
    text = demo_response(tmp_path, tmp_path / "demo.duckdb")
    assert "sample-judge [all-features]" in text and "sample-judge [no-profile]" in text
    assert "unparseable" in text
    rep = stage.report_response(tmp_path / "demo.duckdb")
    failures = {j.judge: j.failures for j in rep.judges}
    # Recount the unparseable answers straight from the written sample files.
    for name, judge in (("prism_all_features_sample-judge.jsonl", "sample-judge [all-features]"),
                        ("prism_no_persona_sample-judge.jsonl", "sample-judge [no-profile]")):
        rows = [json.loads(line) for line in (tmp_path / "sample_prism_judge" / name).read_text().splitlines()]
        assert failures[judge] == sum(r["answer"] not in ("A", "B") for r in rows) > 0


def test_report_on_empty_db_and_missing_db(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", "response", "--db", str(tmp_path / "none.duckdb")])
    assert result.exit_code == 2 and "no such database" in result.output


@pytest.fixture
def live_db(shared_data: Path, tmp_path: Path) -> Path:
    db = tmp_path / "live.duckdb"
    runner = CliRunner()
    for args in (["prism-judge", str(shared_data / "prism_judge" / "prism_all_features_command-r-plus.jsonl")],
                 ["usr", str(shared_data / "usr_personachat")]):
        result = runner.invoke(cli, ["import", *args, "--db", str(db)])
        assert result.exit_code == 0, result.output
    return db


def _first_shown(body: dict) -> str:
    """Always prefer the answer shown first, except an unparseable answer for one prompt in ten."""
    text = last_user_message(body)
    if "answer_a" in text and sum(map(ord, text)) % 10 == 0:
        return "I cannot decide."
    return json.dumps({"reason": "scripted", "verdict": "A"})


def test_live_pairwise_undoes_the_seeded_swap(live_db: Path) -> None:
    with ScriptedOpenAIServer(_first_shown) as server:
        result = CliRunner().invoke(cli, ["judge", "response", "--judge", "pairwise", "--model", MODEL,
                                          "--api-base", server.base_url, "--limit", "40", "--concurrency", "4",
                                          "--dataset", "prism-judge", "--db", str(live_db)])
        assert result.exit_code == 0, result.output
        assert server.count >= 40
    con = duckdb.connect(str(live_db), read_only=True)
    try:
        rows = con.execute("SELECT label, error, meta FROM labels WHERE rater = 'pairwise/v1/openai/scripted'"
                           ).fetchall()
    finally:
        con.close()
    assert len(rows) == 40
    parsed = [(label, json.loads(meta)) for label, error, meta in rows if label is not None]
    failed = [error for label, error, _ in rows if label is None]
    assert failed and all(e.startswith("unparseable") for e in failed)
    # The judge always named the first answer shown, so the stored canonical label is B exactly when swapped.
    assert all(label == ("B" if meta["swapped"] else "A") for label, meta in parsed)
    assert {meta["swapped"] for _, meta in parsed} == {True, False}
    rep = stage.report_response(live_db)
    (row,) = [j for j in rep.judges if j.rater == "pairwise/v1/openai/scripted"]
    assert row.condition == "profile" and row.n == len(parsed) and row.failures == len(failed)
    assert row.first_position_rate == 1.0


def _mentions_my(body: dict) -> str:
    text = last_user_message(body)
    response = text.split("response", 2)[-1].lower()
    return json.dumps({"reason": "scripted", "uses_persona": "yes" if "my" in response else "no"})


def test_live_persona_use_against_each_usr_rater(live_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "usr.duckdb"
    shutil.copy(live_db, db)
    with ScriptedOpenAIServer(_mentions_my) as server:
        result = CliRunner().invoke(cli, ["judge", "response", "--judge", "persona-use", "--model", MODEL,
                                          "--api-base", server.base_url, "--limit", "60", "--db", str(db)])
        assert result.exit_code == 0, result.output
    bad = CliRunner().invoke(cli, ["judge", "response", "--judge", "persona-use", "--model", MODEL, "--no-profile",
                                   "--db", str(db)])
    assert bad.exit_code == 2 and "needs the persona" in bad.output
    rep = stage.report_response(db)
    assert rep.usr is not None
    versus = {v.rater: v for v in rep.usr.judges if v.judge == "persona-use/v1/openai/scripted"}
    assert "majority" in versus and len(versus) >= 3
    con = duckdb.connect(str(db), read_only=True)
    try:
        for rater in [r for r in versus if r != "majority"]:
            pairs = con.execute(
                "SELECT h.label, j.label FROM labels h JOIN labels j USING (item_id) WHERE h.rater = ? "
                "AND h.condition = '' AND j.rater = 'persona-use/v1/openai/scripted' AND j.label IS NOT NULL",
                [rater]).fetchall()
            assert versus[rater].n == len(pairs)
            assert versus[rater].kappa == pytest.approx(cohen_kappa_score([p[0] for p in pairs],
                                                                          [p[1] for p in pairs]))
    finally:
        con.close()


def test_live_pairwise_on_generic_vs_personalised_pairs(recenter_db_copy: Path) -> None:
    with ScriptedOpenAIServer(lambda body: json.dumps({"reason": "scripted", "verdict": "A"})) as server:
        result = CliRunner().invoke(cli, ["judge", "response", "--judge", "pairwise", "--model", MODEL,
                                          "--api-base", server.base_url, "--dataset", "recenter-stage2",
                                          "--limit", "30", "--db", str(recenter_db_copy)])
        assert result.exit_code == 0, result.output
        # The profile shown is the user's attribute list; the answers are the generic and personalised ones.
        assert server.requests and not any(NO_PROFILE in last_user_message(b) for b in server.requests)
    con = duckdb.connect(str(recenter_db_copy), read_only=True)
    try:
        metas = [json.loads(m) for (m,) in con.execute(
            "SELECT meta FROM labels WHERE rater = 'pairwise/v1/openai/scripted' AND label IS NOT NULL").fetchall()]
    finally:
        con.close()
    rep = stage.report_response(recenter_db_copy)
    (row,) = [g for g in rep.generic_vs_personalized if g.rater == "pairwise/v1/openai/scripted"]
    assert row.n == len(metas) == 30
    # Canonical A is the generic answer: "first shown" is generic exactly when the pair was not swapped.
    assert row.no_better_rate == pytest.approx(sum(not m["swapped"] for m in metas) / len(metas))
