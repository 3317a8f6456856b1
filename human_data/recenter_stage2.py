"""Re-Centering stage 2: task5 (prompts, profiles, the pipeline's selection), task6 (human majority), LLM labellers.

The pipeline's selection: task5 ``items`` are the attributes the release's pipeline selected for the prompt (and
wrote its answers from). They are stored as labels of rater :data:`~.recenter_build.PIPELINE_RATER`, kind
``system``: ``yes`` on the selected attributes, ``no`` on the user's other profile attributes. A system is scored
against people in the pipeline view and is never a judge or a human reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from personagap.human_data._jsonl import Row, clip, cut, no_rows
from personagap.human_data.recenter_build import (
    HUMAN_MAJORITY,
    PIPELINE_RATER,
    STAGE2,
    UNPARSEABLE_LLM,
    Builder,
    field_columns,
    jsonl_files,
    require,
)
from personagap.linking import SYSTEM_KIND
from personagap.records import Attribute, RaterKind, User, item_id

_SYSTEM: RaterKind = SYSTEM_KIND

@dataclass(frozen=True)
class Stage2:
    """What stage 3 links to: each (user, prompt)'s profile and the attributes humans judged relevant."""

    profiles: dict[tuple[str, int], frozenset[str]]
    """(user, prompt index) -> the user's profile attribute texts."""
    human_relevant: dict[tuple[str, int], list[str]]
    """(user, prompt index) -> the attributes the human majority judged relevant (prompts task6 labels)."""


def load_stage2(folder: Path, b: Builder) -> Stage2:
    """Read ``stage2/`` (task5, task6, llm_relevance) into the batch; return what stage 3 links to."""
    profiles = _load_task5(require(folder / "task5_items.jsonl"), b)
    task6 = folder / "task6_items.jsonl"
    human: dict[tuple[str, int], list[str]] = {}
    if task6.exists() or task6.is_symlink():
        human = _load_task6(task6, b, profiles)
    for path in jsonl_files(folder / "llm_relevance"):
        load_llm_file(path, b, STAGE2, profiles=profiles, prompt_of_sample=None)
    return Stage2(profiles=profiles, human_relevant=human)


def _load_task5(path: Path, b: Builder) -> dict[tuple[str, int], frozenset[str]]:
    run_id, rows = b.read(path, PIPELINE_RATER, owning=True)
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
        candidates = _candidates(row, known, user)
        iids = b.relevance_items(STAGE2, user, prompt_index, list(texts))
        for text, iid in zip(texts, iids, strict=True):
            cand = candidates.get(text)
            if cand is not None:
                # The pipeline's candidate score is context for the case view, not a label.
                b.add_payload(iid, {
                    "pipeline_relevance": cand.number("relevance", optional=True),
                    "expected_behavior": cand.text("expected_behavior", optional=True, allow_empty=True),
                })
        # The candidates are what the pipeline selected (and wrote its answers from): its stage-2 output.
        none: list[str | None] = [None] * len(texts)
        b.labels_for_row(row, "items", (STAGE2, user, prompt_index), list(texts), iids, PIPELINE_RATER,
                         _SYSTEM, run_id, labels=["yes" if t in candidates else "no" for t in texts],
                         raws=none, reasons=none, errors=none)
        count += 1
    if not count:
        raise no_rows(path)
    b.result.files[str(path)] = count
    return profiles


def prompt_index_of(row: Row, user: str, profiles: dict[tuple[str, int], frozenset[str]]) -> int:
    """The prompt index a row's ``prompt_id`` (``<user_id>_<prompt_index>``) names; it must be a task5 prompt."""
    prompt_id = row.text("prompt_id")
    prefix, _, index_text = prompt_id.rpartition("_")
    if prefix != user or not index_text.isascii() or not index_text.isdigit() or len(index_text) > 9:
        raise row.error("prompt_id", f"expected '<user_id>_<prompt_index>', got {cut(prompt_id)}")
    prompt_index = int(index_text)
    if (user, prompt_index) not in profiles:
        raise row.error("prompt_id", f"no task5 profile for user {clip(user)} prompt {prompt_index}")
    return prompt_index


def _candidates(row: Row, profile: frozenset[str], user: str) -> dict[str, Row]:
    """The pipeline's selected attributes of a task5 row (text -> its entry); each must be one of the user's."""
    out: dict[str, Row] = {}
    for cand in row.objects("items"):
        text = cand.text("attribute")
        if text not in profile:
            raise cand.error("attribute", f"not in user {clip(user)}'s profile: {cut(text)}")
        if text in out:
            raise cand.error("attribute", f"selected twice (first at items[{list(out).index(text)}])")
        out[text] = cand
    return out


def _load_task6(path: Path, b: Builder, profiles: dict[tuple[str, int], frozenset[str]]) -> dict[tuple[str, int],
                                                                                                  list[str]]:
    run_id, rows = b.read(path, HUMAN_MAJORITY)
    human: dict[tuple[str, int], tuple[dict[str, bool], str]] = {}
    count = 0
    for row in rows:
        user = row.text("user_id")
        prompt_index = prompt_index_of(row, user, profiles)
        model_tag = row.text("model_tag")
        columns = field_columns(row.data.get("attributes"), _TASK6_FIELDS)
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
    return {key: [text for text, relevant in labels.items() if relevant] for key, (labels, _) in human.items()}


def load_llm_file(path: Path, b: Builder, dataset: str, *, profiles: dict[tuple[str, int], frozenset[str]] | None,
                  prompt_of_sample: dict[int, int] | None) -> None:
    """One LLM relevance labeller's file (stage 2 or pilot): its per-attribute yes/no, unparseable ones as failures."""
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
        columns = field_columns(row.data.get("items"), _LLM_FIELDS)
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


_LLM_FIELDS = (("attribute", str, True), ("relevant", bool, False), ("raw_answer", str, False),
               ("full_output", str, False))
_TASK6_FIELDS = (("attribute", str, True), ("is_relevant", bool, True))


def _check_llm_items(row: Row) -> None:
    for it in row.objects("items", allow_empty=False):
        it.text("attribute")
        it.get("relevant", bool, optional=True)
        it.get("raw_answer", str, optional=True)
        it.get("full_output", str, optional=True)
