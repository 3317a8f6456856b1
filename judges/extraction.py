"""LLM judges for stage 1 (attribute extraction): ``extract``, ``verify`` and ``match``.

How extraction outputs become items (the design)
------------------------------------------------
The runner stores exactly one :class:`~personagap.records.Label` per target item,
so the extractor is given a target of its own: a **chunk item** (``payload.kind ==
'chunk'``), one per chunk of a user's history. :func:`chunk_turns` cuts a history
into chunks (whole turns, at most ``max_chars`` characters each) and
:func:`extraction_tasks` returns the tasks *and* the chunk items, which the caller
writes before running the judge. The extractor's :class:`Verdict` for a chunk has as
``label`` the canonical JSON of the attribute list it found, e.g.
``[{"attribute": "...", "confidence": 0.8, "turn_ids": ["s0t3"]}]`` (``"[]"`` = the
chunk states nothing about the user). A parse failure, or an attribute citing a turn
id that is not in the chunk, makes the whole chunk a failure (``label=None``,
``error='unparseable: ...'`` / ``'invalid: ...'``): we never keep half an answer.

After a run, :func:`extracted_items` (pure) reads the stored chunk labels, merges the
chunks of each user with :func:`merge_attributes` (pure: identical attributes after
normalisation are merged, their turn ids united, the highest confidence kept) and
returns **extracted-attribute items** (``payload.kind == 'extracted'``) keyed by
(extractor rater, unit, normalised attribute text). A user whose chunks did not all
parse gets no extracted items (their failure stays visible on the chunk labels):
precision/recall over half a history would be biased. Those items are what the
``verify`` judge, human verdicts and the matchers label. ``match`` judges one
(extracted attribute, gold preference) pair, a ``payload.kind == 'match'`` item.

Stage-1 item kinds, all with ``stage='extraction'`` and ``payload.unit`` naming the
history they belong to (LAPS: ``topic/worker_id``):
``conversation`` (one session's turns), ``gold`` (a preference the human stated),
``chunk`` (extractor input), ``extracted`` (an attribute), ``match`` (a pair).
Items with no ``kind`` (the Re-Centering pilot) are extracted attributes whose text
was not released.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dspy

from personagap.analysis.extraction import ExtractedAttribute, attributes_label
from personagap.judges.base import Judge, JudgeTask, Verdict, json_schema_format, normalise_choice, register_judge
from personagap.records import Item, Stage, item_id

STAGE: Stage = "extraction"
DEFAULT_MAX_CHARS = 6000
_VERIFY = {"ok": "ok", "bad": "bad", "unsure": "unsure", "supported": "ok", "unsupported": "bad"}
_MATCH = {"same": "same", "different": "different", "yes": "same", "no": "different"}


# --------------------------------------------------------------------------- records

@dataclass(frozen=True)
class Turn:
    """One turn of a conversation, with the id attributes cite."""

    turn_id: str
    role: str
    text: str


# --------------------------------------------------------------------------- signatures

class ExtractAttributes(dspy.Signature):  # type: ignore[misc]  # dspy ships no type information
    """List what a user's conversations with an assistant show about the user.

    Each turn starts with its id in brackets. List what the conversation shows about the USER: their
    preferences, constraints, circumstances and dislikes.
    State only what the user's own turns support; do not generalise beyond the evidence. For each attribute give
    the ids of the turns it rests on and your confidence between 0 and 1. Return [] if the user reveals nothing.
    """

    conversation: str = dspy.InputField(desc="Turns, one per line: '[turn_id] Role: text'.")
    attributes: list[dict[str, Any]] = dspy.OutputField(
        desc='JSON list of {"attribute": "The user ...", "turn_ids": ["<id>", ...], "confidence": 0.0-1.0}.')


class VerifyAttribute(dspy.Signature):  # type: ignore[misc]  # dspy ships no type information
    """Check one attribute someone inferred about a user against the user's conversations.

    Answer OK if the user's turns support the attribute as stated; BAD if they do not support it or the
    attribute is broader than the evidence (over-generalised); UNSURE if you cannot tell.
    """

    conversation: str = dspy.InputField(desc="Turns, one per line: '[turn_id] Role: text'.")
    attribute: str = dspy.InputField(desc="The inferred attribute.")
    reason: str = dspy.OutputField(desc="One sentence citing the evidence.")
    answer: str = dspy.OutputField(desc="Exactly OK, BAD or UNSURE.")


class MatchPreference(dspy.Signature):  # type: ignore[misc]  # dspy ships no type information
    """Say whether an extracted attribute expresses the same user preference as a reference preference.

    Same means same category and value; wording may differ. Answer SAME or DIFFERENT.
    """

    attribute: str = dspy.InputField(desc="An attribute an extractor inferred.")
    preference: str = dspy.InputField(desc="A preference the user stated, as 'category: value'.")
    reason: str = dspy.OutputField(desc="One sentence.")
    answer: str = dspy.OutputField(desc="Exactly SAME or DIFFERENT.")



# --------------------------------------------------------------------------- pure parsers

def parse_attributes(value: object, valid_turn_ids: Iterable[str]) -> list[ExtractedAttribute] | str:
    """Validate an extractor's ``attributes`` field.

    Pure: accepts the adapter's parsed value (a list of dicts) or the raw JSON text.

    Args:
        value: A list of ``{"attribute", "turn_ids", "confidence"}`` objects, or its JSON text.
        valid_turn_ids: The turn ids of the chunk the extractor read.

    Returns:
        The attributes, or an error string starting with ``unparseable:`` (not the
        expected shape) or ``invalid:`` (well-formed, but citing turns that do not exist,
        a confidence outside [0, 1], an empty attribute).
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            return f"unparseable: attributes are not JSON ({exc.msg})"
    if not isinstance(value, list):
        return f"unparseable: attributes is a {type(value).__name__}, not a list"
    valid = {str(t) for t in valid_turn_ids}
    out: list[ExtractedAttribute] = []
    for i, obj in enumerate(value):
        if not isinstance(obj, Mapping):
            return f"unparseable: attributes[{i}] is a {type(obj).__name__}, not an object"
        text = obj.get("attribute")
        if not isinstance(text, str):
            return f"unparseable: attributes[{i}].attribute is missing or not text"
        if not text.strip():
            return f"invalid: attributes[{i}].attribute is empty"
        turns = obj.get("turn_ids", [])
        if isinstance(turns, str | int) and not isinstance(turns, bool):
            turns = [turns]
        if not isinstance(turns, list) or not all(isinstance(t, str | int) and not isinstance(t, bool) for t in turns):
            return f"unparseable: attributes[{i}].turn_ids is not a list of ids"
        ids = tuple(dict.fromkeys(str(t).strip() for t in turns))
        unknown = [t for t in ids if t not in valid]
        if unknown:
            return f"invalid: attributes[{i}] cites turn id(s) {unknown[:5]} not in the conversation"
        if not ids:
            return f"invalid: attributes[{i}] cites no turn"
        conf = obj.get("confidence")
        if conf is not None:
            if isinstance(conf, bool) or not isinstance(conf, int | float | str):
                return f"unparseable: attributes[{i}].confidence is not a number"
            try:
                conf = float(conf)
            except ValueError:
                return f"unparseable: attributes[{i}].confidence {str(conf)[:20]!r} is not a number"
            if not 0.0 <= conf <= 1.0:
                return f"invalid: attributes[{i}].confidence {conf} is outside [0, 1]"
        out.append(ExtractedAttribute(text.strip(), ids, conf))
    return out


