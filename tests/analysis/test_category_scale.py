"""One category set per dataset: diagnose, the stage reports and the robust panel score a judge over the same K.

AC1 and PABAK depend on the number of categories. A PRISM judge that never answers "tie" must still be scored
over A/B/tie (the dataset's scale), wherever its figures are shown (comparable.categories_for).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from irrCAC.raw import CAC

from personagap.analysis.comparable import categories_for
from personagap.analysis.diagnosis import diagnose
from personagap.analysis.panel import scale_estimates
from personagap.analysis.robust import BASE_RATE_JUDGE
from personagap.cli import cli
from tests.support.oracles import panel_rows
from tests.support.stores import copy_store

FIGURES = ("kappa", "ac1", "pabak", "mcc", "balanced_accuracy")


def _ac1_by_hand(human: list[str], judge: list[str], categories: list[str]) -> float:
    # Gwet (2008), two raters: Pe = sum_k pi_k (1 - pi_k) / (K - 1), pi_k the mean of both raters' class shares.
    n = len(human)
    pa = sum(h == j for h, j in zip(human, judge, strict=True)) / n
    pi = [(human.count(c) + judge.count(c)) / (2 * n) for c in categories]
    pe = sum(p * (1 - p) for p in pi) / (len(categories) - 1)
    return (pa - pe) / (1 - pe)


# Judge "ab" never says "tie" (nor do the humans of its items); judge "t" does, on other items of the dataset.
HUMAN_AB = ["A", "A", "A", "A", "A", "A", "B", "B", "B", "A", "B", "A"]
JUDGE_AB = ["A", "A", "A", "A", "B", "A", "B", "B", "A", "A", "B", "A"]
HUMAN_T = ["tie", "A", "B", "tie", "B", "tie"]
JUDGE_T = ["tie", "A", "tie", "tie", "B", "A"]


def _pairs() -> pd.DataFrame:
    rows = []
    for rater, humans, judges in (("ab", HUMAN_AB, JUDGE_AB), ("t", HUMAN_T, JUDGE_T)):
        for i, (h, j) in enumerate(zip(humans, judges, strict=True)):
            rows.append({"stage": "response", "dataset": "d", "rater": rater, "rater_kind": "llm", "condition": "",
                         "user_id": f"u{i % 4}", "human": h, "label": j, "n": 1})
    return pd.DataFrame(rows)


def test_the_hand_example_differs_between_two_and_three_categories() -> None:
    three = _ac1_by_hand(HUMAN_AB, JUDGE_AB, ["A", "B", "tie"])
    two = _ac1_by_hand(HUMAN_AB, JUDGE_AB, ["A", "B"])
    # On paper: Pa = 10/12, class shares 2/3 and 1/3; Pe = (2/9 + 2/9) / (K - 1).
    assert three == pytest.approx(11 / 14) and two == pytest.approx(7 / 10)  # K = 3: Pe 2/9; K = 2: Pe 4/9
    ratings = pd.DataFrame({"human": HUMAN_AB, "judge": JUDGE_AB})
    assert three == pytest.approx(CAC(ratings, categories=["A", "B", "tie"]).gwet()["est"]["coefficient_value"],
                                  abs=1e-5)
    assert two == pytest.approx(CAC(ratings, categories=["A", "B"]).gwet()["est"]["coefficient_value"], abs=1e-5)


def test_diagnose_scores_a_judge_that_never_says_tie_over_the_datasets_scale() -> None:
    empty = pd.DataFrame(columns=["stage", "dataset", "item_id", "rater", "label", "user_id"])
    inventory = pd.DataFrame([{"stage": "response", "n_items": 18, "n_labels": 54, "n_human_labels": 18,
                               "n_judge_labels": 36}])
    d = diagnose(_pairs(), pd.DataFrame(columns=["stage", "dataset", "rater", "rater_kind", "condition", "failures"]),
                 empty, inventory, seed=0)
    by = {j.rater: j for j in d.stage("response").judges}
    assert by["ab"].categories == by["t"].categories == ["A", "B", "tie"]
    assert by["ab"].ac1 == pytest.approx(_ac1_by_hand(HUMAN_AB, JUDGE_AB, ["A", "B", "tie"]))
    ratings = pd.DataFrame({"human": HUMAN_AB, "judge": JUDGE_AB})
    bp = CAC(ratings, categories=["A", "B", "tie"]).bp()["est"]["coefficient_value"]
    assert by["ab"].pabak == pytest.approx(bp, abs=1e-5)  # PABAK over K classes = Brennan-Prediger


def test_categories_for_is_the_scale_not_one_judges_labels() -> None:
    labels = pd.DataFrame({
        "rater_kind": ["human", "llm", "llm", "human", "trained", "human"],
        "condition": ["", "", "", "shown-llm-rating", "in-sample", "overall"],
        "label": ["A", "B", "tie", "3", "A", None]})
    assert categories_for(labels) == ["A", "B", "tie"]  # another question's ratings are not on the scale
    assert categories_for(labels.iloc[:2], declared=["A", "B", "tie"]) == ["A", "B", "tie"]
    # An extractor's output on an item no human labelled is no category of the comparisons.
    chunks = pd.DataFrame({"item_id": ["i1", "i1", "i2"], "rater_kind": ["human", "llm", "llm"],
                           "condition": ["", "", ""], "label": ["ok", "bad", "likes hiking"]})
    assert categories_for(chunks) == ["bad", "ok"]
    yes = pd.DataFrame({"rater_kind": ["human", "llm"], "condition": ["", ""], "label": ["yes", "yes"]})
    assert categories_for(yes) == ["no", "yes"]


def test_scale_estimates_match_the_hand_value_with_an_unused_category() -> None:
    users = pd.Series([f"u{i % 4}" for i in range(len(HUMAN_AB))])
    est = scale_estimates(pd.Series(HUMAN_AB), pd.Series(JUDGE_AB), users, ["A", "B", "tie"], ("kappa", "ac1"))
    assert est["ac1"].value == pytest.approx(_ac1_by_hand(HUMAN_AB, JUDGE_AB, ["A", "B", "tie"]))


# --------------------------------------------------------------------------- real data, every face


@pytest.fixture(scope="module")
def prism_db(prism_release_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_store(prism_release_db, tmp_path_factory.mktemp("prism"))


def _cli_json(*args: str) -> dict:
    out = CliRunner().invoke(cli, [*args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def _panel(db: Path, stage: str, dataset: str) -> dict[str, dict]:
    from personagap.store import load_labels, opened

    with opened(db, read_only=True) as con:
        labels = load_labels(con, stage=stage)
    return {r["judge"]: r for r in panel_rows(labels, dataset)
            if r["judge"] != BASE_RATE_JUDGE}


def _agree(diag: dict[str, dict], report: dict[str, dict], panel: dict[str, dict]) -> None:
    assert set(diag) == set(report) == set(panel) and diag
    for judge, d in diag.items():
        for f in FIGURES:
            assert d[f] == pytest.approx(report[judge][f]), (judge, f, "diagnose vs report")
            # An undefined figure is null in diagnose's JSON and NaN in the dashboard's frame: the same "no value".
            if d[f] is None:
                assert panel[judge][f] is None or math.isnan(panel[judge][f]), (judge, f, "diagnose vs panel")
            else:
                assert d[f] == pytest.approx(panel[judge][f]), (judge, f, "diagnose vs panel (dashboard)")
        for f in ("kappa_ci", "ac1_ci", "pabak_ci"):
            assert d[f] == pytest.approx(report[judge][f]), (judge, f)


@pytest.mark.slow
def test_prism_every_face_gives_one_figure_per_judge(prism_db: Path) -> None:
    diag = _cli_json("diagnose", "--db", str(prism_db))
    report = _cli_json("report", "response", "--db", str(prism_db))
    scores = {j["judge"]: j for j in diag["stages"][2]["judges"] if j["dataset"] == "prism-judge"}
    rows = {j["judge"]: j for j in report["judges"] if j["dataset"] == "prism-judge"}
    _agree(scores, rows, _panel(prism_db, "response", "prism-judge"))
    # The judges that never answer "tie" (the A/B protocols) are scored over A/B/tie like the others.
    never_tie = [j for j, r in rows.items() if r["tie_rate"] == 0]
    assert never_tie
    assert all(scores[j]["categories"] == ["A", "B", "tie"] for j in scores)
    for j in never_tie:  # the judge's "tie" column is empty, yet it counts in K
        assert np.array(scores[j]["confusion"], dtype=float)[:, 2].sum() == 0


@pytest.mark.slow
def test_recenter_stage2_every_face_gives_one_figure_per_judge(recenter_db: Path) -> None:
    diag = _cli_json("diagnose", "--db", str(recenter_db))
    report = _cli_json("report", "relevance", "--db", str(recenter_db))
    scores = {j["judge"]: j for j in diag["stages"][1]["judges"] if j["dataset"] == "recenter-stage2"}
    rows = {j["judge"]: j for j in report["judges"]
            if j["dataset"] == "recenter-stage2" and j.get("reference", "blind") == "blind"}
    _agree(scores, rows, _panel(recenter_db, "relevance", "recenter-stage2"))


def _prism_ab_rows(shared_data: Path) -> list[dict]:
    """One A/B-only PRISM file (neither the participants' label nor the judge's is ever a tie) in the generic format."""
    rows = []
    path = shared_data / "prism_judge" / "prism_all_features_command-r-plus.jsonl"
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        r = json.loads(line)
        if r["asst_A"].strip() == r["asst_B"].strip():
            continue  # a pair of two identical answers is refused by import labels (issue 32); the release holds one
        item = {"item_id": f"pair-{n}", "user_id": hashlib.sha256(r["user_info"].encode()).hexdigest()[:12],
                "prompt": r["question"], "profile": r["user_info"], "response_a": r["asst_A"],
                "response_b": r["asst_B"]}
        rows.append(item | {"rater": "participant", "rater_kind": "human", "label": r["ground_truth"]})
        if r["answer"] in ("A", "B"):
            rows.append(item | {"rater": "command-r-plus", "rater_kind": "llm", "label": r["answer"]})
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("declared", [None, ("A", "B", "tie")])
def test_a_declared_scale_counts_even_when_no_one_used_a_category(shared_data: Path, tmp_path: Path,
                                                                  declared: tuple[str, ...] | None) -> None:
    rows = _prism_ab_rows(shared_data)
    assert {r["label"] for r in rows} == {"A", "B"}
    src = tmp_path / "ab.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    db = tmp_path / "ab.duckdb"
    args = ["import", "labels", str(src), "--stage", "response", "--dataset", "ab", "--db", str(db)]
    out = CliRunner().invoke(cli, args + (["--categories", ",".join(declared)] if declared else []))
    assert out.exit_code == 0, out.output
    diag = {j["judge"]: j for j in _cli_json("diagnose", "--db", str(db))["stages"][2]["judges"]}
    report = {j["judge"]: j for j in _cli_json("report", "response", "--db", str(db))["judges"]}
    (score,) = diag.values()
    # A pairwise dataset's record is on the A/B/tie scale whether or not the import declared it.
    assert score["categories"] == ["A", "B", "tie"]
    assert {"ac1": score["ac1"], "pabak": score["pabak"]} == pytest.approx(
        {"ac1": report["command-r-plus"]["ac1"], "pabak": report["command-r-plus"]["pabak"]})
    from personagap.store import load_labels, opened

    with opened(db, read_only=True) as con:
        labels = load_labels(con, stage="response")
    # The panel is handed the dataset's scale, as every report takes it from the dataset record.
    panel = {r["judge"]: r for r in panel_rows(labels, "ab", declared=score["categories"])}
    assert panel["command-r-plus"]["ac1"] == pytest.approx(score["ac1"])
    pairs = {}
    for r in rows:
        pairs.setdefault(r["item_id"], {})[r["rater_kind"]] = r["label"]
    both = [(p["human"], p["llm"]) for p in pairs.values() if "llm" in p]
    human, judge = [h for h, _ in both], [j for _, j in both]
    cats = ["A", "B", "tie"]
    assert score["ac1"] == pytest.approx(_ac1_by_hand(human, judge, cats))
    bp = CAC(pd.DataFrame({"human": human, "judge": judge}), categories=cats).bp()["est"]["coefficient_value"]
    assert score["pabak"] == pytest.approx(bp, abs=1e-5)
