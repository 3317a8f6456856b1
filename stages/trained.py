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
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from personagap.analysis.agreement import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Estimate,
    bootstrap_estimate,
    ci_list,
    ci_text,
    resample_weights,
)
from personagap.analysis.comparable import IN_SAMPLE, judge_display, reference_sql
from personagap.analysis.response import first_position_rate, judge_vs_human, longer_rate
from personagap.judges.trained import (
    PREFERENCE_JUDGE,
    RELEVANCE_EMBED_JUDGE,
    RELEVANCE_JUDGE,
    TRAINED_JUDGES,
    VERIFIER_JUDGE,
    VERIFIER_NOTE,
    CrossValidation,
    RelevanceFeatures,
    TrainedJudgeSpec,
    TrainedModel,
    cross_val_preference,
    cross_val_relevance,
    cross_val_verifier,
    fingerprint,
    fit_preference,
    fit_relevance,
    fit_verifier,
    get_trained_judge,
    load_model,
    save_model,
    trained_rater,
    verifier_features,
    verifier_vocab,
)
from personagap.records import Label, Run
from personagap.store import StoreError, git_sha, now, opened, upsert, write_labels

CV_TAG = "cv"
_REL_METRICS = ("kappa", "over_selection", "human_yes_rate", "judge_yes_rate", "precision", "recall", "f1",
                "accuracy")
_PAIR_KINDS = ("pairwise", "generic_vs_personalized")


# --------------------------------------------------------------------------- reading items

