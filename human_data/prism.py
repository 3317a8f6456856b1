"""Adapter for the "Can LLM be a Personalized Judge?" PRISM release (``prism_judge/*.jsonl``).

Each file holds one LLM judge's run over PRISM conversations; every row carries

* the participant's self-reported profile (``user_info``, as text; the ``key_features``
  files hold only some of its fields), their real first prompt (``question``) and the two
  model answers they rated (``asst_A``, ``asst_B``);
* ``ground_truth``: the answer the participant rated higher (``A``/``B``), or ``C`` for a
  tie (the ``*_with_tie_*`` files ask the judge for ties; the release also carries ``C``
  ground truths in files whose judge could not answer a tie, e.g. ``no_persona``);
* the judge's ``answer`` (+ ``certainty``; ``acc`` = answer == ground_truth), which may be
  unparseable (``[``, ``N``, ``T`` ...): such rows become recorded failures, never labels.

The ``certainty`` is the judge's stated confidence on the scale its ``prompt`` asked for ("assigning a certainty
level from 1 to 100"; the ``no_persona`` file asks "from 1 to 5"); files that asked for none hold ``NA``. It is
stored in the label's meta as :mod:`personagap.confidence` says (``confidence`` + ``confidence_scale``); a certainty
that does not parse, or lies outside the stated scale, is that field's recorded failure and the label stands.

The file name says the protocol and the judge model, e.g.
``prism_all_features_with_tie_all_features_gpt-4o.jsonl`` = model ``gpt-4o``, full profile,
ties allowed. Items are keyed by (question, asst_A, asst_B): the same pair shared by
several files is one item, with one human label (the participant's) and one recorded label
per (judge model, protocol).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from personagap.confidence import UNSTATED, confidence_meta
from personagap.datasets import record_meta
from personagap.human_data import _jsonl
from personagap.human_data._jsonl import (
    DataError,
    Row,
    cut,
    no_rows,
    read_bytes,
    read_jsonl,
    real_path,
    require_exists,
)
from personagap.records import DatasetRecord, Item, Label, Run, User, item_id
from personagap.scales import PAIRWISE_SCALE
from personagap.store import ImportBatch
from personagap.vocabulary import DECISIVE

DATASET = "prism-judge"
ADAPTER = "prism-judge"
"""The release's name in its files' identities (``prism-judge:<file>``)."""
HUMAN_RATER = "prism-participant"
"""The participant who wrote the prompt and rated both answers (a different person per user)."""
QUESTION = "Which of the two answers did this participant rate higher (or were they tied)?"
"""What PRISM's human label answers: the participant's own rating of two answers to their own prompt."""
_GROUND_TRUTH = {"A": "A", "B": "B", "C": "tie"}
_CERTAINTY_SCALE = re.compile(r"certainty level from (\d+) to (\d+)", re.IGNORECASE)
NO_CERTAINTY = "NA"
"""The release's ``certainty`` where the judge was asked for none."""


def certainty_scale(prompt: str | None) -> str:
    """The certainty scale a judge prompt asked for (``"1-100"``), or :data:`~personagap.confidence.UNSTATED`.

    Pure: the release's prompts say "assigning a certainty level from LO to HI".
    """
    m = _CERTAINTY_SCALE.search(prompt or "")
    return f"{m[1]}-{m[2]}" if m else UNSTATED


@dataclass(frozen=True)
class Protocol:
    """What a judge file's name says about how its judge was asked."""

    model: str
    profile: str
    """'all-features', 'key-features' or 'no-profile'."""
    with_tie: bool

    @property
    def condition(self) -> str:
        """The label condition: the profile variant, plus '+with-tie' where ties were offered."""
        return self.profile + ("+with-tie" if self.with_tie else "")


def parse_file_name(path: str | Path) -> Protocol:
    """Read the judge model and protocol from a release file name.

    Args:
        path: E.g. ``prism_all_features_key_features_gpt-4o.jsonl`` or
            ``prism_no_persona_command-r-plus_new.jsonl``.

    Returns:
        The protocol.

    Raises:
        DataError: The name does not follow the release's pattern.
    """
    stem = Path(path).stem
    if not stem.startswith("prism_"):
        raise DataError(path, None, None, "a PRISM judge file name must start with 'prism_'")
    body = stem[len("prism_"):]
    if body.endswith("_new"):  # the release's re-run marker, not part of the model name
        body = body[: -len("_new")]
    spec, _, model = body.rpartition("_")
    if not spec or not model:
        raise DataError(path, None, None, "cannot read the judge model from the file name")
    # The judge's profile variant is the last one named (files are named <data>_<judge input>_<model>).
    if spec.endswith("no_persona"):
        profile = "no-profile"
    elif spec.endswith("key_features"):
        profile = "key-features"
    elif spec.endswith("all_features"):
        profile = "all-features"
    else:
        raise DataError(path, None, None, f"unknown protocol {spec!r}; expected the name to say all_features, "
                                          "key_features or no_persona before the model")
    return Protocol(model=model, profile=profile, with_tie="with_tie" in spec)


