"""Grouped cross-validation of the trained judges, with a record of what every fold did.

No group (a user, or a question) is ever on both sides of a fold, and each fold's record is read back from
the fitted model (:class:`~personagap.judges.trained.models.FitRecord`), so the leakage guarantees are
checked on what the CV did, not assumed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from personagap.confidence import probability_meta
from personagap.judges.trained.features import RelevanceFeatures, verifier_features, verifier_vocab, warm_embeddings
from personagap.judges.trained.models import (
    POSITIVE_LABELS,
    FitRecord,
    TrainedModel,
    fit_preference,
    fit_relevance,
    fit_verifier,
)
from personagap.vocabulary import DECISIVE

# --------------------------------------------------------------------------- grouped cross-validation

def grouped_folds(groups: npt.ArrayLike, n_splits: int = 5, seed: int = 0) -> Iterator[tuple[npt.NDArray[np.int64],
                                                                                              npt.NDArray[np.int64]]]:
    """(train, test) index arrays where no group is on both sides; groups are shuffled with ``seed``.

    Groups are dealt to folds greedily by size (largest first, to the fold with fewest items), after a
    seeded shuffle, so folds are balanced and reproducible.

    Raises:
        ValueError: Fewer groups than folds.
    """
    g = np.asarray(groups, dtype=object)
    uniq, idx, counts = np.unique(g.astype(str), return_inverse=True, return_counts=True)
    if len(uniq) < n_splits:
        raise ValueError(f"{len(uniq)} groups cannot fill {n_splits} folds")
    order = np.random.default_rng(seed).permutation(len(uniq))
    order = order[np.argsort(-counts[order], kind="stable")]
    fold_of = np.empty(len(uniq), dtype=np.int64)
    sizes = np.zeros(n_splits)
    for u in order:
        f = int(np.argmin(sizes))
        fold_of[u] = f
        sizes[f] += counts[u]
    item_fold = fold_of[idx]
    for f in range(n_splits):
        yield np.flatnonzero(item_fold != f), np.flatnonzero(item_fold == f)


@dataclass(frozen=True)
class FoldRecord:
    """What one cross-validation fold actually did, for the leakage guarantees to be checked, not assumed.

    ``train_groups``/``test_groups`` are the group values (users, or questions) of the rows in the fold's
    training and test parts; ``fitted_groups``/``n_fitted`` are read back from the fitted model's
    :class:`FitRecord` (what :func:`fit_relevance` & co. received), so a fold whose model saw more than its
    training part cannot pass for one that did not.
    """

    fold: int
    train_groups: frozenset[str]
    test_groups: frozenset[str]
    fitted_groups: frozenset[str]
    n_train: int
    n_test: int
    n_fitted: int
    test_index: tuple[int, ...]
    judge: str = ""
    """The fold model's judge name, read back from it (``trained-relevance-embed`` when it used the encoder)."""

    @property
    def disjoint(self) -> bool:
        """No group has rows in both the training and the test part."""
        return not self.train_groups & self.test_groups

    @property
    def fitted_on_train_only(self) -> bool:
        """The model was fitted on (a part of) the training rows: no test group, no more rows than the part."""
        return (self.fitted_groups <= self.train_groups and not self.fitted_groups & self.test_groups
                and self.n_fitted <= self.n_train)


@dataclass
class CrossValidation:
    """Out-of-fold predictions of a grouped cross-validation, with the record of every fold."""

    labels: list[str]
    probabilities: npt.NDArray[np.float64]
    grouped_by: str
    """The column whose values are the groups ('user_id' or 'question')."""
    seed: int
    folds: list[FoldRecord]

    def label_confidences(self) -> list[dict[str, Any]]:
        """Each out-of-fold label's confidence, as label meta entries: the predicted probability of the label given.

        Each fold's labels come from its own threshold, so the side is read from the label itself: ``p`` for a
        "yes"/"A"/"ok" label, ``1 - p`` for the other (as :meth:`TrainedModel.label_confidences` for one model).
        """
        return [probability_meta(p if label in POSITIVE_LABELS else 1.0 - p)
                for label, p in zip(self.labels, self.probabilities.tolist(), strict=True)]

    def record(self) -> dict[str, Any]:
        """JSON-safe account of what each fold did (for the model's sidecar and the run's parameters).

        User ids are listed; questions (long texts) are represented by a sha256 of their sorted list.
        """
        def ids(groups: frozenset[str]) -> dict[str, Any]:
            digest = hashlib.sha256("\n".join(sorted(groups)).encode("utf-8")).hexdigest()
            return {"sha256": digest} | ({"ids": sorted(groups)} if self.grouped_by == "user_id" else {})

        return {"grouped_by": self.grouped_by, "seed": self.seed, "n_splits": len(self.folds),
                "folds": [{"fold": f.fold, "n_train": f.n_train, "n_test": f.n_test, "n_fitted": f.n_fitted,
                           "n_train_groups": len(f.train_groups), "n_test_groups": len(f.test_groups),
                           "disjoint": f.disjoint, "fitted_on_train_only": f.fitted_on_train_only, "judge": f.judge,
                           "test_groups": ids(f.test_groups)} for f in self.folds]}


def _group_values(items: pd.DataFrame, rows: npt.NDArray[np.int64], columns: Sequence[str]) -> frozenset[str]:
    part = items.iloc[rows]
    return frozenset().union(*(frozenset(part[c].dropna().astype(str)) for c in columns if c in part))


