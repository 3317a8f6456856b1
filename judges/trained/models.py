"""Fitting the trained judges and the fitted model (:class:`TrainedModel`) that predicts with them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from personagap.confidence import probability_meta
from personagap.judges.trained.features import (
    EMBED_DENSE,
    EMBED_TYPE_DIMS,
    PREFERENCE_FEATURES,
    RELEVANCE_DENSE,
    VERIFIER_FEATURES,
    VERIFIER_NOTE,
    RelevanceFeatures,
    fit_preference_vocab,
    fit_relevance_vocab,
    pair_differences,
    relevance_features,
    verifier_features,
    verifier_vocab,
)
from personagap.judges.trained.specs import (
    PREFERENCE_JUDGE,
    RELEVANCE_EMBED_JUDGE,
    RELEVANCE_JUDGE,
    VERIFIER_JUDGE,
    TrainedKind,
)
from personagap.vocabulary import DECISIVE, RELEVANCE_LABELS, VERIFICATION_LABELS

# --------------------------------------------------------------------------- the saved model

FIT_COLUMNS = ("user_id", "question", "source_user", "item_id")
"""Columns whose distinct values a fit records (:class:`FitRecord`): who and what the model saw."""


LABELS: dict[str, tuple[str, str]] = {"relevance": RELEVANCE_LABELS, "preference": DECISIVE,
                                         "verifier": VERIFICATION_LABELS[:2]}
"""Each trained judge kind's (positive, negative) label: its probability is the positive label's."""
POSITIVE_LABELS: frozenset[str] = frozenset(yes for yes, _ in LABELS.values())


@dataclass(frozen=True)
class FitRecord:
    """What one fit actually received, read from the rows handed to it (not from the caller's intent).

    Cross-validation reads each fold's record back from the fitted model, so a fold fitted on more than
    its training part shows up (see :class:`FoldRecord`); :func:`personagap.stages.trained` uses
    ``values['user_id']`` to flag labels on any item of a training user as in-sample.
    """

    n_rows: int
    values: dict[str, frozenset[str]]
    """Column -> distinct values of the fitted rows, for the :data:`FIT_COLUMNS` present."""

    @classmethod
    def of(cls, items: pd.DataFrame) -> FitRecord:
        """The record of fitting on ``items``."""
        return cls(n_rows=len(items), values={c: frozenset(items[c].dropna().astype(str)) for c in FIT_COLUMNS
                                              if c in items})


@dataclass
class TrainedModel:
    """A fitted trained judge with everything needed to predict and to explain where it came from.

    Attributes:
        kind: 'relevance', 'preference' or 'verifier'.
        judge: Registered judge name (e.g. 'trained-relevance').
        version: The judge's version when trained.
        classifier: The fitted scikit-learn estimator.
        scaler: Scaler of the dense features (relevance) or of the pair differences (preference).
        vocab: Fitted vectorizers.
        threshold: Probability at or above which the answer is "yes"/"A"/"ok" (relevance: base-rate matched;
            preference and verifier: 0.5).
        metadata: What the JSON sidecar holds (features, data fingerprint, CV scores, versions, ...).
    """

    kind: TrainedKind
    judge: str
    version: int
    classifier: LogisticRegression
    scaler: StandardScaler
    vocab: Any
    threshold: float
    metadata: dict[str, Any] = field(default_factory=dict)
    train_item_ids: frozenset[str] = frozenset()
    """Ids of the items it was fitted on (to flag in-sample labels when it judges the same database)."""
    train_units: frozenset[str] = frozenset()
    """Verifier: ``dataset\\x1funit`` of the histories it was fitted on (attributes extracted from them are
    in-sample: the model saw that conversation with its user's stated preferences)."""
    fitted: FitRecord | None = None
    """What the classifier was actually fitted on (set by the ``fit_*`` function from the rows it received)."""

    @property
    def train_users(self) -> frozenset[str]:
        """Users whose labelled items it was fitted on: its labels on any item of theirs are in-sample."""
        return self.fitted.values.get("user_id", frozenset()) if self.fitted is not None else frozenset()

    @property
    def tag(self) -> str:
        """Short id of this fitted model (used in the rater name): the data fingerprint's head."""
        return str(self.metadata.get("model_id", "unsaved"))

    def predict_proba(self, items: pd.DataFrame) -> npt.NDArray[np.float64]:
        """P(relevant) per relevance item, P(A preferred) per pairwise item, P(supported) per verifier item."""
        if items.empty:
            return np.zeros(0)
        if self.kind == "relevance":
            x = _scale_relevance(relevance_features(items, self.vocab), self.scaler)
        elif self.kind == "verifier":
            x = self.scaler.transform(verifier_features(items, self.vocab))
        else:
            x = self.scaler.transform(pair_differences(items, self.vocab))
        return np.asarray(self.classifier.predict_proba(x)[:, 1], dtype=float)

    def predict(self, items: pd.DataFrame, probabilities: npt.ArrayLike | None = None) -> list[str]:
        """Labels in the store's vocabulary: 'yes'/'no' (relevance), 'A'/'B' (preference), 'ok'/'bad' (verifier).

        Args:
            items: The items.
            probabilities: :meth:`predict_proba` of ``items``, when already computed.
        """
        p = self.predict_proba(items) if probabilities is None else np.asarray(probabilities, dtype=float)
        yes, no = LABELS[self.kind]
        return [yes if v >= self.threshold else no for v in p]

    def label_confidences(self, items: pd.DataFrame, probabilities: npt.ArrayLike | None = None
                          ) -> list[dict[str, Any]]:
        """Each label's confidence, as label meta entries: the predicted probability of the label it gives.

        ``p`` for a "yes"/"A"/"ok" label, ``1 - p`` for the other (:func:`personagap.confidence.probability_meta`,
        scale ``probability``), aligned with :meth:`predict`'s labels.

        Args:
            items: The items.
            probabilities: :meth:`predict_proba` of ``items``, when already computed.
        """
        p = self.predict_proba(items) if probabilities is None else np.asarray(probabilities, dtype=float)
        return [probability_meta(v if v >= self.threshold else 1.0 - v) for v in p]


def _scale_relevance(x: sp.csr_matrix, scaler: StandardScaler) -> sp.csr_matrix:
    n = int(scaler.n_features_in_)  # the dense block: RELEVANCE_DENSE (+ the encoder's features)
    dense = scaler.transform(x[:, :n].toarray())
    return sp.hstack([sp.csr_matrix(dense), x[:, n:]], format="csr")


def fingerprint(frame: pd.DataFrame, columns: Sequence[str]) -> str:
    """sha256 of the training data (the given columns, rows sorted): same data, same fingerprint."""
    rows = sorted(json.dumps([None if pd.isna(v) else str(v) for v in r], ensure_ascii=False)
                  for r in frame[list(columns)].itertuples(index=False, name=None))
    return hashlib.sha256("\n".join(rows).encode("utf-8")).hexdigest()


def fit_relevance(items: pd.DataFrame, labels: npt.ArrayLike, *, c: float = 1.0, seed: int = 0,
                  features: RelevanceFeatures = "lexical") -> TrainedModel:
    """Fit the relevance matcher on labelled items; threshold = the human base rate of these items.

    Args:
        items: Relevance items (see :func:`relevance_features`).
        labels: 1 = the human majority says relevant, 0 = not, aligned with ``items``.
        c: Inverse L2 regularisation strength of the logistic regression.
        seed: Seed recorded with the model (lbfgs is deterministic; kept for solvers that are not).
        features: ``lexical`` (default) or ``embed`` (adds :data:`EMBED_DENSE` and the attribute embedding;
            needs the ``embed`` extra).

    Raises:
        ValueError: Fewer than two classes in ``labels``.
        MissingExtra: ``features='embed'`` without the ``embed`` extra installed.
    """
    y = np.asarray(labels, dtype=int)
    if len(set(y.tolist())) < 2:
        raise ValueError("training a relevance matcher needs both relevant and irrelevant labels")
    spec = RELEVANCE_EMBED_JUDGE if features == "embed" else RELEVANCE_JUDGE
    vocab = fit_relevance_vocab(items, features)
    x = relevance_features(items, vocab)
    n_bag = len(vocab.attribute_bag.vocabulary_)
    n = x.shape[1] - n_bag
    scaler = StandardScaler().fit(x[:, :n].toarray())
    xs = _scale_relevance(x, scaler)
    clf = LogisticRegression(C=c, max_iter=5000, random_state=seed).fit(xs, y)
    p = clf.predict_proba(xs)[:, 1]
    threshold = base_rate_threshold(p, float(y.mean()))
    names = [*RELEVANCE_DENSE]
    if vocab.encoder is not None:
        names += [*EMBED_DENSE, f"attribute type: {EMBED_TYPE_DIMS} projected dims of its {vocab.encoder} embedding"]
    return TrainedModel(kind="relevance", judge=spec.name, version=spec.version,
                        classifier=clf, scaler=scaler, vocab=vocab, threshold=threshold, fitted=FitRecord.of(items),
                        train_item_ids=_item_ids(items),
                        metadata={"features": [*names, f"attribute n-gram tf-idf ({n_bag} terms)"],
                                  "feature_set": features, "encoder": vocab.encoder,
                                  "params": {"C": c, "seed": seed}, "base_rate": float(y.mean()),
                                  "train_yes_rate": float((p >= threshold).mean())})


def _item_ids(items: pd.DataFrame) -> frozenset[str]:
    return frozenset(items["item_id"].astype(str)) if "item_id" in items else frozenset()


def base_rate_threshold(probabilities: npt.ArrayLike, base_rate: float) -> float:
    """The probability cut that labels (about) ``base_rate`` of the given items "yes".

    The cut is the (1 - base_rate) quantile of ``probabilities``, so ``mean(p >= cut)`` equals the base
    rate up to ties. This is what keeps a matcher from the LLMs' over-selection.
    """
    p = np.sort(np.asarray(probabilities, dtype=float))
    if p.size == 0:
        raise ValueError("no probabilities to set a threshold on")
    k = int(round(base_rate * p.size))
    if k <= 0:
        return float(np.nextafter(p[-1], np.inf))
    return float(p[p.size - k])


def fit_preference(items: pd.DataFrame, labels: Sequence[str], *, c: float = 1.0, seed: int = 0) -> TrainedModel:
    """Fit the Bradley-Terry preference model on pairs with a decisive human label.

    Args:
        items: Pairwise items (question, answer_a, answer_b, profile).
        labels: 'A' or 'B' per item (ties must be dropped by the caller: BT models strict preferences).
        c: Inverse L2 regularisation strength.
        seed: Seed recorded with the model.

    Raises:
        ValueError: A label other than A/B, or no pairs.
    """
    y_text = list(labels)
    if not y_text or set(y_text) - set(DECISIVE):
        raise ValueError("a preference model trains on pairs labelled 'A' or 'B' (drop ties first)")
    vocab = fit_preference_vocab(pd.concat([items["question"], items["answer_a"], items["answer_b"],
                                            items["profile"]]).fillna("").astype(str).tolist())
    d = pair_differences(items, vocab)
    y = np.array([1 if v == "A" else 0 for v in y_text])
    # Each pair in both orders: the fitted model is antisymmetric (no position preference), and a no-intercept
    # fit on centred differences is what Bradley-Terry is.
    x = np.vstack([d, -d])
    yy = np.concatenate([y, 1 - y])
    scaler = StandardScaler(with_mean=False).fit(x)
    clf = LogisticRegression(C=c, fit_intercept=False, max_iter=2000, random_state=seed).fit(scaler.transform(x), yy)
    return TrainedModel(kind="preference", judge=PREFERENCE_JUDGE.name, version=PREFERENCE_JUDGE.version,
                        classifier=clf, scaler=scaler, vocab=vocab, threshold=0.5, fitted=FitRecord.of(items),
                        train_item_ids=_item_ids(items),
                        metadata={"features": [f"{f} (A minus B)" for f in PREFERENCE_FEATURES],
                                  "params": {"C": c, "seed": seed},
                                  "weights": dict(zip(PREFERENCE_FEATURES, map(float, clf.coef_[0]), strict=True))})


def fit_verifier(items: pd.DataFrame, labels: npt.ArrayLike, *, c: float = 1.0, seed: int = 0,
                 features: npt.NDArray[np.float64] | None = None) -> TrainedModel:
    """Fit the stage-1 verifier on (conversation, attribute) pairs; fixed threshold 0.5.

    Args:
        items: Verifier items (see :func:`verifier_features`).
        labels: 1 = the user stated this preference, 0 = another user's preference, aligned with ``items``.
        c: Inverse L2 regularisation strength of the logistic regression.
        seed: Seed recorded with the model.
        features: :func:`verifier_features` of ``items``, when already computed (the vectorizers are
            stateless, so they do not depend on which items are trained on).

    Raises:
        ValueError: Fewer than two classes in ``labels``.
    """
    y = np.asarray(labels, dtype=int)
    if len(set(y.tolist())) < 2:
        raise ValueError("training a verifier needs both supported and unsupported attributes")
    vocab = verifier_vocab()
    x = verifier_features(items, vocab) if features is None else features
    scaler = StandardScaler().fit(x)
    clf = LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(scaler.transform(x), y)
    return TrainedModel(kind="verifier", judge=VERIFIER_JUDGE.name, version=VERIFIER_JUDGE.version,
                        classifier=clf, scaler=scaler, vocab=vocab, threshold=0.5, fitted=FitRecord.of(items),
                        metadata={"features": list(VERIFIER_FEATURES), "params": {"C": c, "seed": seed},
                                  "base_rate": float(y.mean()), "threshold_rule": "fixed 0.5, set before any "
                                  "evaluation (training pairs are balanced: one negative per positive)",
                                  "training_data": VERIFIER_NOTE,
                                  "weights": dict(zip(VERIFIER_FEATURES, map(float, clf.coef_[0]), strict=True))})