def parse_answer(answer: str, *, with_tie: bool) -> tuple[str | None, str | None]:
    """Map a recorded judge answer onto a pairwise label.

    Pure: ``A``/``B`` are labels; ``C`` is a tie only where the protocol offered ties.
    Anything else (the release holds ``[``, ``N``, ``T``, ``I``) is a failure.

    Args:
        answer: The row's ``answer`` text.
        with_tie: The judge was offered ``C`` for a tie.

    Returns:
        ``(label, None)`` or ``(None, error)``.
    """
    text = answer.strip()
    if text in DECISIVE:
        return text, None
    if text == "C":
        if with_tie:
            return "tie", None
        return None, "unparseable: answer 'C' but this protocol offered no tie"
    return None, f"unparseable: answer {text[:20]!r} is not A, B or C"


def user_key(profile: str) -> str:
    """The user id of a participant, from their profile text (the release has no participant ids)."""
    return "prism-" + hashlib.sha256(profile.encode("utf-8")).hexdigest()[:12]


@dataclass
class ResponseImport:
    """What a stage-3 import read: the batch to write and per-file row counts."""

    batch: ImportBatch = field(default_factory=ImportBatch)
    files: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    """Per file, recorded judge answers that did not parse (imported as failures)."""

    def render(self, db: str | Path) -> str:
        """Plain-text summary for the terminal (with what the write changed, once written)."""
        lines = [f"Imported {len(self.files)} files into {db}:"]
        for path, rows in self.files.items():
            fail = self.failures.get(path, 0)
            lines.append(f"  {path}: {rows} rows" + (f" ({fail} unparseable judge answers kept as failures)"
                                                     if fail else ""))
        lines.append(write_line(self.batch))
        return "\n".join(lines)


def write_line(batch: ImportBatch) -> str:
    """The summary line of what writing ``batch`` changed (inserted / updated / removed / unchanged)."""
    if batch.written is None:
        return "  read (not written): " + ", ".join(f"{n} {table}" for table, n in batch.counts().items())
    return "  database: " + batch.written.render()


def import_run(path: Path, rater: str | None, parameters: dict[str, Any] | None = None,
               data: bytes | None = None, *, release: _jsonl.Release) -> Run:
    """The ``runs`` row of an imported file; its id derives from its place in the release (``_jsonl.run_id_for``).

    Args:
        path: The file.
        rater: The rater its labels come from, if one.
        parameters: Recorded with the run.
        data: The file's bytes, if already read (else read here; an unreadable file is a DataError).
        release: The release the file belongs to: a re-import from another folder replaces this run.
    """
    return _jsonl.import_run(path, read_bytes(path) if data is None else data, rater, parameters, release=release)