def relevance_items(db: str | Path, datasets: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Relevance items with prompt text, the extractor's reason/confidence and the human majority (if any).

    Returns:
        Columns item_id, dataset, user_id, prompt_index, attribute, prompt_text, reason, confidence,
        human ('yes'/'no' or None), in a stable order.
    """
    # The human label is the one blind reference every report uses (comparable.reference_sql): the stored
    # majority, or the unique most frequent label of individual blind humans (imported team data has only
    # those); anchored labels and ties never train a model.
    with opened(db, read_only=True) as con:
        frame = con.execute(f"""
            WITH {reference_sql()}
            SELECT i.item_id, i.dataset, i.user_id, i.prompt_index, i.attribute, p.prompt_text,
                   a.reason, a.confidence, r.human
            FROM items i JOIN prompts p USING (dataset, user_id, prompt_index)
            LEFT JOIN attributes a USING (dataset, user_id, attribute)
            LEFT JOIN reference r ON r.item_id = i.item_id
            WHERE i.stage = 'relevance' AND p.prompt_text IS NOT NULL AND i.attribute IS NOT NULL
            ORDER BY i.dataset, i.user_id, i.prompt_index, i.attribute
        """).df()
    if datasets:
        frame = frame[frame["dataset"].isin(datasets)].reset_index(drop=True)
    return frame


def pairwise_items(db: str | Path, datasets: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Pairwise and generic-vs-personalised response items with the single human label, where there is one."""
    from personagap.stages.response import load_items
    from personagap.stages.response_pairwise import blind_reference
    from personagap.store import load_labels

    with opened(db, read_only=True) as con:
        items = load_items(con)
        labels = load_labels(con, stage="response")
    items = items[items["kind"].isin(_PAIR_KINDS)].reset_index(drop=True)
    if datasets:
        items = items[items["dataset"].isin(datasets)].reset_index(drop=True)
    ref = blind_reference(labels) if not labels.empty else pd.Series(dtype=object)
    items["human"] = items["item_id"].map(ref) if not ref.empty else None
    return items


# --------------------------------------------------------------------------- results

@dataclass(frozen=True)
class ScoreRow:
    """One judge's figures on the evaluated items (the trained judge's out-of-fold ones, or an LLM's)."""

    judge: str
    rater_kind: str
    n: int
    figures: dict[str, float]
    cis: dict[str, list[float]]


@dataclass
class TrainResult:
    """What `personagap train` did: the saved model, its CV figures and the LLMs' on the same items."""

    kind: str
    model_path: str
    metadata: dict[str, Any]
    rows: list[ScoreRow]
    stored_cv_labels: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    cv: CrossValidation | None = None
    """What the cross-validation did, fold by fold (its groups and what each fold's model was fitted on)."""

    def render(self) -> str:
        """Plain-text summary for the terminal."""
        m = self.metadata
        cv = m["cv"]
        if self.kind == "verifier":
            return self._render_verifier()
        lines = [f"Trained {m['judge']} v{m['version']} -> {self.model_path} (+ .json metadata), "
                 f"model id {m['model_id']}",
                 f"  trained on {m['n_train']} labelled items of {m['n_groups']} {cv['grouped_by']}s "
                 f"({', '.join(m['datasets'])}); data fingerprint {m['data_fingerprint'][:16]}",
                 f"  threshold {m['threshold']:.4f}" + (f" (human base rate {m['base_rate']:.3f} on the training data)"
                                                        if "base_rate" in m else ""),
                 f"  {cv['n_splits']}-fold cross-validation grouped by {cv['grouped_by']} (seed {cv['seed']}); "
                 f"{self.stored_cv_labels} out-of-fold labels stored as {cv['rater']!r}; {self.seconds:.1f}s", ""]
        if self.kind == "relevance":
            cols = (("kappa", "kappa", 3), ("over_selection", "over-sel", 2), ("precision", "prec", 2),
                    ("recall", "recall", 2), ("f1", "F1", 2), ("judge_yes_rate", "judge yes", 2),
                    ("trained_same_items", "trained*", 3))
        else:
            cols = (("accuracy", "acc", 3), ("accuracy_decisive", "acc A/B", 3), ("kappa", "kappa", 2),
                    ("first_position", "1st pos", 2), ("longer", "longer", 2), ("tie_rate", "ties", 2),
                    ("trained_same_items", "trained*", 3))
        head = f"{'judge (same items)':<46}{'n':>6}" + "".join(f"{c[1]:>10}" for c in cols) + f"  {cols[0][1]} 95% CI"
        lines += [head, "-" * len(head)]
        for r in self.rows:
            vals = "".join(f"{_fmt(r.figures.get(c[0]), c[2]):>10}" for c in cols)
            ci = r.cis.get(cols[0][0])
            lines.append(f"{r.judge[:45]:<46}{r.n:>6}{vals}  {_fmt_ci(ci)}")
        lines.append(f"  trained* = the trained judge's out-of-fold {cols[0][1]} on exactly that judge's items")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


    def _render_verifier(self) -> str:
        m = self.metadata
        cv = m["cv"]
        lines = [f"Trained {m['judge']} v{m['version']} -> {self.model_path} (+ .json metadata), "
                 f"model id {m['model_id']}",
                 f"  {VERIFIER_NOTE}",
                 f"  trained on {m['n_train']} pairs ({m['n_positive']} gold preferences) of {m['n_groups']} users "
                 f"({', '.join(m['datasets'])}, split {m['train_split']}); data fingerprint "
                 f"{m['data_fingerprint'][:16]}",
                 f"  threshold {m['threshold']:.2f}: {m['threshold_rule']}",
                 f"  {cv['n_splits']}-fold cross-validation grouped by {cv['grouped_by']} (seed {cv['seed']}); "
                 f"out-of-fold predictions not stored (the negatives are synthetic pairs, not items); "
                 f"{self.seconds:.1f}s", ""]
        head = f"{'evaluation':<46}{'n':>6}{'users':>7}{'AUC':>8}{'acc':>8}{'kappa':>8}{'ok rate':>9}  95% CIs (users)"
        lines += [head, "-" * len(head)]
        for r in self.rows:
            f = r.figures
            lines.append(f"{r.judge[:45]:<46}{r.n:>6}{int(f['users']):>7}{_fmt(f['auc'], 3):>8}"
                         f"{_fmt(f['accuracy'], 3):>8}{_fmt(f['kappa'], 3):>8}{_fmt(f['judge_ok_rate'], 2):>9}  "
                         f"AUC {_verifier_ci(r, 'auc')} acc {_verifier_ci(r, 'accuracy')} "
                         f"kappa {_verifier_ci(r, 'kappa')}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _fmt(v: float | None, digits: int) -> str:
    return "n/a" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.{digits}f}"


def _verifier_ci(row: ScoreRow, name: str) -> str:
    # The one CI text (agreement.ci_text): says "too few users for a CI" rather than printing an empty interval.
    return ci_text(ci=row.cis.get(name), n_users=int(row.figures["users"]))


def _fmt_ci(ci: list[float] | None) -> str:
    return "" if ci is None else f"[{_fmt(ci[0], 2)}, {_fmt(ci[1], 2)}]"


@dataclass
class TrainedRunSummary:
    """What a trained judge's run wrote."""

    run_id: str
    rater: str
    labelled: int
    by_label: dict[str, int]
    seconds: float
    in_training: int = 0
    """Items the model was trained on or of its training users: condition 'in-sample', left out of every comparison."""

    def render(self) -> str:
        """One paragraph for the terminal."""
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.by_label.items()))
        return (f"run {self.run_id}: {self.rater}\n  labelled {self.labelled} items ({counts}), no LLM calls, "
                f"{self.seconds:.1f}s"
                + (f"\n  note: {self.in_training} of these items were in the model's training data or belong to its "
                   "training users: stored under condition 'in-sample' and left out of reports (the '/cv' rater "
                   "holds honest out-of-fold labels)"
                   if self.in_training else ""))


# --------------------------------------------------------------------------- training

