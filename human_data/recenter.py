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
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from personagap.human_data._jsonl import DataError, Row, read_jsonl
from personagap.records import Attribute, Item, Prompt, RaterKind, Run, Stage, User, item_id
from personagap.store import ImportBatch, git_sha, now

STAGE2 = "recenter-stage2"
PILOT = "recenter-pilot"
HUMAN_MAJORITY = "human_majority"
#: Pilot task-2 ratings; 'none' means the annotator left the default and gives no rating.
TASK2_RATINGS = ("none", "unnecessary", "forbidden", "optional", "necessary_implicit", "necessary_explicit")
TASK1_JUDGMENTS = ("ok", "bad", "unsure")
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


class _Builder:
    """Collects validated records and rejects duplicate keys with their location."""

    def __init__(self, result: RecenterImport) -> None:
        self.result = result
        self.batch = result.batch
        self._seen: dict[tuple[str, str, str], tuple[Path | str, int]] = {}
        self._item_ids: dict[tuple[str, str, int, str], str] = {}

    def run_for(self, path: Path, rater: str | None) -> str:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        # The path is part of the id: two files with identical bytes are still two imports.
        run_id = "import-" + hashlib.sha256(f"{path.resolve()}\0{digest}".encode()).hexdigest()[:16]
        self.batch.runs.append(Run(
            run_id=run_id, kind="import", source=str(path), rater=rater, git_sha=git_sha(),
            started_at=now(), finished_at=now(), status="finished", parameters={"sha256_prefix": digest},
        ))
        return run_id

    def relevance_item(self, dataset: str, user: str, prompt_index: int, attribute: str) -> str:
        # Every rater of a pair reaches here; hashing the key once per pair keeps 10^6-label imports fast.
        iid = self._item_ids.get((dataset, user, prompt_index, attribute))
        if iid is not None:
            return iid
        iid = item_id(dataset, "relevance", user, prompt_index, attribute)
        self._item_ids[(dataset, user, prompt_index, attribute)] = iid
        if iid not in self.batch.items:
            self.batch.items[iid] = Item(item_id=iid, dataset=dataset, stage="relevance", user_id=user,
                                         prompt_index=prompt_index, attribute=attribute)
        return iid

    def item(self, iid: str, dataset: str, stage: Stage, user: str, **fields: Any) -> None:
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

    def label_in(self, row: Row, field_prefix: str, fld: str, iid: str, rater: str, kind: RaterKind,
                 value: str | None, run_id: str, **extra: str | None) -> None:
        """Like :meth:`label` for an element of ``row`` (e.g. ``items[3].``), building its Row only on error."""
        key = (iid, rater, "")
        seen = self._seen.get(key)
        if seen is not None:
            where = Row(row.data, row.path, row.line, row.prefix + field_prefix)
            raise where.error(fld, f"duplicate label by {rater!r} for this item (first seen at {seen[0]}:{seen[1]})")
        self._seen[key] = (row.path, row.line)
        self._append(iid, rater, kind, "", value, run_id, extra)

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
    root = Path(root)
    stage2, pilot = root / "stage2", root / "pilot"
    if not stage2.is_dir() and not pilot.is_dir():
        raise DataError(root, None, None, "not a Re-Centering release: expected a stage2/ or pilot/ folder")
    result = RecenterImport()
    builder = _Builder(result)
    if stage2.is_dir():
        _load_stage2(stage2, builder)
    if pilot.is_dir():
        _load_pilot(pilot, builder)
    result.coverage = _coverage(result.batch)
    return result


# --------------------------------------------------------------------------- stage 2

def _load_stage2(folder: Path, b: _Builder) -> None:
    profiles = _load_task5(_require(folder / "task5_items.jsonl"), b)
    task6 = folder / "task6_items.jsonl"
    if task6.exists():
        _load_task6(task6, b, profiles)
    for path in _jsonl_files(folder / "llm_relevance"):
        _load_llm_file(path, b, STAGE2, profiles=profiles, prompt_of_sample=None)


