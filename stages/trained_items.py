"""The items the trained judges learn from and label, read from a store (relevance, pairs, LAPS verifier pairs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from personagap.analysis.extraction import normalise_attribute
from personagap.stages.extraction_build import load_items as extraction_items
from personagap.stages.response import load_items as response_items
from personagap.stages.response_pairwise import blind_reference
from personagap.store import load_labels, opened
from personagap.store.item_reads import relevance_item_rows

_PAIR_KINDS = ("pairwise", "generic_vs_personalized")


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
        frame = relevance_item_rows(con)
    if datasets:
        frame = frame[frame["dataset"].isin(datasets)].reset_index(drop=True)
    return frame


def pairwise_items(db: str | Path, datasets: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Pairwise and generic-vs-personalised response items with the single human label, where there is one."""
    with opened(db, read_only=True) as con:
        items = response_items(con)
        labels = load_labels(con, stage="response")
    items = items[items["kind"].isin(_PAIR_KINDS)].reset_index(drop=True)
    if datasets:
        items = items[items["dataset"].isin(datasets)].reset_index(drop=True)
    ref = blind_reference(labels) if not labels.empty else pd.Series(dtype=object)
    items["human"] = items["item_id"].map(ref) if not ref.empty else None
    return items


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
    with opened(db, read_only=True) as con:
        items = extraction_items(con, kinds=("conversation", "gold"), datasets=list(datasets))
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


def extracted_attribute_items(db: str | Path, *, datasets: tuple[str, ...] | None = None,
                              splits: tuple[str, ...] | None = None, extractor: str | None = None) -> pd.DataFrame:
    """The extracted attributes the ``verify`` LLM judge would label, with their history's turns.

    Same selection as :func:`personagap.stages.extraction.judge_extraction` for ``verify``: extracted-attribute
    items (optionally of one extractor) whose history is stored, of ``datasets`` and of histories in ``splits``.

    Returns:
        Columns item_id, dataset, unit, user_id, attribute, user_turns, assistant_turns.
    """
    with opened(db, read_only=True) as con:
        items = extraction_items(con, datasets=list(datasets) if datasets else None)
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
