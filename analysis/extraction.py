"""Stage-1 analysis as pure functions: matching extracted attributes to gold, and verdict agreement.

No I/O and no LLM calls: inputs are plain sequences and DataFrames built from stored items and
labels (see :mod:`personagap.stages.extraction`). Every rate carries a user-clustered CI built from
per-user counts by the one CI rule (:func:`personagap.analysis.agreement.cluster_estimate`), so a user's
numerator and denominator are left out together.

The offline matcher
-------------------
``containment(attribute, gold)`` = the share of the gold value's content tokens found in the
attribute (lower-cased, stop words removed, light suffix stemming). Containment is normalised by
the *gold* side, so a long attribute sentence ("The user enjoys comedies with their kids") is not
penalised for its length; it is blind to negation ("likes horror" matches gold "horror" in a
*dislike* category) - the LLM ``match`` judge is the check on that. An attribute matches a gold
preference when the score is at least the threshold.

The threshold (:data:`OFFLINE_THRESHOLD`) was chosen on the LAPS **train** split with
:func:`calibrate_threshold` on :func:`laps_calibration_scores`: for each gold preference, the
best containment in a user turn of its own session (positive: the turn the human wrote it from)
against the best in the user turns of another worker's session on the same topic (negative),
picking the threshold with the highest Youden J (TPR - FPR). ``tests/stages/test_extraction_report.py``
recomputes it from the shared data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from personagap.analysis.agreement import (
    DEFAULT_SEED,
    Estimate,
    FloatArray,
    agreement,
    cluster_estimate,
    fleiss_kappa_ci,
    krippendorff_alpha_ci,
    per_cluster_sums,
)
from personagap.analysis.arrays import safe_div
from personagap.analysis.pairwise import PairwiseResult, pairwise_agreement
from personagap.records import Item, Stage, item_id
from personagap.vocabulary import VERIFICATION_LABELS

STAGE: Stage = "extraction"

#: Chosen on the LAPS train split (see the module docstring); stated in every report.
OFFLINE_THRESHOLD = 4 / 7
_NAN = float("nan")
_STOP = frozenset("""
a an the and or but of to in on at for with from by as about into over than then so very really just also too
i im i'm me my mine we our us you your he she they them their it its this that these those there here
is are was were be been being am do does did have has had having will would can could should may might must
user users user's person someone somebody likes like liked prefers prefer preferred preference preferences enjoys
enjoy enjoyed loves love loved wants want wanted interested interest into fan fond usually often sometimes
no not never dont don't doesnt doesn't without avoid avoids avoiding any some all other others one ones
kind kinds type types thing things something stuff lot lots much many more most
""".split())
_TOKEN = re.compile(r"[a-z0-9]+")


# --------------------------------------------------------------------------- extractor output

@dataclass(frozen=True)
class ExtractedAttribute:
    """One attribute an extractor found, with the turns it rests on."""

    attribute: str
    turn_ids: tuple[str, ...]
    confidence: float | None

    def to_json(self) -> dict[str, Any]:
        """The attribute as a JSON-safe dict (the stored label's element)."""
        return {"attribute": self.attribute, "confidence": self.confidence, "turn_ids": list(self.turn_ids)}


def attributes_label(attributes: Sequence[ExtractedAttribute]) -> str:
    """Canonical JSON of an attribute list: the stored ``label`` of an extractor's chunk verdict."""
    return json.dumps([a.to_json() for a in attributes], ensure_ascii=False, sort_keys=True)


def attributes_from_label(label: str) -> list[ExtractedAttribute]:
    """Inverse of :func:`attributes_label` (labels written by this module only)."""
    return [ExtractedAttribute(a["attribute"], tuple(a["turn_ids"]), a["confidence"]) for a in json.loads(label)]


def merge_attributes(chunks: Sequence[Sequence[ExtractedAttribute]]) -> list[ExtractedAttribute]:
    """Merge the attribute lists of a user's chunks.

    Attributes equal after :func:`normalise_attribute` are one attribute: turn ids are
    united (in first-seen order), the highest confidence is kept, the first wording wins.
    """
    merged: dict[str, tuple[str, list[str], float | None]] = {}
    for chunk in chunks:
        for a in chunk:
            key = normalise_attribute(a.attribute)
            if key not in merged:
                merged[key] = (a.attribute, list(a.turn_ids), a.confidence)
                continue
            text, ids, conf = merged[key]
            ids += [t for t in a.turn_ids if t not in ids]
            if a.confidence is not None and (conf is None or a.confidence > conf):
                conf = a.confidence
            merged[key] = (text, ids, conf)
    return [ExtractedAttribute(text, tuple(ids), conf) for text, ids, conf in merged.values()]


def extracted_items(chunks: Sequence[Mapping[str, Any]], labels: Sequence[Mapping[str, Any]]) -> list[Item]:
    """Turn stored extractor labels into extracted-attribute items (pure).

    Args:
        chunks: Chunk items as dicts with ``item_id``, ``dataset``, ``user_id`` and ``payload``
            (``unit``, ``chunk``, ``max_chars``).
        labels: Extractor labels with ``item_id``, ``rater``, ``label`` (None = failed).

    Returns:
        One item per merged attribute per (rater, unit) whose chunks, for the chunking the
        rater used, all parsed. ``payload`` holds kind, unit, extractor, turn_ids, confidence.
    """
    chunk_by_id = {c["item_id"]: c for c in chunks}
    per: dict[tuple[str, str, str, int], dict[int, str | None]] = {}
    owner: dict[tuple[str, str, str, int], str] = {}
    for lab in labels:
        c = chunk_by_id.get(lab["item_id"])
        if c is None:
            continue
        p = c["payload"]
        key = (str(lab["rater"]), str(c["dataset"]), str(p["unit"]), int(p["max_chars"]))
        per.setdefault(key, {})[int(p["chunk"])] = lab["label"]
        owner[key] = str(c["user_id"])
    n_chunks: dict[tuple[str, str, int], int] = {}
    for c in chunks:
        p = c["payload"]
        k = (str(c["dataset"]), str(p["unit"]), int(p["max_chars"]))
        n_chunks[k] = n_chunks.get(k, 0) + 1
    out: list[Item] = []
    for (rater, dataset, unit, max_chars), got in sorted(per.items()):
        if len(got) != n_chunks.get((dataset, unit, max_chars)) or any(v is None for v in got.values()):
            continue  # a partly failed history: its failures are on the chunk labels
        merged = merge_attributes([attributes_from_label(str(got[i])) for i in sorted(got)])
        for pos, a in enumerate(merged):
            iid = item_id(dataset, STAGE, "extracted", rater, unit, normalise_attribute(a.attribute))
            out.append(Item(item_id=iid, dataset=dataset, stage=STAGE, user_id=owner[(rater, dataset, unit, max_chars)],
                            attribute=a.attribute, position=pos,
                            payload={"kind": "extracted", "unit": unit, "extractor": rater,
                                     "turn_ids": list(a.turn_ids), "confidence": a.confidence}))
    return out


# --------------------------------------------------------------------------- offline matcher

def normalise_attribute(text: str) -> str:
    """Case-, space- and trailing-punctuation-insensitive form of an attribute (what counts as 'the same')."""
    return re.sub(r"\s+", " ", text).strip().rstrip(".!").strip().lower()


def stem(word: str) -> str:
    """Light suffix stemming so that 'comedies', 'comedy'; 'movies', 'movie'; 'baked', 'bake' meet."""
    w = word
    if len(w) > 4 and w.endswith(("sses", "shes", "ches", "xes")):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ed"):
        w = w[:-2]
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    if len(w) > 3 and w.endswith("y"):
        w = w[:-1] + "i"
    return w


def content_tokens(text: str) -> frozenset[str]:
    """The stemmed content words of ``text`` (stop words and apostrophes dropped)."""
    words = _TOKEN.findall(text.lower().replace("'", ""))
    return frozenset(stem(w) for w in words if w not in _STOP)


def containment(attribute: str, gold: str) -> float:
    """Share of the gold value's content tokens present in the attribute (0 if the gold has none)."""
    g = content_tokens(gold)
    if not g:
        return 0.0
    return len(g & content_tokens(attribute)) / len(g)


def score_matrix(attributes: Sequence[str], golds: Sequence[str]) -> FloatArray:
    """Containment of every gold value in every attribute: shape (attributes, golds)."""
    a_tokens = [content_tokens(a) for a in attributes]
    g_tokens = [content_tokens(g) for g in golds]
    out = np.zeros((len(attributes), len(golds)))
    for j, g in enumerate(g_tokens):
        if g:
            for i, a in enumerate(a_tokens):
                out[i, j] = len(g & a) / len(g)
    return out


@dataclass(frozen=True)
class Calibration:
    """A threshold chosen to separate positive from negative scores."""

    threshold: float
    tpr: float
    fpr: float
    n_pos: int
    n_neg: int

    @property
    def youden_j(self) -> float:
        """TPR - FPR at the threshold."""
        return self.tpr - self.fpr


def calibrate_threshold(positives: Sequence[float], negatives: Sequence[float]) -> Calibration:
    """The threshold ``t`` (rule: score >= t) with the highest TPR - FPR; ties go to the higher ``t``.

    Candidates are the observed scores above 0 (a threshold of 0 would match everything).

    Raises:
        ValueError: Either list is empty.
    """
    pos = np.asarray(positives, dtype=float)
    neg = np.asarray(negatives, dtype=float)
    if pos.size == 0 or neg.size == 0:
        raise ValueError("calibration needs positive and negative scores")
    candidates = np.unique(np.concatenate([pos, neg]))
    candidates = candidates[candidates > 0]
    best = Calibration(1.0, float((pos >= 1.0).mean()), float((neg >= 1.0).mean()), pos.size, neg.size)
    for t in candidates:
        cal = Calibration(float(t), float((pos >= t).mean()), float((neg >= t).mean()), pos.size, neg.size)
        if cal.youden_j > best.youden_j + 1e-12 or (abs(cal.youden_j - best.youden_j) <= 1e-12 and t > best.threshold):
            best = cal
    return best


def laps_calibration_scores(sessions: Sequence[tuple[str, str, Sequence[str], Sequence[str]]],
                            seed: int = DEFAULT_SEED) -> tuple[list[float], list[float]]:
    """Positive and negative matcher scores for threshold calibration on LAPS-like data.

    Args:
        sessions: ``(topic, worker, user turn texts, gold values)`` per session.
        seed: Seeds the choice of the negative session (another worker, same topic).

    Returns:
        ``(positives, negatives)``: per gold value, the best containment among its own
        session's user turns, and among the user turns of one other worker's session.
    """
    rng = np.random.default_rng(seed)
    by_topic: dict[str, list[int]] = {}
    for i, (topic, _, _, _) in enumerate(sessions):
        by_topic.setdefault(topic, []).append(i)
    pos: list[float] = []
    neg: list[float] = []
    for topic, worker, turns, golds in sessions:
        if not golds or not turns:
            continue
        others = [j for j in by_topic[topic] if sessions[j][1] != worker and sessions[j][2]]
        if not others:
            continue
        other_turns = sessions[others[int(rng.integers(len(others)))]][2]
        own = score_matrix(list(turns), list(golds)).max(axis=0)
        alien = score_matrix(list(other_turns), list(golds)).max(axis=0)
        pos += own.tolist()
        neg += alien.tolist()
    return pos, neg


# --------------------------------------------------------------------------- matching and P/R/F1

def match_unit(attributes: Sequence[str], golds: Sequence[str], threshold: float = OFFLINE_THRESHOLD,
               llm: npt.ArrayLike | None = None) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64],
                                                          npt.NDArray[np.bool_]]:
    """Match one unit's extracted attributes to its gold preferences.

    Args:
        attributes: Extracted attribute texts.
        golds: Gold values.
        threshold: Offline rule: containment >= threshold is a match.
        llm: Instead of the offline rule, a boolean (attributes x golds) matrix of LLM
            matcher verdicts (True = same).

    Returns:
        ``(attribute_matched, nearest_gold, gold_matched)``: whether each attribute matches
        some gold; the index of each attribute's best-scoring gold (-1 when there is no gold),
        which assigns it a category; whether each gold is matched by some attribute.
    """
    scores = score_matrix(attributes, golds)
    if llm is not None:
        matched = np.asarray(llm, dtype=bool).reshape(len(attributes), len(golds))
    else:
        matched = scores >= threshold
    if len(golds) == 0:
        return (np.zeros(len(attributes), dtype=bool), np.full(len(attributes), -1, dtype=np.int64),
                np.zeros(0, dtype=bool))
    # Nearest gold: a matched gold first, then the highest score (stable: the first on ties).
    nearest: npt.NDArray[np.int64] = np.argmax(np.where(matched, 2.0, 0.0) + scores, axis=1).astype(np.int64)
    # numpy's stubs type ndarray.any(axis=int) as "np.bool | NDArray[np.bool]"; with an axis it is an array.
    return (cast(npt.NDArray[np.bool_], matched.any(axis=1)), nearest,
            cast(npt.NDArray[np.bool_], matched.any(axis=0)))


