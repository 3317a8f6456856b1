"""The Re-Centering adapter's parts every reader shares: dataset names, the import result, the record builder."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from personagap.analysis.comparable import (
    ANCHORED_MAJORITY,
    BLIND,
    YES_NO,
)
from personagap.human_data._jsonl import (
    DataError,
    Release,
    Row,
    import_run,
    read_bytes,
    read_jsonl,
)
from personagap.linking import ATTRIBUTE_ID, attribute_id
from personagap.records import (
    PAIRWISE_LABELS,
    Item,
    ItemKind,
    Prompt,
    RaterKind,
    ScaleKind,
    Stage,
    User,
    item_ids,
)
from personagap.store import ImportBatch
from personagap.vocabulary import VERIFICATION_LABELS

ADAPTER = "recenter"
STAGE2 = "recenter-stage2"
PILOT = "recenter-pilot"
STAGE3 = "recenter-stage3-conditions"
"""Stage-3 answers written from the pipeline's selection or from the human-selected attributes, each paired with the
same model's generic answer (``stage3_responses/``)."""
PIPELINE_RATER = "recenter-pipeline"
"""The release pipeline's own stage-2 selection (task5 ``items``), stored as labels of kind ``system``."""
HUMAN_MAJORITY = "human_majority"
#: Pilot task-2 ratings; 'none' means the annotator left the default and gives no rating.
TASK2_RATINGS = ("none", "unnecessary", "forbidden", "optional", "necessary_implicit", "necessary_explicit")
UNPARSEABLE_LLM = "unparseable: the file records no relevant value"
JOINED = ("human_majority", "llm")  # the rater kinds whose join coverage an import reports
CONVERTED_NOTE = "[converted from task2]"
"""A pilot task-3 row's note (stripped) when the row copies the annotator's task-2 labels (given after seeing
an LLM's label): stored under :data:`~personagap.analysis.comparable.CONVERTED_SHOWN_LLM`, never as blind."""
_RELEVANCE_QUESTION = ("Is this attribute of the user relevant to answering this prompt: would knowing it change "
                       "a good answer? (yes / no)")
RECORDS: dict[tuple[Stage, str], tuple[ItemKind, ScaleKind, tuple[str, ...], str]] = {
    ("relevance", STAGE2): ("relevance", "nominal", YES_NO, _RELEVANCE_QUESTION + " Human label: the majority of "
                            "3 crowd annotators."),
    ("response", STAGE2): ("pairwise", "pairwise", PAIRWISE_LABELS,
                           "Which answer would this user prefer: the generic one, or the one written with the "
                           "attributes humans judged relevant? (no human verdict in the release)"),
    ("response", STAGE3): ("pairwise", "pairwise", PAIRWISE_LABELS,
                           "Which answer would this user prefer: the generic one, or the one the same model wrote from "
                           "the attributes the pipeline selected (input_condition pipeline) or humans selected "
                           "(oracle)? (no human verdict in the release)"),
    ("relevance", PILOT): ("relevance", "nominal", YES_NO, _RELEVANCE_QUESTION + " (The pilot's 3-way task-2 "
                           "rating answers another question and is kept apart, under shown-llm-rating.)"),
    ("extraction", PILOT): ("verification", "nominal", VERIFICATION_LABELS,
                            "Is this attribute, extracted from the user's conversations, supported by them? "
                            "(ok / bad / unsure)"),
}
"""The record of every dataset the release holds (:func:`personagap.datasets.record_meta`): item kind, scale,
categories and the question the study's raters answered."""


@dataclass
class Coverage:
    """How an LLM file's pairs join onto the human labels of the same dataset."""

    dataset: str
    rater: str
    llm_pairs: int
    human_pairs: int
    matched: int

    @property
    def llm_only(self) -> int:
        """LLM-labelled pairs with no human label."""
        return self.llm_pairs - self.matched

    @property
    def human_only(self) -> int:
        """Human-labelled pairs the LLM did not label."""
        return self.human_pairs - self.matched