def _model_id(spec: TrainedJudgeSpec, data_fp: str, params: dict[str, Any]) -> str:
    blob = f"{spec.name}|{spec.version}|{data_fp}|{sorted(params.items())}"
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def train_relevance(db: str | Path, out: str | Path, *, datasets: tuple[str, ...] = ("recenter-stage2",),
                    n_splits: int = 5, seed: int = 0, store_cv: bool = True, n_resamples: int = DEFAULT_RESAMPLES,
                    c: float = 1.0, features: RelevanceFeatures = "lexical") -> TrainResult:
    """Cross-validate (grouped by user), fit and save the relevance matcher on the human majority labels.

    Args:
        db: The DuckDB file with imported relevance items and human-majority labels.
        out: Where to save the model (a ``.json`` sidecar is written beside it).
        datasets: Which datasets' labelled items to train on.
        n_splits: CV folds (fewer when there are fewer users).
        seed: Fold-assignment and model seed.
        store_cv: Store the out-of-fold predictions as labels of rater ``trained-relevance/v1/cv``.
        n_resamples: Bootstrap resamples of the CIs (user-clustered).
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
    rows = _relevance_scores(db, labelled, cv_labels, rater_cv, n_resamples=n_resamples, seed=seed)
    model.metadata |= {
        "model_id": _model_id(spec, data_fp, model.metadata["params"]), "data_fingerprint": data_fp,
        "datasets": sorted(set(labelled["dataset"])), "n_train": len(labelled),
        "n_groups": int(labelled["user_id"].nunique()), "threshold": model.threshold, "git_sha": git_sha(),
        "cv": {"n_splits": folds, "grouped_by": "user", "seed": seed, "rater": rater_cv,
               "scores": rows[0].figures, "cis": rows[0].cis, "folds": cv.record()["folds"]},
    }
    save_model(model, out)
    stored = _store_labels(db, spec, rater_cv, labelled["item_id"].tolist(), cv_labels, kind="train",
                           source=",".join(datasets), parameters={"model_id": model.tag, "cv": model.metadata["cv"],
                                                                  "model_path": str(out)})[0] if store_cv else 0
    return TrainResult(kind="relevance", model_path=str(out), metadata=_with_core(model), rows=rows,
                       stored_cv_labels=stored, seconds=time.monotonic() - started, cv=cv)


def _with_core(model: TrainedModel) -> dict[str, Any]:
    return {"judge": model.judge, "version": model.version, **model.metadata}


def _relevance_scores(db: str | Path, labelled: pd.DataFrame, cv_labels: list[str], rater_cv: str, *,
                      n_resamples: int, seed: int) -> list[ScoreRow]:
    """The trained judge's out-of-fold figures, then each stored judge's on exactly those items it labelled too."""
    from personagap.analysis.agreement import agreement
    from personagap.store import load_labels

    human = labelled.set_index("item_id")["human"]
    users = labelled.set_index("item_id")["user_id"]
    rows = [_rel_row(rater_cv, "trained", human, pd.Series(cv_labels, index=labelled["item_id"]), users,
                     agreement, n_resamples, seed)]
    with opened(db, read_only=True) as con:
        others = load_labels(con, stage="relevance", condition="")
    others = others[others["rater_kind"].isin(["llm", "baseline"]) & others["item_id"].isin(human.index)
                    & others["label"].notna()]
    trained = pd.Series(cv_labels, index=labelled["item_id"])
    for rater, frame in others.groupby("rater", sort=True):
        llm = frame.drop_duplicates("item_id").set_index("item_id")["label"]
        row = _rel_row(str(rater), "llm", human, llm, users, agreement, n_resamples, seed)
        same = _rel_row(rater_cv, "trained", human, trained.loc[llm.index.intersection(trained.index)], users,
                        agreement, n_resamples, seed)
        row.figures["trained_same_items"] = same.figures["kappa"]
        rows.append(row)
    return rows


def _rel_row(name: str, kind: str, human: pd.Series, judge: pd.Series, users: pd.Series, agreement: Any,
             n_resamples: int, seed: int) -> ScoreRow:
    ids = judge.index.intersection(human.index)
    h = (human.loc[ids] == "yes").astype(int).to_numpy()
    j = (judge.loc[ids] == "yes").astype(int).to_numpy()
    est = agreement(h, j, users.loc[ids].to_numpy(), metrics=_REL_METRICS, n_resamples=n_resamples, seed=seed)
    return ScoreRow(judge=name, rater_kind=kind, n=len(ids), figures={k: e.value for k, e in est.items()},
                    cis={k: ci_list(e) for k, e in est.items()})


def train_preference(db: str | Path, out: str | Path, *, datasets: tuple[str, ...] = ("prism-judge",),
                     n_splits: int = 5, seed: int = 0, store_cv: bool = True, n_resamples: int = DEFAULT_RESAMPLES,
                     c: float = 1.0) -> TrainResult:
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
        n_resamples: Bootstrap resamples (user-clustered, as in the stage-3 report).
        c: Inverse regularisation strength (scikit-learn's default; not tuned on the CV folds).

    Raises:
        StoreError: No pairwise items with a human A/B label.
    """
    started = time.monotonic()
    items = pairwise_items(db, datasets)
    labelled = items[items["human"].notna() & (items["kind"] == "pairwise")].reset_index(drop=True)
    decisive = labelled["human"].isin(["A", "B"])
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
    rows = _preference_scores(db, labelled, cv_labels, rater_cv, n_resamples=n_resamples, seed=seed)
    model.metadata |= {
        "model_id": _model_id(PREFERENCE_JUDGE, data_fp, model.metadata["params"]), "data_fingerprint": data_fp,
        "datasets": sorted(set(labelled["dataset"])), "n_train": int(decisive.sum()),
        "n_groups": int(labelled["question"].nunique()), "threshold": model.threshold, "git_sha": git_sha(),
        "cv": {"n_splits": folds, "grouped_by": "question", "seed": seed, "rater": rater_cv,
               "scores": rows[0].figures, "cis": rows[0].cis, "folds": cv.record()["folds"]},
    }
    save_model(model, out)
    stored = _store_labels(db, PREFERENCE_JUDGE, rater_cv, labelled["item_id"].tolist(), cv_labels, kind="train",
                           source=",".join(datasets), parameters={"model_id": model.tag, "cv": model.metadata["cv"],
                                                                  "model_path": str(out)},
                           meta={"swapped": False})[0] if store_cv else 0
    return TrainResult(kind="preference", model_path=str(out), metadata=_with_core(model), rows=rows,
                       stored_cv_labels=stored, seconds=time.monotonic() - started, cv=cv,
                       notes=["accuracy counts human ties as misses (the model never says tie); "
                              "acc A/B = on pairs with a decisive human label"])


