"""LLM judges for stage 2 (relevance selection), and the tasks they run on.

``relevance-per-attribute`` follows the Re-Centering study's protocol: one call per
(user, prompt, attribute) asking whether knowing the attribute would change a good
answer. ``relevance-batched`` asks once per (user, prompt) for the relevant subset
of the numbered attribute list: fewer calls, and a different prompt, so it is a
different judge whose agreement with humans is measured separately.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dspy
import pandas as pd

from personagap.judges.base import Judge, JudgeTask, Verdict, json_schema_format, normalise_choice, register_judge
from personagap.vocabulary import YES_NO

_YES_NO = {"yes": "yes", "no": "no"}


class AttributeRelevance(dspy.Signature):  # type: ignore[misc]  # dspy ships no type information
    """Decide whether one known attribute of a user matters for answering the user's prompt.

    Would knowing this attribute change what a good answer to the prompt should be?
    Answer YES only if a good answer should be different because of it; otherwise NO.
    """

    prompt: str = dspy.InputField(desc="The user's request.")
    attribute: str = dspy.InputField(desc="One thing known about the user.")
    reason: str = dspy.OutputField(desc="One sentence of reasoning.")
    answer: str = dspy.OutputField(desc="Exactly YES or NO.")


class RelevantSubset(dspy.Signature):  # type: ignore[misc]  # dspy ships no type information
    """Select which of a user's known attributes matter for answering the user's prompt.

    List the numbers of the attributes that would change what a good answer to the prompt
    should be. Select only attributes a good answer should actually take into account;
    the list may be empty.
    """

    prompt: str = dspy.InputField(desc="The user's request.")
    attributes: str = dspy.InputField(desc="Numbered attributes, one per line.")
    reason: str = dspy.OutputField(desc="One or two sentences of reasoning.")
    relevant: list[int] = dspy.OutputField(desc="Numbers of the relevant attributes, e.g. [2, 5]; [] if none.")



@register_judge
class RelevancePerAttribute(Judge):
    """One call per attribute: YES/NO + reason."""

    name = "relevance-per-attribute"
    version = 1
    item_kind = "relevance"
    categories = YES_NO
    stage = "relevance"
    signature = AttributeRelevance
    answer_field = "answer"

    def parse(self, outputs: Mapping[str, Any], task: JudgeTask) -> dict[str, Verdict]:
        """Read ``answer`` as yes/no; anything else is an unparseable failure."""
        (target,) = task.targets
        answer = outputs.get("answer")
        label = normalise_choice(answer, _YES_NO)
        reason = outputs.get("reason")
        if label is None:
            return {target: Verdict(None, reason, f"unparseable: answer {str(answer)[:40]!r} is not YES or NO")}
        return {target: Verdict(label, reason)}

    def response_format(self) -> dict[str, Any]:
        """JSON schema forcing a reason and a YES/NO answer."""
        return json_schema_format({"reason": {"type": "string"},
                                   "answer": {"type": "string", "enum": ["YES", "NO"]}})


@register_judge
class RelevanceBatched(Judge):
    """One call per (user, prompt): the relevant subset of the numbered attributes."""

    name = "relevance-batched"
    version = 1
    item_kind = "relevance"
    categories = YES_NO
    stage = "relevance"
    signature = RelevantSubset

    def parse(self, outputs: Mapping[str, Any], task: JudgeTask) -> dict[str, Verdict]:
        """Every listed number is "yes", every other attribute "no"; an out-of-range number fails the call."""
        chosen = outputs.get("relevant")
        reason = outputs.get("reason")
        n = len(task.targets)
        if not isinstance(chosen, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in chosen):
            return _all_failed(task, reason, f"unparseable: relevant={str(chosen)[:40]!r} is not a list of numbers")
        bad = [c for c in chosen if not 1 <= c <= n]
        if bad:
            return _all_failed(task, reason, f"invalid: attribute number(s) {bad} not in 1..{n}")
        picked = set(chosen)
        return {t: Verdict("yes" if i in picked else "no", reason) for i, t in enumerate(task.targets, start=1)}

    def response_format(self) -> dict[str, Any]:
        """JSON schema forcing a reason and a list of integers."""
        return json_schema_format({"reason": {"type": "string"},
                                   "relevant": {"type": "array", "items": {"type": "integer"}}})


def _all_failed(task: JudgeTask, reason: object, error: str) -> dict[str, Verdict]:
    return {t: Verdict(None, str(reason) if reason is not None else None, error) for t in task.targets}


def relevance_tasks(judge: Judge, items: pd.DataFrame) -> list[JudgeTask]:
    """Build the judge's calls from relevance items joined with their prompt text.

    Args:
        judge: A stage-2 judge.
        items: Columns item_id, user_id, prompt_index, attribute, prompt_text, ordered as
            they should be judged (the order fixes what ``--limit`` keeps).

    Returns:
        One task per item (per-attribute) or per (user, prompt) (batched).
    """
    if isinstance(judge, RelevanceBatched):
        tasks = []
        for (user, prompt_index), group in items.groupby(["user_id", "prompt_index"], sort=False):
            numbered = "\n".join(f"{i}. {a}" for i, a in enumerate(group["attribute"], start=1))
            tasks.append(JudgeTask(key=f"{user}/{prompt_index}", targets=tuple(group["item_id"]),
                                   inputs={"prompt": str(group["prompt_text"].iloc[0]), "attributes": numbered}))
        return tasks
    return [JudgeTask(key=str(r.item_id), targets=(str(r.item_id),),
                      inputs={"prompt": str(r.prompt_text), "attribute": str(r.attribute)})
            for r in items.itertuples(index=False)]
