"""LLM judges for stage 3 (response judgment), and the tasks they run on.

``pairwise`` asks which of two answers a user with a given profile (or no profile)
would prefer: A, B or tie. To measure and cancel position bias, each item is shown
in an order drawn from a hash of (seed, item id); the draw is recorded in the task's
``meta['swapped']`` (the runner copies it onto the label) and undone by the parser,
so a stored label always refers to the item's canonical A/B. With ``both_orders`` an
item is also judged in the opposite order (condition suffix ``+reversed``), which
gives swap consistency.

``persona-use`` asks whether a dialogue response uses the speaker's persona facts
(the USR "Uses Knowledge" question).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import dspy
import pandas as pd

from personagap.judges.base import Judge, JudgeTask, Verdict, json_schema_format, normalise_choice, register_judge
from personagap.vocabulary import PAIRWISE_LABELS, RELEVANCE_LABELS, YES_NO
from personagap.vocabulary import REVERSED as REVERSED

NO_PROFILE = "none (nothing is known about this user)"
_YES_NO = {"yes": "yes", "no": "no", "y": "yes", "n": "no", "true": "yes", "false": "no"}
_PAIR_PREFIX = re.compile(r"^(?:assistant|answer|response|option)\s+", re.IGNORECASE)
_PAIR = {"a": "A", "b": "B", "tie": "tie", "c": "tie", "equal": "tie", "draw": "tie", "neither": "tie"}


class PairwisePreference(dspy.Signature):  # type: ignore[misc]  # dspy ships no type information
    """Decide which of two answers this particular user would prefer.

    Two AI assistants answered a user's question. Using what is known about the user, answer
    "A", "B", or "tie" only if neither answer is preferable for this user.
    """

    profile: str = dspy.InputField(desc="What is known about the user, or 'none'.")
    question: str = dspy.InputField(desc="The user's question.")
    answer_a: str = dspy.InputField(desc="Assistant A's answer.")
    answer_b: str = dspy.InputField(desc="Assistant B's answer.")
    reason: str = dspy.OutputField(desc="One or two sentences of reasoning.")
    verdict: str = dspy.OutputField(desc="Exactly A, B or tie.")


class PersonaUse(dspy.Signature):  # type: ignore[misc]  # dspy ships no type information
    """Decide whether a dialogue response uses the speaker's persona facts.

    A dialogue agent was given persona facts about itself. Answer yes if its response below
    uses any of these facts (states, refers to, or clearly relies on one), otherwise no.
    """

    persona_facts: str = dspy.InputField(desc="The agent's persona facts, one per line.")
    context: str = dspy.InputField(desc="The dialogue so far, one turn per line.")
    response: str = dspy.InputField(desc="The agent's next turn.")
    reason: str = dspy.OutputField(desc="One sentence of reasoning.")
    uses_persona: str = dspy.OutputField(desc="Exactly yes or no.")



def is_swapped(item_id: str, seed: int) -> bool:
    """Whether an item is shown with its answers swapped (seeded, deterministic; STYLE.md §6)."""
    return hashlib.sha256(f"{seed}:{item_id}".encode()).digest()[0] % 2 == 1


def parse_pairwise_verdict(text: object) -> str | None:
    """Read a pairwise verdict as shown to the model: 'A', 'B' or 'tie'; None when it is anything else.

    Accepts the usual spellings ("A", "[[B]]", "Assistant A", "Tie", "C" for tie) and
    nothing looser: an answer that names both or neither is unparseable, not a guess.

    Pure: test it with plain strings.
    """
    if not isinstance(text, str):
        return None
    key = text.strip().strip(".!\"'*`").strip()
    key = key.removeprefix("[[").removesuffix("]]").strip()
    key = _PAIR_PREFIX.sub("", key).strip()
    return normalise_choice(key, _PAIR)


def unswap(label: str, swapped: bool) -> str:
    """Map a verdict about the shown order back to the item's canonical order."""
    if not swapped or label == "tie":
        return label
    return "B" if label == "A" else "A"