def _preference_scores(db: str | Path, labelled: pd.DataFrame, cv_labels: list[str], rater_cv: str, *,
                       n_resamples: int, seed: int) -> list[ScoreRow]:
    from personagap.store import load_labels

    index = labelled.set_index("item_id")
    rows = [_pref_row(rater_cv, "trained", index, pd.Series(cv_labels, index=index.index),
                      pd.Series(False, index=index.index), n_resamples, seed)]
    with opened(db, read_only=True) as con:
        others = load_labels(con, stage="response")
    others = others[others["rater_kind"].isin(["llm", "baseline"]) & others["item_id"].isin(index.index)
                    & others["label"].notna()]
    for (rater, condition), frame in others.groupby(["rater", "condition"], sort=True):
        frame = frame.drop_duplicates("item_id").set_index("item_id")
        swapped = frame["meta"].map(lambda m: '"swapped": true' in m if isinstance(m, str) else False)
        name = judge_display(str(rater), str(condition))
        row = _pref_row(name, "llm", index, frame["label"], swapped, n_resamples, seed)
        ids = frame.index.intersection(index.index)
        trained = pd.Series(cv_labels, index=index.index).loc[ids]
        row.figures["trained_same_items"] = float((trained == index.loc[ids, "human"]).mean())
        rows.append(row)
    return rows


def _pref_row(name: str, kind: str, items: pd.DataFrame, judge: pd.Series, swapped: pd.Series, n_resamples: int,
              seed: int) -> ScoreRow:
    ids = judge.index.intersection(items.index)
    h = items.loc[ids, "human"].to_numpy(dtype=object)
    j = judge.loc[ids].to_numpy(dtype=object)
    users = items.loc[ids, "user_id"].to_numpy()
    est = judge_vs_human(h, j, users, n_resamples=n_resamples, seed=seed)
    first = first_position_rate(j, swapped.loc[ids].to_numpy(dtype=bool), users, n_resamples=n_resamples, seed=seed)
    longer = longer_rate(j, items.loc[ids, "answer_a"].str.len(), items.loc[ids, "answer_b"].str.len(), users,
                         n_resamples=n_resamples, seed=seed)
    decisive = np.isin(h, ["A", "B"])
    figures = {"accuracy": est["accuracy"].value, "kappa": est["kappa"].value,
               "accuracy_decisive": float((h[decisive] == j[decisive]).mean()) if decisive.any() else float("nan"),
               "first_position": first.value, "longer": longer.value, "tie_rate": float((j == "tie").mean())}
    return ScoreRow(judge=name, rater_kind=kind, n=len(ids), figures=figures,
                    cis={"accuracy": ci_list(est["accuracy"]), "kappa": ci_list(est["kappa"]),
                         "first_position": ci_list(first), "longer": ci_list(longer)})


# --------------------------------------------------------------------------- stage 1: the verifier