@dataclass(frozen=True)
class PRF:
    """Precision, recall and F1 of extraction against gold, with user-clustered CIs."""

    precision: Estimate
    recall: Estimate
    f1: Estimate
    n_attributes: int
    n_gold: int
    n_users: int


def prf(tp_attr: npt.ArrayLike, n_attr: npt.ArrayLike, tp_gold: npt.ArrayLike, n_gold: npt.ArrayLike,
        clusters: npt.ArrayLike, *, level: float = 0.95) -> PRF:
    """Micro precision/recall/F1 from per-unit counts, with user-clustered CIs (the one CI rule).

    Precision = matched attributes / attributes; recall = matched gold / gold;
    F1 = 2PR / (P + R).

    Args:
        tp_attr: Per unit, attributes that match some gold.
        n_attr: Per unit, attributes.
        tp_gold: Per unit, gold preferences matched by some attribute.
        n_gold: Per unit, gold preferences.
        clusters: Per unit, the user it belongs to.
        level: Confidence level.
    """
    counts = np.column_stack([np.asarray(x, dtype=float) for x in (tp_attr, n_attr, tp_gold, n_gold)])
    per, ids = per_cluster_sums(counts, clusters)
    total = per.sum(axis=0)
    est = [cluster_estimate(fig, per, level=level, bounds=(0.0, 1.0)) for fig in (_precision, _recall, _f1)]
    return PRF(est[0], est[1], est[2], int(total[1]), int(total[3]), len(ids))


