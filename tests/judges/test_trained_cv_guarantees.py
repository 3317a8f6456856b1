"""Leakage guarantees of the trained judges' cross-validation, checked on what the CV actually did.

Each CV returns a record of every fold (:class:`~personagap.judges.trained.FoldRecord`): the group values
(users, or questions) of its training and test rows, and what the fold's model was fitted on, read back
from the model itself. These tests assert disjointness and train-only fitting on those records, and one
behavioural test shows the consequence on synthetic data whose labels can only be memorised per user.
Grouping the relevance CV by item, fitting a fold on all data, or grouping the preference CV by item
fails here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from personagap.judges import trained as judges_trained
from personagap.judges.trained import CrossValidation, cross_val_preference, cross_val_relevance, sidecar_path
from personagap.stages import trained as stage


def assert_grouped_and_train_only(cv: CrossValidation, items: pd.DataFrame, by: str) -> None:
    """The record says: groups never on both sides, each row tested once, each model fitted on its train rows."""
    assert cv.grouped_by == by
    groups = items[by].astype(str).to_numpy()
    tested = np.zeros(len(items), dtype=int)
    for fold in cv.folds:
        test = np.asarray(fold.test_index, dtype=int)
        tested[test] += 1
        # The record describes the rows actually tested, and no group of them is in the training part.
        assert fold.test_groups == frozenset(groups[test])
        assert fold.disjoint and not fold.train_groups & fold.test_groups
        # The fitted model saw no test group and no more rows than the training part.
        assert fold.fitted_on_train_only
        assert not fold.fitted_groups & frozenset(groups[test])
        assert fold.fitted_groups <= fold.train_groups and 0 < fold.n_fitted <= fold.n_train
        assert fold.n_train + fold.n_test <= len(items)
    assert (tested == 1).all(), "every item is predicted by exactly one fold"


# --------------------------------------------------------------------------- relevance on the real release

@pytest.fixture(scope="module")
def relevance_run(recenter_db: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path,
                                                                                       stage.TrainResult]:
    work = tmp_path_factory.mktemp("cv-rel")
    db = work / "db.duckdb"
    shutil.copy(recenter_db, db)
    return db, work / "rel.joblib", stage.train_relevance(db, work / "rel.joblib")


@pytest.mark.slow
def test_relevance_cv_holds_out_whole_users_and_fits_on_train_users_only(relevance_run) -> None:  # type: ignore[no-untyped-def]
    db, model_path, result = relevance_run
    items = stage.relevance_items(db, ("recenter-stage2",))
    labelled = items[items["human"].notna()].reset_index(drop=True)
    cv = result.cv
    assert cv is not None and len(cv.folds) == 5
    assert_grouped_and_train_only(cv, labelled, "user_id")
    users = frozenset(labelled["user_id"].astype(str))
    for fold in cv.folds:
        # Relevance trains on the whole complement: exactly the other users, every one of their items.
        assert fold.train_groups == fold.fitted_groups == users - fold.test_groups
        assert fold.n_fitted == fold.n_train == len(labelled) - fold.n_test
    # The sidecar records the same folds: held-out user ids, and that each model was fitted on train only.
    meta = json.loads(sidecar_path(model_path).read_text())
    recorded = meta["cv"]["folds"]
    assert [f["test_groups"]["ids"] for f in recorded] == [sorted(f.test_groups) for f in cv.folds]
    assert all(f["disjoint"] and f["fitted_on_train_only"] for f in recorded)
    assert sum(f["n_test"] for f in recorded) == meta["n_train"] == len(labelled)
    # The final model was fitted on every labelled user (its labels on their items are in-sample).
    from personagap.judges.trained import load_model

    assert load_model(model_path).train_users == users


def test_synthetic_relevance_cv_cannot_learn_labels_that_only_identify_users() -> None:
    """Labels decided per user, a token naming the user in each attribute: only leakage can predict them."""
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(60)]
    rows = []
    for u in range(16):
        answer = "yes" if u % 2 else "no"
        for prompt in range(3):
            text = " ".join(rng.choice(words, 8))
            for k in range(8):
                rows.append({"item_id": f"i{u}-{prompt}-{k}", "user_id": f"user{u}", "prompt_index": prompt,
                             "prompt_text": f"Please {text}", "reason": None, "confidence": np.nan,
                             "attribute": f"The user likes {' '.join(rng.choice(words, 3))} zq{u}tag.",
                             "human": answer})
    items = pd.DataFrame(rows)
    y = (items["human"] == "yes").astype(int).to_numpy()
    cv = cross_val_relevance(items, y, n_splits=4, seed=0)
    assert_grouped_and_train_only(cv, items, "user_id")
    kappa = cohen_kappa_score(y, (np.asarray(cv.labels) == "yes").astype(int))
    # Held-out users' tokens were never seen: no better than chance. (Grouping by item, or fitting each fold
    # on all rows, memorises the user token: kappa near 1.)
    assert kappa < 0.3
    # The same data with a fold fitted on everything is what leakage looks like: the check is not vacuous.
    leaky = judges_trained.fit_relevance(items, y)
    assert cohen_kappa_score(y, (np.asarray(leaky.predict(items)) == "yes").astype(int)) > 0.9


# --------------------------------------------------------------------------- preference on PRISM

@pytest.fixture(scope="module")
def prism_pairs(prism_release_db: Path) -> pd.DataFrame:
    items = stage.pairwise_items(prism_release_db, ("prism-judge",))
    labelled = items[items["human"].notna() & (items["kind"] == "pairwise")]
    # A subset of questions keeps this fast; every pair of a kept question stays (questions repeat).
    keep = sorted(set(labelled["question"]))[:150]
    return labelled[labelled["question"].isin(keep)].reset_index(drop=True)


def test_preference_cv_holds_out_whole_questions_and_fits_on_decisive_train_pairs(
        prism_pairs: pd.DataFrame) -> None:
    assert prism_pairs["question"].duplicated().any(), "the test needs questions with several pairs"
    labels = prism_pairs["human"].tolist()
    cv = cross_val_preference(prism_pairs, labels, n_splits=5, seed=0)
    assert_grouped_and_train_only(cv, prism_pairs, "question")
    decisive = np.isin(np.asarray(labels, dtype=object), ["A", "B"])
    for fold in cv.folds:
        test = np.zeros(len(prism_pairs), dtype=bool)
        test[list(fold.test_index)] = True
        # Fitted on exactly the decisive pairs of the other questions (ties carry no strict preference).
        assert fold.n_fitted == fold.n_train == int((decisive & ~test).sum())
    record = cv.record()
    assert record["grouped_by"] == "question" and "ids" not in record["folds"][0]["test_groups"]
    assert all(f["disjoint"] and f["fitted_on_train_only"] for f in record["folds"])


# --------------------------------------------------------------------------- the record itself

def test_synthetic_fold_record_of_a_fold_fitted_on_its_test_rows_says_so() -> None:
    """FoldRecord's verdicts are computed from the sets, so a leaky fold cannot be recorded as clean."""
    fold = judges_trained.FoldRecord(fold=0, train_groups=frozenset({"a", "b"}), test_groups=frozenset({"c"}),
                                     fitted_groups=frozenset({"a", "b", "c"}), n_train=4, n_test=2, n_fitted=6,
                                     test_index=(4, 5))
    assert fold.disjoint and not fold.fitted_on_train_only
    clean = judges_trained.FoldRecord(fold=0, train_groups=frozenset({"a", "b"}), test_groups=frozenset({"c"}),
                                      fitted_groups=frozenset({"a", "b"}), n_train=4, n_test=2, n_fitted=4,
                                      test_index=(4, 5))
    assert clean.fitted_on_train_only
    assert not judges_trained.FoldRecord(fold=0, train_groups=frozenset({"a", "b"}), test_groups=frozenset({"c"}),
                                         fitted_groups=frozenset({"a"}), n_train=4, n_test=2, n_fitted=5,
                                         test_index=(4, 5)).fitted_on_train_only
    shared = judges_trained.FoldRecord(fold=0, train_groups=frozenset({"a", "c"}), test_groups=frozenset({"c"}),
                                       fitted_groups=frozenset({"a"}), n_train=4, n_test=2, n_fitted=4,
                                       test_index=(4, 5))
    assert not shared.disjoint


