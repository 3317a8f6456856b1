"""Stage 1's trained verifier: training on LAPS gold preferences, its AUC with a user-clustered CI, labelling."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from personagap.analysis.agreement import (
    Estimate,
    agreement,
    ci_list,
    interval_from_leave_outs,
)
from personagap.analysis.arrays import safe_div
from personagap.judges.trained import (
    VERIFIER_JUDGE,
    cross_val_verifier,
    fingerprint,
    fit_verifier,
    save_model,
    verifier_features,
    verifier_vocab,
)
from personagap.stages.trained_items import extracted_attribute_items, verifier_pairs
from personagap.stages.trained_judging import judge_run, open_model
from personagap.stages.trained_results import ScoreRow, TrainedRunSummary, TrainResult, trained_model_id, with_core
from personagap.store import StoreError, git_sha


def leave_one_user_out_auc(y: np.ndarray, p: np.ndarray, users: np.ndarray) -> tuple[float, np.ndarray]:
    """ROC AUC (ties count half) on all items and without each user in turn, exactly, in O(n log n).

    AUC is the Mann-Whitney count ``W`` of (positive, negative) pairs the scores order right, over ``P * N``.
    Without user ``u``: ``W - A_u - B_u + C_u`` over ``(P - P_u)(N - N_u)``, with ``A_u`` the pairs of ``u``'s
    positives, ``B_u`` those of its negatives and ``C_u`` the pairs inside ``u`` (removed twice, added back once).

    Args:
        y: 0/1 labels.
        p: Scores.
        users: The user of each item.

    Returns:
        ``(auc, theta)``, ``theta[u]`` the AUC without user ``u`` (users in sorted id order; NaN where no positive
        or no negative is left).
    """
    yy = np.asarray(y).astype(bool)
    _, code = np.unique(p, return_inverse=True)
    ids, user = np.unique(users.astype(str), return_inverse=True)
    k = int(code.max()) + 1 if code.size else 1
    pos, neg = np.bincount(code, weights=yy, minlength=k), np.bincount(code, weights=~yy, minlength=k)
    # Credited pairs of each item with everyone: a positive against lower negatives, a negative under higher positives.
    credit = np.where(yy, (np.cumsum(neg) - neg + 0.5 * neg)[code], (pos.sum() - np.cumsum(pos) + 0.5 * pos)[code])
    by_user = np.bincount(user, weights=credit, minlength=len(ids))
    # Pairs inside each user: the same count over (user, score) groups, cumulated within the user only.
    group, g_index = np.unique(user.astype(np.int64) * k + code, return_inverse=True)
    g_pos = np.bincount(g_index, weights=yy, minlength=len(group))
    g_neg = np.bincount(g_index, weights=~yy, minlength=len(group))
    g_user = group // k
    cum = np.cumsum(g_neg)
    first = np.searchsorted(g_user, g_user)  # each group's user's first group (groups sorted by user, score)
    below = cum - g_neg - (cum[first] - g_neg[first])
    inside = np.bincount(g_user, weights=g_pos * (below + 0.5 * g_neg), minlength=len(ids))
    n_pos_u = np.bincount(user, weights=yy, minlength=len(ids))
    n_neg_u = np.bincount(user, weights=~yy, minlength=len(ids))
    wins = float((credit * yy).sum())
    n_pos, n_neg = float(yy.sum()), float((~yy).sum())
    auc = wins / (n_pos * n_neg) if n_pos and n_neg else float("nan")
    theta = safe_div(np.asarray(wins - by_user + inside, dtype=float),
                     np.asarray((n_pos - n_pos_u) * (n_neg - n_neg_u), dtype=float))
    return auc, theta


def auc_estimate(y: np.ndarray, p: np.ndarray, users: np.ndarray) -> Estimate:
    """ROC AUC with a user-clustered jackknife-t CI (the one CI rule's interval over exact leave-one-user-out AUCs).

    AUC is not a sum over users, but leaving a user out is still exact (:func:`leave_one_user_out_auc`); the
    calibration harness measures this interval's coverage (``benchmarks/calibration.py``, ``auc``). None below
    the minimum number of users; users without whom no positive or no negative is left counted as undefined.
    """
    auc, theta = leave_one_user_out_auc(y, p, users)
    return interval_from_leave_outs(auc, theta, 0.95, bounds=(0.0, 1.0))


def _verifier_row(name: str, pairs: pd.DataFrame, p: np.ndarray, threshold: float) -> ScoreRow:

    y = pairs["label"].to_numpy(dtype=int)
    users = pairs["user_id"].astype(str).to_numpy()
    j = (p >= threshold).astype(int)
    est = agreement(y, j, users, metrics=("kappa", "accuracy"))
    est["auc"] = auc_estimate(y, p, users)
    figures = {k: e.value for k, e in est.items()} | {"users": float(len(set(users))),
                                                     "judge_ok_rate": float(j.mean()) if len(j) else float("nan")}
    return ScoreRow(judge=name, rater_kind="trained", n=len(pairs), figures=figures,
                    cis={k: ci_list(e) for k, e in est.items()})


def train_verifier(db: str | Path, out: str | Path, *, datasets: tuple[str, ...] = ("laps",),
                   train_split: str = "train", eval_split: str = "val", n_splits: int = 5, seed: int = 0,
                   c: float = 1.0) -> TrainResult:
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
    rows = [_verifier_row(f"CV, {train_split} split ({folds} folds by user)", train, cv_prob, model.threshold)]
    notes = []
    held = pairs[(pairs["split"] == eval_split) & ~pairs["user_id"].isin(set(train["user_id"]))].reset_index(drop=True)
    overlap = pairs[(pairs["split"] == eval_split) & pairs["user_id"].isin(set(train["user_id"]))]["user_id"].nunique()
    if not held.empty:
        from personagap.analysis.extraction import OFFLINE_THRESHOLD

        rows.append(_verifier_row(f"held out: {eval_split} split", held, model.predict_proba(held), model.threshold))
        contain = verifier_features(held, verifier_vocab())[:, 0]
        rows.append(_verifier_row(f"baseline on {eval_split}: containment>={OFFLINE_THRESHOLD:.3f}", held, contain,
                                  OFFLINE_THRESHOLD))
        notes.append("baseline = the offline matcher's containment alone (best user turn), its own threshold")
        if overlap:
            notes.append(f"{overlap} {eval_split} users who also have {train_split} histories are left out of the "
                         f"{eval_split} figures")
    notes.append("a positive is a value the user stated, a negative another user's value on the same topic: the "
                 "verifier learns 'does this conversation support this preference', not over-generalisation by "
                 "an extractor; ok rate = share predicted ok")
    data_fp = fingerprint(train, ["dataset", "unit", "attribute", "label", "source_user"])
    model.metadata |= {
        "model_id": trained_model_id(VERIFIER_JUDGE, data_fp, model.metadata["params"]), "data_fingerprint": data_fp,
        "datasets": sorted(set(train["dataset"])), "train_split": train_split, "n_train": len(train),
        "n_positive": int(y.sum()), "n_groups": int(train["user_id"].nunique()), "threshold": model.threshold,
        "git_sha": git_sha(),
        "cv": {"n_splits": folds, "grouped_by": "user", "seed": seed, "rater": None,
               "scores": rows[0].figures, "cis": rows[0].cis, "folds": cv.record()["folds"]},
        "heldout": ({"split": eval_split, "n": len(held), "scores": rows[1].figures, "cis": rows[1].cis,
                     "baseline_containment": rows[2].figures} if len(rows) > 1 else None),
    }
    save_model(model, out)
    return TrainResult(kind="verifier", model_path=str(out), metadata=with_core(model), rows=rows,
                       stored_cv_labels=0, seconds=time.monotonic() - started, notes=notes, cv=cv)


def judge_extraction_trained(db: str | Path, model_path: str | Path, *, datasets: tuple[str, ...] | None = None,
                             splits: tuple[str, ...] | None = None,
                             extractor: str | None = None) -> TrainedRunSummary:
    """Label every extracted attribute with a stored history ok/bad with a saved verifier (no LLM).

    Attributes extracted from a history the model was trained on are stored under condition 'in-sample'.

    Raises:
        StoreError: No extracted attributes with a stored conversation.
        ModelFileError: The model file cannot be used (see :func:`open_model`).
    """
    started = time.monotonic()
    model = open_model(model_path, "verifier")
    items = extracted_attribute_items(db, datasets=datasets, splits=splits, extractor=extractor)
    if items.empty:
        raise StoreError(f"{db}: no extracted attributes with a stored conversation to verify")
    in_training = np.array([f"{d}\x1f{u}" in model.train_units
                            for d, u in zip(items["dataset"], items["unit"], strict=True)], dtype=bool)
    return judge_run(db, model, VERIFIER_JUDGE, items, model_path, tuple(sorted(set(items["dataset"]))),
                      started, meta=None, in_training=in_training)
