"""Issue 11, trustworthy verdicts: no figure PersonaGap prints may be silently wrong.

Each test here failed on the code before the fix (commit 5297e23) and checks what the code did, on the real
human data in ../shared/data or on small synthetic stores written through the public store API.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score

from personagap.analysis.comparable import CONVERTED_SHOWN_LLM, IN_SAMPLE
from personagap.analysis.diagnosis_store import diagnose_store
from personagap.cli import cli
from personagap.records import Item, Label
from personagap.store import ImportBatch, write_batch
from tests.support.ci_oracle import rule_interval

YN = {False: "no", True: "yes"}
RUN = "test-issue-11"


def _write(db: Path, labels: list[Label], items: list[Item] | None = None) -> None:
    batch = ImportBatch()
    for it in items or []:
        batch.items[it.item_id] = it
    batch.labels.extend(labels)
    write_batch(db, batch)


def _query(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _json(args: list[str]) -> dict:
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


@pytest.fixture(scope="module")
def shared_db(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Re-Centering, PRISM judge, USR and LAPS imported into one database (what a user diagnoses)."""
    db = tmp_path_factory.mktemp("shared") / "all.duckdb"
    for command, folder in (("recenter", "recenter"), ("prism-judge", "prism_judge"), ("usr", "usr_personachat"),
                            ("laps", "laps")):
        out = CliRunner().invoke(cli, ["import", command, str(shared_data / folder), "--db", str(db)])
        assert out.exit_code == 0, out.output
    return db


# --------------------------------------------------------------------------- defect 1: in-sample labels

@pytest.mark.slow
def test_diagnose_json_never_ranks_in_sample_labels(recenter_db_copy: Path) -> None:
    # A trained judge labelling its own training users copies the humans (kappa 1): stored as 'in-sample'.
    ref = _query(recenter_db_copy, "SELECT l.item_id, l.label FROM labels l JOIN items i USING (item_id) "
                                   "WHERE i.dataset = 'recenter-stage2' AND l.rater_kind = 'human_majority' "
                                   "AND l.condition = '' AND l.label IS NOT NULL")
    assert len(ref) > 1000
    _write(recenter_db_copy, [Label(item_id=i, rater="trained-relevance/v1", rater_kind="trained",
                                    condition=IN_SAMPLE, label=lab, run_id=RUN) for i, lab in ref])
    data = _json(["diagnose", "--db", str(recenter_db_copy), "--json"])
    listed = [j for s in data["stages"] for j in [*s["judges"], *s.get("gaps", []), s["best"], s["worst"]] if j]
    assert listed  # the imported LLMs are still ranked
    assert not [j for j in listed if j["condition"] == IN_SAMPLE or j["rater"] == "trained-relevance/v1"]
    best = data["stages"][1]["best"]
    assert best["kappa"] < 0.9  # the copied labels would have scored 1.0
    report = _json(["report", "relevance", "--db", str(recenter_db_copy), "--json"])
    assert "trained-relevance/v1" not in json.dumps(report)