def test_synthetic_preference_cv_groups_by_question_and_fits_decisive_train_pairs_only() -> None:
    rng = np.random.default_rng(3)
    rows = []
    for q in range(12):
        for k in range(4):
            rows.append({"item_id": f"q{q}-{k}", "user_id": f"u{(q + k) % 5}", "question": f"question {q} about x{q}",
                         "answer_a": " ".join(rng.choice(["alpha", "beta", "gamma", "- item", "delta"], 6 + k)),
                         "answer_b": " ".join(rng.choice(["epsilon", "zeta", "eta", "theta"], 3 + q % 4)),
                         "profile": "a profile", "human": ["A", "B", "tie"][(q + k) % 3]})
    items = pd.DataFrame(rows)
    cv = cross_val_preference(items, items["human"].tolist(), n_splits=3, seed=1)
    assert_grouped_and_train_only(cv, items, "question")
    decisive = items["human"].isin(["A", "B"]).to_numpy()
    for fold in cv.folds:
        test = np.zeros(len(items), dtype=bool)
        test[list(fold.test_index)] = True
        assert fold.n_fitted == fold.n_train == int((decisive & ~test).sum())
        assert fold.fitted_groups == frozenset(items.loc[decisive & ~test, "question"])
    assert set(cv.labels) <= {"A", "B"} and len(cv.labels) == len(items)
    assert ((cv.probabilities >= 0) & (cv.probabilities <= 1)).all()


