"""Adapter for the "Re-Centering Humans in LLM Personalization" release.

Parses the release exactly as published (layout in ``shared/DATA.md``)::

    ROOT/stage2/task5_items.jsonl          profiles and prompts (pipeline scores: not human labels)
    ROOT/stage2/task6_items.jsonl          human-majority relevance per attribute + generic/personalised answers
    ROOT/stage2/llm_relevance/NAME.jsonl   one LLM's per-attribute YES/NO
    ROOT/pilot/task3_relevance_clf.jsonl   pilot pairs with the human majority
    ROOT/pilot/annotations/annotator_NN_task{1,2,3}.jsonl   per-annotator pilot labels
    ROOT/pilot/llm_relevance/NAME.jsonl    LLM labels on the pilot items

Relevance items are keyed by (user_id, prompt_index, attribute text). Nothing is
written until every file has been read and checked; then one transaction writes it.

Pilot label conditions (the rule of :mod:`personagap.analysis.comparable`):

* task 2 (the annotator saw an LLM's label first): ``shown-llm`` (yes/no) and ``shown-llm-rating``;
* task 3: blind (``''``), except rows whose note is ``[converted from task2]`` (every row of
  annotator_06, 07, 09 and 10): copies of task-2 labels, stored as ``shown-llm-converted``;
* ``task3_relevance_clf.jsonl`` majorities: a 2-2 tie is undecided and gets no label (the file codes
  it "no"); a majority is blind only if the release's blind task-3 labels alone reproduce it (as many
  blind votes as ``n_annotators``, with the same yes count), else ``anchored-majority``. On the
  published release no majority qualifies: only two annotators gave blind task-3 labels.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from personagap.analysis.comparable import (
    ANCHORED_MAJORITY,
    BLIND,
    CONVERTED_SHOWN_LLM,
    SHOWN_LLM,
    SHOWN_LLM_RATING,
    YES_NO,
)
from personagap.analysis.comparable import majority_label as _majority_label
from personagap.human_data._jsonl import (
    DataError,
    Release,
    Row,
    clip,
    cut,
    declare,
    import_run,
    no_rows,
    read_bytes,
    read_jsonl,
    real_path,
    require_exists,
)
from personagap.records import (
    PAIRWISE_LABELS,
    Attribute,
    Item,
    ItemKind,
    Prompt,
    RaterKind,
    ScaleKind,
    Stage,
    User,
    item_id,
    item_ids,
)
from personagap.store import ImportBatch

ADAPTER = "recenter"
STAGE2 = "recenter-stage2"
PILOT = "recenter-pilot"
HUMAN_MAJORITY = "human_majority"
#: Pilot task-2 ratings; 'none' means the annotator left the default and gives no rating.
TASK2_RATINGS = ("none", "unnecessary", "forbidden", "optional", "necessary_implicit", "necessary_explicit")
TASK1_JUDGMENTS = ("ok", "bad", "unsure")
UNPARSEABLE_LLM = "unparseable: the file records no relevant value"
_JOINED = ("human_majority", "llm")  # the rater kinds whose join coverage an import reports
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
    ("relevance", PILOT): ("relevance", "nominal", YES_NO, _RELEVANCE_QUESTION + " (The pilot's 3-way task-2 "
                           "rating answers another question and is kept apart, under shown-llm-rating.)"),
    ("extraction", PILOT): ("verification", "nominal", TASK1_JUDGMENTS,
                            "Is this attribute, extracted from the user's conversations, supported by them? "
                            "(ok / bad / unsure)"),
}
"""The record of every dataset the release holds (:func:`personagap.datasets.record_meta`): item kind, scale,
categories and the question the study's raters answered."""
_ANNOTATION_FILE = re.compile(r"^(?P<annotator>.+)_task(?P<task>[123])\.jsonl$")


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