def _load_task5(path: Path, b: _Builder) -> dict[tuple[str, int], frozenset[str]]:
    run_id = b.run_for(path, None)
    profiles: dict[tuple[str, int], frozenset[str]] = {}
    user_profile: dict[str, frozenset[str]] = {}
    count = 0
    for row in read_jsonl(path):
        user = row.text("user_id")
        prompt_index = row.get("prompt_index", int)
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
                raise row.error("profile_attributes", f"attribute listed twice: {dup[:60]!r}")
            # A user's profile is the same on every prompt line: build its records once.
            b.batch.users[(STAGE2, user)] = User(dataset=STAGE2, user_id=user)
            for a in row.objects("profile_attributes", allow_empty=False):
                b.batch.attributes[(STAGE2, user, a.text("attribute"))] = Attribute(
                    dataset=STAGE2, user_id=user, attribute=a.text("attribute"),
                    reason=a.text("reason", optional=True, allow_empty=True),
                    confidence=a.get("confidence", float, optional=True),
                )
            known = user_profile[user] = frozenset(texts)
        elif known != frozenset(texts) or len(set(texts)) != len(texts):
            raise row.error("profile_attributes", f"user {user} has a different profile on an earlier line")
        profiles[(user, prompt_index)] = known
        b.prompt(STAGE2, user, prompt_index, row.text("prompt_text"))
        candidates = {c.text("attribute"): c for c in row.objects("items")}
        for text in texts:
            iid = b.relevance_item(STAGE2, user, prompt_index, text)
            cand = candidates.get(text)
            if cand is not None:
                # The pipeline's candidate score is context for the case view, not a label.
                b.batch.items[iid] = b.batch.items[iid].model_copy(update={"payload": {
                    "pipeline_relevance": cand.get("relevance", float, optional=True),
                    "expected_behavior": cand.text("expected_behavior", optional=True, allow_empty=True),
                }})
        count += 1
    del run_id  # task5 holds no labels; its run row records that it was imported.
    b.result.files[str(path)] = count
    return profiles


def _load_task6(path: Path, b: _Builder, profiles: dict[tuple[str, int], frozenset[str]]) -> None:
    run_id = b.run_for(path, HUMAN_MAJORITY)
    human: dict[tuple[str, int, str], tuple[bool, str]] = {}
    count = 0
    for row in read_jsonl(path):
        user = row.text("user_id")
        prompt_id = row.text("prompt_id")
        prefix, _, index_text = prompt_id.rpartition("_")
        if prefix != user or not index_text.isdigit():
            raise row.error("prompt_id", f"expected '<user_id>_<prompt_index>', got {prompt_id!r}")
        prompt_index = int(index_text)
        if (user, prompt_index) not in profiles:
            raise row.error("prompt_id", f"no task5 profile for user {user} prompt {prompt_index}")
        model_tag = row.text("model_tag")
        for a in row.objects("attributes", allow_empty=False):
            text = a.text("attribute")
            relevant = a.get("is_relevant", bool)
            if text not in profiles[(user, prompt_index)]:
                raise a.error("attribute", f"not in user {user}'s profile: {text[:60]!r}")
            key = (user, prompt_index, text)
            if key in human:
                first, where = human[key]
                if first != relevant:
                    raise a.error("is_relevant", f"conflicts with the label for the same attribute at {where}")
                continue  # the release repeats the human labels once per model_tag
            human[key] = (relevant, f"{path}:{row.line}")
            iid = b.relevance_item(STAGE2, user, prompt_index, text)
            b.label(a, "attribute", iid, HUMAN_MAJORITY, "human_majority", "yes" if relevant else "no", run_id)
        # The generic vs personalised answers are stage-3 items (judged live; no human rating in this release).
        rid = item_id(STAGE2, "response", user, prompt_index, model_tag)
        b.item(rid, STAGE2, "response", user, prompt_index=prompt_index, payload={
            "kind": "generic_vs_personalized", "model_tag": model_tag,
            "response_no_context": row.text("response_no_context"),
            "response_personalized": row.text("response_personalized"),
        })
        count += 1
    b.result.files[str(path)] = count


