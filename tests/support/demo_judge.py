"""A loopback OpenAI-compatible server whose answers depend on the demonstrations and instructions in the prompt.

A stand-in for an LLM judge that *learns from its prompt*, so that tests of ``personagap optimize`` can fail:

* It reads a DSPy prompt the way a model sees it: the system message (instructions, output fields), the
  demonstrations (earlier user/assistant turns, with their labels) and the current inputs.
* Every item it knows has a hidden *belief* score: the human label plus seeded noise (``belief()``), the
  way a model's internal sense of relevance is correlated with, but not equal to, the human's.
* **No demonstrations**: it answers from a biased default, YES to everything -- unless the instructions
  contain :data:`STRICT_INSTRUCTION`, in which case it answers YES only above a fixed belief threshold.
* **With demonstrations**: it copies the label of the demonstration whose belief is nearest to the current
  item's (1-nearest-neighbour in belief space). Demos of both classes therefore calibrate it; demos with
  wrong labels mislead it; demos that are not in the prompt do nothing.
* Calls of any other signature (an optimiser's instruction proposals, say) get a well-formed answer;
  a field named like an instruction gets :data:`STRICT_INSTRUCTION` and :data:`PAIRWISE_INSTRUCTION` (each
  judge follows its own, so MIPRO can find the instruction either judge follows).

It also plays the **pairwise** judge (output field ``verdict``: A, B or tie), from ``preferences``: the
human's label of each pair in its canonical order (:func:`pair_keys`). It looks a pair up in either order, so
it knows which *answer* the user preferred, whichever position it is shown in. Its belief is +1 (the answer
shown first is preferred), -1 (the second) or 0 (tie), plus seeded noise that follows the answer, not the
position. **No demonstrations**: it names the answer shown first (pure position bias), unless the
instructions contain :data:`PAIRWISE_INSTRUCTION` (then it answers by its belief). **With demonstrations**:
it copies the verdict of the demo whose belief is nearest, as above. Pairs in ``unparseable`` are always
answered with the bare text ``[`` (what the PRISM release's judges wrote for some items), which no adapter
can split into fields: a failure, never a label.

The log (``server.log``) records, per request, the judge inputs asked about and the inputs of every
demonstration shown, so a test can check which items the optimiser ever sent.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.support.openai_server import Reply, ScriptedOpenAIServer

STRICT_INSTRUCTION = "Answer NO unless a good answer must be different because of it."
PAIRWISE_INSTRUCTION = "Judge the answers by the user's profile, never by the order they are shown in."
PAIRWISE_FIELD = "verdict"
PAIRWISE_LABELS = ("A", "B", "tie")
UNPARSEABLE_VERDICT = "["
_SECTION = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with|\Z)", re.DOTALL)
_OUTPUT_FIELDS = re.compile(r"Your output fields are:\n(.*?)(?:\n\nAll interactions|\Z)", re.DOTALL)
_FIELD_LINE = re.compile(r"^\d+\. `(\w+)` \(([^)]*)\)", re.MULTILINE)
_OBJECTIVE = re.compile(r"your objective is:(.*)\Z", re.DOTALL)
# The binary label fields of the judges this server plays, with the spelling of "yes"/"no" each expects.
LABEL_FIELDS: dict[str, tuple[str, str]] = {"answer": ("YES", "NO"), "uses_persona": ("yes", "no")}


def item_key(inputs: Mapping[str, str]) -> str:
    """The key of one judged item: its input fields (name -> text), order-free."""
    return json.dumps({k: str(v).strip() for k, v in sorted(inputs.items())}, ensure_ascii=False)


def pair_keys(inputs: Mapping[str, str]) -> tuple[str, str]:
    """The item key of a pairwise task as shown, and of the same pair with its answers the other way round."""
    flipped = {**inputs, "answer_a": inputs.get("answer_b", ""), "answer_b": inputs.get("answer_a", "")}
    return item_key(inputs), item_key(flipped)


def flip(label: str | None) -> str | None:
    """A pairwise verdict about the other order (A <-> B; tie and None unchanged)."""
    return {"A": "B", "B": "A"}.get(label or "", label)


def belief(key: str, human_yes: bool, noise: float) -> float:
    """The server's hidden belief that an item is a "yes": the human label plus seeded Gaussian noise."""
    import random

    rng = random.Random(hashlib.sha256(key.encode("utf-8")).hexdigest())
    return (1.0 if human_yes else 0.0) + rng.gauss(0.0, noise)