def _precision(t: FloatArray) -> FloatArray:
    return safe_div(t[..., 0], t[..., 1])


def _recall(t: FloatArray) -> FloatArray:
    return safe_div(t[..., 2], t[..., 3])


def _f1(t: FloatArray) -> FloatArray:
    p, r = _precision(t), _recall(t)
    # 0 when nothing matched (P = R = 0); NaN (from safe_div) when either is undefined.
    return np.where(p + r == 0, 0.0, safe_div(2 * p * r, p + r))


def ratio(numerators: npt.ArrayLike, denominators: npt.ArrayLike, clusters: npt.ArrayLike, *,
          level: float = 0.95,
          bounds: tuple[float, float] | None = None) -> Estimate:
    """sum(numerators) / sum(denominators) with its user-clustered CI (NaN when the denominator is 0).

    ``bounds``: the ratio's range, which the CI is cut to (``(0, 1)`` for a share).
    """
    num = np.asarray(numerators, dtype=float)
    den = np.asarray(denominators, dtype=float)
    per, _ = per_cluster_sums(np.column_stack([num, den]) if num.size else np.zeros((0, 2)), clusters)
    return cluster_estimate(_precision, per, level=level, bounds=bounds)


# --------------------------------------------------------------------------- verdicts

def verdict_rates(labels: Sequence[str], clusters: npt.ArrayLike) -> dict[str, Estimate]:
    """Share of each verdict (ok / bad / unsure) among parsed verdicts, with user-clustered CIs.

    ``ok`` is the acceptance precision of the extractor; ``bad`` its over-generalisation
    rate (unsupported, or broader than the evidence).
    """
    return verdict_rates_from_counts(labels, clusters, np.ones(len(labels)))


