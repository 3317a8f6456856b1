"""Re-Centering stage 3: answers written under three input conditions (``stage3_responses/``), as pairs.

Each file ``eval_results_task5_{mode}_{model}.jsonl`` holds one answer per stage-2 prompt, written by ``model``
from: ``attributes`` = the pipeline's selected attributes (task5 ``items``), ``gt_attributes`` = the attributes the
human majority judged relevant (task6), ``no_context`` = nothing. One pairwise item per (user, prompt, model,
condition in {pipeline, oracle}) compares the personalised answer with the SAME model's ``no_context`` answer, in
dataset :data:`~.recenter_build.STAGE3`. The side of the personalised answer is drawn per item from a hash of its
id (seeded, recorded as ``position_seed``), so people labelling the pairs on the Annotate page see no side bias.
The release holds no human verdict on these answers.

Linking keys in each item's payload (:mod:`personagap.linking`): ``attributes_used`` (attribute ids; for the oracle
condition the task6 human-relevant attributes, null where task6 has no label for the prompt), ``input_condition``,
``system`` (the model tag of the file name), ``prompt_id``, ``personalized`` (``A`` or ``B``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from personagap.human_data._jsonl import DataError, Row, clip, cut, no_rows
from personagap.human_data.personafeedback import chosen_is_b
from personagap.human_data.recenter_build import STAGE3, Builder, jsonl_files
from personagap.human_data.recenter_stage2 import Stage2, prompt_index_of
from personagap.linking import (
    ATTRIBUTES_USED,
    INPUT_CONDITION,
    PERSONALIZED,
    PROMPT_ID,
    SYSTEM,
    InputCondition,
    attribute_id,
    prompt_id,
)
from personagap.records import Item, User, item_id

MODES: dict[str, InputCondition] = {"attributes": "pipeline", "gt_attributes": "oracle", "no_context": "none"}
"""The release's ``mode`` -> the input condition it is (:data:`personagap.linking.INPUT_CONDITIONS`)."""
GENERIC_MODE = "no_context"
POSITION_SEED = 0
"""Seed of the per-item coin that puts the personalised answer on side A or B."""
_FILE = re.compile(r"^eval_results_task5_(?P<mode>attributes|gt_attributes|no_context)_(?P<model>.+)\.jsonl$")


@dataclass(frozen=True)
class _Answer:
    """One answer row, checked."""

    run_id: str
    prompt_text: str
    response: str
    model: str
    profile: tuple[str, ...]
    selected: tuple[str, ...]


def load_stage3(folder: Path, b: Builder, stage2: Stage2 | None) -> None:
    """Read ``stage3_responses/`` and add one pairwise item per personalised answer with its generic counterpart.

    Args:
        folder: The ``stage3_responses`` folder.
        b: The import's record builder.
        stage2: The prompts and profiles the answers are for (None when the release has no ``stage2/``).

    Raises:
        DataError: A file is misnamed or a row deviates from the format (file, line and field named).
    """
    files = jsonl_files(folder)
    if not files:
        return
    if stage2 is None:
        raise DataError(folder, None, None, "stage3_responses/ needs stage2/task5_items.jsonl (the prompts its "
                                            "answers are for)")
    answers: dict[tuple[str, str], dict[tuple[str, int], _Answer]] = {}
    for path in files:
        match = _FILE.match(path.name)
        if match is None:
            raise DataError(path, None, None, "stage-3 answer files are named eval_results_task5_<attributes|"
                                              "gt_attributes|no_context>_<model>.jsonl")
        answers[(match["model"], match["mode"])] = _read(path, b, match["mode"], stage2)
    for (model_tag, mode), rows in sorted(answers.items()):
        if mode == GENERIC_MODE:
            continue
        generic = answers.get((model_tag, GENERIC_MODE), {})
        unpaired = 0
        for (user, prompt_index), answer in rows.items():
            other = generic.get((user, prompt_index))
            if other is None:
                unpaired += 1  # no generic answer of the same model to compare with
                continue
            _pair(b, stage2, user, prompt_index, model_tag, MODES[mode], answer, other)
        if unpaired:
            b.result.unpaired[f"{model_tag} {mode}"] = unpaired