@dataclass
class Seen:
    """What one request showed the model."""

    label_field: str | None
    inputs: dict[str, str]
    demos: list[dict[str, str]]
    demo_labels: list[str | None]
    instructions: str
    answer: str | None = None


@dataclass
class DemoSensitiveModel:
    """The answering rule (see the module docstring).

    Args:
        oracle: item_key(inputs) -> True if the human said yes. Items it does not know get a belief of 0.5.
        noise: Standard deviation of the belief noise (smaller = a better latent judge).
        strict_threshold: Belief above which it says yes when the instructions ask it to be strict.
    """

    oracle: dict[str, bool]
    noise: float = 0.35
    strict_threshold: float = 0.5
    preferences: dict[str, str] = field(default_factory=dict)
    """Pairwise: item_key(canonical inputs) -> the human's label (A, B or tie) in that order."""
    unparseable: frozenset[str] = frozenset()
    """Pairwise: canonical keys of pairs always answered with the bare text :data:`UNPARSEABLE_VERDICT`."""
    log: list[Seen] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def belief_of(self, inputs: Mapping[str, str]) -> float:
        key = item_key(inputs)
        if key not in self.oracle:
            return 0.5
        return belief(key, self.oracle[key], self.noise)

    def shown_preference(self, inputs: Mapping[str, str]) -> tuple[str | None, str | None]:
        """(the human's label in the order shown, the pair's canonical key); (None, None) for an unknown pair."""
        shown, flipped = pair_keys(inputs)
        if shown in self.preferences:
            return self.preferences[shown], shown
        if flipped in self.preferences:
            return flip(self.preferences[flipped]), flipped
        return None, None

    def pair_belief(self, inputs: Mapping[str, str]) -> float:
        """Belief that the answer shown first is preferred: +1 / 0 / -1 plus noise that moves with the answer."""
        label, key = self.shown_preference(inputs)
        if label is None or key is None:
            return 0.0
        noise = belief(key, False, self.noise)  # seeded by the canonical pair: the same noise in either order
        if key != pair_keys(inputs)[0]:
            noise = -noise
        return {"A": 1.0, "B": -1.0, "tie": 0.0}[label] + noise

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body.get("messages", [])
        system = next((str(m.get("content", "")) for m in messages if m.get("role") == "system"), "")
        turns = [m for m in messages if m.get("role") in ("user", "assistant")]
        outputs = _output_fields(system)
        instructions = _instructions(system)
        as_json = "Respond with a JSON object" in _text(turns[-1]) if turns else False
        current = _sections(_text(turns[-1])) if turns else {}
        demos, demo_labels = [], []
        label_field = next((f for f in outputs if f in LABEL_FIELDS or f == PAIRWISE_FIELD), None)
        for user, assistant in zip(turns[:-1:2], turns[1:-1:2], strict=False):
            demo_inputs = _sections(_text(user))
            demos.append(demo_inputs)
            demo_labels.append(_label(_fields_of(_text(assistant)), label_field))
        seen = Seen(label_field, current, demos, demo_labels, instructions)
        if label_field is not None:
            values = {name: "One sentence of reasoning." for name in outputs}
            values[label_field] = self._decide(label_field, current, demos, demo_labels, instructions)
            seen.answer = values[label_field]
        else:
            values = {name: _filler(name, kind) for name, kind in outputs.items()}
        with self._lock:
            self.log.append(seen)
        if seen.answer == UNPARSEABLE_VERDICT:  # the whole answer, not a field: no adapter can split it
            return Reply(text=UNPARSEABLE_VERDICT, prompt_tokens=sum(len(_text(m)) // 4 for m in turns),
                         completion_tokens=1)
        return Reply(text=_render(values, outputs, as_json), prompt_tokens=sum(len(_text(m)) // 4 for m in turns),
                     completion_tokens=12)

    def _decide(self, label_field: str, inputs: dict[str, str], demos: list[dict[str, str]],
                demo_labels: list[str | None], instructions: str) -> str:
        if label_field == PAIRWISE_FIELD:
            return self._verdict(inputs, demos, demo_labels, instructions)
        yes, no = LABEL_FIELDS[label_field]
        mine = self.belief_of(inputs)
        labelled = [(abs(self.belief_of(d) - mine), lab) for d, lab in zip(demos, demo_labels, strict=True)
                    if lab is not None]
        if labelled:
            return yes if min(labelled, key=lambda t: t[0])[1] == "yes" else no
        if STRICT_INSTRUCTION.lower() in instructions.lower():
            return yes if mine > self.strict_threshold else no
        return yes

    def _verdict(self, inputs: dict[str, str], demos: list[dict[str, str]], demo_labels: list[str | None],
                 instructions: str) -> str:
        if self.shown_preference(inputs)[1] in self.unparseable:
            return UNPARSEABLE_VERDICT
        mine = self.pair_belief(inputs)
        labelled = [(abs(self.pair_belief(d) - mine), lab) for d, lab in zip(demos, demo_labels, strict=True)
                    if lab is not None]
        if labelled:
            return str(min(labelled, key=lambda t: t[0])[1])
        if PAIRWISE_INSTRUCTION.lower() in instructions.lower():
            return "A" if mine > 0.5 else "B" if mine < -0.5 else "tie"
        return "A"  # position bias: the answer shown first


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


def _sections(text: str) -> dict[str, str]:
    return {name: value.strip() for name, value in _SECTION.findall(text)}


def _fields_of(text: str) -> dict[str, Any]:
    """An assistant turn's fields: a JSON object (JSON adapter) or ``[[ ## name ## ]]`` sections (chat)."""
    try:
        parsed = json.loads(text)
        if isinstance(parsed, dict):
            return parsed
    except ValueError:
        pass
    return _sections(text)


def _label(fields: Mapping[str, Any], label_field: str | None) -> str | None:
    if label_field is None:
        return None
    if label_field == PAIRWISE_FIELD:
        verdict = str(fields.get(label_field, "")).strip()
        return verdict if verdict in PAIRWISE_LABELS else None
    value = str(fields.get(label_field, "")).strip().lower()
    return value if value in ("yes", "no") else None  # "Not supplied ..." is no label


def _output_fields(system: str) -> dict[str, str]:
    found = _OUTPUT_FIELDS.search(system)
    return dict(_FIELD_LINE.findall(found.group(1))) if found else {}


def _instructions(system: str) -> str:
    found = _OBJECTIVE.search(system)
    return " ".join(found.group(1).split()) if found else ""


def _filler(name: str, kind: str) -> Any:
    if "instruction" in name:
        return f"{STRICT_INSTRUCTION} {PAIRWISE_INSTRUCTION}"
    if kind.startswith("list"):
        return []
    if kind == "bool":
        return False
    if kind in ("int", "float"):
        return 0
    return f"A {name.replace('_', ' ')}."


def _render(values: dict[str, Any], outputs: Mapping[str, str], as_json: bool) -> str:
    if as_json:
        return json.dumps(values)
    parts = [f"[[ ## {name} ## ]]\n{values[name] if not isinstance(values[name], list) else json.dumps(values[name])}"
             for name in outputs]
    return "\n\n".join(parts + ["[[ ## completed ## ]]"])


class DemoSensitiveServer(ScriptedOpenAIServer):
    """:class:`ScriptedOpenAIServer` answering with a :class:`DemoSensitiveModel`; ``log`` is its record."""

    def __init__(self, model: DemoSensitiveModel) -> None:
        super().__init__(model, model="demo-sensitive")
        self.model_rule = model

    @property
    def log(self) -> list[Seen]:
        return self.model_rule.log