def verdict_rates_from_counts(labels: npt.ArrayLike, clusters: npt.ArrayLike,
                              counts: npt.ArrayLike) -> dict[str, Estimate]:
    """:func:`verdict_rates` from count rows: ``counts[i]`` verdicts ``labels[i]`` of user ``clusters[i]``.

    Per-user sums of integer counts are exact, so the figures are those of one row per verdict. Labels outside
    the verdicts count in the denominator only.
    """
    lab = np.asarray(labels, dtype=object)
    n = np.asarray(counts, dtype=float)
    # One pass of per-user sums for the three shares (hits of each verdict, then all verdicts): what ratio() sums
    # for each, with the users in the same sorted order.
    columns = [(lab == v) * n for v in VERIFICATION_LABELS] + [n]
    per, _ = per_cluster_sums(np.column_stack(columns) if n.size else np.zeros((0, len(columns))), clusters)
    return {v: cluster_estimate(_precision, per[:, [i, len(VERIFICATION_LABELS)]], bounds=(0.0, 1.0))
            for i, v in enumerate(VERIFICATION_LABELS)}


def judge_vs_reference(judge: Mapping[str, str], reference: Mapping[str, str], cluster_of: Mapping[str, str], *,
                       extra: tuple[str, ...] = ()) -> dict[str, Estimate]:
    """Cohen's kappa and accuracy of a judge's verdicts against reference verdicts, items joined by id.

    Args:
        judge: Item id -> verdict of the judge (failures removed).
        reference: Item id -> reference verdict (e.g. the human majority).
        cluster_of: Item id -> user.
        extra: More registered metrics on the same tables (e.g. the robust panel).

    Returns:
        ``{'kappa', 'accuracy'}`` (and ``extra``) estimates (NaN with no shared item); the shared count is
        ``len(set(judge) & set(reference))``.
    """
    shared = sorted(set(judge) & set(reference))
    metrics = ("kappa", "accuracy", *extra)
    if not shared:
        return dict.fromkeys(metrics, Estimate(_NAN, (_NAN, _NAN)))
    return agreement([reference[i] for i in shared], [judge[i] for i in shared], [cluster_of[i] for i in shared],
                     metrics=metrics)