def verifier_items() -> pd.DataFrame:
    """Eight users' (conversation, attribute) pairs; negatives come from the next user or from two outsiders
    who own no conversation (so 'whose words the model saw' differs from 'whose pairs it fitted')."""
    rows = []
    for u in range(8):
        turns = (f"I really like topic{u} and things{u}", "tell me more")
        for k in range(3):
            rows.append({"user_id": f"u{u}", "source_user": f"u{u}", "attribute": f"likes topic{u} {k}",
                         "label": 1, "user_turns": turns, "assistant_turns": ("sure",)})
            source = f"u{(u + 1) % 8}" if k else f"outsider{u % 2}"
            rows.append({"user_id": f"u{u}", "source_user": source, "attribute": f"enjoys hobby{source} {k}",
                         "label": 0, "user_turns": turns, "assistant_turns": ("sure",)})
    return pd.DataFrame(rows)


def test_synthetic_verifier_cv_keeps_test_users_out_as_sources_too() -> None:
    from personagap.judges.trained import cross_val_verifier

    items = verifier_items()
    cv = cross_val_verifier(items, items["label"].to_numpy(), n_splits=4, seed=3)
    assert cv.seed == 3 and len(cv.folds) == 4
    tested = np.zeros(len(items), dtype=int)
    for fold in cv.folds:
        test = np.asarray(fold.test_index)
        tested[test] += 1
        test_users = frozenset(items["user_id"].iloc[test])
        assert fold.test_groups == test_users and fold.disjoint and fold.fitted_on_train_only
        # No pair whose negative came from a test user is fitted on: fewer rows than the fold's complement.
        rest = ~np.isin(np.arange(len(items)), test)
        kept = rest & ~items["source_user"].isin(test_users).to_numpy()
        assert (rest & ~kept).any() and fold.n_fitted == fold.n_train == int(kept.sum())
        # The record names every user whose words the model saw: owners and sources (outsiders included).
        assert fold.fitted_groups == frozenset(items.loc[kept, "user_id"]) | frozenset(items.loc[kept, "source_user"])
        assert {"outsider0", "outsider1"} <= fold.fitted_groups and not fold.fitted_groups & test_users
    assert (tested == 1).all()
    # Real out-of-fold probabilities (the attribute's words are in the user's turns only for positives).
    p = cv.probabilities
    assert np.isfinite(p).all() and ((p >= 0) & (p <= 1)).all()
    assert cv.labels == ["ok" if v >= 0.5 else "bad" for v in p]
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(items["label"], p) > 0.8
    # Defaults: 5 folds, seed 0, reproducible; and items without a source column still run (owners only).
    again = cross_val_verifier(items, items["label"].to_numpy())
    assert len(again.folds) == 5 and again.seed == 0
    assert [f.test_index for f in again.folds] == [f.test_index for f in cross_val_verifier(
        items, items["label"].to_numpy()).folds]
    owners_only = cross_val_verifier(items.drop(columns="source_user"), items["label"].to_numpy(), n_splits=4)
    assert all(f.n_fitted == f.n_train == len(items) - f.n_test for f in owners_only.folds)


def test_synthetic_in_sample_mask_flags_training_users_under_any_dataset_name() -> None:
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(30)]
    train = pd.DataFrame([{"item_id": f"s2-{u}-{k}", "dataset": "recenter-stage2", "user_id": f"user{u}",
                           "prompt_index": 0, "prompt_text": "Plan a trip", "reason": None, "confidence": np.nan,
                           "attribute": " ".join(rng.choice(words, 4))} for u in range(4) for k in range(6)])
    model = judges_trained.fit_relevance(train, np.arange(len(train)) % 2)
    assert model.train_users == {"user0", "user1", "user2", "user3"}
    assert model.train_item_ids == frozenset(train["item_id"])
    other = pd.DataFrame({"item_id": ["s2-0-0", "pilot-1", "pilot-2", "pilot-3"],
                          "dataset": ["recenter-stage2", "recenter-pilot", "recenter-pilot", "recenter-pilot"],
                          "user_id": ["user0", "user2", "someone-else", "user9"]})
    mask = stage.in_sample_mask(model, other)
    assert mask.dtype == bool and mask.tolist() == [True, True, False, False]
    # Items without a user column (none of the stores' kinds, but the rule must not guess): by item id only.
    assert stage.in_sample_mask(model, other.drop(columns="user_id")).tolist() == [True, False, False, False]


