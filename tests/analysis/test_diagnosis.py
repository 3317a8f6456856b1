"""The diagnosis behind `personagap diagnose` and the dashboard's Overview."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from click.testing import CliRunner

from personagap.analysis.diagnosis import diagnose, human_ceiling, judge_score, render_diagnosis
from personagap.analysis.diagnosis_store import diagnose_store
from personagap.api import report_relevance
from personagap.cli import cli

EMPTY_INV = pd.DataFrame(columns=["stage", "n_items", "n_labels", "n_human_labels", "n_judge_labels"])
EMPTY_FAIL = pd.DataFrame(columns=["stage", "dataset", "rater", "rater_kind", "condition", "failures"])
EMPTY_HUM = pd.DataFrame(columns=["stage", "dataset", "item_id", "rater", "label", "user_id"])


def _pairs(stage: str, rater: str, table: dict[tuple[str, str], int], users: int = 10) -> pd.DataFrame:
    # Spread each (human, judge) count over `users` users (the remainder to the first ones, so the totals are
    # exact) so the user-clustered interval has clusters; 10 users is MIN_USERS_FOR_CI.
    rows = []
    for (human, label), n in table.items():
        for u in range(users):
            rows.append({"stage": stage, "dataset": "ds", "rater": rater, "rater_kind": "llm", "condition": "",
                         "user_id": f"u{u}", "human": human, "label": label,
                         "n": n // users + (u < n % users)})
    return pd.DataFrame(rows)


def test_judge_score_matches_hand_worked_kappa():
    # 2x2 table: tp=40, fp=20, fn=0, tn=40 -> po = 0.8; pe = 0.6*0.4 + 0.4*0.6 = 0.48; kappa = 0.32/0.52.
    rows = _pairs("relevance", "j", {("yes", "yes"): 40, ("no", "yes"): 20, ("no", "no"): 40})
    s = judge_score(rows, stage="relevance", dataset="ds", rater="j", rater_kind="llm", condition="", failures=3)
    assert s.binary and s.categories == ["no", "yes"]
    assert s.confusion == [[40, 20], [0, 40]]
    assert s.kappa == pytest.approx(0.32 / 0.52)
    assert s.over_selection == pytest.approx(60 / 40)
    assert s.human_yes_rate == pytest.approx(0.4) and s.judge_yes_rate == pytest.approx(0.6)
    assert s.precision == pytest.approx(40 / 60) and s.recall == pytest.approx(1.0)
    # Every user holds the same table (the counts divide evenly over 10 users), so no user's absence moves kappa:
    # the rule prints no interval rather than a zero-width [k, k].
    assert all(math.isnan(b) for b in s.kappa_ci)
    uneven = _pairs("relevance", "j", {("yes", "yes"): 43, ("no", "yes"): 17, ("no", "no"): 41})
    u = judge_score(uneven, stage="relevance", dataset="ds", rater="j", rater_kind="llm", condition="", failures=0)
    assert u.kappa_ci[0] < u.kappa < u.kappa_ci[1]
    assert s.failures == 3


def test_judge_score_multiclass_has_no_yes_rates():
    rows = _pairs("response", "j", {("A", "A"): 10, ("B", "B"): 10, ("A", "B"): 5, ("tie", "A"): 5})
    s = judge_score(rows, stage="response", dataset="ds", rater="j", rater_kind="llm", condition="no-profile",
                    failures=0)
    assert not s.binary and s.categories == ["A", "B", "tie"]
    assert s.over_selection is None and s.human_yes_rate is None
    assert s.judge == "j [no-profile]"
    assert s.accuracy == pytest.approx(20 / 30)


def test_without_ceilings_the_verdict_names_no_stage():
    # The lowest kappa alone says nothing about which stage fails: without a human ceiling on the judged
    # dataset a stage is listed, not ranked (tests/analysis/test_verdicts.py covers ranking by the gap).
    good = _pairs("relevance", "good", {("yes", "yes"): 40, ("no", "no"): 40, ("no", "yes"): 20})
    bad = _pairs("response", "bad", {("yes", "yes"): 20, ("no", "no"): 20, ("no", "yes"): 20, ("yes", "no"): 20})
    inventory = pd.DataFrame([
        {"stage": "relevance", "n_items": 100, "n_labels": 200, "n_human_labels": 100, "n_judge_labels": 100},
        {"stage": "response", "n_items": 80, "n_labels": 160, "n_human_labels": 80, "n_judge_labels": 80},
    ])
    d = diagnose(pd.concat([good, bad]), EMPTY_FAIL, EMPTY_HUM, inventory)
    assert d.worst_stage is None and d.ranking == []
    assert d.verdict.startswith("Cannot tell") and "stage 3 (response)" in d.verdict and "bad" in d.verdict
    assert d.stage("extraction").status == "no_data"
    assert d.stage("relevance").best.rater == "good"
    assert json.loads(json.dumps(d.to_json_dict()))["worst_stage"] is None


def test_empty_store_diagnosis_is_honest():
    pairs = pd.DataFrame(columns=["stage", "dataset", "rater", "rater_kind", "condition", "user_id", "human",
                                  "label", "n"])
    d = diagnose(pairs, EMPTY_FAIL, EMPTY_HUM, EMPTY_INV)
    assert d.worst_stage is None
    assert all(s.status == "no_data" and "No stage-" in s.message for s in d.stages)
    assert "No stage has both judge and human labels" in render_diagnosis(d)


def test_human_ceiling_from_individual_humans():
    rows = []
    for i in range(40):
        truth = "yes" if i % 3 == 0 else "no"
        for r, flip in (("h1", False), ("h2", i % 10 == 0), ("h3", i % 7 == 0)):
            label = ("no" if truth == "yes" else "yes") if flip else truth
            rows.append({"stage": "relevance", "dataset": "ds", "item_id": f"i{i}", "rater": r, "label": label,
                         "user_id": f"u{i % 10}"})
    d = diagnose(_pairs("relevance", "j", {("yes", "yes"): 40, ("no", "no"): 40}), EMPTY_FAIL, pd.DataFrame(rows),
                 pd.DataFrame([{"stage": "relevance", "n_items": 40, "n_labels": 200, "n_human_labels": 120,
                                "n_judge_labels": 80}]))
    c = d.stage("relevance").ceiling
    assert c is not None and c.n_raters == 3 and c.n_pairs == 3
    assert 0.5 < c.mean_kappa < 1.0
    # SQL returns rows in no fixed order: the same labels in another order must give the same CI.
    for seed in range(3):
        shuffled = pd.DataFrame(rows).sample(frac=1, random_state=seed)
        again = human_ceiling(shuffled)
        assert again is not None and (again.mean_kappa, again.ci) == (c.mean_kappa, c.ci)


@pytest.mark.slow
def test_diagnosis_on_real_data_agrees_with_the_stage2_report(recenter_db):
    d = diagnose_store(recenter_db).diagnosis
    report = report_relevance(recenter_db)
    rel = d.stage("relevance")
    by_key = {(j.rater, j.dataset): j for j in rel.judges}
    for j in report.judges:  # same kappa and over-selection as the stage-2 report, judge by judge
        mine = by_key[(j.judge, j.dataset)]
        assert mine.n == j.n
        assert mine.kappa == pytest.approx(j.kappa)
        assert mine.over_selection == pytest.approx(j.over_selection)
    assert rel.best is not None and rel.best.kappa >= rel.worst.kappa
    if report.pilot is not None:  # blind pilot annotators: the ceiling is their human–human agreement
        pilot_hh = next(g for g in report.pilot.groups if g.pair_type == "human–human")
        assert rel.ceiling is not None and rel.ceiling.dataset == "recenter-pilot"
        assert rel.ceiling.mean_kappa == pytest.approx(pilot_hh.mean_kappa)
    else:  # too few blind labels: no ceiling, said plainly, and never an anchored one
        assert not [c for c in rel.ceilings if c.dataset == "recenter-pilot"]
        assert any(n.startswith("recenter-pilot: no human ceiling") for n in rel.notes)
    assert d.worst_stage is None and d.verdict.startswith("Cannot tell")
    # Stage 1 has several humans but no judge; stage 3 items carry no labels in this release.
    assert d.stage("extraction").status == "no_judges" and d.stage("extraction").ceiling is not None
    assert d.stage("response").best is None


@pytest.mark.slow
def test_cli_diagnose_json_and_text(recenter_db):
    runner = CliRunner()
    out = runner.invoke(cli, ["diagnose", "--db", str(recenter_db), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["worst_stage"] is None and data["verdict"].startswith("Cannot tell")
    assert [s["stage"] for s in data["stages"]] == ["extraction", "relevance", "response"]
    best = data["stages"][1]["best"]
    assert best["kappa_ci"][0] <= best["kappa"] <= best["kappa_ci"][1]
    assert not any(isinstance(v, float) and math.isnan(v) for v in best.values())
    text = runner.invoke(cli, ["diagnose", "--db", str(recenter_db)])
    assert text.exit_code == 0 and "best judge:" in text.output and data["verdict"] in text.output


def test_cli_diagnose_missing_db_is_one_clear_line(tmp_path):
    out = CliRunner().invoke(cli, ["diagnose", "--db", str(tmp_path / "none.duckdb")])
    assert out.exit_code == 2 and "no such database" in out.output