def _histories(items: pd.DataFrame) -> dict[tuple[str, str], tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(dataset, unit) -> (user, user turn texts, assistant turn texts) of each stored history, in order."""
    convs = items[items["kind"] == "conversation"]
    out: dict[tuple[str, str], tuple[str, tuple[str, ...], tuple[str, ...]]] = {}
    for (dataset, unit), g in convs.groupby(["dataset", "unit"], sort=True):
        turns = [t for p in g.sort_values("position")["payload"] for t in p["turns"]]
        user = tuple(str(t["text"]) for t in turns if str(t["role"]).lower() == "user" and str(t["text"]).strip())
        asst = tuple(str(t["text"]) for t in turns if str(t["role"]).lower() != "user" and str(t["text"]).strip())
        out[(str(dataset), str(unit))] = (str(g["user_id"].iloc[0]), user, asst)
    return out


def _unit_split(items: pd.DataFrame) -> dict[tuple[str, str], str]:
    convs = items[items["kind"] == "conversation"]
    return {(str(d), str(u)): str(p.get("split") or "-")
            for d, u, p in zip(convs["dataset"], convs["unit"], convs["payload"], strict=True)}


def verifier_pairs(db: str | Path, datasets: tuple[str, ...] = ("laps",), *, seed: int = 0) -> pd.DataFrame:
    """Labelled (history, attribute) pairs from the gold preferences in ``db`` (pure given the store and seed).

    Per gold preference of a history (deduplicated by normalised value): a positive with the value as the
    attribute text, and a negative with the value of a preference another user stated in a history of the
    same dataset, topic and split, drawn with ``seed`` among values this history's user did not state.

    Returns:
        Columns dataset, unit, user_id, split, topic, attribute, label (1/0), source_user (who stated the
        attribute), gold_item (the positive's gold item id; None for negatives), user_turns, assistant_turns.
    """
    from personagap.analysis.extraction import normalise_attribute
    from personagap.stages.extraction import load_items

    with opened(db, read_only=True) as con:
        items = load_items(con, kinds=("conversation", "gold"), datasets=list(datasets))
    history = _histories(items)
    split_of = _unit_split(items)
    gold = items[items["kind"] == "gold"]
    rows: list[dict[str, Any]] = []
    pool: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
    own: dict[tuple[str, str], set[str]] = {}
    for iid, d, u, user, p in zip(gold["item_id"], gold["dataset"], gold["unit"], gold["user_id"], gold["payload"],
                                  strict=True):
        key = (str(d), str(u))
        if key not in history:
            continue
        value = str(p.get("value") or "").strip()
        norm = normalise_attribute(value)
        if not norm or norm in own.setdefault(key, set()):
            continue
        own[key].add(norm)
        topic = str(p.get("topic") or "-")
        pool.setdefault((key[0], topic, split_of[key]), []).append((str(user), value, norm))
        rows.append({"dataset": key[0], "unit": key[1], "user_id": str(user), "split": split_of[key], "topic": topic,
                     "attribute": value, "label": 1, "source_user": str(user), "gold_item": str(iid)})
    rng = np.random.default_rng(seed)
    negatives = []
    for r in rows:
        mine = own[(r["dataset"], r["unit"])]
        group = pool[(r["dataset"], r["topic"], r["split"])]
        picked = None
        for _ in range(50):  # rejection sampling; the exact filter below only when that keeps failing
            cand = group[int(rng.integers(len(group)))]
            if cand[0] != r["user_id"] and cand[2] not in mine:
                picked = cand
                break
        if picked is None:
            candidates = [c for c in group if c[0] != r["user_id"] and c[2] not in mine]
            if not candidates:
                continue
            picked = candidates[int(rng.integers(len(candidates)))]
        negatives.append(r | {"attribute": picked[1], "label": 0, "source_user": picked[0], "gold_item": None})
    frame = pd.DataFrame(rows + negatives, columns=["dataset", "unit", "user_id", "split", "topic", "attribute",
                                                    "label", "source_user", "gold_item"])
    frame["user_turns"] = [history[(d, u)][1] for d, u in zip(frame["dataset"], frame["unit"], strict=True)]
    frame["assistant_turns"] = [history[(d, u)][2] for d, u in zip(frame["dataset"], frame["unit"], strict=True)]
    return frame


def weighted_auc(y: np.ndarray, p: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """ROC AUC (ties count half) of ``p`` for labels ``y`` under each row of item ``weights`` (shape B x n).

    The Mann-Whitney form, vectorised over the rows: equal to ``roc_auc_score(y, p, sample_weight=w)`` for
    every row ``w`` (NaN where a row leaves no positive or no negative weight).
    """
    values, code = np.unique(p, return_inverse=True)
    k = len(values)
    w = np.atleast_2d(weights)
    pos = np.zeros((w.shape[0], k))
    neg = np.zeros((w.shape[0], k))
    for target, cls in ((pos, 1), (neg, 0)):
        sel = y == cls
        np.add.at(target.T, code[sel], w[:, sel].T)
    below = np.cumsum(neg, axis=1) - neg
    with np.errstate(divide="ignore", invalid="ignore"):
        auc = (pos * (below + 0.5 * neg)).sum(axis=1) / (pos.sum(axis=1) * neg.sum(axis=1))
    return np.asarray(auc, dtype=float)


def _auc_estimate(y: np.ndarray, p: np.ndarray, users: np.ndarray, n_resamples: int, seed: int) -> Estimate:
    """ROC AUC with a user-clustered bootstrap CI (whole users resampled via :func:`resample_weights`).

    The CI follows the one CI rule (:func:`~personagap.analysis.agreement.bootstrap_estimate`): none below the
    minimum number of users, resamples without a positive or a negative counted as undefined.
    """
    from sklearn.metrics import roc_auc_score

    ids, idx = np.unique(users.astype(str), return_inverse=True)
    if len(set(y.tolist())) < 2:
        return Estimate(float("nan"), (float("nan"), float("nan")), len(ids))
    cluster_weights = resample_weights(len(ids), n_resamples, seed)
    samples = np.concatenate([weighted_auc(y, p, cluster_weights[b:b + 50][:, idx])
                              for b in range(0, n_resamples, 50)])
    return bootstrap_estimate(float(roc_auc_score(y, p)), samples, len(ids), 0.95)


def _verifier_row(name: str, pairs: pd.DataFrame, p: np.ndarray, threshold: float, n_resamples: int,
                  seed: int) -> ScoreRow:
    from personagap.analysis.agreement import agreement

    y = pairs["label"].to_numpy(dtype=int)
    users = pairs["user_id"].astype(str).to_numpy()
    j = (p >= threshold).astype(int)
    est = agreement(y, j, users, metrics=("kappa", "accuracy"), n_resamples=n_resamples, seed=seed)
    est["auc"] = _auc_estimate(y, p, users, n_resamples, seed)
    figures = {k: e.value for k, e in est.items()} | {"users": float(len(set(users))),
                                                     "judge_ok_rate": float(j.mean()) if len(j) else float("nan")}
    return ScoreRow(judge=name, rater_kind="trained", n=len(pairs), figures=figures,
                    cis={k: ci_list(e) for k, e in est.items()})


def train_verifier(db: str | Path, out: str | Path, *, datasets: tuple[str, ...] = ("laps",),
                   train_split: str = "train", eval_split: str = "val", n_splits: int = 5, seed: int = 0,
                   n_resamples: int = DEFAULT_RESAMPLES, c: float = 1.0) -> TrainResult:
    """Cross-validate (grouped by user) and fit the stage-1 verifier on one split; evaluate once on another.

    The pairs come from :func:`verifier_pairs`. The model is fitted on ``train_split`` only (so the
    ``eval_split`` figures are held-out); its threshold (0.5) is fixed before either evaluation. Users of
    ``eval_split`` who also have a history in ``train_split`` are left out of the held-out figures.

    Args:
        db: The DuckDB file with imported LAPS (or other gold-with-conversation) items.
        out: Where to save the model (a ``.json`` sidecar is written beside it).
        datasets: Which datasets' gold preferences to learn from.
        train_split: The split to cross-validate and fit on.
        eval_split: The split evaluated once with the fitted model (skipped when absent).
        n_splits: CV folds (fewer when there are fewer users).
        seed: Negative sampling, fold assignment and model seed.
        n_resamples: Bootstrap resamples of the CIs (user-clustered).
        c: Inverse regularisation strength (scikit-learn's default 1.0; not tuned).

    Raises:
        StoreError: No gold preferences with a stored conversation of two or more users in ``train_split``.
    """
    started = time.monotonic()
    pairs = verifier_pairs(db, datasets, seed=seed)
    train = pairs[pairs["split"] == train_split].reset_index(drop=True)
    if train.empty or train["user_id"].nunique() < 2 or train["label"].nunique() < 2:
        raise StoreError(f"{db}: no gold preferences with conversations of two or more users in split "
                         f"{train_split!r} of {', '.join(datasets)}; import a release first (personagap import laps "
                         "PATH)")
    y = train["label"].to_numpy(dtype=int)
    folds = min(n_splits, int(train["user_id"].nunique()))
    x = verifier_features(train, verifier_vocab())
    cv = cross_val_verifier(train, y, n_splits=folds, seed=seed, c=c, features=x)
    cv_prob = cv.probabilities
    model = fit_verifier(train, y, c=c, seed=seed, features=x)
    model.train_item_ids = frozenset(train["gold_item"].dropna())
    model.train_units = frozenset(f"{d}\x1f{u}" for d, u in zip(train["dataset"], train["unit"], strict=True))
    rows = [_verifier_row(f"CV, {train_split} split ({folds} folds by user)", train, cv_prob, model.threshold,
                          n_resamples, seed)]
    notes = []
    held = pairs[(pairs["split"] == eval_split) & ~pairs["user_id"].isin(set(train["user_id"]))].reset_index(drop=True)
    overlap = pairs[(pairs["split"] == eval_split) & pairs["user_id"].isin(set(train["user_id"]))]["user_id"].nunique()
    if not held.empty:
        from personagap.analysis.extraction import OFFLINE_THRESHOLD

        rows.append(_verifier_row(f"held out: {eval_split} split", held, model.predict_proba(held), model.threshold,
                                  n_resamples, seed))
        contain = verifier_features(held, verifier_vocab())[:, 0]
        rows.append(_verifier_row(f"baseline on {eval_split}: containment>={OFFLINE_THRESHOLD:.3f}", held, contain,
                                  OFFLINE_THRESHOLD, n_resamples, seed))
        notes.append("baseline = the offline matcher's containment alone (best user turn), its own threshold")
        if overlap:
            notes.append(f"{overlap} {eval_split} users who also have {train_split} histories are left out of the "
                         f"{eval_split} figures")
    notes.append("a positive is a value the user stated, a negative another user's value on the same topic: the "
                 "verifier learns 'does this conversation support this preference', not over-generalisation by "
                 "an extractor; ok rate = share predicted ok")
    data_fp = fingerprint(train, ["dataset", "unit", "attribute", "label", "source_user"])
    model.metadata |= {
        "model_id": _model_id(VERIFIER_JUDGE, data_fp, model.metadata["params"]), "data_fingerprint": data_fp,
        "datasets": sorted(set(train["dataset"])), "train_split": train_split, "n_train": len(train),
        "n_positive": int(y.sum()), "n_groups": int(train["user_id"].nunique()), "threshold": model.threshold,
        "git_sha": git_sha(),
        "cv": {"n_splits": folds, "grouped_by": "user", "seed": seed, "rater": None,
               "scores": rows[0].figures, "cis": rows[0].cis, "folds": cv.record()["folds"]},
        "heldout": ({"split": eval_split, "n": len(held), "scores": rows[1].figures, "cis": rows[1].cis,
                     "baseline_containment": rows[2].figures} if len(rows) > 1 else None),
    }
    save_model(model, out)
    return TrainResult(kind="verifier", model_path=str(out), metadata=_with_core(model), rows=rows,
                       stored_cv_labels=0, seconds=time.monotonic() - started, notes=notes, cv=cv)


def extracted_attribute_items(db: str | Path, *, datasets: tuple[str, ...] | None = None,
                              splits: tuple[str, ...] | None = None, extractor: str | None = None) -> pd.DataFrame:
    """The extracted attributes the ``verify`` LLM judge would label, with their history's turns.

    Same selection as :func:`personagap.stages.extraction.judge_extraction` for ``verify``: extracted-attribute
    items (optionally of one extractor) whose history is stored, of ``datasets`` and of histories in ``splits``.

    Returns:
        Columns item_id, dataset, unit, user_id, attribute, user_turns, assistant_turns.
    """
    from personagap.stages.extraction import load_items

    with opened(db, read_only=True) as con:
        items = load_items(con, datasets=list(datasets) if datasets else None)
    if splits is not None:
        keep = {u for u, k, p in zip(items["unit"], items["kind"], items["payload"], strict=True)
                if k == "conversation" and p.get("split") in splits}
        items = items[items["unit"].isin(keep)]
    history = _histories(items)
    extracted = items[items["kind"] == "extracted"]
    if extractor is not None:
        extracted = extracted[extracted["payload"].map(lambda p: p.get("extractor") == extractor)]
    keys = list(zip(extracted["dataset"].astype(str), extracted["unit"].astype(str), strict=True))
    extracted = extracted[[k in history for k in keys]]
    keys = [k for k in keys if k in history]
    return pd.DataFrame({"item_id": extracted["item_id"].tolist(), "dataset": [k[0] for k in keys],
                         "unit": [k[1] for k in keys], "user_id": extracted["user_id"].astype(str).tolist(),
                         "attribute": extracted["attribute"].astype(str).tolist(),
                         "user_turns": [history[k][1] for k in keys],
                         "assistant_turns": [history[k][2] for k in keys]})


def judge_extraction_trained(db: str | Path, model_path: str | Path, *, datasets: tuple[str, ...] | None = None,
                             splits: tuple[str, ...] | None = None,
                             extractor: str | None = None) -> TrainedRunSummary:
    """Label every extracted attribute with a stored history ok/bad with a saved verifier (no LLM).

    Attributes extracted from a history the model was trained on are stored under condition 'in-sample'.

    Raises:
        StoreError: No extracted attributes with a stored conversation.
        FileNotFoundError, ValueError: The model cannot be loaded (see :func:`load_model`).
    """
    started = time.monotonic()
    model = load_model(model_path, "verifier")
    items = extracted_attribute_items(db, datasets=datasets, splits=splits, extractor=extractor)
    if items.empty:
        raise StoreError(f"{db}: no extracted attributes with a stored conversation to verify")
    labels = model.predict(items)
    in_training = np.array([f"{d}\x1f{u}" in model.train_units
                            for d, u in zip(items["dataset"], items["unit"], strict=True)], dtype=bool)
    return _judge_run(db, model, VERIFIER_JUDGE, items, labels, model_path, tuple(sorted(set(items["dataset"]))),
                      started, meta=None, in_training=in_training)


# --------------------------------------------------------------------------- storing labels

def _store_labels(db: str | Path, spec: TrainedJudgeSpec, rater: str, item_ids: list[str], labels: list[str], *,
                  kind: str, source: str, parameters: dict[str, Any], meta: dict[str, Any] | None = None,
                  conditions: list[str] | None = None) -> tuple[int, str]:
    """Write one run row and one label per item (rater_kind 'trained'), replacing the rater's earlier labels.

    Returns:
        The number of labels and the run id.
    """
    run = Run(run_id=f"{kind}-{uuid.uuid4().hex[:12]}", kind=kind, source=source,  # type: ignore[arg-type]
              rater=rater, judge_version=spec.version, git_sha=git_sha(), started_at=now(), finished_at=now(),
              status="finished", parameters=parameters)
    conds = conditions if conditions is not None else [""] * len(item_ids)
    rows = [Label(item_id=i, rater=rater, rater_kind="trained", condition=c, label=lab, run_id=run.run_id,
                  meta=meta) for i, lab, c in zip(item_ids, labels, conds, strict=True)]
    with opened(db) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            upsert(con, "runs", [run.model_dump()])
            write_labels(con, rows)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return len(rows), run.run_id


# --------------------------------------------------------------------------- judging with a saved model

def judge_relevance_trained(db: str | Path, model_path: str | Path, *,
                            datasets: tuple[str, ...] = ("recenter-stage2",)) -> TrainedRunSummary:
    """Label every imported relevance item of ``datasets`` with a saved relevance matcher.

    Raises:
        StoreError: No relevance items with prompt text in ``datasets``.
        FileNotFoundError, ValueError: The model cannot be loaded (see :func:`load_model`).
    """
    started = time.monotonic()
    model = load_model(model_path, "relevance")
    _require_encoder(model, model_path)
    items = relevance_items(db, datasets)
    if items.empty:
        raise StoreError(f"{db}: no relevance items with prompt text in {', '.join(datasets)}; "
                         "import a release first (personagap import recenter PATH)")
    labels = model.predict(items)
    return _judge_run(db, model, RELEVANCE_JUDGE, items, labels, model_path, datasets, started, meta=None)


def _require_encoder(model: TrainedModel, model_path: str | Path) -> None:
    """A model with encoder features needs the ``embed`` extra: say so before any work (StoreError: exit 2)."""
    from personagap.judges.embed import EXTRA_HINT, available

    encoder = getattr(model.vocab, "encoder", None)
    if encoder is not None and not available(encoder):
        raise StoreError(f"{model_path}: this model uses the sentence encoder {encoder}, which needs the optional "
                         f"`embed` extra (not installed): {EXTRA_HINT}")


def judge_response_trained(db: str | Path, model_path: str | Path, *,
                           datasets: tuple[str, ...] | None = None) -> TrainedRunSummary:
    """Label every imported pairwise (and generic-vs-personalised) response item with a saved preference model.

    Raises:
        StoreError: No pairwise items.
        FileNotFoundError, ValueError: The model cannot be loaded.
    """
    started = time.monotonic()
    model = load_model(model_path, "preference")
    items = pairwise_items(db, datasets)
    if items.empty:
        raise StoreError(f"{db}: no pairwise response items; import a release first "
                         "(personagap import prism-judge PATH)")
    labels = model.predict(items)
    return _judge_run(db, model, PREFERENCE_JUDGE, items, labels, model_path,
                      tuple(sorted(set(items["dataset"]))), started, meta={"swapped": False})


def in_sample_mask(model: TrainedModel, items: pd.DataFrame) -> np.ndarray:
    """Items whose label by ``model`` is in-sample: items it was fitted on, or of a user it was fitted on.

    Users match by id across datasets (a training user's item under another dataset name is in-sample too).
    """
    ids = items["item_id"].astype(str).isin(model.train_item_ids).to_numpy()
    users = (items["user_id"].astype(str).isin(model.train_users).to_numpy() if "user_id" in items
             else np.zeros(len(items), dtype=bool))
    return np.asarray(ids | users, dtype=bool)


def _judge_run(db: str | Path, model: TrainedModel, spec: TrainedJudgeSpec, items: pd.DataFrame, labels: list[str],
               model_path: str | Path, datasets: tuple[str, ...], started: float,
               meta: dict[str, Any] | None, in_training: np.ndarray | None = None) -> TrainedRunSummary:
    spec = get_trained_judge(model.judge) if model.judge in TRAINED_JUDGES else spec
    rater = trained_rater(spec, model.tag)
    run_params = {"model_path": str(model_path), "model_id": model.tag,
                  "trained_on": model.metadata.get("datasets"), "data_fingerprint": model.metadata.get(
                      "data_fingerprint"), "threshold": model.threshold}
    # Items the model was trained on, and any item of a user it was trained on (under whatever dataset name:
    # the pilot re-uses stage-2 users), get the condition 'in-sample': stored, but excluded from every
    # comparison by analysis/comparable.py, so they cannot inflate the judge's agreement. The '/cv' rater
    # holds the honest out-of-fold labels of training items.
    in_training = in_sample_mask(model, items) | (np.zeros(len(items), dtype=bool) if in_training is None
                                                  else np.asarray(in_training, dtype=bool))
    conditions = [IN_SAMPLE if t else "" for t in in_training]
    n, run_id = _store_labels(db, spec, rater, items["item_id"].tolist(), labels, kind="judge",
                              source=",".join(datasets), parameters=run_params, meta=meta, conditions=conditions)
    counts = pd.Series(labels).value_counts().to_dict()
    return TrainedRunSummary(run_id=str(run_id), rater=rater, labelled=n, by_label={str(k): int(v)
                                                                                   for k, v in counts.items()},
                             seconds=time.monotonic() - started,
                             in_training=int(in_training.sum()))


__all__ = ["DEFAULT_SEED", "TrainResult", "TrainedRunSummary", "extracted_attribute_items", "judge_extraction_trained",
           "judge_relevance_trained", "judge_response_trained", "pairwise_items", "relevance_items",
           "train_preference", "train_relevance", "train_verifier", "verifier_pairs"]