@register_judge
class PairwiseJudge(Judge):
    """Which answer would this user prefer: A, B or tie (+ reason)."""

    name = "pairwise"
    version = 1
    item_kind = "pairwise"
    categories = PAIRWISE_LABELS
    stage = "response"
    signature = PairwisePreference
    answer_field = "verdict"

    def parse(self, outputs: Mapping[str, Any], task: JudgeTask) -> dict[str, Verdict]:
        """Read ``verdict`` and undo the task's position swap; anything unreadable is a failure."""
        (target,) = task.targets
        raw = outputs.get("verdict")
        reason = outputs.get("reason")
        reason = str(reason) if reason is not None else None
        shown = parse_pairwise_verdict(raw)
        if shown is None:
            return {target: Verdict(None, reason, f"unparseable: verdict {str(raw)[:40]!r} is not A, B or tie")}
        return {target: Verdict(unswap(shown, bool(task.meta.get("swapped", False))), reason)}

    def response_format(self) -> dict[str, Any]:
        """JSON schema forcing a reason and a verdict in A/B/tie."""
        return json_schema_format({"reason": {"type": "string"},
                                   "verdict": {"type": "string", "enum": list(PAIRWISE_LABELS)}})


@register_judge
class PersonaUseJudge(Judge):
    """Does the response use the persona facts: yes/no (+ reason)."""

    name = "persona-use"
    version = 1
    item_kind = "single"
    categories = YES_NO
    stage = "response"
    signature = PersonaUse
    answer_field = "uses_persona"

    def parse(self, outputs: Mapping[str, Any], task: JudgeTask) -> dict[str, Verdict]:
        """Read ``uses_persona`` as yes/no; anything else is a failure."""
        (target,) = task.targets
        raw = outputs.get("uses_persona")
        reason = outputs.get("reason")
        reason = str(reason) if reason is not None else None
        label = normalise_choice(raw, _YES_NO)
        if label is None:
            return {target: Verdict(None, reason, f"unparseable: uses_persona {str(raw)[:40]!r} is not yes or no")}
        return {target: Verdict(label, reason)}

    def response_format(self) -> dict[str, Any]:
        """JSON schema forcing a reason and yes/no."""
        return json_schema_format({"reason": {"type": "string"},
                                   "uses_persona": {"type": "string", "enum": list(RELEVANCE_LABELS)}})


def pairwise_tasks(items: pd.DataFrame, *, profile: bool, seed: int = 0,
                   both_orders: bool = False) -> list[JudgeTask]:
    """Build ``pairwise`` calls from pairwise items.

    Args:
        items: Columns item_id, question, answer_a, answer_b, profile (text or None), in
            the order to judge them (the order fixes what ``--limit`` keeps).
        profile: Show the user's profile (condition 'profile') or not ('no-profile').
        seed: Seed of the per-item position swap (recorded on every label).
        both_orders: Also judge every item in the opposite order (condition suffix '+reversed').

    Returns:
        One task per item (two with ``both_orders``).
    """
    condition = "profile" if profile else "no-profile"
    tasks = []
    for r in items.itertuples(index=False):
        iid = str(r.item_id)
        shown_profile = str(r.profile) if profile and isinstance(r.profile, str) and r.profile.strip() else NO_PROFILE
        if profile and shown_profile == NO_PROFILE:
            continue  # an item without a profile cannot be judged "with profile"
        first = is_swapped(iid, seed)
        orders = [(first, "")] + ([(not first, REVERSED)] if both_orders else [])
        for swapped, suffix in orders:
            a, b = (str(r.answer_b), str(r.answer_a)) if swapped else (str(r.answer_a), str(r.answer_b))
            tasks.append(JudgeTask(
                key=iid + suffix, targets=(iid,), condition=condition + suffix,
                inputs={"profile": shown_profile, "question": str(r.question), "answer_a": a, "answer_b": b},
                meta={"swapped": swapped, "seed": seed},
            ))
    return tasks


def persona_use_tasks(items: pd.DataFrame) -> list[JudgeTask]:
    """Build ``persona-use`` calls.

    Args:
        items: Columns item_id, facts (list of sentences), context, response.

    Returns:
        One task per item, condition '' (the condition of the human 'Uses Knowledge' labels).
    """
    return [JudgeTask(key=str(r.item_id), targets=(str(r.item_id),), inputs={
        "persona_facts": "\n".join(f"- {f}" for f in r.facts), "context": str(r.context).strip(),
        "response": str(r.response).strip()}) for r in items.itertuples(index=False)]
