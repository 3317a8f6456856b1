"""Features of the trained judges (pure functions of the items and fitted vectorizers).

Relevance: lexical/structural features of (attribute, prompt, profile), optionally with sentence-encoder
ones; preference: per-answer features whose A-minus-B difference the Bradley-Terry model reads; verifier:
containment and similarity of an attribute to a user's conversation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer, TfidfVectorizer

from personagap.analysis.extraction import content_tokens
from personagap.judges.embed import DEFAULT_ENCODER, encode

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
