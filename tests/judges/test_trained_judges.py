"""Offline trained judges: grouped CV, base-rate threshold, save/reload, cross-database judging, CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.judges.trained import (
    base_rate_threshold,
    grouped_folds,
    load_model,
    sidecar_path,
)
from personagap.stages import trained as stage
from tests.support.stores import copy_store

# --------------------------------------------------------------------------- pure parts

def test_grouped_folds_never_share_a_group_and_cover_every_item_once() -> None:
    rng = np.random.default_rng(3)
    groups = rng.choice([f"u{i}" for i in range(23)], size=500)
    seen = np.zeros(len(groups), dtype=int)
    for train, test in grouped_folds(groups, n_splits=5, seed=1):
        assert not set(groups[train]) & set(groups[test])
        assert len(train) + len(test) == len(groups)
        seen[test] += 1
    assert (seen == 1).all()


def test_grouped_folds_need_enough_groups() -> None:
    with pytest.raises(ValueError, match="cannot fill"):
        list(grouped_folds(["a", "b", "a"], n_splits=3))


def test_base_rate_threshold_selects_the_base_rate() -> None:
    p = np.random.default_rng(0).random(1000)
    for rate in (0.0, 0.05, 0.19, 0.5, 1.0):
        assert (p >= base_rate_threshold(p, rate)).mean() == pytest.approx(rate, abs=1e-9)


# --------------------------------------------------------------------------- relevance on the real release

@pytest.fixture(scope="module")
def trained_relevance(recenter_db: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path,
                                                                                            stage.TrainResult]:
    work = tmp_path_factory.mktemp("trained-rel")
    db = work / "db.duckdb"
    shutil.copy(recenter_db, db)
    result = stage.train_relevance(db, work / "rel.joblib")
    return db, work / "rel.joblib", result


@pytest.mark.slow
def test_relevance_cv_is_grouped_by_user_and_stored_as_a_trained_rater(trained_relevance) -> None:  # type: ignore[no-untyped-def]
    db, model_path, result = trained_relevance
    items = stage.relevance_items(db, ("recenter-stage2",))
    labelled = items[items["human"].notna()]
    meta = json.loads(sidecar_path(model_path).read_text())
    assert meta["cv"]["grouped_by"] == "user" and meta["n_train"] == len(labelled)
    assert meta["data_fingerprint"] and meta["model_id"] and meta["kind"] == "relevance"
    # The folds the CV used (same seed) keep every user on one side.
    for train, test in grouped_folds(labelled["user_id"].to_numpy(), meta["cv"]["n_splits"], meta["cv"]["seed"]):
        assert not set(labelled["user_id"].iloc[train]) & set(labelled["user_id"].iloc[test])
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT rater_kind, count(*), count(label) FROM labels "
                           "WHERE rater = 'trained-relevance/v1/cv' GROUP BY rater_kind").fetchall()
        run_kind = con.execute("SELECT kind FROM runs WHERE rater = 'trained-relevance/v1/cv'").fetchall()
    assert rows == [("trained", len(labelled), len(labelled))]
    assert run_kind == [("train",)]
    # The report lists the CV rater beside the LLMs, on the same items.
    report = stage_report_judges(db)
    assert report["trained-relevance/v1/cv"].n == report["gpt-5.4"].n == len(labelled)
    # The threshold matches the human base rate: the CV yes-rate stays near it (the LLMs over-select 2x+).
    cv = result.rows[0].figures
    assert cv["over_selection"] < 1.5
    assert cv["kappa"] > 0.2


def stage_report_judges(db: Path) -> dict[str, object]:
    from personagap.api import report_relevance

    return {j.judge: j for j in report_relevance(db).judges
            if j.dataset == "recenter-stage2"}


@pytest.mark.slow
def test_relevance_threshold_matches_training_base_rate(trained_relevance) -> None:  # type: ignore[no-untyped-def]
    db, model_path, _ = trained_relevance
    model = load_model(model_path, "relevance")
    items = stage.relevance_items(db, ("recenter-stage2",))
    labelled = items[items["human"].notna()]
    yes_rate = (np.asarray(model.predict(labelled)) == "yes").mean()
    assert model.metadata["base_rate"] == pytest.approx((labelled["human"] == "yes").mean())
    assert yes_rate == pytest.approx(model.metadata["base_rate"], abs=0.005)


def test_saved_model_reloads_and_predicts_identically(trained_relevance, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db, model_path, _ = trained_relevance
    items = stage.relevance_items(db, ("recenter-stage2",)).head(300)
    model = load_model(model_path, "relevance")
    again = load_model(model_path)
    np.testing.assert_array_equal(model.predict_proba(items), again.predict_proba(items))
    # A sidecar that does not belong to the model is refused.
    copy = tmp_path / "m.joblib"
    shutil.copy(model_path, copy)
    meta = json.loads(sidecar_path(model_path).read_text())
    sidecar_path(copy).write_text(json.dumps(meta | {"model_id": "0000000000"}))
    with pytest.raises(ValueError, match="disagree"):
        load_model(copy)
    with pytest.raises(ValueError, match="preference model is needed"):
        load_model(model_path, "preference")


def test_model_trained_on_one_db_labels_another_dbs_unseen_users(trained_relevance, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from personagap.api import import_recenter
    from personagap.sample_data import write_sample_release

    _, model_path, _ = trained_relevance
    other = tmp_path / "other.duckdb"
    import_recenter(write_sample_release(tmp_path / "sample"), other)
    out = CliRunner().invoke(cli, ["judge", "relevance", "--judge", "trained", "--model-path", str(model_path),
                                   "--db", str(other)])
    assert out.exit_code == 0, out.output
    model = load_model(model_path)
    items = stage.relevance_items(other, ("recenter-stage2",))
    with duckdb.connect(str(other), read_only=True) as con:
        got = con.execute("SELECT item_id, label, rater_kind FROM labels WHERE rater = ?",
                          [f"trained-relevance/v1/{model.tag}"]).df()
    assert set(got["item_id"]) == set(items["item_id"]) and (got["rater_kind"] == "trained").all()
    assert "in the model's training data" not in out.output  # none of these users was seen in training
    labels = got.set_index("item_id")["label"].loc[items["item_id"]].tolist()
    assert labels == model.predict(items)


def test_in_sample_labels_are_kept_out_of_the_comparison(trained_relevance, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from personagap.api import report_relevance

    db, model_path, _ = trained_relevance
    own = tmp_path / "own.duckdb"
    shutil.copy(db, own)
    summary = stage.judge_relevance_trained(own, model_path)
    assert summary.in_training > 0
    with duckdb.connect(str(own), read_only=True) as con:
        conditions = dict(con.execute("SELECT condition, count(*) FROM labels WHERE rater = ? GROUP BY ALL",
                                      [summary.rater]).fetchall())
    assert conditions.get(stage.IN_SAMPLE) == summary.in_training
    report = report_relevance(own)
    listed = [j for j in report.judges if j.judge == summary.rater]
    # Only items outside the training data may count (here: prompts without human labels, i.e. none matched).
    assert all(j.n <= summary.labelled - summary.in_training for j in listed)


def test_training_users_items_under_another_dataset_name_are_in_sample(trained_relevance, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 11 defect 7: the pilot re-uses stage-2 users; the model's labels on their pilot items are in-sample."""
    from personagap.analysis import comparable

    db, model_path, _ = trained_relevance
    own = tmp_path / "own.duckdb"
    shutil.copy(db, own)
    stage2 = stage.relevance_items(db, ("recenter-stage2",))
    train_users = set(stage2.loc[stage2["human"].notna(), "user_id"])
    pilot = stage.relevance_items(own, ("recenter-pilot",))
    expected = pilot.set_index("item_id")["user_id"].isin(train_users)
    assert expected.any() and not expected.all()  # some pilot items are training users' (52 in the release)
    assert not set(pilot["item_id"]) & set(stage2["item_id"])  # other items than the trained-on ones
    summary = stage.judge_relevance_trained(own, model_path, datasets=("recenter-pilot",))
    with duckdb.connect(str(own), read_only=True) as con:
        got = con.execute("SELECT item_id, rater_kind, condition FROM labels WHERE rater = ?", [summary.rater]).df()
    got = got.set_index("item_id").loc[expected.index]
    assert (got.loc[expected, "condition"] == comparable.IN_SAMPLE).all()
    assert (got.loc[~expected, "condition"] == comparable.BLIND).all()
    assert summary.in_training == int(expected.sum())
    # The one rule keeps exactly those out of every comparison.
    comparable_ids = set(got.index[comparable.comparable_judge_mask(got.reset_index())])
    assert comparable_ids == set(expected.index[~expected])