@dataclass(frozen=True)
class RaterAgreement:
    """Agreement among several raters giving nominal verdicts on the same items."""

    alpha: Estimate
    fleiss: Estimate
    fleiss_items: int
    fleiss_raters_per_item: int
    fleiss_users: int
    n_items: int
    n_users: int
    pairwise: PairwiseResult | None


def rater_agreement(labels: pd.DataFrame, *, categories: Sequence[str] = VERIFICATION_LABELS,
                    min_overlap: int = 10) -> RaterAgreement:
    """Krippendorff's alpha (nominal), Fleiss' kappa and pairwise Cohen's kappa among raters.

    Args:
        labels: Long frame ``item_id, rater, label, cluster`` (one parsed verdict per rater and item).
        categories: The nominal categories (fixes the codes; all count for Fleiss' kappa).
        min_overlap: Pairs sharing fewer items are left out of the pairwise table.

    Returns:
        Alpha over every item rated at least twice; Fleiss' kappa over the items rated by
        the most common number (>= 2) of raters, since it needs equal raters per item.
    """
    code = {c: i for i, c in enumerate(categories)}
    unknown = set(labels["label"]) - set(code)
    if unknown:
        raise ValueError(f"labels outside the categories: {sorted(unknown)}")
    wide = labels.pivot(index="item_id", columns="rater", values="label")
    cluster = labels.drop_duplicates("item_id").set_index("item_id")["cluster"].reindex(wide.index)
    n_rated = wide.notna().sum(axis=1)
    keep_alpha = (n_rated >= 2).to_numpy()
    coded = wide.apply(lambda col: col.map(code)).to_numpy(dtype=float)
    nan = Estimate(_NAN, (_NAN, _NAN))
    alpha = (krippendorff_alpha_ci(coded[keep_alpha].T, cluster.to_numpy()[keep_alpha], "nominal")
             if keep_alpha.any() else nan)
    multi = n_rated[n_rated >= 2]
    modal = int(multi.mode().max()) if not multi.empty else 0
    fleiss, n_fleiss, fleiss_users = nan, 0, 0
    if modal >= 2:
        keep = (n_rated == modal).to_numpy()
        counts = np.column_stack([(coded[keep] == i).sum(axis=1) for i in range(len(categories))])
        fleiss = fleiss_kappa_ci(counts, cluster.to_numpy()[keep])
        n_fleiss = int(keep.sum())
        fleiss_users = int(cluster[keep].nunique())
    raters = sorted(labels["rater"].unique())
    pairwise = (pairwise_agreement(labels[["item_id", "rater", "label", "cluster"]], dict.fromkeys(raters, "human"),
                                   min_overlap=min_overlap)
                if len(raters) >= 2 else None)
    return RaterAgreement(alpha, fleiss, n_fleiss, modal, fleiss_users, int(keep_alpha.sum()),
                          int(cluster[keep_alpha].nunique()) if keep_alpha.any() else 0, pairwise)