def _load_llm_file(path: Path, b: _Builder, dataset: str, *, profiles: dict[tuple[str, int], frozenset[str]] | None,
                   prompt_of_sample: dict[int, int] | None) -> None:
    rater = path.stem
    run_id = b.run_for(path, rater)
    count = 0
    for row in read_jsonl(path):
        user = row.text("user_id")
        prompt_index = row.get("prompt_index", int, optional=True)
        if prompt_index is None:
            sample = row.get("sample_index", int)
            if prompt_of_sample is None or sample not in prompt_of_sample:
                raise row.error("prompt_index", f"missing, and sample_index {sample} is not in task3_relevance_clf")
            prompt_index = prompt_of_sample[sample]
        if profiles is not None and (user, prompt_index) not in profiles:
            raise row.error("prompt_index", f"no task5 profile for user {user} prompt {prompt_index}")
        items = row.data.get("items")
        if not _plain_llm_items(items):
            _check_llm_items(row)  # raises the located error the fast check could not name
        profile = profiles[(user, prompt_index)] if profiles is not None else None
        for i, it in enumerate(items):
            text = it["attribute"]
            if profile is not None and text not in profile:
                raise Row(it, path, row.line, f"items[{i}].").error(
                    "attribute", f"not in user {user}'s profile: {text[:60]!r}")
            relevant = it.get("relevant")
            iid = b.relevance_item(dataset, user, prompt_index, text)
            if relevant is None:
                b.label_in(row, f"items[{i}].", "attribute", iid, rater, "llm", None, run_id, raw=it.get("raw_answer"),
                           reason=it.get("full_output"), error="unparseable: the file records no relevant value")
            else:
                b.label_in(row, f"items[{i}].", "attribute", iid, rater, "llm", "yes" if relevant else "no", run_id,
                           raw=it.get("raw_answer"), reason=it.get("full_output"))
        b.prompt(dataset, user, prompt_index, None)
        count += 1
    b.result.files[str(path)] = count


# --------------------------------------------------------------------------- pilot

def _load_pilot(folder: Path, b: _Builder) -> None:
    clf_path = folder / "task3_relevance_clf.jsonl"
    llm_files = list(_jsonl_files(folder / "llm_relevance"))
    user_of_sample = _users_of_samples(llm_files)
    prompt_of_sample: dict[int, int] = {}
    if clf_path.exists():
        prompt_of_sample = _load_clf(clf_path, b, user_of_sample)
    for path in llm_files:
        _load_llm_file(path, b, PILOT, profiles=None, prompt_of_sample=prompt_of_sample)
    for path in _jsonl_files(folder / "annotations"):
        match = _ANNOTATION_FILE.match(path.name)
        if match is None:
            raise DataError(path, None, None, "annotation files must be named <annotator>_task<1|2|3>.jsonl")
        task = match["task"]
        if task == "1":
            _load_task1(path, b)
        else:
            _load_relevance_annotations(path, b, task)


def _users_of_samples(paths: Iterable[Path]) -> dict[int, str]:
    # The pilot classifier file keys pairs by sample_index only; the LLM files map samples to users.
    users: dict[int, str] = {}
    for path in paths:
        for row in read_jsonl(path):
            sample, user = row.get("sample_index", int), row.text("user_id")
            if users.setdefault(sample, user) != user:
                raise row.error("user_id", f"sample_index {sample} names another user on an earlier line/file")
    return users


def _load_clf(path: Path, b: _Builder, user_of_sample: dict[int, str]) -> dict[int, int]:
    run_id = b.run_for(path, HUMAN_MAJORITY)
    prompt_of_sample: dict[int, int] = {}
    count = 0
    for row in read_jsonl(path):
        sample = row.get("sample_index", int)
        prompt_index = row.get("prompt_index", int)
        if prompt_of_sample.setdefault(sample, prompt_index) != prompt_index:
            raise row.error("prompt_index", f"sample_index {sample} has another prompt_index on an earlier line")
        user = user_of_sample.get(sample)
        if user is None:
            raise row.error("sample_index", f"sample {sample} has no user_id in pilot/llm_relevance/*.jsonl")
        label = row.get("label", int)
        if label not in (0, 1):
            raise row.error("label", f"unknown value {label!r}; expected 0 or 1")
        yes_rate = row.get("human_yes_rate", float)
        n_annotators = row.get("n_annotators", int)
        iid = b.relevance_item(PILOT, user, prompt_index, row.text("attribute"))
        b.batch.items[iid] = b.batch.items[iid].model_copy(update={"payload": {
            "human_yes_rate": yes_rate, "n_annotators": n_annotators, "split": row.text("split"),
        }})
        b.prompt(PILOT, user, prompt_index, row.text("prompt_text"))
        b.label(row, "attribute", iid, HUMAN_MAJORITY, "human_majority", "yes" if label else "no", run_id)
        count += 1
    b.result.files[str(path)] = count
    return prompt_of_sample


