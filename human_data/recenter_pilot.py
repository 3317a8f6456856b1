"""Re-Centering pilot rounds: per-annotator labels of tasks 1-3, the pilot majorities and LLM labels.

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
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from personagap.analysis.comparable import ANCHORED_MAJORITY, BLIND, CONVERTED_SHOWN_LLM, SHOWN_LLM, SHOWN_LLM_RATING
from personagap.analysis.comparable import majority_label as _majority_label
from personagap.human_data._jsonl import DataError, Row, no_rows, read_jsonl
from personagap.human_data.recenter_build import (
    CONVERTED_NOTE,
    HUMAN_MAJORITY,
    PILOT,
    TASK2_RATINGS,
    Builder,
    jsonl_files,
)
from personagap.human_data.recenter_stage2 import load_llm_file
from personagap.records import User, item_id
from personagap.vocabulary import VERIFICATION_LABELS

_ANNOTATION_FILE = re.compile(r"^(?P<annotator>.+)_task(?P<task>[123])\.jsonl$")


def load_pilot(folder: Path, b: Builder) -> None:
    """Read ``pilot/`` (majorities, per-annotator labels of tasks 1-3, LLM labels) into the batch."""
    clf_path = folder / "task3_relevance_clf.jsonl"
    llm_files = list(jsonl_files(folder / "llm_relevance"))
    user_of_sample = _users_of_samples(llm_files)
    prompt_of_sample: dict[int, int] = {}
    majorities: list[_Majority] = []
    if clf_path.exists() or clf_path.is_symlink():
        prompt_of_sample, majorities = _load_clf(clf_path, b, user_of_sample)
    for path in llm_files:
        load_llm_file(path, b, PILOT, profiles=None, prompt_of_sample=prompt_of_sample)
    blind_votes: dict[str, list[str]] = {}
    for path in jsonl_files(folder / "annotations"):
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


def _load_clf(path: Path, b: Builder, user_of_sample: dict[int, str]) -> tuple[dict[int, int], list[_Majority]]:
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
        b.add_payload(iid, {"human_yes_rate": yes_rate, "n_annotators": n_annotators, "split": row.text("split")})
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


def _add_majority(m: _Majority, b: Builder, blind_votes: dict[str, list[str]]) -> None:
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


def _load_relevance_annotations(path: Path, b: Builder, task: str, blind_votes: dict[str, list[str]]) -> None:
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


def _load_task1(path: Path, b: Builder) -> None:
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
            b.label(j, "judgment", iid, annotator, "human", j.choice("judgment", VERIFICATION_LABELS), run_id,
                    reason=j.get("note", str, optional=True) or None)
        count += 1
    if not count:
        raise no_rows(path)
    b.result.files[str(path)] = count