def test_cli_judge_trained_needs_a_model_path_of_the_right_kind(trained_relevance, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db, model_path, _ = trained_relevance
    runner = CliRunner()
    missing = runner.invoke(cli, ["judge", "relevance", "--judge", "trained", "--db", str(db)])
    assert missing.exit_code == 2 and "--model-path" in missing.output
    wrong = runner.invoke(cli, ["judge", "response", "--judge", "trained", "--model-path", str(model_path),
                                "--db", str(db)])
    assert wrong.exit_code == 2 and "preference model is needed" in wrong.output
    absent = runner.invoke(cli, ["judge", "relevance", "--judge", "trained", "--model-path",
                                 str(tmp_path / "nope.joblib"), "--db", str(db)])
    assert absent.exit_code == 2 and "no such model file" in absent.output


# --------------------------------------------------------------------------- preference on PRISM

@pytest.fixture(scope="module")
def prism_db(prism_release_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_store(prism_release_db, tmp_path_factory.mktemp("prism"))


@pytest.mark.slow
def test_preference_cli_trains_grouped_by_question_and_judges(prism_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "prism.duckdb"
    shutil.copy(prism_db, db)
    model_path = tmp_path / "pref.joblib"
    runner = CliRunner()
    out = runner.invoke(cli, ["train", "preference", "--db", str(db), "--out", str(model_path)])
    assert out.exit_code == 0, out.output
    assert "grouped by question" in out.output and "trained-preference/v1/cv" in out.output
    model = load_model(model_path, "preference")
    meta = json.loads(sidecar_path(model_path).read_text())
    items = stage.pairwise_items(db, ("prism-judge",))
    labelled = items[items["human"].notna()].reset_index(drop=True)
    for train, test in grouped_folds(labelled["question"].to_numpy(), meta["cv"]["n_splits"], meta["cv"]["seed"]):
        assert not set(labelled["question"].iloc[train]) & set(labelled["question"].iloc[test])
    # Bradley-Terry with both orders: swapping the answers gives exactly the complementary probability.
    sample = labelled.head(200)
    swapped = sample.rename(columns={"answer_a": "answer_b", "answer_b": "answer_a"})
    np.testing.assert_allclose(model.predict_proba(sample) + model.predict_proba(swapped), 1.0, atol=1e-9)
    # Better than a coin on held-out questions' decisive pairs (the CV figure the sidecar records).
    assert meta["cv"]["scores"]["accuracy_decisive"] > 0.55

    judged = runner.invoke(cli, ["judge", "response", "--judge", "trained", "--model-path", str(model_path),
                                 "--db", str(db)])
    assert judged.exit_code == 0, judged.output
    from personagap.stages.response import report_response

    report = report_response(db)
    raters = {j.rater: j for j in report.judges if j.dataset == "prism-judge"}
    assert {"trained-preference/v1/cv", f"trained-preference/v1/{model.tag}"} <= set(raters)
    cv = raters["trained-preference/v1/cv"]
    assert cv.rater_kind == "trained" and cv.n == len(labelled) and cv.tie_rate == 0.0
    assert cv.accuracy == pytest.approx(meta["cv"]["scores"]["accuracy"])


def test_preference_training_rejects_ties_only() -> None:
    from personagap.judges.trained import fit_preference

    frame = pd.DataFrame({"question": ["q"], "answer_a": ["a"], "answer_b": ["b"], "profile": ["p"]})
    with pytest.raises(ValueError, match="drop ties"):
        fit_preference(frame, ["tie"])


def test_train_relevance_on_imported_team_labels(tmp_path: Path) -> None:
    """`train relevance --dataset` on a team's own labels (no stored majority): trains on the blind majority."""
    from click.testing import CliRunner

    from personagap.analysis.comparable import majority_label
    from personagap.cli import cli
    from tests.support.byo_data import HUMANS, team_rows, write_rows

    rows = team_rows("relevance", n_users=12, per_user=4)
    db = str(tmp_path / "team.duckdb")
    runner = CliRunner()
    imported = runner.invoke(cli, ["import", "labels", str(write_rows(tmp_path / "t.jsonl", rows)), "--stage",
                                   "relevance", "--dataset", "team", "--db", db])
    assert imported.exit_code == 0, imported.output
    trained = runner.invoke(cli, ["train", "relevance", "--dataset", "team", "--out", str(tmp_path / "m.joblib"),
                                  "--folds", "3", "--db", db])
    assert trained.exit_code == 0, trained.output
    votes: dict[str, list[str]] = {}
    for r in rows:
        if r["rater"] in HUMANS:
            votes.setdefault(r["item_id"], []).append(r["label"])
    decided = {i: majority_label(v) for i, v in votes.items()}
    frame = stage.relevance_items(db, ("team",))
    assert len(frame) == len(votes)
    # Each item's training label is the human majority of its own three annotators (items keyed by the team's ids).
    import duckdb

    with duckdb.connect(db, read_only=True) as con:
        source = dict(con.execute("SELECT item_id, json_extract_string(payload, '$.source_id') FROM items").fetchall())
    got = {source[i]: (None if pd.isna(h) else h) for i, h in zip(frame["item_id"], frame["human"], strict=True)}
    assert got == decided and any(v == "yes" for v in got.values()) and any(v == "no" for v in got.values())