class _PairBuilder:
    """Collects pairwise items, one human label each, and judge labels; rejects conflicts with their location."""

    def __init__(self, result: ResponseImport) -> None:
        self.result = result
        self.batch = result.batch
        self.human: dict[str, tuple[str, str]] = {}
        self.seen: dict[tuple[str, str, str], str] = {}
        self.profiles: dict[str, dict[str, str]] = {}
        self.splits: dict[str, str] = {}

    def add_row(self, row: Row, protocol: Protocol, run_id: str) -> bool:
        """Add one row; return True when its judge answer was a failure."""
        question = row.text("question")
        answer_a = row.text("asst_A")
        answer_b = row.text("asst_B")
        profile = row.text("user_info")
        split = row.text("conversation_type", optional=True)
        truth = row.get("ground_truth", str)
        if truth not in _GROUND_TRUTH:
            raise row.error("ground_truth", f"unknown value {cut(truth)}; expected A, B or C (tie)")
        answer = row.get("answer", str)
        acc = row.get("acc", bool)
        if acc != (answer == truth):
            raise row.error("acc", f"is {acc} but answer {cut(answer)} vs ground_truth {cut(truth)} says {not acc}")
        certainty = row.get("certainty", str, optional=True)

        iid = item_id(DATASET, "response", question, answer_a, answer_b)
        where = f"{row.path}:{row.line}"
        human = _GROUND_TRUTH[truth]
        if iid in self.human:
            first, first_where = self.human[iid]
            if first != human:
                raise row.error("ground_truth", f"{cut(truth)} conflicts with the same answer pair at {first_where}")
        else:
            self.human[iid] = (human, where)
            self.batch.labels.append(Label(item_id=iid, rater=HUMAN_RATER, rater_kind="human", label=human,
                                           raw=truth, run_id=run_id))
        if split is not None:
            known = self.splits.setdefault(iid, split)
            if known != split:
                raise row.error("conversation_type", f"{cut(split)} conflicts with {cut(known)} for the same pair")
        self.profiles.setdefault(iid, {})[protocol.profile] = profile

        key = (iid, protocol.model, protocol.condition)
        if key in self.seen:
            raise row.error("answer", f"duplicate answer by {cut(protocol.model)} for this pair "
                                      f"(first seen at {self.seen[key]})")
        self.seen[key] = where
        label, error = parse_answer(answer, with_tie=protocol.with_tie)
        meta: dict[str, Any] = {"swapped": False}
        if certainty is not None:
            meta["certainty"] = certainty
            if certainty.strip() != NO_CERTAINTY:
                meta.update(confidence_meta(certainty, certainty_scale(row.get("prompt", str, optional=True))))
        self.batch.labels.append(Label(item_id=iid, rater=protocol.model, rater_kind="llm",
                                       condition=protocol.condition, label=label, raw=answer, error=error,
                                       run_id=run_id, meta=meta))
        self.batch.items[iid] = Item(item_id=iid, dataset=DATASET, stage="response", user_id="", payload={
            "kind": "pairwise", "question": question, "answer_a": answer_a, "answer_b": answer_b})
        return error is not None

    def finish(self) -> None:
        """Attach each item's user (from its fullest profile) and its profiles by variant."""
        for iid, item in list(self.batch.items.items()):
            profiles = self.profiles[iid]
            # The all-features profile is the participant's full survey; key-features holds a subset of it.
            full = profiles.get("all-features") or profiles.get("no-profile") or profiles["key-features"]
            user = user_key(full)
            payload = dict(item.payload)
            payload["profile"] = full
            if "key-features" in profiles:
                payload["key_features_profile"] = profiles["key-features"]
            if iid in self.splits:
                payload["split"] = self.splits[iid]
            self.batch.items[iid] = item.model_copy(update={"user_id": user, "payload": payload})
            self.batch.users.setdefault((DATASET, user), User(dataset=DATASET, user_id=user, profile_text=full))


def load_prism(path: str | Path) -> ResponseImport:
    """Read and validate PRISM judge files (one file, or every ``prism_*.jsonl`` in a folder).

    Args:
        path: A release file or the folder holding them.

    Returns:
        The validated batch (not yet written) and per-file counts.

    Raises:
        DataError: A file name or row deviates from the release format; the message
            names file, line and field.
    """
    root = require_exists(path)
    files = sorted(root.glob("prism_*.jsonl")) if root.is_dir() else [root]
    if not files:
        raise DataError(root, None, None, "no prism_*.jsonl files in this folder")
    result = ResponseImport()
    release = _jsonl.Release.of(ADAPTER, root)
    if root.is_dir():
        # The release is the unit, wherever it lies: a file deleted from it goes.
        result.batch.releases.append(release.scope)
        result.batch.folders.append(real_path(root))
    builder = _PairBuilder(result)
    for file in files:
        protocol = parse_file_name(file)
        data = read_bytes(file)
        run = import_run(file, protocol.model, {"condition": protocol.condition}, data, release=release)
        result.batch.runs.append(run)
        count = failures = 0
        for row in read_jsonl(file, data):
            failures += builder.add_row(row, protocol, run.run_id)
            count += 1
        if count == 0:
            raise no_rows(file)
        result.files[str(file)] = count
        result.failures[str(file)] = failures
    builder.finish()
    result.batch.meta.update(pairwise_record(DATASET, QUESTION))
    return result


def pairwise_record(dataset: str, question: str) -> dict[str, str]:
    """The meta entries of a release's pairwise (A/B/tie) dataset record (:func:`personagap.datasets.record_meta`)."""
    return record_meta(DatasetRecord(stage="response", dataset=dataset, item_kind="pairwise",
                                     scale=PAIRWISE_SCALE,
                                     question=question, declared=True))