def parse_choice(answer: object, choices: Mapping[str, str], expected: str) -> tuple[str | None, str | None]:
    """Read a one-word answer; return ``(label, None)`` or ``(None, 'unparseable: ...')``."""
    label = normalise_choice(answer, choices)
    if label is None:
        return None, f"unparseable: answer {str(answer)[:40]!r} is not {expected}"
    return label, None


# --------------------------------------------------------------------------- judges

@register_judge
class Extract(Judge):
    """One call per chunk of a user's history: the attributes it shows, with cited turns and confidence."""

    name = "extract"
    version = 1
    stage = "extraction"
    signature = ExtractAttributes

    def parse(self, outputs: Mapping[str, Any], task: JudgeTask) -> dict[str, Verdict]:
        """The chunk's verdict: the canonical attribute JSON, or a failure (bad shape, unknown turn ids)."""
        (target,) = task.targets
        parsed = parse_attributes(outputs.get("attributes"), task.meta.get("turn_ids", ()))
        if isinstance(parsed, str):
            return {target: Verdict(None, None, parsed)}
        return {target: Verdict(attributes_label(parsed), None)}

    def response_format(self) -> dict[str, Any]:
        """JSON schema for a list of attributes."""
        properties = {"attribute": {"type": "string"}, "turn_ids": {"type": "array", "items": {"type": "string"}},
                      "confidence": {"type": "number"}}
        item = {"type": "object", "additionalProperties": False, "required": list(properties), "properties": properties}
        return json_schema_format({"attributes": {"type": "array", "items": item}})


@register_judge
class Verify(Judge):
    """One call per extracted attribute: is it supported by the conversation (ok | bad | unsure)?"""

    name = "verify"
    version = 1
    item_kind = "verification"
    categories = ("bad", "ok", "unsure")
    stage = "extraction"
    signature = VerifyAttribute
    answer_field = "answer"

    def parse(self, outputs: Mapping[str, Any], task: JudgeTask) -> dict[str, Verdict]:
        """Read OK/BAD/UNSURE; anything else is an unparseable failure."""
        (target,) = task.targets
        reason = outputs.get("reason")
        label, error = parse_choice(outputs.get("answer"), _VERIFY, "OK, BAD or UNSURE")
        return {target: Verdict(label, None if reason is None else str(reason), error)}

    def response_format(self) -> dict[str, Any]:
        """JSON schema forcing a reason and OK/BAD/UNSURE."""
        return json_schema_format({"reason": {"type": "string"},
                                   "answer": {"type": "string", "enum": ["OK", "BAD", "UNSURE"]}})


