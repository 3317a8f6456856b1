"""Train, cross-validate and run the offline trained judges on a store (library API behind `personagap train`).

* :func:`train_relevance` / :func:`train_preference` read the human labels in a database, run
  cross-validation grouped by user (relevance) or by question (preference) — no user/question is ever
  in a fold's training and test part at once — fit the final model on everything, save it with its
  metadata, and (by default) store the out-of-fold predictions as labels of rater
  ``trained-relevance/v1/cv`` / ``trained-preference/v1/cv`` (rater_kind ``trained``), so the reports,
  the diagnosis and the dashboard show them beside the LLM judges.
* :func:`judge_relevance_trained` / :func:`judge_response_trained` label every imported item of a
  database with a saved model (trained on this or another database), as rater
  ``trained-relevance/v1/<model id>``.

The CV figures are compared with every LLM judge **on exactly the same items**, with the same
user-clustered bootstrap CIs as the stage reports (:func:`personagap.analysis.agreement.agreement`).

Stage 1: :func:`train_verifier` learns from LAPS gold preferences (each user's own stated values as
positives, other users' values on the same topic as negatives, :func:`verifier_pairs`) on the train
split, with user-grouped CV there, and is evaluated once on the val split; its threshold is fixed at
0.5 beforehand. The training pairs are synthetic (a negative is no stored item), so no '/cv' labels
are stored. :func:`judge_extraction_trained` labels every extracted attribute (the items the ``verify``
LLM judge labels) ok/bad as rater ``trained-verifier/v1/<model id>``.

Training relevance and preference models lives here; the rest in pieces: the items read from a store
(:mod:`.trained_items`), judging with a saved model (:mod:`.trained_judging`, where a model file's problems
become one :class:`ModelFileError`), the verifier (:mod:`.trained_verifier`), results (:mod:`.trained_results`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from personagap.analysis.agreement import DEFAULT_SEED, agreement, ci_list
from personagap.analysis.comparable import IN_SAMPLE, judge_display
from personagap.analysis.response import first_position_rate, judge_vs_human, longer_rate
from personagap.judges.trained import (
    PREFERENCE_JUDGE,
    RELEVANCE_EMBED_JUDGE,
    RELEVANCE_JUDGE,
    RelevanceFeatures,
    cross_val_preference,
    cross_val_relevance,
    fingerprint,
    fit_preference,
    fit_relevance,
    save_model,
    trained_rater,
)
from personagap.stages.trained_items import extracted_attribute_items, pairwise_items, relevance_items, verifier_pairs
from personagap.stages.trained_judging import (
    ModelFileError,
    in_sample_mask,
    judge_relevance_trained,
    judge_response_trained,
    open_model,
    store_labels,
)
from personagap.stages.trained_results import ScoreRow, TrainedRunSummary, TrainResult, trained_model_id, with_core
from personagap.stages.trained_verifier import judge_extraction_trained, train_verifier
from personagap.store import StoreError, git_sha, load_labels, opened
from personagap.vocabulary import DECISIVE

CV_TAG = "cv"
_REL_METRICS = ("kappa", "over_selection", "human_yes_rate", "judge_yes_rate", "precision", "recall", "f1",
                "accuracy")


# --------------------------------------------------------------------------- training

def train_relevance(db: str | Path, out: str | Path, *, datasets: tuple[str, ...] = ("recenter-stage2",),
                    n_splits: int = 5, seed: int = 0, store_cv: bool = True,
                    c: float = 1.0, features: RelevanceFeatures = "lexical") -> TrainResult:
    """Cross-validate (grouped by user), fit and save the relevance matcher on the human majority labels.

    Args:
        db: The DuckDB file with imported relevance items and human-majority labels.
        out: Where to save the model (a ``.json`` sidecar is written beside it).
        datasets: Which datasets' labelled items to train on.
        n_splits: CV folds (fewer when there are fewer users).
        seed: Fold-assignment and model seed.
        store_cv: Store the out-of-fold predictions as labels of rater ``trained-relevance/v1/cv``.
        c: Inverse regularisation strength (scikit-learn's default 1.0; not tuned on the CV folds).
        features: ``lexical`` (default) or ``embed`` (needs the ``embed`` extra; a separate rater,
            ``trained-relevance-embed``).

    Raises:
        StoreError: No labelled relevance items in ``datasets``.
        MissingExtra: ``features='embed'`` without the ``embed`` extra.
    """
    started = time.monotonic()
    items = relevance_items(db, datasets)
    labelled = items[items["human"].notna()].reset_index(drop=True)
    if labelled.empty or labelled["user_id"].nunique() < 2:
        raise StoreError(f"{db}: no human-majority relevance labels of two or more users in {', '.join(datasets)}; "
                         "import a release first (personagap import recenter PATH)")
    y = (labelled["human"] == "yes").astype(int).to_numpy()
    folds = min(n_splits, int(labelled["user_id"].nunique()))
    spec = RELEVANCE_EMBED_JUDGE if features == "embed" else RELEVANCE_JUDGE
    cv = cross_val_relevance(labelled, y, n_splits=folds, seed=seed, c=c, features=features)
    cv_labels = cv.labels
    model = fit_relevance(labelled, y, c=c, seed=seed, features=features)
    data_fp = fingerprint(labelled, ["dataset", "user_id", "prompt_index", "attribute", "human"])
    rater_cv = trained_rater(spec, CV_TAG)
    rows = _relevance_scores(db, labelled, cv_labels, rater_cv)
    model.metadata |= {
        "model_id": trained_model_id(spec, data_fp, model.metadata["params"]), "data_fingerprint": data_fp,
        "datasets": sorted(set(labelled["dataset"])), "n_train": len(labelled),
        "n_groups": int(labelled["user_id"].nunique()), "threshold": model.threshold, "git_sha": git_sha(),
        "cv": {"n_splits": folds, "grouped_by": "user", "seed": seed, "rater": rater_cv,
               "scores": rows[0].figures, "cis": rows[0].cis, "folds": cv.record()["folds"]},
    }
    save_model(model, out)
    stored = store_labels(db, spec, rater_cv, labelled["item_id"].tolist(), cv_labels, kind="train",
                           source=",".join(datasets), parameters={"model_id": model.tag, "cv": model.metadata["cv"],
                                                                  "model_path": str(out)},
                           confidences=cv.label_confidences())[0] if store_cv else 0
    return TrainResult(kind="relevance", model_path=str(out), metadata=with_core(model), rows=rows,
                       stored_cv_labels=stored, seconds=time.monotonic() - started, cv=cv)


def _relevance_scores(db: str | Path, labelled: pd.DataFrame, cv_labels: list[str], rater_cv: str) -> list[ScoreRow]:
    """The trained judge's out-of-fold figures, then each stored judge's on exactly those items it labelled too."""
    human = labelled.set_index("item_id")["human"]
    users = labelled.set_index("item_id")["user_id"]
    rows = [_rel_row(rater_cv, "trained", human, pd.Series(cv_labels, index=labelled["item_id"]), users,
                     agreement)]
    with opened(db, read_only=True) as con:
        others = load_labels(con, stage="relevance", condition="")
    others = others[others["rater_kind"].isin(["llm", "baseline"]) & others["item_id"].isin(human.index)
                    & others["label"].notna()]
    trained = pd.Series(cv_labels, index=labelled["item_id"])
    for rater, frame in others.groupby("rater", sort=True):
        llm = frame.drop_duplicates("item_id").set_index("item_id")["label"]
        row = _rel_row(str(rater), "llm", human, llm, users, agreement)
        same = _rel_row(rater_cv, "trained", human, trained.loc[llm.index.intersection(trained.index)], users,
                        agreement)
        row.figures["trained_same_items"] = same.figures["kappa"]
        rows.append(row)
    return rows


def _rel_row(name: str, kind: str, human: pd.Series, judge: pd.Series, users: pd.Series, agreement: Any) -> ScoreRow:
    ids = judge.index.intersection(human.index)
    h = (human.loc[ids] == "yes").astype(int).to_numpy()
    j = (judge.loc[ids] == "yes").astype(int).to_numpy()
    est = agreement(h, j, users.loc[ids].to_numpy(), metrics=_REL_METRICS)
    return ScoreRow(judge=name, rater_kind=kind, n=len(ids), figures={k: e.value for k, e in est.items()},
                    cis={k: ci_list(e) for k, e in est.items()})


def train_preference(db: str | Path, out: str | Path, *, datasets: tuple[str, ...] = ("prism-judge",),
                     n_splits: int = 5, seed: int = 0, store_cv: bool = True, c: float = 1.0) -> TrainResult:
    """Cross-validate (grouped by question), fit and save the Bradley-Terry preference model.

    Trains on the pairs whose human label is A or B (ties carry no strict preference); every labelled
    pair, ties included, gets an out-of-fold A/B prediction, so accuracy counts human ties as misses.

    Args:
        db: The DuckDB file with imported pairwise items (e.g. ``personagap import prism-judge``).
        out: Where to save the model.
        datasets: Which datasets' pairs to train on.
        n_splits: CV folds (fewer when there are fewer questions).
        seed: Fold-assignment seed.
        store_cv: Store the out-of-fold predictions as labels of rater ``trained-preference/v1/cv``.
        c: Inverse regularisation strength (scikit-learn's default; not tuned on the CV folds).

    Raises:
        StoreError: No pairwise items with a human A/B label.
    """
    started = time.monotonic()
    items = pairwise_items(db, datasets)
    labelled = items[items["human"].notna() & (items["kind"] == "pairwise")].reset_index(drop=True)
    decisive = labelled["human"].isin(DECISIVE)
    if decisive.sum() < 2 or labelled["question"].nunique() < 2:
        raise StoreError(f"{db}: no human-labelled pairs of two or more questions in {', '.join(datasets)}; "
                         "import a release first (personagap import prism-judge PATH)")
    h = labelled["human"].tolist()
    folds = min(n_splits, int(labelled["question"].nunique()))
    cv = cross_val_preference(labelled, h, n_splits=folds, seed=seed, c=c)
    cv_labels = cv.labels
    model = fit_preference(labelled[decisive], labelled.loc[decisive, "human"].tolist(), c=c, seed=seed)
    data_fp = fingerprint(labelled, ["dataset", "question", "answer_a", "answer_b", "profile", "human"])
    rater_cv = trained_rater(PREFERENCE_JUDGE, CV_TAG)
    rows = _preference_scores(db, labelled, cv_labels, rater_cv)
    model.metadata |= {
        "model_id": trained_model_id(PREFERENCE_JUDGE, data_fp, model.metadata["params"]), "data_fingerprint": data_fp,
        "datasets": sorted(set(labelled["dataset"])), "n_train": int(decisive.sum()),
        "n_groups": int(labelled["question"].nunique()), "threshold": model.threshold, "git_sha": git_sha(),
        "cv": {"n_splits": folds, "grouped_by": "question", "seed": seed, "rater": rater_cv,
               "scores": rows[0].figures, "cis": rows[0].cis, "folds": cv.record()["folds"]},
    }
    save_model(model, out)
    stored = store_labels(db, PREFERENCE_JUDGE, rater_cv, labelled["item_id"].tolist(), cv_labels, kind="train",
                           source=",".join(datasets), parameters={"model_id": model.tag, "cv": model.metadata["cv"],
                                                                  "model_path": str(out)},
                           meta={"swapped": False}, confidences=cv.label_confidences())[0] if store_cv else 0
    return TrainResult(kind="preference", model_path=str(out), metadata=with_core(model), rows=rows,
                       stored_cv_labels=stored, seconds=time.monotonic() - started, cv=cv,
                       notes=["accuracy counts human ties as misses (the model never says tie); "
                              "acc A/B = on pairs with a decisive human label"])


def _preference_scores(db: str | Path, labelled: pd.DataFrame, cv_labels: list[str], rater_cv: str) -> list[ScoreRow]:

    index = labelled.set_index("item_id")
    rows = [_pref_row(rater_cv, "trained", index, pd.Series(cv_labels, index=index.index),
                      pd.Series(False, index=index.index))]
    with opened(db, read_only=True) as con:
        others = load_labels(con, stage="response")
    others = others[others["rater_kind"].isin(["llm", "baseline"]) & others["item_id"].isin(index.index)
                    & others["label"].notna()]
    for (rater, condition), frame in others.groupby(["rater", "condition"], sort=True):
        frame = frame.drop_duplicates("item_id").set_index("item_id")
        swapped = frame["meta"].map(lambda m: '"swapped": true' in m if isinstance(m, str) else False)
        name = judge_display(str(rater), str(condition))
        row = _pref_row(name, "llm", index, frame["label"], swapped)
        ids = frame.index.intersection(index.index)
        trained = pd.Series(cv_labels, index=index.index).loc[ids]
        row.figures["trained_same_items"] = float((trained == index.loc[ids, "human"]).mean())
        rows.append(row)
    return rows


def _pref_row(name: str, kind: str, items: pd.DataFrame, judge: pd.Series, swapped: pd.Series) -> ScoreRow:
    ids = judge.index.intersection(items.index)
    h = items.loc[ids, "human"].to_numpy(dtype=object)
    j = judge.loc[ids].to_numpy(dtype=object)
    users = items.loc[ids, "user_id"].to_numpy()
    est = judge_vs_human(h, j, users)
    first = first_position_rate(j, swapped.loc[ids].to_numpy(dtype=bool), users)
    longer = longer_rate(j, items.loc[ids, "answer_a"].str.len(), items.loc[ids, "answer_b"].str.len(), users)
    decisive = np.isin(h, DECISIVE)
    figures = {"accuracy": est["accuracy"].value, "kappa": est["kappa"].value,
               "accuracy_decisive": float((h[decisive] == j[decisive]).mean()) if decisive.any() else float("nan"),
               "first_position": first.value, "longer": longer.value, "tie_rate": float((j == "tie").mean())}
    return ScoreRow(judge=name, rater_kind=kind, n=len(ids), figures=figures,
                    cis={"accuracy": ci_list(est["accuracy"]), "kappa": ci_list(est["kappa"]),
                         "first_position": ci_list(first), "longer": ci_list(longer)})


# --------------------------------------------------------------------------- stage 1: the verifier


# --------------------------------------------------------------------------- storing labels


# --------------------------------------------------------------------------- judging with a saved model


__all__ = ["DEFAULT_SEED", "IN_SAMPLE", "ModelFileError", "TrainResult", "TrainedRunSummary",
           "extracted_attribute_items", "in_sample_mask", "judge_extraction_trained", "judge_relevance_trained",
           "judge_response_trained", "open_model", "pairwise_items", "relevance_items", "train_preference",
           "train_relevance", "train_verifier", "verifier_pairs"]