def _cross_validate(items: pd.DataFrame, by: str, *, n_splits: int, seed: int,
                    train_rows: Callable[[npt.NDArray[np.int64], npt.NDArray[np.int64]], npt.NDArray[np.int64]],
                    fit: Callable[[npt.NDArray[np.int64]], TrainedModel],
                    proba: Callable[[TrainedModel, npt.NDArray[np.int64]], npt.NDArray[np.float64]],
                    seen_columns: Sequence[str] = ()) -> CrossValidation:
    """Grouped CV by column ``by``: per fold, fit on ``train_rows(train, test)`` and predict the test part.

    Args:
        items: The labelled items.
        by: The grouping column (no value of it is ever in a fold's training and test part at once).
        n_splits: Folds.
        seed: Fold-assignment seed.
        train_rows: The rows of a fold's complement to fit on (all of them, or a filtered subset).
        fit: Fits a model on the given rows.
        proba: The fitted model's probabilities for the given (test) rows.
        seen_columns: Further columns whose values count as groups the model saw (e.g. the verifier's
            ``source_user``, the user a negative attribute came from).
    """
    out = np.empty(len(items), dtype=object)
    prob = np.zeros(len(items))
    folds = []
    columns = (by, *seen_columns)
    for k, (rest, test) in enumerate(grouped_folds(items[by].fillna("").astype(str).to_numpy(), n_splits, seed)):
        train = train_rows(rest, test)
        model = fit(train)
        prob[test] = proba(model, test)
        out[test] = model.predict(items.iloc[test], prob[test])
        fitted = model.fitted if model.fitted is not None else FitRecord(0, {})
        folds.append(FoldRecord(
            fold=k, train_groups=_group_values(items, train, columns), test_groups=_group_values(items, test, (by,)),
            fitted_groups=frozenset().union(*(fitted.values.get(c, frozenset()) for c in columns)),
            n_train=len(train), n_test=len(test), n_fitted=fitted.n_rows, test_index=tuple(map(int, test)),
            judge=model.judge))
    return CrossValidation(labels=list(out), probabilities=prob, grouped_by=by, seed=seed, folds=folds)


def cross_val_relevance(items: pd.DataFrame, labels: npt.ArrayLike, *, n_splits: int = 5, seed: int = 0,
                        c: float = 1.0, features: RelevanceFeatures = "lexical") -> CrossValidation:
    """Out-of-fold labels and probabilities, folds grouped by user (each fold's threshold from its train part).

    ``features='embed'`` encodes every distinct text once up front: the encoder is fixed (nothing is fitted
    on any data), so sharing its vectors across folds leaks nothing.
    """
    y = np.asarray(labels, dtype=int)
    if features == "embed":
        warm_embeddings(items)
    return _cross_validate(
        items, "user_id", n_splits=n_splits, seed=seed, train_rows=lambda rest, test: rest,
        fit=lambda rows: fit_relevance(items.iloc[rows], y[rows], c=c, seed=seed, features=features),
        proba=lambda model, rows: model.predict_proba(items.iloc[rows]))


def cross_val_preference(items: pd.DataFrame, labels: Sequence[str], *, n_splits: int = 5, seed: int = 0,
                         c: float = 1.0) -> CrossValidation:
    """Out-of-fold A/B labels for every item (ties included), folds grouped by question; trained on A/B only."""
    lab = np.asarray(list(labels), dtype=object)
    return _cross_validate(
        items, "question", n_splits=n_splits, seed=seed,
        train_rows=lambda rest, test: rest[np.isin(lab[rest], DECISIVE)],
        fit=lambda rows: fit_preference(items.iloc[rows], lab[rows].tolist(), c=c, seed=seed),
        proba=lambda model, rows: model.predict_proba(items.iloc[rows]))


def cross_val_verifier(items: pd.DataFrame, labels: npt.ArrayLike, *, n_splits: int = 5, seed: int = 0,
                       c: float = 1.0, features: npt.NDArray[np.float64] | None = None) -> CrossValidation:
    """Out-of-fold ok/bad labels and P(supported), folds grouped by user.

    A fold's test part holds every pair whose conversation is one of its users'. Its training part leaves
    out, besides those, every pair whose *negative attribute* came from one of those users (column
    ``source_user``, when present), so no test user's words reach the model in any role. ``features``:
    :func:`verifier_features` of ``items`` when already computed (stateless vectorizers: no fold leakage).
    """
    y = np.asarray(labels, dtype=int)
    source = items["source_user"].astype(str).to_numpy() if "source_user" in items else None
    users = items["user_id"].astype(str).to_numpy()
    x = verifier_features(items, verifier_vocab()) if features is None else features

    def train_rows(rest: npt.NDArray[np.int64], test: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return rest if source is None else rest[~np.isin(source[rest], np.unique(users[test]))]

    return _cross_validate(
        items, "user_id", n_splits=n_splits, seed=seed, train_rows=train_rows, seen_columns=("source_user",),
        fit=lambda rows: fit_verifier(items.iloc[rows], y[rows], c=c, seed=seed, features=x[rows]),
        proba=lambda model, rows: np.asarray(model.classifier.predict_proba(model.scaler.transform(x[rows]))[:, 1],
                                             dtype=float))
