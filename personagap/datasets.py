"""The dataset record: the one place that says what a stored dataset is (stage, item kind, scale, question).

Every report, ``diagnose``, the dashboard, ``plan``, ``optimize`` and the Annotate page read a dataset's
scale through :func:`dataset_records`, so a figure follows from the scale the dataset carries, never from
which release it came from.

Where the record comes from, in order:

* the record an importer stored (``dataset:<stage>:<dataset>`` in ``meta``; :func:`record_meta`): item kind,
  scale kind, declared categories or levels, question;
* for stores written before records existed, the generic importer's ``labels:<dataset>:<stage>`` entry
  (scale kind and declared categories) and ``origin:<dataset>``;
* otherwise it is inferred: the item kind from the stage and the items' payload, the scale kind nominal
  (pairwise for A/B/tie items).

The categories of a nominal scale are :func:`~personagap.analysis.comparable.categories_for` of the dataset's
labels and its declared categories (the one category rule); an ordinal scale's levels are its declared levels,
else every level a human or judge used on human-labelled items, in numeric order; a pairwise scale is A/B/tie.
"""

from __future__ import annotations

import json
from typing import Any, cast, get_args

import duckdb
import pandas as pd

from personagap.analysis.comparable import HUMAN_KINDS, JUDGE_KINDS, categories_for
from personagap.records import (
    DEFAULT_QUESTIONS,
    PAIRWISE_LABELS,
    VERIFICATION_LABELS,
    DatasetRecord,
    DatasetScale,
    ItemKind,
    Stage,
)
from personagap.scales import PAIRWISE_SCALE, as_scale
from personagap.store.dataset_reads import ITEM_KINDS_SQL as _ITEM_KINDS_SQL  # noqa: F401 - read by tests
from personagap.store.dataset_reads import PAIRWISE_PAYLOAD_KINDS as PAIRWISE_PAYLOAD_KINDS
from personagap.store.dataset_reads import SCALE_LABELS_SQL as SCALE_LABELS_SQL
from personagap.store.dataset_reads import item_kinds, record_entries, unsettled_scale_labels

RECORD_PREFIX = "dataset:"
"""Meta keys of stored dataset records: ``dataset:<stage>:<dataset>``."""


def record_key(stage: str, dataset: str) -> str:
    """The meta key a dataset's record is stored under."""
    return f"{RECORD_PREFIX}{stage}:{dataset}"


def record_meta(record: DatasetRecord) -> dict[str, str]:
    """The meta entries an importer writes (in its transaction) to store a dataset's record.

    Args:
        record: The record as the import fixed it (categories: the declared ones; may be empty for a
            nominal scale whose categories are whatever the raters used).
    """
    value = {"item_kind": record.item_kind, "scale": record.scale.kind,
             "categories": list(record.scale.categories), "question": record.question}
    return {record_key(record.stage, record.dataset): json.dumps(value, sort_keys=True),
            f"origin:{record.dataset}": record.origin}


def default_question(stage: str, item_kind: str) -> str:
    """The question raters answer when the import gave none."""
    return DEFAULT_QUESTIONS.get((stage, item_kind), "")


def numeric_order(values: list[str]) -> list[str]:
    """Ordinal levels low to high (numbers compared as numbers; a level written twice, e.g. 3 and 3.0, once)."""
    seen: dict[float, str] = {}
    for v in values:
        seen.setdefault(float(v), v)
    return [seen[k] for k in sorted(seen)]


def build_records(items: pd.DataFrame, scale_labels: pd.DataFrame, meta: dict[str, str]) -> dict[tuple[str, str],
                                                                                                  DatasetRecord]:
    """The records of every dataset, from the three things the store holds (pure; :func:`dataset_records` reads).

    Args:
        items: ``stage``, ``dataset``, ``item_kind``, ``n`` (item counts per kind).
        scale_labels: Distinct ``stage``, ``dataset``, ``rater_kind``, ``condition``, ``label`` rows
            (:data:`SCALE_LABELS_SQL`).
        meta: The store's meta entries.

    Returns:
        (stage, dataset) -> record, sorted by stage then dataset.
    """
    stored, kinds = _stored(meta), _item_kinds(items)
    out: dict[tuple[str, str], DatasetRecord] = {}
    for pair in sorted(set(kinds) | set(stored)):
        stage, dataset = pair
        if stage not in get_args(Stage):
            continue
        said = stored.get(pair, {})
        item_kind = _item_kind(pair, said, kinds)
        rows = scale_labels[(scale_labels["stage"] == stage) & (scale_labels["dataset"] == dataset)]
        scale = _scale(item_kind, said.get("scale") == "ordinal", [str(c) for c in said.get("categories") or []],
                       rows)
        synthetic = meta.get(f"origin:{dataset}") == "synthetic"  # anything else, or nothing said, is real data
        out[pair] = DatasetRecord(stage=cast(Stage, stage), dataset=dataset, item_kind=item_kind, scale=scale,
                                 question=str(said.get("question") or default_question(stage, item_kind)),
                                 origin="synthetic" if synthetic else "real",
                                 declared=bool(said) and not said.get("legacy"))
    return out