class _Builder:
    """Collects validated records and rejects duplicate keys with their location."""

    def __init__(self, result: RecenterImport, release: Release) -> None:
        self.result = result
        self.release = release
        self.batch = result.batch
        self._seen: dict[tuple[str, str, str], tuple[Path | str, int | str | None]] = {}
        self._item_ids: dict[tuple[str, str, int], dict[str, str]] = {}
        self._seen_rows: dict[tuple[str, str, str, int], tuple[Path | str, int | str | None]] = {}
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
            self.batch.items[iid] = Item(item_id=iid, dataset=dataset, stage="relevance", user_id=user,
                                         prompt_index=prompt_index, attribute=attribute)

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
        if condition in (BLIND, ANCHORED_MAJORITY) and kind in _JOINED and item is not None \
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
        if kind in _JOINED:  # iids are relevance items (from relevance_items) of dataset prompt_key[0]
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


def load_recenter(root: str | Path) -> RecenterImport:
    """Read and validate a Re-Centering release folder.

    Args:
        root: The folder holding ``stage2/`` and/or ``pilot/``.

    Returns:
        The validated batch (not yet written), file counts and join coverage.

    Raises:
        DataError: Any file deviates from the release format; the message names
            file, line and field.
    """
    root = require_exists(root)
    stage2, pilot = root / "stage2", root / "pilot"
    if not stage2.is_dir() and not pilot.is_dir():
        raise DataError(root, None, None, "not a Re-Centering release: expected a stage2/ or pilot/ folder")
    result = RecenterImport()
    release = Release.of(ADAPTER, root)
    # The release is the unit, wherever it lies: a file deleted from it goes (folders: runs named by path).
    result.batch.releases.append(release.scope)
    result.batch.folders.append(real_path(root))
    builder = _Builder(result, release)
    if stage2.is_dir():
        _load_stage2(stage2, builder)
    if pilot.is_dir():
        _load_pilot(pilot, builder)
    result.coverage = _coverage(builder.labelled)
    present = {(item.stage, item.dataset) for item in result.batch.items.values()}
    for (stage, dataset), (kind, scale, categories, question) in RECORDS.items():
        if (stage, dataset) in present:
            declare(result.batch, stage, dataset, kind, scale, categories, question)
    return result


# --------------------------------------------------------------------------- stage 2

def _load_stage2(folder: Path, b: _Builder) -> None:
    profiles = _load_task5(_require(folder / "task5_items.jsonl"), b)
    task6 = folder / "task6_items.jsonl"
    if task6.exists() or task6.is_symlink():
        _load_task6(task6, b, profiles)
    for path in _jsonl_files(folder / "llm_relevance"):
        _load_llm_file(path, b, STAGE2, profiles=profiles, prompt_of_sample=None)


def _load_task5(path: Path, b: _Builder) -> dict[tuple[str, int], frozenset[str]]:
    run_id, rows = b.read(path, None, owning=True)
    profiles: dict[tuple[str, int], frozenset[str]] = {}
    user_profile: dict[str, frozenset[str]] = {}
    count = 0
    for row in rows:
        user = row.text("user_id")
        prompt_index = row.integer("prompt_index")
        if (user, prompt_index) in profiles:
            raise row.error("prompt_index", f"duplicate (user_id, prompt_index) = ({user}, {prompt_index})")
        raw_attrs = row.data.get("profile_attributes")
        texts = tuple(a.get("attribute") for a in raw_attrs) if isinstance(raw_attrs, list) and all(
            type(a) is dict for a in raw_attrs) else ()
        if not texts or not all(type(t) is str and t.strip() for t in texts):
            texts = tuple(a.text("attribute") for a in row.objects("profile_attributes", allow_empty=False))
        known = user_profile.get(user)
        if known is None:
            if len(set(texts)) != len(texts):
                dup = next(t for t in texts if texts.count(t) > 1)
                raise row.error("profile_attributes", f"attribute listed twice: {cut(dup)}")
            # A user's profile is the same on every prompt line: build its records once.
            b.batch.users[(STAGE2, user)] = User(dataset=STAGE2, user_id=user)
            for a in row.objects("profile_attributes", allow_empty=False):
                b.batch.attributes[(STAGE2, user, a.text("attribute"))] = Attribute(
                    dataset=STAGE2, user_id=user, attribute=a.text("attribute"),
                    reason=a.text("reason", optional=True, allow_empty=True),
                    confidence=a.number("confidence", optional=True),
                )
            known = user_profile[user] = frozenset(texts)
        elif known != frozenset(texts) or len(set(texts)) != len(texts):
            raise row.error("profile_attributes", f"user {user} has a different profile on an earlier line")
        profiles[(user, prompt_index)] = known
        b.prompt(STAGE2, user, prompt_index, row.text("prompt_text"))
        candidates = {c.text("attribute"): c for c in row.objects("items")}
        for text, iid in zip(texts, b.relevance_items(STAGE2, user, prompt_index, list(texts)), strict=True):
            cand = candidates.get(text)
            if cand is not None:
                # The pipeline's candidate score is context for the case view, not a label.
                b.batch.items[iid] = b.batch.items[iid].model_copy(update={"payload": {
                    "pipeline_relevance": cand.number("relevance", optional=True),
                    "expected_behavior": cand.text("expected_behavior", optional=True, allow_empty=True),
                }})
        count += 1
    del run_id  # task5 holds no labels; its run row records that it was imported.
    if not count:
        raise no_rows(path)
    b.result.files[str(path)] = count
    return profiles