@pytest.mark.slow
def test_synthetic_folds_are_seeded_numbered_balanced_and_default_to_five() -> None:
    from personagap.judges.trained import base_rate_threshold, grouped_folds

    rng = np.random.default_rng(5)
    rows = [{"item_id": f"i{u}-{k}", "user_id": f"u{u}", "prompt_index": k % 2, "prompt_text": f"Plan trip {k % 2}",
             "reason": None, "confidence": np.nan, "attribute": " ".join(rng.choice([f"w{i}" for i in range(40)], 4))}
            for u in range(12) for k in range(6)]
    items = pd.DataFrame(rows)
    y = np.arange(len(items)) % 3 == 0
    cv = cross_val_relevance(items, y.astype(int))
    assert len(cv.folds) == 5 and cv.seed == 0 and [f.fold for f in cv.folds] == list(range(5))
    # The JSON record (sidecar, run parameters) says the same as the folds.
    import hashlib

    record = cv.record()
    assert (record["grouped_by"], record["seed"], record["n_splits"]) == ("user_id", 0, 5)
    for rec, fold in zip(record["folds"], cv.folds, strict=True):
        assert rec == {"fold": fold.fold, "n_train": fold.n_train, "n_test": fold.n_test, "n_fitted": fold.n_fitted,
                       "n_train_groups": len(fold.train_groups), "n_test_groups": len(fold.test_groups),
                       "disjoint": True, "fitted_on_train_only": True, "judge": "trained-relevance",
                       "test_groups": {"ids": sorted(fold.test_groups), "sha256": hashlib.sha256(
                           "\n".join(sorted(fold.test_groups)).encode("utf-8")).hexdigest()}}
        assert rec["n_train"] + rec["n_test"] == len(items) and rec["n_train_groups"] + rec["n_test_groups"] == 12
    # The base-rate threshold of each fold's train part keeps the out-of-fold yes-rate near the base rate.
    assert np.isfinite(cv.probabilities).all() and 0.15 < np.mean(np.asarray(cv.labels) == "yes") < 0.55
    same = cross_val_relevance(items, y.astype(int), seed=4)
    again = cross_val_relevance(items, y.astype(int), seed=4)
    assert [f.test_index for f in same.folds] == [f.test_index for f in again.folds]
    assert [f.test_index for f in same.folds] != [f.test_index for f in cv.folds]  # the seed is honoured
    pairs = pd.DataFrame({"item_id": [f"p{q}-{k}" for q in range(10) for k in range(2)],
                          "question": [f"q{q}" for q in range(10) for k in range(2)],
                          "answer_a": [f"- a list about travel\n- point {i}" for i in range(20)],
                          "answer_b": [f"A plain answer about travel {i}." for i in range(20)],
                          "profile": [""] * 20, "human": ["A", "B"] * 10})
    pref = cross_val_preference(pairs, pairs["human"].tolist())
    assert len(pref.folds) == 5 and pref.seed == 0
    assert all(set(f["test_groups"]) == {"sha256"} for f in pref.record()["folds"])  # questions: a digest only
    twice = [[f.test_index for f in cross_val_preference(pairs, pairs["human"].tolist(), seed=2).folds]
             for _ in range(2)]
    assert twice[0] == twice[1]
    # Balanced folds: ten equal groups over five folds -> two each; one big group goes first, alone.
    sizes = [len(test) for _, test in grouped_folds([f"g{i}" for i in range(10)], 5)]
    assert sizes == [2] * 5
    big = ["big"] * 10 + [f"s{i}" for i in range(20)]
    assert max(len(test) for _, test in grouped_folds(big, 5)) == 10
    assert len(list(grouped_folds(["a", "b", "c"], 3))) == 3  # exactly as many groups as folds is enough
    # The threshold: one item of four at a 25% base rate; a single probability at rate 1.
    assert base_rate_threshold([0.2, 0.9, 0.5, 0.1], 0.25) == 0.9
    assert base_rate_threshold([0.4], 1.0) == 0.4
