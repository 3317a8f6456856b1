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

from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED, ci_list
from personagap.analysis.response import first_position_rate, judge_vs_human, longer_rate
from personagap.judges.trained import (
    PREFERENCE_JUDGE,
    RELEVANCE_JUDGE,
    TrainedJudgeSpec,
    TrainedModel,
    cross_val_preference,
    cross_val_relevance,
    fingerprint,
    fit_preference,
    fit_relevance,
    load_model,
    save_model,
    trained_rater,
)
from personagap.records import Label, Run
from personagap.store import StoreError, git_sha, now, opened, upsert, write_labels

CV_TAG = "cv"
IN_SAMPLE = "in-sample"
"""Condition of a saved model's labels on items it was trained on (kept out of every comparison)."""
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
    with opened(db, read_only=True) as con:
        frame = con.execute("""
            SELECT i.item_id, i.dataset, i.user_id, i.prompt_index, i.attribute, p.prompt_text,
                   a.reason, a.confidence, h.label AS human
            FROM items i JOIN prompts p USING (dataset, user_id, prompt_index)
            LEFT JOIN attributes a USING (dataset, user_id, attribute)
            LEFT JOIN labels h ON h.item_id = i.item_id AND h.rater_kind = 'human_majority'
                 AND h.condition = '' AND h.label IS NOT NULL
            WHERE i.stage = 'relevance' AND p.prompt_text IS NOT NULL AND i.attribute IS NOT NULL
            ORDER BY i.dataset, i.user_id, i.prompt_index, i.attribute
        """).df()
    if datasets:
        frame = frame[frame["dataset"].isin(datasets)].reset_index(drop=True)
    return frame