def _load_task6(path: Path, b: _Builder, profiles: dict[tuple[str, int], frozenset[str]]) -> None:
    run_id, rows = b.read(path, HUMAN_MAJORITY)
    human: dict[tuple[str, int], tuple[dict[str, bool], str]] = {}
    count = 0
    for row in rows:
        user = row.text("user_id")
        prompt_id = row.text("prompt_id")
        prefix, _, index_text = prompt_id.rpartition("_")
        if prefix != user or not index_text.isascii() or not index_text.isdigit() or len(index_text) > 9:
            raise row.error("prompt_id", f"expected '<user_id>_<prompt_index>', got {cut(prompt_id)}")
        prompt_index = int(index_text)
        if (user, prompt_index) not in profiles:
            raise row.error("prompt_id", f"no task5 profile for user {clip(user)} prompt {prompt_index}")
        model_tag = row.text("model_tag")
        columns = _columns(row.data.get("attributes"), _TASK6_FIELDS)
        if columns is None:
            for a in row.objects("attributes", allow_empty=False):  # raises the located error
                a.text("attribute")
                a.get("is_relevant", bool)
            raise AssertionError("unreachable: the located check accepted what the fast check refused")
        texts, relevant = columns
        profile = profiles[(user, prompt_index)]
        if not profile.issuperset(texts):
            i = next(i for i, t in enumerate(texts) if t not in profile)
            raise Row(row.data, path, row.line, f"attributes[{i}].").error(
                "attribute", f"not in user {clip(user)}'s profile: {cut(texts[i])}")
        known = human.get((user, prompt_index))
        if known is None:
            human[(user, prompt_index)] = (dict(zip(texts, relevant, strict=True)), f"{path}:{row.line}")
            none: list[str | None] = [None] * len(texts)
            b.labels_for_row(row, "attributes", (STAGE2, user, prompt_index), texts,
                             b.relevance_items(STAGE2, user, prompt_index, texts), HUMAN_MAJORITY,
                             "human_majority", run_id, labels=["yes" if r else "no" for r in relevant],
                             raws=none, reasons=none, errors=none)
        else:
            # The release repeats the human labels once per model_tag: they must agree.
            first, where = known
            for i, (text, value) in enumerate(zip(texts, relevant, strict=True)):
                if text in first and first[text] != value:
                    raise Row(row.data, path, row.line, f"attributes[{i}].").error(
                        "is_relevant", f"conflicts with the label for the same attribute at {where}")
                if text not in first:
                    first[text] = value
                    b.label(Row(row.data, path, row.line, f"attributes[{i}]."), "attribute",
                            b.relevance_item(STAGE2, user, prompt_index, text), HUMAN_MAJORITY, "human_majority",
                            "yes" if value else "no", run_id)
        # The generic vs personalised answers are stage-3 items (judged live; no human rating in this release).
        rid = item_id(STAGE2, "response", user, prompt_index, model_tag)
        b.item(rid, STAGE2, "response", user, prompt_index=prompt_index, payload={
            "kind": "generic_vs_personalized", "model_tag": model_tag,
            "response_no_context": row.text("response_no_context"),
            "response_personalized": row.text("response_personalized"),
        })
        count += 1
    if not count:
        raise no_rows(path)
    b.result.files[str(path)] = count