@pytest.mark.slow
def test_response_report_never_scores_in_sample_labels(shared_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "prism.duckdb"
    db.write_bytes(shared_db.read_bytes())
    ref = _query(db, "SELECT l.item_id, l.label FROM labels l JOIN items i USING (item_id) "
                     "WHERE i.dataset = 'prism-judge' AND l.rater_kind = 'human' AND l.condition = '' "
                     "AND l.label IS NOT NULL")
    _write(db, [Label(item_id=i, rater="trained-preference/v1", rater_kind="trained", condition=IN_SAMPLE,
                      label=lab, run_id=RUN, meta={"swapped": False}) for i, lab in ref])
    report = _json(["report", "response", "--db", str(db), "--json"])
    assert report["judges"]  # the recorded PRISM judges are there
    assert not [j for j in report["judges"] if j["rater"] == "trained-preference/v1"]


# --------------------------------------------------------------------------- defects 5 and 6: the pilot

def _pilot_items(db: Path) -> list[tuple[str, str, str]]:
    """(item, user, gemma's label) on the pilot: an LLM's labels to build synthetic raters from."""
    return _query(db, "SELECT l.item_id, i.user_id, l.label FROM labels l JOIN items i USING (item_id) "
                      "WHERE i.dataset = 'recenter-pilot' AND l.rater = 'google_gemma-4-31b-it' "
                      "AND l.label IS NOT NULL ORDER BY l.item_id")


@pytest.mark.slow
def test_pilot_reports_anchored_labels_apart_and_kinds_apart(recenter_db_copy: Path) -> None:
    rows = _pilot_items(recenter_db_copy)
    rng = np.random.default_rng(0)
    labels = []
    for iid, _user, lab in rows:
        flip = {"yes": "no", "no": "yes"}
        # Two blind annotators (independent noise) and two who copied the LLM after seeing its label.
        labels += [Label(item_id=iid, rater=f"blind_{k}", rater_kind="human", label=flip[lab] if rng.random() < 0.3
                         else lab, run_id=RUN) for k in ("x", "y")]
        labels += [Label(item_id=iid, rater=f"anchored_{k}", rater_kind="human", condition=CONVERTED_SHOWN_LLM,
                         label=lab, run_id=RUN) for k in ("x", "y")]
        # A trained model on the same items: its own kind, never an LLM.
        labels.append(Label(item_id=iid, rater="trained-relevance/v1/cv", rater_kind="trained", label=lab,
                            run_id=RUN))
    _write(recenter_db_copy, labels)
    report = _json(["report", "relevance", "--db", str(recenter_db_copy), "--json"])
    pilot = report["pilot"]
    llms = {r for (r,) in _query(recenter_db_copy, "SELECT DISTINCT l.rater FROM labels l JOIN items i USING "
                                                   "(item_id) WHERE i.dataset = 'recenter-pilot' AND "
                                                   "l.rater_kind = 'llm'")}
    # Defect 6: the trained model is its own kind, so the pilot counts exactly the LLM files as LLMs.
    assert {r for r, g in pilot["raters"].items() if g == "llm"} == llms
    assert pilot["raters"]["trained-relevance/v1/cv"] == "trained"
    assert {"human–trained", "llm–trained"} <= {g["pair_type"] for g in pilot["groups"]}
    text = CliRunner().invoke(cli, ["report", "relevance", "--db", str(recenter_db_copy)])
    assert f"{len(llms)} LLMs, 1 trained model" in text.output
    # Defect 5: labels given after seeing an LLM's label are never blind, and are reported apart, labelled.
    assert {"blind_x", "blind_y"} <= {r for r, g in pilot["raters"].items() if g == "human"}
    assert not {"anchored_x", "anchored_y"} & set(pilot["raters"])
    anchored = report["pilot_anchored"]
    assert anchored["protocol"].startswith("anchored") and {"anchored_x", "anchored_y"} <= set(anchored["raters"])
    # The copies agree perfectly with each other: a blind figure that included them would be inflated.
    assert anchored["matrix"]["anchored_x"]["anchored_y"] == pytest.approx(1.0)
    assert "anchored (annotators saw an LLM label)" in text.output


def _release_blind_annotators(root: Path) -> set[str]:
    """Task-3 annotators none of whose rows is a copy of their task-2 labels, read from the release files."""
    out = set()
    for path in sorted((root / "pilot/annotations").glob("*_task3.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        judged = [j for r in rows for j in r["relevance_judgments"] if j.get("relevant") is not None]
        if judged and not any("converted from task2" in json.dumps(r) for r in rows):
            out.add(path.name.rsplit("_task3", 1)[0])
    return out


def test_real_pilot_blind_figures_use_blind_annotators_only(recenter_db: Path, shared_data: Path) -> None:
    blind = _release_blind_annotators(shared_data / "recenter")
    report = _json(["report", "relevance", "--db", str(recenter_db), "--json"])
    if len(blind) < 2:
        assert report["pilot"] is None
        assert any("too few blind labels" in n for n in report["notes"])
    else:
        assert {r for r, g in report["pilot"]["raters"].items() if g == "human"} == blind
    anchored = report["pilot_anchored"]
    assert anchored is not None and not blind & set(anchored["raters"])
    # The anchored human–human mean kappa, recomputed with sklearn from the stored anchored labels.
    rows = _query(recenter_db, "SELECT l.item_id, l.rater, l.label, l.condition FROM labels l JOIN items i "
                               "USING (item_id) WHERE i.dataset = 'recenter-pilot' AND l.rater_kind = 'human' "
                               "AND l.condition IN ('shown-llm', 'shown-llm-converted') AND l.label IN ('yes', 'no')")
    by_rater: dict[str, dict[str, str]] = {}
    for iid, rater, lab, _cond in sorted(rows, key=lambda r: r[3] != "shown-llm"):  # the reveal's label first
        by_rater.setdefault(rater, {}).setdefault(iid, lab)
    kappas = []
    names = sorted(by_rater)
    for a_i, a in enumerate(names):
        for b in names[a_i + 1:]:
            shared = sorted(set(by_rater[a]) & set(by_rater[b]))
            if len(shared) >= 10:
                kappas.append(cohen_kappa_score([by_rater[a][i] for i in shared], [by_rater[b][i] for i in shared]))
    hh = next(g for g in anchored["groups"] if g["pair_type"] == "human–human")
    assert hh["n_pairs"] == len(kappas)
    assert hh["mean_kappa"] == pytest.approx(float(np.mean(kappas)))


# --------------------------------------------------------------------------- defect 7: the verdict

def _synthetic(db: Path, spec: list[tuple[str, str, int, float, float | None]], *, users: int = 40,
               per_user: int = 15, seed: int = 0) -> None:
    """Per (stage, dataset, humans, human flip rate, judge flip rate): noisy copies of a hidden truth."""
    rng = np.random.default_rng(seed)
    items, labels = [], []
    for stage, dataset, n_humans, h_flip, j_flip in spec:
        for u in range(users):
            for k in range(per_user):
                iid = f"{dataset}-{u}-{k}"
                items.append(Item(item_id=iid, dataset=dataset, stage=stage, user_id=f"u{u:03d}"))
                truth = bool(rng.random() < 0.5)
                for h in range(n_humans):
                    labels.append(Label(item_id=iid, rater=f"h{h}", rater_kind="human",
                                        label=YN[truth ^ bool(rng.random() < h_flip)], run_id=RUN))
                if j_flip is not None:
                    labels.append(Label(item_id=iid, rater=f"judge-{dataset}", rater_kind="llm",
                                        label=YN[truth ^ bool(rng.random() < j_flip)], run_id=RUN))
    _write(db, labels, items)


def test_verdict_ranks_by_gap_to_the_same_datasets_ceiling(tmp_path: Path) -> None:
    # Stage 2's judge has the lower kappa but its humans barely agree either (gap ~0.03); stage 3's judge has
    # a higher kappa but sits far below humans who agree almost perfectly (gap ~0.3). The old rule named stage 2.
    db = tmp_path / "gap.duckdb"
    _synthetic(db, [("relevance", "rel-ds", 3, 0.15, 0.17), ("response", "resp-ds", 3, 0.01, 0.15)])
    d = diagnose_store(db).diagnosis
    rel, resp = d.stage("relevance"), d.stage("response")
    assert rel.best is not None and resp.best is not None and rel.best.kappa < resp.best.kappa
    assert rel.gap is not None and resp.gap is not None
    assert resp.gap.gap_ci[0] > rel.gap.gap_ci[1]
    assert d.worst_stage == "response" and d.ranking == ["response", "relevance"]
    assert "stage 3 (response)" in d.verdict and "Cannot tell" not in d.verdict
    assert resp.ceiling is not None and resp.ceiling.dataset == "resp-ds"


def test_verdict_cannot_tell_when_gap_cis_overlap(tmp_path: Path) -> None:
    db = tmp_path / "tie.duckdb"
    _synthetic(db, [("relevance", "rel-ds", 3, 0.1, 0.2), ("response", "resp-ds", 3, 0.1, 0.2)])
    d = diagnose_store(db).diagnosis
    assert d.worst_stage is None
    assert d.verdict.startswith("Cannot tell") and "includes 0" in d.verdict
    assert set(d.ranking) == {"relevance", "response"}


def test_a_ceiling_is_never_borrowed_from_another_dataset(tmp_path: Path) -> None:
    # Stage 3: judges on a dataset with one human per item, and three humans on another dataset (no judge).
    db = tmp_path / "borrow.duckdb"
    _synthetic(db, [("response", "one-human", 1, 0.0, 0.3), ("response", "three-humans", 3, 0.05, None)])
    d = diagnose_store(db).diagnosis
    s = d.stage("response")
    assert s.best is not None and s.best.dataset == "one-human"
    assert [c.dataset for c in s.ceilings] == ["three-humans"]
    assert s.ceiling is None and s.gap is None
    assert any(n.startswith("one-human: no human ceiling") for n in s.notes)
    assert d.worst_stage is None and "never borrowed" in d.verdict


def test_gap_ci_is_paired_over_users_at_95_percent(tmp_path: Path) -> None:
    db = tmp_path / "paired.duckdb"
    users, per_user = 12, 10
    _synthetic(db, [("relevance", "ds", 3, 0.1, 0.25)], users=users, per_user=per_user, seed=3)
    d = diagnose_store(db, seed=5).diagnosis
    gap = d.stage("relevance").gap
    assert gap is not None and gap.n_users == users
    # Independent recomputation: sklearn kappas with one user left out at a time, the SAME user left out for the
    # humans and the judge, then the rule's interval of those leave-one-out values (tests/support/ci_oracle.py): on the
    # scale of the figure's range, with a t quantile on Satterthwaite degrees of freedom.
    rows = _query(db, "SELECT i.user_id, l.item_id, l.rater, l.label FROM labels l JOIN items i USING (item_id)")
    labels: dict[str, dict[str, str]] = {}
    user_of: dict[str, str] = {}
    for user, iid, rater, lab in rows:
        labels.setdefault(rater, {})[iid] = lab
        user_of[iid] = user
    ids = sorted(user_of)
    people = sorted(set(user_of.values()))
    humans = ["h0", "h1", "h2"]

    def kappa(a: str, b: str, keep: list[str]) -> float:
        return cohen_kappa_score([labels[a][i] for i in keep], [labels[b][i] for i in keep])

    def gap_of(keep: list[str]) -> float:
        hh = np.mean([kappa(a, b, keep) for k, a in enumerate(humans) for b in humans[k + 1:]])
        return float(hh - np.mean([kappa("judge-ds", h, keep) for h in humans]))

    def jackknife_t(point: float, figure: Callable[[list[str]], float],
                    bounds: tuple[float, float] | None = None) -> list[float]:
        loo = [float(figure([i for i in ids if user_of[i] != u])) for u in people]
        assert len(loo) == users
        return list(rule_interval(point, loo, bounds))

    assert gap.gap == pytest.approx(gap_of(ids))
    # A gap (a difference of kappas) has no bounds in analysis/diagnosis_ceiling.py: the identity scale.
    assert gap.gap_ci == pytest.approx(jackknife_t(gap.gap, gap_of))
    # The judge-vs-majority kappa's CI at the same level, end to end.
    best = d.stage("relevance").best
    majority = {i: max(("no", "yes"), key=lambda v: sum(labels[h][i] == v for h in humans)) for i in ids}

    def majority_kappa(keep: list[str]) -> float:
        return cohen_kappa_score([majority[i] for i in keep], [labels["judge-ds"][i] for i in keep])

    # The judge's kappa is the registered metric "kappa", in (-1, 1) (analysis/agreement.py estimates): Fisher's z.
    assert best is not None and best.kappa_ci == pytest.approx(jackknife_t(best.kappa, majority_kappa, (-1.0, 1.0)))


@pytest.mark.slow
def test_real_data_verdict_borrows_no_ceiling(shared_db: Path) -> None:
    data = _json(["diagnose", "--db", str(shared_db), "--json"])
    response = data["stages"][2]
    assert response["best"]["dataset"] == "prism-judge"
    assert response["ceiling"] is None or response["ceiling"]["dataset"] == "prism-judge"
    assert "usr-personachat" in [c["dataset"] for c in response["ceilings"]]
    assert "response" not in data["ranking"]
    assert any(n.startswith("prism-judge: no human ceiling") for n in response["notes"])
    if len(data["ranking"]) < 2:
        assert data["worst_stage"] is None and data["verdict"].startswith("Cannot tell")


# --------------------------------------------------------------------------- defect 9: say what a figure rests on

@pytest.mark.slow
def test_profile_gap_says_it_uses_only_items_both_conditions_judged(shared_db: Path) -> None:
    report = _json(["report", "response", "--db", str(shared_db), "--json"])
    assert report["profile_gaps"]
    def judged(g: dict, condition: str) -> set[str]:
        return {i for (i,) in _query(shared_db, f"""
            SELECT l.item_id FROM labels l JOIN items i USING (item_id)
            WHERE i.dataset = '{g["dataset"]}' AND l.rater = '{g["rater"]}' AND l.condition = '{condition}'
              AND l.label IS NOT NULL
              AND l.item_id IN (SELECT item_id FROM labels WHERE rater_kind = 'human' AND condition = ''
                                AND label IS NOT NULL)""")}

    for g in report["profile_gaps"]:
        with_, without = judged(g, g["with_condition"]), judged(g, g["without_condition"])
        assert (g["n_with"], g["n_without"], g["n"]) == (len(with_), len(without), len(with_ & without))
        assert g["n"] < min(g["n_with"], g["n_without"])  # on PRISM the shared subset is much smaller
    text = CliRunner().invoke(cli, ["report", "response", "--db", str(shared_db)]).output
    g = report["profile_gaps"][0]
    assert (f"on the {g['n']} items both conditions judged (of {g['n_with']} judged with the profile, "
            f"{g['n_without']} without)") in text
    assert f"; {g['n_users']} users]" in text


# --------------------------------------------------------------------------- issue 13 panel in every report

@pytest.mark.slow
def test_response_report_and_diagnosis_carry_the_robust_panel(shared_db: Path) -> None:
    report = _json(["report", "response", "--db", str(shared_db), "--json"])
    pairwise = [j for j in report["judges"] if j["dataset"] == "prism-judge"]
    assert pairwise
    for j in pairwise:  # A/B/tie: the panel is defined, the yes/no indices are not
        assert j["ac1_ci"][0] <= j["ac1"] <= j["ac1_ci"][1] and -1 <= j["mcc"] <= 1
        assert j["prevalence_index"] is None and j["bias_index"] is None
    prism_tests = [t for t in report["alt_test"] if t["dataset"] == "prism-judge"]
    assert prism_tests and not any(t["applicable"] for t in prism_tests)  # one human per item: says why not
    assert all(t["reason"] for t in prism_tests)
    data = _json(["diagnose", "--db", str(shared_db), "--json"])
    best = data["stages"][2]["best"]
    assert best["ac1"] is not None and best["balanced_accuracy_ci"][0] <= best["balanced_accuracy"]
    (row,) = [j for j in pairwise if j["judge"] == best["judge"]]
    assert best["mcc"] == pytest.approx(row["mcc"])  # the diagnosis and the report agree


# --------------------------------------------------------------------------- defect 8: demo keeps your data

def test_demo_refuses_an_existing_non_demo_database(recenter_db_copy: Path) -> None:
    before = _query(recenter_db_copy, "SELECT count(*) FROM labels")
    out = CliRunner().invoke(cli, ["demo", "--db", str(recenter_db_copy)])
    assert out.exit_code == 2
    assert "not a demo database" in out.output and "--force" in out.output
    assert _query(recenter_db_copy, "SELECT count(*) FROM labels") == before
    help_text = CliRunner().invoke(cli, ["demo", "--help"]).output
    assert "--force" in help_text and "refused" in help_text


@pytest.mark.slow
def test_demo_replaces_its_own_database_and_force_replaces_others(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("personagap")
    env = {"PATH": str(exe.parent), "HOME": str(tmp_path), "NO_PROXY": "*", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).close()  # someone else's file
    out = subprocess.run([str(exe), "demo", "--db", str(other), "--force"], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert _query(other, "SELECT value FROM meta WHERE key = 'demo'") == [("1",)]
    # What lets the next `personagap demo --db other.duckdb` replace it without --force:
    from personagap.cli import _is_demo_db

    fresh = tmp_path / "fresh.duckdb"
    duckdb.connect(str(fresh)).close()
    assert _is_demo_db(other) and not _is_demo_db(fresh)


@pytest.mark.slow
def test_diagnose_tests_each_best_judge_like_the_stage_report(recenter_db: Path) -> None:
    """`diagnose --json` gives the best judge's alternative-annotator test and corrected estimates, the very rows
    `report relevance --json` holds for that judge (one implementation), blind and anchored humans apart."""
    args = ["--db", str(recenter_db), "--json"]
    diag = CliRunner().invoke(cli, ["diagnose", *args])
    assert diag.exit_code == 0, diag.output
    d = json.loads(diag.output)
    report = json.loads(CliRunner().invoke(cli, ["report", "relevance", *args]).output)
    best = next(s["best"] for s in d["stages"] if s["stage"] == "relevance")
    mine = d["best_judge_vs_humans"]["relevance"]
    expected_tests = [t for t in report["alt_test"] if t["judge"] == best["judge"] and t["dataset"] == best["dataset"]]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "origin"} for r in rows]  # noqa: E731
    # Judges are ranked within one dataset (the stage's with the most users): stage 2's majorities, where no
    # human saw an LLM's label, so the test runs against blind humans only.
    assert best["dataset"] == "recenter-stage2"
    assert strip(mine["alt_test"]) == strip(expected_tests) and {t["humans"] for t in mine["alt_test"]} == {"blind"}
    expected_rates = [e for e in report["estimates"] if e["judge"] == best["judge"] and e["dataset"] == best["dataset"]]
    assert strip(mine["estimates"]) == strip(expected_rates) and mine["estimates"]
    assert set(d["best_judge_vs_humans"]) <= {"extraction", "relevance", "response"}