@dataclass
class RecenterImport:
    """What an import read: the batch to write, per-file counts and join coverage."""

    batch: ImportBatch = field(default_factory=ImportBatch)
    files: dict[str, int] = field(default_factory=dict)
    coverage: list[Coverage] = field(default_factory=list)
    unanswered: dict[str, int] = field(default_factory=dict)
    """Per file, human judgments left unanswered (null) and therefore not imported."""
    undecided: dict[str, int] = field(default_factory=dict)
    """Per file, human majorities that are ties (e.g. 2 yes, 2 no): no majority label is stored."""
    converted: dict[str, int] = field(default_factory=dict)
    """Per file, pilot task-3 judgments copied from task 2 (stored as anchored, not blind)."""
    anchored_majorities: dict[str, int] = field(default_factory=dict)
    """Per file, human majorities whose votes include an anchored label (stored as anchored-majority)."""
    unpaired: dict[str, int] = field(default_factory=dict)
    """Per (model, mode) of ``stage3_responses/``, personalised answers without the same model's generic answer to
    the prompt: no pair is made of them."""


class Builder:
    """Collects validated records and rejects duplicate keys with their location."""

    def __init__(self, result: RecenterImport, release: Release) -> None:
        self.result = result
        self.release = release
        self.batch = result.batch
        self._seen: dict[tuple[str, str, str], tuple[Path | str, int | str | None]] = {}
        self._item_ids: dict[tuple[str, str, int], dict[str, str]] = {}
        self._seen_rows: dict[tuple[str, str, str, int], tuple[Path | str, int | str | None]] = {}
        self._attribute_ids: dict[tuple[str, str], str] = {}
        self.run = ""
        """The run of the file being read."""
        self.owning = False
        """Whether that file defines which relevance items exist (task5, the pilot classifier file) and so owns
        them (ImportBatch.own); label files need not: their labels remove their items when they go."""
        self.labelled: dict[tuple[str, str, str], set[str]] = {}
        """(rater kind, dataset, rater) -> relevance items it labelled, for human majority and LLMs: the join
        coverage, kept as labels arrive (a pass over 10^6 labels afterwards costs seconds)."""

    def read(self, path: Path, rater: str | None, *, owning: bool = False) -> tuple[str, Iterator[Row]]:
        """Read ``path`` once: its run (id from its place in the release; see ``_jsonl.Release``) and its rows."""
        data = read_bytes(path)
        run = import_run(path, data, rater, release=self.release)
        self.batch.runs.append(run)
        self.run, self.owning = run.run_id, owning
        return run.run_id, read_jsonl(path, data)

    def relevance_item(self, dataset: str, user: str, prompt_index: int, attribute: str) -> str:
        return self.relevance_items(dataset, user, prompt_index, [attribute])[0]

    def relevance_items(self, dataset: str, user: str, prompt_index: int, attributes: list[str]) -> list[str]:
        """Ids of the (user, prompt, attribute) items, creating the items on first sight."""
        # Every rater of a pair reaches here: ids are hashed once per pair and looked up per prompt.
        known = self._item_ids.setdefault((dataset, user, prompt_index), {})
        new = [a for a in attributes if a not in known]
        if new:  # the first rater of a prompt; every later one needs no hashing at all
            for attribute, iid in zip(new, item_ids(dataset, "relevance", (user, prompt_index), new), strict=True):
                known[attribute] = iid
                self._new_relevance_item(iid, dataset, user, prompt_index, attribute)
        ids = [known[a] for a in attributes]
        if self.owning:
            self.batch.own(self.run, ids)
        return ids

    def _new_relevance_item(self, iid: str, dataset: str, user: str, prompt_index: int, attribute: str) -> None:
        if iid not in self.batch.items:
            # The attribute's id links the pair to the same attribute at stage 1 and to the answers that used it.
            key = (user, attribute)
            aid = self._attribute_ids.get(key)
            if aid is None:  # hashed once per user attribute, not once per prompt
                aid = self._attribute_ids[key] = attribute_id(user, attribute)
            self.batch.items[iid] = Item(item_id=iid, dataset=dataset, stage="relevance", user_id=user,
                                         prompt_index=prompt_index, attribute=attribute, payload={ATTRIBUTE_ID: aid})

    def add_payload(self, iid: str, payload: dict[str, Any]) -> None:
        """Add ``payload``'s keys to item ``iid``'s payload (the linking keys it already holds stay)."""
        item = self.batch.items[iid]
        self.batch.items[iid] = item.model_copy(update={"payload": {**item.payload, **payload}})

    def item(self, iid: str, dataset: str, stage: Stage, user: str, **fields: Any) -> None:
        self.batch.own(self.run, (iid,))
        if iid not in self.batch.items:
            self.batch.items[iid] = Item(item_id=iid, dataset=dataset, stage=stage, user_id=user, **fields)

    def label(self, row: Row, fld: str, iid: str, rater: str, kind: RaterKind, value: str | None, run_id: str,
              condition: str = "", **extra: str | None) -> None:
        key = (iid, rater, condition)
        if key in self._seen:
            path, line = self._seen[key]
            raise row.error(fld, f"duplicate label by {rater!r} for this item (first seen at {path}:{line})")
        self._seen[key] = (row.path, row.line)
        self._append(iid, rater, kind, condition, value, run_id, extra)
        item = self.batch.items.get(iid)
        if condition in (BLIND, ANCHORED_MAJORITY) and kind in JOINED and item is not None \
                and item.stage == "relevance":
            self.labelled.setdefault((kind, item.dataset, rater), set()).add(iid)

    def labels_for_row(self, row: Row, field: str, prompt_key: tuple[str, str, int], texts: list[str],
                       iids: list[str], rater: str, kind: RaterKind, run_id: str, *, labels: list[str | None],
                       raws: list[str | None], reasons: list[str | None], errors: list[str | None]) -> None:
        """Add the labels of one row's list field (``field[i]`` labels ``iids[i]``), rejecting duplicates.

        Duplicates are checked per (rater, prompt) rather than per label: a rater labels a prompt's
        attributes in one row, so a repeat is either a repeated attribute in the row or a repeated row.
        """
        if len(set(texts)) != len(texts):
            seen_at: dict[str, int] = {}
            for i, text in enumerate(texts):
                if text in seen_at:
                    located = Row(row.data, row.path, row.line, f"{row.prefix}{field}[{i}].")
                    raise located.error("attribute", f"duplicate label by {rater!r} for this item (first seen at "
                                                      f"{row.path}:{row.line}, {field}[{seen_at[text]}])")
                seen_at[text] = i
        key = (rater, *prompt_key)
        first = self._seen_rows.get(key)
        if first is not None:
            located = Row(row.data, row.path, row.line, f"{row.prefix}{field}[0].")
            raise located.error("attribute", f"duplicate label by {rater!r} for this item "
                                              f"(first seen at {first[0]}:{first[1]})")
        self._seen_rows[key] = (row.path, row.line)
        self.batch.label_columns.extend(iids, rater, kind, "", labels, raws, reasons, errors, run_id)
        if kind in JOINED:  # iids are relevance items (from relevance_items) of dataset prompt_key[0]
            self.labelled.setdefault((kind, prompt_key[0], rater), set()).update(iids)

    def _append(self, iid: str, rater: str, kind: RaterKind, condition: str, value: str | None, run_id: str,
                extra: dict[str, str | None]) -> None:
        # Fields were type-checked by Row as they were read, so the bulk column store is safe here.
        self.batch.label_columns.append(iid, rater, kind, condition, value, extra.get("raw"), extra.get("reason"),
                                        extra.get("error"), run_id)

    def prompt(self, dataset: str, user: str, prompt_index: int, text: str | None) -> None:
        key = (dataset, user, prompt_index)
        known = self.batch.prompts.get(key)
        if known is None or (known.prompt_text is None and text is not None):
            self.batch.prompts[key] = Prompt(dataset=dataset, user_id=user, prompt_index=prompt_index,
                                             prompt_text=text)
        self.batch.users.setdefault((dataset, user), User(dataset=dataset, user_id=user))


# --------------------------------------------------------------------------- helpers

def field_columns(items: object, fields: tuple[tuple[str, type, bool], ...]) -> list[list[Any]] | None:
    """The named fields of a list of objects, column by column, if every value has its type; else None.

    ``fields`` holds (name, type, required). Required text must be non-blank. Checks run on whole
    columns at C speed (``set(map(type, ...))``): this is the hot path of 10^6-label imports. On None the
    caller re-reads the list through :class:`Row`, whose checks name file, line and field.
    """
    if type(items) is not list or not items or set(map(type, items)) != {dict}:
        return None
    out = []
    for name, kind, required in fields:
        values = [it.get(name) for it in items]
        types = set(map(type, values))
        if required:
            if types != {kind} or (kind is str and not all(map(str.strip, values))):
                return None
        elif not types <= {kind, type(None)}:
            return None
        out.append(values)
    return out


def require(path: Path) -> Path:
    if not path.exists() and not path.is_symlink():
        raise DataError(path, None, None, "required file is missing")
    return path


def jsonl_files(folder: Path) -> list[Path]:
    # Every *.jsonl entry, directories and broken links included: reading one names what is wrong with it.
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