def _load_llm_file(path: Path, b: _Builder, dataset: str, *, profiles: dict[tuple[str, int], frozenset[str]] | None,
                   prompt_of_sample: dict[int, int] | None) -> None:
    rater = path.stem
    run_id, rows = b.read(path, rater)
    count = 0
    for row in rows:
        user = row.text("user_id")
        prompt_index = row.integer("prompt_index", optional=True)
        if prompt_index is None:
            sample = row.integer("sample_index")
            if prompt_of_sample is None or sample not in prompt_of_sample:
                raise row.error("prompt_index", f"missing, and sample_index {sample} is not in task3_relevance_clf")
            prompt_index = prompt_of_sample[sample]
        if profiles is not None and (user, prompt_index) not in profiles:
            raise row.error("prompt_index", f"no task5 profile for user {clip(user)} prompt {prompt_index}")
        columns = _columns(row.data.get("items"), _LLM_FIELDS)
        if columns is None:
            _check_llm_items(row)  # raises the located error the fast check could not name
            raise AssertionError("unreachable: the located check accepted what the fast check refused")
        texts, relevant, raws, reasons = columns
        items = row.data["items"]
        profile = profiles[(user, prompt_index)] if profiles is not None else None
        if profile is not None and not profile.issuperset(texts):
            i = next(i for i, t in enumerate(texts) if t not in profile)
            raise Row(items[i], path, row.line, f"items[{i}].").error(
                "attribute", f"not in user {clip(user)}'s profile: {cut(texts[i])}")
        # Column-wise per row: this loop runs once per label of 10^6-label imports.
        iids = b.relevance_items(dataset, user, prompt_index, texts)
        b.labels_for_row(row, "items", (dataset, user, prompt_index), texts, iids, rater, "llm", run_id,
                         labels=[None if r is None else ("yes" if r else "no") for r in relevant],
                         raws=raws, reasons=reasons, errors=[UNPARSEABLE_LLM if r is None else None for r in relevant])
        b.prompt(dataset, user, prompt_index, None)
        count += 1
    if not count:
        raise no_rows(path)
    b.result.files[str(path)] = count


# --------------------------------------------------------------------------- pilot

def _load_pilot(folder: Path, b: _Builder) -> None:
    clf_path = folder / "task3_relevance_clf.jsonl"
    llm_files = list(_jsonl_files(folder / "llm_relevance"))
    user_of_sample = _users_of_samples(llm_files)
    prompt_of_sample: dict[int, int] = {}
    majorities: list[_Majority] = []
    if clf_path.exists() or clf_path.is_symlink():
        prompt_of_sample, majorities = _load_clf(clf_path, b, user_of_sample)
    for path in llm_files:
        _load_llm_file(path, b, PILOT, profiles=None, prompt_of_sample=prompt_of_sample)
    blind_votes: dict[str, list[str]] = {}
    for path in _jsonl_files(folder / "annotations"):
        match = _ANNOTATION_FILE.match(path.name)
        if match is None:
            raise DataError(path, None, None, "annotation files must be named <annotator>_task<1|2|3>.jsonl")
        task = match["task"]
        if task == "1":
            _load_task1(path, b)
        else:
            _load_relevance_annotations(path, b, task, blind_votes)
    # Only now is it known which majorities blind labels alone can account for.
    for m in majorities:
        _add_majority(m, b, blind_votes)


def _users_of_samples(paths: Iterable[Path]) -> dict[int, str]:
    # The pilot classifier file keys pairs by sample_index only; the LLM files map samples to users.
    users: dict[int, str] = {}
    for path in paths:
        for row in read_jsonl(path):
            sample, user = row.integer("sample_index"), row.text("user_id")
            if users.setdefault(sample, user) != user:
                raise row.error("user_id", f"sample_index {sample} names another user on an earlier line/file")
    return users