def _load_relevance_annotations(path: Path, b: _Builder, task: str) -> None:
    run_id = b.run_for(path, None)
    count = 0
    for row in read_jsonl(path):
        annotator = row.text("annotator")
        user = row.text("user_id")
        prompt_index = row.get("prompt_index", int)
        for j in row.objects("relevance_judgments"):
            iid = b.relevance_item(PILOT, user, prompt_index, j.text("attribute"))
            if task == "3":
                value = j.get("relevant", bool, optional=True)
                if value is None:
                    # The annotation tool stores an unanswered judgment as null: no label, not a "no".
                    b.result.unanswered[str(path)] = b.result.unanswered.get(str(path), 0) + 1
                    continue
                b.label(j, "attribute", iid, annotator, "human", "yes" if value else "no", run_id)
                continue
            # Task 2 showed the annotator an LLM's label first: a separate condition, never mixed with blind labels.
            value = j.get("is_relevant", bool)
            b.label(j, "attribute", iid, annotator, "human", "yes" if value else "no", run_id, condition="shown-llm")
            rating = j.choice("rating", TASK2_RATINGS)
            if rating != "none":
                b.label(j, "attribute", iid, annotator, "human", rating, run_id, condition="shown-llm-rating")
        b.prompt(PILOT, user, prompt_index, None)
        count += 1
    b.result.files[str(path)] = count


def _load_task1(path: Path, b: _Builder) -> None:
    run_id = b.run_for(path, None)
    count = 0
    for row in read_jsonl(path):
        annotator = row.text("annotator")
        index = row.get("index", int)
        # The release omits the attribute texts and user ids of stage 1: items are (user position, attribute position).
        user = f"pilot-user-{index}"
        b.batch.users.setdefault((PILOT, user), User(dataset=PILOT, user_id=user))
        for position, j in enumerate(row.objects("attr_judgments")):
            iid = item_id(PILOT, "extraction", index, position)
            b.item(iid, PILOT, "extraction", user, position=position)
            b.label(j, "judgment", iid, annotator, "human", j.choice("judgment", TASK1_JUDGMENTS), run_id,
                    reason=j.get("note", str, optional=True) or None)
        count += 1
    b.result.files[str(path)] = count


# --------------------------------------------------------------------------- helpers

def _plain_llm_items(items: object) -> bool:
    """Fast structural check of an LLM row's items; on False the slow located check names the problem."""
    if not isinstance(items, list) or not items:
        return False
    for it in items:
        if type(it) is not dict:
            return False
        text, rel, raw, full = it.get("attribute"), it.get("relevant"), it.get("raw_answer"), it.get("full_output")
        if type(text) is not str or not text.strip() or (rel is not None and type(rel) is not bool):
            return False
        if (raw is not None and type(raw) is not str) or (full is not None and type(full) is not str):
            return False
    return True


def _check_llm_items(row: Row) -> None:
    for it in row.objects("items", allow_empty=False):
        it.text("attribute")
        it.get("relevant", bool, optional=True)
        it.get("raw_answer", str, optional=True)
        it.get("full_output", str, optional=True)


def _require(path: Path) -> Path:
    if not path.exists():
        raise DataError(path, None, None, "required file is missing")
    return path


def _jsonl_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


def _coverage(batch: ImportBatch) -> list[Coverage]:
    """Pairs each LLM rater shares with the human majority, per dataset."""
    dataset_of = {iid: it.dataset for iid, it in batch.items.items() if it.stage == "relevance"}
    human: dict[str, frozenset[str]] = {}
    llm: dict[tuple[str, str], frozenset[str]] = {}
    for lab in batch.label_columns.rows():
        ds = dataset_of.get(lab.item_id)
        if ds is None or lab.condition:
            continue
        if lab.rater_kind == "human_majority":
            human.setdefault(ds, set()).add(lab.item_id)
        elif lab.rater_kind == "llm":
            llm.setdefault((ds, lab.rater), set()).add(lab.item_id)
    return [
        Coverage(dataset=ds, rater=rater, llm_pairs=len(ids), human_pairs=len(human.get(ds, set())),
                 matched=len(ids & human.get(ds, set())))
        for (ds, rater), ids in sorted(llm.items())
    ]