@register_judge
class Match(Judge):
    """One call per (extracted attribute, gold preference) pair: same or different preference?"""

    name = "match"
    version = 1
    stage = "extraction"
    signature = MatchPreference
    answer_field = "answer"

    def parse(self, outputs: Mapping[str, Any], task: JudgeTask) -> dict[str, Verdict]:
        """Read SAME/DIFFERENT; anything else is an unparseable failure."""
        (target,) = task.targets
        reason = outputs.get("reason")
        label, error = parse_choice(outputs.get("answer"), _MATCH, "SAME or DIFFERENT")
        return {target: Verdict(label, None if reason is None else str(reason), error)}

    def response_format(self) -> dict[str, Any]:
        """JSON schema forcing a reason and SAME/DIFFERENT."""
        return json_schema_format({"reason": {"type": "string"},
                                   "answer": {"type": "string", "enum": ["SAME", "DIFFERENT"]}})


# --------------------------------------------------------------------------- chunking and tasks

def format_turns(turns: Sequence[Turn]) -> str:
    """Render turns one per line as ``[id] Role: text`` (newlines inside a message become spaces)."""
    return "\n".join(f"[{t.turn_id}] {t.role}: {' '.join(t.text.split())}" for t in turns)


def chunk_turns(turns: Sequence[Turn], max_chars: int = DEFAULT_MAX_CHARS) -> list[list[Turn]]:
    """Cut a history into consecutive chunks of whole turns, each at most ``max_chars`` when rendered.

    A single turn longer than ``max_chars`` forms a chunk of its own (a turn is never split:
    attributes cite whole turns).

    Args:
        turns: The history in order.
        max_chars: Budget per chunk, counted on :func:`format_turns` output.

    Returns:
        The chunks in order; their concatenation is ``turns``.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be positive")
    chunks: list[list[Turn]] = []
    current: list[Turn] = []
    size = 0
    for t in turns:
        n = len(format_turns([t])) + (1 if current else 0)
        if current and size + n > max_chars:
            chunks.append(current)
            current, size = [], 0
            n = len(format_turns([t]))
        current.append(t)
        size += n
    if current:
        chunks.append(current)
    return chunks


@dataclass(frozen=True)
class Unit:
    """One user's history to extract from (LAPS: one worker's sessions on one topic)."""

    dataset: str
    unit: str
    user_id: str
    turns: tuple[Turn, ...]


def chunk_item(dataset: str, unit: str, user_id: str, index: int, turns: Sequence[Turn], max_chars: int) -> Item:
    """The item an extractor's answer on one chunk is stored against."""
    ids = [t.turn_id for t in turns]
    iid = item_id(dataset, STAGE, "chunk", unit, max_chars, index)
    return Item(item_id=iid, dataset=dataset, stage=STAGE, user_id=user_id, position=index,
                payload={"kind": "chunk", "unit": unit, "chunk": index, "max_chars": max_chars, "turn_ids": ids})


def extraction_tasks(units: Sequence[Unit], max_chars: int = DEFAULT_MAX_CHARS) -> tuple[list[JudgeTask], list[Item]]:
    """Build the extractor's calls: one per chunk of each unit, plus the chunk items to store first.

    Args:
        units: Histories, in the order they should be judged (``--limit`` keeps the first calls).
        max_chars: Chunk budget (part of the chunk item id: a new budget is a new set of items).

    Returns:
        ``(tasks, chunk_items)``.
    """
    tasks, items = [], []
    for u in units:
        for i, chunk in enumerate(chunk_turns(u.turns, max_chars)):
            it = chunk_item(u.dataset, u.unit, u.user_id, i, chunk, max_chars)
            items.append(it)
            tasks.append(JudgeTask(key=it.item_id, targets=(it.item_id,), inputs={"conversation": format_turns(chunk)},
                                   meta={"turn_ids": [t.turn_id for t in chunk], "unit": u.unit, "chunk": i}))
    return tasks, items


def verify_tasks(attributes: Sequence[tuple[str, str, Sequence[Turn]]]) -> list[JudgeTask]:
    """One verify call per (extracted item id, attribute text, the unit's turns)."""
    return [JudgeTask(key=iid, targets=(iid,), inputs={"conversation": format_turns(turns), "attribute": text})
            for iid, text, turns in attributes]


def match_item(dataset: str, user_id: str, unit: str, extracted_id: str, gold_id: str) -> Item:
    """The item a matcher's same/different verdict on one (extracted, gold) pair is stored against."""
    return Item(item_id=item_id(dataset, STAGE, "match", extracted_id, gold_id), dataset=dataset, stage=STAGE,
                user_id=user_id, payload={"kind": "match", "unit": unit, "extracted": extracted_id, "gold": gold_id})


def match_tasks(pairs: Sequence[tuple[Item, str, str]]) -> list[JudgeTask]:
    """One match call per (match item, attribute text, 'category: value' of the gold preference)."""
    return [JudgeTask(key=it.item_id, targets=(it.item_id,), inputs={"attribute": attr, "preference": gold})
            for it, attr, gold in pairs]