def _read(path: Path, b: Builder, mode: str, stage2: Stage2) -> dict[tuple[str, int], _Answer]:
    run_id, rows = b.read(path, None)
    out: dict[tuple[str, int], _Answer] = {}
    where: dict[tuple[str, int], int | str | None] = {}
    for row in rows:
        user = row.text("user_id")
        prompt_index = prompt_index_of(row, user, stage2.profiles)
        if (user, prompt_index) in out:
            first = where[(user, prompt_index)]
            raise row.error("prompt_id", f"duplicate answer to this prompt (first at line {first})")
        if row.text("mode") != mode:
            raise row.error("mode", f"{cut(row.text('mode'))} but the file name says {mode!r}")
        profile = tuple(a.text("attribute") for a in row.objects("profile_attributes", allow_empty=False))
        if frozenset(profile) != stage2.profiles[(user, prompt_index)]:
            raise row.error("profile_attributes", f"differs from user {clip(user)}'s profile in task5")
        selected = tuple(_selected(row, stage2.profiles[(user, prompt_index)], user))
        out[(user, prompt_index)] = _Answer(run_id=run_id, prompt_text=row.text("prompt_text"),
                                            response=row.text("response"), model=row.text("model"),
                                            profile=profile, selected=selected)
        where[(user, prompt_index)] = row.line
    if not out:
        raise no_rows(path)
    b.result.files[str(path)] = len(out)
    return out


def _selected(row: Row, profile: frozenset[str], user: str) -> list[str]:
    """The pipeline's selected attributes listed on the row (``items``): each one of the user's, once."""
    texts: list[str] = []
    for cand in row.objects("items"):
        text = cand.text("attribute")
        if text not in profile:
            raise cand.error("attribute", f"not in user {clip(user)}'s profile: {cut(text)}")
        if text in texts:
            raise cand.error("attribute", f"listed twice (first at items[{texts.index(text)}])")
        texts.append(text)
    return texts


def _pair(b: Builder, stage2: Stage2, user: str, prompt_index: int, model_tag: str, condition: InputCondition,
          answer: _Answer, generic: _Answer) -> None:
    iid = item_id(STAGE3, "response", user, prompt_index, model_tag, condition)
    if condition == "pipeline":
        used: list[str] | None = list(answer.selected)
    else:  # oracle: the attributes humans judged relevant, where task6 labels the prompt
        used = stage2.human_relevant.get((user, prompt_index))
    personalised_second = chosen_is_b(iid, POSITION_SEED)
    a, b_text = (generic.response, answer.response) if personalised_second else (answer.response, generic.response)
    profile_text = "\n".join(answer.profile)
    b.batch.items[iid] = Item(item_id=iid, dataset=STAGE3, stage="response", user_id=user, prompt_index=prompt_index,
                              payload={"kind": "pairwise", "question": answer.prompt_text, "answer_a": a,
                                       "answer_b": b_text, "profile": profile_text,
                                       PERSONALIZED: "B" if personalised_second else "A",
                                       "position_seed": POSITION_SEED,
                                       ATTRIBUTES_USED: None if used is None else [attribute_id(user, t) for t in used],
                                       INPUT_CONDITION: condition, SYSTEM: model_tag, "model": answer.model,
                                       PROMPT_ID: prompt_id(user, prompt_index)})
    # Either file going removes the pair: both own it.
    b.batch.own(answer.run_id, (iid,))
    b.batch.own(generic.run_id, (iid,))
    b.batch.users.setdefault((STAGE3, user), User(dataset=STAGE3, user_id=user, profile_text=profile_text))
    b.prompt(STAGE3, user, prompt_index, answer.prompt_text)