@dataclass(frozen=True)
class _Majority:
    """A pilot human majority read from task3_relevance_clf, stored once the annotations are read."""

    row: Row
    iid: str
    label: str
    n_annotators: int
    yes_votes: int
    run_id: str


def _load_clf(path: Path, b: _Builder, user_of_sample: dict[int, str]) -> tuple[dict[int, int], list[_Majority]]:
    """Read the pilot majorities; ties are counted as undecided and get no label (comparable.majority_label)."""
    run_id, rows = b.read(path, HUMAN_MAJORITY, owning=True)
    prompt_of_sample: dict[int, int] = {}
    majorities: list[_Majority] = []
    count = 0
    for row in rows:
        sample = row.integer("sample_index")
        prompt_index = row.integer("prompt_index")
        if prompt_of_sample.setdefault(sample, prompt_index) != prompt_index:
            raise row.error("prompt_index", f"sample_index {sample} has another prompt_index on an earlier line")
        user = user_of_sample.get(sample)
        if user is None:
            raise row.error("sample_index", f"sample {sample} has no user_id in pilot/llm_relevance/*.jsonl")
        label = row.integer("label", 0, 1)
        yes_rate = row.number("human_yes_rate")
        n_annotators = row.integer("n_annotators", 1, 10_000)
        yes_votes = round(yes_rate * n_annotators)
        if abs(yes_votes - yes_rate * n_annotators) > 1e-6:
            raise row.error("human_yes_rate", f"{yes_rate} is not a share of {n_annotators} annotators")
        # The one majority rule (analysis/comparable.py): a tie is undecided, whatever the file codes it as.
        majority = _majority_label(["yes"] * yes_votes + ["no"] * (n_annotators - yes_votes))
        if majority is not None and majority != ("yes" if label else "no"):
            raise row.error("label", f"{label} contradicts human_yes_rate {yes_rate} of {n_annotators} annotators")
        iid = b.relevance_item(PILOT, user, prompt_index, row.text("attribute"))
        b.batch.items[iid] = b.batch.items[iid].model_copy(update={"payload": {
            "human_yes_rate": yes_rate, "n_annotators": n_annotators, "split": row.text("split"),
        }})
        b.prompt(PILOT, user, prompt_index, row.text("prompt_text"))
        if majority is None:
            b.result.undecided[str(path)] = b.result.undecided.get(str(path), 0) + 1
        else:
            majorities.append(_Majority(row, iid, majority, n_annotators, yes_votes, run_id))
        count += 1
    if not count:
        raise no_rows(path)
    b.result.files[str(path)] = count
    return prompt_of_sample, majorities


def _add_majority(m: _Majority, b: _Builder, blind_votes: dict[str, list[str]]) -> None:
    """Store a pilot majority: blind only if the release's blind task-3 labels alone reproduce it.

    The file does not say whose votes it aggregates. Its majorities rest on 3-4 annotators while the
    release holds blind task-3 labels from two annotators only (the others' task-3 rows copy their
    task-2 labels, given after seeing an LLM's): a majority counts as blind only when exactly
    ``n_annotators`` blind labels exist for the item with the same yes count; otherwise its votes
    include anchored labels and it is stored under ``ANCHORED_MAJORITY``.
    """
    votes = blind_votes.get(m.iid, [])
    blind = len(votes) == m.n_annotators and votes.count("yes") == m.yes_votes
    if not blind:
        path = str(m.row.path)
        b.result.anchored_majorities[path] = b.result.anchored_majorities.get(path, 0) + 1
    b.label(m.row, "attribute", m.iid, HUMAN_MAJORITY, "human_majority", m.label, m.run_id,
            condition=BLIND if blind else ANCHORED_MAJORITY)