def pairwise_items(db: str | Path, datasets: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Pairwise and generic-vs-personalised response items with the single human label, where there is one."""
    from personagap.stages.response import _reference, load_items
    from personagap.store import load_labels

    with opened(db, read_only=True) as con:
        items = load_items(con)
        labels = load_labels(con, stage="response")
    items = items[items["kind"].isin(_PAIR_KINDS)].reset_index(drop=True)
    if datasets:
        items = items[items["dataset"].isin(datasets)].reset_index(drop=True)
    ref = _reference(labels) if not labels.empty else pd.Series(dtype=object)
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

    def render(self) -> str:
        """Plain-text summary for the terminal."""
        m = self.metadata
        cv = m["cv"]
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


def _fmt(v: float | None, digits: int) -> str:
    return "n/a" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.{digits}f}"


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
    """Items the model was trained on: stored under condition 'in-sample', left out of every comparison."""

    def render(self) -> str:
        """One paragraph for the terminal."""
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.by_label.items()))
        return (f"run {self.run_id}: {self.rater}\n  labelled {self.labelled} items ({counts}), no LLM calls, "
                f"{self.seconds:.1f}s"
                + (f"\n  note: {self.in_training} of these items were in the model's training data: stored under "
                   "condition 'in-sample' and left out of reports (the '/cv' rater holds honest out-of-fold labels)"
                   if self.in_training else ""))


# --------------------------------------------------------------------------- training

def _model_id(spec: TrainedJudgeSpec, data_fp: str, params: dict[str, Any]) -> str:
    blob = f"{spec.name}|{spec.version}|{data_fp}|{sorted(params.items())}"
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def train_relevance(db: str | Path, out: str | Path, *, datasets: tuple[str, ...] = ("recenter-stage2",),
                    n_splits: int = 5, seed: int = 0, store_cv: bool = True, n_resamples: int = DEFAULT_RESAMPLES,
                    c: float = 1.0) -> TrainResult:
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

    Raises:
        StoreError: No labelled relevance items in ``datasets``.
    """
    started = time.monotonic()
    items = relevance_items(db, datasets)
    labelled = items[items["human"].notna()].reset_index(drop=True)
    if labelled.empty or labelled["user_id"].nunique() < 2:
        raise StoreError(f"{db}: no human-majority relevance labels of two or more users in {', '.join(datasets)}; "
                         "import a release first (personagap import recenter PATH)")
    y = (labelled["human"] == "yes").astype(int).to_numpy()
    folds = min(n_splits, int(labelled["user_id"].nunique()))
    cv_labels, _ = cross_val_relevance(labelled, y, n_splits=folds, seed=seed, c=c)
    model = fit_relevance(labelled, y, c=c, seed=seed)
    model.train_item_ids = frozenset(labelled["item_id"])
    data_fp = fingerprint(labelled, ["dataset", "user_id", "prompt_index", "attribute", "human"])
    rater_cv = trained_rater(RELEVANCE_JUDGE, CV_TAG)
    rows = _relevance_scores(db, labelled, cv_labels, rater_cv, n_resamples=n_resamples, seed=seed)
    model.metadata |= {
        "model_id": _model_id(RELEVANCE_JUDGE, data_fp, model.metadata["params"]), "data_fingerprint": data_fp,
        "datasets": sorted(set(labelled["dataset"])), "n_train": len(labelled),
        "n_groups": int(labelled["user_id"].nunique()), "threshold": model.threshold, "git_sha": git_sha(),
        "cv": {"n_splits": folds, "grouped_by": "user", "seed": seed, "rater": rater_cv,
               "scores": rows[0].figures, "cis": rows[0].cis},
    }
    save_model(model, out)
    stored = _store_labels(db, RELEVANCE_JUDGE, rater_cv, labelled["item_id"].tolist(), cv_labels, kind="train",
                           source=",".join(datasets), parameters={"model_id": model.tag, "cv": model.metadata["cv"],
                                                                  "model_path": str(out)})[0] if store_cv else 0
    return TrainResult(kind="relevance", model_path=str(out), metadata=_with_core(model), rows=rows,
                       stored_cv_labels=stored, seconds=time.monotonic() - started)


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
    cv_labels, _ = cross_val_preference(labelled, h, n_splits=folds, seed=seed, c=c)
    model = fit_preference(labelled[decisive], labelled.loc[decisive, "human"].tolist(), c=c, seed=seed)
    model.train_item_ids = frozenset(labelled.loc[decisive, "item_id"])
    data_fp = fingerprint(labelled, ["dataset", "question", "answer_a", "answer_b", "profile", "human"])
    rater_cv = trained_rater(PREFERENCE_JUDGE, CV_TAG)
    rows = _preference_scores(db, labelled, cv_labels, rater_cv, n_resamples=n_resamples, seed=seed)
    model.metadata |= {
        "model_id": _model_id(PREFERENCE_JUDGE, data_fp, model.metadata["params"]), "data_fingerprint": data_fp,
        "datasets": sorted(set(labelled["dataset"])), "n_train": int(decisive.sum()),
        "n_groups": int(labelled["question"].nunique()), "threshold": model.threshold, "git_sha": git_sha(),
        "cv": {"n_splits": folds, "grouped_by": "question", "seed": seed, "rater": rater_cv,
               "scores": rows[0].figures, "cis": rows[0].cis},
    }
    save_model(model, out)
    stored = _store_labels(db, PREFERENCE_JUDGE, rater_cv, labelled["item_id"].tolist(), cv_labels, kind="train",
                           source=",".join(datasets), parameters={"model_id": model.tag, "cv": model.metadata["cv"],
                                                                  "model_path": str(out)},
                           meta={"swapped": False})[0] if store_cv else 0
    return TrainResult(kind="preference", model_path=str(out), metadata=_with_core(model), rows=rows,
                       stored_cv_labels=stored, seconds=time.monotonic() - started,
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
        name = f"{rater} [{condition}]" if condition else str(rater)
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
    items = relevance_items(db, datasets)
    if items.empty:
        raise StoreError(f"{db}: no relevance items with prompt text in {', '.join(datasets)}; "
                         "import a release first (personagap import recenter PATH)")
    labels = model.predict(items)
    return _judge_run(db, model, RELEVANCE_JUDGE, items, labels, model_path, datasets, started, meta=None)


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


def _judge_run(db: str | Path, model: TrainedModel, spec: TrainedJudgeSpec, items: pd.DataFrame, labels: list[str],
               model_path: str | Path, datasets: tuple[str, ...], started: float,
               meta: dict[str, Any] | None) -> TrainedRunSummary:
    rater = trained_rater(spec, model.tag)
    run_params = {"model_path": str(model_path), "model_id": model.tag,
                  "trained_on": model.metadata.get("datasets"), "data_fingerprint": model.metadata.get(
                      "data_fingerprint"), "threshold": model.threshold}
    # Items the model was trained on get the condition 'in-sample': stored, but never compared with humans as
    # the standard protocol (reports, diagnose and the dashboard read condition ''), so they cannot inflate
    # the judge's agreement. The '/cv' rater holds the honest out-of-fold labels of training items.
    in_training = items["item_id"].isin(model.train_item_ids).to_numpy()
    conditions = [IN_SAMPLE if t else "" for t in in_training]
    n, run_id = _store_labels(db, spec, rater, items["item_id"].tolist(), labels, kind="judge",
                              source=",".join(datasets), parameters=run_params, meta=meta, conditions=conditions)
    counts = pd.Series(labels).value_counts().to_dict()
    return TrainedRunSummary(run_id=str(run_id), rater=rater, labelled=n, by_label={str(k): int(v)
                                                                                   for k, v in counts.items()},
                             seconds=time.monotonic() - started,
                             in_training=int(in_training.sum()))


__all__ = ["DEFAULT_SEED", "TrainResult", "TrainedRunSummary", "judge_relevance_trained", "judge_response_trained",
           "pairwise_items", "relevance_items", "train_preference", "train_relevance"]
