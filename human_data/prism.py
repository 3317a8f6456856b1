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
ties allowed; ``prism_all_features_key_features_gpt-4o_jun5.jsonl`` = a run of ``gpt-4o`` dated ``jun5`` (rater
``gpt-4o_jun5``: another run than the undated one); ``..._least_imp_feature_<model>.jsonl`` = the judge saw only the
profile's least important feature (:data:`PROFILE_VARIANTS`). In a folder, files of the paper's other tasks (``ap_*``,
``ec_*``, ``opinionqa_*``) are skipped, each with one line. Items are keyed by (question, asst_A, asst_B): the same
pair shared by several files is one item, with one human label (the participant's) and one recorded label per (judge
run, protocol).
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


#: The judge input a file name says the judge was shown (``--persona_features`` of the release's script, or
#: ``no_persona``), as the label condition's profile variant. ``least_imp_feature`` holds only the feature the study
#: found least important (the participant's age); ``with_desc`` the full profile with a description.
PROFILE_VARIANTS: dict[str, str] = {"no_persona": "no-profile", "all_features": "all-features",
                                    "key_features": "key-features", "least_imp_feature": "least-important-feature",
                                    "with_desc": "with-description"}
#: Prompt variants (``--prompt_type``) that change what the judge was asked, beside the profile and the tie.
PROMPT_VARIANTS: dict[str, str] = {"no_confidence": "no-confidence", "1_to_100": "certainty-1-100"}
_MONTHS = "jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec"
# prism_<prompt type>_<judge input>_<model>[_<date>][_new].jsonl: the spec ends at the last judge input named
# (greedy), the model is the shortest rest before an optional run date ("jun5", "jun_11") and re-run marker.
_FILE_NAME = re.compile(rf"^prism_(?P<spec>.*(?:{'|'.join(PROFILE_VARIANTS)}))_(?P<model>.+?)"
                        rf"(?:_(?P<date>(?:{_MONTHS})_?\d{{1,2}}))?(?:_new)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Protocol:
    """What a judge file's name says about how its judge was asked."""

    model: str
    profile: str
    """The judge input: a value of :data:`PROFILE_VARIANTS` ('all-features', 'key-features', 'no-profile', ...)."""
    with_tie: bool
    date: str = ""
    """The run's date in the file name (``jun5``), or ''. Two runs of one model under one protocol are two raters."""
    prompt: str = ""
    """A prompt variant of :data:`PROMPT_VARIANTS`, or ''."""

    @property
    def rater(self) -> str:
        """The judge's rater name: the model, with the run's date as the file spells it (``gpt-4o_jun5``)."""
        return f"{self.model}_{self.date}" if self.date else self.model

    @property
    def condition(self) -> str:
        """The label condition: the profile variant, plus '+with-tie' where ties were offered (and a prompt variant)."""
        return self.profile + ("+with-tie" if self.with_tie else "") + (f"+{self.prompt}" if self.prompt else "")


def is_prism_file(path: str | Path) -> bool:
    """Whether a release file is a PRISM judge file (``prism_*.jsonl``); the release's other tasks are not."""
    name = Path(path).name
    return name.startswith("prism_") and name.endswith(".jsonl")


def parse_file_name(path: str | Path) -> Protocol:
    """Read the judge model and protocol from a release file name.

    Args:
        path: E.g. ``prism_all_features_key_features_gpt-4o.jsonl``,
            ``prism_all_features_key_features_gpt-4o_jun5.jsonl`` (a run date after the model),
            ``prism_all_features_least_imp_feature_command-r-plus.jsonl`` or
            ``prism_no_persona_command-r-plus_new.jsonl``.

    Returns:
        The protocol.

    Raises:
        DataError: The name does not follow the release's pattern.
    """
    stem = Path(path).stem
    if not stem.startswith("prism_"):
        raise DataError(path, None, None, "a PRISM judge file name must start with 'prism_' (another task's outputs "
                                          "go in through the label format: 'personagap import labels', "
                                          "docs/formats.md)")
    m = _FILE_NAME.match(stem)
    if m is None:
        raise DataError(path, None, None, f"unknown protocol in {stem!r}; expected the name to say "
                                          f"{', '.join(PROFILE_VARIANTS)} before the model")
    spec = m["spec"].lower()
    tokens = f"_{spec}_"
    # no_persona anywhere means the judge saw no profile, whatever features the name lists after it.
    profile = "no-profile" if "_no_persona_" in tokens else next(
        PROFILE_VARIANTS[v] for v in sorted(PROFILE_VARIANTS, key=lambda v: -spec.rfind(v)) if v in spec)
    prompt = next((name for key, name in PROMPT_VARIANTS.items() if f"_{key}_" in tokens), "")
    return Protocol(model=m["model"], profile=profile, with_tie="with_tie" in spec, date=m["date"] or "",
                    prompt=prompt)


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
    skipped: dict[str, str] = field(default_factory=dict)
    """Files of the folder that are not this release's (another task's outputs beside it): why, and what to do."""

    def render(self, db: str | Path) -> str:
        """Plain-text summary for the terminal (with what the write changed, once written)."""
        lines = [f"Imported {len(self.files)} files into {db}:"]
        for path, rows in self.files.items():
            fail = self.failures.get(path, 0)
            lines.append(f"  {path}: {rows} rows" + (f" ({fail} unparseable judge answers kept as failures)"
                                                     if fail else ""))
        lines += [f"  {path}: skipped: {why}" for path, why in self.skipped.items()]
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

        key = (iid, protocol.rater, protocol.condition)
        if key in self.seen:
            raise row.error("answer", f"duplicate answer by {cut(protocol.rater)} for this pair "
                                      f"(first seen at {self.seen[key]})")
        self.seen[key] = where
        label, error = parse_answer(answer, with_tie=protocol.with_tie)
        meta: dict[str, Any] = {"swapped": False}
        if certainty is not None:
            meta["certainty"] = certainty
            if certainty.strip() != NO_CERTAINTY:
                meta.update(confidence_meta(certainty, certainty_scale(row.get("prompt", str, optional=True))))
        self.batch.labels.append(Label(item_id=iid, rater=protocol.rater, rater_kind="llm",
                                       condition=protocol.condition, label=label, raw=answer, error=error,
                                       run_id=run_id, meta=meta))
        self.batch.items[iid] = Item(item_id=iid, dataset=DATASET, stage="response", user_id="", payload={
            "kind": "pairwise", "question": question, "answer_a": answer_a, "answer_b": answer_b})
        return error is not None

    def finish(self) -> None:
        """Attach each item's user (from its fullest profile) and its profiles by variant."""
        for iid, item in list(self.batch.items.items()):
            profiles = self.profiles[iid]
            # The all-features profile is the participant's full survey (a no-profile file's row carries it too);
            # the other variants hold a part of it, the fullest first.
            full = next(profiles[v] for v in _FULLEST_FIRST if v in profiles)
            user = user_key(full)
            payload = dict(item.payload)
            payload["profile"] = full
            for variant, key in _PARTIAL_PROFILES.items():
                if variant in profiles:
                    payload[key] = profiles[variant]
            if iid in self.splits:
                payload["split"] = self.splits[iid]
            self.batch.items[iid] = item.model_copy(update={"user_id": user, "payload": payload})
            self.batch.users.setdefault((DATASET, user), User(dataset=DATASET, user_id=user, profile_text=full))


SKIPPED = ("not a PRISM judge file (prism_*.jsonl): another task's outputs; to import such data, write it in the "
           "label format and run 'personagap import labels FILE --stage response --dataset NAME' (docs/formats.md)")
"""Why a file beside the PRISM files of a release folder is skipped, and how such data gets in."""
_FULLEST_FIRST = ("all-features", "with-description", "no-profile", "key-features", "least-important-feature")
#: Item payload keys of the profiles a part of the survey (the judge was shown only these).
_PARTIAL_PROFILES = {"key-features": "key_features_profile",
                     "least-important-feature": "least_important_feature_profile"}


def load_prism(path: str | Path) -> ResponseImport:
    """Read and validate PRISM judge files (one file, or every ``prism_*.jsonl`` in a folder).

    In a folder, other ``*.jsonl`` files (the published ``outputs/`` folder holds the paper's other tasks) are
    skipped and listed in :attr:`ResponseImport.skipped`.

    Args:
        path: A release file or the folder holding them.

    Returns:
        The validated batch (not yet written) and per-file counts.

    Raises:
        DataError: A file name or row deviates from the release format; the message
            names file, line and field.
    """
    root = require_exists(path)
    result = ResponseImport()
    if root.is_dir():
        listed = sorted(root.glob("*.jsonl"))
        files = [f for f in listed if is_prism_file(f)]
        # The published outputs/ folder also holds the paper's other tasks (ap_*, ec_*, opinionqa_*): not PRISM
        # pairs, so each is named and skipped, never a reason to refuse the PRISM files beside it.
        result.skipped = {str(f): SKIPPED for f in listed if not is_prism_file(f)}
    else:
        files = [root]
    if not files:
        raise DataError(root, None, None, "no prism_*.jsonl files in this folder")
    release = _jsonl.Release.of(ADAPTER, root)
    if root.is_dir():
        # The release is the unit, wherever it lies: a file deleted from it goes.
        result.batch.releases.append(release.scope)
        result.batch.folders.append(real_path(root))
    builder = _PairBuilder(result)
    for file in files:
        protocol = parse_file_name(file)
        data = read_bytes(file)
        run = import_run(file, protocol.rater, {"condition": protocol.condition}, data, release=release)
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