def _load_relevance_annotations(path: Path, b: _Builder, task: str, blind_votes: dict[str, list[str]]) -> None:
    run_id, rows = b.read(path, None)
    count = 0
    for row in rows:
        annotator = row.text("annotator")
        user = row.text("user_id")
        prompt_index = row.integer("prompt_index")
        note = row.get("note", str, optional=True)
        converted = note is not None and note.strip() == CONVERTED_NOTE
        for j in row.objects("relevance_judgments"):
            iid = b.relevance_item(PILOT, user, prompt_index, j.text("attribute"))
            if task == "3":
                value = j.get("relevant", bool, optional=True)
                if value is None:
                    # The annotation tool stores an unanswered judgment as null: no label, not a "no".
                    b.result.unanswered[str(path)] = b.result.unanswered.get(str(path), 0) + 1
                    continue
                label = "yes" if value else "no"
                if converted:
                    # A copy of the task-2 label, given after seeing an LLM's: anchored, never blind.
                    b.result.converted[str(path)] = b.result.converted.get(str(path), 0) + 1
                    b.label(j, "attribute", iid, annotator, "human", label, run_id, condition=CONVERTED_SHOWN_LLM)
                else:
                    blind_votes.setdefault(iid, []).append(label)
                    b.label(j, "attribute", iid, annotator, "human", label, run_id)
                continue
            # Task 2 showed the annotator an LLM's label first: a separate condition, never mixed with blind labels.
            value = j.get("is_relevant", bool)
            b.label(j, "attribute", iid, annotator, "human", "yes" if value else "no", run_id, condition=SHOWN_LLM)
            rating = j.choice("rating", TASK2_RATINGS)
            if rating != "none":
                b.label(j, "attribute", iid, annotator, "human", rating, run_id, condition=SHOWN_LLM_RATING)
        b.prompt(PILOT, user, prompt_index, None)
        count += 1
    if not count:
        raise no_rows(path)
    b.result.files[str(path)] = count


def _load_task1(path: Path, b: _Builder) -> None:
    run_id, rows = b.read(path, None)
    count = 0
    for row in rows:
        annotator = row.text("annotator")
        index = row.integer("index")
        # The release omits the attribute texts and user ids of stage 1: items are (user position, attribute position).
        user = f"pilot-user-{index}"
        b.batch.users.setdefault((PILOT, user), User(dataset=PILOT, user_id=user))
        for position, j in enumerate(row.objects("attr_judgments")):
            iid = item_id(PILOT, "extraction", index, position)
            b.item(iid, PILOT, "extraction", user, position=position)
            b.label(j, "judgment", iid, annotator, "human", j.choice("judgment", TASK1_JUDGMENTS), run_id,
                    reason=j.get("note", str, optional=True) or None)
        count += 1
    if not count:
        raise no_rows(path)
    b.result.files[str(path)] = count


# --------------------------------------------------------------------------- helpers

def _columns(items: object, fields: tuple[tuple[str, type, bool], ...]) -> list[list[Any]] | None:
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


_LLM_FIELDS = (("attribute", str, True), ("relevant", bool, False), ("raw_answer", str, False),
               ("full_output", str, False))
_TASK6_FIELDS = (("attribute", str, True), ("is_relevant", bool, True))


def _check_llm_items(row: Row) -> None:
    for it in row.objects("items", allow_empty=False):
        it.text("attribute")
        it.get("relevant", bool, optional=True)
        it.get("raw_answer", str, optional=True)
        it.get("full_output", str, optional=True)


def _require(path: Path) -> Path:
    if not path.exists() and not path.is_symlink():
        raise DataError(path, None, None, "required file is missing")
    return path


def _jsonl_files(folder: Path) -> list[Path]:
    # Every *.jsonl entry, directories and broken links included: reading one names what is wrong with it.
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


def _coverage(labelled: dict[tuple[str, str, str], set[str]]) -> list[Coverage]:
    """Pairs each LLM rater shares with the human majority, per dataset."""
    human = {ds: ids for (kind, ds, _), ids in labelled.items() if kind == "human_majority"}
    return [
        Coverage(dataset=ds, rater=rater, llm_pairs=len(ids), human_pairs=len(human.get(ds, set())),
                 matched=len(ids & human.get(ds, set())))
        for (kind, ds, rater), ids in sorted(labelled.items()) if kind == "llm"
    ]