def _stored(meta: dict[str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    """(stage, dataset) -> what the store says of it: its stored record, else its legacy labels entry."""
    stored: dict[tuple[str, str], dict[str, Any]] = {}
    for key, value in meta.items():
        if key.startswith(RECORD_PREFIX):
            stage, _, dataset = key[len(RECORD_PREFIX):].partition(":")
            stored[(stage, dataset)] = json.loads(value)
        elif key.startswith("labels:"):
            spec = json.loads(value)
            stage = str(spec.get("stage", ""))
            dataset = key[len("labels:"):].removesuffix(f":{stage}")
            # No scale said means nominal: the record's scale reads "ordinal" or else nominal (below).
            stored.setdefault((stage, dataset), {"scale": spec.get("scale"),
                                                 "categories": spec.get("categories") or [], "legacy": True})
    return stored


def _item_kinds(items: pd.DataFrame) -> dict[tuple[str, str], str]:
    kinds: dict[tuple[str, str], str] = {}
    for (stage, dataset), rows in items.groupby(["stage", "dataset"]):
        kinds[(str(stage), str(dataset))] = str(rows.sort_values(["n", "item_kind"], ascending=[False, True])
                                                 .iloc[0]["item_kind"])
    return kinds


def _item_kind(pair: tuple[str, str], said: dict[str, Any], kinds: dict[tuple[str, str], str]) -> ItemKind:
    return cast(ItemKind, said.get("item_kind") or kinds.get(pair) or _stage_item_kind(pair[0]))


def _stage_item_kind(stage: str) -> str:
    return {"extraction": "verification", "relevance": "relevance"}.get(stage, "single")


def _settled_labels(item_kind: str, said: dict[str, Any]) -> frozenset[str] | None:
    """Labels whose presence cannot change the scale :func:`_scale` gives this dataset (None: no label can).

    :func:`_scale` unions the labels found with a set it is given (A/B/tie for pairs, the declared categories of a
    nominal scale), or reads no label (a declared ordinal scale): a label inside that set adds nothing, so the
    reader need not look for it. An empty set: every label found counts (nothing declared).
    """
    declared = frozenset(str(c) for c in said.get("categories") or [])
    if item_kind == "pairwise":
        return frozenset(PAIRWISE_LABELS)
    if said.get("scale") == "ordinal":
        return None if declared else frozenset()
    return declared


def _scale(item_kind: str, ordinal: bool, declared: list[str], rows: pd.DataFrame) -> DatasetScale:
    if item_kind == "pairwise":
        found = categories_for(rows, PAIRWISE_LABELS)
        if set(found) <= set(PAIRWISE_LABELS):
            return PAIRWISE_SCALE
        # A dataset that also holds other items (single yes/no answers beside A/B pairs): one nominal scale over
        # every label, so no label of it falls off its scale.
        return DatasetScale(kind="nominal", categories=tuple(found))
    if ordinal:
        judged = rows[rows["rater_kind"].isin(HUMAN_KINDS + JUDGE_KINDS)]
        found = [str(v) for v in judged["label"].dropna().unique() if _is_number(str(v))]
        return DatasetScale(kind="ordinal", categories=tuple(numeric_order(declared or found)))
    if not declared and rows["label"].dropna().empty and item_kind == "verification":
        # Nothing labelled yet (an extractor's output awaiting verdicts): the verification question's own scale,
        # so Annotate offers ok / bad / unsure rather than the yes/no fallback.
        declared = list(VERIFICATION_LABELS)
    return as_scale(categories_for(rows, declared or None))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def dataset_records(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], DatasetRecord]:
    """Every stored dataset's record, (stage, dataset) -> :class:`~personagap.records.DatasetRecord`.

    Labels are read only where they can change a scale (:func:`_settled_labels`): a dataset whose record declares
    its categories costs a scan of the labels column for labels outside them, not a join of every label with its
    item (seconds at 10^7 labels). The records are those of :func:`build_records` over all of
    :data:`SCALE_LABELS_SQL`.

    Args:
        con: An open store connection (read-only is fine).
    """
    items = item_kinds(con)
    meta = record_entries(con)
    stored, kinds = _stored(meta), _item_kinds(items)
    groups: dict[frozenset[str], set[tuple[str, str]]] = {}
    for pair in set(kinds) | set(stored):
        settled = _settled_labels(_item_kind(pair, stored.get(pair, {}), kinds), stored.get(pair, {}))
        if settled is not None:
            groups.setdefault(settled, set()).add(pair)
    parts = [pd.DataFrame(columns=["stage", "dataset", "rater_kind", "condition", "label"])]
    for settled, pairs in groups.items():
        rows = unsettled_scale_labels(con, sorted(settled), sorted({d for _, d in pairs}))
        parts.append(rows[[(st, ds) in pairs for st, ds in zip(rows["stage"], rows["dataset"], strict=True)]])
    return build_records(items, pd.concat(parts, ignore_index=True), meta)


def dataset_scales(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], DatasetScale]:
    """(stage, dataset) -> the dataset's scale, from its record (:func:`dataset_records`)."""
    return {key: record.scale for key, record in dataset_records(con).items()}


def dataset_record(con: duckdb.DuckDBPyConnection, stage: str, dataset: str) -> DatasetRecord | None:
    """One dataset's record, or None when the store holds no such dataset."""
    return dataset_records(con).get((stage, dataset))
